"""Are the needle rows among the routed picks? For each needle item of an eval store, the exact
split-layer states (layer-input capture), their leverage under the GGUF's routing statistics, and
the rows the fork would route: the top ceil(p · n) filled rows of each ubatch (route.n_routed).

    .venv/bin/python experiments/routed-rows/route_picks.py FIT.gguf ITEMS.json SPLIT P [--ubatch 512]
e.g. bench/results/frontier-qwen2.5-coder-0.5b/fit/s8.gguf and .../eval/items/needle-multivalue-noise-number-N2048.json
"""
import argparse
import json

import numpy as np

from ridgefill import format as fmt
from ridgefill.fit import route
from ridgefill.runtime import Model


def picks(lev: np.ndarray, lo: int, hi: int, p: float, ubatch: int) -> set[int]:
    out: set[int] = set()
    for u0 in range(0, hi, ubatch):
        a, b = max(u0, lo), min(u0 + ubatch, hi)
        if b > a:
            out |= {a + int(i) for i in np.argsort(-lev[a:b], kind="stable")[: route.n_routed(p, b - a)]}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("gguf"), ap.add_argument("items"), ap.add_argument("split", type=int), ap.add_argument("p", type=float)
    ap.add_argument("--ubatch", type=int, default=512)
    args = ap.parse_args()
    stats, model = fmt.read_route(args.gguf), Model(args.gguf)
    for it in json.load(open(args.items))["items"]:
        toks = np.asarray(it["tokens"], np.int32)
        n, sinks, tail = len(toks), it["meta"]["sinks"], it["meta"]["tail"]
        ctx = model.context(n_ctx=n + 64, n_batch=n, n_ubatch=args.ubatch, threads=2, capture=[args.split])
        ctx.decode(toks, 0, outputs="last")
        lev = route.leverage(ctx.layer_input(args.split), stats)
        routed = picks(lev, sinks, n - tail, args.p, args.ubatch)
        needle = [r for a, b in it["needles"] for r in range(a, b) if sinks <= r < n - tail]
        pct = [float((lev[sinks : n - tail] < lev[r]).mean()) for r in needle]
        print(f"{it['id']}: {sum(r in routed for r in needle)} of {len(needle)} needle rows routed "
              f"({len(routed)} routed in all); needle rows' leverage percentile: median {np.median(pct):.2f}")


if __name__ == "__main__":
    main()
