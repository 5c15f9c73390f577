"""Windowed maps: does a map that reads a causal window of earlier rows predict the late layers' K/V better
than one that reads its own row, or its row and the previous one, and does that bring needles back?

Inputs of layer l's map at row t (split state x = h_s, exact for every row):
  - row      x_t (the fork's per-row map)
  - lag1     [x_t, x_{t-1}] (the fork's lagged map)
  - win      [x_t, z_t], z_t = Σ_{j=1..W} u_{t-j} P_j: each earlier row projected once onto the top-q principal
             directions of x (u = (x - μ) Q, d × q, shared), the window [u_{t-1} .. u_{t-W}] (rows before 0 are
             zeros) reduced to r columns by P, shared by every late layer. P is the reduced-rank regression
             (closed form) of what the per-row maps miss, every layer's residual scaled to unit mean square, on
             the window; then each layer's map is ridge on [x_t, z_t] with λ chosen on the held-out rows, as
             the fit chooses it. A filled row pays d·q + W·q·r + (L-s-1)·(d+r)·d multiply-adds against
             (L-s-1)·d² for per-row maps.
Rows come from the documents `ridgefill fit` uses (default corpus, its windows, whole documents held out),
held in memory and kept in --cache. Reported per layer, on held-out rows: R² of the layer input, and the
relative error of the keys (after RoPE) and values the layer's own projections make of it (lagged.AttnKV).

Usage: window.py --model GGUF --split 12 --out DIR [--variants row lag1 w16q256r128 ...] [--needles]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lagged-maps"))
from lagged import Overwrite, add_needle_args, attn_kv, prefix_rows, ridge, run_needles  # noqa: E402

from ridgefill.fit import windows as calib_windows  # noqa: E402
from ridgefill.fit.capture import CaptureConfig, assign  # noqa: E402
from ridgefill.sources import corpus  # noqa: E402


# ---- rows -------------------------------------------------------------------------------------------

def capture(model, split: int, tokens: int, threads: int, cache: Path) -> tuple[list[dict], list[dict]]:
    """(train, held-out) windows, each {layer: (n, d) float32} for layers split..L-1, all rows (sinks too)."""
    path = cache / f"rows-s{split}-t{tokens}.npz"
    layers = list(range(split, model.n_layer))
    if not path.exists():
        cfg = CaptureConfig(split=split, tokens=tokens, threads=threads)
        train_docs, held_docs = assign(corpus.default_calibration(), cfg)
        n_held = int(cfg.tokens * cfg.heldout_frac)
        bos = model.bos if model.add_bos else None
        arrays = {}
        for name, docs, budget, seed in (("train", train_docs, cfg.tokens - n_held, cfg.seed),
                                         ("held", held_docs, n_held, cfg.seed + 1)):
            wins = [prefix_rows(model, w.tokens, layers, threads, cfg.n_batch)
                    for w in calib_windows.plan(docs, model.tokenize, bos, cfg.window, budget, cfg.min_piece, seed)
                    if len(w.tokens) >= cfg.sinks + 16]
            arrays[f"{name}_lengths"] = np.array([len(w[split]) for w in wins])
            for il in layers:
                arrays[f"{name}_{il}"] = np.concatenate([w[il] for w in wins]).astype(np.float32)
            print(f"{name}: {len(wins)} windows, {sum(len(w[split]) for w in wins)} rows", flush=True)
        cache.mkdir(parents=True, exist_ok=True)
        np.savez(path, **arrays)
    z = np.load(path)
    out = []
    for name in ("train", "held"):
        cuts = np.cumsum(z[f"{name}_lengths"])[:-1]
        per_layer = {il: np.split(z[f"{name}_{il}"], cuts) for il in layers}
        out.append([{il: per_layer[il][i] for il in layers} for i in range(len(cuts) + 1)])
    return out[0], out[1]


def shifted(u: np.ndarray, window: int, first: int = 1) -> np.ndarray:
    """(n, window·q): row t holds [u_{t-first}, ..., u_{t-first-window+1}], zeros before row 0."""
    n, q = u.shape
    g = np.zeros((n, window * q), dtype=u.dtype)
    for i, j in enumerate(range(first, first + window)):
        g[j:, i * q : (i + 1) * q] = u[: n - j]
    return g


# ---- maps -------------------------------------------------------------------------------------------

# wWqQrR[k]: window of W rows before t; l1wWqQrR[k]: the lagged map's [x_t, x_{t-1}] beside a window of the W rows
# before t-1; k: the window reduced by what the maps miss in each layer's keys (pre-RoPE, K projection of the
# normed input) instead of in its input
VARIANT = re.compile(r"^(row|lag1|(l1)?w(\d+)q(\d+)r(\d+)(k?))$")


@dataclass
class Maps:
    """One variant's maps: per layer (W, b) over the variant's inputs, plus the window's projections."""

    kind: str
    split: int
    maps: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    mu: np.ndarray | None = None  # window: x's mean, principal directions Q (d, q), reduction P (W·q, r)
    q_dirs: np.ndarray | None = None
    p_red: np.ndarray | None = None
    window: int = 0
    after_lag: bool = False  # the window starts at t-2, beside x_{t-1}

    def inputs(self, x: np.ndarray) -> np.ndarray:
        """The map inputs of every row of one sequence of split states x (n, d)."""
        if self.kind == "row":
            return x
        prev = np.vstack([np.zeros_like(x[:1]), x[:-1]])
        if self.kind == "lag1":
            return np.hstack([x, prev])
        if self.after_lag:
            return np.hstack([x, prev, self.reduced(x)])
        return np.hstack([x, self.reduced(x)])

    def reduced(self, x: np.ndarray) -> np.ndarray:
        return shifted((x - self.mu) @ self.q_dirs, self.window, 2 if self.after_lag else 1) @ self.p_red

    def predict(self, x: np.ndarray) -> dict[int, np.ndarray]:
        f = self.inputs(x)
        return {il: f @ w + b for il, (w, b) in self.maps.items()}

    def cost(self, d: int) -> float:
        """Multiply-adds per filled row relative to per-row maps."""
        m = len(self.maps)
        if self.kind == "row":
            return 1.0
        if self.kind == "lag1":
            return 2.0
        q, r = self.q_dirs.shape[1], self.p_red.shape[1]
        return (d * q + self.window * q * r + m * (d * (2 if self.after_lag else 1) + r) * d) / (m * d * d)


def _rows(wins: list[dict], il: int, sinks: int) -> np.ndarray:
    return np.concatenate([w[il][sinks:] for w in wins])


def _inputs(maps: Maps, wins: list[dict], sinks: int) -> np.ndarray:
    return np.concatenate([maps.inputs(w[maps.split])[sinks:] for w in wins])


def fit_window(maps: Maps, train, layers, sinks: int, q: int, r: int, lam: float, base_maps: Maps, kv=None) -> None:
    """μ, Q (top-q principal directions of x) and P (reduced-rank regression of the base maps' residuals,
    each layer scaled to unit mean square, on the window) into `maps`; with `kv`, the residuals of each
    layer's keys (pre-RoPE: the normed input's error through the layer's K projection)."""
    s = maps.split
    x = _rows(train, s, 0)
    maps.mu = x.mean(0)
    xc = (x - maps.mu).astype(np.float64)
    ev, vec = np.linalg.eigh(xc.T @ xc / len(xc))
    maps.q_dirs = vec[:, ::-1][:, :q].astype(np.float32)
    first = 2 if maps.after_lag else 1
    g = np.concatenate([shifted((w[s] - maps.mu) @ maps.q_dirs, maps.window, first)[sinks:] for w in train]).astype(np.float64)
    base_in = _inputs(base_maps, train, sinks)
    resid = []
    for il in layers:
        w, b = base_maps.maps[il]
        y = _rows(train, il, sinks)
        e = y - (base_in @ w + b)
        if kv is not None:
            e = (kv[il].normed(y) - kv[il].normed(y - e)) @ kv[il].wk
        resid.append(e / np.sqrt((e.astype(np.float64) ** 2).sum(1).mean()))
    resid = np.hstack(resid).astype(np.float64)
    gtg = g.T @ g
    gtg[np.diag_indices_from(gtg)] += lam * np.trace(gtg) / len(gtg)
    c = np.linalg.solve(gtg, g.T @ resid)  # (W·q, m·d): the full-rank regression
    chol = np.linalg.cholesky(gtg)
    k = chol.T @ c  # the fitted values' Gram is kᵀk
    sv, e = np.linalg.eigh(k @ k.T)
    top = e[:, ::-1][:, :r] / np.sqrt(np.maximum(sv[::-1][:r], 1e-30))
    maps.p_red = (c @ (k.T @ top)).astype(np.float32)  # C V_r, V_r the top right singular vectors of k


def fit(kind: str, train, held, split: int, n_layer: int, sinks: int, lam: float, base: dict[str, Maps], kv) -> Maps:
    """`base`: the row and lag1 maps already fitted (a window is fitted on their residuals)."""
    m = VARIANT.match(kind)
    if not m:
        raise SystemExit(f"unknown variant {kind!r}: row, lag1, wWqQrR[k] or l1wWqQrR[k] (e.g. w16q256r128)")
    layers = list(range(split + 1, n_layer))
    maps = Maps(kind if m.group(3) is None else "win", split, window=int(m.group(3) or 0), after_lag=bool(m.group(2)))
    if maps.kind == "win":
        fit_window(maps, train, layers, sinks, int(m.group(4)), int(m.group(5)), lam,
                   base["lag1" if maps.after_lag else "row"], kv if m.group(6) else None)
    xtr, xho = _inputs(maps, train, sinks), _inputs(maps, held, sinks)
    for il in layers:
        w, b, _ = ridge(xtr, _rows(train, il, sinks), xho, _rows(held, il, sinks))
        maps.maps[il] = (w.astype(np.float32), b.astype(np.float32))
    return maps


# ---- measures ---------------------------------------------------------------------------------------

def held_out_errors(maps: Maps, held, kv, sinks: int) -> dict[int, dict[str, float]]:
    """Per layer: R² of the layer input, relative K and V error, over the held-out rows past the sinks."""
    acc = {il: np.zeros(6) for il in maps.maps}  # sse, sst parts, k err², k², v err², v²
    ys = {il: _rows(held, il, sinks) for il in maps.maps}
    for w in held:
        pred = maps.predict(w[maps.split])
        pos = np.arange(len(w[maps.split]))[sinks:]
        for il, y_hat in pred.items():
            y, y_hat = w[il][sinks:], y_hat[sinks:]
            k, v = kv[il](y, pos)
            k_hat, v_hat = kv[il](y_hat, pos)
            acc[il] += [((y - y_hat) ** 2).sum(), 0, ((k - k_hat) ** 2).sum(), (k ** 2).sum(),
                        ((v - v_hat) ** 2).sum(), (v ** 2).sum()]
    out = {}
    for il, a in acc.items():
        sst = ((ys[il] - ys[il].mean(0)) ** 2).sum()
        out[il] = {"r2": 1 - a[0] / sst, "k_err": np.sqrt(a[2] / a[3]), "v_err": np.sqrt(a[4] / a[5])}
    return out


def table(results: dict[str, dict], costs: dict[str, float]) -> str:
    kinds = list(results)
    layers = sorted(next(iter(results.values())))
    head = "| layer | " + " | ".join(f"{k}: R² / K err / V err" for k in kinds) + " |"
    lines = [head, "|" + " --- |" * (len(kinds) + 1)]
    for il in layers:
        cells = [f"{results[k][il]['r2']:.4f} / {results[k][il]['k_err']:.3f} / {results[k][il]['v_err']:.3f}"
                 for k in kinds]
        lines.append(f"| {il} | " + " | ".join(cells) + " |")
    mean = lambda k, m: np.mean([results[k][il][m] for il in layers])
    lines.append("| mean | " + " | ".join(f"{mean(k, 'r2'):.4f} / {mean(k, 'k_err'):.3f} / {mean(k, 'v_err'):.3f}"
                                          for k in kinds) + " |")
    lines.append("| map cost per filled row (per-row maps = 1) | " + " | ".join(f"{costs[k]:.2f}" for k in kinds) + " |")
    return "\n".join(lines)


def summary(results: dict[str, dict], costs: dict[str, float], layer: int) -> str:
    """One line per variant: mean R², mean K and V error over the late layers, and one layer's K error."""
    lines = [f"| maps | mean R² | mean key error | mean value error | layer {layer} key error | map cost |",
             "| --- | --- | --- | --- | --- | --- |"]
    for k, r in results.items():
        mean = lambda m: np.mean([v[m] for v in r.values()])
        lines.append(f"| {k} | {mean('r2'):.4f} | {mean('k_err'):.3f} | {mean('v_err'):.3f} | "
                     f"{r[layer]['k_err']:.3f} | {costs[k]:.2f} |")
    return "\n".join(lines)


# ---- needles ----------------------------------------------------------------------------------------

def map_inputs(maps: Maps):
    """Overwrite's inputs: the late layers' inputs as `maps` predict them for the filled rows."""
    return lambda rows, lo, hi: {il: y[lo:hi] for il, y in maps.predict(rows[maps.split][:hi]).items()}


def fit_all(args, train, held, n_layer, kv, results, costs, tag) -> dict[str, Maps]:
    """Fit every variant on `train`, recording its held-out errors and cost under name + tag."""
    fitted: dict[str, Maps] = {}
    for kind in dict.fromkeys(["row", "lag1", *args.variants]):
        maps = fit(kind, train, held, args.split, n_layer, args.sinks, args.lam, fitted, kv)
        fitted[kind] = maps
        if kind in args.variants:
            name = kind + tag
            results[name] = held_out_errors(maps, held, kv, args.sinks)
            costs[name] = maps.cost(train[0][args.split].shape[1])
            print(f"{name}: mean R² {np.mean([r['r2'] for r in results[name].values()]):.4f}, "
                  f"K err {np.mean([r['k_err'] for r in results[name].values()]):.3f}", flush=True)
    return fitted


def add_rows_args(ap) -> None:
    """The model, split and calibration rows (cached, shared by the experiments that read them) and the output."""
    ap.add_argument("--model", required=True)
    ap.add_argument("--split", type=int, required=True)
    ap.add_argument("--tokens", type=int, default=16384, help="calibration tokens (training + held-out)")
    ap.add_argument("--sinks", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cache", type=Path, default=Path.home() / ".cache/ridgefill/experiments/windowed-maps")
    ap.add_argument("--out", type=Path, required=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_rows_args(ap)
    ap.add_argument("--lam", type=float, default=1e-2, help="ridge of the window's reduced-rank regression (× mean eigenvalue)")
    ap.add_argument("--train-windows", type=int, nargs="+", metavar="N",
                    help="also fit on the first N training windows only (a learning curve on the same held-out rows)")
    ap.add_argument("--variants", nargs="+", default=["row", "lag1", "w1q256r128", "w4q256r128", "w16q256r128"])
    ap.add_argument("--needles", nargs="*", metavar="VARIANT",
                    help="run the eval's needle items with these variants' K/V (and pykv-exact, the control)")
    add_needle_args(ap)
    args = ap.parse_args()

    from ridgefill.runtime import Model

    model = Model(args.model)
    train, held = capture(model, args.split, args.tokens, args.threads, args.cache)
    kv = attn_kv(args.model, range(args.split, model.n_layer))
    args.out.mkdir(parents=True, exist_ok=True)
    results, costs = {}, {}
    for n_win in sorted(args.train_windows or [], reverse=True) + [len(train)]:
        fitted = fit_all(args, train[:n_win], held, model.n_layer, kv, results, costs,
                         "" if n_win == len(train) else f"@{n_win}")
    n_rows = sum(len(w[args.split]) - args.sinks for w in train), sum(len(w[args.split]) - args.sinks for w in held)
    report = (f"split {args.split}, {n_rows[0]} training rows ({len(train)} windows; a variant@N is fitted on the "
              f"first N), {n_rows[1]} held-out rows, λ of the window's RRR {args.lam}\n\n"
              + summary(results, costs, min(args.split + 4, model.n_layer - 1)) + "\n\n" + table(results, costs) + "\n")
    (args.out / "heldout.md").write_text(report)
    (args.out / "heldout.json").write_text(json.dumps({k: {str(il): v for il, v in r.items()} for k, r in results.items()},
                                                      indent=1))
    print(report)
    if args.needles is None:
        return
    from ridgefill.evals.session import Variant, register

    register(Variant("pykv-exact", "identity", hook=Overwrite(kv, args.split, args.threads)))
    for kind in args.needles:
        register(Variant(f"pykv-{kind}", "identity", hook=Overwrite(kv, args.split, args.threads, map_inputs(fitted[kind]))))
    del model
    modes = ["pykv-exact", *(f"pykv-{k}" for k in args.needles)]
    sys.exit(run_needles(args, modes, args.out / "needles"))


if __name__ == "__main__":
    main()
