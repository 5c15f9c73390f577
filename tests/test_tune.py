"""`ridgefill tune`: the choice of an operating point from measured rows, and the command end to end."""

import json
import subprocess
import sys

import pytest

from ridgefill.tune import frontier, frontier_report
from ridgefill import format as fmt
from ridgefill.errors import InputError


def _row(split, tail, n, exact, ridge, bound, loss_gap=None, measured=None, route=0.0):
    r = {"split": split, "sinks": 4, "tail": tail, "n_tokens": n, "route": route, "bound_ridge": bound,
         "bound_identity": bound + 0.01,
         "needle": {"exact": exact, "identity": 0.0, "ridge": ridge}, "needle_n": 24, "needle_diff": {}}
    if loss_gap is not None:
        r["loss_diff"] = {"ridge-exact": {"mean": loss_gap, "lo": loss_gap - 0.01, "hi": loss_gap + 0.01}}
        r["loss_distant"], r["loss_docs"], r["loss_tokens"] = {"exact": 1.0, "ridge": 1.0 + loss_gap}, 6, 20
    if measured is not None:
        r["speedup_ridge"], r["speedup_range_ridge"] = measured, [measured - 0.05, measured + 0.05]
    return r


def test_choose_takes_the_fastest_configuration_within_both_budgets():
    rows = [_row(15, 1024, 4096, 80, 40, 1.44), _row(17, 1024, 4096, 80, 77, 1.36, loss_gap=0.05),
            _row(18, 1024, 4096, 80, 76, 1.32, loss_gap=0.01), _row(20, 1024, 4096, 80, 80, 1.25, loss_gap=0.0)]
    chosen, best = frontier.choose(rows, budget_needles=5, budget_loss=0.02)
    assert chosen["split"] == 18  # 17 is faster and within the needle budget, but over the loss budget
    assert frontier.choose(rows, 5, 0.1)[0]["split"] == 17
    assert frontier.choose(rows, 0, 0.1)[0]["split"] == 20
    assert best["split"] == 20


def test_choose_prefers_a_measured_speedup_over_the_bound():
    rows = [_row(17, 1024, 4096, 80, 80, 1.36, measured=1.10), _row(18, 1024, 4096, 80, 80, 1.32, measured=1.25)]
    assert frontier.choose(rows, 5, 0.02)[0]["split"] == 18


def test_a_configuration_must_meet_the_budget_at_every_length():
    rows = [_row(17, 1024, 4096, 80, 80, 1.36), _row(17, 1024, 8192, 80, 60, 1.49),
            _row(19, 1024, 4096, 80, 80, 1.28), _row(19, 1024, 8192, 80, 78, 1.40)]
    chosen, _ = frontier.choose(rows, 5, 0.02)
    assert (chosen["split"], chosen["n_tokens"]) == (19, 8192)  # the row at the longest prompt


def test_a_routed_configuration_competes_with_the_splits():
    """Routing 5 % at split 15 keeps the needles that split 15 loses, at a speed between 15 and 17."""
    rows = [_row(15, 1024, 4096, 80, 40, 1.44), _row(15, 1024, 4096, 80, 78, 1.40, route=0.05),
            _row(17, 1024, 4096, 80, 77, 1.36), _row(15, 1024, 4096, 80, 79, 1.30, route=0.10)]
    chosen, _ = frontier.choose(rows, 5, 0.02)
    assert (chosen["split"], chosen["route"]) == (15, 0.05)
    assert (frontier.choose(rows[2:], 5, 0.02)[0]["split"], frontier.choose(rows[2:], 5, 0.02)[0]["route"]) == (17, 0.0)
    assert "| 15 | 1024 | 5 % | 4096 |" in frontier_report.markdown(rows)


def test_a_selecting_configuration_is_a_configuration_of_its_own():
    """Selecting 10 % at split 12 keeps the needles split 12 loses: chosen over the plain split, reported with its
    share, its variant `ridge^10` and a bound that pays the probe and the selected rows."""
    from ridgefill.bench import costmodel

    sel = {**_row(12, 1024, 4096, 80, 78, 1.41), "select": 0.1}
    rows = [_row(12, 1024, 4096, 80, 50, 1.47), sel, _row(16, 1024, 4096, 80, 79, 1.27)]
    chosen, _ = frontier.choose(rows, 5, 0.02)
    assert (chosen["split"], chosen["select"]) == (12, 0.1)
    assert "| 12 | 1024 | 0 % / 10 % | 4096 |" in frontier_report.markdown(rows)
    pt = frontier.Point(12, 4, 1024, 4096, select=0.1)
    assert pt.ridge == "ridge^10"
    row = frontier.row_for(pt, [], costmodel.SMOLLM2, None)
    assert row["bound_ridge"] < frontier.row_for(frontier.Point(12, 4, 1024, 4096), [], costmodel.SMOLLM2, None)["bound_ridge"]


def test_the_frontier_table_has_as_many_columns_as_its_header():
    """A separator row one cell short and the table does not render."""
    for rows in ([_row(15, 1024, 4096, 80, 40, 1.44)], [_row(15, 1024, 4096, 80, 78, 1.40, route=0.05)]):
        head, sep, row = frontier_report.markdown(rows).splitlines()[-3:]
        assert head.count("|") == sep.count("|") == row.count("|")


def test_routed_rows_read_the_routed_variant():
    from ridgefill.bench.costmodel import SMOLLM2

    summary = [{"task": "needle", "metric": "score", "group": "all", "split": 17, "sinks": 4, "tail": 1024,
                "n_tokens": 4096, "means": {v: {"mean": m, "n": 24} for v, m in
                                            (("exact", 80.0), ("identity", 10.0), ("ridge", 40.0), ("ridge@5", 70.0))},
                "diffs": {"ridge@5-ridge": {"mean": 30.0, "lo": 10.0, "hi": 50.0},
                          "ridge@5-exact": {"mean": -10.0, "lo": -20.0, "hi": 0.0},
                          "ridge-exact": {"mean": -40.0, "lo": -60.0, "hi": -20.0}}}]
    plain = frontier.row_for(frontier.Point(17, 4, 1024, 4096), summary, SMOLLM2, None)
    routed = frontier.row_for(frontier.Point(17, 4, 1024, 4096, 0.05), summary, SMOLLM2, None)
    assert plain["needle"]["ridge"] == 40.0 and routed["needle"]["ridge"] == 70.0
    assert routed["needle_diff"]["ridge-exact"]["mean"] == -10.0 and routed["needle_diff"]["ridge-plain"]["mean"] == 30.0
    assert plain["needle_diff"]["ridge-exact"]["mean"] == -40.0 and "ridge-plain" not in plain["needle_diff"]
    assert routed["bound_ridge"] < plain["bound_ridge"]


def test_no_configuration_meets_the_budget():
    rows = [_row(15, 1024, 4096, 80, 10, 1.44), _row(17, 1024, 4096, 80, 50, 1.36)]
    chosen, best = frontier.choose(rows, 5, 0.02)
    assert chosen is None and best["split"] == 17
    with pytest.raises(InputError, match="--budget-needles must be >= 0"):
        frontier.check_budgets(-1, 0.02)
    with pytest.raises(InputError, match="--budget-loss"):
        frontier.check_budgets(5, float("nan"))


def test_report_shows_intervals_and_both_speeds(tmp_path):
    r = _row(17, 1024, 4096, 80, 60, 1.36, loss_gap=0.05, measured=1.3)
    r["needle_diff"] = {"ridge-identity": {"mean": 20.0, "lo": 5.0, "hi": 35.0}}
    md = frontier_report.markdown([r], "t")
    assert "1.30x [1.25, 1.35] (bound 1.36x)" in md and "+20.0 [+5.0, +35.0]" in md and "+0.050 [+0.040, +0.060]" in md
    assert "– (bound 1.37x)" in md  # identity was not timed
    import matplotlib.pyplot as plt

    assert plt.imread(frontier_report.plot([r], tmp_path / "f.png")).shape[:2] == (540, 840)  # (7, 4.5) at 120 dpi
    fig = frontier_report.figure([r], "t")
    lines = {l.get_label(): (list(l.get_xdata()), list(l.get_ydata())) for l in fig.axes[0].get_lines()}
    assert lines["ridge, N=4096, T=1024"] == ([1.3], [0.75])  # measured speed-up; 60 of exact's 80
    assert lines["identity, N=4096, T=1024"] == ([1.37], [0.0])  # not timed: the bound
    assert lines["exact"][1] == [1.0, 1.0] and fig.axes[0].get_title() == "t"
    plt.close(fig)


@pytest.mark.slow
def test_tune_end_to_end_on_smollm2(smollm2_path, tmp_path):
    """Two candidate splits from one capture, quick needles and distant-token loss at 1K, a generous
    budget: the written GGUF carries the chosen split, sinks and tail; a rerun resumes everything."""
    work, out = tmp_path / "work", tmp_path / "tuned.gguf"
    cmd = [sys.executable, "-m", "ridgefill", "tune", str(smollm2_path), "--splits", "24", "26", "--tails", "256",
           "--lengths", "1024", "--needle-tasks", "single/noise/number", "--items", "1", "--docs", "2",
           "--tokens", "2048", "--budget-needles", "100", "--budget-loss", "100", "--threads", "2", "--work-dir", str(work), "--quiet",
           "--routes", "10", "-o", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads((work / "frontier.json").read_text())
    assert sorted((row["split"], row["route"]) for row in doc["rows"]) == [(24, 0), (24, 0.1), (26, 0), (26, 0.1)]
    for row in doc["rows"]:
        assert set(row["needle"]) == {"exact", "identity", "ridge"} and row["needle_n"] == 1
        assert set(row["loss_distant"]) == {"exact", "identity", "ridge"} and "ridge-exact" in row["loss_diff"]
        assert ("ridge-plain" in row["needle_diff"]) == (row["route"] > 0)
    chosen = max(doc["rows"], key=frontier.speedup)  # with these budgets every row qualifies
    meta = fmt.inspect(out)["metadata"]
    assert (meta["split_layer"], meta["sink_rows"], meta["tail_rows"]) == (chosen["split"], 4, 256)
    assert f"chosen: split {chosen['split']}, sinks 4, tail 256, routed {100 * chosen['route']:g} %" in r.stdout
    md = (work / "frontier.md").read_text()
    assert (work / "frontier.png").stat().st_size > 0 and "| 24 | 256 | 0 % | 1024 |" in md and "| 24 | 256 | 10 % | 1024 |" in md
    # a routed operating point is written as the GGUF's default share, which the fork then routes with
    routed_out = frontier.write_tuned(smollm2_path, work, next(r for r in doc["rows"] if r["route"] > 0), tmp_path / "r.gguf")
    from ridgefill.runtime import Model

    m = Model(routed_out)
    assert m.rf_has_route and m.rf_route_fraction == pytest.approx(0.1)
    routed_maps = frontier.write_tuned(smollm2_path, work, next(r for r in doc["rows"] if r["route"] > 0),
                                       tmp_path / "r-maps.gguf", maps_only=True)  # the same, beside the base
    m = Model(smollm2_path, maps=routed_maps)
    assert m.rf_has_route and m.rf_route_fraction == pytest.approx(0.1)
    again = subprocess.run(cmd[:-2], capture_output=True, text=True, timeout=900)
    assert again.returncode == 0 and "capture" not in again.stderr, again.stderr[-2000:]
    assert "eval: 0 measured, 21 resumed" in again.stderr  # (1 item + 2 documents) x 7 variant-splits
    report = (work / "frontier.md").read_text()
    only = subprocess.run(cmd[:-2] + ["--report-only"], capture_output=True, text=True, timeout=300)
    assert only.returncode == 0 and "eval:" not in only.stderr, only.stderr[-2000:]
    assert (work / "frontier.md").read_text() == report  # the store's records, nothing measured again
    timed = subprocess.run(cmd[:-2] + ["--report-only", "--measure", "--runs", "1"], capture_output=True, text=True,
                           timeout=600)
    assert timed.returncode == 0 and "eval:" not in timed.stderr, timed.stderr[-2000:]
    rows = json.loads((work / "frontier.json").read_text())["rows"]
    assert all(r["speedup_ridge"] > 0 and r["speedup_identity"] > 0 for r in rows)  # timed, quality from the store
    assert [r["needle"] for r in rows] == [r["needle"] for r in doc["rows"]]
    recorded = frontier.recorded_commands(work)  # the measuring run, replaced by its timed extension
    assert len(recorded) == 1 and recorded[0].endswith("--measure --runs 1") and "report-only" not in recorded[0]
    bad = subprocess.run(cmd[:-2] + ["--tokens", "4096"], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 1 and "use another work directory" in bad.stderr
    timed_choice = max(rows, key=frontier.speedup)  # now by the measured speed-ups, which may reorder the rows
    for f in (work / "fit").glob(f"s{timed_choice['split']}.*"):  # a fresh clone of the report: the store, no maps
        f.unlink()
    picked = subprocess.run(cmd + ["--report-only"], capture_output=True, text=True, timeout=600)
    assert picked.returncode == 0 and "capture" in picked.stderr and "eval:" not in picked.stderr, picked.stderr[-2000:]
    assert fmt.inspect(out)["metadata"]["split_layer"] == timed_choice["split"]


def test_a_sweep_left_part_way_shows_each_modes_count_and_is_judged_paired():
    """Exact measured 16 items, the fill modes 15: the table says so, and the budget reads the
    paired difference (the 15 items both measured), not a difference of means over unequal sets."""
    r = _row(18, 1024, 4096, 68.8, 68.3, 1.32)
    r["needle_ns"] = {"exact": 16, "identity": 15, "ridge": 15}
    r["needle_diff"] = {"ridge-exact": {"mean": -6.0, "lo": -20.0, "hi": 5.0}}
    assert "(n=16/15/15)" in frontier_report.markdown([r])
    assert frontier.choose([r], 5, 0.02)[0] is None and frontier.choose([r], 6, 0.02)[0]["split"] == 18
    r["needle_ns"] = {"exact": 15, "identity": 15, "ridge": 15}
    assert "(n=15)" in frontier_report.markdown([r])


def test_the_report_states_the_command_that_measures_it(tmp_path):
    from ridgefill.tune.command_line import command_line

    base, work = tmp_path / "models" / "m.gguf", tmp_path / "work"
    argv = ["tune", str(base), "--work-dir", "elsewhere", "--title", "x", "--work-dir", str(work), "--splits", "15",
            "22", "--quiet", "--report-only", "-o", "x.gguf", "--output=y.gguf", "--budget-loss", "-1", "--title", "a b"]
    cmd = command_line(argv, base, work)  # bench/frontier's --work-dir and --title, then the caller's
    assert cmd.startswith("ridgefill tune m.gguf --work-dir ") and cmd.endswith("--splits 15 22 --budget-loss -1 --title 'a b'")
    assert cmd.count("--work-dir") == cmd.count("--title") == 1 and "elsewhere" not in cmd
    assert "quiet" not in cmd and "report-only" not in cmd and ".gguf" not in cmd.replace("m.gguf", "")
    assert "(n=" in frontier_report.markdown([_row(15, 1024, 4096, 80, 40, 1.44)], "t", cmd) and f"Command: `{cmd}`" in \
        frontier_report.markdown([_row(15, 1024, 4096, 80, 40, 1.44)], "t", cmd)


def test_the_loss_table_shows_each_mode_and_its_counts():
    r = _row(17, 1024, 4096, 80, 60, 1.36, loss_gap=0.05)
    r["loss_distant"]["identity"] = 1.4
    r["loss_diff"]["ridge-identity"] = {"mean": -0.35, "lo": -0.5, "hi": -0.2}
    r["loss_all_diff"] = {"ridge-exact": {"mean": 0.02, "lo": 0.01, "hi": 0.03}}
    lines = frontier_report.markdown([r, _row(18, 1024, 4096, 80, 70, 1.32)]).splitlines()
    head, sep, row = lines[-3:]
    assert head.count("|") == sep.count("|") == row.count("|") and row.startswith("| 17 | 1024 | 4096 |")
    assert "1.000 / 1.400 / 1.050 (6, 20)" in row and "-0.350 [-0.500, -0.200]" in row and "+0.020 [+0.010, +0.030]" in row
    assert not any(line.startswith("| 18 |") and "(6, 20)" in line for line in lines)  # no loss measured there


def test_tune_writes_only_the_maps_its_store_measured(tmp_path):
    """A refit (a fresh clone of a committed report) must reproduce the measured maps, or tune refuses."""
    import gguf
    import numpy as np

    from ridgefill.evals.session import fingerprint
    from ridgefill.evals.store import ResultStore
    from ridgefill.tune.operating_point import check_measured_maps

    (tmp_path / "fit").mkdir()
    w = gguf.GGUFWriter(str(tmp_path / "fit" / "s3.gguf"), "llama")
    w.add_uint32("ridgefill.split_layer", 3)
    w.add_uint32("ridgefill.tail_rows", 1024)  # a default: not part of what was measured
    w.add_tensor("rf.map.4", np.eye(4, dtype=np.float32))
    for write in (w.write_header_to_file, w.write_kv_data_to_file, w.write_tensors_to_file, w.close):
        write()
    check_measured_maps(tmp_path, 3)  # nothing measured yet: nothing to compare
    rec = {"task": "needle", "item": "a", "variant": "ridge", "mode": "ridge", "split": 3, "sinks": 4, "tail": 1024}
    store = ResultStore(tmp_path / "eval" / "results.jsonl")
    store.append({**rec, "model_content": fingerprint(tmp_path / "fit" / "s3.gguf", 3, routed=False)})
    check_measured_maps(tmp_path, 3)
    store.append({**rec, "model_content": "0" * 64})  # the same record, measured on other maps
    with pytest.raises(InputError, match="other maps than the ones"):
        check_measured_maps(tmp_path, 3)


def test_a_report_keeps_its_title_when_rerun_without_one(tmp_path):
    from ridgefill.tune.operating_point import report_title

    base = tmp_path / "m.gguf"
    assert report_title(None, tmp_path, base) == "m.gguf: quality vs speed by split"
    (tmp_path / "frontier.json").write_text(json.dumps({"title": "smollm2, 4K", "rows": []}))
    assert report_title(None, tmp_path, base) == "smollm2, 4K"  # `--report-only -o` on a committed report
    assert report_title("new", tmp_path, base) == "new"
    for broken in ("{", "[1]", '{"title": 3}'):  # unreadable or odd: the default, not a crash
        (tmp_path / "frontier.json").write_text(broken)
        assert report_title(None, tmp_path, base) == "m.gguf: quality vs speed by split"


def test_the_report_lists_every_command_that_measured_its_work_directory(tmp_path):
    first = "ridgefill tune m.gguf --splits 15-22 --needles-only"
    assert frontier.record_command(tmp_path, first) == [first]
    assert frontier.record_command(tmp_path, first) == [first]  # a rerun (resume) is not a new command
    timed = first + " --measure --runs 3"
    assert frontier.record_command(tmp_path, timed) == [timed]  # the same run, now also timed
    loss = "ridgefill tune m.gguf --splits 17-19 --docs 24"
    assert frontier.recorded_commands(tmp_path) == [timed] and frontier.record_command(tmp_path, loss) == [timed, loss]
    md = frontier_report.markdown([_row(15, 1024, 4096, 80, 40, 1.44)], "t", frontier.recorded_commands(tmp_path))
    assert f"- `{timed}`\n- `{loss}`" in md and "Command:" not in md


def test_where_the_loss_was_measured_a_configuration_without_it_does_not_qualify():
    """A needle-only pass at split 21 next to the full profile at 17-18: 21's loss gap is unknown,
    not small, so the budget cannot pass it; without any loss measured the needles decide alone."""
    rows = [_row(17, 1024, 4096, 80, 70, 1.36, loss_gap=0.30), _row(18, 1024, 4096, 80, 77, 1.32, loss_gap=0.15),
            _row(21, 1024, 4096, 80, 79, 1.40)]
    assert frontier.choose(rows, 5, 0.2)[0]["split"] == 18
    assert frontier.choose(rows, 5, 0.02)[0] is None
    assert frontier.choose([_row(21, 1024, 4096, 80, 79, 1.40)], 5, 0.02)[0]["split"] == 21
