"""`ridgefill bench ttft|batches|overhead|soak|placement|report|fit`: the maintained benchmarks."""

from __future__ import annotations

import json
import sys

from ..sources import models
from .args import add_gpu_layers, add_tensor_split, list_option, mode, positive_int

def _cmd_bench_ttft(args) -> int:
    from ..bench import ttft as bench, report as ttft_report

    log = (lambda msg: print(msg, file=sys.stderr, flush=True)) if not args.quiet else (lambda msg: None)
    run = {"bench": bench.ttft, "server": bench.ttft_server}
    if "server" in args.paths:  # before any measuring: a long llama-bench run would be lost
        from ..runtime import Model

        bench.check_server_lengths(Model(args.model, n_gpu_layers=0), args.lengths)
    summaries = {}
    for path in args.paths:
        s = run[path](args.model, args.lengths, runs=args.runs, modes=tuple(args.modes), threads=args.threads,
                      sinks=args.sinks, tail=args.tail, split=args.split, batch=args.batch, ubatch=args.ubatch,
                      progress=log, rpc=args.rpc, ngl=args.n_gpu_layers, tensor_split=args.tensor_split,
                      warmup={"auto": None, "on": True, "off": False}[args.warmup], maps=args.maps)
        summaries[s["path"]] = s
    if args.json_out:
        from pathlib import Path

        Path(args.json_out).write_text(json.dumps(summaries, indent=2))
    if args.plot:
        log(f"plot: {ttft_report.plot(list(summaries.values()), args.plot)}")
    print(json.dumps(summaries, indent=2) if args.json else "\n\n".join(map(ttft_report.markdown, summaries.values())))
    return 0


def _cmd_bench_batches(args) -> int:
    from ..bench import batches

    log = (lambda msg: print(msg, file=sys.stderr, flush=True)) if not args.quiet else (lambda msg: None)
    result = batches.batch_times(args.model, args.length, modes=tuple(args.modes), rounds=args.rounds,
                                 threads=args.threads, ubatch=args.ubatch, split=args.split, sinks=args.sinks,
                                 tail=args.tail, ngl=args.n_gpu_layers, maps=args.maps, warmup=args.warmup == "on",
                                 progress=log)
    if args.json_out:
        from pathlib import Path

        Path(args.json_out).write_text(json.dumps(result, indent=2))
    print(batches.markdown(result))
    return 0


def _cmd_bench_overhead(args) -> int:
    from ..bench import overhead

    log = (lambda msg: print(msg, file=sys.stderr, flush=True)) if not args.quiet else (lambda msg: None)
    results = overhead.overhead(args.model, rounds=args.rounds, reps=args.reps, n_gen=args.n_gen,
                                n_prompt=args.n_prompt, threads=args.threads, progress=log, maps=args.maps)
    if args.json_out:
        from pathlib import Path

        Path(args.json_out).write_text(json.dumps(results, indent=2))
    print(overhead.markdown(args.model, results, args.tolerance))
    return 0 if all(overhead.within(r, args.tolerance) and r["same_graph"] for r in results) else 1


def _cmd_bench_soak(args) -> int:
    from pathlib import Path

    from ..serve import soak, soak_report
    from ..runtime import Model

    base = Path(args.base or models.fetch_model(models.DEFAULT_MODEL))
    import argparse as text_source  # a long, fixed text on every machine: the stdlib's argparse source

    tokens = Model(base, n_gpu_layers=0).tokenize(Path(text_source.__file__).read_text())
    result = soak.soak(Path(args.model), base, args.mode, tokens, args.requests, args.threads, args.max_seconds,
                       args.seed, args.split, Path(args.maps) if args.maps else None, passes=args.passes,
                       floor_requests=args.floor_requests)
    table = soak_report.render(result)
    print(table)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    if args.md:
        Path(args.md).write_text(soak_report.report(result, " ".join(["bench/soak", *sys.argv[3:]])))
    passes = result["passes"]
    bad = any(r["errors"] or not r["server_alive"] for r in passes) or not result["leak_check"]["exact_after_fill_equals_stock"]
    bad |= any(r.get("filled_share_min") is not None and r["filled_share_min"] < 1.0 for r in passes)
    bad |= any(r["slot_errors"] or r.get("fill_reuse_ok", 0) != r.get("fill_requests", 0) for r in passes)
    bad |= any(r.get("fill_rows_ok", 0) != r.get("fill_requests", 0) for r in passes)
    return 1 if bad else 0


def _cmd_bench_report(args) -> int:
    from pathlib import Path

    from ..bench import ttft as bench, report as ttft_report

    summaries = []
    for path in args.files:
        saved = json.loads(Path(path).read_text())
        if not isinstance(saved, dict) or not all(isinstance(s, dict) and "results" in s for s in saved.values()):
            raise bench.BenchError(f"{path} is not a `ridgefill bench ttft --json-out` file")
        summaries += [{"path": name, **s} for name, s in saved.items()]
    summaries = ttft_report.merge_summaries(summaries)
    if args.plot:
        print(f"plot: {ttft_report.plot(summaries, args.plot)}", file=sys.stderr)
    print("\n\n".join(map(ttft_report.markdown, summaries)))
    return 0


def _cmd_bench_fit(args) -> int:
    from ..bench import ttft as bench

    res = bench.fit_speed(args.model, args.split, args.tokens, threads=args.threads)
    if args.json_out:
        from pathlib import Path

        Path(args.json_out).write_text(json.dumps(res, indent=2))
    print(json.dumps(res, indent=2))
    return 0


def _cmd_bench_placement(args) -> int:
    from ..bench import costmodel, ttft as bench
    from ..bench.pipeline import Placer, even, tensor_split_of
    from ..errors import InputError

    if args.devices < 2:
        raise InputError(f"--devices {args.devices}: a prefill is pipelined over two or more devices")
    split, sinks, tail = bench.fill_settings(args.model, args.modes, args.split, args.sinks, args.tail)
    shape = costmodel.Shape.from_gguf(args.model)
    lagged = bench.lagged_maps(args.model)
    auto = Placer(shape, args.devices, args.ubatch, split, sinks, tail, lagged)
    stock = Placer(shape, args.devices, args.ubatch, split, sinks, tail, lagged, "even")
    print(f"{args.model}: {shape.n_layer} layers + output on {args.devices} equal devices, every layer offloaded, "
          f"ubatch {args.ubatch}; split {split}, sinks {sinks}, tail {tail}; llama.cpp's placement "
          f"{tensor_split_of(even(shape.n_layer + 1, args.devices))}\n")
    print("| tokens | mode | -ts | speed-up over exact, pipelined: at -ts / llama.cpp's placement | one device |")
    print("| --- | --- | --- | --- | --- |")
    for n in args.lengths:
        for m in args.modes:
            print(f"| {n} | {m} | {tensor_split_of(auto.counts(m, n))} | {auto.bound(m, n):.2f}x / "
                  f"{stock.bound(m, n):.2f}x | {auto.one_device_bound(m, n):.2f}x |")
    return 0


def add_commands(sub) -> None:
    bp = sub.add_parser("bench", help="benchmarks").add_subparsers(dest="bench_cmd", required=True)
    bs = bp.add_parser("soak", help="a 4-slot llama-server under mixed exact/fill requests, against stock (exit 1 on "
                                    "an error, a crash, a partial fill, filled rows reused where a request asked for exact ones, a "
                                    "failed slot save or restore, or a leak)")
    bs.add_argument("--model", required=True, help="augmented GGUF (ridge maps), or a base GGUF with --mode identity")
    bs.add_argument("--base", help="base GGUF for the stock passes (default: the default model)")
    bs.add_argument("--maps", help="a maps file the fork's server loads beside --model (then the base)")
    bs.add_argument("--mode", choices=("ridge", "identity"), default="ridge")
    bs.add_argument("--split", type=int, help="split layer (identity; ridge takes the maps')")
    bs.add_argument("--requests", type=positive_int, default=200, help="requests a pass")
    bs.add_argument("--passes", type=positive_int, default=2, help="passes a server (the second meets a warm prompt cache)")
    bs.add_argument("--floor-requests", type=positive_int, help="the second stock server (the noise floor) gets only the first "
                                                       "so many requests (default: all)")
    bs.add_argument("--threads", type=int, default=2)
    bs.add_argument("--max-seconds", type=float, default=1800, help="bound on each pass")
    bs.add_argument("--seed", type=int, default=0)
    bs.add_argument("--json", help="write the result here")
    bs.add_argument("--md", help="write a markdown report (table, command, what each column means) here")
    bs.set_defaults(func=_cmd_bench_soak)

    bt = bp.add_parser("ttft", help="TTFT exact vs fill through the patched llama-bench and llama-server, interleaved")
    bt.add_argument("--model", required=True, help="augmented GGUF (ridge), or any GGUF with --modes exact identity")
    bt.add_argument("--maps", help="a maps file beside --model (the base): what llama-bench and llama-server load with "
                                   "--ridgefill-maps")
    list_option(bt, "--lengths", int, default=[4096])
    bt.add_argument("--runs", type=int, default=5, help="interleaved runs per mode (median reported)")
    list_option(bt, "--modes", mode, default=["exact", "identity", "ridge"],
                help="exact, identity, ridge; identity@P, ridge@P: P %% of each fill ubatch routed")
    bt.add_argument("--threads", type=int, default=2)
    bt.add_argument("--split", type=int, default=None, help="default: the model's ridgefill.split_layer")
    bt.add_argument("--sinks", type=int, default=None)
    bt.add_argument("--tail", type=int, default=None)
    bt.add_argument("--batch", type=int, default=2048)
    bt.add_argument("--ubatch", type=int, default=512)
    bt.add_argument("--json", action="store_true", help="print the JSON summary instead of a table")
    bt.add_argument("--json-out", help="also write the JSON summary here")
    list_option(bt, "--paths", default=["bench", "server"], choices=["bench", "server"],
                help="measure through llama-bench, llama-server or both (default)")
    bt.add_argument("--plot", metavar="PNG", help="write TTFT and speed-up vs length (bound drawn) here")
    bt.add_argument("--rpc", metavar="HOST:PORT,...", help="register these ggml-rpc-servers as devices (with the default "
                                                              "-ngl, every layer goes there)")
    add_gpu_layers(bt)
    add_tensor_split(bt)
    bt.add_argument("--warmup", choices=("auto", "on", "off"), default="auto",
                    help="run each prompt once untimed before timing it (auto: when layers are on GPU or RPC devices, "
                         "whose first prompt in a process pays set-up a serving process has long paid)")
    bt.add_argument("--quiet", action="store_true")
    bt.set_defaults(func=_cmd_bench_ttft)

    bb = bp.add_parser("batches", help="a prompt's batches timed one at a time (llama-bench --ridgefill-batch-times), "
                                       "exact vs fill at the same positions, beside the cost model's ratio")
    bb.add_argument("--model", required=True, help="augmented GGUF (ridge), or any GGUF with --modes exact identity")
    bb.add_argument("--maps", help="a maps file beside --model (the base)")
    bb.add_argument("--length", type=positive_int, default=4096, help="prompt tokens")
    list_option(bb, "--modes", mode, default=["exact", "ridge"], help="exact and fill modes (ridge@P, ridge^Q, ...)")
    bb.add_argument("--rounds", type=positive_int, default=3, help="interleaved llama-bench runs per mode (median reported)")
    bb.add_argument("--threads", type=int, default=2)
    bb.add_argument("--split", type=int, default=None, help="default: the model's ridgefill.split_layer")
    bb.add_argument("--sinks", type=int, default=None)
    bb.add_argument("--tail", type=int, default=None)
    bb.add_argument("--ubatch", type=positive_int, default=512, help="rows a batch (llama-bench -b and -ub)")
    add_gpu_layers(bb)
    bb.add_argument("--warmup", choices=("on", "off"), default="off", help="each process's prompt once untimed first")
    bb.add_argument("--json-out")
    bb.add_argument("--quiet", action="store_true")
    bb.set_defaults(func=_cmd_bench_batches)

    bo = bp.add_parser("overhead", help="ridge vs exact where nothing is filled (tg128, a short prompt), interleaved; "
                                        "exit 1 when a ratio is off by more than --tolerance or the graphs differ")
    bo.add_argument("--model", required=True, help="augmented GGUF (lagged or window maps keep split states)")
    bo.add_argument("--maps", help="a maps file beside --model (the base)")
    bo.add_argument("--rounds", type=int, default=10, help="llama-bench processes, each running both modes")
    bo.add_argument("--reps", type=int, default=3, help="llama-bench -r within a round")
    bo.add_argument("--n-gen", type=int, default=128)
    bo.add_argument("--n-prompt", type=int, default=512, help="a prompt no longer than the model's sinks + tail")
    bo.add_argument("--threads", type=int, default=2)
    bo.add_argument("--tolerance", type=float, default=0.02)
    bo.add_argument("--json-out")
    bo.add_argument("--quiet", action="store_true")
    bo.set_defaults(func=_cmd_bench_overhead)

    bl = bp.add_parser("placement", help="layers per device (llama.cpp's -ts) for a prefill pipelined over several "
                                         "devices, and the speed-up the cost model gives each mode there")
    bl.add_argument("--model", required=True)
    bl.add_argument("--devices", type=int, required=True, help="equal devices holding every layer (rpc-servers, GPUs)")
    list_option(bl, "--lengths", int, default=[4096])
    list_option(bl, "--modes", mode, default=["exact", "ridge"])
    bl.add_argument("--split", type=int, default=None, help="default: the model's ridgefill.split_layer")
    bl.add_argument("--sinks", type=int, default=None)
    bl.add_argument("--tail", type=int, default=None)
    bl.add_argument("--ubatch", type=int, default=512)
    bl.set_defaults(func=_cmd_bench_placement)

    br = bp.add_parser("report", help="tables (and a plot) again from saved `bench ttft --json-out` files")
    br.add_argument("files", nargs="+", metavar="JSON")
    br.add_argument("--plot", metavar="PNG")
    br.set_defaults(func=_cmd_bench_report)

    bf = bp.add_parser("fit", help="capture cost vs exact prefill, solve time, peak RSS")
    bf.add_argument("--model", required=True)
    bf.add_argument("--split", type=int, default=15)
    bf.add_argument("--tokens", type=int, default=262144)
    bf.add_argument("--threads", type=int, default=2)
    bf.add_argument("--json-out")
    bf.set_defaults(func=_cmd_bench_fit)
