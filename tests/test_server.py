"""The patched llama-server: --ridgefill, per-request override, cache-key safety, timings."""

import pytest

from ridgefill import format as fmt
from ridgefill.serve.server import LlamaServer, ServerError

pytestmark = pytest.mark.slow

SPLIT = 20
N = 600
SINKS, TAIL = 64, 24  # on ubatch boundaries (-ub 64 -b 256): exact and fill see the same ubatches
ARGS = ["-b", "256", "-ub", "64", "-fa", "on"]


@pytest.fixture(scope="module")
def passthrough(shared_models):
    return shared_models.passthrough_path("smollm2", SPLIT)


@pytest.fixture(scope="module")
def prompt(smollm2, sample_text):
    return [int(t) for t in smollm2.tokenize(sample_text)[:N]]


def _complete(srv, prompt, **extra):
    body = {"prompt": prompt, "n_predict": 8, "temperature": 0.0, "cache_prompt": True, **extra}
    return srv.post("/completion", body)


def test_ridge_without_maps_stops_the_server_with_a_reason(smollm2_path, tmp_path):
    log = tmp_path / "srv.log"
    srv = LlamaServer(smollm2_path, ["--ridgefill", "ridge"], ctx=1024, threads=2, log=log)
    with pytest.raises(ServerError, match="exited"):
        srv.start()
    assert "needs ridge maps" in log.read_text()


def test_request_for_unavailable_mode_is_a_400_and_the_server_stays_up(smollm2_path, prompt):
    with LlamaServer(smollm2_path, ARGS, ctx=1024, threads=2) as srv:
        with pytest.raises(ServerError, match="not enabled on this server") as err:
            _complete(srv, prompt, ridgefill="ridge")
        assert err.value.status == 400
        with pytest.raises(ServerError) as err:
            _complete(srv, prompt, ridgefill="fast")
        assert err.value.status == 400
        assert srv.alive()
        ok = _complete(srv, prompt)
        assert ok["timings"]["prompt_n"] == N
        assert "ridgefill_filled_n" not in ok["timings"]


def test_fill_timings_and_exactness_on_passthrough(passthrough, prompt):
    fill_args = ARGS + ["--ridgefill", "identity", "--ridgefill-split", str(SPLIT),
                        "--ridgefill-sink", str(SINKS), "--ridgefill-tail", str(TAIL)]
    with LlamaServer(passthrough, ARGS, ctx=1024, threads=2) as srv:
        exact = _complete(srv, prompt, cache_prompt=False)
    with LlamaServer(passthrough, fill_args, ctx=1024, threads=2) as srv:
        fill = _complete(srv, prompt, cache_prompt=False)
        t = fill["timings"]
        assert (t["ridgefill_filled_n"], t["ridgefill_full_n"]) == (N - SINKS - TAIL, SINKS + TAIL)
        # layers >= SPLIT add nothing: the filled KV is exact, so is the continuation
        assert fill["content"] == exact["content"]
        # per-request sinks/tail
        custom = _complete(srv, prompt, cache_prompt=False, ridgefill_sink=4, ridgefill_tail=100)
        assert custom["timings"]["ridgefill_filled_n"] == N - 4 - 100


def test_filled_kv_is_never_reused_for_another_configuration(smollm2_path, prompt):
    args = ARGS + ["--ridgefill", "identity", "--ridgefill-split", "15", "--ridgefill-sink", "4", "--ridgefill-tail", "64"]
    with LlamaServer(smollm2_path, args, ctx=1024, threads=2) as srv:
        a = _complete(srv, prompt)                      # filled
        assert a["timings"]["ridgefill_filled_n"] > 0
        again = _complete(srv, prompt)                  # same key: the prefix may be reused
        assert again["timings"]["cache_n"] > 0
        b = _complete(srv, prompt, ridgefill="exact")   # other key: must start from scratch
        assert b["timings"]["cache_n"] == 0 and b["timings"]["prompt_n"] == N
        c = _complete(srv, prompt, ridgefill_tail=32)   # same mode, other tail: from scratch too
        assert c["timings"]["cache_n"] == 0
    with LlamaServer(smollm2_path, ARGS, ctx=1024, threads=2) as srv:
        ref = _complete(srv, prompt, cache_prompt=False)
    assert b["content"] == ref["content"]


@pytest.mark.parametrize("window", [(0, 0), (6, 16)], ids=["lagged", "lagged+window"])
def test_lagged_maps_serve_what_the_bindings_fill(shared_models, prompt, window):
    """A GGUF whose maps also read the previous row (and a window of earlier rows): the server's ridge
    continuation is the bindings' (same ubatches), an exact request after it is the exact one, and a repeated
    ridge request is the same again."""
    model, maps = shared_models.random_maps("smollm2", SPLIT, seed=1 + window[0], lag_every=2, window=window)
    assert fmt.n_lagged(model.path) == sum(f.lag for f in maps.fits) > 0  # the GGUF the server loads has them
    assert (fmt.read_window(model.path) is not None) == (window[0] > 0)
    ctx = model.context(n_ctx=1024, n_batch=256, n_ubatch=64, threads=2)
    ctx.set_fill("ridge")
    want = model.detokenize(ctx.greedy(prompt, 8, sinks=SINKS, tail=TAIL))
    args = ARGS + ["--ridgefill", "ridge", "--ridgefill-sink", str(SINKS), "--ridgefill-tail", str(TAIL)]
    with LlamaServer(model.path, args, ctx=1024, threads=2) as srv:
        fill = _complete(srv, prompt, cache_prompt=False)
        assert fill["timings"]["ridgefill_filled_n"] == N - SINKS - TAIL
        assert fill["content"] == want
        exact = _complete(srv, prompt, ridgefill="exact")
        assert _complete(srv, prompt, cache_prompt=False)["content"] == want
    with LlamaServer(model.path, ARGS, ctx=1024, threads=2) as srv:
        assert exact["content"] == _complete(srv, prompt, cache_prompt=False)["content"]
    assert exact["content"] != want  # the maps are random: a fill that ran changes the continuation
