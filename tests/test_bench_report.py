"""The TTFT report: ratios from medians, and the spread of the paired (same-round) ratios."""

import json

from ridgefill.bench import ttft as bench, costmodel, report as ttft_report


def _summary(exact, ridge):
    shape = costmodel.Shape(n_layer=30, d=576, d_q=576, d_kv=192, d_ff=1536)
    result = ttft_report.LengthResult(4096, {"exact": exact, "ridge": ridge})
    return ttft_report.summarize("no-such.gguf", [result], shape, 15, 4, 1024, 2, ("exact", "ridge"))


def test_the_paired_range_pairs_runs_of_the_same_round():
    row = _summary([100.0, 120.0, 90.0], [80.0, 60.0, 75.0])["results"][0]
    assert row["ratio_ridge"] == 100.0 / 75.0  # median over median
    assert row["ratio_range_ridge"] == [1.2, 2.0]  # rounds give 1.25, 2.0 and 1.2; sorted lists would pair 90/60


def test_markdown_shows_the_range_only_when_there_are_several_runs():
    many = ttft_report.markdown(_summary([100.0, 120.0, 90.0], [80.0, 60.0, 75.0]))
    assert "1.33x (1.20-2.00) /" in many
    one = ttft_report.markdown(_summary([100.0], [80.0]))
    assert "1.25x /" in one and "(" not in one.splitlines()[-1]


def test_bench_report_renders_saved_runs_and_refuses_other_json(tmp_path, capsys):
    from ridgefill.cli import commands as cli

    saved = tmp_path / "ttft.json"
    saved.write_text(json.dumps({"llama-bench": _summary([100.0, 120.0, 90.0], [80.0, 60.0, 75.0])}))
    assert cli.main(["bench", "report", str(saved), "--plot", str(tmp_path / "ttft.png")]) == 0
    assert "1.33x (1.20-2.00) /" in capsys.readouterr().out
    import matplotlib.pyplot as plt

    assert plt.imread(tmp_path / "ttft.png").shape[:2] == (462, 1210)  # figsize (11, 4.2) at 110 dpi

    other = tmp_path / "other.json"
    other.write_text(json.dumps({"shapes": [1, 2]}))
    assert cli.main(["bench", "report", str(other)]) == 1
    assert "is not a `ridgefill bench ttft --json-out` file" in capsys.readouterr().err


def test_runs_of_one_setting_at_different_lengths_merge_into_one_series():
    a = _summary([100.0], [80.0])
    b = _summary([300.0], [200.0])
    b["results"][0]["n_tokens"] = 2048
    other_tail = {**_summary([100.0], [50.0]), "tail": 512}
    merged = ttft_report.merge_summaries([a, b, other_tail])
    assert [r["n_tokens"] for r in merged[0]["results"]] == [2048, 4096]
    assert merged[1]["tail"] == 512 and len(merged) == 2


def _gguf_with(path, **fields):
    import gguf

    w = gguf.GGUFWriter(str(path), "llama")
    for key, value in fields.items():
        w.add_uint32(f"ridgefill.{key}", value)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_stored_zero_sinks_and_tail_are_values_not_missing(tmp_path):
    model = _gguf_with(tmp_path / "m.gguf", split_layer=12, sink_rows=0, tail_rows=0)
    assert bench.fill_settings(model, ("exact", "ridge"), None, None, None) == (12, 0, 0)
    assert bench.fill_settings(model, ("exact", "ridge"), 10, 3, 5) == (10, 3, 5)
    bare = _gguf_with(tmp_path / "bare.gguf")
    assert bench.fill_settings(bare, ("exact", "identity"), 12, None, None) == (12, 4, 1024)


def test_a_length_that_fills_nothing_is_said_loudly():
    said = []
    bench._warn_unfilled([1024, 4096], ("exact", "ridge"), 4, 1024, said.append)
    assert len(said) == 1 and said[0].startswith("WARNING: a 1024-token prompt") and "fills nothing" in said[0]
    shape = costmodel.Shape(n_layer=30, d=576, d_q=576, d_kv=192, d_ff=1536)
    rows = [ttft_report.LengthResult(n, {"exact": [100.0], "ridge": [90.0]}) for n in (1024, 4096)]
    md = ttft_report.markdown(ttft_report.summarize("m.gguf", rows, shape, 15, 4, 1024, 2, ("exact", "ridge")))
    line_1k, line_4k = md.splitlines()[-2:]
    assert "fills nothing" in line_1k and "fills nothing" not in line_4k


def test_routing_cost_pairs_each_routed_mode_with_its_base_round_by_round(tmp_path):
    shape = costmodel.Shape(n_layer=30, d=576, d_q=576, d_kv=192, d_ff=1536)
    modes = ("exact", "ridge", "ridge@10")
    r = ttft_report.LengthResult(4096, {"exact": [100.0, 200.0, 100.0], "ridge": [80.0, 160.0, 90.0],
                                        "ridge@10": [84.0, 150.0, 100.0]},
                                 rows={"ridge@10": "3068 rows filled, 1028 full, 311 routed"})
    summ = ttft_report.summarize("m.gguf", [r], shape, 15, 4, 1024, 2, modes)
    md = ttft_report.markdown(summ)
    model = summ["results"][0]["bound_ridge@10"] / summ["results"][0]["bound_ridge"]
    assert 0.9 < model < 1.0  # routing only adds work
    # rounds give 80/84, 160/150, 90/100: the median is round 1's, not the ratio of the medians (0.889)
    row = md.splitlines()[-1]
    assert row.startswith(f"| 4096 | ridge@10 | 311 | {80 / 84:.3f}x ({0.9:.3f}-{160 / 150:.3f}) | {model:.3f}x |")
    assert "routing's own cost" not in ttft_report.markdown(_summary([100.0], [80.0]))
    import matplotlib.pyplot as plt

    fig = ttft_report.figure([summ])
    ax_t, ax_r = fig.axes
    lines = {l.get_label(): l for l in ax_t.get_lines()}
    assert set(lines) == {f"{m} (llama-bench)" for m in modes}
    for m in modes:
        assert list(lines[f"{m} (llama-bench)"].get_ydata()) == [summ["results"][0]["median_ms"][m] / 1000]
    bound = [l for l in ax_r.get_lines() if l.get_label().startswith("cost-model bound")]
    assert len(bound) == 1 and list(bound[0].get_ydata()) == [summ["results"][0][f"bound_{modes[-1]}"]]
    colours = {l.get_color() for l in ax_t.get_lines()}
    assert len(colours) == len(modes)  # routed modes get colours of their own
    assert ax_t.get_xscale() == "log" and "TTFT" in ax_t.get_ylabel() and "split 15" in ax_r.get_title()
    plt.close(fig)


def test_rounds_alternate_their_order_so_a_drift_favours_no_mode():
    modes = ("exact", "ridge", "ridge@2")
    orders = [bench.round_order(modes, i) for i in range(4)]
    assert orders[0] == orders[2] == list(modes)
    assert orders[1] == orders[3] == list(reversed(modes))
    # over two rounds every mode sits at the same mean position
    assert len({orders[0].index(m) + orders[1].index(m) for m in modes}) == 1
