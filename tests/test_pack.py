"""Augmented GGUF: base bytes untouched, maps read back exactly, in the right orientation."""

import os

import gguf
import numpy as np
import pytest

from ridgefill import format as fmt
from ridgefill.format import keys
from ridgefill.format.gguf_io import GGUFError, open_gguf
from ridgefill.fit.ridge import LayerFit, Maps
from ridgefill.fit.stats import Provenance

pytestmark = pytest.mark.slow

SPLIT = 26  # small map set (layers 27..29) keeps the file writes quick


def _maps(identity, seed=0):
    rng = np.random.default_rng(seed)
    layers = list(range(SPLIT + 1, identity.n_layer))
    d = identity.n_embd
    w = rng.normal(size=(len(layers), d, d)).astype(np.float32)
    w[:, 0, 1], w[:, 1, 0] = 5.0, -5.0  # plainly not symmetric
    b = rng.normal(size=(len(layers), d)).astype(np.float32)
    fits = [LayerFit(l, 0.1 * l, 1e-3, 0.9, 0.5, 0.3, 0.7) for l in layers]
    return Maps(SPLIT, layers, w, b, fits)


@pytest.fixture(scope="module")
def identity(smollm2_path):
    return fmt.identity_of(smollm2_path)


@pytest.fixture(scope="module")
def packed(smollm2_path, identity, tmp_path_factory):
    maps = _maps(identity)
    out = tmp_path_factory.mktemp("pack") / "aug.gguf"
    prov = Provenance(documents=["a", "b"], n_tokens=1234, corpus_hash="c" * 64, sinks=4)
    fmt.pack(smollm2_path, maps, identity, prov, out, map_type="f32", defaults=fmt.Defaults(4, 512))
    return out, maps


def test_base_tensors_and_keys_are_byte_identical(smollm2_path, packed):
    out, _ = packed
    base, aug = open_gguf(smollm2_path), open_gguf(out)
    aug_t = {t.name: t for t in aug.tensors}
    for t in base.tensors:
        a = aug_t[t.name]
        assert a.tensor_type == t.tensor_type and list(a.shape) == list(t.shape)
        assert a.data.tobytes() == t.data.tobytes(), t.name
    for name, f in base.fields.items():
        if name.startswith("GGUF."):
            continue
        g = aug.fields[name]
        assert g.types == f.types, name
        assert [p.tobytes() for p in g.parts[g.data[0]:]] == [p.tobytes() for p in f.parts[f.data[0]:]] or g.contents() == f.contents(), name


def test_maps_read_back_exactly_in_pytorch_orientation(packed):
    out, maps = packed
    reader = open_gguf(out)
    tensors = {t.name: t for t in reader.tensors}
    d = maps.weights.shape[1]
    back = fmt.read_maps(out)
    assert sorted(back) == maps.layers
    for j, layer in enumerate(maps.layers):
        t = tensors[f"blk.{layer}.ridge_map.weight"]
        assert [int(x) for x in t.shape] == [d, d]
        w, b = back[layer]
        np.testing.assert_array_equal(w, maps.weights[j])
        np.testing.assert_array_equal(b, maps.biases[j])
        # ggml ne[0] is the input dimension: row r of the data is output r
        assert w[0, 1] == 5.0 and w[1, 0] == -5.0


def test_metadata_and_inspect(packed, identity):
    out, maps = packed
    info = fmt.inspect(out)
    meta = info["metadata"]
    assert meta["split_layer"] == SPLIT and meta["sink_rows"] == 4 and meta["tail_rows"] == 512
    assert meta["format_version"] == keys.FORMAT_VERSION
    assert meta["calib_tokens"] == 1234 and meta["base_sha256"] == identity.base_sha256
    assert [r["layer"] for r in info["layers"]] == maps.layers
    assert info["layers"][0]["lambda"] == pytest.approx(0.1 * (SPLIT + 1))
    assert info["map_bytes"] == len(maps.layers) * (identity.n_embd ** 2 + identity.n_embd) * 4


def test_f16_maps(smollm2_path, identity, tmp_path):
    maps = _maps(identity, seed=1)
    out = fmt.pack(smollm2_path, maps, identity, Provenance(), tmp_path / "h.gguf", map_type="f16")
    w, _ = fmt.read_maps(out)[maps.layers[0]]
    np.testing.assert_array_equal(w, maps.weights[0].astype(np.float16).astype(np.float32))
    assert fmt.inspect(out)["layers"][0]["type"] == "F16"


def test_refuses_to_overwrite_base(smollm2_path, identity):
    with pytest.raises(fmt.PackError, match="over its base"):
        fmt.pack(smollm2_path, _maps(identity), identity, Provenance(), smollm2_path)


def test_refuses_maps_of_another_model(smollm2_path, identity, tmp_path):
    other = type(identity)(identity.arch, identity.n_layer, identity.n_embd, "f" * 64)
    with pytest.raises(fmt.PackError, match="different model.*base_sha256"):
        fmt.pack(smollm2_path, _maps(identity), other, Provenance(), tmp_path / "x.gguf")
    assert not (tmp_path / "x.gguf").exists()


def test_refuses_to_augment_an_augmented_file(packed, tmp_path):
    out, maps = packed
    ident = fmt.identity_of(out)
    with pytest.raises(fmt.PackError, match="already carries"):
        fmt.pack(out, maps, ident, Provenance(), tmp_path / "y.gguf")


def test_interrupted_write_leaves_nothing(smollm2_path, identity, tmp_path, monkeypatch):
    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(gguf.GGUFWriter, "write_tensor_data", boom)
    with pytest.raises(KeyboardInterrupt):
        fmt.pack(smollm2_path, _maps(identity), identity, Provenance(), tmp_path / "z.gguf")
    assert list(tmp_path.iterdir()) == []


def test_truncated_gguf_is_a_clear_error(smollm2_path, tmp_path):
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(smollm2_path.read_bytes()[: 1 << 16])
    with pytest.raises(GGUFError, match="not a readable GGUF"):
        fmt.identity_of(cut)


def test_identity_follows_the_file(smollm2_path, tmp_path):
    """The base's hash is computed once per file state: rewriting the file in place gives the new hash."""
    copy = tmp_path / "base.gguf"
    data = bytearray(smollm2_path.read_bytes())
    copy.write_bytes(data)
    first = fmt.identity_of(copy)
    assert fmt.identity_of(copy) == first == fmt.identity_of(smollm2_path)
    data[-1] ^= 0xFF
    copy.write_bytes(data)
    st = copy.stat()
    os.utime(copy, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert fmt.identity_of(copy).base_sha256 != first.base_sha256


def test_inspect_plain_gguf_says_no_maps(smollm2_path):
    with pytest.raises(GGUFError, match="no RidgeFill maps"):
        fmt.inspect(smollm2_path)


def test_lagged_maps_pack_and_read_back(smollm2_path, identity, tmp_path):
    """Previous-row weights go to blk.{l}.ridge_map_prev.weight for the lagged layers only, in the same
    orientation; inspect marks those layers and counts their bytes; the maps file keeps them."""
    from ridgefill.fit import ridge

    maps = _maps(identity, seed=1)
    maps.fits[1].lag = True
    maps.weights_prev = np.zeros_like(maps.weights)
    maps.weights_prev[1] = maps.weights[0].T  # not symmetric: orientation shows
    out = fmt.pack(smollm2_path, maps, identity, Provenance(), tmp_path / "lag.gguf", map_type="f32")
    prev = fmt.read_prev_maps(out)
    assert sorted(prev) == [maps.layers[1]] and fmt.n_lagged(out) == 1
    np.testing.assert_array_equal(prev[maps.layers[1]], maps.weights_prev[1])
    info = fmt.inspect(out)
    assert [r["previous_row"] for r in info["layers"]] == [False, True, False] and info["loads"]
    d = identity.n_embd
    assert info["map_bytes"] == len(maps.layers) * (d * d + d) * 4 + d * d * 4
    saved = ridge.save_maps(tmp_path / "lag.npz", maps, identity, Provenance())
    back, _, _ = ridge.load_maps(saved)
    assert [f.lag for f in back.fits] == [False, True, False] and back.prev(0) is None
    np.testing.assert_array_equal(back.prev(1), maps.weights_prev[1])
    maps.weights_prev = maps.weights_prev[:, :, :-1]
    with pytest.raises(fmt.PackError, match="previous-row map shape"):
        fmt.pack(smollm2_path, maps, identity, Provenance(), tmp_path / "bad.gguf")


def test_window_maps_pack_and_read_back(smollm2_path, identity, tmp_path):
    """The window projection goes to the split layer, each window layer's map to blk.{l}.ridge_map_window.weight,
    in numpy orientation; inspect names the window; the maps file keeps it; bad shapes are refused."""
    from ridgefill.fit import ridge

    maps = _maps(identity, seed=1)
    d, rank = identity.n_embd, 8
    rng = np.random.default_rng(0)
    maps.window = rng.normal(size=(rank, 3 * d)).astype(np.float32)
    maps.weights_window = rng.normal(size=(len(maps.layers), d, rank)).astype(np.float32)
    maps.fits[2].window = True
    out = fmt.pack(smollm2_path, maps, identity, Provenance(), tmp_path / "win.gguf", map_type="f32")
    proj, per_layer = fmt.read_window(out)
    np.testing.assert_array_equal(proj, maps.window)
    assert sorted(per_layer) == [maps.layers[2]]
    np.testing.assert_array_equal(per_layer[maps.layers[2]], maps.weights_window[2])
    info = fmt.inspect(out)
    assert info["window"] == {"rows": 3, "rank": rank} and info["loads"]
    assert [r["window"] for r in info["layers"]] == [False, False, True]
    back, _, _ = ridge.load_maps(ridge.save_maps(tmp_path / "win.npz", maps, identity, Provenance()))
    assert back.window_rows == 3 and back.win(1) is None
    np.testing.assert_array_equal(back.win(2), maps.weights_window[2])
    for window, weights, says in [(maps.window[:, :-1], maps.weights_window, "window projection shape"),
                                  (np.zeros((rank, 17 * d), np.float32), maps.weights_window, "window projection shape"),
                                  (maps.window, maps.weights_window[:, :, :-1], "window map shape")]:
        bad = ridge.Maps(maps.split, maps.layers, maps.weights, maps.biases, maps.fits, window=window,
                         weights_window=weights)
        with pytest.raises(fmt.PackError, match=says):
            fmt.pack(smollm2_path, bad, identity, Provenance(), tmp_path / "bad.gguf")


def test_earlier_row_products_count_lagged_maps_and_the_window_share(smollm2_path, identity, tmp_path):
    """The cost model's `lagged`: one d x d product per lagged map, W*rank/d for the projection and rank/d per
    window map."""
    maps = _maps(identity, seed=1)
    d, rank = identity.n_embd, 16
    maps.fits[0].lag = True
    maps.weights_prev = np.zeros_like(maps.weights)
    maps.window = np.ones((rank, 4 * d), np.float32)
    maps.weights_window = np.ones((len(maps.layers), d, rank), np.float32)
    maps.fits[1].window = maps.fits[2].window = True
    out = fmt.pack(smollm2_path, maps, identity, Provenance(), tmp_path / "cost.gguf")
    assert fmt.earlier_row_products(out) == pytest.approx(1 + 4 * rank / d + 2 * rank / d)
