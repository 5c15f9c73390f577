"""llama-server under hostile input and load: strict RidgeFill fields, malformed bodies, maps it
must refuse, filled KV that must not reach exact requests, and fill under continuous batching."""

import json
import threading

import pytest

from ridgefill.serve.server import LlamaServer, ServerError
from test_trust import overflow_maps

pytestmark = pytest.mark.slow

SPLIT = 15
CTX = 1024
FILL = ["--ridgefill", "identity", "--ridgefill-split", str(SPLIT), "--ridgefill-sink", "4", "--ridgefill-tail", "64"]


@pytest.fixture(scope="module")
def tokens(smollm2, sample_text):
    return [int(t) for t in smollm2.tokenize(sample_text)]


def _complete(srv, prompt, **extra):
    body = {"prompt": prompt, "n_predict": 4, "temperature": 0.0, "cache_prompt": False, **extra}
    return srv.post("/completion", body)


def _error_message(err: ServerError) -> str:
    return json.loads(str(err).split(": ", 1)[1])["error"]["message"]


BAD_ROWS = [1.5, 4.0, True, False, "4", [4], {"n": 4}, -1, CTX + 1, 2**32, 4294967312, 2**63, 2**64 + 16, 1e12]


def test_row_fields_are_strict_integers_and_errors_quote_the_value(smollm2_path, tokens):
    prompt = tokens[:300]
    with LlamaServer(smollm2_path, FILL, ctx=CTX, threads=2) as srv:
        for field in ("ridgefill_sink", "ridgefill_tail"):
            for value in BAD_ROWS:
                with pytest.raises(ServerError) as err:
                    _complete(srv, prompt, **{field: value})
                assert err.value.status == 400, (field, value, str(err.value))
                message = _error_message(err.value)
                assert field in message
                if value != 2**64 + 16:  # beyond uint64 JSON parsers read a float (1.8446744073709552e+19)
                    assert json.dumps(value, separators=(",", ":")) in message, message
        assert srv.alive()
        default = _complete(srv, prompt, ridgefill_sink=None, ridgefill_tail=None)["timings"]
        assert (default["ridgefill_filled_n"], default["ridgefill_full_n"]) == (300 - 68, 68)
        edge = _complete(srv, prompt, ridgefill_sink=0, ridgefill_tail=CTX)["timings"]
        assert edge["ridgefill_full_n"] == 300 and edge.get("ridgefill_filled_n", 0) == 0


BAD_SHARES = [-0.5, -1e-9, 1.0000001, 1.5, 1e308, 2**64, True, False, "0.1", "nan", [0.1], {"q": 0.1}]


def test_the_selected_share_is_a_number_in_0_1_and_selects_what_it_says(smollm2_path, tokens):
    """ridgefill_select under the fixed hostile values and 40 seeded random ones outside [0, 1]: each a 400 naming
    the field, the server up; then a valid share selects ceil(q * filled rows)."""
    import math
    import random

    rng = random.Random(0)
    rand = [rng.choice((-1, 1)) * 10 ** rng.uniform(-9, 12) for _ in range(40)]
    prompt = tokens[:300]
    with LlamaServer(smollm2_path, FILL, ctx=CTX, threads=2) as srv:
        for value in BAD_SHARES + [v if not 0 <= v <= 1 else v + 1.5 for v in rand]:
            with pytest.raises(ServerError) as err:
                _complete(srv, prompt, ridgefill_select=value)
            assert err.value.status == 400, (value, str(err.value))
            assert "ridgefill_select" in _error_message(err.value)
        assert srv.alive()
        done = _complete(srv, prompt, ridgefill_select=0.25)["timings"]
        assert done["ridgefill_filled_n"] == 300 - 68 and done["ridgefill_selected_n"] == math.ceil(0.25 * (300 - 68))


@pytest.mark.parametrize("body", [b"{", b"{\"prompt\": [1, 2", b"not json", b"\xff\xfe", b""])
def test_malformed_json_is_a_400(smollm2_path, body):
    with LlamaServer(smollm2_path, [], ctx=CTX, threads=2) as srv:
        for path in ("/completion", "/v1/completions", "/v1/chat/completions"):
            with pytest.raises(ServerError) as err:
                srv.post_raw(path, body)
            assert err.value.status == 400, (path, str(err.value))
        assert srv.alive()


@pytest.fixture(scope="module")
def refused_files(smollm2_path, tmp_path_factory):
    """{what the load error names: GGUF}: a NaN in one map, and a sink count that would wrap an int32."""
    import numpy as np

    from ridgefill.format.gguf_io import copy_gguf, open_gguf

    d = tmp_path_factory.mktemp("refused")
    good = overflow_maps(smollm2_path, d / "ovf.gguf")
    name = "blk.22.ridge_map.weight"

    def poison(tname, raw):
        if tname != name:
            return raw
        out = raw.copy()
        out.reshape(-1)[11] = np.nan
        return out

    nan = copy_gguf(open_gguf(good), d / "nan.gguf", tensor_data=poison)
    wrap = copy_gguf(open_gguf(good), d / "wrap.gguf", drop_keys=lambda k: k == "ridgefill.sink_rows",
                     add_keys=lambda w: w.add_uint32("ridgefill.sink_rows", 2**32 - 1))
    return {f"{name}: non-finite value": nan, "ridgefill.sink_rows = 4294967295 is out of range": wrap}


def test_server_and_bench_refuse_the_files_the_bindings_refuse(refused_files, tmp_path):
    import subprocess

    from conftest import tool
    from ridgefill import format as fmt

    for message, path in refused_files.items():
        assert not fmt.inspect(path)["loads"]
        log = tmp_path / "srv.log"
        with pytest.raises(ServerError, match="exited"):
            LlamaServer(path, ["--ridgefill", "ridge"], ctx=CTX, threads=2, log=log).start()
        assert message in log.read_text()
        proc = subprocess.run([str(tool("llama-bench")), "-m", str(path), "-p", "64", "-n", "0", "-r", "1",
                               "--ridgefill", "ridge"], capture_output=True, text=True, timeout=120)
        assert proc.returncode > 0 and message in proc.stdout + proc.stderr


def test_exact_request_after_a_poisoned_fill_equals_stock(smollm2_path, tokens, tmp_path):
    """Maps that pass the load checks but fill NaN K/V; the next exact request on the same slot
    equals the one a server without RidgeFill answers (FA off: masked cells enter the softmax)."""
    ovf = overflow_maps(smollm2_path, tmp_path / "ovf.gguf")
    args = ["-fa", "off", "-b", "256", "-ub", "64"]
    exact_prompt = tokens[700:1000]
    body = dict(n_predict=8, n_probs=3)
    with LlamaServer(smollm2_path, args, ctx=CTX, threads=2) as srv:
        stock = _complete(srv, exact_prompt, **body)
    with LlamaServer(ovf, args + ["--ridgefill", "ridge", "--ridgefill-tail", "64"], ctx=CTX, threads=2) as srv:
        for _ in range(2):
            garbage = _complete(srv, tokens[:600], **body)
            assert garbage["timings"]["ridgefill_filled_n"] == 600 - 4 - 64
            after = _complete(srv, exact_prompt, ridgefill="exact", **body)
            assert after["content"] == stock["content"]
            assert after["completion_probabilities"] == stock["completion_probabilities"]


def test_every_ridge_request_fills_its_range_under_continuous_batching(smollm2_path, tokens):
    """-np 4, non-unified KV (split_equal): fill rows never share a ubatch with other slots' full rows."""
    n, sink, tail = 600, 4, 64
    results, errors = {}, []

    def send(key, prompt, **extra):
        try:
            results[key] = _complete(srv, prompt, **extra)
        except Exception as err:  # collected and asserted below
            errors.append((key, err))

    with LlamaServer(smollm2_path, FILL + ["-b", "512", "-ub", "128"], ctx=4 * CTX, threads=2, n_parallel=4) as srv:
        jobs = []
        for i in range(3):
            jobs.append(threading.Thread(target=send, args=(f"exact{i}", tokens[1000 + 300 * i:1000 + 300 * i + 500]),
                                         kwargs=dict(ridgefill="exact", n_predict=24)))
            jobs.append(threading.Thread(target=send, args=(f"fill{i}", tokens[n * i % 400:n * i % 400 + n])))
        for j in jobs:
            j.start()
        for j in jobs:
            j.join(timeout=600)
    assert not errors, errors
    for i in range(3):
        t = results[f"fill{i}"]["timings"]
        assert (t["ridgefill_filled_n"], t["ridgefill_full_n"]) == (n - sink - tail, sink + tail), (i, t)
        assert "ridgefill_filled_n" not in results[f"exact{i}"]["timings"]


def test_a_prompt_never_reuses_rows_filled_where_it_asks_for_the_full_model(smollm2_path, tokens):
    """Same settings, cache_prompt on: a prompt that ends inside an earlier prompt's fill range asks for its last
    `tail` rows in full, and the slot holds them filled; it reuses the rows before them only, and answers what a
    server that never saw the earlier prompt answers, bit for bit. The same prompt again reuses all but its last
    row and answers what that server answers to it a second time (one row alone: llama.cpp's own batch rounding)."""
    # the short prompt's fill range ends at a batch boundary (512 = 2 x -b), so both servers cut its filled rows
    # into the same ubatches
    long, short, tail = tokens[:700], tokens[:576], 64
    args = FILL + ["-b", "256", "-ub", "64"]
    body = dict(n_predict=8, n_probs=3, cache_prompt=True)
    with LlamaServer(smollm2_path, args, ctx=CTX, threads=2) as srv:
        fresh = [_complete(srv, short, **body) for _ in range(2)]
    with LlamaServer(smollm2_path, args, ctx=CTX, threads=2) as srv:
        first = _complete(srv, long, **body)
        again = [_complete(srv, short, **body) for _ in range(2)]
    assert first["timings"]["ridgefill_filled_n"] == len(long) - 4 - tail
    t = again[0]["timings"]
    assert (t["cache_n"], t["ridgefill_filled_n"], t["ridgefill_full_n"]) == (len(short) - tail, 0, tail), t
    assert again[1]["timings"]["cache_n"] == fresh[1]["timings"]["cache_n"] == len(short) - 1
    for reply, ref in zip(again, fresh):
        assert reply["content"] == ref["content"]
        assert reply["completion_probabilities"] == ref["completion_probabilities"]
    # the same from the RAM prompt cache: another prompt took the slot, the long one's state waits in RAM
    with LlamaServer(smollm2_path, args + ["--cache-ram", "64"], ctx=CTX, threads=2) as srv:
        _complete(srv, long, **body)
        _complete(srv, tokens[1000:1300], **body)
        t = _complete(srv, short, **body)["timings"]
    assert (t["cache_n"], t["ridgefill_filled_n"], t["ridgefill_full_n"]) == (len(short) - tail, 0, tail), t


def test_identity_without_a_split_on_a_model_without_maps_says_what_to_pass(smollm2_path, tmp_path):
    log = tmp_path / "server.log"
    with pytest.raises(ServerError, match="exited with code 1 during startup"):
        LlamaServer(smollm2_path, ["--ridgefill", "identity"], ctx=CTX, threads=2, log=log).start()
    assert "identity fill needs one in [1, 29] (--ridgefill-split N" in log.read_text(errors="replace")
