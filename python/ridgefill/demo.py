"""`make demo`: the main job on the default model, end to end, with a short table.

The fill path is not in the fork yet, so this runs the exact-model part of the job:
fetch and verify the model, serve it with the patched llama-server, measure TTFT at 4K
prompt tokens (llama-server's own prompt timing, median of 3) and check a needle.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from . import models
from .evals.needle import single_needle, string_match_all
from .runtime import Model
from .server import LlamaServer, tool_path

PROMPT_TOKENS = 4096
RUNS = 3


def ttft_ms(srv: LlamaServer, tokens) -> float:
    res = srv.post("/completion", {"prompt": [int(t) for t in tokens], "n_predict": 1, "cache_prompt": False,
                                   "temperature": 0.0})
    return float(res["timings"]["prompt_ms"])


def needle_answer(srv: LlamaServer, tokens) -> str:
    res = srv.post("/completion", {"prompt": [int(t) for t in tokens], "n_predict": 12, "cache_prompt": False,
                                   "temperature": 0.0})
    return res["content"]


def main(model_name: str = models.DEFAULT_MODEL, threads: int | None = None) -> int:
    t0 = time.monotonic()
    print(f"[1/3] fetching {model_name} (verified by sha256)", flush=True)
    path = models.fetch_model(model_name)
    model = Model(path)
    item = single_needle(model, PROMPT_TOKENS, depth=0.5, seed=7)
    log = Path(tempfile.gettempdir()) / "ridgefill-demo-server.log"
    args = ["-b", "2048", "-ub", "512", "--no-cache-prompt"]
    print(f"[2/3] starting the patched llama-server (log: {log})", flush=True)
    with LlamaServer(path, args, ctx=PROMPT_TOKENS + 64, threads=threads, log=log) as srv:
        print(f"[3/3] TTFT at {item.n_tokens} prompt tokens, {RUNS} runs, and a needle check", flush=True)
        times = [ttft_ms(srv, item.tokens) for _ in range(RUNS)]
        answer = needle_answer(srv, item.tokens)
    cmdline = " ".join([str(tool_path("llama-server")), "-m", str(path), "-c", str(PROMPT_TOKENS + 64), "-np", "1", *args])
    score = string_match_all(answer, item.answers)
    print()
    print("| mode | TTFT (ms, median of 3) | needle at depth 0.5 |")
    print("| --- | --- | --- |")
    print(f"| exact | {statistics.median(times):.0f} | {'found' if score == 100 else 'missed'} "
          f"(expected {item.answers[0]}, got {answer.strip()[:24]!r}) |")
    print("| ridge | not available yet: the fill path is not in the fork yet | |")
    print()
    print(f"model GGUF : {path}")
    print(f"serve it   : {cmdline}")
    print(f"demo took {time.monotonic() - t0:.0f} s")
    return 0
