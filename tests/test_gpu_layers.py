"""-ngl / --n-gpu-layers on every command that loads a model, defaulting as llama.cpp's tools do (-1: every
layer on the devices there are), and the value reaching what loads the model or starts the tool."""

import pytest

from ridgefill.bench import ttft as bench
from ridgefill.cli import commands as cli
from ridgefill.cli import fit as cli_fit
from ridgefill.tune import operating_point

COMMANDS = {  # a command line of each command that loads a model, without -ngl
    "calibrate": ["calibrate", "base.gguf", "--split", "3", "-o", "s.npz"],
    "fit": ["fit", "base.gguf", "--split", "3", "-o", "out.gguf"],
    "eval": ["eval", "needle", "--model", "m.gguf"],
    "tune": ["tune", "base.gguf"],
    "bench ttft": ["bench", "ttft", "--model", "m.gguf"],
    "demo": ["demo"],
}


def parse(argv):
    return cli.build_parser().parse_args(argv)


@pytest.mark.parametrize("name", COMMANDS)
def test_every_model_loading_command_takes_ngl_and_defaults_to_all_layers(name):
    argv = COMMANDS[name]
    assert parse(argv).n_gpu_layers == -1
    assert parse([*argv, "-ngl", "0"]).n_gpu_layers == 0
    assert parse([*argv, "--n-gpu-layers", "99"]).n_gpu_layers == 99


@pytest.mark.parametrize("bad", ["-2", "all", "1.5"])
def test_a_layer_count_below_minus_one_or_not_a_number_is_refused(bad, capsys):
    with pytest.raises(SystemExit):
        parse([*COMMANDS["fit"], "-ngl", bad])
    assert "-ngl" in capsys.readouterr().err


def test_eval_keeps_its_old_spelling():
    assert parse([*COMMANDS["eval"], "--gpu-layers", "7"]).n_gpu_layers == 7


def test_the_capture_and_the_tune_fits_get_it(tmp_path):
    assert cli_fit._capture_config(parse([*COMMANDS["fit"], "-ngl", "12"])).n_gpu_layers == 12
    fit = operating_point.fit_config(parse([*COMMANDS["tune"], "-ngl", "5"]))
    assert fit.n_gpu_layers == 5 and fit.capture(3).n_gpu_layers == 5
    base = tmp_path / "base.gguf"
    base.write_bytes(b"GGUF")
    cpu = operating_point.fit_config(parse([*COMMANDS["tune"], "-ngl", "0"]))
    assert fit.manifest(base) == cpu.manifest(base)  # where the layers ran is not part of what was fitted


def test_llama_bench_and_llama_server_get_it():
    assert bench._placement(None, -1) == ["-ngl", "-1"]
    assert bench._placement("127.0.0.1:1,127.0.0.1:2", 99) == ["--rpc", "127.0.0.1:1,127.0.0.1:2", "-ngl", "99"]
    args = bench._server_args("ridge", 3, 4, 64, 512, 128, ngl=0)
    assert args[args.index("-ngl") + 1] == "0"


def test_bench_ttft_passes_it_on(monkeypatch, capsys):
    seen = {}

    def fake(model, lengths, **kwargs):
        seen.update(kwargs)
        return {"path": "llama-bench", "results": []}

    monkeypatch.setattr(bench, "ttft", fake)
    monkeypatch.setattr("ridgefill.bench.report.markdown", lambda s: "")
    assert cli.main(["bench", "ttft", "--model", "m.gguf", "--paths", "bench", "-ngl", "20", "--quiet"]) == 0
    assert seen["ngl"] == 20 and seen["rpc"] is None


def test_an_eval_session_loads_its_models_with_it(monkeypatch):
    from ridgefill.evals import session

    loaded = []
    monkeypatch.setattr(session, "Model", lambda path, n_gpu_layers: loaded.append(n_gpu_layers) or object())
    monkeypatch.setattr(session, "check_same_base", lambda models: None)
    monkeypatch.setattr(session, "check_one_per_split", lambda models: None)
    session.Session(["a.gguf", "b.gguf"], n_ctx=512, n_gpu_layers=3)
    assert loaded == [3, 3]
