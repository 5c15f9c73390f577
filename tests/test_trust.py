"""What the fork refuses at load, and that filled K/V never reaches exact work (bindings).

The loader's checks are exercised one by one here with their messages; test_fuzz_gguf.py
throws a few hundred mutants at it. The poison tests write non-finite K/V on purpose with
maps that are finite (so they pass the load checks) but overflow float32 in the prediction.
"""

import numpy as np
import pytest

from conftest import random_maps_model
from ridgefill import format as fmt
from ridgefill.fit.ridge import LayerFit, Maps
from ridgefill.runtime import Model
from ridgefill.fit.stats import Provenance

pytestmark = pytest.mark.slow

SPLIT = 20
N_FILL, N_EXACT = 600, 300  # the exact prompt's attention window (512 cells) covers freed filled cells


@pytest.fixture(scope="module")
def prompts(smollm2, sample_text):
    toks = smollm2.tokenize(sample_text)
    return toks[:N_FILL], toks[N_FILL:N_FILL + N_EXACT]


@pytest.mark.parametrize("map_type,tol", [("f32", 1e-4), ("f16", 5e-3)])
def test_each_supported_map_type_runs_the_fill_path(smollm2_path, prompts, tmp_path, map_type, tol):
    """Captured inputs of filled layers = W h_s + b with W as stored (f32 or f16)."""
    model, _ = random_maps_model(smollm2_path, SPLIT, tmp_path / f"{map_type}.gguf", seed=2, map_type=map_type)
    stored = fmt.read_maps(model.path)
    late = [SPLIT + 1, model.n_layer - 1]
    ctx = model.context(n_ctx=1024, n_batch=N_FILL, n_ubatch=64, threads=2, capture=[SPLIT, *late])
    ctx.set_fill("ridge")
    res = ctx.prefill(prompts[0], sinks=64, tail=24)
    lo, hi = res.fill_range
    h_s = ctx.layer_input(SPLIT)[lo:hi].astype(np.float64)
    for il in late:
        w, b = stored[il]
        want = h_s @ w.T.astype(np.float64) + b
        err = np.abs(ctx.layer_input(il)[lo:hi] - want).max() / np.abs(want).max()
        assert err < tol, f"{map_type} layer {il}: relative error {err:.3g}"


def overflow_maps(base, out):
    """Finite F32 maps (3e38 everywhere) whose prediction overflows: every filled K/V row is NaN."""
    ident = fmt.identity_of(base)
    layers = list(range(SPLIT + 1, ident.n_layer))
    d = ident.n_embd
    w = np.full((len(layers), d, d), 3e38, np.float32)
    b = np.zeros((len(layers), d), np.float32)
    maps = Maps(SPLIT, layers, w, b, [LayerFit(l, 0, 0, 0, 0, 0, 0) for l in layers])
    return fmt.pack(base, maps, ident, Provenance(), out, map_type="f32")


@pytest.fixture(scope="module")
def overflow(smollm2_path, tmp_path_factory):
    return Model(overflow_maps(smollm2_path, tmp_path_factory.mktemp("ovf") / "ovf.gguf"))


@pytest.mark.parametrize("flash_attn", ["on", "off"])
def test_exact_prefill_after_a_poisoned_fill_equals_a_fresh_one(overflow, prompts, flash_attn):
    fill, exact = prompts
    kw = dict(n_ctx=1024, n_batch=256, n_ubatch=64, threads=2, flash_attn=flash_attn)
    fresh = overflow.context(**kw).prefill(exact).logits

    ctx = overflow.context(**kw)
    ctx.set_fill("ridge")
    res = ctx.prefill(fill, sinks=4, tail=64)
    assert res.n_filled == N_FILL - 68
    # the test bites: the fill really wrote non-finite K into the cache
    assert not np.isfinite(ctx.state_get(SPLIT + 1, "k", 4, N_FILL - 64)).any()

    ctx.set_fill("exact")
    ctx.seq_rm(0)
    np.testing.assert_array_equal(ctx.prefill(exact).logits, fresh)

    # partial removal: keep the exact sinks, drop the filled rows, recompute them exactly
    ctx.seq_rm(0)
    ctx.set_fill("ridge")
    ctx.prefill(fill, sinks=4, tail=64)
    ctx.set_fill("exact")
    ctx.seq_rm(0, 4, -1)
    got = ctx.prefill(fill[4:], pos0=4).logits
    ref = overflow.context(**kw)  # the same decode calls, so the same ubatches
    ref.prefill(fill[:4])
    np.testing.assert_array_equal(got, ref.prefill(fill[4:], pos0=4).logits)


def _repack(tmp_path, src, **changes):
    """A copy of src with changed ridgefill.* keys (uint32) through gguf-py."""
    import gguf

    from ridgefill.format.gguf_io import copy_gguf, open_gguf

    reader = open_gguf(src)
    out = tmp_path / "changed.gguf"

    def add(w):
        for k, v in changes.items():
            w.add_uint32(f"ridgefill.{k}", v) if isinstance(v, int) else w.add_string(f"ridgefill.{k}", v)

    copy_gguf(reader, out, add_keys=add, drop_keys=lambda k: k[len("ridgefill."):] in changes)
    assert gguf.GGUFReader(out).get_field(f"ridgefill.{next(iter(changes))}") is not None
    return out


@pytest.mark.parametrize("changes,message", [
    ({"format_version": 999}, "ridgefill.format_version = 999 is not supported"),
    ({"format_version": "1"}, "key ridgefill.format_version has wrong type"),
    ({"sink_rows": 2**32 - 1}, "ridgefill.sink_rows = 4294967295 is out of range [0, 8192]"),
    ({"tail_rows": 8193}, "ridgefill.tail_rows = 8193 is out of range [0, 8192]"),
    ({"split_layer": 0}, "ridgefill.split_layer = 0 is out of range"),
])
def test_bad_metadata_is_a_load_error_naming_the_key(smollm2_path, tmp_path, changes, message):
    model, _ = random_maps_model(smollm2_path, SPLIT, tmp_path / "ok.gguf")
    bad = _repack(tmp_path, model.path, **changes)
    with pytest.raises(RuntimeError, match=message.replace("[", r"\[").replace("]", r"\]")):
        Model(bad)


def test_a_nan_map_is_refused_at_load(smollm2_path, tmp_path):
    model, maps = random_maps_model(smollm2_path, SPLIT, tmp_path / "ok.gguf")
    w = maps.weights.copy()
    w[3, 5, 7] = np.nan
    ident = fmt.identity_of(smollm2_path)
    bad = fmt.pack(smollm2_path, Maps(SPLIT, maps.layers, w, maps.biases, maps.fits), ident, Provenance(),
                    tmp_path / "nan.gguf", map_type="f16")
    with pytest.raises(RuntimeError, match=f"blk.{SPLIT + 4}.ridge_map.weight: non-finite value"):
        Model(bad)
    info = fmt.inspect(bad, base=smollm2_path)
    assert not info["loads"]
    assert {c["name"]: c["ok"] for c in info["checks"]} == {
        "format_version": True, "split_layer": True, "sink_rows": True, "tail_rows": True, "maps": False,
        "window": True, "route": True, "stats": True, "base_sha256": True}
