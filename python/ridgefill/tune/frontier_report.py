"""The frontier as a reader sees it: the markdown table (quality with intervals, speed against
the bound, the commands that measured it) and the quality-against-speed plot."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from ..fit.route import mode_name
from .frontier import share_of_exact, speedup


def _iv(d: dict | None) -> str:
    if not d:
        return "–"
    return f"{d['mean']:+.1f} [{d['lo']:+.1f}, {d['hi']:+.1f}]"


def _ivl(d: dict | None) -> str:
    if not d:
        return "–"
    return f"{d['mean']:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}]"


def _speed(row: dict, mode: str) -> str:
    bound = f"{row[f'bound_{mode}']:.2f}x"
    if f"speedup_{mode}" not in row:
        return f"– (bound {bound})"
    lo, hi = row[f"speedup_range_{mode}"]
    return f"{row[f'speedup_{mode}']:.2f}x [{lo:.2f}, {hi:.2f}] (bound {bound})"


def _counts(row: dict) -> str:
    """n=N, or n=E/I/R per mode where a sweep left part-way measured them unequally."""
    ns = row.get("needle_ns") or {}
    if len(set(ns.values())) > 1:
        return "n=" + "/".join(str(ns.get(v, 0)) for v in ("exact", "identity", "ridge"))
    return f"n={next(iter(ns.values()), row.get('needle_n', 0))}"


def _command_lines(commands: Sequence[str]) -> list[str]:
    if len(commands) == 1:
        return [f"Command: `{commands[0]}`\n"]
    return ["Commands, in the order they ran (each resumes the work directory; rerun, it measures only what is "
            "missing):\n"] + [f"- `{c}`" for c in commands] + [""]


def _loss_table(rows: list[dict], window: int | None) -> list[str]:
    """Distant-token loss where it was measured: means per mode, paired differences, the all-token gap."""
    rows = [r for r in rows if "loss_distant" in r]
    if not rows:
        return []
    short = f"the last {window} tokens" if window else "a short window"
    lines = ["", f"Distant-token loss (nats, each document's mean weighted alike): on the tail tokens whose exact loss "
                 f"falls by >= 2 nats (to <= 2) with the whole prefix instead of {short}:\n",
             "| split | tail | N | distant loss exact / identity / ridge (docs, tokens) | ridge − identity [95 %] | "
             "ridge − exact [95 %] | identity − exact [95 %] | all tail tokens ridge − exact [95 %] |",
             "|" + " --- |" * 8]
    for r in rows:
        m, d = r["loss_distant"], r.get("loss_diff", {})
        cells = " / ".join(f"{m[v]:.3f}" if v in m else "–" for v in ("exact", "identity", "ridge"))
        lines.append(f"| {r['split']} | {r['tail']} | {r['n_tokens']} | {cells} ({r.get('loss_docs', 0)}, "
                     f"{r.get('loss_tokens', 0)}) | {_ivl(d.get('ridge-identity'))} | {_ivl(d.get('ridge-exact'))} | "
                     f"{_ivl(d.get('identity-exact'))} | {_ivl(r.get('loss_all_diff', {}).get('ridge-exact'))} |")
    return lines


SEED_TRADE = ("the seed's own trade: 1.25-1.31x TTFT for -1.2 to -1.4 RULER points at 16K-120K tokens "
              "(Qwen3.8-27B in a llama.cpp fork on an A100)")


def _ruler_table(rows: list[dict]) -> list[str]:
    """RULER's average against speed, the seed's terms; its tasks named, since qa_1 and qa_2 cannot run here."""
    rows = [r for r in rows if "ruler" in r]
    if not rows:
        return []
    tasks = sorted({len(r.get("ruler_tasks", ())) for r in rows})
    lines = ["", f"RULER average over {'/'.join(map(str, tasks))} tasks (RULER's string match, 0-100; qa_1 and qa_2 "
                 f"need datasets that do not install offline), against speed; beside {SEED_TRADE}:\n",
             "| split | tail | N | speed-up ridge | RULER exact / identity / ridge (items) | ridge − exact [95 %] | "
             "ridge − identity [95 %] | identity − exact [95 %] |",
             "|" + " --- |" * 8]
    for r in rows:
        m, d, ns = r["ruler"], r.get("ruler_diff", {}), r.get("ruler_ns", {})
        cells = " / ".join(f"{m[v]:.1f}" if v in m else "–" for v in ("exact", "identity", "ridge"))
        count = "/".join(str(ns.get(v, 0)) for v in ("exact", "identity", "ridge"))
        lines.append(f"| {r['split']} | {r['tail']} | {r['n_tokens']} | {_speed(r, 'ridge')} | {cells} ({count}) | "
                     f"{_iv(d.get('ridge-exact'))} | {_iv(d.get('ridge-identity'))} | {_iv(d.get('identity-exact'))} |")
    return lines


def markdown(rows: list[dict], title: str = "", commands: Sequence[str] | str | None = None,
             window: int | None = None) -> str:
    selected = any(r.get("select", 0) > 0 for r in rows)
    routed = selected or any(r.get("route", 0) > 0 for r in rows)
    how = "routed / selected" if selected else "routed"
    commands = [commands] if isinstance(commands, str) else list(commands or ())
    needles = [r for r in rows if "needle" in r] or ([] if any("ruler" in r for r in rows) else rows)
    lines = [f"## {title}\n" if title else None, *(_command_lines(commands) if commands else ()),
             ("| split | tail | " + (f"{how} | " if routed else "") + "N | speed-up ridge | speed-up identity | "
              "needles exact / identity / ridge (n) | ridge − identity [95 %] | ridge − exact [95 %] | "
              + (f"{how} − plain ridge [95 %] |" if routed else "")).rstrip(),
             "|" + " --- |" * (10 if routed else 8)] if needles else []
    for r in needles:
        n = r.get("needle", {})
        cells = " / ".join(f"{n[v]:.1f}" if v in n else "–" for v in ("exact", "identity", "ridge"))
        d = r.get("needle_diff", {})
        route = f"{100 * r.get('route', 0):g} % | " if routed else ""
        route = f"{100 * r.get('route', 0):g} % / {100 * r.get('select', 0):g} % | " if selected else route
        plain = f"{_iv(d.get('ridge-plain'))} | " if routed else ""
        lines.append(f"| {r['split']} | {r['tail']} | {route}{r['n_tokens']} | {_speed(r, 'ridge')} | {_speed(r, 'identity')} | "
                     f"{cells} ({_counts(r)}) | {_iv(d.get('ridge-identity'))} | {_iv(d.get('ridge-exact'))} | {plain}".rstrip())
    lines += _loss_table(rows, window) + _ruler_table(rows)
    return "\n".join(line for line in lines if line is not None) + "\n"


def plot(rows: list[dict], out_png: Path, title: str = "") -> Path:
    """x = speed-up (measured, else the bound), y = needle score as a share of exact; one line per
    fill mode and prompt length; exact is the ceiling at 1."""
    import matplotlib.pyplot as plt

    fig = figure(rows, title)
    out_png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_png, dpi=120)
    plt.close(fig)
    return out_png


def figure(rows: list[dict], title: str = ""):
    """plot()'s matplotlib figure (one axes)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    metric = "needle" if any("needle" in r for r in rows) else "ruler"
    fill = lambda r: (r.get("route", 0.0), r.get("select", 0.0))  # noqa: E731
    lines = [("identity", (0.0, 0.0), "--o", -11)] + [("ridge", f, "-s" if f == (0.0, 0.0) else "-^", 4)
                                                      for f in sorted({fill(r) for r in rows})]
    for n in sorted({r["n_tokens"] for r in rows}):
        for tail in sorted({r["tail"] for r in rows}):
            for mode, how, style, dy in lines:
                pts = sorted((speedup(r, mode), share_of_exact(r, mode, metric), r["split"]) for r in rows
                             if r["n_tokens"] == n and r["tail"] == tail and share_of_exact(r, mode, metric) is not None
                             and fill(r) == (how if mode == "ridge" else (0.0, 0.0)))
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], style,
                            label=f"{mode_name(mode, *how)}, N={n}, T={tail}")
                    for x, y, s in pts:
                        ax.annotate(f"s{s}", (x, y), fontsize=7, xytext=(3, dy), textcoords="offset points")
    ax.axhline(1.0, color="k", lw=0.8, label="exact")
    ax.set_xlabel("TTFT speed-up over exact (measured where available, else cost-model bound)")
    ax.set_ylabel(f"{'needle score' if metric == 'needle' else 'RULER average'} / exact")
    ax.set_title(title or "quality vs speed")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
