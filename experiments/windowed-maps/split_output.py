"""Issue 36's split-layer lever: does a map that also reads what the split layer outputs predict better, and is
that more than moving the split by one layer?

The fill graph writes the split layer's K/V from h_s and computes nothing else of it for a filled row: its
attention output needs attention over the whole context, the work the fill saves. A map that reads that output
(attention + FFN, the step h_{s+1} − h_s) therefore pays one full layer per filled row, as split s+1 does. Per late
layer l ≥ s+2, held-out R² of the layer input and relative key error (numpy keys, real norm and RoPE) of
ridge maps from: h_s (split s), [h_s, h_{s+1}] (split s plus its layer's output) and h_{s+1} (split s+1), on the
rows window.py keeps (`--cache`).

Usage: split_output.py --model GGUF --split 12 --out DIR [--tokens 16384]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lagged-maps"))
from lagged import attn_kv, ridge  # noqa: E402
from window import capture  # noqa: E402


def stack(wins, layers, sinks):
    return np.hstack([np.concatenate([w[il][sinks:] for w in wins]) for il in layers])


def key_error(kv, wins, y_hat, il, sinks):
    err = tot = 0.0
    off = 0
    for w in wins:
        n = len(w[il]) - sinks
        pos = np.arange(sinks, sinks + n)
        k, _ = kv(w[il][sinks:], pos)
        k_hat, _ = kv(y_hat[off:off + n], pos)
        err, tot, off = err + ((k - k_hat) ** 2).sum(), tot + (k ** 2).sum(), off + n
    return float(np.sqrt(err / tot))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--split", type=int, required=True)
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--sinks", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cache", type=Path, default=Path.home() / ".cache/ridgefill/experiments/windowed-maps")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    from ridgefill.runtime import Model

    model = Model(a.model)
    train, held = capture(model, a.split, a.tokens, a.threads, a.cache)
    s, n_layer = a.split, model.n_layer
    kv = attn_kv(a.model, range(s + 2, n_layer))
    inputs = {f"h_{s} (split {s})": [s], f"[h_{s}, h_{s + 1}] (split {s} + its layer's output)": [s, s + 1],
              f"h_{s + 1} (split {s + 1})": [s + 1]}
    rows = []
    for name, src in inputs.items():
        xtr, xho = stack(train, src, a.sinks), stack(held, src, a.sinks)
        r2s, kes = [], []
        for il in range(s + 2, n_layer):
            w, b, r2 = ridge(xtr, stack(train, [il], a.sinks), xho, stack(held, [il], a.sinks))
            r2s.append(r2)
            kes.append(key_error(kv[il], held, xho @ w + b, il, a.sinks))
        rows.append((name, r2s, kes))
        print(name, f"mean R² {np.mean(r2s):.4f} key err {np.mean(kes):.3f}", flush=True)
    lines = [f"split {s}, layers {s + 2}-{n_layer - 1}: held-out R² / key error", "",
             "| map input | " + " | ".join(str(il) for il in range(s + 2, n_layer)) + " | mean |",
             "| --- |" + " --- |" * (n_layer - s - 1)]
    for name, r2s, kes in rows:
        cells = [f"{r:.3f} / {k:.3f}" for r, k in zip(r2s, kes)]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {np.mean(r2s):.4f} / {np.mean(kes):.3f} |")
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "split-output.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
