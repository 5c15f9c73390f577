#!/usr/bin/env python3
"""RULER-11 of the selection splices beside exact, ridge and the evidence ceiling, with paired intervals.

    experiments/question-selection/table.py [--split S] --exact STORE[:VARIANT] STORE[:SPLIT][=NAME] ... [--ref VARIANT]
                                            [--same-items STORE]

Each STORE is a `ridgefill eval ruler` output directory; every variant found in them (at --split) is a row. A
STORE:SPLIT reads that store at another split and names its rows `VARIANT (split SPLIT)`; STORE=NAME names them
`VARIANT (NAME)` (a store whose variants another store has too: another tail). The
average is RULER's (the mean of the task means); differences are paired per item and resampled within their task
(ridgefill.evals.stats.stratified_paired_bootstrap, 10^4 replicates, seed 0) on the items every row measured.
Columns: the score, its difference to exact, to ridge (the plain fill, --ref) and to the evidence ceiling, the
rows selected per prompt (% of the filled rows) and the share of the evidence rows they cover; then per task.
--same-items STORE keeps the items STORE holds in another variant of the prompt (`/q-start`: the question first),
so a variant's scores read beside the same draws' with the question at the end. --closer A B adds how far each
row's scores lie from exact's item by item (mean |score − exact|: a variant can tie exact on average and answer
other items) and A's distance minus B's, paired per item.
"""

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))

from ridgefill.evals import stats  # noqa: E402


def records(store: str, split: int | None) -> dict[str, dict[str, dict]]:
    """variant -> item -> record."""
    out: dict[str, dict[str, dict]] = {}
    for line in open(Path(store) / "results.jsonl"):
        r = json.loads(line)
        if r["task"] == "ruler" and (split is None or r["split"] in (split, None)):
            out.setdefault(r["variant"], {})[r["item"]] = r
    return out


def base_item(item: str) -> str:
    """An item's id without its question-place suffix (`niah_single_1/N4096/0/q-start` -> `niah_single_1/N4096/0`)."""
    return item.split("/q-")[0]


def ruler_mean(recs: dict[str, dict], items: list[str]) -> float:
    tasks = sorted({recs[i]["group"] for i in items})
    return float(np.mean([np.mean([recs[i]["score"] for i in items if recs[i]["group"] == t]) for t in tasks]))


def diff(a: dict, b: dict, items: list[str]) -> str:
    tasks = sorted({a[i]["group"] for i in items})
    if len(items) == len(tasks):  # one item a task: a bootstrap within tasks has nothing to resample
        return f"{ruler_mean(a, items) - ruler_mean(b, items):+.1f} (one item a task: no interval)"
    iv = stats.stratified_paired_bootstrap([[a[i]["score"] - b[i]["score"] for i in items if a[i]["group"] == t]
                                            for t in tasks])
    bold = "**" if iv.lo > 0 or iv.hi < 0 else ""
    return f"{bold}{iv.mean:+.1f} [{iv.lo:+.1f}, {iv.hi:+.1f}]{bold}"


def selected(recs: dict[str, dict], items: list[str]) -> str:
    n = [recs[i]["n_selected"] / max(1, recs[i]["n_filled"]) for i in items if "n_selected" in recs[i]]
    ev = [recs[i]["evidence_selected"] for i in items if recs[i].get("evidence_selected") is not None]
    covered = f"{100 * np.mean(ev):.0f} %" if ev else ""  # the fork's records do not know the evidence rows
    return f"{100 * np.mean(n):.1f} % | {covered}" if n else " | "


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--split", type=int)
    ap.add_argument("--exact", required=True, help="STORE[:VARIANT] holding the exact records")
    ap.add_argument("--ref", default="ridge", help="the plain fill's variant (default ridge)")
    ap.add_argument("--ceiling", default="ridge-evidence")
    ap.add_argument("--variants", nargs="+", help="the rows, in this order (default: every variant found)")
    ap.add_argument("--same-items", help="keep only the items (by base id) this store holds")
    ap.add_argument("--closer", nargs=2, metavar=("A", "B"), help="is A's score closer to exact's, item by item, than B's")
    ap.add_argument("stores", nargs="+")
    a = ap.parse_args()
    store, _, ev = a.exact.partition(":")
    exact = records(store, None)[ev or "exact"]
    rows: dict[str, dict[str, dict]] = {}
    for spec in a.stores:
        spec, _, name = spec.partition("=")
        path, _, at = spec.partition(":")
        name = name or (f"split {at}" if at else "")
        for v, recs in records(path, int(at) if at else a.split).items():
            if v != "exact" and (a.variants is None or v in a.variants):
                rows.setdefault(f"{v} ({name})" if name else v, {}).update(recs)
    items = sorted(set(exact).intersection(*rows.values()))
    if a.same_items:
        keep = {base_item(i) for recs in records(a.same_items, None).values() for i in recs}
        items = [i for i in items if base_item(i) in keep]
    ref, ceiling = rows.get(a.ref), rows.get(a.ceiling)
    print(f"{len(items)} items, {len({exact[i]['group'] for i in items})} tasks\n")
    print("| variant | RULER | − exact | − " + a.ref + " | − ceiling | rows selected | evidence rows covered |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    print(f"| exact | {ruler_mean(exact, items):.1f} | | | | | |")
    for v in sorted(rows, key=lambda v: (v != a.ref, v != a.ceiling, v)):
        r = rows[v]
        cells = [diff(r, exact, items), diff(r, ref, items) if ref and v != a.ref else "",
                 diff(r, ceiling, items) if ceiling and v != a.ceiling else ""]
        print(f"| {v} | {ruler_mean(r, items):.1f} | " + " | ".join(cells) + f" | {selected(r, items)} |")
    tasks = sorted({exact[i]["group"] for i in items})
    names = sorted(rows, key=lambda v: (v != a.ref, v != a.ceiling, v))
    print("\nBy task (mean score):\n")
    print("| task | exact | " + " | ".join(names) + " |")
    print("| --- | --- | " + " | ".join("---" for _ in names) + " |")
    for t in tasks:
        sub = [i for i in items if exact[i]["group"] == t]
        cells = [f"{np.mean([rows[v][i]['score'] for i in sub]):.1f}" for v in names]
        print(f"| {t} | {np.mean([exact[i]['score'] for i in sub]):.1f} | " + " | ".join(cells) + " |")
    if a.closer:
        closer(rows, exact, items, names, *a.closer)


def closer(rows, exact, items, names, a: str, b: str) -> None:
    dist = {v: {i: {"score": abs(rows[v][i]["score"] - exact[i]["score"]), "group": exact[i]["group"]} for i in items}
            for v in names}
    print("\nDistance to exact, item by item (mean |score − exact|, RULER's average over tasks):\n")
    print("| variant | mean distance |")
    print("| --- | --- |")
    for v in names:
        print(f"| {v} | {ruler_mean(dist[v], items):.1f} |")
    print(f"\n{a} − {b}: {diff(dist[a], dist[b], items)}")


if __name__ == "__main__":
    main()
