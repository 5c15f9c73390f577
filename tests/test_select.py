"""Selection as a splice (evals/select.py) and the numpy attention it scores rows with (fit/attention.py)."""

import numpy as np
import pytest

from ridgefill.errors import InputError
from ridgefill.evals import select
from ridgefill.evals.session import variants_named
from ridgefill.fit.attention import AttentionLayer, CausalAttention, attention_paid, rope


def _layer(rng, d=16, n_head=4, n_head_kv=2, hd=4, window=0, bias=True, head_norm=False, neox=True):
    m = lambda *s: rng.normal(size=s).astype(np.float32)
    return AttentionLayer(3, 1 + 0.1 * m(d), 1e-6, m(n_head * hd, d), m(n_head_kv * hd, d), m(n_head_kv * hd, d),
                          m(n_head * hd) if bias else None, m(n_head_kv * hd) if bias else None, None,
                          1 + 0.1 * m(hd) if head_norm else None, 1 + 0.1 * m(hd) if head_norm else None,
                          n_head, n_head_kv, hd, hd, neox, 10000.0, 1.0, 1 / np.sqrt(hd), window)


def _naive_paid(layer, h, probe):
    """Head by head, probe row by probe row, with every step written out."""
    n = len(h)
    pos = np.arange(n)
    k, q = layer.keys(h, pos), layer.queries(h, pos)
    group = layer.n_head // layer.n_head_kv
    best = np.zeros(n)
    for p in range(n - probe, n):
        for head in range(layer.n_head):
            seen = [t for t in range(p + 1) if not layer.window or p - t < layer.window]
            logits = np.array([q[p, head] @ k[t, head // group] * layer.scale for t in seen])
            w = np.exp(logits - logits.max())
            w /= w.sum()
            best[seen] = np.maximum(best[seen], w)
    return best


@pytest.mark.parametrize("window,head_norm,neox", [(0, False, True), (5, True, True), (0, True, False)])
def test_attention_paid_is_the_largest_causal_softmax_share_over_heads_and_probe_rows(window, head_norm, neox):
    rng = np.random.default_rng(0)
    layer = _layer(rng, window=window, head_norm=head_norm, neox=neox)
    h = rng.normal(size=(20, 16)).astype(np.float32)
    np.testing.assert_allclose(attention_paid(layer, h, 6), _naive_paid(layer, h, 6), rtol=1e-4, atol=1e-6)


def _naive_shares(layer, h):
    """(n_head, n, n): every head's causal softmax of every row, written out."""
    n = len(h)
    pos = np.arange(n)
    k, q = layer.keys(h, pos), layer.queries(h, pos)
    group = layer.n_head // layer.n_head_kv
    w = np.zeros((layer.n_head, n, n))
    for head in range(layer.n_head):
        for t in range(n):
            seen = [u for u in range(t + 1) if not layer.window or t - u < layer.window]
            logits = np.array([q[t, head] @ k[u, head // group] * layer.scale for u in seen])
            e = np.exp(logits - logits.max())
            w[head, t, seen] = e / e.sum()
    return w


@pytest.mark.parametrize("window", [0, 7])
def test_what_rows_pay_chosen_rows_far_before_them_is_the_softmax_summed_over_them(window):
    rng = np.random.default_rng(2)
    layer = _layer(rng, window=window)
    h = rng.normal(size=(40, 16)).astype(np.float32)
    CausalAttention.CHUNK = 16  # several steps, the last one short
    try:
        att = CausalAttention(layer, h)
    finally:
        CausalAttention.CHUNK = 256
    w = _naive_shares(layer, h)
    chosen, gap = np.array([2, 3, 10, 25]), 4
    far = np.arange(40)[:, None] - chosen[None, :] > gap
    want = (w[:, :, chosen] * far).sum(-1).max(0)
    np.testing.assert_allclose(att.paid_to(chosen, gap), want, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(att.shares(np.arange(40), np.arange(40)).max(axis=(0, 1)), w.max(0), rtol=1e-4, atol=1e-6)
    assert att.paid_to(chosen, gap)[: chosen[0] + gap + 1].max() == 0


def test_rope_rotates_pairs_by_position_and_keeps_norms():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(3, 2, 8))
    pos = np.array([0, 5, 17])
    for neox in (True, False):
        y = rope(x, pos, 8, 10000.0, 1.0, neox)
        np.testing.assert_allclose(np.linalg.norm(y, axis=-1), np.linalg.norm(x, axis=-1))
        np.testing.assert_allclose(y[0], x[0])  # position 0 is not rotated
    # neox pairs (i, i + 4), frequency base^(-2i/8): pair 1 of row 1 turns by 5 * 10000^(-1/4)
    y = rope(x, pos, 8, 10000.0, 1.0, True)
    a = 5 * 10000 ** (-2 / 8)
    np.testing.assert_allclose(y[1, 0, [1, 5]], [x[1, 0, 1] * np.cos(a) - x[1, 0, 5] * np.sin(a),
                                                 x[1, 0, 1] * np.sin(a) + x[1, 0, 5] * np.cos(a)])
    # a partial rotation leaves the dimensions past n_rot alone; linear scaling divides positions
    np.testing.assert_allclose(rope(x, pos, 4, 10000.0, 1.0, True)[..., 4:], x[..., 4:])
    np.testing.assert_allclose(rope(x, pos * 2, 8, 10000.0, 0.5, False), rope(x, pos, 8, 10000.0, 1.0, False))


def test_names_parse_to_selectors_with_their_defaults():
    assert select.parse("ridge") is None and select.parse("ridge-kv") is None
    mode, sel = select.parse("ridge-select5")
    assert (mode, sel.kind, sel.share, sel.layers, sel.probe_rows, sel.pool) == ("ridge", "select", 0.05, (), 64, ("max", 7))
    _, sel = select.parse("identity-select2.5-L8+4-P32-avg5")
    assert (sel.share, sel.layers, sel.probe_rows, sel.pool) == (0.025, (4, 8), 32, ("avg", 5))
    assert select.parse("ridge-select10-nopool")[1].pool == ("none", 1)
    assert select.parse("ridge-select10-Lall-max15")[1].layers == "all"
    assert select.parse("ridge-select5-fwd32")[1].pool == ("fwd", 32)
    assert select.parse("ridge-random5")[1] == select.Selector("random", 0.05)
    assert select.parse("ridge-evidence")[1] == select.Selector("evidence", widen=4)
    assert select.parse("ridge-evidence0")[1].widen == 0
    assert select.parse("ridge-select10-Lall-max63-after")[1] == select.Selector("select", 0.1, "all", pool=("max", 63),
                                                                                 after=True)
    assert select.parse("ridge-evidence-after")[1].after and select.parse("ridge-random5-after")[1].after
    assert not select.parse("ridge-select5")[1].after
    assert select.parse("ridge-select10-Lall-max63-hop3")[1].hops == 3 and select.parse("ridge-select5")[1].hops == 0
    for bad in ("ridge-select0", "ridge-select101", "ridge-select5-max4", "ridge-select5-Q3", "ridge-random5-L3",
                "ridge-evidence-L3", "ridge-select5-P0", "ridge-select5-hop0", "ridge-random5-hop1"):
        with pytest.raises(InputError):
            select.parse(bad)


def test_a_tail_decoded_in_part_by_the_hook_has_no_log_probabilities_to_score():
    from ridgefill.evals import prefill

    head = prefill.Head(None, np.arange(10, dtype=np.int32), 4, (1, 4), 3, 1, tail_from=8)
    with pytest.raises(InputError, match="answers"):
        prefill.tail_logprobs(head)


def test_selection_variants_come_from_their_names():
    v, = variants_named(["ridge-select5-L10"])
    assert (v.name, v.mode, v.route, v.split_free) == ("ridge-select5-L10", "ridge", 0.0, False)
    with pytest.raises(InputError, match="unknown mode"):
        variants_named(["ridge-selectfive"])


def test_fork_selection_variants_come_from_the_mode_vocabulary():
    """`ridge^10` is the fork's own selection (Context.set_select), not a splice: no hook, a share."""
    sel, both = variants_named(["ridge^10", "identity@5^2.5"])
    assert (sel.name, sel.mode, sel.route, sel.select, sel.probe, sel.hook) == ("ridge^10", "ridge", 0.0, 0.1, 64, None)
    assert (both.name, both.mode, both.route, both.select) == ("identity@5^2.5", "identity", 0.05, 0.025)
    with pytest.raises(InputError):
        variants_named(["exact^10"])


def test_counts_pooling_top_rows_and_runs():
    sel = select.Selector("select", 0.05)
    assert [sel.count(n) for n in (1, 20, 21, 2940)] == [1, 1, 2, 147]
    s = np.array([0, 1, 0, 0, 5, 0, 0, 0, 2.0])
    np.testing.assert_array_equal(select.pooled(s, ("max", 3)), [1, 1, 1, 5, 5, 5, 0, 2, 2])
    np.testing.assert_allclose(select.pooled(s, ("avg", 3)), [1 / 3, 1 / 3, 1 / 3, 5 / 3, 5 / 3, 5 / 3, 0, 2 / 3, 2 / 3])
    np.testing.assert_array_equal(select.pooled(s, ("none", 1)), s)
    np.testing.assert_array_equal(select.pooled(s, ("fwd", 3)), [0, 1, 1, 1, 5, 5, 5, 0, 2])
    # rows of [2, 8) only; ties go to the earlier row
    np.testing.assert_array_equal(select.top_rows(select.pooled(s, ("max", 3)), 2, 8, 3), [3, 4, 5])
    np.testing.assert_array_equal(select.top_rows(s, 2, 8, 2), [2, 4])
    assert select.runs(np.array([3, 4, 5, 9, 11, 12])) == [(3, 6), (9, 10), (11, 13)]
    # a hop: the pool's width more rows, the best pooled ones not chosen (a chosen row's own score does not count)
    paid = np.array([0, 0, 9, 0, 0, 0, 3, 0, 0, 0.0])
    np.testing.assert_array_equal(select.next_hop(np.array([2]), paid, ("max", 3), 1, 10), [2, 5, 6, 7])
    paid[9] = 4  # within [lo, hi) only, though its pool reaches row 8
    np.testing.assert_array_equal(select.next_hop(np.array([2]), paid, ("max", 3), 1, 9), [2, 5, 6, 8])
    assert select.runs(np.array([], dtype=int)) == []


# ---- against the fork (slow) ----------------------------------------------------------------------------


def _exact_inputs_and_cache(model, toks, layers):
    ctx = model.context(n_ctx=1024, n_batch=256, n_ubatch=64, threads=2, kv_type="f32", capture=layers)
    h = {il: [] for il in layers}
    ctx.prefill(toks, on_chunk=lambda c, s, n: [h[il].append(c.layer_input(il).copy()) for il in layers])
    return ctx, {il: np.concatenate(v) for il, v in h.items()}


@pytest.mark.slow
@pytest.mark.parametrize("shape,layers,tol", [("smollm2", [0, 7, 29], 0.03), ("tiny-qwen2", [0, 5], 0.01),
                                              ("tiny-qwen3", [1, 6], 0.01), ("gemma3-270m", [4, 5, 13], 0.02)])
def test_numpy_keys_and_values_are_the_forks_cache(shape, layers, tol, shared_models, sample_text):
    """What fit.attention computes from a layer's captured inputs is what the layer cached: norm, projections,
    biases (qwen2), per-head norms (qwen3, gemma3), RoPE of each kind, gemma3's local (4, 13) and global (5)
    frequency bases. Tolerance: the CPU quantizes activations for quantized weights (Q4_1, Q8_0 here)."""
    from ridgefill.fit.attention import attention_layers
    from ridgefill.runtime import Model

    path = shared_models.base(shape)
    model = Model(path)
    toks = model.tokenize(sample_text)[:700]
    ctx, h = _exact_inputs_and_cache(model, toks, layers)
    attn = attention_layers(path, layers)
    pos = np.arange(len(toks))
    for il in layers:
        for part, got in (("k", attn[il].keys(h[il], pos).reshape(len(toks), -1)), ("v", attn[il].values(h[il]))):
            want = ctx.state_get(il, part, 0, len(toks))
            err = np.abs(got - want).max() / np.abs(want).max()
            assert err < tol, f"{shape} layer {il} {part}: relative error {err:.3g}"


@pytest.fixture(scope="module")
def smollm2_items(smollm2, tmp_path_factory):
    from ridgefill.evals import needle

    spec = needle.TaskSpec.parse("single/noise/number")
    return needle.generate(smollm2, spec, 1024, 4, 256, 2, seed=5)


def _answer_and_logprobs(ctx, item, hook=None):
    from ridgefill.evals import prefill

    head = prefill.run_head(ctx, item.tokens, 4, 256, hook=hook, evidence=item.needles)
    lp = prefill.tail_logprobs(head)
    head = prefill.run_head(ctx, item.tokens, 4, 256, hook=hook, evidence=item.needles)
    return prefill.greedy(head, 8), lp, head.notes


@pytest.mark.slow
def test_a_variant_started_from_kept_rows_is_one_decoded_afresh(smollm2, smollm2_items):
    """The head cache: a hook's writes are undone and the tail decodes as after a fresh head, bit for bit."""
    from ridgefill.evals import prefill, splice

    item = smollm2_items[0]
    ctx = smollm2.context(n_ctx=1024, n_batch=512, n_ubatch=128, threads=2, kv_type="f32")
    ctx.set_fill("identity", 14)
    dirty = lambda head: splice.splice(head, ("k", "v"), "early")
    kept = [_answer_and_logprobs(ctx, item, hook) for hook in (None, dirty, None)]
    fresh = []
    for hook in (None, dirty):
        prefill.HEADS.forget(ctx)
        head = prefill.run_head(ctx, item.tokens, 4, 256, hook=hook)
        lp = prefill.tail_logprobs(head)
        prefill.HEADS.forget(ctx)
        head = prefill.run_head(ctx, item.tokens, 4, 256, hook=hook)
        fresh.append((prefill.greedy(head, 8), lp))
    for (a, lp_a, _), (b, lp_b) in zip([kept[0], kept[1]], fresh):
        assert a == b
        np.testing.assert_array_equal(lp_a, lp_b)
    assert kept[2][0] == kept[0][0] and np.array_equal(kept[2][1], kept[0][1])  # the splice was undone
    assert not np.array_equal(kept[1][1], kept[0][1])  # and it did change the tail


@pytest.mark.slow
def test_selecting_every_filled_row_is_the_exact_cut_run(smollm2, smollm2_items):
    """q = 100 %, the random control at 100 % and an evidence ceiling wider than the prompt write exact K/V into
    every filled row: the answers and tail log-probabilities of exact-cut, bit for bit."""
    from ridgefill.evals import prefill, splice

    item = smollm2_items[1]
    ctx = smollm2.context(n_ctx=1024, n_batch=512, n_ubatch=128, threads=2, kv_type="f32")
    ctx.set_fill("identity", 14)
    names = ["identity-select100", "identity-random100", "identity-evidence2000"]
    got = {v.name: _answer_and_logprobs(ctx, item, v.hook) for v in variants_named(names)}
    ctx.set_fill("identity", smollm2.n_layer)
    ref = _answer_and_logprobs(ctx, item, splice.keep_exact_cut)
    lo, hi = prefill.run_head(ctx, item.tokens, 4, 256).fill_range
    for name, (answer, lp, notes) in got.items():
        assert answer == ref[0], name
        np.testing.assert_array_equal(lp, ref[1], err_msg=name)
        assert notes["n_selected"] == hi - lo and notes["evidence_selected"] == 1.0


@pytest.mark.slow
def test_the_forks_order_is_the_splices_when_the_probe_rows_are_the_whole_tail(smollm2, smollm2_items):
    """-after runs the tail's rows before the last P first; with P = the tail there are none, and the variant
    answers as the splice does, bit for bit; with a smaller P it decodes them first and answers from there."""
    from ridgefill.evals import prefill

    item = smollm2_items[0]
    ctx = smollm2.context(n_ctx=1024, n_batch=512, n_ubatch=128, threads=2, kv_type="f32")
    ctx.set_fill("identity", 14)
    answers, heads = {}, {}
    for v in variants_named(["identity-select10-P256", "identity-select10-P256-after", "identity-select10-P32-after"]):
        head = prefill.run_head(ctx, item.tokens, 4, 256, hook=v.hook, evidence=item.needles)
        heads[v.name], answers[v.name] = head, prefill.greedy(head, 8)
    assert answers["identity-select10-P256-after"] == answers["identity-select10-P256"]
    assert heads["identity-select10-P256-after"].tail_from == heads["identity-select10-P256"].stop
    assert heads["identity-select10-P32-after"].tail_from == len(item.tokens) - 32
    assert ctx.seq_pos_max(0) >= len(item.tokens) - 1


@pytest.mark.slow
def test_the_probe_finds_a_planted_needle(smollm2, smollm2_items):
    """The rows the question attends to at the split layer include the needle's: at 5 % of the filled rows
    the selection covers most of its rows, where as many random rows cover about 5 %."""
    item = smollm2_items[0]
    ctx = smollm2.context(n_ctx=1024, n_batch=512, n_ubatch=128, threads=2, kv_type="f32")
    ctx.set_fill("identity", 16)
    notes = {v.name: _answer_and_logprobs(ctx, item, v.hook)[2]
             for v in variants_named(["identity-select5", "identity-random5"])}
    print(notes)
    assert notes["identity-select5"]["evidence_selected"] >= 0.4
    assert notes["identity-random5"]["evidence_selected"] <= 0.2


@pytest.mark.slow
def test_selection_refuses_hybrid_models(shared_models, sample_text):
    from ridgefill.evals import prefill
    from ridgefill.runtime import Model

    model = Model(shared_models.passthrough_path("tiny-qwen35", 4))
    ctx = model.context(n_ctx=512, n_batch=256, n_ubatch=64, threads=2, kv_type="f32")
    ctx.set_fill("identity", 4)
    v, = variants_named(["identity-select5"])
    with pytest.raises(InputError, match="recurrent state"):
        prefill.run_head(ctx, model.tokenize(sample_text)[:300], 4, 64, hook=v.hook)
