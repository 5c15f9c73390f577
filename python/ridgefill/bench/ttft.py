"""TTFT side by side: exact, identity and ridge prefill through the patched llama-bench and llama-server.

Runs are interleaved in rounds whose order alternates (exact, identity, ridge, then ridge,
identity, exact, ...) so that machine noise, and a drift of the machine's speed over a round, hit
every mode alike. llama-bench: each run is a fresh process timing one prompt (`-p N -n 0 -r 1`).
llama-server: one server per fill mode (`-np 1`), exact requests go to one of them through the
per-request override; each request sends a fresh prompt with `cache_prompt: false` and
`n_predict: 1`, and TTFT is the request's wall time. Printed beside each ratio: the
cost-model bound and measured/bound.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from typing import TYPE_CHECKING

import numpy as np

from . import costmodel
from .pipeline import Placer, annotate
from .. import format as fmt
from ..errors import RidgefillError
from ..fit.route import parse_mode, selected_share
from ..runtime.split_prefill import nothing_filled
from ..paths import tool_path
from ..serve.server import LlamaServer, ServerPool, maps_flags, ridgefill_flags, ttft_ms
from .report import LengthResult, kv_maps, lagged_maps, map_bytes, summarize

if TYPE_CHECKING:
    from ..runtime import Model


class BenchError(RidgefillError, RuntimeError):
    pass


def run_llama_bench(model: str, n_tokens: int, mode: str, threads: int, batch: int, ubatch: int,
                    split: int | None, sinks: int, tail: int, flash_attn: str = "on", tool: str | None = None,
                    extra_args: tuple = (), warmup: bool = False) -> tuple[float, float, str]:
    """One timed prompt (after one untimed run of it with `warmup`); returns (milliseconds, peak RSS in MB,
    fill report line)."""
    row, rss_mb = llama_bench_row(model, n_tokens, mode, threads, batch, ubatch, split, sinks, tail, flash_attn, tool,
                                  extra_args, warmup)
    base, share = parse_mode(mode)
    report = "" if base == "exact" else f"{row['ridgefill_filled_n']} rows filled, {row['ridgefill_full_n']} full"
    if share > 0:
        report += f", {row['ridgefill_routed_n']} routed"
    if selected_share(mode) > 0:
        report += f", {row['ridgefill_selected_n']} selected"
    return row["avg_ns"] / 1e6, rss_mb, report


def llama_bench_row(model: str, n_tokens: int, mode: str, threads: int, batch: int, ubatch: int,
                    split: int | None, sinks: int, tail: int, flash_attn: str = "on", tool: str | None = None,
                    extra_args: tuple = (), warmup: bool = False) -> tuple[dict, float]:
    """One llama-bench process timing one prompt: its JSON row, checked to have measured the mode asked for,
    and the process's peak RSS in MB."""
    cmd = [str(tool or tool_path("llama-bench")), *extra_args, "-m", str(model), "-p", str(n_tokens), "-n", "0", "-r", "1",
           *([] if warmup else ["--no-warmup"]), "-t", str(threads), "-b", str(batch), "-ub", str(ubatch), "-fa", flash_attn,
           "-o", "json"]
    cmd += ridgefill_flags(mode, split, sinks, tail)
    with tempfile.TemporaryFile("w+") as fo, tempfile.TemporaryFile("w+") as fe:
        proc = subprocess.Popen(cmd, stdout=fo, stderr=fe)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak RSS
        proc.returncode = os.waitstatus_to_exitcode(status)
        fo.seek(0), fe.seek(0)
        out, err = fo.read(), fe.read()
    if proc.returncode != 0:
        raise BenchError(f"llama-bench failed ({mode}, {n_tokens} tokens):\n{err[-2000:]}")
    row = json.loads(out)[0]
    base, share = parse_mode(mode)
    measured = (row["ridgefill"], row["ridgefill_sink"], row["ridgefill_tail"], round(row.get("ridgefill_route", 0.0), 6),
                round(row.get("ridgefill_select", 0.0), 6))
    asked = (base, sinks, tail, round(share, 6), round(selected_share(mode), 6)) if base != "exact" else \
        ("exact", 0, 0, 0.0, 0.0)
    if measured != asked or (split is not None and mode != "exact" and row["ridgefill_split"] != split):
        raise BenchError(f"llama-bench measured ridgefill/sink/tail {measured} at split {row['ridgefill_split']}, "
                         f"not {asked} at split {split}")
    return row, usage.ru_maxrss / 1024


def round_order(modes, i: int) -> list:
    """Round i's order of the modes: as given, reversed in odd rounds (a linear drift then biases none)."""
    return list(modes) if i % 2 == 0 else list(reversed(modes))


def ttft(model: str, lengths: list[int], runs: int = 5, modes=("exact", "identity", "ridge"), threads: int = 2,
         sinks: int | None = None, tail: int | None = None, split: int | None = None, batch: int = 2048,
         ubatch: int = 512, progress=print, tool: str | None = None, extra_args: tuple = (), rpc: str | None = None,
         ngl: int = -1, tensor_split: str = "auto", warmup: bool | None = None, maps: str | None = None) -> dict:
    """TTFT through llama-bench; `maps`: a maps file beside `model` (--ridgefill-maps), whose ridgefill.* metadata
    then counts; `tool`/`extra_args`: another build of it (CUDA) and its flags;
    `rpc`: 'host:port,...' of ggml-rpc-servers; `ngl`: layers on the GPU or RPC devices (-1: all of them);
    `tensor_split`: where a pipelined run puts the layers (pipeline.Placer); `warmup`: run each process's
    prompt once untimed first (None: where layers are on devices, see _warm)."""
    extra_args, meta = (*extra_args, *_placement(rpc, ngl), *maps_flags(maps)), maps or model
    split, sinks, tail = fill_settings(meta, modes, split, sinks, tail)
    _warn_unfilled(lengths, modes, sinks, tail, progress)
    shape = costmodel.Shape.from_gguf(model)
    placer = _placer(meta, shape, rpc, ngl, tool, tensor_split, ubatch, split, sinks, tail)
    warm = _warm(warmup, placer, ngl, tool)
    results = []
    for n in lengths:
        r = LengthResult(n, {mode: [] for mode in modes})
        for i in range(runs):
            for mode in round_order(modes, i):
                ms, rss, report = run_llama_bench(model, n, mode, threads, batch, ubatch, split, sinks, tail,
                                                  tool=tool, extra_args=(*extra_args, *placer.flags(mode, n)), warmup=warm)
                r.ms[mode].append(ms)
                r.peak_rss_mb[mode] = max(r.peak_rss_mb.get(mode, 0.0), rss)
                if report:
                    r.rows[mode] = report
                progress(f"  {n} tokens, run {i + 1}/{runs}, {mode}: {ms:.0f} ms")
        results.append(r)
    out = summarize(model, results, shape, split, sinks, tail, threads, modes, map_bytes(meta), lagged_maps(meta),
                    kv_maps(meta))
    out["path"], out["maps"] = "llama-bench", maps
    out["round_order"] = "alternating"
    out["rpc"], out["ngl"], out["warmup"] = rpc, ngl, warm
    return annotate(out, placer, modes, lambda n: n)


def _warm(warmup: bool | None, placer: Placer, ngl: int, tool: str | None) -> bool:
    """By default a device run is timed warm: a process's first prompt on a device pays once what a serving
    process has paid long before (over RPC, a remote query per new ubatch shape that waits behind the server's
    queue; on a GPU, kernel and library set-up). On the CPU a first prompt costs what later ones do."""
    if warmup is not None:
        return warmup
    return ngl != 0 and (placer.n_devices > 0 or tool is not None)


def _placer(model, shape, rpc, ngl, tool, tensor_split, ubatch, split, sinks, tail) -> Placer:
    """Devices: the rpc-servers, and this build's GPUs when measuring with it (another build's are not known)."""
    n_devices = len([e for e in (rpc or "").split(",") if e.strip()])
    if tool is None:
        from ..runtime import devices

        n_devices += sum(1 for _, _, kind in devices() if kind != "cpu")
    return Placer(shape, n_devices, ubatch, split, sinks, tail, lagged_maps(model), tensor_split, ngl, kv_maps(model))


def _prose_tokens(m: Model) -> np.ndarray:
    from ..sources import corpus

    return m.tokenize("\n\n".join(d.text for d in corpus.evaluation_documents()), add_special=False)


def _server_prompt(m: Model, toks: np.ndarray, n_tokens: int, run: int) -> list[int]:
    """n_tokens of evaluation prose, a different slice per run (no prefix is ever shared)."""
    start = (run * 7919) % max(1, len(toks) - n_tokens)
    piece = np.resize(toks[start : start + n_tokens], n_tokens)
    if m.add_bos:
        piece[0] = m.bos
    return [int(t) for t in piece]


def _placement(rpc: str | None, ngl: int) -> list[str]:
    """Where the layers go, in the flags llama-bench and llama-server share (-ngl -1 is "all" in both)."""
    return [*(["--rpc", rpc] if rpc else []), "-ngl", str(ngl)]


def _server_args(mode: str, split, sinks, tail, batch, ubatch, rpc: str | None = None, ngl: int = -1) -> list[str]:
    return ["-b", str(batch), "-ub", str(ubatch), "-fa", "on", "--cache-ram", "0", *_placement(rpc, ngl),
            *ridgefill_flags(mode, split, sinks, tail)]


def check_server_lengths(m, lengths: list[int]) -> None:
    """llama-server caps a slot's context at the training context, and a prompt must leave it a row."""
    too_long = [n for n in lengths if n >= m.n_ctx_train]
    if too_long:
        raise BenchError(f"llama-server takes prompts of at most {m.n_ctx_train - 1} tokens on this model "
                         f"(training context {m.n_ctx_train}); drop {too_long} from the server path's lengths")


def ttft_server(model: str, lengths: list[int], runs: int = 5, modes=("exact", "identity", "ridge"),
                threads: int = 2, sinks: int | None = None, tail: int | None = None, split: int | None = None,
                batch: int = 2048, ubatch: int = 512, progress=print, rpc: str | None = None, ngl: int = -1,
                tensor_split: str = "auto", warmup: bool | None = None, maps: str | None = None) -> dict:
    """TTFT through llama-server (server.ttft_ms): wall time of a 1-token completion of a fresh N-token prompt;
    `rpc`, `ngl`, `tensor_split`, `warmup` (an untimed request when a server starts) and `maps` as in ttft().
    Pipelined, every mode has its own server, its layers placed for the longest prompt; otherwise exact
    requests go to a fill server through the per-request override. Over rpc-servers (one client at a
    time) one llama-server runs at a time: the mode's, started when it is due."""
    from ..runtime import Model

    m = Model(model, n_gpu_layers=0)  # its tokenizer and training context only
    check_server_lengths(m, lengths)
    meta = maps or model  # the file whose ridgefill.* metadata counts
    split, sinks, tail = fill_settings(meta, modes, split, sinks, tail)
    _warn_unfilled(lengths, modes, sinks, tail, progress)
    shape = costmodel.Shape.from_gguf(model)
    placer = _placer(meta, shape, rpc, ngl, None, tensor_split, ubatch, split, sinks, tail)
    longest = max(lengths)
    fill_modes = list(modes) if placer.active else [x for x in modes if x != "exact"] or ["exact"]
    pool = ServerPool({x: LlamaServer(model, _server_args(x, split, sinks, tail, batch, ubatch, rpc, ngl) +
                                      placer.flags(x, longest) + maps_flags(maps), ctx=longest + 64, threads=threads)
                       for x in fill_modes},
                      exclusive=bool(rpc))
    server_of = lambda mode: mode if mode in fill_modes else fill_modes[0]  # noqa: E731
    warm = _warm(warmup, placer, ngl, None)
    first = lambda mode, n: (lambda srv: ttft_ms(srv, _server_prompt(m, prose, n, -1), mode)) if warm else None  # noqa: E731
    prose = _prose_tokens(m)
    results = []
    with pool:
        for n in lengths:
            r = LengthResult(n, {mode: [] for mode in modes})
            for i in range(runs):
                for j, mode in enumerate(round_order(modes, i)):
                    srv = pool.get(server_of(mode), on_start=first(mode, n))
                    ms, res = ttft_ms(srv, _server_prompt(m, prose, n, i * len(modes) + j), mode)
                    t = res["timings"]
                    if t["prompt_n"] != n:
                        raise BenchError(f"llama-server evaluated {t['prompt_n']} prompt tokens, not {n}")
                    r.ms[mode].append(ms)
                    if mode != "exact":
                        r.rows[mode] = f"{t.get('ridgefill_filled_n', 0)} rows filled, {t.get('ridgefill_full_n', 0)} full"
                    progress(f"  llama-server {n} tokens, run {i + 1}/{runs}, {mode}: {ms:.0f} ms")
            r.peak_rss_mb = {mode: pool.peak_rss_mb(server_of(mode)) for mode in modes}
            results.append(r)
    out = summarize(model, results, shape, split, sinks, tail, threads, modes, map_bytes(meta), lagged_maps(meta),
                    kv_maps(meta))
    out["path"], out["maps"] = "llama-server", maps
    out["round_order"] = "alternating"
    out["rpc"], out["ngl"], out["warmup"] = rpc, ngl, warm
    return annotate(out, placer, modes, lambda n: longest)


def fill_settings(model, modes, split, sinks, tail):
    """Split, sinks and tail: the arguments, else the GGUF's ridgefill.* metadata, else llama.cpp's defaults."""
    from ..format.gguf_io import field, open_gguf

    reader = open_gguf(model)
    maps_split = int(field(reader, "ridgefill.split_layer") or 0)
    split = split if split is not None else (maps_split or None)
    if any(parse_mode(m)[0] == "ridge" for m in modes) and not maps_split:
        raise BenchError(f"{model} has no ridge maps: fit it first (ridgefill fit) or drop the ridge mode")
    if split is None and any(x != "exact" for x in modes):
        raise BenchError("no split layer: pass --split for identity fill on a model without maps")
    stored = fmt.Defaults.stored(field(reader, "ridgefill.sink_rows"), field(reader, "ridgefill.tail_rows"))
    sinks = stored.sink_rows if sinks is None else sinks
    tail = stored.tail_rows if tail is None else tail
    return split, sinks, tail


def _warn_unfilled(lengths, modes, sinks: int, tail: int, progress) -> None:
    if any(m != "exact" for m in modes):
        for n in lengths:
            warning = nothing_filled(n, sinks, tail)
            if warning:
                progress(warning)


def fit_speed(model_path: str, split: int, tokens: int, threads: int = 2, window: int = 2048) -> dict:
    """Capture cost vs exact prefill of the same windows, solve time and peak RSS of a fit."""
    import resource
    import time

    from ..sources import corpus
    from ..fit import ridge
    from ..fit.capture import CaptureConfig, accumulate, capture_llama
    from ..runtime import Model
    from ..fit.stats import CalibrationStats

    cfg = CaptureConfig(split=split, tokens=tokens, window=window, threads=threads)
    docs = corpus.default_calibration()
    identity = fmt.identity_of(model_path)
    m = Model(model_path)
    ctx = m.context(n_ctx=window, n_batch=cfg.n_batch, n_ubatch=cfg.n_batch, threads=threads)

    def plain(w, _moms):
        ctx.clear()
        ctx.prefill(w)

    t0 = time.perf_counter()
    accumulate([CalibrationStats(identity, split)], docs, cfg, m.tokenize, m.bos if m.add_bos else None, "exact", plain)
    t_exact = time.perf_counter() - t0

    t0 = time.perf_counter()
    stats, = capture_llama(model_path, docs, cfg, identity)
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
