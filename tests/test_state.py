"""Cache access (llama_rf_state_get/_set) and what the fill path writes into the cache."""

import numpy as np
import pytest

from conftest import random_maps_model
from ridgefill import format as fmt
from ridgefill.format.gguf_io import open_gguf, tensor_array
from ridgefill.runtime import Model

pytestmark = pytest.mark.slow

SPLIT, N, SINKS, TAIL = 20, 600, 64, 24


@pytest.fixture(scope="module")
def prompt(smollm2, sample_text):
    return smollm2.tokenize(sample_text)[:N]


@pytest.fixture(scope="module")
def ridge_model(smollm2_path, tmp_path_factory):
    """SmolLM2 + random, non-symmetric maps far from the identity (so a wrong map shows)."""
    return random_maps_model(smollm2_path, SPLIT, tmp_path_factory.mktemp("state") / "rand.gguf", seed=3)


@pytest.fixture(scope="module")
def fitted_model(smollm2_path, tmp_path_factory):
    """SmolLM2 with maps fitted at SPLIT on 4096 calibration tokens (F16 maps, as `ridgefill fit` writes)."""
    from ridgefill.fit import pipeline
    from ridgefill.fit.capture import CaptureConfig

    stats = pipeline.calibrate(smollm2_path, CaptureConfig(split=SPLIT, tokens=4096, window=1024, threads=2))
    out = tmp_path_factory.mktemp("fitted") / "fitted.gguf"
    pipeline.fit_and_pack(smollm2_path, stats, out)
    return Model(out), fmt.read_maps(out)


def _ctx(model, flash_attn="on", kv_type="f32", capture=()):
    return model.context(n_ctx=1024, n_batch=256, n_ubatch=64, threads=2, flash_attn=flash_attn,
                         kv_type=kv_type, capture=capture)


# ---- numpy reference of one late layer's K/V from its predicted input --------------------

class LayerWeights:
    def __init__(self, path, il):
        r = open_gguf(path)

        def deq(name):
            return tensor_array(r, f"blk.{il}.{name}.weight")

        self.norm = deq("attn_norm").astype(np.float64)
        self.wk = deq("attn_k").astype(np.float64)
        self.wv = deq("attn_v").astype(np.float64)
        f = r.fields
        self.eps = float(f["llama.attention.layer_norm_rms_epsilon"].contents())
        self.base = float(f["llama.rope.freq_base"].contents())
        self.head_dim = int(f["llama.rope.dimension_count"].contents())

    def kv(self, x, pos):
        xn = x / np.sqrt((x * x).mean(axis=1, keepdims=True) + self.eps) * self.norm
        return rope_norm(xn @ self.wk.T, pos, self.head_dim, self.base), xn @ self.wv.T


def rope_norm(k, pos, hd, base):
    """llama.cpp's LLAMA_ROPE_TYPE_NORM: rotate adjacent pairs (2i, 2i+1) of each head."""
    k = k.reshape(len(k), -1, hd).copy()
    theta = pos[:, None] * base ** (-np.arange(0, hd, 2) / hd)[None, :]
    c, s = np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]
    x0, x1 = k[..., 0::2].copy(), k[..., 1::2].copy()
    k[..., 0::2], k[..., 1::2] = x0 * c - x1 * s, x0 * s + x1 * c
    return k.reshape(len(k), -1)


@pytest.mark.parametrize("maps_kind,flash_attn", [("fitted", "on"), ("fitted", "off"), ("random", "on")])
def test_filled_kv_equals_numpy_from_h_s(request, prompt, maps_kind, flash_attn):
    """K/V written by the fill path = attn-norm, K/V projections and RoPE of W h_s + b (numpy)."""
    if maps_kind == "fitted":
        model, maps = request.getfixturevalue("fitted_model")
    else:
        model, m = request.getfixturevalue("ridge_model")
        maps = {il: (m.weights[j], m.biases[j]) for j, il in enumerate(m.layers)}
    ctx = _ctx(model, flash_attn, capture=[SPLIT])
    ctx.set_fill("ridge")
    h_rows = {}
    res = ctx.prefill(prompt, sinks=SINKS, tail=TAIL,
                      on_chunk=lambda c, start, n: h_rows.update({start: c.layer_input(SPLIT).copy()}))
    lo, hi = res.fill_range
    h_s = np.concatenate([h_rows[s] for s in sorted(h_rows)])[lo:hi].astype(np.float64)
    pos = np.arange(lo, hi, dtype=np.float64)
    for il in (SPLIT + 1, SPLIT + 5, model.n_layer - 1):
        w, b = maps[il]
        lw = LayerWeights(model.path, il)
        k_want, v_want = lw.kv(h_s @ w.T.astype(np.float64) + b, pos)
        k_got, v_got = ctx.state_get(il, "k", lo, hi), ctx.state_get(il, "v", lo, hi)
        k_err = np.abs(k_got - k_want).max() / np.abs(k_want).max()
        v_err = np.abs(v_got - v_want).max() / np.abs(v_want).max()
        # no map: what a fill path that ignored the map would write
        k_nomap, _ = lw.kv(h_s, pos)
        k_nomap_err = np.abs(k_got - k_nomap).max() / np.abs(k_want).max()
        print(f"{maps_kind} maps, layer {il}: relative K error {k_err:.2e}, V error {v_err:.2e} (without the map: {k_nomap_err:.2e})")
        # llama.cpp quantizes activations to 8 bits against the Q4_1 weights: ~1e-2 is its noise floor
        assert k_err < 3e-2 and v_err < 3e-2
        assert k_nomap_err > 10 * k_err


def _prefill(model, prompt, mode, splice=None, **ctx_kw):
    ctx = _ctx(model, **ctx_kw)
    ctx.set_fill(mode)
    res = ctx.prefill(prompt, sinks=SINKS, tail=TAIL, before_tail=splice or (lambda c: None))
    return ctx, res


@pytest.mark.parametrize("flash_attn", ["on", "off"])
def test_splicing_exact_kv_recovers_exact_logits(ridge_model, prompt, flash_attn):
    model, _ = ridge_model
    exact_ctx, exact = _prefill(model, prompt, "exact", flash_attn=flash_attn)
    lo, hi = SINKS, N - TAIL
    late = range(SPLIT + 1, model.n_layer)
    exact_kv = {(il, p): exact_ctx.state_get(il, p, lo, hi) for il in late for p in "kv"}

    def splice(parts):
        def run(ctx):
            for il in late:
                for p in parts:
                    assert ctx.state_set(il, p, exact_kv[il, p], lo, hi) == hi - lo
        return run

    _, fill = _prefill(model, prompt, "ridge", flash_attn=flash_attn)
    _, both = _prefill(model, prompt, "ridge", splice("kv"), flash_attn=flash_attn)
    _, k_only = _prefill(model, prompt, "ridge", splice("k"), flash_attn=flash_attn)
    assert fill.n_filled == hi - lo
    gap = np.abs(fill.logits - exact.logits).max()
    print(f"max |logit diff| fill {gap:.3g}, K spliced {np.abs(k_only.logits - exact.logits).max():.3g}, "
          f"K+V spliced {np.abs(both.logits - exact.logits).max():.3g}")
    assert gap > 1e-2
    np.testing.assert_array_equal(both.logits, exact.logits)
    assert not np.array_equal(k_only.logits, exact.logits) and not np.array_equal(k_only.logits, fill.logits)


def test_state_access_round_trip_and_errors(smollm2, prompt):
    ctx = _ctx(smollm2, flash_attn="off", kv_type="f16")  # transposed, half-precision V
    ctx.prefill(prompt[:100])
    v = ctx.state_get(3, "v", 10, 20)
    assert v.shape == (10, 192) and v.dtype == np.float32
    np.testing.assert_array_equal(ctx.state_get(3, "v")[10:20], v)
    ctx.state_set(3, "v", np.zeros_like(v), 10, 20)
    assert not ctx.state_get(3, "v", 10, 20).any() and ctx.state_get(3, "v", 20, 21).any()
    assert ctx.state_get(3, "k", 100, 200).shape == (0, 192)
    with pytest.raises(ValueError, match="out of range"):
        ctx.state_get(smollm2.n_layer, "k")
    with pytest.raises(ValueError, match="no recurrent state"):
        ctx.state_get(3, "ssm")
    with pytest.raises(ValueError, match="shape"):
        ctx.state_set(3, "k", np.zeros((10, 7)), 10, 20)
    with pytest.raises(ValueError, match="exactly"):
        ctx.state_set(3, "k", np.zeros((9, 192)), 10, 20)
    with pytest.raises(ValueError, match="part"):
        ctx.state_get(3, "q")
    q = _ctx(smollm2, kv_type="q8_0")
    q.prefill(prompt[:100])
    with pytest.raises(ValueError, match="F32 or F16"):
        q.state_get(3, "k")
