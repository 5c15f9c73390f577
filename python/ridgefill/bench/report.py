"""TTFT reports: per-length results, summaries with ratios and cost-model bounds, markdown, plots.

A summary is what `ridgefill bench ttft` prints and saves (--json-out) for one path
(llama-bench or llama-server): per length the median TTFT of each mode, exact/fill ratios
from the medians, the paired-round range of the ratio, and the cost-model bound. Where a routed mode
(ridge@P) ran beside its unrouted base (ridge), a second table isolates routing's own cost: the
median over rounds of base/routed time against the bound's ratio. `ridgefill bench report` renders
saved summaries again.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import asdict, dataclass, field

from . import costmodel
from .. import format as fmt
from ..fit.route import parse_mode, selected_share
from ..runtime.split_prefill import fill_range


@dataclass
class LengthResult:
    n_tokens: int
    ms: dict[str, list[float]] = field(default_factory=dict)
    peak_rss_mb: dict[str, float] = field(default_factory=dict)
    rows: dict[str, str] = field(default_factory=dict)  # filled/full rows of the fill runs

    def median(self, mode: str) -> float:
        return statistics.median(self.ms[mode])


def summarize(model, results, shape, split, sinks, tail, threads, modes, maps: int = 0, lagged: float = 0,
              kv: float = 0) -> dict:
    rows = []
    for r in results:
        lo, hi = fill_range(r.n_tokens, sinks, tail)
        row = {"n_tokens": r.n_tokens, "median_ms": {m: r.median(m) for m in modes}, "samples_ms": r.ms,
               "peak_rss_mb": r.peak_rss_mb, "fill_rows": r.rows, "n_fill_range": hi - lo}
        for mode in modes:
            if mode == "exact":
                continue
            ratio = r.median("exact") / r.median(mode)
            b = costmodel.bound(shape, r.n_tokens, split, sinks, tail, lagged=lagged, kv=kv, **costmodel.mode_costs(mode))
            row[f"ratio_{mode}"] = ratio
            row[f"bound_{mode}"] = b
            row[f"of_bound_{mode}"] = ratio / b
            row[f"ratio_range_{mode}"] = _paired_ratio_range(r.ms["exact"], r.ms[mode])
        rows.append(row)
    return {"model": str(model), "shape": asdict(shape), "split": split, "sinks": sinks, "tail": tail,
            "threads": threads, "map_bytes": maps, "lagged_maps": lagged, "kv_maps": kv, "modes": list(modes),
            "results": rows}


def merge_summaries(summaries: list[dict]) -> list[dict]:
    """Runs of one setting (path, model, split, sinks, tail, threads, modes) saved at different lengths
    become one series, sorted by length; a length measured twice keeps the later file's rows."""
    merged: dict[tuple, dict] = {}
    for s in summaries:
        key = (s.get("path"), s["model"], s["split"], s["sinks"], s["tail"], s["threads"], tuple(s["modes"]))
        if key in merged:
            rows = {r["n_tokens"]: r for r in merged[key]["results"] + s["results"]}
            merged[key] = {**merged[key], "results": [rows[n] for n in sorted(rows)]}
        else:
            merged[key] = s
    return list(merged.values())


def _paired_ratio_range(exact_ms: list[float], fill_ms: list[float]) -> list[float]:
    """Min and max of exact/fill over the interleaved rounds: run i of each mode shared the machine's state."""
    ratios = [e / f for e, f in zip(exact_ms, fill_ms)]
    return [min(ratios), max(ratios)]


def _row_ratio_range(row: dict, mode: str) -> list[float]:
    """From the samples, so reports saved before the range was stored show it too."""
    return _paired_ratio_range(row["samples_ms"]["exact"], row["samples_ms"][mode])


def _ratio_cell(row: dict, mode: str) -> str:
    cell = f"{row[f'ratio_{mode}']:.2f}x"
    if len(row["samples_ms"][mode]) > 1:
        lo, hi = _row_ratio_range(row, mode)
        cell += f" ({lo:.2f}-{hi:.2f})"
    cell += f" / {row[f'bound_{mode}']:.2f}x / {100 * row[f'of_bound_{mode}']:.0f}%"
    return cell + (" (fills nothing: tail >= N - sinks)" if row.get("n_fill_range") == 0 else "")


def markdown(summary: dict) -> str:
    modes = summary["modes"]
    title = f"{summary.get('path', 'llama-bench')}, split {summary['split']}, sinks {summary['sinks']}, " \
        f"tail {summary['tail']}, {summary['threads']} threads, map memory {summary['map_bytes'] / 2**20:.1f} MiB"
    fills = [m for m in modes if m != "exact"]
    head = "| tokens | " + " | ".join(f"TTFT {m} (ms)" for m in modes) + " | " + \
        " | ".join(f"{m}: ratio (paired range) / bound / of bound" for m in fills) + " |"
    lines = [head, "|" + " --- |" * (1 + len(modes) + len(fills))]
    for r in summary["results"]:
        cells = [str(r["n_tokens"])] + [f"{r['median_ms'][m]:.0f}" for m in modes]
        cells += [_ratio_cell(r, m) for m in fills]
        lines.append("| " + " | ".join(cells) + " |")
    return title + "\n\n" + "\n".join(lines) + _routing_table(summary) + _placement_table(summary)


def _placement_table(summary: dict) -> str:
    """Pipelined over several devices (bench/pipeline.py): each mode's -ts and the bound at those placements."""
    rows = [r for r in summary["results"] if any(k.startswith("pipeline_bound_") for k in r)]
    if not rows:
        return ""
    fills = [m for m in summary["modes"] if m != "exact"]
    lines = ["| tokens | " + " | ".join(f"{m} -ts" for m in summary["modes"]) + " | " +
             " | ".join(f"{m}: pipelined bound / of it" for m in fills) + " |",
             "|" + " --- |" * (1 + len(summary["modes"]) + len(fills))]
    for r in rows:
        cells = [str(r["n_tokens"])] + [r["placement"][m].removeprefix("-ts ") or "llama.cpp's" for m in summary["modes"]]
        cells += [f"{r[f'pipeline_bound_{m}']:.2f}x / {100 * r[f'ratio_{m}'] / r[f'pipeline_bound_{m}']:.0f}%" for m in fills]
        lines.append("| " + " | ".join(cells) + " |")
    return f"\n\nlayers per device, pipelined (--tensor-split {summary.get('tensor_split')})\n\n" + "\n".join(lines)


def _routing_table(summary: dict) -> str:
    """Per length and routed mode with its base measured in the same rounds: time(base)/time(routed),
    the median and range over rounds, against bound(routed)/bound(base): what the cost model says
    routing costs. 1.00x would be free; the model's figure is the target."""
    # a selecting mode (ridge@P^Q) also pays its probe and selected rows: not routing's own cost
    routed = [(m, parse_mode(m)[0]) for m in summary["modes"] if parse_mode(m)[1] > 0 and selected_share(m) == 0]
    pairs = [(m, base) for m, base in routed if base in summary["modes"]]
    if not pairs:
        return ""
    lines = ["| tokens | mode | routed rows | base / routed: paired median (range) | cost model | measured / model |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in summary["results"]:
        for mode, base in pairs:
            ratios = [b / x for b, x in zip(r["samples_ms"][base], r["samples_ms"][mode])]
            model = r[f"bound_{mode}"] / r[f"bound_{base}"]
            med = statistics.median(ratios)
            routed = r.get("fill_rows", {}).get(mode, "").rpartition(", ")[2].removesuffix(" routed") or "?"
            lines.append(f"| {r['n_tokens']} | {mode} | {routed} | {med:.3f}x ({min(ratios):.3f}-{max(ratios):.3f}) | "
                         f"{model:.3f}x | {100 * med / model:.0f}% |")
    return "\n\nrouting's own cost (same rounds)\n\n" + "\n".join(lines)


def _color(mode: str, modes: list[str]) -> str:
    """One colour per mode in both panels: the three base modes keep theirs, routed modes follow."""
    base = {"exact": "C0", "identity": "C1", "ridge": "C2"}
    extra = [m for m in modes if m not in base]
    return base.get(mode) or f"C{3 + extra.index(mode)}"


def plot(summaries: list[dict], out_png: str) -> str:
    """TTFT per mode and speed-up vs prompt length for each path; the cost-model bound dashed."""
    import matplotlib.pyplot as plt

    fig = figure(summaries)
    fig.savefig(out_png, dpi=110)
    plt.close(fig)
    return out_png


def figure(summaries: list[dict]):
    """plot()'s matplotlib figure: axes[0] TTFT (s) per mode, axes[1] speed-up per fill mode and the bound."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_t, ax_r) = plt.subplots(1, 2, figsize=(11, 4.2))
    for summ in summaries:
        tag = summ.get("path", "llama-bench")
        style = dict(marker="o", linestyle="-" if tag == "llama-bench" else "-.")
        n = [r["n_tokens"] for r in summ["results"]]
        for mode in summ["modes"]:
            ax_t.plot(n, [r["median_ms"][mode] / 1000 for r in summ["results"]], color=_color(mode, summ["modes"]), **style,
                      label=f"{mode} ({tag})")
            if mode != "exact":
                ratio = [r[f"ratio_{mode}"] for r in summ["results"]]
                spread = [_row_ratio_range(r, mode) for r in summ["results"]]
                yerr = [[y - lo for y, (lo, _) in zip(ratio, spread)], [hi - y for y, (_, hi) in zip(ratio, spread)]]
                ax_r.errorbar(n, ratio, yerr=yerr, capsize=3, color=_color(mode, summ["modes"]), **style,
                              label=f"{mode} ({tag})")
    s0 = summaries[0]
    fills = [x for x in s0["modes"] if x != "exact"]
    if fills:
        n = [r["n_tokens"] for r in s0["results"]]
        ax_r.plot(n, [r[f"bound_{fills[-1]}"] for r in s0["results"]], "k--", label=f"cost-model bound ({fills[-1]})")
    ax_t.set(xlabel="prompt tokens", ylabel="TTFT (s, median)", xscale="log", title="time to first token")
    ax_r.set(xlabel="prompt tokens", ylabel="TTFT exact / TTFT fill (bars: paired-round range)", xscale="log",
             title=f"speed-up: split {s0['split']}, sinks {s0['sinks']}, tail {s0['tail']}")
    for ax in (ax_t, ax_r):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{os.path.basename(s0['model'])}, {s0['threads']} threads")
    fig.tight_layout()
    return fig


def _or_zero(read, model):
    """What `read` finds in the GGUF; 0 for a model without maps (exact/identity runs)."""
    try:
        return read(model)
    except ValueError:
        return 0


def map_bytes(model) -> int:
    """Bytes of RidgeFill maps in the GGUF."""
    return _or_zero(lambda m: fmt.inspect(m)["map_bytes"], model)


def lagged_maps(model) -> float:
    """The d x d products a filled row's maps spend on earlier rows (fmt.earlier_row_products: one per lagged
    map, a window's share)."""
    return _or_zero(fmt.earlier_row_products, model)


def kv_maps(model) -> int:
    """Products of the K/V maps per filled row (fmt.kv_products)."""
    return _or_zero(fmt.kv_products, model)
