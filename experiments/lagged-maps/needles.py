"""Lagged maps: does the previous row's split state give the needles back where a per-row map loses them?

A RidgeFill map predicts layer l's input at row t from the split state at row t alone, so what
the layers between the split and l move between rows (a previous-token head writes row t-1 into
row t) is out of its reach. This experiment fits, from the rows `ridgefill fit` sees, per late
layer ridge maps from x_t ("row") and from inputs that add the previous row (features()), prints
their held-out R², and runs the eval's needle items with variants that overwrite the filled rows' K/V in every late
layer, after a fill head (ridge by default), with K/V computed in Python (lagged.AttnKV; within 1-2 % of the fork's,
which quantizes activations for its Q4_1 matmuls) from
  - pykv-exact  the exact layer inputs (the control: should score as exact does),
  - pykv-row    the per-row maps' predictions (should score as the fork's ridge does),
  - pykv-lag    the maps from [x_t, x_{t-1}],
  - pykv-lagv   the maps from [x_t, V_s(t-1)] (the split layer's values of the previous row).
The tail and the answer run the full model in the fork. Items are the eval's, so the scores
pair with the frontier's exact / identity / ridge records of the same items.

Usage: .venv/bin/python experiments/lagged-maps/needles.py --model AUG.gguf --split 16 --out DIR [--modes ...] [--task loss]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from lagged import Overwrite, add_needle_args, attn_kv, calibration_rows, ridge  # noqa: E402

from ridgefill import cli  # noqa: E402
from ridgefill.fit.capture import CaptureConfig  # noqa: E402
from ridgefill.evals.session import Variant, register  # noqa: E402
from ridgefill.runtime import Model  # noqa: E402


def features(kind: str, x: np.ndarray, x_prev: np.ndarray, split_kv) -> np.ndarray:
    """A map's input rows: the split state x_t ("row"), with the previous row's split state ("lag"),
    or with the previous row's split-layer values V_s(t-1) ("lagv": what a previous-token head
    in the split layer moves into row t, and what a fill graph could read from the KV cache)."""
    if kind == "row":
        return x
    if kind == "lag":
        return np.hstack([x, x_prev])
    return np.hstack([x, split_kv.values(x_prev)])


def fit_maps(model, split, tokens, threads, work: Path, kinds, split_kv, force=False) -> dict[str, dict[int, tuple]]:
    """{kind: {layer: (W, b)}}, each kind's maps saved in work/s{split}-{kind}.npz. When one is missing,
    every kind is refitted from one capture (so their held-out R² print side by side)."""
    paths = {k: work / f"s{split}-{k}.npz" for k in kinds}
    if force or not all(p.exists() for p in paths.values()):
        cfg = CaptureConfig(split=split, tokens=tokens, threads=threads)
        layers = list(range(split, model.n_layer))
        (tr, tr_prev), (ho, ho_prev) = calibration_rows(model, cfg, layers)
        print(f"{len(tr[split])} training rows, {len(ho[split])} held-out rows\nlayer  " + "  ".join(f"R² {k}" for k in kinds))
        xs = {k: (features(k, tr[split], tr_prev[split], split_kv), features(k, ho[split], ho_prev[split], split_kv))
              for k in kinds}
        arrays = {k: {} for k in kinds}
        for il in layers[1:]:
            r2 = []
            for k in kinds:
                w, b, r = ridge(xs[k][0], tr[il], xs[k][1], ho[il])
                arrays[k].update({f"w_{il}": w, f"b_{il}": b})
                r2.append(f"{r:6.4f}")
            print(f"{il:5d}  " + "  ".join(r2), flush=True)
        work.mkdir(parents=True, exist_ok=True)
        for k in kinds:
            np.savez(paths[k], **arrays[k])
    maps = {}
    for k in kinds:
        z = np.load(paths[k])
        maps[k] = {il: (z[f"w_{il}"], z[f"b_{il}"]) for il in range(split + 1, model.n_layer)}
    return maps


def map_inputs(source, maps, split_kv, split):
    """Overwrite's inputs: the late layers' inputs as `source`'s maps predict them for the filled rows."""
    def inputs(rows, lo, hi):
        x, x_prev = rows[split][lo:hi], rows[split][lo - 1 : hi - 1]
        feats = features(source, x, x_prev, split_kv)
        return {il: feats @ w + b for il, (w, b) in maps[source].items()}
    return inputs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="GGUF (augmented for a ridge head, see --head)")
    ap.add_argument("--split", type=int, required=True)
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", required=True)
    ap.add_argument("--modes", nargs="+", default=["pykv-exact", "pykv-row", "pykv-lag", "pykv-lagv"])
    ap.add_argument("--fit-only", action="store_true", help="(re)fit the maps and print their held-out R², run no eval")
    ap.add_argument("--head", choices=("ridge", "identity"), default="ridge",
                    help="fill mode of the head the variants overwrite (every late layer's filled K/V is "
                         "overwritten, so either gives the same cache; identity needs no maps in --model)")
    ap.add_argument("--task", choices=("needle", "loss"), default="needle",
                    help="the eval to run: needles, or the distant-token loss (then give exact in --modes too)")
    ap.add_argument("--docs", default="24", help="documents of the loss eval")
    add_needle_args(ap)
    args = ap.parse_args()
    model = Model(args.model)
    kv = attn_kv(args.model, range(args.split, model.n_layer))
    kinds = [m.removeprefix("pykv-") for m in args.modes if m.startswith("pykv-") and m != "pykv-exact"]
    maps = fit_maps(model, args.split, args.tokens, args.threads, Path(args.out) / "fit", kinds, kv[args.split],
                    force=args.fit_only)
    if args.fit_only:
        return
    for source in ("exact", *kinds):
        inputs = None if source == "exact" else map_inputs(source, maps, kv[args.split], args.split)
        register(Variant(f"pykv-{source}", args.head, hook=Overwrite(kv, args.split, args.threads, inputs)))
    del model
    what = ["--needle-tasks", *args.needle_tasks, "--items", args.items] if args.task == "needle" else ["--docs", args.docs]
    sys.exit(cli.main(["eval", args.task, "--model", args.model, "--split", str(args.split), "--sinks", "4",
                       "--tail", "1024", "--lengths", args.lengths, *what, "--modes", *args.modes,
                       "--threads", str(args.threads), "--out", str(Path(args.out) / ("needles" if args.task == "needle" else "loss"))]))


if __name__ == "__main__":
    main()
