"""Window maps: late-layer maps that also read rows t-1..t-w through r columns they all share.

Window statistics (stats.MapInputs with a basis V, d x q) hold x = [h(t), h(t-1), z], z = [Vᵀh(t-1); ..;
Vᵀh(t-W)]. For each width w <= W and rank r a reduced-rank regression picks the projection u = P z_w (P is
r x w·q): z_w and every layer's input are regressed on h(t) (ridge), the residual z̃ is whitened, and P spans
the r directions of z̃ that best predict the layers' residuals together, each layer's scaled by the held-out
error of the map it has without a window, so that every layer counts alike. Each layer's map is then refitted
by ridge on [its inputs, u] (λ on held-out rows), and a layer keeps the window where that lowers its held-out
error. The (w, r) with the lowest held-out error summed over layers (each relative to its own spread) wins;
it is kept when it cuts the sum of the maps without a window by at least `gain`. The fork reads u as one
projection of the stacked split states, P·blockdiag(Vᵀ): r x w·d (rf_window); a filled row pays that product
and one r x d product per window layer.

Everything comes from sums, so sharded and merged window statistics fit the same maps.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import numpy as np

from .defaults import DEFAULT_RANKS, DEFAULT_WINDOW_GAIN
from .heldout import heldout_sst
from ..format.maps import Maps
from .ridge import DEFAULT_GRID, Candidate, MapKind
from .stats import CalibrationStats, Moments
from ..errors import InputError


@dataclass
class WindowReport:
    """What the fit tried: (w, r, held-out score) per candidate; the score without a window; the choice."""

    base_score: float
    tried: list[tuple[int, int, float]] = field(default_factory=list)
    rows: int = 0  # 0: no window kept
    rank: int = 0

    def lines(self) -> list[str]:
        kept = f"rows t-1..t-{self.rows} through {self.rank} columns" if self.rows else "none"
        out = [f"window maps: held-out error summed over layers, relative to each layer's spread "
               f"(without a window {self.base_score:.4f}); kept: {kept}"]
        out += [f"  rows {w:2d}  rank {r:4d}  {s:.4f}  (cut {100 * (1 - s / self.base_score):.1f} %)"
                for w, r, s in self.tried]
        return out


def widths(window: int) -> list[int]:
    """The widths tried: 1, 2, 4, .. up to the statistics' window, and the window itself."""
    out = [w for w in (1, 2, 4, 8, 16) if w < window]
    return out + [window]


def add_window(maps: Maps, stats: CalibrationStats, grid=DEFAULT_GRID, keys: dict[int, np.ndarray] | None = None,
               gain: float = DEFAULT_WINDOW_GAIN, ranks=DEFAULT_RANKS) -> WindowReport:
    """Fit window maps beside `maps` (fitted from the same statistics by ridge.fit) and keep them in `maps`
    where they pay (see the module doc). Returns what was tried."""
    inp = stats.inputs
    if inp.basis is None:
        raise InputError("window maps need window statistics (calibrate or fit with --window)")
    if not (np.isfinite(gain) and 0 <= gain < 1):
        raise InputError(f"the window gain must be a share in [0, 1), not {gain}")
    tr, ho = stats.train, stats.heldout
    final = copy.deepcopy(tr)
    final += ho
    d, q = stats.identity.n_embd, inp.basis.shape[1]
    keys = keys or {}
    sst = np.array([heldout_sst(ho, j) for j in range(tr.m)])
    base_sse = np.array([(1.0 - f.r2_ridge) * s for f, s in zip(maps.fits, sst)])
    report = WindowReport(float((base_sse / sst).sum()))
    best = None  # (score, w, r, candidates, P)
    for w in widths(inp.window):
        ordered = projection(tr, d, w * q, 1.0 / np.sqrt(np.maximum(base_sse, 1e-30)))
        for r in sorted({min(r, w * q) for r in ranks}):
            p = ordered[:r]
            cands = _layer_candidates(maps, tr, ho, final, d, w * q, p, grid, keys, stats.layers)
            score = float((np.minimum([c.sse for c in cands], base_sse) / sst).sum())
            report.tried.append((w, r, score))
            if best is None or score < best[0]:
                best = (score, w, r, cands, p)
    score, w, r, cands, p = best
    if score > (1.0 - gain) * report.base_score:
        return report
    report.rows, report.rank = w, r
    _keep(maps, stats, w, p, cands, base_sse, sst, keys, ho)
    return report


def projection(tr: Moments, d: int, nz: int, scales: np.ndarray) -> np.ndarray:
    """(nz, nz): the reduced-rank regression of the layers' residuals (scaled) on the first nz window
    columns, both with h(t) partialled out (ridge, λ = 1e-4 of the mean variance), strongest direction
    first, so that its first r rows are the rank-r projection P."""
    n = tr.n
    mu = tr.sum_x / n
    cov = lambda a, b: tr.xtx[a, b] / n - np.outer(mu[a], mu[b])
    h, z = slice(0, d), slice(2 * d, 2 * d + nz)
    c_hh = cov(h, h)
    gamma = np.linalg.solve(c_hh + 1e-4 * np.trace(c_hh) / d * np.eye(d), cov(h, z)).T  # (nz, d)
    c_zz = cov(z, z) - gamma @ cov(h, z)
    cross = []
    for j in range(tr.m):
        c_xy = tr.xty[j] / n - np.outer(mu, tr.sum_y[j] / n)
        cross.append(scales[j] * (c_xy[z] - gamma @ c_xy[h]))
    lam, vec = np.linalg.eigh((c_zz + c_zz.T) / 2)
    lam = np.maximum(lam, 0.0) + 1e-6 * max(float(lam.mean()), 1e-30)
    s = (vec / np.sqrt(lam)) @ vec.T  # C_z̃z̃^(-1/2)
    m = s @ np.concatenate(cross, axis=1)
    _, u = np.linalg.eigh(m @ m.T)
    return u[:, ::-1].T @ s


def transformed(mom: Moments, k: int, z0: int, p: np.ndarray) -> Moments:
    """The moments of x' = [x[:k], P x[z0:z0+nz]] (a linear map of the statistics' x)."""
    nz = p.shape[1]
    t = np.zeros((k + p.shape[0], mom.d))
    t[:k, :k] = np.eye(k)
    t[k:, z0:z0 + nz] = p
    out = copy.copy(mom)
    out.sum_x = t @ mom.sum_x
    out.xtx = t @ mom.xtx @ t.T
    out.xty = t @ mom.xty  # matmul, not einsum: einsum does not reach BLAS here (8x slower)
    return out


def _layer_candidates(maps: Maps, tr, ho, final, d: int, nz: int, p: np.ndarray, grid, keys, layers) -> list[Candidate]:
    """Per layer, its map refitted on [h(t), (h(t-1) where lagged), u] with λ chosen on held-out rows."""
    kinds = {}
    out = []
    for j, il in enumerate(layers):
        k = 2 * d if maps.fits[j].lag else d
        if k not in kinds:
            kinds[k] = MapKind(*(transformed(m, k, 2 * d, p) for m in (tr, ho, final)), k + p.shape[0])
        out.append(kinds[k].layer(j, grid, blend=False, keys=keys.get(il)))
    return out


def _keep(maps: Maps, stats: CalibrationStats, w: int, p: np.ndarray, cands: list[Candidate], base_sse, sst, keys, ho):
    """Write the window maps of the layers where they lower the held-out error into `maps`."""
    d, basis = stats.identity.n_embd, stats.inputs.basis
    q, r = basis.shape[1], p.shape[0]
    maps.window = np.concatenate([p[:, i * q:(i + 1) * q] @ basis.T for i in range(w)], axis=1).astype(np.float32)
    maps.weights_window = np.zeros((len(maps.layers), d, r), np.float32)
    if maps.weights_prev is None:
        maps.weights_prev = np.zeros_like(maps.weights)
    for j, (c, f) in enumerate(zip(cands, maps.fits)):
        f.r2_window = 1.0 - c.sse / sst[j]
        pk = keys.get(f.layer)
        if pk is not None and c.key_sse is not None:
            f.k_err_window = float(np.sqrt(max(c.key_sse, 0.0) / heldout_sst(ho, j, pk)))
        if c.sse >= base_sse[j]:
            continue
        k = 2 * d if f.lag else d
        maps.weights[j], maps.biases[j] = c.w[:, :d], c.b
        if f.lag:
            maps.weights_prev[j] = c.w[:, d:k]
        maps.weights_window[j] = c.w[:, k:]
        f.window, f.blend, f.lam, f.lam_rel = True, 1.0, c.lam, c.lam_rel
        f.r2_ridge = f.r2_window
        f.rel_err_ridge = float(np.sqrt(max(c.sse, 0.0) / sst[j]))
    if not any(f.lag for f in maps.fits):
        maps.weights_prev = None
