"""TTFT side by side: exact, identity and ridge prefill through the patched llama-bench and llama-server.

Runs are interleaved (exact, identity, ridge, exact, ...) so that machine noise hits every
mode alike. llama-bench: each run is a fresh process timing one prompt (`-p N -n 0 -r 1`).
llama-server: one server per fill mode (`-np 1`), exact requests go to one of them through the
per-request override; each request sends a fresh prompt with `cache_prompt: false` and
`n_predict: 1`, and TTFT is the request's wall time. Printed beside each ratio: the
cost-model bound and measured/bound.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field

import numpy as np

from . import costmodel, pack
from .server import LlamaServer, tool_path


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
                    split: int | None, sinks: int, tail: int, flash_attn: str = "on", tool: str | None = None,
                    extra_args: tuple = ()) -> tuple[float, float, str]:
    """One timed prompt; returns (milliseconds, peak RSS in MB, fill report line)."""
    cmd = [str(tool or tool_path("llama-bench")), *extra_args, "-m", str(model), "-p", str(n_tokens), "-n", "0", "-r", "1",
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
         ubatch: int = 512, progress=print, tool: str | None = None, extra_args: tuple = ()) -> dict:
    """TTFT through llama-bench; `tool`/`extra_args`: another build of it (CUDA) and its flags (-ngl)."""
    split, sinks, tail = _resolve(model, modes, split, sinks, tail)
    shape = costmodel.Shape.from_gguf(model)
    results = []
    for n in lengths:
        r = LengthResult(n, {mode: [] for mode in modes})
        for i in range(runs):
            for mode in modes:
                ms, rss, report = run_llama_bench(model, n, mode, threads, batch, ubatch, split, sinks, tail,
                                                  tool=tool, extra_args=extra_args)
                r.ms[mode].append(ms)
                r.peak_rss_mb[mode] = max(r.peak_rss_mb.get(mode, 0.0), rss)
                if report:
                    r.rows[mode] = report
                progress(f"  {n} tokens, run {i + 1}/{runs}, {mode}: {ms:.0f} ms")
        results.append(r)
    out = summarize(model, results, shape, split, sinks, tail, threads, modes, map_bytes(model))
    out["path"] = "llama-bench"
    return out


def _prose_tokens(m: Model) -> np.ndarray:
    from . import corpus

    return m.tokenize("\n\n".join(d.text for d in corpus.evaluation_documents()), add_special=False)


def _server_prompt(m: Model, toks: np.ndarray, n_tokens: int, run: int) -> list[int]:
    """n_tokens of evaluation prose, a different slice per run (no prefix is ever shared)."""
    start = (run * 7919) % max(1, len(toks) - n_tokens)
    piece = np.resize(toks[start : start + n_tokens], n_tokens)
    if m.add_bos:
        piece[0] = m.bos
    return [int(t) for t in piece]


def _server_args(mode: str, split, sinks, tail, batch, ubatch) -> list[str]:
    args = ["-b", str(batch), "-ub", str(ubatch), "-fa", "on", "--cache-ram", "0"]
    if mode != "exact":
        args += ["--ridgefill", mode, "--ridgefill-sink", str(sinks), "--ridgefill-tail", str(tail)]
        if split is not None:
            args += ["--ridgefill-split", str(split)]
    return args


def _peak_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def check_server_lengths(m, lengths: list[int]) -> None:
    """llama-server caps a slot's context at the training context, and a prompt must leave it a row."""
    too_long = [n for n in lengths if n >= m.n_ctx_train]
    if too_long:
        raise BenchError(f"llama-server takes prompts of at most {m.n_ctx_train - 1} tokens on this model "
                         f"(training context {m.n_ctx_train}); drop {too_long} from the server path's lengths")


def ttft_server(model: str, lengths: list[int], runs: int = 5, modes=("exact", "identity", "ridge"),
                threads: int = 2, sinks: int | None = None, tail: int | None = None, split: int | None = None,
                batch: int = 2048, ubatch: int = 512, progress=print) -> dict:
    """TTFT through llama-server: wall time of a 1-token completion of a fresh N-token prompt."""
    import time

    from .runtime import Model

    m = Model(model)
    check_server_lengths(m, lengths)
    split, sinks, tail = _resolve(model, modes, split, sinks, tail)
    fill_modes = [x for x in modes if x != "exact"] or ["exact"]
    servers = {x: LlamaServer(model, _server_args(x, split, sinks, tail, batch, ubatch), ctx=max(lengths) + 64,
                              threads=threads) for x in fill_modes}
    serve = lambda mode: servers.get(mode, servers[fill_modes[0]])  # noqa: E731
    prose = _prose_tokens(m)
    results = []
    try:
        for srv in servers.values():
            srv.start()
        for n in lengths:
            r = LengthResult(n, {mode: [] for mode in modes})
            for i in range(runs):
                for j, mode in enumerate(modes):
                    body = {"prompt": _server_prompt(m, prose, n, i * len(modes) + j), "n_predict": 1,
                            "temperature": 0.0, "cache_prompt": False, "ridgefill": mode}
                    t0 = time.perf_counter()
                    t = serve(mode).post("/completion", body)["timings"]
                    ms = 1000 * (time.perf_counter() - t0)
                    if t["prompt_n"] != n:
                        raise BenchError(f"llama-server evaluated {t['prompt_n']} prompt tokens, not {n}")
                    r.ms[mode].append(ms)
                    if mode != "exact":
                        r.rows[mode] = f"{t.get('ridgefill_filled_n', 0)} rows filled, {t.get('ridgefill_full_n', 0)} full"
                    progress(f"  llama-server {n} tokens, run {i + 1}/{runs}, {mode}: {ms:.0f} ms")
            r.peak_rss_mb = {mode: _peak_rss_mb(serve(mode).proc.pid) for mode in modes}
            results.append(r)
    finally:
        for srv in servers.values():
            srv.stop()
    out = summarize(model, results, costmodel.Shape.from_gguf(model), split, sinks, tail, threads, modes,
                    map_bytes(model))
    out["path"] = "llama-server"
    return out


def _resolve(model, modes, split, sinks, tail):
    """Split, sinks and tail: the arguments, else the GGUF's ridgefill.* metadata, else llama.cpp's defaults."""
    from .gguf_io import field, open_gguf

    reader = open_gguf(model)
    maps_split = int(field(reader, "ridgefill.split_layer") or 0)
    split = split if split is not None else (maps_split or None)
    if "ridge" in modes and not maps_split:
        raise BenchError(f"{model} has no ridge maps: fit it first (ridgefill fit) or drop the ridge mode")
    if split is None and any(x != "exact" for x in modes):
        raise BenchError("no split layer: pass --split for identity fill on a model without maps")
    sinks = int(field(reader, "ridgefill.sink_rows") or 4) if sinks is None else sinks
    tail = int(field(reader, "ridgefill.tail_rows") or 1024) if tail is None else tail
    return split, sinks, tail


def plot(summaries: list[dict], out_png: str) -> str:
    """TTFT per mode and speed-up vs prompt length for each path; the cost-model bound dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    color = {"exact": "C0", "identity": "C1", "ridge": "C2"}  # one colour per mode in both panels
    fig, (ax_t, ax_r) = plt.subplots(1, 2, figsize=(11, 4.2))
    for summ in summaries:
        tag = summ.get("path", "llama-bench")
        style = dict(marker="o", linestyle="-" if tag == "llama-bench" else "-.")
        n = [r["n_tokens"] for r in summ["results"]]
        for mode in summ["modes"]:
            ax_t.plot(n, [r["median_ms"][mode] / 1000 for r in summ["results"]], color=color[mode], **style,
                      label=f"{mode} ({tag})")
            if mode != "exact":
                ratio = [r[f"ratio_{mode}"] for r in summ["results"]]
                spread = [_row_ratio_range(r, mode) for r in summ["results"]]
                yerr = [[y - lo for y, (lo, _) in zip(ratio, spread)], [hi - y for y, (_, hi) in zip(ratio, spread)]]
                ax_r.errorbar(n, ratio, yerr=yerr, capsize=3, color=color[mode], **style, label=f"{mode} ({tag})")
    s0 = summaries[0]
    fills = [x for x in s0["modes"] if x != "exact"]
    if fills:
        n = [r["n_tokens"] for r in s0["results"]]
        ax_r.plot(n, [r[f"bound_{fills[-1]}"] for r in s0["results"]], "k--", label=f"cost-model bound ({fills[-1]})")
    ax_t.set(xlabel="prompt tokens", ylabel="TTFT (s, median)", xscale="log", title="time to first token")
    ax_r.set(xlabel="prompt tokens", ylabel="TTFT exact / TTFT fill (bars: paired-round range)", xscale="log",
             title=f"speed-up: split {s0['split']}, sinks {s0['sinks']}, tail {s0['tail']}")
    for ax in (ax_t, ax_r):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{os.path.basename(s0['model'])}, {s0['threads']} threads")
    fig.tight_layout()
    fig.savefig(out_png, dpi=110)
    plt.close(fig)
    return out_png


def map_bytes(model) -> int:
    """Bytes of RidgeFill maps in the GGUF; 0 for a model without maps (exact/identity runs)."""
    try:
        return pack.inspect(model)["map_bytes"]
    except ValueError:
        return 0


def summarize(model, results, shape, split, sinks, tail, threads, modes, maps: int = 0) -> dict:
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
            row[f"ratio_range_{mode}"] = _paired_ratio_range(r.ms["exact"], r.ms[mode])
        rows.append(row)
    return {"model": str(model), "shape": asdict(shape), "split": split, "sinks": sinks, "tail": tail,
            "threads": threads, "map_bytes": maps, "modes": list(modes), "results": rows}


def merge_summaries(summaries: list[dict]) -> list[dict]:
    """Runs of one setting (path, model, split, sinks, tail, threads, modes) saved at different lengths
    become one series, sorted by length; a length measured twice keeps the later file's rows."""
    merged: dict[tuple, dict] = {}
    for s in summaries:
        key = (s.get("path"), s["model"], s["split"], s["sinks"], s["tail"], s["threads"], tuple(s["modes"]))
        if key in merged:
            rows = {r["n_tokens"]: r for r in merged[key]["results"] + s["results"]}
            merged[key] = {**merged[key], "results": [rows[n] for n in sorted(rows)]}
        else:
            merged[key] = s
    return list(merged.values())


def _paired_ratio_range(exact_ms: list[float], fill_ms: list[float]) -> list[float]:
    """Min and max of exact/fill over the interleaved rounds: run i of each mode shared the machine's state."""
    ratios = [e / f for e, f in zip(exact_ms, fill_ms)]
    return [min(ratios), max(ratios)]


def _row_ratio_range(row: dict, mode: str) -> list[float]:
    """From the samples, so reports saved before the range was stored show it too."""
    return _paired_ratio_range(row["samples_ms"]["exact"], row["samples_ms"][mode])


def _ratio_cell(row: dict, mode: str) -> str:
    cell = f"{row[f'ratio_{mode}']:.2f}x"
    if len(row["samples_ms"][mode]) > 1:
        lo, hi = _row_ratio_range(row, mode)
        cell += f" ({lo:.2f}-{hi:.2f})"
    return cell + f" / {row[f'bound_{mode}']:.2f}x / {100 * row[f'of_bound_{mode}']:.0f}%"


def markdown(summary: dict) -> str:
    modes = summary["modes"]
    title = f"{summary.get('path', 'llama-bench')}, split {summary['split']}, sinks {summary['sinks']}, " \
        f"tail {summary['tail']}, {summary['threads']} threads, map memory {summary['map_bytes'] / 2**20:.1f} MiB"
    fills = [m for m in modes if m != "exact"]
    head = "| tokens | " + " | ".join(f"TTFT {m} (ms)" for m in modes) + " | " + \
        " | ".join(f"{m}: ratio (paired range) / bound / of bound" for m in fills) + " |"
    lines = [head, "|" + " --- |" * (1 + len(modes) + len(fills))]
    for r in summary["results"]:
        cells = [str(r["n_tokens"])] + [f"{r['median_ms'][m]:.0f}" for m in modes]
        cells += [_ratio_cell(r, m) for m in fills]
        lines.append("| " + " | ".join(cells) + " |")
    return title + "\n\n" + "\n".join(lines)


def fit_speed(model_path: str, split: int, tokens: int, threads: int = 2, window: int = 2048) -> dict:
    """Capture cost vs exact prefill of the same windows, solve time and peak RSS of a fit."""
    import resource
    import time

    from . import corpus, ridge
    from .calibrate import CaptureConfig, accumulate, capture_llama
    from .runtime import Model
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
