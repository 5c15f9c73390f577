#!/usr/bin/env python3
"""Does a second hop find the evidence the question's attention misses (vt's later links)?

    experiments/question-selection/hops.py --model GGUF --items DIR --split S [--tasks vt ...] [--share 10]
        [--hops 4] [--gap 64] [--kinds fwd bwd fwd@11 ...] [--per-task 6] [--tail 1024] [--threads 2] --out results/NAME

The selection the fork builds (`ridge^10`: the top q % of the filled rows by the attention the last 64 rows pay
them at every exact layer, 63-row max pooling) finds a variable chain's first link, the one that names the value
the question asks for; the later links name only the previous variable. A hop scores the filled rows once more,
from the rows already chosen, at the same exact layers (each layer's own norm, projections and RoPE over the
captured inputs, every row's causal softmax over all rows before it):

- `fwd`: the share of its attention a row pays the chosen rows (a later link reads the earlier one's name);
- `bwd`: the share the chosen rows pay a row (a chosen link reads its predecessor);
- `fwd@L`: `fwd` at layer L alone (what the fork would keep: one layer's queries and normalizers).

Only pairs more than --gap rows apart count (a row's attention to its neighbours says nothing about the chain);
the largest over heads and layers, 63-row max pooling as the first pick, the chosen rows excluded; each hop adds
the top 63 rows. Reported per task: the share of the evidence rows inside the filled rows covered by the first
pick, by the first pick plus 1..H hops of each kind, and by the first pick alone widened to the same row count
(the fair control: is a hop better than more of the question's attention?). No generation.
"""

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from recall import coverage, load_items  # noqa: E402

from ridgefill.evals import select  # noqa: E402
from ridgefill.fit.attention import CausalAttention, attention_layers, attention_paid  # noqa: E402
from ridgefill.runtime import Model  # noqa: E402

POOL = ("max", 63)
KINDS = ("fwd", "bwd")


def hop_scores(layers: dict[int, CausalAttention], chosen: np.ndarray, gap: int, kind: str) -> np.ndarray:
    """(n,): each row's hop score of `kind` (fwd, bwd; `fwd@L`: layer L's alone) from the rows `chosen`, the
    largest over the layers."""
    kind, _, only = kind.partition("@")
    use = [layers[int(only)]] if only else list(layers.values())
    n = use[0].n
    out = np.zeros(n, np.float32)
    for la in use:
        if kind == "fwd":
            out = np.maximum(out, la.paid_to(chosen, gap))
        else:  # what the chosen rows pay each row
            out = np.maximum(out, la.shares(chosen, np.arange(n), gap).max(axis=(0, 1, 2)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--items", required=True, type=Path)
    ap.add_argument("--split", required=True, type=int)
    ap.add_argument("--tasks", nargs="+", default=["vt"])
    ap.add_argument("--share", type=float, default=10.0, help="the first pick, % of the filled rows")
    ap.add_argument("--hops", type=int, default=4)
    ap.add_argument("--gap", type=int, default=64)
    ap.add_argument("--kinds", nargs="+", default=list(KINDS), help="fwd, bwd, fwd@L (layer L's scores alone)")
    ap.add_argument("--sinks", type=int, default=4)
    ap.add_argument("--tail", type=int, default=1024)
    ap.add_argument("--probe", type=int, default=64)
    ap.add_argument("--per-task", type=int, default=6)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", required=True, type=Path)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    model = Model(a.model)
    attn = attention_layers(a.model, list(range(a.split + 1)))
    ctx = model.context(n_ctx=8192, n_batch=2048, n_ubatch=512, threads=a.threads, capture=sorted(attn))
    items = [it for it in load_items(a.items, a.per_task) if it.task in a.tasks]
    cov: dict[str, dict[str, list[float]]] = {}
    step = POOL[1]
    for i, item in enumerate(items):
        n = len(item.tokens)
        lo, hi = a.sinks, n - a.tail
        h = {il: np.empty((n, model.n_embd), np.float32) for il in attn}
        ctx.seq_rm(0)
        for start, m in ctx.decode_chunks(item.tokens, 0, 0, "none"):
            for il in attn:
                h[il][start : start + m] = ctx.layer_input(il)
        layers = {il: CausalAttention(attn[il], h[il]) for il in sorted(attn)}
        probe = np.max(np.stack([attention_paid(attn[il], h[il], a.probe) for il in attn]), axis=0)
        count = select.Selector("select", a.share / 100).count(hi - lo)
        first = select.top_rows(select.pooled(probe, POOL), lo, hi, count)
        if coverage(item, first, lo, hi) is None:
            continue  # no evidence inside the filled rows
        add = lambda key, rows: cov.setdefault(key, {}).setdefault(item.task, []).append(coverage(item, rows, lo, hi))
        add("first pick", first)
        for hop in range(1, a.hops + 1):
            add(f"first pick widened to +{hop} x {step} rows",
                select.top_rows(select.pooled(probe, POOL), lo, hi, count + hop * step))
        for kind in a.kinds:
            chosen = first
            for hop in range(1, a.hops + 1):
                chosen = select.next_hop(chosen, hop_scores(layers, chosen, a.gap, kind), POOL, lo, hi)
                add(f"first pick + {hop} {kind} hop{'s' * (hop > 1)}", chosen)
        print(f"{i + 1}/{len(items)} {item.id}: " + ", ".join(f"{k} {v[item.task][-1]:.2f}" for k, v in cov.items()
                                                              if v.get(item.task)), file=sys.stderr, flush=True)
    report(cov, a)


def report(cov, a) -> None:
    tasks = sorted({t for v in cov.values() for t in v})
    lines = [f"# Hops: evidence rows covered, {Path(a.model).name}, split {a.split}, sinks {a.sinks}, tail {a.tail}, "
             f"first pick {a.share:g} % (every exact layer, 63-row max pooling), pairs > {a.gap} rows apart", "",
             "| selection | " + " | ".join(f"{t} ({len(cov['first pick'][t])})" for t in tasks) + " |",
             "| --- | " + " | ".join("---" for _ in tasks) + " |"]
    for key, by_task in cov.items():
        lines.append(f"| {key} | " + " | ".join(f"{100 * np.mean(by_task[t]):.1f}" for t in tasks) + " |")
    (a.out / "hops.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
