"""Split prefill with the model's layers spread over two ggml-rpc-server processes (loopback):
the maps live with their layers on the remote backends, and fill equals the local run."""

import re

import pytest

from conftest import tool
from ridgefill.serve.server import LlamaServer, RpcServers

pytestmark = pytest.mark.slow

SPLIT = 15
TOL = 0.0  # bit for bit: the remote CPU backends run the same kernels
FILL = ["--ridgefill", "ridge", "--ridgefill-sink", "4", "--ridgefill-tail", "64"]
ARGS = ["-b", "256", "-ub", "64", "-fa", "on"]


@pytest.fixture(scope="module")
def maps_model(shared_models):
    model, _ = shared_models.random_maps("smollm2", SPLIT, seed=0)  # F32 maps far from I: a wrong map shows
    return model


@pytest.fixture(scope="module")
def prompt(smollm2, sample_text):
    return [int(t) for t in smollm2.tokenize(sample_text)[:300]]


def _answers(srv, prompt):
    out = {}
    for mode in ("exact", "ridge"):
        # n_predict 1: the first token's top-3 come from the prompt's last row, i.e. from the prefill alone
        res = srv.post("/completion", {"prompt": prompt, "n_predict": 1, "n_probs": 3, "temperature": 0.0,
                                       "cache_prompt": False, "ridgefill": mode})
        out[mode] = (res["content"], res["completion_probabilities"], res["timings"].get("ridgefill_filled_n", 0))
    return out


def _remote_model_mib(log: str) -> float:
    return sum(float(m) for m in re.findall(r"RPC\S*\s+model buffer size =\s+([\d.]+) MiB", log))


def test_server_prefill_over_two_rpc_servers_equals_the_local_run(maps_model, smollm2_path, prompt, tmp_path):
    # the remote CPU backends do not repack Q4 weights; without repacking the local run uses the same kernels
    local = LlamaServer(maps_model.path, ARGS + FILL + ["--no-repack"], ctx=1024, threads=2)
    with local:
        want = _answers(local, prompt)
    assert want["ridge"][2] == 300 - 68 and want["exact"][2] == 0
    logs = {}
    with RpcServers(2) as rpc:
        for name, model in (("maps", maps_model.path), ("base", smollm2_path)):
            logs[name] = tmp_path / f"{name}.log"
            flags = ARGS + ["--rpc", rpc.endpoints, "-ngl", "99", "-lv", "4"] + (FILL if name == "maps" else [])
            with LlamaServer(model, flags, ctx=1024, threads=2, log=logs[name]) as srv:
                if name == "maps":
                    got = _answers(srv, prompt)
    # the prefill, filled or exact, bit for bit: the same CPU kernels run remotely (decoding steps over RPC
    # differ from local ones by a few hundredths of a nat in exact mode too, so they are not compared)
    assert got == want
    # the maps were loaded onto the remote backends with their layers: 14 F32 maps of 576 x 576 (+ bias)
    map_mib = 14 * (576 * 577) * 4 / 2**20
    grew = _remote_model_mib(logs["maps"].read_text()) - _remote_model_mib(logs["base"].read_text())
    assert grew > 0.9 * map_mib, (grew, map_mib)


def test_bench_over_rpc_fills_the_prompt(maps_model):
    import json
    import subprocess

    with RpcServers(2) as rpc:
        run = subprocess.run([str(tool("llama-bench")), "-m", str(maps_model.path), "-rpc", rpc.endpoints, "-ngl", "99",
                              "-p", "300", "-n", "0", "-r", "1", "-t", "2", "-b", "128", "-ub", "64", "--no-warmup",
                              "-o", "json", "--ridgefill", "ridge", "--ridgefill-tail", "100"],
                             capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    row = json.loads(run.stdout)[0]
    assert (row["ridgefill"], row["ridgefill_split"], row["ridgefill_filled_n"]) == ("ridge", SPLIT, 300 - 4 - 100)
    assert "RPC" in row["backends"] or "RPC" in row.get("devices", "")


def test_calibration_through_rpc_equals_the_local_capture(smollm2_path, tmp_path):
    """The capture path with every layer remote: the same statistics as a local capture."""
    import numpy as np

    from conftest import calibrate_cli

    local = calibrate_cli(smollm2_path, tmp_path / "local.npz", tokens=768)
    with RpcServers(2) as rpc:
        remote = calibrate_cli(smollm2_path, tmp_path / "rpc.npz", "--rpc", rpc.endpoints, tokens=768)
    assert remote.train.n == local.train.n > 0
    for k in ("sum_x", "xtx", "xty", "yy"):
        np.testing.assert_allclose(getattr(remote.train, k), getattr(local.train, k), rtol=1e-6, atol=1e-6)


def test_bench_ttft_over_rpc_reports_exact_and_ridge(maps_model):
    import json
    import subprocess
    import sys

    from ridgefill.bench import costmodel
    from ridgefill.bench.pipeline import Placer

    with RpcServers(2) as rpc:  # two fill modes and exact: the server path's llama-servers take turns on the rpc-servers
        run = subprocess.run([sys.executable, "-m", "ridgefill", "bench", "ttft", "--model", str(maps_model.path),
                              "--lengths", "400", "--runs", "1", "--modes", "exact,identity,ridge", "--tail", "64",
                              "--ubatch", "64", "--rpc", rpc.endpoints, "--json", "--quiet"],
                             capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    for path, s in json.loads(run.stdout).items():
        row = s["results"][0]
        assert s["rpc"] and row["ratio_ridge"] > 0 and "332 rows filled" in row["fill_rows"]["ridge"], (path, row)
        # each mode ran with its own planned placement (--tensor-split auto, the default), planned for 400 tokens
        placer = Placer(costmodel.Shape.from_gguf(maps_model.path), 2, 64, SPLIT, s["sinks"], 64)
        assert row["placement"] == {m: "-ts " + "/".join(map(str, placer.counts(m, 400)))
                                    for m in ("exact", "identity", "ridge")}, (path, row["placement"])
        assert row["placement"]["exact"] != row["placement"]["ridge"] and row["pipeline_bound_ridge"] > 1


def test_an_rpc_endpoint_nobody_listens_on_is_a_clear_error(smollm2_path):
    from ridgefill.errors import InputError
    from ridgefill.runtime import Model
    from ridgefill.serve.server import free_port

    with pytest.raises(InputError, match="no rpc-server listening at 127.0.0.1:"):
        Model(smollm2_path, n_gpu_layers=99, rpc=f"127.0.0.1:{free_port()}")
    with pytest.raises(InputError, match="is not host:port"):
        Model(smollm2_path, rpc="localhost")


_REMOTE_FILL = """
import sys, numpy as np
from ridgefill.runtime import Model
path, rpc, out, split, toks = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), np.load(sys.argv[5])
m = Model(path, n_gpu_layers=999, rpc=rpc)
res = {}
for mode in ("identity", "ridge"):
    ctx = m.context(n_ctx=512, n_batch=256, n_ubatch=64, threads=2)
    ctx.set_fill(mode, split)
    r = ctx.prefill(toks, sinks=4, tail=64)
    res[mode + "_logits"] = r.logits
    res[mode + "_k"] = ctx.state_get(m.n_layer - 1, "k")
    res[mode + "_v"] = ctx.state_get(split + 1, "v")
np.savez(out, **res)
"""


def test_filled_kv_and_logits_over_rpc_equal_the_local_ones(maps_model, prompt, tmp_path):
    """Bindings with every layer remote (in a child process: a registered rpc-server outlives its test):
    identity and ridge fill write the same late-layer K/V and give the same logits as a local context."""
    import subprocess
    import sys

    import numpy as np

    toks = np.asarray(prompt, dtype=np.int32)
    np.save(tmp_path / "toks.npy", toks)
    with RpcServers(2) as rpc:
        run = subprocess.run([sys.executable, "-c", _REMOTE_FILL, str(maps_model.path), rpc.endpoints,
                              str(tmp_path / "remote.npz"), str(SPLIT), str(tmp_path / "toks.npy")],
                             capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-2000:]
    remote = np.load(tmp_path / "remote.npz")
    for mode in ("identity", "ridge"):
        ctx = maps_model.context(n_ctx=512, n_batch=256, n_ubatch=64, threads=2)
        ctx.set_fill(mode, SPLIT)
        res = ctx.prefill(toks, sinks=4, tail=64)
        np.testing.assert_allclose(remote[mode + "_logits"], res.logits, rtol=0, atol=TOL)
        np.testing.assert_allclose(remote[mode + "_k"], ctx.state_get(maps_model.n_layer - 1, "k"), rtol=0, atol=TOL)
        np.testing.assert_allclose(remote[mode + "_v"], ctx.state_get(SPLIT + 1, "v"), rtol=0, atol=TOL)
