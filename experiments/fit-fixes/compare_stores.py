#!/usr/bin/env python3
"""Ridge from other fits (or other variants) against one store's exact and identity, on the items all of them measured.

    experiments/fit-fixes/compare_stores.py [--split S] [--ref STORE:VARIANT] BASE_STORE OTHER[:VARIANT] [OTHER[:VARIANT] ...]

BASE_STORE holds exact, identity and ridge records (`ridgefill eval needle --out`); each OTHER is a
store with records of VARIANT (default ridge) on a copy of BASE_STORE's items. --split keeps the
records of one split (a frontier store holds several); --ref replaces the base store's ridge as the
last column's reference. Prints each one's mean needle score and
its difference to identity, exact and the base store's ridge, with 95 % paired-bootstrap
intervals (10^4 replicates, seed 0), as experiments/fit-fixes/results/fit-fix-s20.md reports them.
--metric ruler averages RULER's tasks as `ridgefill eval ruler` does (the mean of the task means,
items resampled within their task), then prints each task's line.
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))

from ridgefill.evals import stats  # noqa: E402


# metric: (the task whose records carry it, the record field)
METRICS = {"score": ("needle", "score"), "loss_distant": ("loss", "loss_distant"), "ruler": ("ruler", "score")}


def scores(store: str, variant: str, split: int | None, metric: str = "score") -> dict[str, tuple[float, str, str]]:
    """item: (value, bootstrap cluster, RULER task)."""
    task, field = METRICS[metric]
    recs = (json.loads(line) for line in open(Path(store) / "results.jsonl"))
    keep = lambda r: (r["task"] == task and r["variant"] == variant  # noqa: E731
                      and (split is None or r["split"] == split or r["mode"] == "exact")
                      and r.get(field) is not None)  # a document without distant tokens has no distant loss
    return {r["item"]: (r[field], r["cluster"], r.get("group", "")) for r in recs if keep(r)}


def mean(d: dict, common: list[str], stratified: bool) -> float:
    if not stratified:
        return sum(d[i][0] for i in common) / len(common)
    groups = sorted({d[i][2] for i in common})
    return sum(mean(d, [i for i in common if d[i][2] == g], False) for g in groups) / len(groups)


def diff(a: dict, b: dict, common: list[str], f: str, stratified: bool = False) -> str:
    if stratified:
        groups = sorted({a[i][2] for i in common})
        iv = stats.stratified_paired_bootstrap([[a[i][0] - b[i][0] for i in common if a[i][2] == g] for g in groups])
    else:
        iv = stats.paired_bootstrap([a[i][0] for i in common], [b[i][0] for i in common], [a[i][1] for i in common])
    return f"{iv.mean:+{f}} [{iv.lo:+{f}}, {iv.hi:+{f}}]"


def compare(label: str, variant: str, exact: dict, identity: dict, ridge0: dict, ridge: dict, ref: str, f: str,
            stratified: bool) -> None:
    common = sorted(set(exact) & set(identity) & set(ridge0) & set(ridge))
    m = lambda d: mean(d, common, stratified)  # noqa: E731
    d = lambda a, b: diff(a, b, common, f, stratified)  # noqa: E731
    print(f"{label}: n={len(common)} exact {m(exact):{f}} identity {m(identity):{f}} {variant} {m(ridge):{f}}"
          f" | -identity {d(ridge, identity)} | -exact {d(ridge, exact)} | -{ref} {d(ridge, ridge0)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--split", type=int)
    ap.add_argument("--metric", choices=sorted(METRICS), default="score",
                    help="needle score, the loss eval's distant-token loss (nats, documents weighted alike), or "
                         "RULER's task-averaged score")
    ap.add_argument("--ref", help="STORE:VARIANT to compare with instead of the base store's ridge")
    ap.add_argument("base")
    ap.add_argument("others", nargs="*")
    args = ap.parse_args()
    exact, identity, ridge0 = (scores(args.base, v, args.split, args.metric) for v in ("exact", "identity", "ridge"))
    ref, f = "base ridge", (".3f" if args.metric == "loss_distant" else ".1f")
    if args.ref:
        store, _, variant = args.ref.partition(":")
        ridge0, ref = scores(store, variant or "ridge", args.split, args.metric), args.ref
    ruler = args.metric == "ruler"
    for other in [args.base, *args.others]:
        store, _, variant = other.partition(":")
        ridge = scores(store, variant or "ridge", args.split, args.metric)
        compare(other, variant or "ridge", exact, identity, ridge0, ridge, ref, f, ruler)
        for g in sorted({v[2] for v in ridge.values()}) if ruler else []:
            sub = lambda d: {i: v for i, v in d.items() if v[2] == g}  # noqa: E731
            compare(f"  {g}", variant or "ridge", sub(exact), sub(identity), sub(ridge0), sub(ridge), ref, f, False)

if __name__ == "__main__":
    main()
