"""The split-prefill (fill) path in the patched llama.cpp, against exact computation."""

import numpy as np
import pytest

from conftest import check_earlier_inputs


pytestmark = pytest.mark.slow

SPLIT = 20
N = 600
# sinks and tail on ubatch (64) and batch (256) boundaries: exact and fill runs then see the
# same ubatches, and their results can be compared bit for bit (llama.cpp's logits move by
# ~0.5 between ubatch partitions of the same prompt, so partitions must match)
SINKS, TAIL = 64, 24


@pytest.fixture(scope="module")
def prompt(smollm2, sample_text):
    toks = smollm2.tokenize(sample_text)
    assert len(toks) > N
    return toks[:N]


@pytest.fixture(scope="module")
def passthrough_maps(shared_models):
    """SmolLM2 with layers >= SPLIT zeroed (h_l = h_s) + identity ridge maps (F32)."""
    return shared_models.passthrough("smollm2", SPLIT)


@pytest.fixture(scope="module")
def random_maps(shared_models):
    """Real SmolLM2 + random, non-symmetric F32 maps: the prediction is easy to recompute."""
    return shared_models.random_maps("smollm2", SPLIT, seed=0)


def _last_logits(model, toks, mode, split=None, sinks=SINKS, tail=TAIL, **ctx_kw):
    kw = dict(n_ctx=1024, n_batch=256, n_ubatch=64, threads=2)
    kw.update(ctx_kw)
    ctx = model.context(**kw)
    ctx.set_fill(mode, split)
    res = ctx.prefill(toks, sinks=sinks, tail=tail)
    return res


def test_tail_covering_prompt_is_exact(passthrough_maps, prompt):
    """T >= N: nothing is filled, the result is the exact one bit for bit."""
    exact = _last_logits(passthrough_maps, prompt, "exact")
    ridge = _last_logits(passthrough_maps, prompt, "ridge", tail=N)
    assert ridge.n_filled == 0 and ridge.n_full == N
    np.testing.assert_array_equal(ridge.logits, exact.logits)


def test_split_at_n_layer_is_exact(smollm2, prompt):
    """s = L: filled rows run every layer exactly and only skip the logits."""
    exact = _last_logits(smollm2, prompt, "exact")
    full = _last_logits(smollm2, prompt, "identity", split=smollm2.n_layer)
    assert full.n_filled == N - SINKS - TAIL
    np.testing.assert_array_equal(full.logits, exact.logits)


@pytest.mark.parametrize("mode", ["identity", "ridge"])
@pytest.mark.parametrize("n_ubatch,flash_attn,kv_type,sinks,tail", [
    (64, "on", "f16", SINKS, TAIL),
    (64, "off", "f16", SINKS, TAIL),   # transposed V cache
    (64, "on", "q8_0", SINKS, TAIL),   # quantized (rotated) cache
    (50, "on", "f16", 4, 96),          # range boundaries inside ubatches
    (100, "off", "f32", 4, 96),
])
def test_passthrough_fill_reproduces_exact(passthrough_maps, prompt, mode, n_ubatch, flash_attn, kv_type, sinks, tail):
    """Layers >= SPLIT add nothing, so filling them from h_s is exact: bit-identical logits.

    The reference is s = L (every layer exact) with the same rows filled, i.e. the same
    ubatch partition; test_split_at_n_layer_is_exact ties s = L to the plain exact path.
    """
    kw = dict(n_ubatch=n_ubatch, flash_attn=flash_attn, kv_type=kv_type, sinks=sinks, tail=tail)
    ref = _last_logits(passthrough_maps, prompt, "identity", split=passthrough_maps.n_layer, **kw)
    fill = _last_logits(passthrough_maps, prompt, mode, split=SPLIT, **kw)
    assert fill.n_filled == N - sinks - tail
    assert fill.n_full == sinks + tail
    np.testing.assert_array_equal(fill.logits, ref.logits)
    if (sinks, tail) == (SINKS, TAIL):
        exact = _last_logits(passthrough_maps, prompt, "exact", n_ubatch=n_ubatch, flash_attn=flash_attn, kv_type=kv_type)
        np.testing.assert_array_equal(fill.logits, exact.logits)


def test_fill_changes_a_real_model_and_decodes_deterministically(random_maps, prompt):
    model, _ = random_maps
    exact = _last_logits(model, prompt, "exact")
    fill = _last_logits(model, prompt, "ridge")
    assert fill.n_filled == N - SINKS - TAIL
    assert np.abs(fill.logits - exact.logits).max() > 1e-2, "fill had no effect: the fill graph did not run"

    def run():
        ctx = model.context(n_ctx=1024, n_batch=256, n_ubatch=64, threads=2)
        ctx.set_fill("ridge")
        return ctx.greedy(prompt, 16)

    a, b = run(), run()
    assert a == b and len(a) > 0


def test_predicted_layer_inputs_are_w_hs_plus_b(random_maps, prompt):
    """Captured inputs of filled late layers = W_l h_s + b_l in numpy (orientation included)."""
    model, maps = random_maps
    late = [SPLIT + 1, SPLIT + 5, model.n_layer - 1]
    ctx = model.context(n_ctx=1024, n_batch=N, n_ubatch=64, threads=2, capture=[SPLIT, *late])
    ctx.set_fill("ridge")
    res = ctx.prefill(prompt, sinks=SINKS, tail=TAIL)
    lo, hi = res.fill_range
    h_s = ctx.layer_input(SPLIT)[lo:hi].astype(np.float64)
    for il in late:
        j = maps.layers.index(il)
        want = h_s @ maps.weights[j].T.astype(np.float64) + maps.biases[j]
        got = ctx.layer_input(il)[lo:hi]
        err = np.abs(got - want).max() / np.abs(want).max()
        assert err < 1e-4, f"layer {il}: relative error {err:.3g}"
        transposed = h_s @ maps.weights[j].astype(np.float64) + maps.biases[j]
        assert np.abs(got - transposed).max() / np.abs(want).max() > 1e-2


@pytest.fixture(scope="module")
def lagged_maps(shared_models):
    """Real SmolLM2 + random F32 maps, every other one also reading the previous row."""
    return shared_models.random_maps("smollm2", SPLIT, seed=1, lag_every=2)


@pytest.mark.parametrize("n_batch,n_ubatch", [(N, 64), (128, 50), (N, N)])
def test_lagged_layer_inputs_read_the_previous_row(lagged_maps, prompt, n_batch, n_ubatch):
    """The same numbers whatever the partition: within a ubatch, across ubatches and decode calls, and
    from the exact sink ubatch to the first filled row."""
    model, maps = lagged_maps
    assert maps.prev(0) is not None and maps.prev(1) is None
    check_earlier_inputs(model, maps, prompt, SPLIT, [SPLIT + 1, SPLIT + 2, model.n_layer - 1],
                         n_batch=n_batch, n_ubatch=n_ubatch, sinks=SINKS, tail=TAIL)


def test_a_lagged_fill_from_position_0_reads_the_first_row_itself(lagged_maps, prompt):
    """Without sinks the first filled row has no predecessor: it stands for itself, as in the fit."""
    model, maps = lagged_maps
    check_earlier_inputs(model, maps, prompt, SPLIT, [SPLIT + 1], n_batch=N, n_ubatch=64, sinks=0, tail=TAIL)


@pytest.fixture(scope="module")
def window_maps(shared_models):
    """Real SmolLM2 + random F32 maps that read rows t-1..t-6 through 16 columns, every other one also the
    previous row through its own map."""
    return shared_models.random_maps("smollm2", SPLIT, seed=2, lag_every=2, window=(6, 16))


@pytest.mark.parametrize("n_batch,n_ubatch", [(N, 64), (128, 50), (N, 4), (N, N)])
def test_window_layer_inputs_read_the_earlier_rows(window_maps, prompt, n_batch, n_ubatch):
    """Windows cut by every partition: within a ubatch, across ubatches and decode calls, from the exact
    sink ubatch, and from several earlier ubatches at once when a ubatch is shorter than the window."""
    model, maps = window_maps
    assert maps.win(0) is not None and maps.win(1) is None and maps.prev(2) is not None and maps.prev(3) is None
    check_earlier_inputs(model, maps, prompt, SPLIT, [SPLIT + 1, SPLIT + 2, SPLIT + 3, SPLIT + 4],
                         n_batch=n_batch, n_ubatch=n_ubatch, sinks=SINKS, tail=TAIL)


def test_a_window_fill_from_position_0_repeats_the_first_row(window_maps, prompt):
    """Without sinks the first filled rows have fewer than W rows before them: position 0 stands for the
    rows before it, as in the fit."""
    model, maps = window_maps
    check_earlier_inputs(model, maps, prompt, SPLIT, [SPLIT + 1, SPLIT + 4], n_batch=N, n_ubatch=64, sinks=0,
                         tail=TAIL)


def test_sequences_filling_in_turns_read_only_their_own_earlier_rows(window_maps, prompt):
    """Two prompts decoded in alternating 64-row calls on one context: every filled row's late-layer inputs
    (lagged and window maps) are the ones its prompt gets alone, so a sequence's kept rows are its own."""
    model, maps = window_maps
    late = [SPLIT + 1, SPLIT + 4]
    halves = [prompt[:N // 2], prompt[N // 2:]]
    chunks = [(s, start) for start in range(0, N // 2, 64) for s in (0, 1)]

    def run(order):
        ctx = model.context(n_ctx=1024, n_batch=64, n_ubatch=64, threads=2, capture=late, n_seq_max=2)
        ctx.set_fill("ridge")
        for s, toks in enumerate(halves):
            ctx.set_fill_range(s, SINKS, len(toks) - TAIL)
        got = {(s, il): [] for s in (0, 1) for il in late}
        for s, start in order:
            ctx.decode(halves[s][start:start + 64], start, s, outputs="none")
            for il in late:
                got[s, il].append(ctx.layer_input(il).copy())
        return {k: np.concatenate(v)[SINKS:N // 2 - TAIL] for k, v in got.items() if v}

    both = run(chunks)
    for s in (0, 1):
        alone = run([c for c in chunks if c[0] == s])
        for il in late:
            want = alone[s, il]
            err = (np.abs(both[s, il] - want).max(1) / np.abs(want).max(1)).max()
            assert err < 1e-4, f"sequence {s}, layer {il}: relative error {err:.3g}"


def test_fill_errors_are_python_exceptions(smollm2, random_maps):
    ctx = smollm2.context(n_ctx=256, threads=2)
    with pytest.raises(ValueError, match="needs ridge maps"):
        ctx.set_fill("ridge")
    with pytest.raises(ValueError, match="out of range"):
        ctx.set_fill("identity", split=0)
    with pytest.raises(ValueError, match="out of range"):
        ctx.set_fill("identity", split=smollm2.n_layer + 1)
    with pytest.raises(ValueError, match="fill mode"):
        ctx.set_fill("fast")
    model, _ = random_maps
    mctx = model.context(n_ctx=256, threads=2)
    with pytest.raises(ValueError, match="fitted at split layer"):
        mctx.set_fill("ridge", split=SPLIT - 1)
    mctx.set_fill("ridge")
    assert (mctx.fill_mode, mctx.fill_split) == ("ridge", SPLIT)
    with pytest.raises(ValueError, match=">= 0"):
        mctx.prefill(np.ones(50, dtype=np.int32), tail=-1)
    mctx.set_fill("exact")
    assert mctx.fill_mode == "exact"
