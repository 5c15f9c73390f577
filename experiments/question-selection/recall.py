#!/usr/bin/env python3
"""How much of each RULER item's evidence does the question's attention select, by probe layer, pooling and share?

    experiments/question-selection/recall.py --model GGUF --items DIR --split S [--sinks 4] [--tail 1024]
        [--probe 64] [--per-task 6] [--threads 2] --out results/NAME

For every RULER item in DIR (`ridgefill eval` item files): one exact pass of the prompt with every layer up to
the split captured, then, for each probe layer (and the largest over all of them), the attention the prompt's
last --probe rows pay every row (ridgefill.fit.attention.attention_paid, what the `ridge-select` splice scores
by), pooled as ridgefill.evals.select pools it, and the top q % of the filled rows [sinks, N - tail) taken.
Reported: the share of the evidence rows inside the filled rows that the selection covers, averaged per task
and then over tasks (RULER's average), for q = 1, 2, 5, 10 %, next to what as many random rows cover (q).
The per-layer scores are kept in OUT/scores/ (resumable); the table goes to OUT/recall.md.
"""

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))

from ridgefill.evals import select  # noqa: E402
from ridgefill.evals.ruler import RulerItem  # noqa: E402
from ridgefill.fit.attention import attention_layers, attention_paid  # noqa: E402
from ridgefill.runtime import Model  # noqa: E402

SHARES = (0.01, 0.02, 0.05, 0.10)
POOLS = (("none", 1), ("max", 3), ("max", 7), ("max", 15), ("avg", 7), ("fwd", 16), ("fwd", 32), ("fwd", 64))


def load_items(item_dir: Path, per_task: int) -> list[RulerItem]:
    items = []
    for f in sorted(item_dir.glob("ruler-*.json")):
        items += [RulerItem.from_dict(d) for d in json.loads(f.read_text())["items"][:per_task]]
    return items


def item_scores(model, ctx, attn, item, split: int, probe: int, cache: Path) -> dict[int, np.ndarray]:
    path = cache / f"{item.id.replace('/', '_')}.npz"
    if path.exists():
        z = np.load(path)
        return {int(k[1:]): z[k] for k in z.files}
    n = len(item.tokens)
    h = {il: np.empty((n, model.n_embd), np.float32) for il in attn}
    ctx.seq_rm(0)
    for start, m in ctx.decode_chunks(item.tokens, 0, 0, "none"):
        for il in attn:
            h[il][start : start + m] = ctx.layer_input(il)
    out = {il: attention_paid(attn[il], h[il], probe).astype(np.float32) for il in attn}
    np.savez(path, **{f"L{il}": v for il, v in out.items()})
    return out


def coverage(item, rows: np.ndarray, lo: int, hi: int) -> float | None:
    ev = {r for a, b in item.evidence for r in range(max(a, lo), min(b, hi))}
    return len(ev & set(rows.tolist())) / len(ev) if ev else None


def arguments(doc: str, per_task: int) -> argparse.Namespace:
    """The options this script and pool_scope.py share."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--items", required=True, type=Path)
    ap.add_argument("--split", required=True, type=int)
    ap.add_argument("--sinks", type=int, default=4)
    ap.add_argument("--tail", type=int, default=1024)
    ap.add_argument("--probe", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--per-task", type=int, default=per_task, help=f"the first items of each task (default {per_task})")
    ap.add_argument("--out", required=True, type=Path)
    return ap.parse_args()


def main() -> None:
    a = arguments(__doc__, 6)
    cache = a.out / "scores"
    cache.mkdir(parents=True, exist_ok=True)
    model = Model(a.model)
    layers = list(range(a.split + 1))
    attn = attention_layers(a.model, layers)
    ctx = model.context(n_ctx=8192, n_batch=2048, n_ubatch=512, threads=a.threads, capture=sorted(attn))
    items = load_items(a.items, a.per_task)
    table: dict[tuple, dict[str, list[float]]] = {}
    for i, item in enumerate(items):
        s = item_scores(model, ctx, attn, item, a.split, a.probe, cache)
        s["all"] = np.max(np.stack([s[il] for il in attn]), axis=0)
        lo, hi = a.sinks, len(item.tokens) - a.tail
        for probe_layer in [*attn, "all"]:
            for pool in POOLS:
                pooled = select.pooled(s[probe_layer], pool)
                for q in SHARES:
                    rows = select.top_rows(pooled, lo, hi, select.Selector("select", q).count(hi - lo))
                    c = coverage(item, rows, lo, hi)
                    if c is not None:
                        table.setdefault((probe_layer, pool, q), {}).setdefault(item.task, []).append(c)
        print(f"{i + 1}/{len(items)} {item.id}", file=sys.stderr, flush=True)
    report(table, a)


def task_mean(by_task: dict[str, list[float]]) -> float:
    return 100 * float(np.mean([np.mean(v) for v in by_task.values()]))


def report(table, a) -> None:
    lines = [f"# Evidence rows the question's attention selects: {Path(a.model).name}, split {a.split}, "
             f"sinks {a.sinks}, tail {a.tail}, last {a.probe} rows probe", "",
             "Share of the evidence rows inside the filled rows that the top q % cover (%, mean of the task means; "
             "random rows cover q).", "",
             "| probe layer | pooling | " + " | ".join(f"q = {100 * q:g} %" for q in SHARES) + " |",
             "| --- | --- | " + " | ".join("---" for _ in SHARES) + " |"]
    keys = sorted({k[:2] for k in table}, key=lambda k: (k[0] == "all", k[0] if k[0] != "all" else 0, k[1]))
    for layer, pool in keys:
        cells = [f"{task_mean(table[layer, pool, q]):.1f}" for q in SHARES]
        lines.append(f"| {layer} | {pool[0]}{pool[1] if pool[0] != 'none' else ''} | " + " | ".join(cells) + " |")
    best = max(keys, key=lambda k: task_mean(table[k[0], k[1], 0.05]))
    lines += ["", f"By task, probe layer {best[0]}, pooling {best[1][0]}{best[1][1]} (the best at q = 5 %):", "",
              "| task | items | " + " | ".join(f"q = {100 * q:g} %" for q in SHARES) + " |",
              "| --- | --- | " + " | ".join("---" for _ in SHARES) + " |"]
    for task in sorted(table[best[0], best[1], 0.05]):
        cells = [f"{100 * np.mean(table[best[0], best[1], q][task]):.1f}" for q in SHARES]
        lines.append(f"| {task} | {len(table[best[0], best[1], 0.05][task])} | " + " | ".join(cells) + " |")
    (a.out / "recall.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
