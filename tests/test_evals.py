"""Measurement suite (ridgefill.evals): items, placement, bootstrap, resume, runs on SmolLM2."""

import dataclasses
import json
import subprocess
import sys

import numpy as np
import pytest

from ridgefill.sources import corpus
from ridgefill.bench import synth
from ridgefill.evals import items as items_io
from ridgefill.evals import loss, needle, prefill, profiles, runner, stats
from ridgefill.evals.session import DEFAULT_VARIANTS, EXACT, EXACT_CUT, Session, Variant
from ridgefill.evals.store import ResultStore, key_of, read_jsonl
from ridgefill.format import Defaults
from ridgefill.evals.ruler import RulerItem

SPLIT = 18


# ---- bootstrap ----------------------------------------------------------------------------

def test_bootstrap_constant_difference_has_a_point_interval():
    a = np.arange(50, dtype=float)
    iv = stats.paired_bootstrap(a + 3.0, a, n_boot=2000)
    assert iv.mean == pytest.approx(3.0) and iv.lo == pytest.approx(3.0) and iv.hi == pytest.approx(3.0)
    assert (iv.n_items, iv.n_clusters) == (50, 50)


def test_bootstrap_interval_matches_normal_theory():
    """Mean of n=400 N(0.5, 1) differences: the 95 % interval is mean ± 1.96 s/sqrt(n)."""
    rng = np.random.default_rng(1)
    b = rng.normal(size=400)
    d = rng.normal(0.5, 1.0, size=400)
    iv = stats.paired_bootstrap(b + d, b)
    half = 1.96 * d.std(ddof=1) / np.sqrt(len(d))
    assert iv.mean == pytest.approx(d.mean())
    assert iv.lo == pytest.approx(d.mean() - half, abs=0.01)
    assert iv.hi == pytest.approx(d.mean() + half, abs=0.01)
    assert iv.n_boot == 10_000 and iv.level == 0.95


def test_bootstrap_is_seeded():
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=30), rng.normal(size=30)
    assert stats.paired_bootstrap(a, b, seed=5) == stats.paired_bootstrap(a, b, seed=5)
    assert stats.paired_bootstrap(a, b, seed=5).lo != stats.paired_bootstrap(a, b, seed=6).lo


def test_bootstrap_resamples_clusters_whole():
    """Three identical items per document: the same interval as one item per document."""
    rng = np.random.default_rng(3)
    per_doc = rng.normal(1.0, 2.0, size=40)
    items = np.repeat(per_doc, 3)
    docs = np.repeat([f"d{i:02d}" for i in range(40)], 3)  # sorted like per_doc
    clustered = stats.paired_bootstrap(items, np.zeros_like(items), clusters=docs, seed=0)
    single = stats.paired_bootstrap(per_doc, np.zeros_like(per_doc), seed=0)
    assert clustered.n_clusters == 40 and clustered.n_items == 120
    assert clustered.lo == pytest.approx(single.lo) and clustered.hi == pytest.approx(single.hi)
    naive = stats.paired_bootstrap(items, np.zeros_like(items), seed=0)
    assert naive.hi - naive.lo < 0.8 * (clustered.hi - clustered.lo)  # ignoring clusters is overconfident


def test_bootstrap_rejects_bad_input():
    with pytest.raises(ValueError):
        stats.paired_bootstrap([1.0, 2.0], [1.0])
    with pytest.raises(ValueError):
        stats.paired_bootstrap([1.0, 2.0], [1.0, 2.0], clusters=["a"])


def test_pairs():
    assert stats.pairs(["exact", "identity", "ridge"]) == [("identity", "exact"), ("ridge", "exact"), ("ridge", "identity")]
    assert stats.pairs(["identity", "ridge"]) == [("ridge", "identity")]
    assert ("ridge+keys", "exact") in stats.pairs(["exact", "ridge", "ridge+keys"])
    assert stats.pairs(["exact", "exact-cut", "ridge"]) == [("exact-cut", "exact"), ("ridge", "exact"), ("ridge", "exact-cut")]


def test_variants_by_name_and_registered_hooks():
    from ridgefill.evals import session as sess

    assert sess.variants_named(["exact", "ridge"]) == (sess.EXACT, sess.RIDGE)
    with pytest.raises(ValueError, match="unknown mode"):
        sess.variants_named(["fast"])
    v = sess.register(Variant("ridge+probe", "ridge", prefill.context_hook(lambda ctx: None)))
    try:
        assert sess.variants_named(["ridge+probe"]) == (v,)
    finally:
        del sess.REGISTRY["ridge+probe"]
    with pytest.raises(ValueError, match="fill mode"):
        sess.register(Variant("x", "fast"))


def test_routed_variants_by_name():
    from ridgefill.evals import session as sess

    (a, b) = sess.variants_named(["ridge@5", "identity@2.5%"])
    assert (a.name, a.mode, a.route) == ("ridge@5", "ridge", 0.05)
    assert (b.name, b.mode, b.route) == ("identity@2.5", "identity", 0.025)
    assert not a.split_free
    for bad in ("ridge@", "ridge@-5", "exact@5", "ridge@5x", "fast@5"):
        with pytest.raises(ValueError, match="unknown mode"):
            sess.variants_named([bad])
    with pytest.raises(ValueError, match="percentage"):
        sess.variants_named(["ridge@150"])
    assert stats.pairs(["exact", "identity", "ridge", "ridge@5"])[-2:] == [("ridge@5", "ridge"), ("ridge@5", "identity")]
    assert ("identity@5", "identity") not in stats.pairs(["exact", "ridge", "identity@5"])


# ---- result store (resume) ------------------------------------------------------------------

def _rec(item, variant="exact", **kw):
    return {"task": "needle", "item": item, "variant": variant, "split": None, "sinks": 4, "tail": 64, **kw}


def test_store_resumes_and_survives_a_torn_line(tmp_path):
    path = tmp_path / "results.jsonl"
    s = ResultStore(path)
    s.append(_rec("a", score=100.0))
    s.append(_rec("b", score=0.0))
    with open(path, "a") as f:
        f.write('{"task": "needle", "item": "c"')  # a crash mid-write
    s2 = ResultStore(path)
    assert len(s2) == 2 and key_of(_rec("a")) in s2 and key_of(_rec("c")) not in s2
    assert s2.get(key_of(_rec("b")))["score"] == 0.0
    s2.append(_rec("c", score=50.0))
    s3 = ResultStore(path)
    assert len(s3) == 3 and s3.get(key_of(_rec("c")))["score"] == 50.0


# ---- plans --------------------------------------------------------------------------------

def test_profiles():
    q, f = profiles.get("quick"), profiles.get("full")
    assert max(q.lengths) <= 2048 and q.sinks is None and q.tails == (256,) and q.tasks == ("needle", "loss")
    assert f.lengths == (4096,) and f.sinks is None and f.tails is None and f.splits == (15, 17, 18, 20)
    assert f.needle_items > q.needle_items and f.loss_items > q.loss_items
    for name in q.needle_tasks + f.needle_tasks:
        needle.TaskSpec.parse(name)
    assert q.with_(lengths=(512,), seed=None).lengths == (512,) and q.with_(seed=None).seed == q.seed
    with pytest.raises(ValueError, match="unknown profile"):
        profiles.get("slow")


def test_place_keeps_needles_in_range_and_order():
    breaks = np.array([0, 7, 13, 20, 31, 44, 60])
    at = needle.place(breaks, base=10, free=40, depths=[0.0, 0.5, 0.5, 1.0])
    assert at == sorted(at) and all(10 <= a <= 50 for a in at)
    assert at[0] == 13 and at[-1] == 44
    assert needle.place(np.array([0]), base=10, free=40, depths=[0.25]) == [20]  # no break: the target


# ---- items on the real tokenizer ------------------------------------------------------------

@pytest.mark.slow  # loads the model (its tokenizer)
@pytest.mark.parametrize("name", profiles.ALL_NEEDLES)
def test_needles_lie_in_the_filled_region(smollm2, name):
    spec = needle.TaskSpec.parse(name)
    n, k, t = 1024, 4, 256
    items = needle.generate(smollm2, spec, n, k, t, n_items=3, seed=0)
    starts = []
    for it in items:
        assert it.n_tokens == n and it.tokens.dtype == np.int32
        assert len(it.needles) == needle.N_NEEDLES[spec.task]
        for a, b in it.needles:
            assert k <= a < b <= n - t
        text = [smollm2.detokenize(it.tokens[a:b]) for a, b in it.needles]
        assert all(t_.strip().startswith("One of the special magic") for t_ in text)
        assert all(any(ans in t_ for t_ in text) for ans in it.answers)
        assert all(key in smollm2.detokenize(it.tokens[-40:]) for key in it.keys)
        starts.append(it.needles[0][0])
    if spec.task == "single":
        assert starts == sorted(starts) and starts[-1] - starts[0] > (n - t - k) // 2  # depths spread evenly


@pytest.mark.slow  # loads the model (its tokenizer)
def test_needle_answers_per_task(smollm2):
    got = {t: needle.generate(smollm2, needle.TaskSpec(t), 1024, 4, 256, 1, seed=0)[0] for t in needle.TASKS}
    assert len(got["single"].answers) == 1 and len(got["multikey"].answers) == 1
    assert len(got["multivalue"].answers) == 4 and len(got["multiquery"].answers) == 4
    assert len(set(got["multiquery"].keys)) == 4
    uuid_item = needle.generate(smollm2, needle.TaskSpec("single", "noise", "uuid"), 1024, 4, 256, 1, seed=0)[0]
    assert len(uuid_item.answers[0]) == 36 and uuid_item.answers[0].count("-") == 4


@pytest.mark.slow  # loads the model (its tokenizer)
def test_items_are_seeded_and_round_trip_json(smollm2, tmp_path):
    spec = needle.TaskSpec("multikey", "prose")
    a = needle.generate(smollm2, spec, 768, 4, 128, 2, seed=3)
    b = needle.generate(smollm2, spec, 768, 4, 128, 2, seed=3)
    c = needle.generate(smollm2, spec, 768, 4, 128, 2, seed=4)
    assert all(np.array_equal(x.tokens, y.tokens) for x, y in zip(a, b))
    assert not np.array_equal(a[0].tokens, c[0].tokens)
    docs = loss.generate(smollm2, 512, 2, seed=0)
    items_io.save(tmp_path / "n.json", "needle", a, {"seed": 3})
    items_io.save(tmp_path / "l.json", "loss", docs, {"seed": 0})
    kind, back, params = items_io.load(tmp_path / "n.json")
    assert kind == "needle" and params == {"seed": 3}
    for x, y in zip(a, back):
        assert np.array_equal(x.tokens, y.tokens) and y.tokens.dtype == np.int32
        assert (x.answers, x.keys, x.needles, x.needle_rows, x.id, x.cluster, x.n_new) == \
               (y.answers, y.keys, y.needles, y.needle_rows, y.id, y.cluster, y.n_new)
    kind, back, _ = items_io.load(tmp_path / "l.json")
    assert kind == "loss" and [d.id for d in back] == [d.id for d in docs]
    assert np.array_equal(back[0].tokens, docs[0].tokens)
    with pytest.raises(items_io.ItemsMismatch):
        items_io.load_or_make(tmp_path / "n.json", "needle", {"seed": 4}, lambda: a)


@pytest.mark.slow  # loads the model (its tokenizer)
def test_needles_that_do_not_fit_are_refused(smollm2):
    with pytest.raises(ValueError, match="do not fit"):
        needle.generate(smollm2, needle.TaskSpec("multivalue"), 256, 4, 200, 1, seed=0)


@pytest.mark.slow  # loads the model (its tokenizer)
def test_loss_documents_are_held_out(smollm2):
    calib, _ = corpus.split_sotu()
    docs = loss.generate(smollm2, 1024, 3, seed=0)
    assert len(docs) == 3 and all(d.n_tokens == 1024 for d in docs)
    assert not {d.doc for d in docs} & {c.name for c in calib}
    first = next(d for d in corpus.evaluation_documents() if d.name == docs[0].doc)
    assert np.array_equal(docs[0].tokens, smollm2.tokenize(first.text)[:1024])


def test_distant_mask_and_summary():
    full = -np.array([0.5, 1.0, 3.0, 0.1, 2.0])
    short = -np.array([3.0, 2.5, 6.0, 2.1, 4.0])
    m = loss.distant_mask(full, short)
    assert m.tolist() == [True, False, False, True, True]
    s = loss.summary(full, m)
    assert s["loss_distant"] == pytest.approx((0.5 + 0.1 + 2.0) / 3) and s["n_distant"] == 3
    assert loss.summary(full, np.zeros(5, bool))["loss_distant"] is None


def test_loss_is_summarized_per_document_and_per_token():
    from ridgefill.evals import report

    recs = [{"task": "loss", "group": "loss", "item": item, "cluster": item, "variant": v, "split": 15, "sinks": 4,
             "tail": 64, "n_tokens": 256, "loss_all": x, "n_scored": n, "loss_distant": x, "n_distant": n}
            for item, x, n in (("a", 1.0, 1), ("b", 3.0, 3)) for v in ("exact", "ridge")]
    row = next(r for r in report.summarize(recs, n_boot=100) if r["metric"] == "loss_distant")
    assert row["means"]["ridge"]["mean"] == 2.0  # documents alike
    assert row["means"]["ridge"]["token_mean"] == (1.0 + 9.0) / 4 and row["means"]["ridge"]["tokens"] == 4
    assert "tok 2.5 over 4" in report.markdown([row])


# ---- runs on SmolLM2 (slow) ---------------------------------------------------------------

@pytest.fixture(scope="module")
def mapped(smollm2_path, tmp_path_factory):
    """SmolLM2 with W = I ridge maps at SPLIT: ridge runs the fill path like a fitted GGUF."""
    return synth.identity_maps(smollm2_path, SPLIT, tmp_path_factory.mktemp("evals") / "maps.gguf")


@pytest.fixture(scope="module")
def session(mapped):
    # one thread: two llama.cpp threads on two shared cores stall badly when anything else runs
    return Session([mapped], n_ctx=512 + 256, threads=1, n_batch=512, n_ubatch=256)


def _plan(**kw):
    base = profiles.Plan(name="test", lengths=(256,), sinks=4, tails=(64,), splits=(SPLIT,),
                         needle_tasks=("single/noise/number",), needle_items=1, loss_items=1, window=64, n_boot=500)
    return base.with_(**kw)


@pytest.mark.slow
def test_hook_runs_between_the_filled_rows_and_the_tail(session, smollm2):
    item = needle.generate(smollm2, needle.TaskSpec(), 256, 4, 64, 1, seed=0)[0]
    seen = []

    def hook(head: prefill.Head):
        seen.append((head.stop, head.fill_range, head.n_filled, head.ctx.seq_pos_max(head.seq_id)))

    ctx = session.context(Variant("ridge+probe", "ridge", hook), SPLIT)
    rec = runner.measure.needle_record(ctx, item, 4, 64, hook)
    assert seen == [(192, (4, 192), 188, 191)]
    assert rec["n_filled"] == 188 and rec["fill_range"] == [4, 192]
    cut = session.context(EXACT_CUT, SPLIT)  # exact values through the fill run's batches
    assert (cut.fill_mode, cut.fill_split) == ("identity", smollm2.n_layer)


@pytest.mark.slow
def test_tail_covering_the_prompt_gives_identical_results(session, tmp_path):
    """T >= N: nothing is filled, so every mode scores exactly what exact scores."""
    plan = _plan(tails=(300,), needle_tasks=("multivalue/prose/number",))
    res = runner.run(session, plan, tmp_path, variants=(*DEFAULT_VARIANTS, EXACT_CUT), progress=False, plots=False)
    recs = res.document["records"]
    assert {r["variant"] for r in recs} == {"exact", "exact-cut", "identity", "ridge"}
    assert all(r["n_filled"] == 0 for r in recs)
    for item in {r["item"] for r in recs}:
        by = {r["variant"]: r for r in recs if r["item"] == item}
        fields = ("score", "output") if item.startswith(("single", "multi")) else ("loss_all", "loss_distant", "n_distant")
        for f in fields:
            assert by["identity"][f] == by["exact"][f] == by["ridge"][f] == by["exact-cut"][f], (item, f)


@pytest.mark.slow
def test_run_structure_and_resume(session, tmp_path):
    """Every variant on the same items, per-item records, summary, tables, plots; a rerun measures nothing."""
    plan = _plan(tails=(32, 64), needle_tasks=("single/noise/number", "multikey/noise/number"))
    res = runner.run(session, plan, tmp_path, progress=False)
    # 3 items (2 needle, 1 loss) x 2 tails x (exact + identity + ridge at one split)
    assert res.n_jobs == 18 and res.n_run == 18 and res.n_resumed == 0 and res.unavailable == []
    for f in ("results.jsonl", "results.json", "summary.md", "plots/needle-score-vs-tail.png",
              "plots/loss-loss_all-vs-tail.png", "items/loss-N256.json", "items/needle-multikey-noise-number-N256.json"):
        assert (tmp_path / f).is_file(), f
    doc = json.loads((tmp_path / "results.json").read_text())
    assert len(doc["records"]) == 18
    for r in doc["records"]:
        assert r["n_filled"] == (0 if r["variant"] == "exact" else 256 - r["tail"] - 4)
    rows = [r for r in doc["summary"] if r["group"] == "all" and r["tail"] == 64]
    assert set(rows[0]["means"]) == {"exact", "identity", "ridge"}
    assert set(rows[0]["diffs"]) == {"identity-exact", "ridge-exact", "ridge-identity"}
    iv = rows[0]["diffs"]["ridge-exact"]
    assert iv["lo"] <= iv["mean"] <= iv["hi"]
    assert "| group | split | tail | N |" in (tmp_path / "summary.md").read_text()

    lines = (tmp_path / "results.jsonl").read_text().count("\n")
    again = runner.run(session, plan, tmp_path, progress=False, plots=False)
    assert again.n_run == 0 and again.n_resumed == 18
    assert (tmp_path / "results.jsonl").read_text().count("\n") == lines
    assert again.document["summary"] == doc["summary"]

    with pytest.raises(ValueError, match="window"):
        runner.run(session, plan.with_(window=32), tmp_path, progress=False, plots=False)
    wider = runner.run(session, plan.with_(splits=(SPLIT, 20)), tmp_path, progress=False, plots=False)
    assert wider.unavailable == ["ridge@20"]  # identity runs at any split, ridge only where maps are
    assert wider.n_run == 3 * 2  # identity at split 20, per item and tail


@pytest.mark.slow
def test_a_refit_that_adds_routing_statistics_keeps_the_records_of_the_same_maps(session, smollm2_path, tmp_path):
    """Records are keyed by what measured them, not by file bytes: the same maps with routing statistics
    (another file sha256) resume every unrouted record, and records from before fingerprints upgrade."""
    import json

    plan = _plan(tasks=("needle",))
    first = runner.run(session, plan, tmp_path / "out", progress=False, plots=False)
    store = tmp_path / "out" / "results.jsonl"
    legacy = [{k: v for k, v in r.items() if k != "model_content"} for r in read_jsonl(store)]
    store.write_text("".join(json.dumps(r) + "\n" for r in legacy))  # as written before fingerprints
    again = runner.run(session, plan, tmp_path / "out", progress=False, plots=False)
    assert again.n_run == 0 and again.n_resumed == first.n_jobs
    assert all(len(r["model_content"]) == 64 for r in read_jsonl(store))  # upgraded in place, one line each
    assert len(read_jsonl(store)) == len(legacy)

    routed = synth.identity_maps(smollm2_path, SPLIT, tmp_path / "routed.gguf", route=True)
    refit = Session([routed], n_ctx=512 + 256, threads=1, n_batch=512, n_ubatch=256)
    variants = (*DEFAULT_VARIANTS, Variant("ridge@10", "ridge", route=0.1))
    more = runner.run(refit, plan, tmp_path / "out", variants=variants, progress=False, plots=False)
    assert more.n_resumed == first.n_jobs and more.n_run == first.n_jobs // len(DEFAULT_VARIANTS)
    contents = {r["variant"]: r["model_content"] for r in read_jsonl(store)}
    assert contents["ridge@10"] != contents["ridge"]  # the routed variant's digest covers the statistics


@pytest.mark.slow
def test_a_store_measured_with_other_maps_is_refused(session, smollm2_path, tmp_path):
    """Refitted maps at the same split into the same --out: an error, not the old records resumed."""
    from conftest import random_maps_model

    plan = _plan(tasks=("needle",))
    runner.run(session, plan, tmp_path / "out", progress=False, plots=False)
    assert all(len(r["model_sha256"]) == 64 for r in read_jsonl(tmp_path / "out" / "results.jsonl"))
    other, _ = random_maps_model(smollm2_path, SPLIT, tmp_path / "refit.gguf")
    refit = Session([other.path], n_ctx=512 + 256, threads=1, n_batch=512, n_ubatch=256)
    with pytest.raises(ValueError, match="measured with another GGUF"):
        runner.run(refit, plan, tmp_path / "out", progress=False, plots=False)


@pytest.mark.slow
def test_two_models_at_one_split_are_refused(mapped, smollm2_path, tmp_path):
    second = synth.identity_maps(smollm2_path, SPLIT, tmp_path / "again.gguf")
    with pytest.raises(ValueError, match=f"2 models carry maps at split {SPLIT}"):
        Session([mapped, second], n_ctx=512)


@pytest.mark.slow
def test_sinks_and_tail_come_from_the_gguf_unless_given(smollm2_path, tmp_path, capsys):
    gguf = synth.identity_maps(smollm2_path, SPLIT, tmp_path / "m.gguf", defaults=Defaults(sink_rows=0, tail_rows=200))
    s = Session([gguf], n_ctx=512, threads=1)
    plan = runner.resolve_rows(dataclasses.replace(_plan(), sinks=None, tails=None), s)
    assert (plan.sinks, plan.tails) == (0, (200,))
    assert runner.resolve_rows(_plan(sinks=2), s).sinks == 2  # told otherwise
    logged = []
    runner.warn_unfilled(_plan(lengths=(200, 256), tails=(200,)), logged.append)
    assert len(logged) == 1 and "200-token prompt" in logged[0] and "fills nothing" in logged[0]


@pytest.mark.slow
def test_exact_finds_needles_on_short_prompts(session, tmp_path):
    plan = _plan(lengths=(384,), tails=(96,), needle_items=2, tasks=("needle",),
                 needle_tasks=("single/noise/number", "single/prose/number"))
    res = runner.run(session, plan, tmp_path, variants=(EXACT,), progress=False, plots=False)
    scores = [r["score"] for r in res.document["records"]]
    assert len(scores) == 4 and np.mean(scores) >= 75


@pytest.mark.slow
def test_cli_eval_needle_json(mapped, tmp_path):
    cmd = [sys.executable, "-m", "ridgefill", "eval", "needle", "--model", str(mapped), "--lengths", "256",
           "--tail", "64", "--items", "1", "--needle-tasks", "single/noise/number", "--modes", "exact,ridge",
           "--out", str(tmp_path), "--json", "--quiet", "--no-plots", "--threads", "1", "--bootstrap", "200"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["run"]["plan"]["splits"] == [SPLIT] or doc["run"]["plan"]["splits"] is None
    assert {(x["variant"], x["split"]) for x in doc["records"]} == {("exact", None), ("ridge", SPLIT)}
    assert doc["summary"][0]["diffs"]["ridge-exact"]["n_boot"] == 200


@pytest.mark.slow
def test_cli_eval_splice_json(mapped, tmp_path):
    """`eval splice`: gap shares per component; exact K+V spliced into the filled rows is exact-cut, bit for bit."""
    cmd = [sys.executable, "-m", "ridgefill", "eval", "splice", "--model", str(mapped), "--lengths", "256",
           "--tail", "64", "--items", "1", "--needle-tasks", "single/noise/number", "--docs", "1", "--window", "64",
           "--out", str(tmp_path), "--json", "--quiet", "--no-plots", "--threads", "1", "--bootstrap", "200"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    recs = {(x["task"], x["variant"]): x for x in doc["records"]}
    assert {v for _, v in recs} == {"exact", "exact-cut", "ridge", "ridge-k", "ridge-v", "ridge-knorm", "ridge-kv"}
    assert recs["loss", "ridge-kv"]["loss_all"] == recs["loss", "exact-cut"]["loss_all"]
    assert recs["loss", "ridge"]["loss_all"] != recs["loss", "exact-cut"]["loss_all"]
    (row,) = [x for x in doc["splice_shares"] if x["metric"] == "loss_all"]
    assert set(row) >= {"gap", "k", "v", "knorm", "kv"} and row["kv"]["share"] == pytest.approx(1.0)
    assert "share knorm" in (tmp_path / "splices.md").read_text()


@pytest.mark.slow
def test_quick_profile_end_to_end(mapped, tmp_path):
    """`eval sweep --profile quick`: the CI run of the suite (about 2.5 minutes on 2 quiet cores)."""
    import time

    from ridgefill.cli import commands as cli

    t0 = time.monotonic()
    assert cli.main(["eval", "sweep", "--profile", "quick", "--model", str(mapped), "--out", str(tmp_path),
                          "--quiet"]) == 0
    print(f"quick profile: {time.monotonic() - t0:.0f} s")
    doc = json.loads((tmp_path / "results.json").read_text())
    q = profiles.QUICK
    assert doc["run"]["n_run"] == (len(q.needle_tasks) * q.needle_items + q.loss_items) * 3
    groups = {r["group"] for r in doc["summary"]}
    assert groups >= {*q.needle_tasks, "all", "loss"}


def test_a_sweep_measures_tasks_round_robin():
    """A sweep stopped part-way has measured every needle task (and length) alike."""
    from types import SimpleNamespace

    from ridgefill.evals.runner import interleaved

    items = [SimpleNamespace(task=t, n_tokens=n, id=f"{t}{n}{i}") for t, n, k in (("a", 1, 3), ("b", 1, 2), ("a", 2, 1))
             for i in range(k)]
    assert [it.id for it in interleaved(items)] == ["a10", "b10", "a20", "a11", "b11", "a12"]


def test_items_of_every_kind_round_trip_through_json(tmp_path):
    """Tokens come back int32, row pairs as tuples; a needle file from before `needles` still loads."""
    toks = np.arange(7, dtype=np.int32)
    made = {
        "needle": [needle.NeedleItem(toks, ["42"], "k", (2, 4), needles=[(2, 4)], id="n0")],
        "loss": [loss.LossItem("d0", "doc", toks)],
        "ruler": [RulerItem(toks, ["a"], "vt", 16, [(1, 3), (5, 6)], 8, id="r0")],
    }
    for kind, its in made.items():
        items_io.save(tmp_path / f"{kind}.json", kind, its, {})
        got_kind, back, _ = items_io.load(tmp_path / f"{kind}.json")
        assert got_kind == kind and back[0].to_dict() == its[0].to_dict()
        assert back[0].tokens.dtype == np.int32 and np.array_equal(back[0].tokens, toks)
    _, (r,), _ = items_io.load(tmp_path / "ruler.json")
    assert r.evidence == [(1, 3), (5, 6)] and r.n_tokens == 16
    _, (n,), _ = items_io.load(tmp_path / "needle.json")
    assert n.needle_rows == (2, 4) and n.needles == [(2, 4)] and n.n_tokens == 7
    old = made["needle"][0].to_dict()
    del old["needles"]
    assert needle.NeedleItem.from_dict(old).needles == []
