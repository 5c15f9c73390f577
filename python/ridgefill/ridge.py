"""Closed-form ridge maps from sufficient statistics.

Per late layer l: min_{W,b} Σ‖y − Wx − b‖² + λ‖W‖²_F on centred covariances.
One eigendecomposition Cxx = VΛVᵀ serves every λ and every layer:
W = Cxyᵀ V diag(1/(Λ+λ)) Vᵀ,  b = μy − Wμx.
λ is chosen per layer on held-out statistics, whose squared error for any (W, b) is a
closed form in those statistics; λ is scaled by tr(Cxx)/d so one grid fits any model.
The final maps are refitted on training + held-out statistics with the chosen λ.

Then each map is blended toward the identity, W_α = I + α(W − I), b_α = α b, with α in
[0, 1] chosen on the held-out statistics (their squared error is a parabola in α): α = 1
keeps the ridge map, α = 0 falls back to the identity for a layer where the held-out rows
say the identity predicts better. Both ends, and the α chosen, are reported per layer.

The same statistics give the split-layer state's routing statistics (route.py), stored beside
the maps so that the fork can route the rows a map handles worst through the full model.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from .route import RouteStats
from .route import from_moments as route_stats
from .stats import CalibrationStats, Moments
from .errors import InputError

DEFAULT_GRID = tuple(10.0 ** e for e in np.arange(-6.0, 1.01, 0.5))


@dataclass
class LayerFit:
    layer: int
    lam: float  # absolute λ
    lam_rel: float  # λ / (tr(Cxx)/d)
    r2_ridge: float  # held-out, map fitted on training statistics only
    r2_identity: float
    rel_err_ridge: float  # sqrt(SSE / Σ‖y − μy‖²) on held-out rows
    rel_err_identity: float
    blend: float = 1.0  # α of W = I + α(W_ridge − I); r2_ridge and rel_err_ridge are the blended map's


@dataclass
class Maps:
    split: int
    layers: list[int]
    weights: np.ndarray  # (m, d_out, d_in), float32, PyTorch Linear orientation
    biases: np.ndarray  # (m, d_out), float32
    fits: list[LayerFit]
    route: RouteStats | None = None  # the split-layer state's routing statistics (None in older files)


class _Eig:
    """Centred covariance of x and its eigendecomposition."""

    def __init__(self, mom: Moments):
        if mom.n < 2:
            raise InputError(f"need at least 2 calibration rows, have {mom.n}")
        self.mu_x = mom.sum_x / mom.n
        cxx = mom.xtx / mom.n - np.outer(self.mu_x, self.mu_x)
        cxx = (cxx + cxx.T) / 2
        self.lam, self.V = np.linalg.eigh(cxx)
        self.lam = np.maximum(self.lam, 0.0)
        self.scale = float(np.trace(cxx)) / len(self.mu_x)

    def a_matrix(self, mom: Moments, j: int) -> tuple[np.ndarray, np.ndarray]:
        """A = Cxyᵀ V (d_out x d) and μy for target j."""
        mu_y = mom.sum_y[j] / mom.n
        cxy = mom.xty[j] / mom.n - np.outer(self.mu_x, mu_y)
        return cxy.T @ self.V, mu_y

    def solve(self, a: np.ndarray, mu_y: np.ndarray, lam: float) -> tuple[np.ndarray, np.ndarray]:
        w = (a / (self.lam + lam)) @ self.V.T
        return w, mu_y - w @ self.mu_x


def heldout_sse(w: np.ndarray, b: np.ndarray, ho: Moments, j: int) -> float:
    """Σ‖y − Wx − b‖² over held-out rows, from their statistics alone."""
    xty = ho.xty[j]  # Σ x yᵀ, (d_in, d_out)
    sse = ho.yy[j]
    sse -= 2.0 * np.einsum("ij,ji->", w, xty)
    sse -= 2.0 * b @ ho.sum_y[j]
    sse += np.einsum("ij,ij->", w @ ho.xtx, w)
    sse += 2.0 * b @ (w @ ho.sum_x)
    sse += ho.n * (b @ b)
    return float(sse)


def heldout_sst(ho: Moments, j: int) -> float:
    mu = ho.sum_y[j] / ho.n
    return float(ho.yy[j] - ho.n * (mu @ mu))


def grid_sse(eig: "_Eig", a: np.ndarray, mu_y: np.ndarray, ho: Moments, j: int, lams) -> np.ndarray:
    """heldout_sse for W(λ) = A diag(1/(Λ+λ)) Vᵀ at every λ, in O(d²) per λ (eigenbasis)."""
    z = eig.V.T @ ho.xtx @ eig.V  # Vᵀ X'ᵀX' V
    g = a.T @ a  # AᵀA
    zg = z * g.T
    h_diag = np.einsum("ik,ki->i", eig.V.T @ ho.xty[j], a)  # diag(Vᵀ X'ᵀY' A)
    vx, vsx = eig.V.T @ eig.mu_x, eig.V.T @ ho.sum_x
    out = np.empty(len(lams))
    for i, lam in enumerate(lams):
        dd = 1.0 / (eig.lam + lam)
        b = mu_y - a @ (dd * vx)
        w_sx = a @ (dd * vsx)
        out[i] = (ho.yy[j] - 2.0 * (dd @ h_diag) - 2.0 * b @ ho.sum_y[j]
                  + dd @ zg @ dd + 2.0 * b @ w_sx + ho.n * (b @ b))
    return out


def best_blend(w: np.ndarray, b: np.ndarray, ho: Moments, j: int) -> tuple[float, float]:
    """(α, held-out SSE) minimising the error of I + α(W − I), α b over α in [0, 1]."""
    eye = np.eye(len(b))
    e0, e1 = heldout_sse(eye, 0 * b, ho, j), heldout_sse(w, b, ho, j)
    eh = heldout_sse((eye + w) / 2, b / 2, ho, j)
    c = 2.0 * (e1 + e0 - 2.0 * eh)  # SSE(α) = e0 + β α + c α², through α = 0, 1/2, 1
    beta = e1 - e0 - c
    alpha = 1.0 if c <= 0 else float(np.clip(-beta / (2.0 * c), 0.0, 1.0))
    candidates = {0.0: e0, 1.0: e1, alpha: e0 + beta * alpha + c * alpha**2}
    alpha = min(candidates, key=candidates.get)
    return alpha, candidates[alpha]


def fit(stats: CalibrationStats, grid=DEFAULT_GRID, refit_all: bool = True, blend: bool = True) -> Maps:
    stats.check_finite()
    if len(grid) == 0 or not all(np.isfinite(g) and g > 0 for g in grid):
        raise InputError(f"the λ grid must be finite numbers > 0, not {list(grid)}")
    tr, ho = stats.train, stats.heldout
    if ho.n < 2:
        raise InputError("held-out statistics are empty: λ cannot be chosen")
    eig = _Eig(tr)
    d = tr.d
    eye = np.eye(d)
    final_eig, final_mom = eig, tr
    if refit_all:
        final_mom = copy.deepcopy(tr)
        final_mom += ho
        final_eig = _Eig(final_mom)

    fits, weights, biases = [], np.empty((tr.m, d, d), np.float32), np.empty((tr.m, d), np.float32)
    for j, layer in enumerate(stats.layers):
        a, mu_y = eig.a_matrix(tr, j)
        sst = heldout_sst(ho, j)
        errs = grid_sse(eig, a, mu_y, ho, j, [g * eig.scale for g in grid])
        best = int(np.argmin(errs))
        sse_id = heldout_sse(eye, np.zeros(d), ho, j)
        alpha, sse = 1.0, errs[best]
        if blend:
            alpha, sse = best_blend(*eig.solve(a, mu_y, grid[best] * eig.scale), ho, j)
        fits.append(LayerFit(
            layer=layer,
            lam=grid[best] * final_eig.scale,
            lam_rel=float(grid[best]),
            r2_ridge=1.0 - sse / sst,
            r2_identity=1.0 - sse_id / sst,
            rel_err_ridge=float(np.sqrt(max(sse, 0.0) / sst)),
            rel_err_identity=float(np.sqrt(max(sse_id, 0.0) / sst)),
            blend=alpha,
        ))
        fa, fmu = final_eig.a_matrix(final_mom, j)
        w, b = final_eig.solve(fa, fmu, grid[best] * final_eig.scale)
        weights[j], biases[j] = eye + alpha * (w - eye), alpha * b
    return Maps(stats.split, list(stats.layers), weights, biases, fits, route=route_stats(final_mom))


def report(maps: Maps) -> str:
    lines = ["layer   λ/scale     α  R² ridge  R² identity  rel.err ridge  rel.err identity",
             "-----  --------  ----  --------  -----------  -------------  ----------------"]
    for f in maps.fits:
        lines.append(f"{f.layer:5d}  {f.lam_rel:8.1e}  {f.blend:4.2f}  {f.r2_ridge:8.4f}  {f.r2_identity:11.4f}  "
                     f"{f.rel_err_ridge:13.4f}  {f.rel_err_identity:16.4f}")
    return "\n".join(lines)


MAPS_FORMAT = "ridgefill-maps/1"


def save_maps(path, maps: Maps, identity, provenance) -> Path:
    """Maps + the model identity and calibration provenance they belong to (npz)."""
    from .files import save_npz

    meta = {"split": maps.split, "layers": maps.layers, "fits": [asdict(f) for f in maps.fits],
            "identity": asdict(identity), "provenance": asdict(provenance)}
    arrays = {"weights": maps.weights, "biases": maps.biases}
    if maps.route is not None:
        arrays.update(route_mean=maps.route.mean, route_whiten=maps.route.whiten)
    return save_npz(path, MAPS_FORMAT, meta, arrays)


def load_maps(path):
    """(maps, identity, provenance) from a file written by save_maps."""
    from .stats import ModelIdentity, Provenance

    from .files import load_npz

    try:
        meta, data = load_npz(path, MAPS_FORMAT)
        route = RouteStats(data["route_mean"], data["route_whiten"]) if "route_mean" in data else None
        maps = Maps(int(meta["split"]), list(meta["layers"]), data["weights"], data["biases"],
                    [LayerFit(**f) for f in meta["fits"]], route=route)
        return maps, ModelIdentity(**meta["identity"]), Provenance(**meta["provenance"])
    except (KeyError, TypeError, ValueError) as err:
        raise InputError(f"cannot read maps from {path}: {err}") from None
