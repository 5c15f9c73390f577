"""K/V maps: does a ridge map from the split state straight to each late layer's keys and values predict them
better than the map into the layer's input (then the layer's norm and projections), and does that retrieve?

Issue 54, item 1, measured before it is built. For each late layer l (split+1 .. L-1) and each row t, with the split
state x_t = h_s (exact for every row in a fill) and the layer's own K/V of its exact input y_t,
k_t = W_k norm(y_t) + b_k (before RoPE) and v_t = W_v norm(y_t) + b_v:

  - row      y_t ≈ W x_t + b, then the layer's norm and projections (the fork's per-row maps)
  - lag1     y_t ≈ W [x_t, x_{t-1}] + b, then the same (the fork's lagged maps)
  - kv       k_t ≈ A x_t + a, v_t ≈ B x_t + b: ridge straight into K and V (2 · d · d_kv multiply-adds a layer)
  - kvn      the same from x_t / rms(x_t) (the split state RMS-normalized, no weight)
  - lag1kv   the same from [x_t, x_{t-1}]

λ is chosen per layer and per target (input, K, V) on the held-out rows, as the fit chooses it. Reported per
layer on held-out rows: relative key error (RoPE is a rotation, so before and after RoPE are the same) and
relative value error. `--needles VARIANT ...` then runs the frontier's needle items with each variant's K/V
written into the filled rows (`--control`: also `pykv-exact`, exact K/V written the same way), paired with the
frontier's stores.

Usage: kv.py --model GGUF --split 12 --out DIR [--tokens 16384] [--needles kv lag1kv row]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "lagged-maps"))
sys.path.insert(0, str(HERE.parent / "windowed-maps"))
from lagged import Overwrite, add_needle_args, attn_kv, prompt_rows, ridge, rope_neox, rope_norm, run_needles  # noqa: E402
from window import add_rows_args, capture  # noqa: E402

VARIANTS = ("row", "lag1", "kv", "kvn", "lag1kv")


def features(kind: str, x: np.ndarray) -> np.ndarray:
    """A variant's map inputs for one sequence of split states x (n, d)."""
    if kind == "kvn":
        return x / np.sqrt((x.astype(np.float64) ** 2).mean(1, keepdims=True)).astype(np.float32)
    if kind in ("lag1", "lag1kv"):
        return np.hstack([x, np.vstack([np.zeros_like(x[:1]), x[:-1]])])
    return x


def stacked(wins, kind: str, split: int, sinks: int) -> np.ndarray:
    return np.concatenate([features(kind, w[split])[sinks:] for w in wins])


def targets(wins, il: int, kv, sinks: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(layer inputs, K before RoPE, V) of every row past the sinks."""
    y = np.concatenate([w[il][sinks:] for w in wins])
    hn = kv[il].normed(y)
    return y, (hn @ kv[il].wk + kv[il].bk).astype(np.float32), (hn @ kv[il].wv + kv[il].bv).astype(np.float32)


class KVMaps:
    """One variant's maps, per late layer: into the input (row, lag1) or into K and V (kv, kvn, lag1kv)."""

    def __init__(self, kind: str, split: int, kv):
        self.kind, self.split, self.kv, self.maps = kind, split, kv, {}

    @property
    def direct(self) -> bool:
        return self.kind in ("kv", "kvn", "lag1kv")

    def fit(self, train, held, layers, sinks: int) -> None:
        ftr, fho = stacked(train, self.kind, self.split, sinks), stacked(held, self.kind, self.split, sinks)
        for il in layers:
            (ytr, ktr, vtr), (yho, kho, vho) = targets(train, il, self.kv, sinks), targets(held, il, self.kv, sinks)
            if self.direct:
                self.maps[il] = (ridge(ftr, ktr, fho, kho)[:2], ridge(ftr, vtr, fho, vho)[:2])
            else:
                self.maps[il] = ridge(ftr, ytr, fho, yho)[:2]

    def kv_pre_rope(self, x: np.ndarray, il: int) -> tuple[np.ndarray, np.ndarray]:
        """(K before RoPE, V) of every row of one sequence of split states x."""
        f = features(self.kind, x)
        if self.direct:
            (wk, bk), (wv, bv) = self.maps[il]
            return f @ wk + bk, f @ wv + bv
        w, b = self.maps[il]
        hn = self.kv[il].normed(f @ w + b)
        return hn @ self.kv[il].wk + self.kv[il].bk, hn @ self.kv[il].wv + self.kv[il].bv

    def cost(self, d: int, d_kv: int) -> int:
        """Multiply-adds per filled row and layer (the map, and for input maps the norm's and projections')."""
        d_in = 2 * d if self.kind.startswith("lag1") else d
        return 2 * d_in * d_kv if self.direct else d_in * d + 2 * d * d_kv


def held_out_errors(maps: KVMaps, held, layers, sinks: int) -> dict[int, dict[str, float]]:
    out = {}
    for il in layers:
        acc = np.zeros(4)
        for w in held:
            _, k, v = targets([w], il, maps.kv, sinks)
            k_hat, v_hat = maps.kv_pre_rope(w[maps.split], il)
            k_hat, v_hat = k_hat[sinks:], v_hat[sinks:]
            acc += [((k - k_hat) ** 2).sum(), (k ** 2).sum(), ((v - v_hat) ** 2).sum(), (v ** 2).sum()]
        out[il] = {"k_err": float(np.sqrt(acc[0] / acc[1])), "v_err": float(np.sqrt(acc[2] / acc[3]))}
    return out


def report(results: dict[str, dict], costs: dict[str, int], layer: int, header: str) -> str:
    kinds, layers = list(results), sorted(next(iter(results.values())))
    mean = lambda k, m: np.mean([results[k][il][m] for il in layers])
    lines = [header, "", f"| maps | mean key error | mean value error | layer {layer} key error | multiply-adds per filled "
                          "row and layer |", "| --- | --- | --- | --- | --- |"]
    lines += [f"| {k} | {mean(k, 'k_err'):.3f} | {mean(k, 'v_err'):.3f} | {results[k][layer]['k_err']:.3f} | "
              f"{costs[k] / 1e6:.2f} M |" for k in kinds]
    lines += ["", "| layer | " + " | ".join(f"{k}: K / V err" for k in kinds) + " |", "|" + " --- |" * (len(kinds) + 1)]
    lines += [f"| {il} | " + " | ".join(f"{results[k][il]['k_err']:.3f} / {results[k][il]['v_err']:.3f}" for k in kinds)
              + " |" for il in layers]
    return "\n".join(lines) + "\n"


class KVOverwrite(Overwrite):
    """An eval hook: the filled rows' K/V in every late layer, as a variant predicts them from the prompt's exact
    split states (RoPE applied at the rows' positions)."""

    def __init__(self, maps: KVMaps, threads: int):
        super().__init__(maps.kv, maps.split, threads)
        self.maps_ = maps

    def __call__(self, head) -> None:
        lo, hi = head.fill_range
        if hi <= lo:
            return
        s = self.maps_.split
        x = prompt_rows(head.ctx.model, head.tokens[:hi], [s], self.threads)[s][:hi]
        pos = np.arange(lo, hi)
        for il in self.maps_.maps:
            k, v = self.maps_.kv_pre_rope(x, il)
            k = k[lo:hi].reshape(hi - lo, -1, self.kv[il].head_dim)
            k = (rope_neox if self.kv[il].neox else rope_norm)(k, pos, self.kv[il].freq_base).reshape(hi - lo, -1)
            head.ctx.state_set(il, "k", k.astype(np.float32), lo, hi, head.seq_id)
            head.ctx.state_set(il, "v", v[lo:hi].astype(np.float32), lo, hi, head.seq_id)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_rows_args(ap)
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    ap.add_argument("--needles", nargs="*", metavar="VARIANT", choices=VARIANTS,
                    help="run the frontier's needle items with these variants' K/V")
    ap.add_argument("--control", action="store_true", help="with --needles, also pykv-exact (exact K/V written the same way)")
    add_needle_args(ap)
    args = ap.parse_args()

    from ridgefill.runtime import Model

    model = Model(args.model)
    train, held = capture(model, args.split, args.tokens, args.threads, args.cache)
    layers = list(range(args.split + 1, model.n_layer))
    kv = attn_kv(args.model, layers)
    d, d_kv = train[0][args.split].shape[1], kv[layers[0]].wk.shape[1]
    fitted, results, costs = {}, {}, {}
    for kind in dict.fromkeys([*args.variants, *(args.needles or [])]):
        fitted[kind] = KVMaps(kind, args.split, kv)
        fitted[kind].fit(train, held, layers, args.sinks)
        results[kind], costs[kind] = held_out_errors(fitted[kind], held, layers, args.sinks), fitted[kind].cost(d, d_kv)
        print(f"{kind}: mean K err {np.mean([r['k_err'] for r in results[kind].values()]):.3f}", flush=True)
    n_rows = [sum(len(w[args.split]) - args.sinks for w in ws) for ws in (train, held)]
    args.out.mkdir(parents=True, exist_ok=True)
    text = report(results, costs, min(args.split + 4, model.n_layer - 1),
                  f"split {args.split}, {n_rows[0]} training rows, {n_rows[1]} held-out rows ({args.tokens} calibration "
                  f"tokens); d {d}, K/V width {d_kv}")
    (args.out / "heldout.md").write_text(text)
    (args.out / "heldout.json").write_text(json.dumps({k: {str(il): v for il, v in r.items()} for k, r in results.items()},
                                                      indent=1))
    print(text)
    if not args.needles:
        return
    from ridgefill.evals.session import Variant, register

    if args.control:
        register(Variant("pykv-exact", "identity", hook=Overwrite(kv, args.split, args.threads)))
    for kind in args.needles:
        register(Variant(f"pykv-{kind}", "identity", hook=KVOverwrite(fitted[kind], args.threads)))
    del model
    modes = ["pykv-exact"] * args.control + [f"pykv-{k}" for k in args.needles]
    sys.exit(run_needles(args, modes, args.out / "needles"))


if __name__ == "__main__":
    main()
