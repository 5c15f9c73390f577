"""`python -m ridgefill.cli.gpu pack|gen|run`: bench/gpu.sh's two halves (see ridgefill.bench.gpu).

Imports nothing that needs the compiled bindings: the GPU machine runs it with python/ on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ..bench import gpu
from .args import list_option


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ridgefill.cli.gpu")
    sub = ap.add_subparsers(dest="cmd", required=True)
    pc = sub.add_parser("pack", help="write the carry folder (run where the repo was built)")
    pc.add_argument("--src", type=Path, required=True)
    pc.add_argument("--dest", type=Path, required=True)
    gn = sub.add_parser("gen", help="write the shapes' GGUFs ahead (e.g. while the build runs)")
    gn.add_argument("--tokenizer", type=Path, required=True)
    list_option(gn, "--shapes", default=["qwen3.8-27b", "llama-3.1-8b"])
    list_option(gn, "--lengths", int, default=[16384, 32768, 65536, 122880])
    gn.add_argument("--weight-type", default="q8_0", choices=["f16", "q8_0"])
    gn.add_argument("--workdir", type=Path, required=True)
    rn = sub.add_parser("run", help="synthetic shapes + TTFT through a (CUDA) llama-bench")
    rn.add_argument("--llama-bench", type=Path, required=True)
    rn.add_argument("--tokenizer", type=Path, required=True)
    list_option(rn, "--shapes", default=["qwen3.8-27b", "llama-3.1-8b"])
    list_option(rn, "--lengths", int, default=[16384, 32768, 65536, 122880])
    rn.add_argument("--runs", type=int, default=3)
    list_option(rn, "--modes", default=list(gpu.DEFAULT_MODES))
    rn.add_argument("--tail", type=int, default=2048)
    rn.add_argument("--sinks", type=int, default=4)
    rn.add_argument("--ngl", type=int, default=999)
    rn.add_argument("--threads", type=int, default=8)
    rn.add_argument("--ubatch", type=int, default=2048)
    rn.add_argument("--weight-type", default="q8_0", choices=["f16", "q8_0"])
    rn.add_argument("--workdir", type=Path, required=True)
    rn.add_argument("--out", type=Path, required=True)
    rn.add_argument("--deadline-s", type=float, default=None, help="start no new length after this many seconds")
    rn.add_argument("--overhead-rounds", type=int, default=4,
                    help="bench overhead's rounds beside each lagged K/V maps file (0: skip it)")
    rn.add_argument("--batch-rounds", type=int, default=2,
                    help="bench batches' rounds (every ubatch timed alone) at the second length (0: skip it)")
    args = ap.parse_args(argv)
    if args.cmd == "pack":
        print(gpu.pack_carry(args.src, args.dest))
        return 0
    if args.cmd == "gen":
        args.workdir.mkdir(parents=True, exist_ok=True)
        for shape in args.shapes:
            print(gpu.make_model(shape, args.workdir, args.tokenizer, args.weight_type, max(args.lengths) + 256)[0], flush=True)
        return 0
    log = lambda msg: print(msg, flush=True)  # noqa: E731
    gpu.run(args.llama_bench, args.shapes, args.lengths, args.runs, args.workdir, args.out, args.tokenizer,
        sinks=args.sinks, tail=args.tail, ngl=args.ngl, weight_type=args.weight_type, threads=args.threads,
        ubatch=args.ubatch, deadline=None if args.deadline_s is None else time.time() + args.deadline_s,
        modes=tuple(args.modes), progress=log, overhead_rounds=args.overhead_rounds,
        batch_rounds=args.batch_rounds)
    print(f"results: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
