"""Exact and ridge at a range of placements over two loopback rpc-servers, against the cost model's pipelined
prediction (bench/pipeline.py): does the flow-shop model say where the layers should go?

    .venv/bin/python experiments/rpc-pipeline/sweep.py [MODEL] [--tokens 2048] [--first 16 13 11 10 9 8] [--runs 2]

Both modes run at each placement (layers on the first server, the rest and the output layer on the second),
interleaved, each llama-bench process timing its prompt after one untimed run. Writes results/sweep-<tokens>.md.
"""

import argparse
import statistics
from pathlib import Path

from ridgefill.bench import costmodel, pipeline
from ridgefill.bench.ttft import round_order, run_llama_bench
from ridgefill.serve.server import RpcServers

SINKS, TAIL, UBATCH, SPLIT = 4, 512, 512, 18


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?")
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--first", type=int, nargs="+", default=[16, 13, 11, 10, 9, 8])
    ap.add_argument("--runs", type=int, default=2)
    args = ap.parse_args()
    model = args.model or _demo_model()
    sh = costmodel.Shape.from_gguf(model)
    units = sh.n_layer + 1
    costs = {m: pipeline.ubatch_costs(sh, args.tokens, UBATCH, pipeline.fill_of(m, SPLIT, SINKS, TAIL)) for m in ("exact", "ridge")}
    rows = []
    with RpcServers(2) as rpc:
        for a in args.first:
            counts = (a, units - a)
            ms = {"exact": [], "ridge": []}
            for i in range(args.runs):
                for mode in round_order(("exact", "ridge"), i):
                    flags = ("--rpc", rpc.endpoints, "-ngl", "-1", "-ts", f"{a}/{units - a}")
                    ms[mode].append(run_llama_bench(model, args.tokens, mode, 1, 2048, UBATCH, SPLIT, SINKS, TAIL,
                                                    extra_args=flags, warmup=True)[0])
            med = {m: statistics.median(v) for m, v in ms.items()}
            span = {m: pipeline.makespan(costs[m], counts) for m in costs}
            rows.append((a, med["exact"], med["ridge"], med["exact"] / med["ridge"], span["exact"] / span["ridge"],
                         span["exact"], span["ridge"]))
            print(rows[-1], flush=True)
    best_e = min(r[5] for r in rows)
    best_r = min(r[6] for r in rows)
    lines = [f"{Path(model).name}, {args.tokens} tokens, split {SPLIT}, sinks {SINKS}, tail {TAIL}, ubatch {UBATCH}, "
             f"2 loopback rpc-servers (1 thread each), medians of {args.runs} warm interleaved runs\n",
             "| layers on the first server | TTFT exact (ms) | TTFT ridge (ms) | ridge/exact measured | predicted | "
             "predicted exact / ridge time, of the best placement's |", "| --- | --- | --- | --- | --- | --- |"]
    for a, e, r, meas, pred, se, sr in rows:
        lines.append(f"| {a} | {e:.0f} | {r:.0f} | {meas:.2f}x | {pred:.2f}x | {se / best_e:.2f} / {sr / best_r:.2f} |")
    out = Path(__file__).parent / "results" / f"sweep-{args.tokens}.md"
    out.write_text("\n".join(lines) + "\n")
    print(out.read_text())


def _demo_model() -> str:
    from ridgefill import demo
    from ridgefill.sources import models

    return str(demo.demo_fit(models.fetch_model(models.DEFAULT_MODEL), None)[0])


if __name__ == "__main__":
    main()
