"""The quality-speed frontier of one base model: maps for candidate splits from one capture,
then every operating point (split, tail, prompt length) measured side by side.

Quality: the eval runner (evals.runner) on the same items for exact, identity and ridge:
filled-region needle score and distant-token loss, with paired-bootstrap intervals.
Speed: the cost model's bound for every point and, when asked, llama-bench TTFT medians
(exact and fill interleaved in one run, bench.ttft) with the range of paired run ratios.

Work directory (resumable: a rerun measures only what is missing):
  fit/manifest.json   base sha256 and capture settings; fit/s{S}.maps.npz, fit/s{S}.gguf
  eval/               the eval runner's store (results.jsonl, items, summary)
  ttft/s{S}-t{T}.json llama-bench summaries
  commands.txt        the command of every run that measured something, in order (the report states them)
  frontier.json, frontier.md, frontier.png
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

from ..bench import costmodel
from .. import format as fmt
from ..fit import pipeline, ridge
from ..fit.route import mode_name
from ..fit.capture import CaptureConfig
from ..fit.defaults import DEFAULT_TOKENS
from ..errors import InputError
from ..fetch import sha256_file

Log = Callable[[str], None]


@dataclass(frozen=True)
class FitConfig:
    tokens: int = DEFAULT_TOKENS
    window: int = 2048
    seed: int = 0
    threads: int | None = None
    n_gpu_layers: int = -1

    def capture(self, split: int) -> CaptureConfig:
        return CaptureConfig(split=split, tokens=self.tokens, window=self.window, seed=self.seed, threads=self.threads,
                             n_gpu_layers=self.n_gpu_layers)

    def manifest(self, base: Path) -> dict:
        return {"base_sha256": sha256_file(base), "recipe": pipeline.recipe_key(self.capture(0)),
                **{k: v for k, v in asdict(self).items() if k not in ("threads", "n_gpu_layers")}}


def fit_candidates(base: Path, splits: Sequence[int], cfg: FitConfig, work: Path, log: Log) -> dict[int, Path]:
    """split -> augmented GGUF, fitted from one capture pass for every split not yet in work/fit."""
    fit_dir = work / "fit"
    fit_dir.mkdir(parents=True, exist_ok=True)
    manifest_path, want = fit_dir / "manifest.json", cfg.manifest(base)
    if manifest_path.exists():
        have = json.loads(manifest_path.read_text())
        if have != want:
            raise InputError(f"{fit_dir} holds maps fitted with {have}, not {want}: use another work directory")
    else:
        manifest_path.write_text(json.dumps(want, indent=1))
    out = {s: fit_dir / f"s{s}.gguf" for s in splits}
    todo = [s for s in splits if not out[s].exists()]
    if todo:
        log(f"capture for split(s) {todo}: {cfg.tokens} tokens, one pass")
        for stats in pipeline.calibrate_splits(base, cfg.capture(todo[0]), todo):
            maps_path = fit_dir / f"s{stats.split}.maps.npz"
            pipeline.fit_and_pack(base, stats, out[stats.split], maps_out=maps_path)
    return out


@dataclass(frozen=True)
class Point:
    split: int
    sinks: int
    tail: int
    n_tokens: int
    route: float = 0.0  # routed share of the filled rows (ridge only)
    select: float = 0.0  # share of the filled rows the prompt's last rows select (ridge only)

    @property
    def ridge(self) -> str:
        """The eval variant that measures ridge at this point: 'ridge', 'ridge@P' when routed, '^Q' selecting."""
        return mode_name("ridge", self.route, self.select)


def needle_row(summary: list[dict], pt: Point) -> dict | None:
    return _summary_row(summary, "needle", "all", "score", pt) or _summary_row(summary, "needle", None, "score", pt)


def _summary_row(summary, task, group, metric, pt: Point) -> dict | None:
    for r in summary:
        if (r["task"], r["metric"]) == (task, metric) and (group is None or r["group"] == group) and \
                (r["split"], r["sinks"], r["tail"], r["n_tokens"]) == (pt.split, pt.sinks, pt.tail, pt.n_tokens):
            return r
    return None


def row_for(pt: Point, summary: list[dict], shape: costmodel.Shape, ttft: dict | None, lagged: float = 0) -> dict:
    """One operating point: speed (bound, measured) and quality (means and intervals per variant).
    "ridge" in the row is the point's ridge variant (routed or not); `lagged`: the d x d products its maps
    spend on earlier rows per filled row (fmt.earlier_row_products)."""
    out = {**asdict(pt), "lagged": lagged,
           "bound_ridge": costmodel.bound(shape, pt.n_tokens, pt.split, pt.sinks, pt.tail, route=pt.route, lagged=lagged,
                                          select=pt.select),
           "bound_identity": costmodel.bound(shape, pt.n_tokens, pt.split, pt.sinks, pt.tail, with_map=False)}
    if ttft:
        res = next((r for r in ttft["results"] if r["n_tokens"] == pt.n_tokens), None)
        for mode, name in (("ridge", pt.ridge), ("identity", "identity")):
            if res and f"ratio_{name}" in res:
                out[f"speedup_{mode}"], out[f"speedup_range_{mode}"] = res[f"ratio_{name}"], res[f"ratio_range_{name}"]
    needles = needle_row(summary, pt)
    if needles:
        out["needle"] = {v: needles["means"][name]["mean"] for v, name in _names(pt) if name in needles["means"]}
        out["needle_n"] = max(m["n"] for m in needles["means"].values())
        # a sweep left part-way: the modes have measured different numbers of items
        out["needle_ns"] = {v: needles["means"][name]["n"] for v, name in _names(pt) if name in needles["means"]}
        out["needle_diff"] = _diffs(needles["diffs"], pt)
    loss = _summary_row(summary, "loss", "loss", "loss_distant", pt)
    if loss:
        out["loss_distant"] = {v: loss["means"][name]["mean"] for v, name in _names(pt) if name in loss["means"]}
        out["loss_diff"] = _diffs(loss["diffs"], pt)
        # documents with distant-dependent tokens, and those tokens (the exact model's criterion: every mode alike)
        exact = loss["means"].get("exact", {})
        out["loss_docs"], out["loss_tokens"] = exact.get("n", 0), exact.get("tokens", 0)
    ruler = _summary_row(summary, "ruler", "average", "score", pt)
    if ruler:
        out["ruler"] = {v: ruler["means"][name]["mean"] for v, name in _names(pt) if name in ruler["means"]}
        out["ruler_ns"] = {v: ruler["means"][name]["n"] for v, name in _names(pt) if name in ruler["means"]}
        out["ruler_tasks"] = ruler["tasks"]
        out["ruler_diff"] = _diffs(ruler["diffs"], pt)
    loss_all = _summary_row(summary, "loss", "loss", "loss_all", pt)
    if loss_all:
        out["loss_all_diff"] = _diffs(loss_all["diffs"], pt)
    return out


def _names(pt: Point) -> list[tuple[str, str]]:
    """(row key, eval variant) of each fill mode at the point."""
    return [("exact", "exact"), ("identity", "identity"), ("ridge", pt.ridge)]


def _diffs(diffs: dict, pt: Point) -> dict:
    """The summary's paired differences under the row's keys (ridge = the point's ridge variant);
    'ridge-plain' is the routed or selecting ridge against ridge without either."""
    keys = {"ridge-exact": f"{pt.ridge}-exact", "ridge-identity": f"{pt.ridge}-identity",
            "identity-exact": "identity-exact"}
    if pt.route > 0 or pt.select > 0:
        keys["ridge-plain"] = f"{pt.ridge}-ridge"
    return {k: diffs[v] for k, v in keys.items() if v in diffs}


def speedup(row: dict, mode: str = "ridge") -> float:
    """Measured TTFT ratio where there is one, else the cost-model bound."""
    return row.get(f"speedup_{mode}", row[f"bound_{mode}"])


def share_of_exact(row: dict, mode: str, metric: str = "needle") -> float | None:
    n = row.get(metric, {})
    if mode not in n or "exact" not in n:
        return None
    return n[mode] / n["exact"] if n["exact"] > 0 else None


# ---- report ---------------------------------------------------------------------------------


def record_command(work: Path, command: str) -> list[str]:
    """Append `command` to work/commands.txt unless it is there; an earlier command it only extends
    (the same run with more options, e.g. --measure) is replaced. Returns the list."""
    have = recorded_commands(work)
    if command not in have:
        have = [c for c in have if not command.startswith(c + " ")] + [command]
        (work / "commands.txt").write_text("".join(c + "\n" for c in have))
    return have


def recorded_commands(work: Path) -> list[str]:
    path = work / "commands.txt"
    return [c for c in path.read_text().splitlines() if c.strip()] if path.is_file() else []


def check_budgets(budget_needles: float, budget_loss: float, budget_ruler: float | None = None) -> None:
    for name, v in (("--budget-needles", budget_needles), ("--budget-loss", budget_loss),
                    ("--budget-ruler", 0.0 if budget_ruler is None else budget_ruler)):
        if not v >= 0:
            raise InputError(f"{name} must be >= 0, not {v}")


def _gap(row: dict, metric: str) -> float | None:
    """Ridge minus exact on a score: the paired gap (the items both measured) where there is one,
    since means over unequal item sets are not comparable; None where either is missing."""
    m = row.get(metric, {})
    if "ridge" not in m or "exact" not in m:
        return None
    paired = row.get(f"{metric}_diff", {}).get("ridge-exact")
    return paired["mean"] if paired else m["ridge"] - m["exact"]


def meets(row: dict, budget_needles: float, budget_loss: float, need_loss: bool = False,
          budget_ruler: float | None = None, need_needles: bool = True) -> bool:
    """Ridge's needle score within budget_needles points of exact's (where needles are measured:
    need_needles), its RULER average within budget_ruler points (when given), and its distant-token
    loss within budget_loss nats of exact's (where the loss was measured; with need_loss, a row
    without it does not qualify)."""
    needles = _gap(row, "needle")
    if (needles is None and need_needles) or (needles is not None and needles < -budget_needles):
        return False
    if budget_ruler is not None:
        ruler = _gap(row, "ruler")
        if ruler is None or ruler < -budget_ruler:
            return False
    if needles is None and budget_ruler is None:
        return False
    gap = row.get("loss_diff", {}).get("ridge-exact")
    return (not need_loss) if gap is None else gap["mean"] <= budget_loss


def configs(rows: list[dict]) -> dict[tuple, list[dict]]:
    """(split, sinks, tail, route, select) -> its rows, one per prompt length: a GGUF's defaults serve every length."""
    out: dict[tuple, list[dict]] = {}
    for r in rows:
        out.setdefault((r["split"], r["sinks"], r["tail"], r.get("route", 0.0), r.get("select", 0.0)), []).append(r)
    return out


def choose(rows: list[dict], budget_needles: float, budget_loss: float,
           budget_ruler: float | None = None) -> tuple[dict | None, dict | None]:
    """(the fastest configuration that meets both budgets at every length, or None; the best-quality one).
    Each is its row at the longest prompt. Where the sweep measured the loss anywhere, a configuration
    whose loss was not measured does not qualify: an unmeasured gap is not a small one."""
    groups = configs(rows)
    longest = {k: max(g, key=lambda r: r["n_tokens"]) for k, g in groups.items()}
    need_loss = any(r.get("loss_diff", {}).get("ridge-exact") for r in rows)
    need_needles = any("needle" in r for r in rows)
    ok = [longest[k] for k, g in groups.items()
          if all(meets(r, budget_needles, budget_loss, need_loss, budget_ruler, need_needles) for r in g)]
    metric = "needle" if need_needles else "ruler"
    worst = {k: min((share_of_exact(r, "ridge", metric) or 0.0) for r in g) for k, g in groups.items()}
    best = max(longest, key=lambda k: (worst[k], speedup(longest[k])), default=None)
    return (max(ok, key=speedup) if ok else None), (longest[best] if best else None)


def load_maps(work: Path, split: int):
    return ridge.load_maps(work / "fit" / f"s{split}.maps.npz")


def write_tuned(base: Path, work: Path, row: dict, out: Path, maps_only: bool = False) -> Path:
    """The augmented GGUF (or, `maps_only`, the maps file) of the chosen split, with the chosen sinks, tail and
    routed share as its defaults."""
    maps, identity, provenance = load_maps(work, row["split"])
    write = fmt.write_maps if maps_only else fmt.pack
    write(base, maps, identity, provenance, out,
              defaults=fmt.Defaults(row["sinks"], row["tail"], float(row.get("route", 0.0))))
    return out
