"""The fill path of the qwen2, qwen3, qwen3moe and gemma3 branches against exact computation.

Each model is made pass-through from the split layer on (attention-output and FFN-down
weights zeroed, so h_l = h_s): filling those layers from h_s is then exact, and the fill
path must reproduce the reference's logits and cached K/V. The reference fills the same
rows at s = L (every layer exact, logits skipped), so both runs see the same ubatches.
"""

import numpy as np
import pytest

from conftest import check_earlier_inputs

from ridgefill.bench import synth
from ridgefill.runtime import Model

pytestmark = pytest.mark.slow

N, SINKS, TAIL = 320, 64, 64  # fill rows [64, 256): on ubatch (64) boundaries


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("tiny")


def _run(model, toks, mode, split, n_tokens=N, flash_attn="on", **kw):
    ctx = model.context(n_ctx=1024, n_batch=256, n_ubatch=64, threads=2, flash_attn=flash_attn, kv_type="f32")
    ctx.set_fill(mode, split)
    res = ctx.prefill(toks[:n_tokens], **kw)
    return ctx, res


def _check_same(model, toks, split, layers, mode="identity", flash_attn="on", sinks=SINKS, tail=TAIL, n_tokens=N):
    ref_ctx, ref = _run(model, toks, "identity", model.n_layer, n_tokens, flash_attn, sinks=sinks, tail=tail)
    ctx, fill = _run(model, toks, mode, split, n_tokens, flash_attn, sinks=sinks, tail=tail)
    assert fill.n_filled == n_tokens - sinks - tail and fill.n_full == sinks + tail
    lo, hi = fill.fill_range
    for il in layers:
        for part in ("k", "v"):
            want = ref_ctx.state_get(il, part, lo, hi)
            got = ctx.state_get(il, part, lo, hi)
            assert got.shape == want.shape and len(got) > 0
            np.testing.assert_array_equal(got, want, err_msg=f"layer {il} {part}")
    diff = np.abs(fill.logits - ref.logits).max()
    print(f"{model.arch} {mode} split {split}: max |logit diff| = {diff:.3g}")
    np.testing.assert_array_equal(fill.logits, ref.logits)


@pytest.fixture(scope="module")
def text_tokens(smollm2, sample_text):
    return smollm2.tokenize(sample_text)


@pytest.mark.parametrize("shape", ["tiny-qwen2", "tiny-qwen3", "tiny-qwen3moe"])
@pytest.mark.parametrize("flash_attn", ["on", "off"])
def test_qwen_passthrough_fill_is_exact(shape, flash_attn, text_tokens, shared_models):
    split = 4
    model = shared_models.passthrough(shape, split)
    assert model.arch == synth.SHAPES[shape].arch
    _check_same(model, text_tokens, split, [split, split + 1, model.n_layer - 1], flash_attn=flash_attn)
    _check_same(model, text_tokens, split, [model.n_layer - 1], mode="ridge", flash_attn=flash_attn)


def test_qwen3_fill_differs_without_passthrough(tiny_dir, smollm2_path, text_tokens):
    """On the random (not pass-through) model the fill path must change the late layers' K."""
    base = synth.random_model("tiny-qwen3", tiny_dir / "q3.gguf", smollm2_path, seed=2, weight_type="f16", n_ctx=4096)
    model = Model(base)
    ref_ctx, _ = _run(model, text_tokens, "identity", model.n_layer, sinks=SINKS, tail=TAIL)
    ctx, res = _run(model, text_tokens, "identity", 4, sinks=SINKS, tail=TAIL)
    lo, hi = res.fill_range
    np.testing.assert_array_equal(ctx.state_get(4, "k", lo, hi), ref_ctx.state_get(4, "k", lo, hi))
    assert np.abs(ctx.state_get(5, "k", lo, hi) - ref_ctx.state_get(5, "k", lo, hi)).max() > 1e-3


@pytest.fixture(scope="module")
def gemma3_passthrough(shared_models):
    split = 12
    return shared_models.passthrough("gemma3-270m", split), split


@pytest.mark.parametrize("flash_attn", ["on", "off"])
def test_gemma3_passthrough_fill_is_exact(gemma3_passthrough, sample_text, flash_attn):
    """Sliding-window (512) and global layers; the prompt is longer than the window."""
    model, split = gemma3_passthrough
    toks = model.tokenize(sample_text)
    n = 832
    assert len(toks) >= n
    swa_layer, global_layer = split + 1, 17  # gemma3: every 6th layer (5, 11, 17) is global
    _check_same(model, toks, split, [split, swa_layer, global_layer], flash_attn=flash_attn,
                sinks=64, tail=128, n_tokens=n)


@pytest.mark.parametrize("shape", ["tiny-qwen2", "tiny-qwen3moe", "tiny-qwen35", "gemma3-270m"])
def test_lagged_maps_read_the_previous_row_in_every_branch(shape, text_tokens, shared_models):
    """Every builder's fill goes through build_rf_layer_inp and every exact graph keeps its split state:
    lagged maps read the right previous row in the dense, MoE, hybrid and sliding-window branches."""
    split = 12 if shape == "gemma3-270m" else 4
    model, maps = shared_models.random_maps(shape, split, seed=3, lag_every=2)
    check_earlier_inputs(model, maps, text_tokens[:N], split, [split + 1, split + 2, model.n_layer - 1],
                         n_batch=256, n_ubatch=64, sinks=SINKS, tail=TAIL)


@pytest.mark.parametrize("shape", ["tiny-qwen2", "tiny-qwen3moe", "tiny-qwen35", "gemma3-270m"])
def test_window_maps_read_the_earlier_rows_in_every_branch(shape, text_tokens, shared_models):
    """Window maps (rows t-1..t-5, with and beside lagged maps) in the dense, MoE, hybrid and sliding-window
    branches, with ubatches cut across windows."""
    split = 12 if shape == "gemma3-270m" else 4
    model, maps = shared_models.random_maps(shape, split, seed=4, lag_every=3, window=(5, 8))
    assert maps.prev(2) is None and maps.win(2) is not None  # a layer that reads a window only
    check_earlier_inputs(model, maps, text_tokens[:N], split, [split + 1, split + 2, split + 3],
                         n_batch=256, n_ubatch=37, sinks=SINKS, tail=TAIL)
