"""TTFT side by side: exact, identity and ridge prefill through the patched llama-bench.

Runs are interleaved (exact, identity, ridge, exact, ...) so that machine noise hits every
mode alike; each run is a fresh llama-bench process timing one prompt (`-p N -n 0 -r 1`).
Printed beside each ratio: the cost-model bound and measured/bound.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field

from . import costmodel, pack
from .runtime import Model
from .server import tool_path


class BenchError(RuntimeError):
    pass


@dataclass
class LengthResult:
    n_tokens: int
    ms: dict[str, list[float]] = field(default_factory=dict)
    peak_rss_mb: dict[str, float] = field(default_factory=dict)
    rows: dict[str, str] = field(default_factory=dict)  # llama-bench's filled/full report

    def median(self, mode: str) -> float:
        return statistics.median(self.ms[mode])


def run_llama_bench(model: str, n_tokens: int, mode: str, threads: int, batch: int, ubatch: int,
                    split: int | None, sinks: int, tail: int, flash_attn: str = "on") -> tuple[float, float, str]:
    """One timed prompt; returns (milliseconds, peak RSS in MB, fill report line)."""
    cmd = [str(tool_path("llama-bench")), "-m", str(model), "-p", str(n_tokens), "-n", "0", "-r", "1",
           "--no-warmup", "-t", str(threads), "-b", str(batch), "-ub", str(ubatch), "-fa", flash_attn, "-o", "json"]
    if mode != "exact":
        cmd += ["--ridgefill", mode, "--ridgefill-sink", str(sinks), "--ridgefill-tail", str(tail)]
        if split is not None:
            cmd += ["--ridgefill-split", str(split)]
    with tempfile.TemporaryFile("w+") as fo, tempfile.TemporaryFile("w+") as fe:
        proc = subprocess.Popen(cmd, stdout=fo, stderr=fe)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak RSS
        proc.returncode = os.waitstatus_to_exitcode(status)
        fo.seek(0), fe.seek(0)
        out, err = fo.read(), fe.read()
    if proc.returncode != 0:
        raise BenchError(f"llama-bench failed ({mode}, {n_tokens} tokens):\n{err[-2000:]}")
    tests = json.loads(out)
    ms = tests[0]["avg_ns"] / 1e6
    rss = usage.ru_maxrss / 1024
    report = next((line for line in err.splitlines() if "ridgefill" in line and "rows filled" in line), "")
    return ms, rss, report


def ttft(model: str, lengths: list[int], runs: int = 5, modes=("exact", "identity", "ridge"), threads: int = 2,
         sinks: int | None = None, tail: int | None = None, split: int | None = None, batch: int = 2048,
         ubatch: int = 512, progress=print) -> dict:
    m = Model(model)
    split = split if split is not None else (m.rf_split_layer or None)
    if "ridge" in modes and not m.rf_split_layer:
        raise BenchError(f"{model} has no ridge maps: fit it first (ridgefill fit) or drop the ridge mode")
    if split is None and any(x != "exact" for x in modes):
        raise BenchError("no split layer: pass --split for identity fill on a model without maps")
    sinks = m.rf_sink_rows if sinks is None else sinks
    tail = m.rf_tail_rows if tail is None else tail
    shape = costmodel.Shape.from_model(m)
    results = []
    for n in lengths:
        r = LengthResult(n, {mode: [] for mode in modes})
        for i in range(runs):
            for mode in modes:
                ms, rss, report = run_llama_bench(model, n, mode, threads, batch, ubatch, split, sinks, tail)
                r.ms[mode].append(ms)
                r.peak_rss_mb[mode] = max(r.peak_rss_mb.get(mode, 0.0), rss)
                if report:
                    r.rows[mode] = report
                progress(f"  {n} tokens, run {i + 1}/{runs}, {mode}: {ms:.0f} ms")
        results.append(r)
    return summarize(model, results, shape, split, sinks, tail, threads, modes)


def summarize(model, results, shape, split, sinks, tail, threads, modes) -> dict:
    map_bytes = 0
    try:
        map_bytes = pack.inspect(model)["map_bytes"]
    except ValueError:
        pass
    rows = []
    for r in results:
        row = {"n_tokens": r.n_tokens, "median_ms": {m: r.median(m) for m in modes}, "samples_ms": r.ms,
               "peak_rss_mb": r.peak_rss_mb, "fill_rows": r.rows}
        for mode in modes:
            if mode == "exact":
                continue
            ratio = r.median("exact") / r.median(mode)
            b = costmodel.bound(shape, r.n_tokens, split, sinks, tail, with_map=(mode == "ridge"))
            row[f"ratio_{mode}"] = ratio
            row[f"bound_{mode}"] = b
            row[f"of_bound_{mode}"] = ratio / b
        rows.append(row)
    return {"model": str(model), "shape": asdict(shape), "split": split, "sinks": sinks, "tail": tail,
            "threads": threads, "map_bytes": map_bytes, "modes": list(modes), "results": rows}


def markdown(summary: dict) -> str:
    modes = summary["modes"]
    fills = [m for m in modes if m != "exact"]
    head = "| tokens | " + " | ".join(f"TTFT {m} (ms)" for m in modes) + " | " + \
        " | ".join(f"{m}: ratio / bound / of bound" for m in fills) + " |"
    lines = [head, "|" + " --- |" * (1 + len(modes) + len(fills))]
    for r in summary["results"]:
        cells = [str(r["n_tokens"])] + [f"{r['median_ms'][m]:.0f}" for m in modes]
        cells += [f"{r[f'ratio_{m}']:.2f}x / {r[f'bound_{m}']:.2f}x / {100 * r[f'of_bound_{m}']:.0f}%" for m in fills]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def fit_speed(model_path: str, split: int, tokens: int, threads: int = 2, window: int = 2048) -> dict:
    """Capture cost vs exact prefill of the same windows, solve time and peak RSS of a fit."""
    import resource
    import time

    from . import corpus, ridge
    from .calibrate import CaptureConfig, accumulate, capture_llama
    from .stats import CalibrationStats

    cfg = CaptureConfig(split=split, tokens=tokens, window=window, threads=threads)
    docs = corpus.default_calibration()
    identity = pack.identity_of(model_path)
    m = Model(model_path)
    ctx = m.context(n_ctx=window, n_batch=cfg.n_batch, n_ubatch=cfg.n_batch, threads=threads)

    def plain(w, _mom):
        ctx.clear()
        ctx.prefill(w)

    t0 = time.perf_counter()
    accumulate(CalibrationStats(identity, split), docs, cfg, m.tokenize, m.bos if m.add_bos else None, "exact", plain)
    t_exact = time.perf_counter() - t0

    t0 = time.perf_counter()
    stats = capture_llama(model_path, docs, cfg, identity)
    t_capture = time.perf_counter() - t0
    t0 = time.perf_counter()
    maps = ridge.fit(stats)
    t_solve = time.perf_counter() - t0
    n = stats.provenance.n_tokens + stats.heldout_provenance.n_tokens
    return {"model": str(model_path), "split": split, "tokens": n, "threads": threads,
            "exact_prefill_s": t_exact, "capture_s": t_capture, "capture_over_exact": t_capture / t_exact,
            "capture_tok_per_s": n / t_capture, "solve_s": t_solve,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "r2_ridge": [f.r2_ridge for f in maps.fits]}
