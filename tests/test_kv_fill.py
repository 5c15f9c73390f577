"""K/V maps in the fork (patch "model, graph : RidgeFill K/V maps"): the filled rows' cached K and V against numpy,
in the dense (llama, qwen2), per-head key norm (qwen3), MoE, sliding-window (gemma3) and hybrid (qwen35, qwen35moe,
qwen3next: K/V maps for the attention layers, input maps for the recurrent ones) branches, with and without the
previous row, over ubatches that cut the lagged rows, from position 0; files that mix K/V maps and input maps."""

import numpy as np
import pytest

from ridgefill import format as fmt
from ridgefill.fit.attention import attention_layers, rope
from ridgefill.fit.capture import earlier_rows
from ridgefill.format.maps import Provenance

from conftest import random_kv_maps

N, SINKS, TAIL = 320, 4, 64


def _filled_kv(model, toks, split, late, n_ubatch):
    ctx = model.context(n_ctx=1024, n_batch=256, n_ubatch=n_ubatch, threads=2, capture=[split], kv_type="f32")
    ctx.set_fill("ridge")
    rows = []
    res = ctx.prefill(toks, sinks=SINKS, tail=TAIL, on_chunk=lambda c, start, n: rows.append(c.layer_input(split).copy()))
    lo, hi = res.fill_range
    got = {(il, p): ctx.state_get(il, p, lo, hi) for il in late for p in ("k", "v")}
    return np.concatenate(rows).astype(np.float64), (lo, hi), got


@pytest.mark.slow
@pytest.mark.parametrize("shape,split,lag", [("smollm2", 20, True), ("tiny-qwen2", 4, False), ("tiny-qwen3", 4, True),
                                             ("tiny-qwen3moe", 4, True), ("gemma3-270m", 12, True)])
def test_filled_kv_are_the_maps_products_with_rope(shape, split, lag, shared_models, text_tokens_kv, tmp_path):
    from ridgefill.runtime import Model

    base = shared_models.base(shape)
    maps = random_kv_maps(base, split, seed=5, lag=lag)
    ident = fmt.identity_of(base)
    path = fmt.pack(base, maps, ident, Provenance(), tmp_path / "kv.gguf", map_type="f32", kind="kv")
    assert fmt.inspect(path)["loads"], fmt.inspect(path)["checks"]
    model = Model(path)
    late = [split + 1, split + 2, ident.n_layer - 1]
    h_s, (lo, hi), got = _filled_kv(model, text_tokens_kv[:N], split, late, n_ubatch=37)
    assert lo == SINKS and hi == N - TAIL
    attn = attention_layers(base, late)
    for il in late:
        _assert_close(got, _kv_of_kv_maps(maps.kv, il, attn[il], h_s, lo, hi), il, 1e-4, shape)


def _kv_of_kv_maps(kv, il, a, h_s, lo, hi):
    """{"k": K after RoPE, "v": V} of rows [lo, hi) of layer il through the K/V maps, in numpy."""
    j = kv.layers.index(il)
    pred = h_s[lo:hi] @ kv.weights[j].T.astype(np.float64) + kv.biases[j]
    if kv.weights_prev is not None:
        pred += earlier_rows(h_s, 0, 1)[lo:hi] @ kv.weights_prev[j].T.astype(np.float64)
    n_k = a.n_head_kv * a.head_dim
    k = rope(pred[:, :n_k].reshape(hi - lo, a.n_head_kv, a.head_dim), np.arange(lo, hi), a.n_rot, a.freq_base,
             a.freq_scale, a.neox).reshape(hi - lo, -1)
    return {"k": k, "v": pred[:, n_k:]}


def _kv_of_input_map(maps, il, a, h_s, lo, hi):
    """{"k", "v"} of rows [lo, hi) of layer il through its input map, then its own norm, projections and RoPE."""
    j = maps.layers.index(il)
    y = h_s[lo:hi] @ maps.weights[j].T.astype(np.float64) + maps.biases[j]
    return {"k": a.keys(y, np.arange(lo, hi)).reshape(hi - lo, -1), "v": a.values(y)}


def _assert_close(got, want, il, tol, what):
    for part in ("k", "v"):
        err = (np.abs(got[il, part] - want[part]).max(1) / np.abs(want[part]).max(1)).max()
        assert err < tol, f"{what} layer {il} {part}: relative error {err:.3g}"


@pytest.mark.slow
@pytest.mark.parametrize("shape,split", [("tiny-qwen2", 4), ("tiny-qwen3", 4)])
def test_mixed_file_fills_each_layer_by_its_kind(shape, split, shared_models, text_tokens_kv, tmp_path):
    """K/V maps (lagged) for every other late layer, plain input maps for the rest: each covered layer caches the
    K/V maps' product, each other layer its own K/V of its input map's prediction."""
    from ridgefill.runtime import Model

    base = shared_models.base(shape)
    ident = fmt.identity_of(base)
    late = list(range(split + 1, ident.n_layer))
    maps = random_kv_maps(base, split, seed=3, lag=True, cover=late[::2], input_noise=0.3)
    path = fmt.pack(base, maps, ident, Provenance(), tmp_path / "mixed.gguf", map_type="f32", kind="kv")
    report = fmt.inspect(path)
    assert report["loads"] and "input maps of layers" in str(report["checks"]), report["checks"]
    h_s, (lo, hi), got = _filled_kv(Model(path), text_tokens_kv[:N], split, late, n_ubatch=37)
    attn = attention_layers(base, late)
    for il in late:
        if il in maps.kv.layers:
            _assert_close(got, _kv_of_kv_maps(maps.kv, il, attn[il], h_s, lo, hi), il, 1e-4, f"{shape} K/V-mapped")
        else:  # F16 projection weights: llama.cpp rounds their inputs to F16
            _assert_close(got, _kv_of_input_map(maps, il, attn[il], h_s, lo, hi), il, 3e-3, f"{shape} input-mapped")


HYBRID_SINKS, HYBRID_TAIL = 64, 64  # the hybrid tests' fill rows: on ubatch (64) boundaries


@pytest.mark.slow
@pytest.mark.parametrize("shape", ["tiny-qwen35", "tiny-qwen35moe", "tiny-qwen3next"])
def test_hybrid_kv_maps_cover_its_attention_layers(shape, shared_models, text_tokens_kv, tmp_path):
    """A hybrid's K/V maps cover its late attention layers; its recurrent layers keep their input maps. The
    attention layers cache the K/V maps' product (RoPE as numpy's NEOX), and the recurrent layers' conv and
    delta-rule states equal, bit for bit, those of a file with the same input maps for every late layer."""
    from ridgefill.bench import synth
    from ridgefill.runtime import Model

    split, base = 2, shared_models.base(shape)
    ident = fmt.identity_of(base)
    late = list(range(split + 1, ident.n_layer))
    maps = random_kv_maps(base, split, seed=6, lag=True, input_noise=0.3)
    assert maps.kv.layers == [il for il in late if synth.SHAPES[shape].is_attention(il)] and len(maps.kv.layers) < len(late)
    recurrent = [il for il in late if il not in maps.kv.layers]
    mixed = fmt.pack(base, maps, ident, Provenance(), tmp_path / "mixed.gguf", map_type="f32", kind="kv")
    inputs = fmt.pack(base, maps, ident, Provenance(), tmp_path / "inputs.gguf", map_type="f32", kind="input")
    assert fmt.inspect(mixed)["loads"], fmt.inspect(mixed)["checks"]

    def fill(path):
        ctx = Model(path).context(n_ctx=1024, n_batch=256, n_ubatch=64, threads=2, capture=[split], kv_type="f32")
        ctx.set_fill("ridge")
        rows, states = [], {}
        res = ctx.prefill(text_tokens_kv[:N], sinks=HYBRID_SINKS, tail=HYBRID_TAIL,
                          on_chunk=lambda c, start, n: rows.append(c.layer_input(split).copy()),
                          before_tail=lambda c: states.update({(il, p): c.state_get(il, p) for il in recurrent
                                                               for p in ("conv", "ssm")}))
        lo, hi = res.fill_range
        kv = {(il, p): ctx.state_get(il, p, lo, hi) for il in maps.kv.layers for p in ("k", "v")}
        return np.concatenate(rows).astype(np.float64), (lo, hi), kv, states

    h_s, (lo, hi), got, states = fill(mixed)
    assert (lo, hi) == (HYBRID_SINKS, N - HYBRID_TAIL)
    attn = attention_layers(base, maps.kv.layers)
    for il in maps.kv.layers:
        _assert_close(got, _kv_of_kv_maps(maps.kv, il, attn[il], h_s, lo, hi), il, 1e-4, shape)
    _, _, _, want = fill(inputs)
    for key, state in want.items():
        np.testing.assert_array_equal(states[key], state, err_msg=f"{shape} recurrent layer {key}")


@pytest.mark.slow
def test_kv_maps_over_a_recurrent_layer_are_refused(shared_models, tmp_path):
    """K/V maps that also cover a recurrent layer (no input map of its own): the loader refuses the file naming
    the layer, and `inspect` says why."""
    from ridgefill.errors import RidgefillError
    from ridgefill.runtime import Model

    split, base = 2, shared_models.base("tiny-qwen35")
    ident = fmt.identity_of(base)
    maps = random_kv_maps(base, split, seed=2, lag=False, cover=[3, 4, 7])
    bad = fmt.pack(base, maps, ident, Provenance(), tmp_path / "bad.gguf", map_type="f32", kind="kv")
    with pytest.raises(RidgefillError, match="layer 4, which is recurrent"):
        Model(bad)
    report = fmt.inspect(bad)
    assert not report["loads"] and "covers layer 4, which has no attention" in str(report["checks"])


@pytest.fixture(scope="module")
def text_tokens_kv(smollm2, sample_text):
    return smollm2.tokenize(sample_text)


@pytest.mark.slow
def test_kv_maps_that_do_not_fit_the_model_are_refused(shared_models, tmp_path):
    """K/V maps with rows for other K/V widths: the loader refuses the file naming the tensor, and `inspect` says
    why; K/V maps beside window maps, or without any, are refused when written."""
    from ridgefill.errors import RidgefillError
    from ridgefill.format.write import PackError
    from ridgefill.runtime import Model

    base = shared_models.base("tiny-qwen2")
    ident = fmt.identity_of(base)
    maps = random_kv_maps(base, 4, seed=1, lag=False)
    maps.kv.weights, maps.kv.biases = maps.kv.weights[:, 2:], maps.kv.biases[:, 2:]
    bad = fmt.pack(base, maps, ident, Provenance(), tmp_path / "bad.gguf", map_type="f32", kind="kv")
    with pytest.raises(RidgefillError, match="ridge_kv"):
        Model(bad)
    report = fmt.inspect(bad)
    assert not report["loads"] and "ridge_kv" in str(report["checks"])
    maps = random_kv_maps(base, 4, seed=1, lag=False)
    maps.window = np.zeros((2, ident.n_embd), np.float32)
    with pytest.raises(PackError, match="window"):
        fmt.pack(base, maps, ident, Provenance(), tmp_path / "w.gguf", kind="kv")
    maps.window, maps.kv = None, None
    with pytest.raises(PackError, match="--kv"):
        fmt.pack(base, maps, ident, Provenance(), tmp_path / "none.gguf", kind="kv")


@pytest.mark.slow
def test_the_server_serves_kv_maps_as_the_bindings_fill(shared_models, text_tokens_kv, tmp_path):
    """Lagged K/V maps beside an unchanged SmolLM2 (a maps file, --ridgefill-maps): the server's ridge continuation
    is the bindings' on the augmented file (same ubatches); an exact request after it is the exact one."""
    from ridgefill.serve.server import LlamaServer
    from ridgefill.runtime import Model

    base, split, sinks, tail = shared_models.base("smollm2"), 20, 64, 24
    maps, ident = random_kv_maps(base, split, seed=9, lag=True), fmt.identity_of(base)
    packed = fmt.pack(base, maps, ident, Provenance(), tmp_path / "kv.gguf", map_type="f16", kind="kv")
    side = fmt.write_maps(base, maps, ident, Provenance(), tmp_path / "kv-maps.gguf", map_type="f16", kind="kv")
    prompt = [int(t) for t in text_tokens_kv[:600]]
    model = Model(packed)
    ctx = model.context(n_ctx=1024, n_batch=256, n_ubatch=64, threads=2)
    ctx.set_fill("ridge")
    want = model.detokenize(ctx.greedy(prompt, 8, sinks=sinks, tail=tail))
    args = ["-b", "256", "-ub", "64", "-fa", "on"]
    body = {"prompt": prompt, "n_predict": 8, "temperature": 0.0, "cache_prompt": False}
    with LlamaServer(base, args + ["--ridgefill-maps", str(side), "--ridgefill", "ridge", "--ridgefill-sink", str(sinks),
                                   "--ridgefill-tail", str(tail)], ctx=1024, threads=2) as srv:
        fill = srv.post("/completion", body)
        assert fill["timings"]["ridgefill_filled_n"] == 600 - sinks - tail
        assert fill["content"] == want
        exact = srv.post("/completion", {**body, "ridgefill": "exact"})
    with LlamaServer(base, args, ctx=1024, threads=2) as srv:
        assert exact["content"] == srv.post("/completion", body)["content"]
    assert exact["content"] != want  # random maps: a fill that ran changes the continuation
