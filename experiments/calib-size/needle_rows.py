"""Where do 4x the calibration rows help: the keys of ordinary prompt rows, or those of the needles' own rows?

Per-row and lagged maps (../windowed-maps/window.py, λ per layer on the held-out rows) fitted on the first N of
the 65,536-token capture's 28 training windows (N = 7: the 16,384-token fits' size) and on all 28; each map's
relative key error (the layer's own norm, K projection and RoPE, layers split+1..L-1) on the frontier's needle
prompts, over the rows a fill predicts: the needles' rows apart from the rest.

Usage: needle_rows.py --model GGUF --split 12 --items ITEM_FILE... [--per-file 2] --out DIR
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "windowed-maps"))
sys.path.insert(0, str(HERE.parent / "lagged-maps"))
import window  # noqa: E402
from lagged import attn_kv, prefix_rows  # noqa: E402


def filled_rows(item: dict) -> tuple[np.ndarray, np.ndarray]:
    """(needle rows, other rows) of the range a fill predicts: past the sinks, before the tail."""
    n, sinks, tail = len(item["tokens"]), item["meta"]["sinks"], item["meta"]["tail"]
    rows = np.arange(sinks, n - tail)
    needle = np.zeros(n, bool)
    for a, b in item["needles"]:
        needle[a:b] = True
    return rows[needle[rows]], rows[~needle[rows]]


def key_errors(maps: window.Maps, rows: dict, kv: dict, parts: dict[str, np.ndarray], acc: dict) -> None:
    """Adds Σ‖k − k̂‖² and Σ‖k‖² per (part, layer) of one prompt into acc[part][layer]."""
    hi = max(int(p.max()) for p in parts.values() if len(p)) + 1
    pred = maps.predict(rows[maps.split][:hi])
    for il, y_hat in pred.items():
        for name, idx in parts.items():
            if not len(idx):
                continue
            k, _ = kv[il](rows[il][idx], idx)
            k_hat, _ = kv[il](y_hat[idx], idx)
            acc[name].setdefault(il, np.zeros(2))
            acc[name][il] += [((k - k_hat) ** 2).sum(), (k ** 2).sum()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--split", type=int, required=True)
    ap.add_argument("--tokens", type=int, default=65536)
    ap.add_argument("--train-windows", type=int, nargs="+", default=[7])
    ap.add_argument("--items", nargs="+", required=True, help="needle item files (the frontier's)")
    ap.add_argument("--per-file", type=int, default=2, help="items taken from each file")
    ap.add_argument("--sinks", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cache", type=Path, default=Path.home() / ".cache/ridgefill/experiments/windowed-maps")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()

    from ridgefill.runtime import Model

    model = Model(args.model)
    train, held = window.capture(model, args.split, args.tokens, args.threads, args.cache)
    kv = attn_kv(args.model, range(args.split, model.n_layer))
    fitted = {}
    for n_win in sorted(set(args.train_windows) | {len(train)}):
        base: dict[str, window.Maps] = {}
        for kind in ("row", "lag1"):
            base[kind] = window.fit(kind, train[:n_win], held, args.split, model.n_layer, args.sinks, 0.0, base, kv)
            fitted[f"{kind}@{n_win}"] = base[kind]
    del train, held
    items = [it for f in args.items for it in json.loads(Path(f).read_text())["items"][: args.per_file]]
    acc = {name: {"needle": {}, "other": {}} for name in fitted}
    layers = list(range(args.split, model.n_layer))
    for i, item in enumerate(items):
        rows = prefix_rows(model, np.asarray(item["tokens"], np.int32), layers, args.threads)
        needle, other = filled_rows(item)
        for name, maps in fitted.items():
            key_errors(maps, rows, kv, {"needle": needle, "other": other}, acc[name])
        print(f"item {i + 1}/{len(items)}: {item['id']}", flush=True)
    report = table(acc, args.split + 4, len(items))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "needle-rows.md").write_text(report)
    print(report)


def table(acc: dict, layer: int, n_items: int) -> str:
    rel = lambda a: float(np.sqrt(a[0] / a[1]))
    pooled = lambda part: rel(sum(part.values()))
    lines = [f"{n_items} prompts; relative key error over the filled rows (layers pooled; layer {layer} alone)", "",
             f"| maps | needle rows | other rows | layer {layer}: needle rows | layer {layer}: other rows |",
             "| --- | --- | --- | --- | --- |"]
    for name, parts in acc.items():
        lines.append(f"| {name} | {pooled(parts['needle']):.3f} | {pooled(parts['other']):.3f} | "
                     f"{rel(parts['needle'][layer]):.3f} | {rel(parts['other'][layer]):.3f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
