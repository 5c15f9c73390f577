"""A prefill batch by batch: where a fill's time goes, beside the cost model.

`llama-bench --ridgefill-batch-times` decodes a prompt one batch at a time, synchronizes after each and reports
its time and rows. With -b equal to -ub each call is one ubatch (two where sink or tail rows meet filled ones).
Exact and the fill modes run in interleaved rounds at the same positions, so each batch's exact/fill ratio
stands beside the cost model's ratio for the same rows (costmodel.layer_costs), and the batches are summed by
kind: the fill (every row filled), the exact rows (sinks and tail), batches that hold both, and the last
call, which also pays the probe and the selected rows. Where a fill's TTFT falls short of its bound, this says
which of them falls short.
"""

from __future__ import annotations

import numpy as np

from . import costmodel
from .report import kv_maps, lagged_maps
from .ttft import BenchError, fill_settings, llama_bench_row, round_order
from ..runtime.split_prefill import fill_range
from ..serve.server import maps_flags

KINDS = ("fill", "exact rows", "mixed", "last")


def batch_times(model: str, n_tokens: int, modes=("exact", "ridge"), rounds: int = 3, threads: int = 2,
                ubatch: int = 512, split: int | None = None, sinks: int | None = None, tail: int | None = None,
                tool: str | None = None, ngl: int = -1, maps: str | None = None, warmup: bool = False,
                progress=print) -> dict:
    """Per-batch times of an n_tokens prompt for each mode (exact first among them), medians over `rounds`."""
    modes = ["exact", *[m for m in modes if m != "exact"]]
    meta = maps or model
    split, sinks, tail = fill_settings(meta, modes, split, sinks, tail)
    extra = ("--ridgefill-batch-times", "-ngl", str(ngl), *maps_flags(maps))
    ms = {m: [] for m in modes}
    counts = {}
    for i in range(rounds):
        for mode in round_order(modes, i):
            row, _ = llama_bench_row(model, n_tokens, mode, threads, ubatch, ubatch, split, sinks, tail, tool=tool,
                                     extra_args=extra, warmup=warmup)
            ms[mode].append(np.asarray(row["ridgefill_batch_ns"], dtype=float) / 1e6)
            counts[mode] = {k: row[f"ridgefill_batch_{k}"] for k in ("rows", "filled", "routed")}
            progress(f"  {n_tokens} tokens, round {i + 1}/{rounds}, {mode}: {ms[mode][-1].sum():.0f} ms "
                     f"over {len(ms[mode][-1])} batches")
    costs = _Costs(costmodel.Shape.from_gguf(model), n_tokens, split, sinks, tail, lagged_maps(meta), kv_maps(meta))
    rows = _batch_rows(costs, modes, {m: np.median(np.stack(v), axis=0) for m, v in ms.items()}, counts)
    return {"model": str(model), "maps": maps, "n_tokens": n_tokens, "ubatch": ubatch, "split": split,
            "sinks": sinks, "tail": tail, "threads": threads, "rounds": rounds, "modes": modes, "batches": rows,
            "kinds": _by_kind(rows, modes)}


class _Costs:
    """Multiply-adds of the rows [lo, hi) of the prompt in each mode (costmodel.layer_costs)."""

    def __init__(self, shape, n, split, sinks, tail, lagged, kv):
        self.shape, self.n, self.split, self.sinks, self.tail, self.lagged, self.kv = \
            shape, n, split, sinks, tail, lagged, kv

    def __call__(self, mode: str, lo: int, hi: int) -> float:
        if mode == "exact":
            return sum(costmodel.layer_costs(self.shape, lo, hi, n=self.n))
        return sum(costmodel.layer_costs(self.shape, lo, hi, self.split, self.sinks, self.tail, lagged=self.lagged,
                                         n=self.n, kv=self.kv, **costmodel.mode_costs(mode)))


def _batch_rows(costs: _Costs, modes: list[str], median_ms: dict, counts: dict) -> list[dict]:
    f_lo, f_hi = fill_range(costs.n, costs.sinks, costs.tail)
    rows, lo = [], 0
    for i, n_rows in enumerate(counts["exact"]["rows"]):
        hi = lo + n_rows
        filled = max(0, min(hi, f_hi) - max(lo, f_lo))
        row = {"lo": lo, "hi": hi, "kind": _kind(lo, hi, costs.n, f_lo, f_hi),
               "ms": {m: float(median_ms[m][i]) for m in modes}, "cost": {m: costs(m, lo, hi) for m in modes},
               "filled": {}, "routed": {}, "ratio": {}, "bound": {}}
        for m in modes[1:]:
            row["filled"][m], row["routed"][m] = counts[m]["filled"][i], counts[m]["routed"][i]
            row["ratio"][m] = row["ms"]["exact"] / row["ms"][m]
            row["bound"][m] = row["cost"]["exact"] / row["cost"][m]
            if row["filled"][m] != filled:
                raise BenchError(f"llama-bench filled {row['filled'][m]} rows of batch [{lo}, {hi}) in {m}, where the "
                                 f"fill range [{f_lo}, {f_hi}) holds {filled}")
        rows.append(row)
        lo = hi
    if lo != costs.n or any(len(median_ms[m]) != len(rows) for m in modes):
        raise BenchError(f"llama-bench timed batches of {lo} rows in all, not the prompt's {costs.n}")
    return rows


def _kind(lo: int, hi: int, n: int, f_lo: int, f_hi: int) -> str:
    if hi == n:
        return "last"
    if f_lo <= lo and hi <= f_hi:
        return "fill"
    return "exact rows" if hi <= f_lo or lo >= f_hi else "mixed"


def _by_kind(rows: list[dict], modes: list[str]) -> list[dict]:
    """Per kind (and over the whole prompt): the batches' summed times and costs, each fill mode's ratio to exact
    against the cost model's, and its share of the mode's time against its share of the mode's cost."""
    total_ms = {m: sum(r["ms"][m] for r in rows) for m in modes}
    total_cost = {m: sum(r["cost"][m] for r in rows) for m in modes}
    out = []
    for kind in (*KINDS, "all"):
        group = [r for r in rows if kind in ("all", r["kind"])]
        if not group:
            continue
        t = {m: sum(r["ms"][m] for r in group) for m in modes}
        c = {m: sum(r["cost"][m] for r in group) for m in modes}
        entry = {"kind": kind, "batches": len(group), "rows": sum(r["hi"] - r["lo"] for r in group), "ms": t}
        for m in modes[1:]:
            ratio, bound = t["exact"] / t[m], c["exact"] / c[m]
            entry[m] = {"ratio": ratio, "bound": bound, "of_bound": ratio / bound,
                        "time_share": t[m] / total_ms[m], "cost_share": c[m] / total_cost[m]}
        out.append(entry)
    return out


def markdown(result: dict) -> str:
    modes = result["modes"]
    fills = modes[1:]
    head = (f"llama-bench --ridgefill-batch-times, {result['n_tokens']} tokens in batches of {result['ubatch']}, "
            f"split {result['split']}, sinks {result['sinks']}, tail {result['tail']}, {result['threads']} threads, "
            f"median of {result['rounds']} interleaved rounds; {result['model']}"
            + (f" + {result['maps']}" if result["maps"] else ""))
    cols = " | ".join(f"{m}: ms, ratio / bound / of bound" for m in fills)
    lines = [head, "", f"| rows | kind | exact ms | {cols} |", "| --- | --- | --- |" + " --- |" * len(fills)]
    for r in result["batches"]:
        cells = []
        for m in fills:
            ratio, bound = r["ratio"][m], r["bound"][m]
            note = f" ({r['routed'][m]} routed)" if r["routed"][m] else ""
            cells.append(f"{r['ms'][m]:.0f}{note}, {ratio:.2f}x / {bound:.2f}x / {ratio / bound:.0%}")
        lines.append(f"| [{r['lo']}, {r['hi']}) | {r['kind']} | {r['ms']['exact']:.0f} | {' | '.join(cells)} |")
    cols = " | ".join(f"{m}: ms, ratio / bound / of bound, share of time / of cost" for m in fills)
    lines += ["", f"| kind | batches | rows | exact ms | {cols} |", "| --- | --- | --- | --- |" + " --- |" * len(fills)]
    for k in result["kinds"]:
        cells = [f"{k['ms'][m]:.0f}, {k[m]['ratio']:.2f}x / {k[m]['bound']:.2f}x / {k[m]['of_bound']:.0%}, "
                 f"{k[m]['time_share']:.0%} / {k[m]['cost_share']:.0%}" for m in fills]
        lines.append(f"| {k['kind']} | {k['batches']} | {k['rows']} | {k['ms']['exact']:.0f} | {' | '.join(cells)} |")
    return "\n".join(lines)
