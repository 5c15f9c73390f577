"""The fork's binaries: identify themselves, and take the RidgeFill flags."""

import json
import re
import subprocess

import pytest

from conftest import tool

pytestmark = pytest.mark.slow


def test_server_version_identifies_the_fork():
    out = subprocess.run([str(tool("llama-server")), "--version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0
    assert "+ridgefill" in out.stdout + out.stderr


def test_ridgefill_version_prints_the_package_and_the_fork_the_tools_were_built_from():
    import sys

    from ridgefill import __version__, runtime

    out = subprocess.run([sys.executable, "-m", "ridgefill", "--version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    server = subprocess.run([str(tool("llama-server")), "--version"], capture_output=True, text=True, timeout=60)
    commit = runtime.version().split("(commit ")[1].rstrip(")")
    assert out.stdout.splitlines() == [f"ridgefill {__version__}", f"llama.cpp fork: {runtime.version()}"]
    assert f"commit {commit}" in server.stdout + server.stderr  # the tools and the bindings: one build


def test_bench_help_identifies_the_fork_and_lists_flags():
    out = subprocess.run([str(tool("llama-bench")), "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0
    assert "+ridgefill" in out.stdout
    for flag in ("--ridgefill ", "--ridgefill-split", "--ridgefill-sink", "--ridgefill-tail"):
        assert flag in out.stdout


def _bench(model, *extra):
    return subprocess.run([str(tool("llama-bench")), "-m", str(model), "-p", "300", "-n", "0", "-r", "1", "-t", "2",
                           "-b", "128", "-ub", "64", "--no-warmup", "-o", "json", *extra],
                          capture_output=True, text=True, timeout=600)


def _fill_columns(row: dict) -> tuple:
    return tuple(row[k] for k in ("ridgefill", "ridgefill_split", "ridgefill_sink", "ridgefill_tail",
                                  "ridgefill_filled_n", "ridgefill_full_n"))


def test_bench_fills_the_middle_of_the_prompt(smollm2_path):
    """The fill configuration and the rows it filled are columns of every output format."""
    flags = ("--ridgefill", "identity", "--ridgefill-split", "15", "--ridgefill-sink", "4", "--ridgefill-tail", "100")
    out = _bench(smollm2_path, *flags)
    assert out.returncode == 0, out.stderr[-2000:]
    row = json.loads(out.stdout)[0]
    assert row["n_prompt"] == 300
    assert _fill_columns(row) == ("identity", 15, 4, 100, 196, 104)

    csv = _bench(smollm2_path, *flags, "-o", "csv")
    head, values = csv.stdout.strip().splitlines()[:2]
    cells = dict(zip(head.split(","), (v.strip('"') for v in values.split(","))))
    assert (cells["ridgefill"], cells["ridgefill_split"], cells["ridgefill_filled_n"]) == ("identity", "15", "196")

    md = _bench(smollm2_path, *flags, "-o", "md").stdout
    assert "ridgefill_split" in md and re.search(r"\|\s+identity\s+\|\s+15\s+\|", md)


def test_bench_identity_without_a_split_on_a_model_without_maps_says_what_to_pass(smollm2_path):
    out = _bench(smollm2_path, "--ridgefill", "identity")
    assert out.returncode == 1
    assert "identity fill needs one in [1, 29] (--ridgefill-split N" in out.stderr


def test_bench_refuses_ridge_without_maps(smollm2_path):
    out = _bench(smollm2_path, "--ridgefill", "ridge")
    assert out.returncode == 1
    assert "needs a GGUF with ridge maps, and this model has none" in out.stderr


@pytest.mark.slow
def test_bench_ttft_runs_both_paths_and_plots(smollm2_path, tmp_path):
    """`ridgefill bench ttft` end to end on a short prompt: llama-bench and llama-server, JSON and PNG."""
    import json
    import sys

    png, js = tmp_path / "ttft.png", tmp_path / "ttft.json"
    out = subprocess.run([sys.executable, "-m", "ridgefill", "bench", "ttft", "--model", str(smollm2_path),
                          "--lengths", "640", "--runs", "1", "--modes", "exact", "identity", "--split", "15",
                          "--sinks", "4", "--tail", "128", "--ubatch", "128", "--json", "--json-out", str(js),
                          "--plot", str(png), "--quiet"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    summaries = json.loads(out.stdout)
    assert set(summaries) == {"llama-bench", "llama-server"} and json.loads(js.read_text()) == summaries
    for s in summaries.values():
        row = s["results"][0]
        assert row["n_tokens"] == 640 and row["ratio_identity"] > 0 and row["bound_identity"] > 1
        assert row["median_ms"]["exact"] > 0 and row["peak_rss_mb"]["identity"] > 0
    assert summaries["llama-server"]["results"][0]["fill_rows"]["identity"] == "508 rows filled, 132 full"
    assert "508 rows filled" in summaries["llama-bench"]["results"][0]["fill_rows"]["identity"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_takes_split_sinks_and_tail_from_the_maps(tmp_path, smollm2_path):
    """Without --ridgefill-split/-sink/-tail llama-bench uses the GGUF's ridgefill.* metadata;
    without --ridgefill it runs exact (no fill report)."""
    from ridgefill.bench import synth

    model = synth.identity_maps(smollm2_path, 15, tmp_path / "maps.gguf")
    out = _bench(model, "--ridgefill", "ridge")
    assert out.returncode == 0, out.stderr[-2000:]
    assert _fill_columns(json.loads(out.stdout)[0]) == ("ridge", 15, 4, 1024, 0, 300)
    out = _bench(model)
    assert out.returncode == 0 and _fill_columns(json.loads(out.stdout)[0]) == ("exact", 0, 0, 0, 0, 0)


@pytest.mark.parametrize("shape", ["tiny-qwen3moe", "tiny-qwen35moe"])
def test_synth_cli_writes_a_tiny_moe_with_maps(tmp_path, shape):
    import sys

    out = tmp_path / "tq.gguf"
    run = subprocess.run([sys.executable, "-m", "ridgefill", "synth", "--shape", shape, "-o", str(out),
                          "--weight-type", "f16", "--passthrough", "4", "--identity-maps", "4"],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tq.gguf"]  # no intermediates left
    res = _bench(out, "--ridgefill", "ridge", "--ridgefill-tail", "100")
    assert res.returncode == 0, res.stderr[-2000:]
    assert _fill_columns(json.loads(res.stdout)[0]) == ("ridge", 4, 4, 100, 196, 104)


def test_bench_ttft_on_the_tiny_hybrid_moe_prints_exact_and_ridge(tmp_path):
    """The hybrid MoE (Gated DeltaNet + attention) through llama-bench: both modes, ratio and bound."""
    import sys

    out = tmp_path / "h.gguf"
    run = subprocess.run([sys.executable, "-m", "ridgefill", "synth", "--shape", "tiny-qwen35moe", "-o", str(out),
                          "--weight-type", "f16", "--identity-maps", "2"], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    res = subprocess.run([sys.executable, "-m", "ridgefill", "bench", "ttft", "--model", str(out), "--lengths", "1024",
                          "--runs", "1", "--modes", "exact", "ridge", "--sinks", "4", "--tail", "256", "--paths", "bench",
                          "--json"], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    print(res.stderr[-1500:])
    row = json.loads(res.stdout)["llama-bench"]["results"][0]
    assert set(row["median_ms"]) == {"exact", "ridge"} and row["median_ms"]["exact"] > 0
    assert row["ratio_ridge"] > 0 and row["bound_ridge"] > 1
    assert "764 rows filled" in row["fill_rows"]["ridge"]


@pytest.mark.slow
def test_gpu_script_dry_run(tmp_path):
    """bench/gpu.sh --dry-run: carry folder, CMake configure of the carried tree, synthetic shapes (dense and
    hybrid), JSON."""
    import json
    import os
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    env = dict(os.environ, RF_OUT=str(tmp_path / "out"), RF_WORK=str(tmp_path / "work"), RF_SHAPES="tiny-qwen3 tiny-qwen35",
               RF_LENGTHS="768", RF_CARRY=str(tmp_path / "carry"))
    run = subprocess.run([str(repo / "bench" / "gpu.sh"), "--dry-run"], capture_output=True, text=True, env=env,
                         timeout=900)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    assert (tmp_path / "carry" / "llama-src.tar.gz").stat().st_size > 1e6  # nothing written into the checkout
    assert "Generating done" in (tmp_path / "out" / "gpu-configure.log").read_text()
    report = json.loads((tmp_path / "out" / "gpu-ttft-dryrun.json").read_text())
    row = report["shapes"]["tiny-qwen3"]["results"][0]
    assert row["n_tokens"] == 768 and row["bound_ridge"] > 1
    assert set(row["median_ms"]) == {"exact", "identity", "ridge", "ridge@10"}
    assert "508 rows filled" in row["fill_rows"]["ridge"]
    assert row["fill_rows"]["ridge@10"].endswith(", 51 routed")  # ceil(0.1 * 508) of the one fill ubatch
    kv = report["shapes"]["tiny-qwen3 K/V maps"]  # lagged K/V maps beside the base: one product for every layer
    assert kv["maps"] and kv["kv_maps"] == 2 and set(kv["results"][0]["median_ms"]) == {"exact", "ridge", "ridge^10"}
    assert "508 rows filled" in kv["results"][0]["fill_rows"]["ridge"]
    assert kv["results"][0]["fill_rows"]["ridge^10"].endswith(", 51 selected")  # ceil(0.1 * 508) by the probe
    from ridgefill.bench import costmodel

    want = costmodel.bound(costmodel.Shape(**kv["shape"]), 768, kv["split"], kv["sinks"], kv["tail"], kv=2)
    assert kv["results"][0]["bound_ridge"] == pytest.approx(want)  # the bound of K/V maps, not of input maps
    # the hybrid: identity maps in a maps file beside its base, no routed or selected modes (it refuses them), and
    # K/V maps for its attention layers beside input maps for its linear ones, priced so by the bound
    hyb, hyb_kv = report["shapes"]["tiny-qwen35"], report["shapes"]["tiny-qwen35 K/V maps"]
    assert hyb["maps"] and set(hyb["results"][0]["median_ms"]) == {"exact", "identity", "ridge"}
    assert set(hyb_kv["results"][0]["median_ms"]) == {"exact", "ridge"} and hyb_kv["kv_maps"] == 2
    want = costmodel.bound(costmodel.Shape(**hyb_kv["shape"]), 768, hyb_kv["split"], hyb_kv["sinks"], hyb_kv["tail"],
                           kv=2)
    assert hyb_kv["results"][0]["bound_ridge"] == pytest.approx(want)
    over = {r["test"]: r for r in report["overhead"]["tiny-qwen3"]}  # bench overhead beside the lagged K/V maps
    assert set(over) == {"tg128", "pp512"} and all(r["same_graph"] and r["rounds"] == 2 for r in over.values())
    bt = report["batches"]  # every ubatch timed alone, exact against each fill at the same positions
    assert set(bt) == {"tiny-qwen3", "tiny-qwen3 K/V maps", "tiny-qwen35", "tiny-qwen35 K/V maps"}
    assert set(report["overhead"]) == {"tiny-qwen3"}  # a hybrid's decode path is not compared
    rows = bt["tiny-qwen3 K/V maps"]["batches"]
    assert [(r["lo"], r["hi"], r["kind"]) for r in rows] == [(0, 512, "mixed"), (512, 768, "last")]
    assert rows[0]["filled"]["ridge"] == 508 and rows[1]["routed"]["ridge^10"] == 51
    assert not list((tmp_path / "work" / "models").glob("*.gguf"))  # models removed after measuring


def test_bench_refuses_server_prompts_past_the_training_context(smollm2_path):
    """llama-server caps a slot at n_ctx_train (8192 for SmolLM2) and needs a free row: say so before measuring."""
    import sys

    out = subprocess.run([sys.executable, "-m", "ridgefill", "bench", "ttft", "--model", str(smollm2_path),
                          "--lengths", "1024", "8192", "--modes", "exact", "--paths", "bench", "server"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "at most 8191 tokens" in out.stderr and "llama-bench" not in out.stderr


def test_bench_sweeps_ridgefill_settings_as_lists_and_refuses_bad_ones_before_any_test(smollm2_path):
    """--ridgefill, -split, -sink and -tail are lists like every llama-bench parameter: one run, a row each."""
    import json

    bench = [str(tool("llama-bench")), "-m", str(smollm2_path), "-p", "256", "-n", "0", "-r", "1", "-t", "2",
             "-b", "256", "-ub", "64", "--no-warmup"]
    run = subprocess.run([*bench, "--ridgefill", "exact,identity", "--ridgefill-split", "10,20", "--ridgefill-sink", "4",
                          "--ridgefill-tail", "64,128", "-o", "json"], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    rows = json.loads(run.stdout)
    got = sorted((r["ridgefill"], r["ridgefill_split"], r["ridgefill_tail"], r["ridgefill_filled_n"]) for r in rows)
    # exact fills nothing (its columns stay 0); identity fills rows [4, 256 - tail)
    assert got == sorted([("exact", 0, 0, 0)] * 4 + [("identity", s, t, 256 - t - 4) for s in (10, 20) for t in (64, 128)])
    md = subprocess.run([*bench, "--ridgefill", "identity", "--ridgefill-split", "10-20+10"], capture_output=True,
                        text=True, timeout=600)
    assert md.returncode == 0 and "ridgefill_split" in md.stdout and len(re.findall(r"\| +pp256 \|", md.stdout)) == 2
    for bad, why in ((["--ridgefill", "identity,bogus"], "unknown --ridgefill mode"),
                     (["--ridgefill", "identity", "--ridgefill-split", "10,31"], "out of range"),
                     (["--ridgefill", "ridge"], "has none"),
                     (["--ridgefill", "identity", "--ridgefill-split", "12", "--ridgefill-route", "0.05"], "routing"),
                     (["--ridgefill-tail", "-4"], "error")):
        out = subprocess.run([*bench, *bad, "-o", "json"], capture_output=True, text=True, timeout=120)
        assert out.returncode != 0 and why in out.stderr, (bad, out.stderr[-500:])
        assert "pp256" not in out.stdout and "avg_ns" not in out.stdout, f"{bad}: a test ran before the error"
