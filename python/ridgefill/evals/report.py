"""Summaries of per-item records: means, paired-bootstrap differences, markdown, plots.

A summary row is one (task, group, metric) at one sweep point (split, sinks, tail, N):
each variant's mean over its items, and for each pair (ridge-exact, identity-exact,
ridge-identity, any other variant - exact) the mean paired difference with its 95 %
bootstrap interval. Exact does not depend on the split: its records (split None) stand
beside the fill variants at every split.
"""

from __future__ import annotations

from itertools import groupby
from pathlib import Path

import numpy as np

from . import stats

METRICS = {"needle": ("score",), "loss": ("loss_all", "loss_distant"), "ruler": ("score",)}
AXES = ("split", "tail", "n_tokens")
COUNTS = {"loss_all": "n_scored", "loss_distant": "n_distant"}  # tokens behind each document's value
ORDER = ("exact", "exact-cut", "identity", "ridge")


def variant_order(names) -> list[str]:
    return [v for v in ORDER if v in names] + sorted(set(names) - set(ORDER))


def points(records: list[dict]) -> list[tuple]:
    """Sweep points (split, sinks, tail, n_tokens) of the fill records (exact alone: split None)."""
    pts = {(r["split"], r["sinks"], r["tail"], r["n_tokens"]) for r in records if r["split"] is not None}
    if not pts:
        pts = {(None, r["sinks"], r["tail"], r["n_tokens"]) for r in records}
    return sorted(pts, key=lambda p: tuple(-1 if x is None else x for x in p))


def at_point(records: list[dict], point: tuple) -> list[dict]:
    split, sinks, tail, n = point
    return [r for r in records if (r["sinks"], r["tail"], r["n_tokens"]) == (sinks, tail, n)
            and (r["split"] == split or r["split"] is None)]


def by_variant(records: list[dict], metric: str) -> dict[str, dict[str, tuple[float, str]]]:
    """variant -> item -> (value, cluster), records without a value left out."""
    out: dict[str, dict[str, tuple[float, str]]] = {}
    for r in records:
        if r.get(metric) is not None:
            out.setdefault(r["variant"], {})[r["item"]] = (float(r[metric]), r["cluster"])
    return out


def row(recs: list[dict], metric: str, n_boot: int, seed: int) -> dict:
    vals = by_variant(recs, metric)
    means = {v: {"mean": float(np.mean([x for x, _ in vals[v].values()])), "n": len(vals[v])}
             for v in variant_order(vals)}
    if metric in COUNTS:
        for v in means:
            scored = [(float(r[metric]), int(r[COUNTS[metric]])) for r in recs if r["variant"] == v and r.get(metric) is not None]
            means[v]["tokens"] = sum(n for _, n in scored)
            # "mean" weights documents alike; this one weights every scored token alike
            means[v]["token_mean"] = sum(x * n for x, n in scored) / means[v]["tokens"] if means[v]["tokens"] else None
    diffs = {}
    for a, b in stats.pairs(list(means)):
        common = sorted(set(vals[a]) & set(vals[b]))
        if common:
            iv = stats.paired_bootstrap([vals[a][i][0] for i in common], [vals[b][i][0] for i in common],
                                        [vals[a][i][1] for i in common], n_boot=n_boot, seed=seed)
            diffs[f"{a}-{b}"] = iv.to_dict()
    return {"means": means, "diffs": diffs}


def average_row(per_task: dict[str, list[dict]], n_boot: int, seed: int) -> dict | None:
    """RULER's average: the mean over tasks of each task's mean score, over the tasks every variant
    measured; differences resample items within each task (stats.stratified_paired_bootstrap)."""
    vals = {t: by_variant(g, "score") for t, g in per_task.items()}
    variants = variant_order({v for x in vals.values() for v in x})
    tasks = [t for t in vals if all(v in vals[t] for v in variants)]
    if not tasks:
        return None
    means = {v: {"mean": float(np.mean([np.mean([x for x, _ in vals[t][v].values()]) for t in tasks])),
                 "n": sum(len(vals[t][v]) for t in tasks)} for v in variants}
    diffs = {}
    for a, b in stats.pairs(variants):
        common = {t: sorted(set(vals[t][a]) & set(vals[t][b])) for t in tasks}
        if all(common.values()):
            strata = [[vals[t][a][i][0] - vals[t][b][i][0] for i in common[t]] for t in tasks]
            diffs[f"{a}-{b}"] = stats.stratified_paired_bootstrap(strata, n_boot=n_boot, seed=seed).to_dict()
    return {"means": means, "diffs": diffs, "tasks": tasks}


def ruler_rows(recs: list[dict], n_boot: int, seed: int) -> list[dict]:
    """Per task and RULER's average, over every item and over the filled-region subset (`filled/`:
    items whose answers all lie in the rows a fill mode predicts)."""
    from .ruler import TASKS

    rows = []
    for prefix, sub in (("", recs), ("filled/", [r for r in recs if r.get("evidence_filled") == 1.0])):
        for pt in points(sub):
            at = at_point(sub, pt)
            per_task = {t: g for t in TASKS if (g := [r for r in at if r["group"] == t])}
            place = dict(zip(("split", "sinks", "tail", "n_tokens"), pt))
            for t, g in per_task.items():
                rows.append({"task": "ruler", "group": prefix + t, "metric": "score", **place,
                             **row(g, "score", n_boot, seed)})
            avg = average_row(per_task, n_boot, seed)
            if avg:
                rows.append({"task": "ruler", "group": prefix + "average", "metric": "score", **place, **avg})
    return rows


def summarize(records: list[dict], n_boot: int = stats.N_BOOT, seed: int = 0) -> list[dict]:
    rows = ruler_rows([r for r in records if r["task"] == "ruler"], n_boot, seed)
    for task in ("needle", "loss"):
        recs = [r for r in records if r["task"] == task]
        groups = sorted({r["group"] for r in recs})
        if task == "needle" and len(groups) > 1:
            groups.append("all")
        for group in groups:
            g = recs if group == "all" else [r for r in recs if r["group"] == group]
            for metric in METRICS[task]:
                for pt in points(g):
                    body = row(at_point(g, pt), metric, n_boot, seed)
                    if body["means"]:
                        rows.append({"task": task, "group": group, "metric": metric,
                                     **dict(zip(("split", "sinks", "tail", "n_tokens"), pt)), **body})
    return rows


# ---- markdown ---------------------------------------------------------------------------

def _fmt(x: float) -> str:
    return f"{x:.3g}" if abs(x) < 1000 else f"{x:.0f}"


def _diff(iv: dict | None) -> str:
    return "" if iv is None else f"{_fmt(iv['mean'])} [{_fmt(iv['lo'])}, {_fmt(iv['hi'])}]"


def _mean_cell(m: dict) -> str:
    cell = f"{_fmt(m['mean'])} (n={m['n']}"
    if m.get("token_mean") is not None:
        cell += f", tok {_fmt(m['token_mean'])} over {m['tokens']}"
    return cell + ")"


def markdown(rows: list[dict], plan=None) -> str:
    out = []
    if plan is not None:
        out.append(f"Profile `{plan.name}`: sinks {plan.sinks}, seed {plan.seed}, {plan.n_boot} bootstrap replicates; "
                   f"differences are a - b with 95 % paired-bootstrap intervals.\n")
        if "loss" in plan.tasks:
            out.append(f"Loss is scored on the tail's tokens; `loss_distant` only on those whose exact loss falls by "
                       f">= 2 nats when the model sees the whole prefix instead of the last {plan.window} tokens: "
                       f"such a token may depend on any row more than {plan.window} back, filled rows "
                       f"[sinks, N - tail) and sinks alike. Means weight documents alike; `tok` weights every "
                       f"scored token alike (intervals are per document).\n")
        if "ruler" in plan.tasks or any(r["task"] == "ruler" for r in rows):
            out.append("RULER: each task scored with RULER's string-match metric (0-100); `average` is RULER's "
                       "average over the tasks every variant measured (qa_1 and qa_2 are missing: their datasets "
                       "do not install offline), its intervals resampling items within each task; `filled/` rows "
                       "keep the items whose answers all lie in the filled rows [sinks, N - tail). N is the "
                       "target length (prompt plus the task's generation budget). A task of one item, or one "
                       "every variant scores alike on every item, adds no spread to an average's interval: "
                       "read the intervals with the item counts.\n")
    key = lambda r: (r["task"], r["metric"])  # noqa: E731
    for (task, metric), grp in groupby(sorted(rows, key=key), key=key):
        grp = list(grp)
        variants = variant_order({v for r in grp for v in r["means"]})
        pairs = [f"{a}-{b}" for a, b in stats.pairs(variants)]
        out.append(f"### {task}: {metric}\n")
        out.append("| group | split | tail | N | " + " | ".join(variants + pairs) + " |")
        out.append("|" + " --- |" * (4 + len(variants) + len(pairs)))
        for r in grp:
            means = [_mean_cell(r["means"][v]) if v in r["means"] else "" for v in variants]
            cells = [r["group"], str(r["split"]), str(r["tail"]), str(r["n_tokens"])] + means + [
                _diff(r["diffs"].get(p)) for p in pairs]
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


# ---- plots ------------------------------------------------------------------------------

def plot(rows: list[dict], out_dir: Path) -> list[Path]:
    """One PNG per (task, metric, axis) that the sweep varies, for the 'all' needle group and loss."""
    import matplotlib

    matplotlib.use("Agg")
    made = []
    main = [r for r in rows if r["group"] in ("all", "loss", "average") or len({x["group"] for x in rows if x["task"] == r["task"]}) == 1]
    key = lambda r: (r["task"], r["metric"])  # noqa: E731
    for (task, metric), grp in groupby(sorted(main, key=key), key=key):
        grp = list(grp)
        for axis in AXES:
            if len({r[axis] for r in grp}) > 1:
                made.append(_plot_axis(grp, task, metric, axis, Path(out_dir)))
    return made


_STYLES = ("-", "--", ":", "-.")
_MARKERS = ("o", "s", "^", "D")


def _plot_axis(rows: list[dict], task: str, metric: str, axis: str, out_dir: Path) -> Path:
    import matplotlib.pyplot as plt

    from matplotlib.ticker import MaxNLocator

    others = [a for a in AXES if a != axis]
    fig, ax = plt.subplots(figsize=(6, 4))
    variants = variant_order({v for r in rows for v in r["means"]})
    color = {v: f"C{i}" for i, v in enumerate(variants)}  # one colour per variant, one line style per setting
    combos = sorted({tuple(r[a] for a in others) for r in rows}, key=str)
    for j, combo in enumerate(combos):
        sub = sorted((r for r in rows if tuple(r[a] for a in others) == combo), key=lambda r: r[axis])
        for v in variants:
            pts = [(r[axis], r["means"][v]["mean"]) for r in sub if v in r["means"]]
            if not pts:
                continue
            label = v if len(combos) == 1 else f"{v} ({', '.join(f'{a}={c}' for a, c in zip(others, combo))})"
            ax.plot(*zip(*pts), color=color[v], linestyle=_STYLES[j % len(_STYLES)], marker=_MARKERS[j % len(_MARKERS)],
                    label=label, alpha=0.85)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(axis)
    ax.set_ylabel(metric)
    ax.set_title(f"{task}: {metric} vs {axis}")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{task}-{metric}-vs-{axis}.png"
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
