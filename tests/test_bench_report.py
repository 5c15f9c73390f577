"""The TTFT report: ratios from medians, and the spread of the paired (same-round) ratios."""

import json

from ridgefill import bench, costmodel


def _summary(exact, ridge):
    shape = costmodel.Shape(n_layer=30, d=576, d_q=576, d_kv=192, d_ff=1536)
    result = bench.LengthResult(4096, {"exact": exact, "ridge": ridge})
    return bench.summarize("no-such.gguf", [result], shape, 15, 4, 1024, 2, ("exact", "ridge"))


def test_the_paired_range_pairs_runs_of_the_same_round():
    row = _summary([100.0, 120.0, 90.0], [80.0, 60.0, 75.0])["results"][0]
    assert row["ratio_ridge"] == 100.0 / 75.0  # median over median
    assert row["ratio_range_ridge"] == [1.2, 2.0]  # rounds give 1.25, 2.0 and 1.2; sorted lists would pair 90/60


def test_markdown_shows_the_range_only_when_there_are_several_runs():
    many = bench.markdown(_summary([100.0, 120.0, 90.0], [80.0, 60.0, 75.0]))
    assert "1.33x (1.20-2.00) /" in many
    one = bench.markdown(_summary([100.0], [80.0]))
    assert "1.25x /" in one and "(" not in one.splitlines()[-1]


def test_bench_report_renders_saved_runs_and_refuses_other_json(tmp_path, capsys):
    from ridgefill import cli

    saved = tmp_path / "ttft.json"
    saved.write_text(json.dumps({"llama-bench": _summary([100.0, 120.0, 90.0], [80.0, 60.0, 75.0])}))
    assert cli.main(["bench", "report", str(saved), "--plot", str(tmp_path / "ttft.png")]) == 0
    assert "1.33x (1.20-2.00) /" in capsys.readouterr().out
    assert (tmp_path / "ttft.png").stat().st_size > 0

    other = tmp_path / "other.json"
    other.write_text(json.dumps({"shapes": [1, 2]}))
    assert cli.main(["bench", "report", str(other)]) == 1
    assert "is not a `ridgefill bench ttft --json-out` file" in capsys.readouterr().err


def test_runs_of_one_setting_at_different_lengths_merge_into_one_series():
    a = _summary([100.0], [80.0])
    b = _summary([300.0], [200.0])
    b["results"][0]["n_tokens"] = 2048
    other_tail = {**_summary([100.0], [50.0]), "tail": 512}
    merged = bench.merge_summaries([a, b, other_tail])
    assert [r["n_tokens"] for r in merged[0]["results"]] == [2048, 4096]
    assert merged[1]["tail"] == 512 and len(merged) == 2
