"""The fork's binaries: identify themselves, and take the RidgeFill flags."""

import json
import subprocess

import pytest

from conftest import tool

pytestmark = pytest.mark.slow


def test_server_version_identifies_the_fork():
    out = subprocess.run([str(tool("llama-server")), "--version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0
    assert "+ridgefill" in out.stdout + out.stderr


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


def test_bench_fills_the_middle_of_the_prompt(smollm2_path):
    out = _bench(smollm2_path, "--ridgefill", "identity", "--ridgefill-split", "15",
                 "--ridgefill-sink", "4", "--ridgefill-tail", "100")
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout)[0]["n_prompt"] == 300
    assert "ridgefill identity, split 15, sink 4, tail 100: 196 rows filled, 104 full" in out.stderr


def test_bench_refuses_ridge_without_maps(smollm2_path):
    out = _bench(smollm2_path, "--ridgefill", "ridge")
    assert out.returncode == 1
    assert "needs a GGUF with ridge maps, and this model has none" in out.stderr
