import json
import subprocess
import sys

import pytest


def run(*args):
    return subprocess.run([sys.executable, "-m", "ridgefill", *args], capture_output=True, text=True, timeout=300)


def test_model_list():
    out = run("model", "list")
    assert out.returncode == 0
    assert "smollm2-135m (default)" in out.stdout and "gemma3-270m" in out.stdout


def test_model_fetch_prints_path(smollm2_path):
    out = run("model", "fetch", "smollm2-135m", "--offline")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(smollm2_path)


@pytest.mark.slow
def test_info_json(smollm2_path):
    out = run("info", str(smollm2_path), "--json")
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout)
    assert info["arch"] == "llama" and info["n_layer"] == 30
    assert info["libllama"].endswith("+ridgefill")


def test_info_on_bad_file_is_an_error_not_a_crash(tmp_path):
    bad = tmp_path / "x.gguf"
    bad.write_text("hello")
    out = run("info", str(bad))
    assert out.returncode == 1
    assert "not a GGUF" in out.stderr
