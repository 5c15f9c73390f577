#!/usr/bin/env python3
"""Where do the fork's pooled picks go: does 63-row max pooling over every row spend picks next to the sinks and the tail?

    experiments/question-selection/pool_scope.py --model GGUF --items DIR --split S [--per-task 2] --out results/NAME

The fork (and the splice it builds) scores every row by the attention the prompt's last 64 rows pay it at the exact
layers, max-pools over 63 positions centred on each row, and takes the top q % of the filled rows [sinks, N - tail).
The sinks draw most of every head's attention and the tail's rows next to the fill range draw the probe's local
attention, so pooling over every row hands their scores to the first and last 31 filled rows. Here, per item (the
scores recall.py keeps in OUT/scores/, computed the same way), for q = 5, 10 and 20 %: the share of the picks within 31
rows of either end of the fill range, and the evidence rows covered, when the pooling reads every row (the fork
today) and when it reads the filled rows' scores only (zero elsewhere). RULER's average of the task means.
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))

from recall import arguments, coverage, item_scores, load_items, task_mean  # noqa: E402
from ridgefill.evals import select  # noqa: E402
from ridgefill.fit.attention import attention_layers  # noqa: E402
from ridgefill.runtime import Model  # noqa: E402

POOL, EDGE, SHARES = ("max", 63), 31, (0.05, 0.10, 0.20)


def picks(scores: np.ndarray, lo: int, hi: int, q: float, fill_only: bool) -> np.ndarray:
    s = scores.copy()
    if fill_only:
        s[:lo], s[hi:] = 0.0, 0.0
    return select.top_rows(select.pooled(s, POOL), lo, hi, select.Selector("select", q).count(hi - lo))


def main() -> None:
    a = arguments(__doc__, 2)
    cache = a.out / "scores"
    cache.mkdir(parents=True, exist_ok=True)
    model = Model(a.model)
    attn = attention_layers(a.model, list(range(a.split + 1)))
    ctx = model.context(n_ctx=8192, n_batch=2048, n_ubatch=512, threads=a.threads, capture=sorted(attn))
    edge, cover = {}, {}
    items = load_items(a.items, a.per_task)
    for i, item in enumerate(items):
        s = item_scores(model, ctx, attn, item, a.split, a.probe, cache)
        best = np.max(np.stack([s[il] for il in attn if il != "all"]), axis=0)
        lo, hi = a.sinks, len(item.tokens) - a.tail
        for q in SHARES:
            for fill_only in (False, True):
                rows = picks(best, lo, hi, q, fill_only)
                near = np.mean((rows < lo + EDGE) | (rows >= hi - EDGE))
                edge.setdefault((q, fill_only), {}).setdefault(item.task, []).append(float(near))
                c = coverage(item, rows, lo, hi)
                if c is not None:
                    cover.setdefault((q, fill_only), {}).setdefault(item.task, []).append(c)
        print(f"{i + 1}/{len(items)} {item.id}", file=sys.stderr, flush=True)
    lines = [f"# Pooling over every row or over the filled rows: {Path(a.model).name}, split {a.split}, sinks "
             f"{a.sinks}, tail {a.tail}, {a.probe}-row probe at every exact layer, max over {POOL[1]}, "
             f"{len(items)} items", "",
             "| q | pooling reads | picks within 31 rows of the fill range's ends | evidence rows covered |",
             "| --- | --- | --- | --- |"]
    for q in SHARES:
        for fill_only in (False, True):
            lines.append(f"| {100 * q:g} % | {'the filled rows' if fill_only else 'every row (the fork)'} | "
                         f"{task_mean(edge[q, fill_only]):.1f} % | {task_mean(cover[q, fill_only]):.1f} % |")
    lines += ["", "By task: evidence covered (%), pooling over every row / over the filled rows:", "",
              "| task | " + " | ".join(f"q = {100 * q:g} %" for q in SHARES) + " |",
              "| --- | " + " | ".join("---" for _ in SHARES) + " |"]
    for task in sorted(cover[SHARES[0], False]):
        lines.append(f"| {task} | " + " | ".join(f"{100 * np.mean(cover[q, False][task]):.1f} / "
                                                  f"{100 * np.mean(cover[q, True][task]):.1f}" for q in SHARES) + " |")
    (a.out / "pool-scope.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
