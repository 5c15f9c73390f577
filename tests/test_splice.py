"""Splice variants: exact components written into a fill run's cache."""

import numpy as np
import pytest

from ridgefill.evals import prefill, splice
from ridgefill.evals.session import variants_named
from ridgefill.runtime import Model


def test_with_exact_norms_keeps_direction_and_takes_norm():
    rng = np.random.default_rng(0)
    filled, exact = rng.normal(size=(5, 3 * 4)), rng.normal(size=(5, 3 * 4))
    out = splice.with_exact_norms(filled, exact, head_dim=4).reshape(5, 3, 4)
    f, e = filled.reshape(5, 3, 4), exact.reshape(5, 3, 4)
    np.testing.assert_allclose(np.linalg.norm(out, axis=2), np.linalg.norm(e, axis=2), rtol=1e-5)
    cos = (out * f).sum(2) / np.linalg.norm(out, axis=2) / np.linalg.norm(f, axis=2)
    np.testing.assert_allclose(cos, 1.0, rtol=1e-5)


def test_splice_variants_fill_in_their_mode_and_splice_their_parts(monkeypatch):
    seen = []
    monkeypatch.setattr(splice, "splice", lambda head, parts, group=None: seen.append((head, parts, group)))
    for v in variants_named(["ridge-k", "ridge-v", "ridge-knorm", "ridge-kv", "identity-kv", "ridge-state"]):
        mode, part = v.name.split("-", 1)
        assert (v.mode, v.route, v.split_free) == (mode, 0.0, False)
        v.hook("head")
        assert seen.pop() == ("head", splice.PARTS[part], None)
    assert splice.PARTS["kv"] == ("k", "v") and splice.PARTS["knorm"] == ("knorm",)
    for v in variants_named(["ridge-k-early", "ridge-kv-late", "identity-v-early"]):
        mode, part, group = v.name.split("-")
        v.hook("head")
        assert v.mode == mode and seen.pop() == ("head", splice.PARTS[part], group)


class _Ctx:
    def __init__(self, split, n_layer):
        self.fill_split, self.model = split, type("M", (), {"n_layer": n_layer})()


def test_the_groups_halve_the_filled_layers():
    assert splice.late_layers(_Ctx(20, 30)) == list(range(21, 30))
    assert splice.late_layers(_Ctx(20, 30), "early") == [21, 22, 23, 24, 25]
    assert splice.late_layers(_Ctx(20, 30), "late") == [26, 27, 28, 29]
    assert splice.late_layers(_Ctx(12, 24), "early") == list(range(13, 19))


@pytest.mark.slow
def test_a_grouped_splice_writes_its_half_of_the_filled_layers_only(smollm2_path, sample_text, monkeypatch):
    monkeypatch.setattr(splice, "_EXACT", splice._ExactCache())
    model = Model(smollm2_path)
    toks = model.tokenize(sample_text)[:300]
    changed = []

    def hook(head):
        lo, hi = head.fill_range
        late = splice.late_layers(head.ctx)
        before = {il: head.ctx.state_get(il, "k", lo, hi, head.seq_id) for il in late}
        splice.splice(head, ("k",), "early")
        exact = splice._EXACT.get(head, late)
        for il in late:
            after = head.ctx.state_get(il, "k", lo, hi, head.seq_id)
            early = il in splice.late_layers(head.ctx, "early")
            np.testing.assert_array_equal(after, exact[il, "k"] if early else before[il], err_msg=str(il))
            changed.append(early and not np.array_equal(after, before[il]))

    ctx = model.context(n_ctx=512, n_batch=256, n_ubatch=64, threads=2, kv_type="f32")
    ctx.set_fill("identity", 20)
    prefill.run_head(ctx, toks, 4, 64, hook=hook)
    assert sum(changed) == 5  # layers 21-25 took exact keys, 26-29 kept the filled ones


@pytest.mark.slow
def test_splicing_k_and_v_reproduces_the_exact_cut_run(smollm2_path, sample_text, monkeypatch):
    """identity fill of real SmolLM2 at split 20 + exact K and V in every filled late row = exact values."""
    monkeypatch.setattr(splice, "_EXACT", splice._ExactCache())
    model = Model(smollm2_path)
    toks = model.tokenize(sample_text)[:700]
    sinks, tail = 4, 100

    def last_logits(mode, split, hook=None):
        ctx = model.context(n_ctx=1024, n_batch=256, n_ubatch=64, threads=2, kv_type="f32")
        ctx.set_fill(mode, split)
        head = prefill.run_head(ctx, toks, sinks, tail, hook=hook)
        assert head.n_filled == (0 if mode == "exact" else len(toks) - sinks - tail)
        prefill.greedy(head, 0)
        return ctx.logits()[0]

    cut = last_logits("identity", model.n_layer, splice.keep_exact_cut)  # exact values, the fill run's batches
    fill = last_logits("identity", 20)
    kv = last_logits("identity", 20, lambda h: splice.splice(h, ("k", "v")))
    k = last_logits("identity", 20, lambda h: splice.splice(h, ("k",)))
    knorm = last_logits("identity", 20, lambda h: splice.splice(h, ("knorm",)))
    gap = np.abs(fill - cut).max()
    print(f"max |logit - exact-cut|: fill {gap:.3g}, K {np.abs(k - cut).max():.3g}, "
          f"K-norm {np.abs(knorm - cut).max():.3g}, K+V {np.abs(kv - cut).max():.3g}")
    assert gap > 1e-2
    np.testing.assert_array_equal(kv, cut)
    assert not np.array_equal(k, cut) and not np.array_equal(k, fill)
    assert not np.array_equal(knorm, fill)
    assert not splice._EXACT._ctx  # the exact-cut run's cache served every splice

    monkeypatch.setattr(splice, "_EXACT", splice._ExactCache())  # no exact-cut run: a reference context
    np.testing.assert_array_equal(last_logits("identity", 20, lambda h: splice.splice(h, ("k", "v"))), cut)
    assert splice._EXACT._ctx


def test_gap_shares_from_records():
    from ridgefill.evals import attribution

    rng = np.random.default_rng(1)
    recs = []
    for i in range(40):
        base = rng.normal()
        vals = {"exact": base, "exact-cut": base, "ridge": base + 1.0, "ridge-k": base + 0.25, "ridge-v": base + 1.0,
                "ridge-kv": base}
        for v, x in vals.items():
            recs.append({"task": "loss", "variant": v, "item": f"d{i}", "cluster": f"d{i}", "split": None if v == "exact" else 15,
                         "sinks": 4, "tail": 64, "n_tokens": 512, "loss_all": x + 0.01 * rng.normal(), "loss_distant": None,
                         "n_scored": 10, "n_distant": 0})
    rows = attribution.shares(recs, n_boot=2000)
    (row,) = [r for r in rows if r["metric"] == "loss_all"]
    assert row["gap_resolved"] and abs(row["gap"]["mean"] - 1.0) < 0.02
    assert abs(row["k"]["share"] - 0.75) < 0.02 and row["k"]["lo"] < 0.75 < row["k"]["hi"]
    assert abs(row["v"]["share"]) < 0.02 and abs(row["kv"]["share"] - 1.0) < 0.02
    assert "knorm" not in row
    assert "share k" in attribution.markdown(rows)


@pytest.mark.slow  # loads the model (its tokenizer)
def test_state_splice_on_an_attention_only_model_is_an_error(smollm2):
    ctx = smollm2.context(n_ctx=256, n_batch=256, n_ubatch=64, threads=1)
    ctx.set_fill("identity", 20)
    head = prefill.Head(ctx, np.zeros(64, dtype=np.int32), stop=32, fill_range=(4, 32), n_filled=28, n_full=4)
    with pytest.raises(ValueError, match="recurrent state needs a hybrid model"):
        splice.splice(head, splice.PARTS["state"])
