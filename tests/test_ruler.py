"""RULER's task family (ridgefill.evals.ruler): metrics, items, averages, and a run on SmolLM2."""

import dataclasses
import json
import re
from collections import Counter

import numpy as np
import pytest

from ridgefill.errors import InputError
from ridgefill.evals import items as items_io
from ridgefill.evals import report, stats
from ridgefill.evals.ruler import MISSING, TASKS, RulerItem, tasks
from ridgefill.evals.ruler.metrics import postprocess, string_match_all, string_match_part

RULER_13 = ("niah_single_1", "niah_single_2", "niah_single_3", "niah_multikey_1", "niah_multikey_2",
            "niah_multikey_3", "niah_multivalue", "niah_multiquery", "vt", "cwe", "fwe", "qa_1", "qa_2")


# ---- the task table and the metrics (fast) -------------------------------------------------

def test_the_tasks_are_rulers_thirteen_less_the_two_qa_sets():
    assert TASKS + tuple(MISSING) == RULER_13
    with pytest.raises(InputError, match="SQuAD"):
        tasks.get("qa_1")
    with pytest.raises(InputError, match="unknown RULER task"):
        tasks.get("niah_single_4")
    assert {t.name: t.n_new for t in tasks.TASK_LIST if not t.name.startswith("niah")} == {"vt": 30, "cwe": 120, "fwe": 50}
    assert all(t.metric == "all" for t in tasks.TASK_LIST)


def test_string_match_all_scores_the_share_of_answers_found():
    assert string_match_all(" 1234567 and 7654321.", ["1234567", "7654321"]) == 100.0
    assert string_match_all("1234567", ["1234567", "7654321", "1111111", "2222222"]) == 25.0
    assert string_match_all("The words are APPLE, pear", ["apple", "Pear", "plum"]) == pytest.approx(200 / 3)
    assert string_match_all("", ["x"]) == 0.0


def test_string_match_part_scores_any_answer():
    assert string_match_part("Paris, France", ["paris", "lyon"]) == 100.0
    assert string_match_part("Berlin", ["paris", "lyon"]) == 0.0


def test_predictions_are_postprocessed_as_ruler_does():
    assert postprocess("  a\tb\x00c\n ") == "a\nb\nc"
    assert string_match_all("ab\x01cd", ["abcd"]) == 0.0  # a control character breaks a match, as in RULER


def test_evidence_share():
    item = RulerItem(np.arange(100, dtype=np.int32), ["x"], "vt", 128, [(10, 20), (90, 100)], 30)
    assert item.evidence_in(0, 100) == 1.0
    assert item.evidence_in(4, 90) == 0.5
    assert item.evidence_in(15, 95) == pytest.approx(10 / 20)
    assert item.n_tokens == 128 and item.prompt_tokens == 100


def test_stratified_bootstrap_averages_strata_alike():
    iv = stats.stratified_paired_bootstrap([[10.0, 10.0], [0.0, 0.0, 0.0, 0.0]], n_boot=200)
    assert (iv.mean, iv.lo, iv.hi) == (5.0, 5.0, 5.0)  # the mean of stratum means, not of items
    rng = np.random.default_rng(0)
    wide = stats.stratified_paired_bootstrap([rng.normal(0, 10, 12) for _ in range(11)], n_boot=2000)
    assert wide.lo < wide.mean < wide.hi and wide.n_items == 132
    with pytest.raises(InputError):
        stats.stratified_paired_bootstrap([[1.0], []])


def _rec(task, item, variant, score, filled=1.0, split=16):
    return {"task": "ruler", "group": task, "item": f"{task}/{item}", "cluster": f"{task}/{item}",
            "variant": variant, "split": None if variant == "exact" else split, "sinks": 4, "tail": 1024,
            "n_tokens": 4096, "score": score, "evidence_filled": filled}


def test_ruler_summary_rows_average_tasks_and_keep_the_filled_subset():
    recs = []
    for i in range(3):
        recs += [_rec("vt", i, "exact", 100), _rec("vt", i, "ridge", 40), _rec("vt", i, "identity", 20)]
        filled = 1.0 if i < 2 else 0.5
        recs += [_rec("cwe", i, v, s, filled) for v, s in (("exact", 50), ("ridge", 50), ("identity", 30))]
    rows = {r["group"]: r for r in report.summarize(recs, n_boot=300)}
    assert set(rows) == {"vt", "cwe", "average", "filled/vt", "filled/cwe", "filled/average"}
    avg = rows["average"]
    assert avg["means"]["exact"]["mean"] == 75.0 and avg["means"]["ridge"]["mean"] == 45.0
    assert avg["diffs"]["ridge-exact"]["mean"] == -30.0 and avg["tasks"] == ["vt", "cwe"]
    assert rows["filled/cwe"]["means"]["exact"]["n"] == 2
    assert "| average | 16 | 1024 | 4096 |" in report.markdown(list(rows.values()))


def test_an_average_covers_only_tasks_every_variant_measured():
    recs = [_rec("vt", 0, "exact", 100), _rec("vt", 0, "ridge", 0), _rec("cwe", 0, "exact", 50)]
    (avg,) = [r for r in report.summarize(recs, n_boot=100) if r["group"] == "average"]
    assert avg["tasks"] == ["vt"] and avg["means"]["exact"]["mean"] == 100.0


def test_splices_are_attributed_task_by_task():
    from ridgefill.evals import attribution

    recs = []
    for task, fill in (("vt", 20), ("cwe", 50)):
        for i in range(4):
            recs += [_rec(task, i, "exact-cut", 60 + i), _rec(task, i, "ridge", fill + i), _rec(task, i, "ridge-k", 60 + i),
                     _rec(task, i, "ridge-v", fill + i)]
    rows = {r["group"]: r for r in attribution.shares(recs, n_boot=200)}
    assert set(rows) == {"vt", "cwe"} and rows["vt"]["gap"]["mean"] == -40.0
    assert rows["vt"]["k"]["share"] == pytest.approx(1.0) and rows["vt"]["v"]["share"] == pytest.approx(0.0)
    assert "| vt | score |" in attribution.markdown(list(rows.values()))


def test_eval_ruler_command_and_tune_flags():
    from ridgefill.cli.commands import build_parser

    args = build_parser().parse_args(["eval", "ruler", "--ruler-tasks", "vt,cwe", "--items", "3"])
    assert args.eval_tasks == ("ruler",) and args.ruler_tasks == ("vt", "cwe")
    from ridgefill.cli.eval import plan_from_args

    plan = plan_from_args(args)
    assert (plan.tasks, plan.ruler_tasks, plan.ruler_items) == (("ruler",), ("vt", "cwe"), 3)
    splice = plan_from_args(build_parser().parse_args(["eval", "splice", "--tasks", "ruler"]))
    assert splice.tasks == ("ruler",)
    from ridgefill.tune.operating_point import plan_tasks

    tune = build_parser().parse_args(["tune", "base.gguf", "--budget-ruler", "3"])
    assert plan_tasks(tune) == ("needle", "loss", "ruler") and tune.budget_ruler == 3.0
    assert plan_tasks(build_parser().parse_args(["tune", "b.gguf", "--ruler-only"])) == ("ruler",)


def test_tune_meets_a_ruler_budget():
    from ridgefill.tune.frontier import choose, meets

    def row(split, bound, ruler_gap):
        return {"split": split, "sinks": 4, "tail": 1024, "n_tokens": 4096, "bound_ridge": bound,
                "ruler": {"exact": 80.0, "ridge": 80.0 + ruler_gap},
                "ruler_diff": {"ridge-exact": {"mean": ruler_gap, "lo": ruler_gap - 5, "hi": ruler_gap + 5}}}

    rows = [row(12, 1.5, -12.0), row(16, 1.27, -4.0)]
    assert meets(rows[1], 5, 0.02, budget_ruler=5, need_needles=False)
    assert not meets(rows[0], 5, 0.02, budget_ruler=5, need_needles=False)
    assert not meets(rows[1], 5, 0.02, need_needles=False)  # no needles, no RULER budget: nothing judged
    assert choose(rows, 5, 0.02, budget_ruler=5)[0]["split"] == 16
    assert choose(rows, 5, 0.02, budget_ruler=15)[0]["split"] == 12
    assert choose(rows, 5, 0.02, budget_ruler=1)[0] is None


def test_bad_plans_are_refused_before_anything_runs():
    from ridgefill.evals import profiles, runner
    from ridgefill.evals.session import DEFAULT_VARIANTS

    plan = profiles.QUICK.with_(tasks=("ruler",))
    runner.check_plan(plan, DEFAULT_VARIANTS)
    for bad in (dict(ruler_tasks=("qa_2",)), dict(ruler_tasks=("bogus",)), dict(ruler_items=0), dict(lengths=(0,))):
        with pytest.raises(InputError):
            runner.check_plan(dataclasses.replace(plan, **bad), DEFAULT_VARIANTS)


def test_the_frontier_report_puts_ruler_beside_speed_and_the_seeds_trade():
    from ridgefill.tune import frontier_report

    row = {"split": 16, "sinks": 4, "tail": 1024, "n_tokens": 4096, "bound_ridge": 1.29, "bound_identity": 1.31,
           "speedup_ridge": 1.27, "speedup_range_ridge": [1.25, 1.31], "ruler_tasks": list(TASKS),
           "ruler": {"exact": 80.0, "identity": 70.0, "ridge": 76.0}, "ruler_ns": {"exact": 66, "identity": 66, "ridge": 66},
           "ruler_diff": {"ridge-exact": {"mean": -4.0, "lo": -7.5, "hi": -0.5}}}
    md = frontier_report.markdown([row], "t")
    assert "RULER average over 11 tasks" in md and "1.25-1.31x TTFT for -1.2 to -1.4 RULER points" in md
    assert "| 16 | 1024 | 4096 | 1.27x [1.25, 1.31] (bound 1.29x) | 80.0 / 70.0 / 76.0 (66/66/66) | -4.0 [-7.5, -0.5] |" in md
    assert "needles exact" not in md  # RULER alone: no empty needle table


# ---- items with the GGUF's own tokenizer (slow: loads SmolLM2) --------------------------------

@pytest.fixture(scope="module")
def items_4k(smollm2):
    return {name: tasks.generate(smollm2, name, 4096, 2, seed=0) for name in TASKS}


@pytest.mark.slow
@pytest.mark.parametrize("target", [1024, 4096])
def test_items_are_well_formed(smollm2, items_4k, target):
    """Every answer lies in the text at a recorded evidence span; the prompt plus the generation
    budget fits the target, and one more haystack unit (sentence, word, distractor) would not."""
    from ridgefill.evals.ruler.prompt import Tokens

    toks = Tokens(smollm2)
    for name in TASKS:
        items = items_4k[name] if target == 4096 else tasks.generate(smollm2, name, target, 2, seed=0)
        for item in items:
            assert item.target == target and item.prompt_tokens + item.n_new <= target, item.id
            make, _, most = tasks._builder(tasks.get(name), toks, item.meta["seed"], target)
            units = item.meta["haystack_units"]
            assert units == most or toks.count(make(units + 1)[0]) + item.n_new > target, item.id
            pieces = [smollm2.detokenize(item.tokens[a:b]) for a, b in item.evidence]
            for answer in item.answers:
                assert any(answer in p for p in pieces), (item.id, answer)
            assert all(0 <= a < b <= item.prompt_tokens for a, b in item.evidence)
            prompt = smollm2.detokenize(item.tokens)
            assert all(answer in prompt for answer in item.answers)


@pytest.mark.slow
def test_items_follow_rulers_definitions(smollm2, items_4k):
    text = {name: smollm2.detokenize(items_4k[name][0].tokens) for name in TASKS}
    single = items_4k["niah_single_1"][0]
    assert text["niah_single_1"].startswith("A special magic number is hidden")
    assert text["niah_single_1"].endswith("mentioned in the provided text is")
    assert len(single.answers) == 1 and re.fullmatch(r"\d{7}", single.answers[0])
    assert re.fullmatch(r"[0-9a-f-]{36}", items_4k["niah_single_3"][0].answers[0])
    assert text["niah_multikey_1"].count("One of the special magic numbers for") == 4
    assert text["niah_multikey_2"].count("One of the special magic numbers for") > 100  # a haystack of needles
    assert len(items_4k["niah_multivalue"][0].answers) == 4 and "What are all" in text["niah_multivalue"]
    assert text["niah_multiquery"].count(", and ") >= 1 and len(items_4k["niah_multiquery"][0].answers) == 4
    vt = items_4k["vt"][0]
    chain = re.findall(r"VAR ([A-Z]{5}) = (?:VAR ([A-Z]{5})|(\d{5}))", text["vt"])
    assert [c[0] for c in chain] == vt.answers and all(c[1] == p for c, p in zip(chain[1:], vt.answers))
    assert len(re.findall(r"VAR [A-Z]{3} = ", text["vt"])) == 5  # the worked example's chain
    cwe = items_4k["cwe"][0]
    listed = Counter(re.findall(r"\d+\. (\S+)", text["cwe"].split("\n", 2)[-1].rsplit("Question", 1)[0]))
    assert {w for w, n in listed.items() if n == 30} == set(cwe.answers) and len(cwe.answers) == 10
    fwe = items_4k["fwe"][0]
    counts = Counter(text["fwe"].split("coded words.", 1)[1].split("\nQuestion")[0].split())
    assert [w for w, _ in counts.most_common(4)] == ["...", *fwe.answers]


def test_the_question_moves_before_the_context_and_the_prompt_ends_naming_nothing():
    from ridgefill.evals.ruler import niah, vt
    from ridgefill.evals.ruler.prompt import frame

    head, tail = frame(niah.TEMPLATE, niah.ANSWER_PREFIX, niah.ASKED_PREFIX)
    assert head + "{context}" + tail == niah.TEMPLATE + niah.ANSWER_PREFIX  # RULER's, untouched
    head, tail = frame(vt.TEMPLATE, vt.ANSWER_PREFIX, vt.ASKED_PREFIX, "start")
    assert head.endswith("Question: Find all variables that are assigned the value {query} in the text below.\n")
    assert "{query}" not in tail and tail.startswith("\nAnswer:")
    with pytest.raises(InputError, match="question place"):
        frame(vt.TEMPLATE, vt.ANSWER_PREFIX, vt.ASKED_PREFIX, "middle")


@pytest.mark.slow
def test_question_first_items_draw_the_same_and_name_their_keys_only_before_the_context(smollm2, items_4k):
    """`--ruler-question start`: the item's draws (answers, keys, haystack) are the RULER item's; the query
    (a niah key, vt's value) is named before the first evidence row and nowhere after the last one."""
    for name in TASKS:
        end = items_4k[name][0]
        start = tasks.build(smollm2, name, 4096, 0, 0, question="start")
        assert start.answers == end.answers and start.id == end.id + "/q-start", name
        assert start.prompt_tokens + start.n_new <= 4096 and start.meta["question"] == "start"
        if name.startswith("niah") or name == "vt":
            text = smollm2.detokenize(end.tokens)  # the question is the last one the RULER prompt asks
            query = re.findall(r"for (.+?) mentioned in the provided text\?|the value (\d+) in the text above", text)
            query = [g for g in query[-1] if g][0].split(", ")[0]
            first, last = start.evidence[0][0], start.evidence[-1][1]
            assert query in smollm2.detokenize(start.tokens[:first]), name
            assert query not in smollm2.detokenize(start.tokens[last:]), name
    with pytest.raises(InputError, match="question place"):
        tasks.generate(smollm2, "vt", 4096, 1, seed=0, question="middle")


@pytest.mark.slow
def test_items_are_seeded_and_round_trip(smollm2, items_4k, tmp_path):
    again = tasks.generate(smollm2, "niah_multivalue", 4096, 2, seed=0)
    assert all(np.array_equal(a.tokens, b.tokens) for a, b in zip(again, items_4k["niah_multivalue"]))
    other = tasks.generate(smollm2, "niah_multivalue", 4096, 1, seed=1)[0]
    assert not np.array_equal(other.tokens[:200], items_4k["niah_multivalue"][0].tokens[:200]) or \
        other.answers != items_4k["niah_multivalue"][0].answers
    path = items_io.save(tmp_path / "r.json", "ruler", items_4k["vt"], {"seed": 0})
    kind, loaded, _ = items_io.load(path)
    assert kind == "ruler" and loaded[1].evidence == items_4k["vt"][1].evidence
    assert np.array_equal(loaded[1].tokens, items_4k["vt"][1].tokens)


@pytest.mark.slow
def test_a_target_too_short_is_refused(smollm2):
    with pytest.raises(InputError, match="exceeds"):
        tasks.build(smollm2, "cwe", 256, 0, 0)


@pytest.mark.slow
def test_ruler_end_to_end_on_the_smallest_model(smollm2_path, tmp_path):
    """`eval ruler` on SmolLM2 with identity maps at its demo split: every task's items built, answered, scored and
    summarized, exact and ridge (the fill path). That a tail covering the prompt gives exact's answers in every mode
    is the runner's, tested once for all tasks (test_evals.py::test_tail_covering_the_prompt_gives_identical_results)."""
    from ridgefill.bench import synth
    from ridgefill.cli import commands as cli

    mapped = synth.identity_maps(smollm2_path, 18, tmp_path / "maps.gguf")
    out = tmp_path / "out"
    assert cli.main(["eval", "ruler", "--model", str(mapped), "--lengths", "1024", "--tail", "256", "--modes", "exact",
                     "ridge", "--items", "1", "--out", str(out), "--quiet", "--no-plots", "--threads", "2",
                     "--bootstrap", "200"]) == 0
    doc = json.loads((out / "results.json").read_text())
    recs = doc["records"]
    assert len(recs) == len(TASKS) * 2
    assert {r["group"] for r in recs} == set(TASKS)
    assert all(0 <= r["score"] <= 100 and 0 <= r["evidence_filled"] <= 1 for r in recs)
    assert all(r["n_filled"] == 0 for r in recs if r["variant"] == "exact")
    assert all(r["n_filled"] > 0 for r in recs if r["variant"] == "ridge")
    groups = {(r["group"], r["tail"]) for r in doc["summary"]}
    assert ("average", 256) in groups and {(t, 256) for t in TASKS} <= groups
    assert "| average |" in (out / "summary.md").read_text()


def test_a_saved_item_file_serves_any_count_since_items_are_seeded_by_index(tmp_path):
    """RULER's item i depends on its index alone: 12 saved serve a run of 6 (the first six), and 3 saved grow to 5
    by making only items 3 and 4; needle items (depths spread over the count) still refuse another count."""
    def item(i):
        return RulerItem(np.arange(i + 1, dtype=np.int32), [str(i)], "vt", 1024, [(0, 1)], 30, f"vt/N1024/{i}")

    made = []

    def make(start, n):
        made.append((start, n))
        return [item(i) for i in range(start, n)]

    params = {"task": "vt", "n_tokens": 1024, "seed": 0}
    path = tmp_path / "ruler-vt-N1024.json"
    got = items_io.load_or_make(path, "ruler", {**params, "n_items": 3}, lambda s: make(s, 3), per_index=True)
    assert [it.id for it in got] == [f"vt/N1024/{i}" for i in range(3)] and made == [(0, 3)]
    got = items_io.load_or_make(path, "ruler", {**params, "n_items": 5}, lambda s: make(s, 5), per_index=True)
    assert [it.answers for it in got] == [[str(i)] for i in range(5)] and made[-1] == (3, 5)
    assert len(items_io.load(path)[1]) == 5
    got = items_io.load_or_make(path, "ruler", {**params, "n_items": 2}, lambda s: make(s, 2), per_index=True)
    assert [it.id for it in got] == ["vt/N1024/0", "vt/N1024/1"] and len(made) == 2
    with pytest.raises(items_io.ItemsMismatch):  # another seed is other items
        items_io.load_or_make(path, "ruler", {**params, "seed": 1, "n_items": 2}, lambda s: make(s, 2), per_index=True)
    with pytest.raises(items_io.ItemsMismatch):
        items_io.load_or_make(path, "ruler", {**params, "n_items": 2}, lambda: [])
