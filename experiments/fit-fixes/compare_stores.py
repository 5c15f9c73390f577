#!/usr/bin/env python3
"""Ridge from other fits (or other variants) against one store's exact and identity, on the items all of them measured.

    experiments/fit-fixes/compare_stores.py [--split S] [--ref STORE:VARIANT] BASE_STORE OTHER[:VARIANT] [OTHER[:VARIANT] ...]

BASE_STORE holds exact, identity and ridge records (`ridgefill eval needle --out`); each OTHER is a
store with records of VARIANT (default ridge) on a copy of BASE_STORE's items. --split keeps the
records of one split (a frontier store holds several); --ref replaces the base store's ridge as the
last column's reference. Prints each one's mean needle score and
its difference to identity, exact and the base store's ridge, with 95 % paired-bootstrap
intervals (10^4 replicates, seed 0), as experiments/fit-fixes/results/fit-fix-s20.md reports them.
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))

from ridgefill.evals import stats  # noqa: E402


METRICS = {"score": "needle", "loss_distant": "loss"}  # metric: the task whose records carry it


def scores(store: str, variant: str, split: int | None, metric: str = "score") -> dict[str, tuple[float, str]]:
    recs = (json.loads(line) for line in open(Path(store) / "results.jsonl"))
    keep = lambda r: (r["task"] == METRICS[metric] and r["variant"] == variant  # noqa: E731
                      and (split is None or r["split"] == split or r["mode"] == "exact")
                      and r.get(metric) is not None)  # a document without distant tokens has no distant loss
    return {r["item"]: (r[metric], r["cluster"]) for r in recs if keep(r)}


def diff(a: dict, b: dict, common: list[str], f: str) -> str:
    iv = stats.paired_bootstrap([a[i][0] for i in common], [b[i][0] for i in common], [a[i][1] for i in common])
    return f"{iv.mean:+{f}} [{iv.lo:+{f}}, {iv.hi:+{f}}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--split", type=int)
    ap.add_argument("--metric", choices=sorted(METRICS), default="score",
                    help="needle score, or the loss eval's distant-token loss (nats, documents weighted alike)")
    ap.add_argument("--ref", help="STORE:VARIANT to compare with instead of the base store's ridge")
    ap.add_argument("base")
    ap.add_argument("others", nargs="*")
    args = ap.parse_args()
    exact, identity, ridge0 = (scores(args.base, v, args.split, args.metric) for v in ("exact", "identity", "ridge"))
    ref, f = "base ridge", (".1f" if args.metric == "score" else ".3f")
    if args.ref:
        store, _, variant = args.ref.partition(":")
        ridge0, ref = scores(store, variant or "ridge", args.split, args.metric), args.ref
    for other in [args.base, *args.others]:
        store, _, variant = other.partition(":")
        ridge = scores(store, variant or "ridge", args.split, args.metric)
        common = sorted(set(exact) & set(identity) & set(ridge0) & set(ridge))
        mean = lambda d: sum(d[i][0] for i in common) / len(common)  # noqa: E731
        print(f"{other}: n={len(common)} exact {mean(exact):{f}} identity {mean(identity):{f}} {variant or 'ridge'} {mean(ridge):{f}}"
              f" | -identity {diff(ridge, identity, common, f)} | -exact {diff(ridge, exact, common, f)}"
              f" | -{ref} {diff(ridge, ridge0, common, f)}")


if __name__ == "__main__":
    main()
