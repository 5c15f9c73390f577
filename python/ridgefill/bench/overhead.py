"""What ridge mode costs where it fills nothing: token generation and a prompt shorter than the fill range.

Ridge mode with lagged or window maps keeps split states for the rows a later fill row reads; decoding
steps and prompts without a fill range must keep nothing and run exact mode's graph. Each round is one
llama-bench process that runs both modes (`--ridgefill exact,ridge`, the order reversed every other
round so that a drift of the machine's speed biases neither); the round's ratio is ridge's time over
exact's, and the report is the geometric mean over rounds with a bootstrap interval. Beside the times, the
graphs: each test runs once more in each mode with the scheduler's listing on (GGML_SCHED_DEBUG=2), and
the nodes of the graphs it computed must be the same, op for op and name for name. On a noisy machine the
times cannot show a difference of 2 %; the listing shows there is nothing that could make one.
"""

from __future__ import annotations

import json
import os
import re
import subprocess

import numpy as np

from ..paths import tool_path
from ..serve.server import maps_flags
from .ttft import BenchError, round_order


def _round(model: str, test: list[str], modes: list[str], reps: int, threads: int, tool: str | None,
           maps: str | None = None) -> dict:
    cmd = [str(tool or tool_path("llama-bench")), "-m", str(model), *test, "-r", str(reps), "-t", str(threads),
           "--ridgefill", ",".join(modes), "-o", "json", *maps_flags(maps)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BenchError(f"llama-bench failed ({' '.join(test)}):\n{proc.stderr[-2000:]}")
    rows = {r["ridgefill"]: r for r in json.loads(proc.stdout)}
    if sorted(rows) != sorted(modes):
        raise BenchError(f"llama-bench measured modes {sorted(rows)}, not {sorted(modes)}")
    if rows["ridge"]["ridgefill_filled_n"] != 0:
        raise BenchError(f"ridge mode filled {rows['ridge']['ridgefill_filled_n']} rows in '{' '.join(test)}': "
                         "this benchmark measures a run that fills none")
    return {m: rows[m]["avg_ns"] / 1e6 for m in modes}


def graph_nodes(model: str, test: list[str], mode: str, threads: int = 2, tool: str | None = None,
                maps: str | None = None) -> list[str]:
    """The nodes of the graphs one llama-bench run of `test` in `mode` computed (after its last reserve), as
    ggml's scheduler lists them: op, name, backend and sources, sizes left out."""
    cmd = [str(tool or tool_path("llama-bench")), "-v", "-m", str(model), *test, "-r", "1", "-t", str(threads),
           "--ridgefill", mode, "-o", "json", *maps_flags(maps)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "GGML_SCHED_DEBUG": "2"})
    if proc.returncode != 0:
        raise BenchError(f"llama-bench failed ({' '.join(test)}, {mode}):\n{proc.stderr[-2000:]}")
    lines = proc.stderr.splitlines()
    last_reserve = max((i for i, line in enumerate(lines) if "reserve took" in line), default=-1)
    nodes = [re.sub(r"\(\s*[\d.]+\s*[KMG]?\)", "", re.sub(r"^node #\s*\d+", "", line)).strip()
             for line in lines[last_reserve + 1:] if line.startswith("node #")]
    if not nodes:
        raise BenchError(f"llama-bench listed no graph for '{' '.join(test)}' in {mode} mode (GGML_SCHED_DEBUG)")
    return [re.sub(r"\s+", " ", n) for n in nodes]


def same_graph(model: str, test: list[str], threads: int = 2, tool: str | None = None,
               maps: str | None = None) -> bool:
    """Whether ridge mode computes exact mode's graphs for `test`, node for node."""
    return graph_nodes(model, test, "exact", threads, tool, maps) == graph_nodes(model, test, "ridge", threads, tool, maps)


def ratio_interval(exact_ms: list[float], ridge_ms: list[float], n_boot: int = 10000, seed: int = 0,
                   level: float = 0.95) -> tuple[float, float, float]:
    """Geometric mean of ridge/exact over paired rounds and its percentile bootstrap interval."""
    logs = np.log(np.asarray(ridge_ms)) - np.log(np.asarray(exact_ms))
    reps = np.random.default_rng(seed).choice(logs, size=(n_boot, len(logs))).mean(axis=1)
    tail = 100 * (1 - level) / 2
    lo, hi = np.percentile(reps, [tail, 100 - tail])
    return float(np.exp(logs.mean())), float(np.exp(lo)), float(np.exp(hi))


def overhead(model: str, rounds: int = 10, reps: int = 3, n_gen: int = 128, n_prompt: int = 512, threads: int = 2,
             tool: str | None = None, progress=print, maps: str | None = None) -> list[dict]:
    """tg{n_gen} and pp{n_prompt} (a prompt that fills nothing under the model's sinks and tail), both modes;
    `maps`: a maps file beside `model`."""
    out = []
    for name, test in ((f"tg{n_gen}", ["-p", "0", "-n", str(n_gen)]), (f"pp{n_prompt}", ["-p", str(n_prompt), "-n", "0"])):
        times = {"exact": [], "ridge": []}
        for i in range(rounds):
            for mode, ms in _round(model, test, round_order(("exact", "ridge"), i), reps, threads, tool, maps).items():
                times[mode].append(ms)
            progress(f"{name} round {i + 1}/{rounds}: exact {times['exact'][-1]:.1f} ms, ridge {times['ridge'][-1]:.1f} ms")
        ratio, lo, hi = ratio_interval(times["exact"], times["ridge"])
        out.append({"test": name, "rounds": rounds, "reps": reps, "exact_ms": times["exact"], "ridge_ms": times["ridge"],
                    "ratio": ratio, "ratio_lo": lo, "ratio_hi": hi,
                    "same_graph": same_graph(model, test, threads, tool, maps)})
    return out


def markdown(model: str, results: list[dict], tolerance: float = 0.02) -> str:
    lines = [f"ridge mode where nothing is filled, {model}: time ridge / exact (geometric mean over interleaved "
             "rounds, 95 % bootstrap interval)", "",
             "| test | rounds x reps | exact ms (median) | ridge ms (median) | ridge / exact | within "
             f"{100 * tolerance:.0f} % | exact's graph |", "|---|---|---:|---:|---|---|---|"]
    for r in results:
        ok = within(r, tolerance)
        lines.append(f"| {r['test']} | {r['rounds']} x {r['reps']} | {np.median(r['exact_ms']):.1f} | "
                     f"{np.median(r['ridge_ms']):.1f} | {r['ratio']:.3f} ({r['ratio_lo']:.3f}-{r['ratio_hi']:.3f}) | "
                     f"{'yes' if ok else 'no'} | {'yes' if r.get('same_graph') else 'no'} |")
    return "\n".join(lines)


def within(result: dict, tolerance: float) -> bool:
    """The measured ratio lies within 1 ± tolerance (its interval is printed beside it)."""
    return abs(result["ratio"] - 1) <= tolerance
