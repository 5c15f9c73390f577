"""`llama-bench --ridgefill-batch-times` and `ridgefill bench batches`: a prompt's batches timed one at a time."""

import json
import math
import subprocess

import numpy as np
import pytest

from ridgefill.bench import batches, costmodel
from ridgefill.bench.ttft import BenchError

SPLIT, N, UB, SINKS, TAIL = 20, 512, 128, 4, 64  # fill range [4, 448)


def _costs():
    return batches._Costs(costmodel.SMOLLM2, N, SPLIT, SINKS, TAIL, 0, 0)


def test_batch_rows_refuse_a_fill_the_range_does_not_hold():
    rows = [UB] * (N // UB)
    ms = {"exact": np.ones(4), "identity": np.ones(4)}
    good = {"exact": {"rows": rows, "filled": [0] * 4, "routed": [0] * 4},
            "identity": {"rows": rows, "filled": [124, 128, 128, 64], "routed": [0] * 4}}
    out = batches._batch_rows(_costs(), ["exact", "identity"], ms, good)
    assert [r["kind"] for r in out] == ["mixed", "fill", "fill", "last"]
    assert [r["filled"]["identity"] for r in out] == [124, 128, 128, 64]
    bad = dict(good, identity=dict(good["identity"], filled=[124, 128, 127, 64]))
    with pytest.raises(BenchError, match=r"filled 127 rows of batch \[256, 384\)"):
        batches._batch_rows(_costs(), ["exact", "identity"], ms, bad)
    short = dict(good, exact=dict(good["exact"], rows=rows[:3]))
    with pytest.raises(BenchError, match="384 rows in all"):
        batches._batch_rows(_costs(), ["exact", "identity"], {m: v[:3] for m, v in ms.items()}, short)


def test_kinds_sum_times_and_costs():
    rows = [{"lo": 0, "hi": 1, "kind": "fill", "ms": {"exact": 4.0, "ridge": 2.0}, "cost": {"exact": 8.0, "ridge": 2.0}},
            {"lo": 1, "hi": 2, "kind": "fill", "ms": {"exact": 4.0, "ridge": 2.0}, "cost": {"exact": 8.0, "ridge": 2.0}},
            {"lo": 2, "hi": 3, "kind": "last", "ms": {"exact": 4.0, "ridge": 4.0}, "cost": {"exact": 8.0, "ridge": 8.0}}]
    kinds = {k["kind"]: k for k in batches._by_kind(rows, ["exact", "ridge"])}
    assert set(kinds) == {"fill", "last", "all"}
    fill = kinds["fill"]["ridge"]
    assert fill["ratio"] == 2.0 and fill["bound"] == 4.0 and fill["of_bound"] == 0.5
    assert fill["time_share"] == 0.5 and fill["cost_share"] == pytest.approx(4 / 12)
    assert kinds["all"]["ridge"]["ratio"] == pytest.approx(12 / 8) and kinds["all"]["rows"] == 3


@pytest.mark.slow
def test_llama_bench_times_each_batch_and_counts_its_rows(smollm2_path):
    from conftest import tool

    cmd = [str(tool("llama-bench")), "-m", str(smollm2_path), "-p", str(N), "-n", "0", "-r", "2", "-t", "2",
           "-b", str(UB), "-ub", str(UB), "--ridgefill", "identity", "--ridgefill-split", str(SPLIT),
           "--ridgefill-sink", str(SINKS), "--ridgefill-tail", str(TAIL), "--ridgefill-select", "0.1",
           "--ridgefill-probe", "32", "-o", "json"]
    plain = json.loads(subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=True).stdout)[0]
    assert "ridgefill_batch_ns" not in plain
    run = subprocess.run([*cmd, "--ridgefill-batch-times"], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    row = json.loads(run.stdout)[0]
    n_fill = N - SINKS - TAIL
    assert row["ridgefill_batch_rows"] == [UB] * 4
    assert row["ridgefill_batch_filled"] == [UB - SINKS, UB, UB, UB - TAIL] and row["ridgefill_filled_n"] == n_fill
    assert row["ridgefill_batch_routed"] == [0, 0, 0, math.ceil(0.1 * n_fill)] == [0, 0, 0, row["ridgefill_selected_n"]]
    assert all(ns > 0 for ns in row["ridgefill_batch_ns"])
    assert sum(row["ridgefill_batch_ns"]) <= row["avg_ns"]  # the batches are within the timed prompt


@pytest.mark.slow
def test_bench_batches_sets_each_batch_beside_the_cost_model(smollm2_path):
    res = batches.batch_times(str(smollm2_path), N, ("exact", "identity"), rounds=1, ubatch=UB, split=SPLIT,
                              sinks=SINKS, tail=TAIL, progress=lambda m: None)
    rows = res["batches"]
    assert [(r["lo"], r["hi"], r["kind"]) for r in rows] == [(0, 128, "mixed"), (128, 256, "fill"),
                                                            (256, 384, "fill"), (384, 512, "last")]
    assert [r["filled"]["identity"] for r in rows] == [124, 128, 128, 64]
    shape = costmodel.Shape.from_gguf(smollm2_path)
    want = sum(costmodel.layer_costs(shape, 128, 256, SPLIT, SINKS, TAIL, with_map=False, n=N))
    assert rows[1]["cost"]["identity"] == pytest.approx(want)
    assert rows[1]["cost"]["exact"] == pytest.approx(sum(costmodel.layer_costs(shape, 128, 256, n=N)))
    kinds = {k["kind"]: k for k in res["kinds"]}
    assert kinds["all"]["ms"]["exact"] == pytest.approx(sum(r["ms"]["exact"] for r in rows))
    assert kinds["all"]["identity"]["bound"] == pytest.approx(costmodel.bound(shape, N, SPLIT, SINKS, TAIL,
                                                                              with_map=False))
    assert "| [128, 256) | fill |" in batches.markdown(res)


def test_bench_batches_refuses_counts_below_one(capsys):
    from ridgefill.cli.commands import build_parser

    ap = build_parser()
    args = ap.parse_args(["bench", "batches", "--model", "m.gguf", "--modes", "exact", "ridge^10"])
    assert (args.length, args.rounds, args.ubatch, list(args.modes)) == (4096, 3, 512, ["exact", "ridge^10"])
    for flag in ("--length", "--rounds", "--ubatch"):
        with pytest.raises(SystemExit):
            ap.parse_args(["bench", "batches", "--model", "m.gguf", flag, "0"])
        assert f"argument {flag}: 0: need an integer > 0" in capsys.readouterr().err
