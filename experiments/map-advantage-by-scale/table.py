"""Does the fitted map's advantage over identity grow with model size?

Reads the stored needle records of three real models (4K prompt, sinks 4, tail 1024, the four
filled-region needle tasks, the same 24 items) at half and two-thirds depth and writes one table:
each fill's score, its share of exact's score with a bootstrap interval, the paired differences,
and the change in ridge's share from one size to the next (independent bootstrap: different models).
Nothing is measured here; every record comes from a command named in the stores' reports.

    .venv/bin/python experiments/map-advantage-by-scale/table.py
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ridgefill.evals.stats import paired_bootstrap

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
OUT = Path(__file__).resolve().parent / "results" / "table.md"
N_BOOT, SEED, N_TOKENS, TAIL = 10_000, 0, 4096, 1024


@dataclass(frozen=True)
class Model:
    name: str
    params: str
    n_layer: int
    n_embd: int
    calib_tokens: int
    frontier: str  # bench/results/<frontier>: exact and identity records, ridge where no override
    splits: dict  # depth label -> split
    ridge_store: dict  # split -> store holding the default fit's ridge records, where not the frontier's


MODELS = (
    Model("SmolLM2-135M", "135M", 30, 576, 16384, "frontier-smollm2-135m", {"half": 15, "two thirds": 20},
          {15: "lag-fork-smollm2/needles"}),  # split 15's default fit lags its maps; the frontier's are per-row
    Model("Qwen2.5-Coder-0.5B", "494M", 24, 896, 16384, "frontier-qwen2.5-coder-0.5b-4k", {"half": 12, "two thirds": 16},
          {}),
    Model("Qwen2.5-Coder-1.5B", "1.54B", 28, 1536, 45056, "frontier-qwen2.5-coder-1.5b-4k", {"half": 14, "two thirds": 19},
          {}),
)


def records(store: str) -> list[dict]:
    path = RESULTS / store / ("results.jsonl" if store.endswith("needles") else "eval/results.jsonl")
    if not path.is_file():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in rows if r.get("task") == "needle" and r["n_tokens"] == N_TOKENS and r["tail"] == TAIL]


def scores(model: Model, split: int) -> dict[str, dict[str, float]]:
    """item -> score for exact, identity and ridge at `split`."""
    front = records(model.frontier)
    ridge = records(model.ridge_store[split]) if split in model.ridge_store else front
    pick = {"exact": [r for r in front if r["mode"] == "exact"],
            "identity": [r for r in front if r["mode"] == "identity" and r["split"] == split],
            "ridge": [r for r in ridge if r["mode"] == "ridge" and r["split"] == split]}
    return {mode: {r["item"]: r["score"] for r in rs} for mode, rs in pick.items()}


def share_replicates(num: np.ndarray, den: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Bootstrap replicates of mean(num) / mean(den) over the item resamples `idx` (pairs kept together)."""
    den_means = den[idx].mean(axis=1)
    return np.divide(num[idx].mean(axis=1), den_means, out=np.full(N_BOOT, np.nan), where=den_means > 0)


def interval(reps: np.ndarray) -> tuple[float, float]:
    lo, hi = np.nanpercentile(reps, [2.5, 97.5])
    return float(lo), float(hi)


def cell(model: Model, depth: str) -> dict | None:
    split = model.splits[depth]
    s = scores(model, split)
    items = sorted(set(s["exact"]) & set(s["identity"]) & set(s["ridge"]))
    if not items:
        return None
    ex, idn, rd = (np.array([s[m][i] for i in items]) for m in ("exact", "identity", "ridge"))
    idx = np.random.default_rng(SEED).integers(0, len(items), size=(N_BOOT, len(items)))  # one draw for every mode
    share_ridge, share_identity = share_replicates(rd, ex, idx), share_replicates(idn, ex, idx)
    return {"model": model, "depth": depth, "split": split, "n": len(items),
            "exact": ex.mean(), "identity": idn.mean(), "ridge": rd.mean(),
            "share_ridge": rd.mean() / ex.mean(), "share_ridge_reps": share_ridge,
            "share_identity": idn.mean() / ex.mean(), "share_identity_reps": share_identity,
            "lead": (rd.mean() - idn.mean()) / ex.mean(), "lead_reps": share_ridge - share_identity,
            "ridge-identity": paired_bootstrap(rd, idn, n_boot=N_BOOT, seed=SEED),
            "ridge-exact": paired_bootstrap(rd, ex, n_boot=N_BOOT, seed=SEED)}


def fmt_ivl(mean: float, lo: float, hi: float, pct: bool = False) -> str:
    f = (lambda x: f"{100 * x:.0f} %") if pct else (lambda x: f"{x:+.1f}")
    return f"{f(mean)} [{f(lo)}, {f(hi)}]"


def table(cells: list[dict]) -> list[str]:
    lines = ["| model (layers, d) | depth (split) | calibration rows per unit of width | needles exact / identity / ridge (n) "
             "| share of exact kept: identity | share of exact kept: ridge | ridge − identity [95 %] | ridge − exact [95 %] |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for c in cells:
        m = c["model"]
        ri, re = c["ridge-identity"], c["ridge-exact"]
        lines.append(f"| {m.name} ({m.n_layer}, {m.n_embd}) | {c['depth']} ({c['split']}) | {m.calib_tokens / m.n_embd:.0f} | "
                     f"{c['exact']:.1f} / {c['identity']:.1f} / {c['ridge']:.1f} ({c['n']}) | "
                     f"{fmt_ivl(c['share_identity'], *interval(c['share_identity_reps']), pct=True)} | "
                     f"{fmt_ivl(c['share_ridge'], *interval(c['share_ridge_reps']), pct=True)} | "
                     f"{fmt_ivl(ri.mean, ri.lo, ri.hi)} | {fmt_ivl(re.mean, re.lo, re.hi)} |")
    return lines


def trend(cells: list[dict]) -> list[str]:
    """Change of each fill's share of exact from one size to the next, at the same depth."""
    lines = ["| depth | from → to | change in ridge's share of exact [95 %] | change in identity's share [95 %] "
             "| change in ridge's lead over identity [95 %] |",
             "| --- | --- | --- | --- | --- |"]
    for depth in ("half", "two thirds"):
        row = [c for c in cells if c["depth"] == depth]
        for a, b in zip(row, row[1:]):
            parts = []
            for key in ("share_ridge", "share_identity", "lead"):
                d = b[f"{key}_reps"] - a[f"{key}_reps"]
                parts.append(fmt_ivl(100 * (b[key] - a[key]), *(100 * x for x in interval(d))))
            lines.append(f"| {depth} | {a['model'].name} → {b['model'].name} | " + " | ".join(f"{x} points" for x in parts) + " |")
    return lines


def main() -> None:
    cells = [c for m in MODELS for depth in m.splits if (c := cell(m, depth)) is not None]
    missing = [f"{m.name} {d}" for m in MODELS for d in m.splits if not any(c["model"] == m and c["depth"] == d for c in cells)]
    text = ["# The map's advantage by model size (4K, tail 1024, four needle tasks)", "",
            "Generated by `.venv/bin/python experiments/map-advantage-by-scale/table.py` from the stores under "
            "`bench/results/` (see README.md for the commands that measured them). Shares of exact are ratios of "
            "means with item-bootstrap 95 % intervals; differences are paired over items; ridge's lead over "
            "identity is the difference of their shares (one resample for both); the size-to-size change is an "
            "independent bootstrap of the two models' items.", "",
            *table(cells), "", *trend(cells)]
    if missing:
        text += ["", f"Not measured yet: {', '.join(missing)}."]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("\n".join(text) + "\n")
    print("\n".join(text))


if __name__ == "__main__":
    main()
