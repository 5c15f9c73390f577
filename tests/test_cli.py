import json
import subprocess
import sys

import pytest


def run(*args):
    return subprocess.run([sys.executable, "-m", "ridgefill", *args], capture_output=True, text=True, timeout=300)


def main(capsys, *args):
    """The CLI in this process (no child process): (exit code, stdout, stderr)."""
    from ridgefill.cli import commands as cli

    code = cli.main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_model_list(capsys):
    code, out, _ = main(capsys, "model", "list")
    assert code == 0
    assert "smollm2-135m (default)" in out and "gemma3-270m" in out


@pytest.mark.slow  # fetches the model on a fresh machine
def test_model_fetch_prints_path(smollm2_path, capsys):
    code, out, err = main(capsys, "model", "fetch", "smollm2-135m", "--offline")
    assert code == 0, err
    assert out.strip() == str(smollm2_path)


@pytest.mark.slow
def test_info_json(smollm2_path):
    out = run("info", str(smollm2_path), "--json")
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout)
    assert info["arch"] == "llama" and info["n_layer"] == 30
    assert "+ridgefill (commit " in info["libllama"]


def test_info_on_bad_file_is_an_error_not_a_crash(tmp_path, capsys):
    bad = tmp_path / "x.gguf"
    bad.write_text("hello")
    code, _, err = main(capsys, "info", str(bad))
    assert code == 1
    assert "not a GGUF" in err


def test_every_list_option_takes_spaces_commas_or_both(capsys):
    from ridgefill.cli import commands as cli

    ap = cli.build_parser()
    bt = ap.parse_args(["bench", "ttft", "--model", "m.gguf", "--lengths", "1024,2048", "4096", "--modes", "exact,ridge"])
    assert bt.lengths == (1024, 2048, 4096) and bt.modes == ("exact", "ridge") and bt.paths == ("bench", "server")
    ev = ap.parse_args(["eval", "needle", "--split", "15", "17,18", "--tail", "256,512", "--lengths", "1024"])
    assert (ev.split, ev.tail, ev.lengths) == ((15, 17, 18), (256, 512), (1024,))
    with pytest.raises(SystemExit):
        ap.parse_args(["bench", "ttft", "--model", "m.gguf", "--modes", "exact,fast"])
    assert "unknown mode 'fast' (one of exact, identity, ridge" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        ap.parse_args(["eval", "needle", "--lengths", "1k"])
    assert "'1k' is not a valid int" in capsys.readouterr().err


def test_integer_list_options_take_ranges(capsys):
    from ridgefill.cli import commands as cli

    ap = cli.build_parser()
    t = ap.parse_args(["tune", "b.gguf", "--splits", "15-18", "22", "--tails", "512,1024"])
    assert t.splits == (15, 16, 17, 18, 22) and t.tails == (512, 1024)
    with pytest.raises(SystemExit):
        ap.parse_args(["tune", "b.gguf", "--splits", "18-15"])
    assert "range '18-15' is empty" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        ap.parse_args(["tune", "b.gguf", "--splits", "15-x"])
    assert "'x' is not a valid int" in capsys.readouterr().err


def test_fit_lag_gain_is_a_share(capsys):
    from ridgefill.cli import commands as cli

    ap = cli.build_parser()
    assert ap.parse_args(["fit", "b.gguf", "--lag-gain", "0"]).lag_gain == 0.0
    assert ap.parse_args(["fit", "b.gguf"]).lag_gain is None and not ap.parse_args(["fit", "b.gguf"]).no_lag
    assert ap.parse_args(["fit", "b.gguf", "--no-lag"]).no_lag
    for bad in ("1", "-0.1", "inf", "x"):
        with pytest.raises(SystemExit):
            ap.parse_args(["fit", "b.gguf", "--lag-gain", bad])
        assert "--lag-gain" in capsys.readouterr().err


def test_fit_lambda_must_be_a_positive_finite_number(capsys):
    from ridgefill.cli import commands as cli

    ap = cli.build_parser()
    assert ap.parse_args(["fit", "b.gguf", "--split", "3", "--lambda", "1e-2"]).lam == 0.01
    assert ap.parse_args(["fit", "b.gguf", "--split", "3"]).lam is None
    for bad, says in (("0", "need a finite number > 0"), ("nan", "need a finite number > 0"), ("x", "expected a number")):
        with pytest.raises(SystemExit):
            ap.parse_args(["fit", "b.gguf", "--lambda", bad])
        assert says in capsys.readouterr().err


def test_fit_defaults_are_the_published_figures_fits():
    """`ridgefill fit BASE --split S` with nothing else fits what `tune` fits at S, the fits the README's figures
    come from: the same capture (tokens, held-out share, windows, sinks, seed) and the same solve."""
    import inspect

    from ridgefill.cli import commands as cli
    from ridgefill.cli import fit as fit_cli
    from ridgefill.fit import pipeline
    from ridgefill.format import Defaults
    from ridgefill.tune.frontier import FitConfig

    args = cli.build_parser().parse_args(["fit", "b.gguf", "--split", "12"])
    assert fit_cli._capture_config(args) == FitConfig().capture(12)
    assert args.tokens == 16384
    solve = {k: p.default for k, p in inspect.signature(pipeline.fit_and_pack).parameters.items()}
    assert (args.type, fit_cli._defaults(args), fit_cli._lag_gain(args), args.lag_keys, args.lam) == \
        (solve["map_type"], solve["defaults"], solve["lag_gain"], solve["lag_keys"], solve["lam"])
    assert (not args.no_identity_blend, args.window_gain, tuple(args.window_ranks)) == \
        (solve["blend"], solve["window_gain"], tuple(solve["ranks"]))
    assert fit_cli._defaults(args) == Defaults()


@pytest.mark.slow  # reads the model's GGUF
def test_bench_placement_prints_each_modes_tensor_split(shared_models, capsys):
    from ridgefill.bench import costmodel
    from ridgefill.bench.pipeline import Fill, plan

    model, _ = shared_models.random_maps("smollm2", 18, seed=0)
    code, out, err = main(capsys, "bench", "placement", "--model", str(model.path), "--devices", "2", "--lengths", "2048",
                          "--sinks", "4", "--tail", "512")
    assert code == 0, err
    sh = costmodel.Shape.from_gguf(model.path)
    ridge = "/".join(map(str, plan(sh, 2, 2048, 512, Fill(18, 4, 512)).counts))
    assert "llama.cpp's placement 16/15" in out and f"| 2048 | ridge | {ridge} |" in out, out
    code, _, err = main(capsys, "bench", "placement", "--model", str(model.path), "--devices", "40")
    assert code != 0 and "each device needs a layer" in err
    code, _, err = main(capsys, "bench", "placement", "--model", str(model.path), "--devices", "1")
    assert code != 0 and "two or more devices" in err


def test_bench_ttft_tensor_split_and_warmup_options(capsys):
    from ridgefill.cli.commands import build_parser

    ap = build_parser()
    bt = ap.parse_args(["bench", "ttft", "--model", "m.gguf"])
    assert bt.tensor_split == "auto" and bt.warmup == "auto"
    assert ap.parse_args(["bench", "ttft", "--model", "m.gguf", "-ts", "9/22", "--warmup", "on"]).tensor_split == "9/22"
    with pytest.raises(SystemExit):
        ap.parse_args(["bench", "ttft", "--model", "m.gguf", "-ts", "9/-1"])
    assert "--tensor-split '9/-1'" in capsys.readouterr().err
