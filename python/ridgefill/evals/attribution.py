"""Splice attribution: the share of the fill-vs-exact gap that each splice closes.

share(X) = (mean fill - mean X) / (mean fill - mean ref), per metric and sweep point, over
the items every variant measured; ref is exact-cut (exact values in the fill run's batches,
what a splice of both K and V reproduces), so 1 means "this component carries all of the
gap" and 0 "none of it". The 95 % interval resamples item clusters (documents) jointly for
numerator and denominator. A gap whose interval contains 0 makes every share meaningless;
the row says so.
"""

from __future__ import annotations

import numpy as np

from . import report, stats

SPLICES = ("k", "v", "knorm", "kv", "state", "all", "k-early", "k-late", "v-early", "v-late", "kv-early", "kv-late")


def share_interval(fill, spliced, ref, clusters, n_boot: int, seed: int) -> dict:
    fill, spliced, ref = (np.asarray(x, dtype=np.float64) for x in (fill, spliced, ref))
    num_sums, counts = stats.cluster_sums(fill - spliced, clusters)
    den_sums, _ = stats.cluster_sums(fill - ref, clusters)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(counts), size=(n_boot, len(counts)))
    den = den_sums[idx].sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        reps = num_sums[idx].sum(axis=1) / den
    reps = reps[np.isfinite(reps)]
    gap = float((fill - ref).mean())
    point = float((fill - spliced).mean() / gap) if gap != 0 else float("nan")
    lo, hi = np.percentile(reps, [2.5, 97.5]) if len(reps) else (float("nan"), float("nan"))
    return {"share": point, "lo": float(lo), "hi": float(hi), "n": len(fill)}


def shares(records: list[dict], fill: str = "ridge", ref: str = "exact-cut", n_boot: int = stats.N_BOOT,
           seed: int = 0) -> list[dict]:
    rows = []
    for task, metrics in report.METRICS.items():
        for group, recs in _groups(task, [r for r in records if r["task"] == task]):
            for metric in metrics:
                rows += _point_rows(task, group, metric, recs, fill, ref, n_boot, seed)
    return rows


def _groups(task: str, recs: list[dict]) -> list[tuple[str, list[dict]]]:
    """RULER's tasks one by one (a loss is diagnosed where it is); needles and loss pooled."""
    if task != "ruler":
        return [(task, recs)]
    return [(g, [r for r in recs if r["group"] == g]) for g in sorted({r["group"] for r in recs})]


def _point_rows(task: str, group: str, metric: str, recs: list[dict], fill: str, ref: str, n_boot: int,
                seed: int) -> list[dict]:
    rows = []
    for pt in report.points(recs):
        vals = report.by_variant(report.at_point(recs, pt), metric)
        if fill not in vals or ref not in vals:
            continue
        row = {"task": task, "group": group, "metric": metric,
               **dict(zip(("split", "sinks", "tail", "n_tokens"), pt)), "fill": fill, "ref": ref}
        common = set(vals[fill]) & set(vals[ref])
        gap = stats.paired_bootstrap([vals[fill][i][0] for i in sorted(common)],
                                     [vals[ref][i][0] for i in sorted(common)],
                                     [vals[fill][i][1] for i in sorted(common)], n_boot=n_boot, seed=seed)
        row["gap"] = gap.to_dict()
        row["gap_resolved"] = not (gap.lo <= 0 <= gap.hi)
        for part in SPLICES:
            name = f"{fill}-{part}"
            if name not in vals:
                continue
            items = sorted(common & set(vals[name]))
            if items:
                row[part] = share_interval([vals[fill][i][0] for i in items], [vals[name][i][0] for i in items],
                                           [vals[ref][i][0] for i in items], [vals[fill][i][1] for i in items],
                                           n_boot, seed)
        rows.append(row)
    return rows


def markdown(rows: list[dict]) -> str:
    parts = [p for p in SPLICES if any(p in r for r in rows)]
    out = ["| task | metric | split | tail | N | gap fill - ref [95 %] | " + " | ".join(f"share {p}" for p in parts) + " |",
           "|" + " --- |" * (6 + len(parts))]
    for r in rows:
        g = r["gap"]
        cells = [r.get("group", r["task"]), r["metric"], str(r["split"]), str(r["tail"]), str(r["n_tokens"]),
                 f"{g['mean']:.3g} [{g['lo']:.3g}, {g['hi']:.3g}]" + ("" if r["gap_resolved"] else " (not resolved)")]
        for p in parts:
            s = r.get(p)
            cells.append("" if s is None else f"{s['share']:.2f} [{s['lo']:.2f}, {s['hi']:.2f}]")
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)
