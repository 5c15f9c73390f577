"""Closed-form ridge maps from sufficient statistics.

Per late layer l: min_{W,b} Σ‖y − Wx − b‖² + λ‖W‖²_F on centred covariances.
One eigendecomposition Cxx = VΛVᵀ serves every λ and every layer:
W = Cxyᵀ V diag(1/(Λ+λ)) Vᵀ,  b = μy − Wμx.
λ is chosen per layer on held-out statistics, whose squared error for any (W, b) is a
closed form in those statistics; λ is scaled by tr(Cxx)/d so one grid fits any model.
The final maps are refitted on training + held-out statistics with the chosen λ.

A map's input x is the row's split state h_s(t), or [h_s(t), h_s(t-1)] with the previous
row's (a lagged map): a head between the split layer and layer l that moves the previous
row's information into row t (a previous-token head) is invisible to a per-row map. Both
are fitted from the same statistics (the per-row map from their first d columns). A split
gets lagged maps when the previous row cuts some layer's held-out input error by at least
DEFAULT_LAG_GAIN; then every layer whose held-out input error it lowers at all reads it. The
error of the keys each layer writes (key_space.py) is measured and reported beside it, and
decides too with `lag_keys`: at Qwen2.5-Coder-0.5B split 12 the previous row cuts layer 16's key
error by 44 % and its input error by 4 %, and the lagged maps give back 13.5 needle points; but
at SmolLM2 splits 17-19 it cuts some layer's key error by 27-43 % and the lagged maps retrieve
what the per-row maps do (experiments/key-lag), so by default the keys do not decide. The decision
is per split because what a previous-token head moves into the residual stream reaches every
later layer, and there held-out gains of a few per cent still decide retrieval
(bench/results/lag-fork-smollm2.md). Lagged maps keep α = 1 (no blend, below): the identity
drops the previous row, and blending toward it undid the retrieval the lag restores.

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

from .heldout import best_blend, grid_sse, heldout_sse, heldout_sst
from ..format.maps import KVFit, KVMaps, LayerFit, Maps
from .route import RouteStats
from .route import from_moments as route_stats
from .stats import CalibrationStats, Moments
from ..errors import InputError

DEFAULT_GRID = tuple(10.0 ** e for e in np.arange(-6.0, 1.01, 0.5))
DEFAULT_LAG_GAIN = 0.1


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


class Designs:
    """The eigendecompositions of one capture's x (its training rows; its training and held-out rows together),
    by input width: the maps fitted from one capture (input maps, K/V maps) solve against the same ones."""

    def __init__(self):
        self._eig: dict[tuple[str, int], _Eig] = {}

    def eig(self, rows: str, mom: Moments) -> _Eig:
        if (rows, mom.d) not in self._eig:
            self._eig[rows, mom.d] = _Eig(mom)
        return self._eig[rows, mom.d]


@dataclass
class Candidate:
    """One kind of map (per-row or lagged) for one layer: λ chosen, blended, refitted."""

    lam_rel: float
    lam: float
    alpha: float
    sse: float  # held-out, of the blended map fitted on training statistics
    sse_plain: float  # held-out, of the same map before the blend
    w: np.ndarray  # (d, d_in) final map
    b: np.ndarray
    key_sse: float | None = None  # held-out key error (key_space.py) of the map before the blend, fitted on training statistics


class MapKind:
    """A map input (the first d_in columns of the statistics' x) with its eigendecompositions."""

    def __init__(self, tr: Moments, ho: Moments, final: Moments | None, d_in: int, designs: Designs | None = None):
        designs = designs or Designs()
        self.tr, self.ho = tr.head(d_in), ho.head(d_in)
        self.final = self.tr if final is None else final.head(d_in)
        self.eig = designs.eig("train", self.tr)
        self.final_eig = self.eig if final is None else designs.eig("final", self.final)

    def layer(self, j: int, grid, blend: bool, keys: np.ndarray | None = None) -> Candidate:
        """`keys`: the layer's key projection P (key_space.py), to measure the held-out key error too."""
        eig = self.eig
        a, mu_y = eig.a_matrix(self.tr, j)
        errs = grid_sse(eig, a, mu_y, self.ho, j, [g * eig.scale for g in grid])
        best = int(np.argmin(errs))
        alpha, sse = 1.0, float(errs[best])
        w_tr, b_tr = eig.solve(a, mu_y, grid[best] * eig.scale)
        if blend:
            alpha, sse = best_blend(w_tr, b_tr, self.ho, j)
        key_sse = None if keys is None or self.ho.yyt is None else heldout_sse(w_tr, b_tr, self.ho, j, keys)
        fa, fmu = self.final_eig.a_matrix(self.final, j)
        w, b = self.final_eig.solve(fa, fmu, grid[best] * self.final_eig.scale)
        eye = np.eye(*w.shape)
        return Candidate(float(grid[best]), grid[best] * self.final_eig.scale, alpha, sse, float(errs[best]),
                          eye + alpha * (w - eye), alpha * b, key_sse)


def _lag_pays(c_row: Candidate, c_lag: Candidate, gain: float, keys: bool) -> bool:
    """The previous row cuts the layer's held-out input error (with `keys`, or its key error) by at least
    `gain` (blend aside: the lagged map against the per-row ridge map, both at their own λ)."""
    if c_lag.sse <= (1.0 - gain) * c_row.sse_plain:
        return True
    return (keys and c_row.key_sse is not None and c_lag.key_sse is not None
            and c_lag.key_sse <= (1.0 - gain) * c_row.key_sse)


def fit(stats: CalibrationStats, grid=DEFAULT_GRID, refit_all: bool = True, blend: bool = True,
        lag_gain: float | None = DEFAULT_LAG_GAIN, keys: dict[int, np.ndarray] | None = None,
        lag_keys: bool = False, designs: Designs | None = None) -> Maps:
    """Maps for every late layer. When the previous row's split state cuts some layer's held-out input
    error (with `lag_keys`, or its key error) by at least `lag_gain` (a share; None: never), the split
    skipped a layer that moves the previous row into each row, and every layer whose held-out input error
    the previous row lowers at all gets a lagged map (one more d x d product per filled row); otherwise
    every map reads its own row only. `keys`: layer -> its key projection (key_space.projections), whose
    held-out key errors each LayerFit reports. `designs`: x's eigendecompositions, shared with other fits of
    the same statistics (K/V maps)."""
    stats.check_finite()
    if len(grid) == 0 or not all(np.isfinite(g) and g > 0 for g in grid):
        raise InputError(f"the λ grid must be finite numbers > 0, not {list(grid)}")
    if lag_gain is not None and not (np.isfinite(lag_gain) and 0 <= lag_gain < 1):
        raise InputError(f"the lag gain must be a share in [0, 1), not {lag_gain}")
    tr, ho = stats.train, stats.heldout
    if ho.n < 2:
        raise InputError("held-out statistics are empty: λ cannot be chosen")
    d = tr.d_out
    final = None
    if refit_all:
        final = copy.deepcopy(tr)
        final += ho
    designs = designs or Designs()
    row = MapKind(tr, ho, final, d, designs)
    lag = MapKind(tr, ho, final, 2 * d, designs) if lag_gain is not None and tr.d >= 2 * d else None

    fits, weights, biases = [], np.empty((tr.m, d, d), np.float32), np.empty((tr.m, d), np.float32)
    weights_prev = np.zeros((tr.m, d, d), np.float32)
    keys = keys or {}
    c_rows = [row.layer(j, grid, blend, keys.get(il)) for j, il in enumerate(stats.layers)]
    # lagged maps are not blended toward the identity: it is the predictor that drops the previous row,
    # and blending toward it (α 0.82-0.88 at SmolLM2 split 16) gave back most of the retrieval the lag bought
    c_lags = [lag.layer(j, grid, blend=False, keys=keys.get(il)) if lag else None for j, il in enumerate(stats.layers)]
    lagged = lag is not None and any(_lag_pays(cr, cl, lag_gain, lag_keys) for cr, cl in zip(c_rows, c_lags))
    for j, layer in enumerate(stats.layers):
        sst = heldout_sst(ho, j)
        c_row, c_lag = c_rows[j], c_lags[j]
        use_lag = lagged and c_lag.sse < c_row.sse_plain
        c = c_lag if use_lag else c_row
        sse_id = heldout_sse(np.eye(d), np.zeros(d), row.ho, j)
        k_err = _key_errors(keys.get(layer), row.ho, j, c_row, c_lag)
        fits.append(LayerFit(
            layer=layer,
            lam=c.lam,
            lam_rel=c.lam_rel,
            r2_ridge=1.0 - c.sse / sst,
            r2_identity=1.0 - sse_id / sst,
            rel_err_ridge=float(np.sqrt(max(c.sse, 0.0) / sst)),
            rel_err_identity=float(np.sqrt(max(sse_id, 0.0) / sst)),
            blend=c.alpha,
            lag=use_lag,
            r2_row=1.0 - c_row.sse_plain / sst,
            r2_lag=None if c_lag is None else 1.0 - c_lag.sse / sst,
            k_err_row=k_err[0],
            k_err_lag=k_err[1],
        ))
        weights[j], biases[j] = c.w[:, :d], c.b
        if use_lag:
            weights_prev[j] = c.w[:, d:]
    route = route_stats(row.final)
    return Maps(stats.split, list(stats.layers), weights, biases, fits, route=route,
                weights_prev=weights_prev if any(f.lag for f in fits) else None)


def _key_errors(p, ho: Moments, j: int, c_row: Candidate, c_lag: Candidate | None):
    """(per-row, lagged) held-out relative key errors, None where not measured."""
    if p is None or c_row.key_sse is None:
        return None, None
    sst = heldout_sst(ho, j, p)
    rel = lambda sse: float(np.sqrt(max(sse, 0.0) / sst)) if sst > 0 else None
    return rel(c_row.key_sse), None if c_lag is None or c_lag.key_sse is None else rel(c_lag.key_sse)


def report(maps: Maps) -> str:
    lines = ["layer        input   λ/scale     α  R² ridge  R² identity  rel.err ridge  rel.err identity  R² row α=1"
             "  R² lagged  K err row  K err lagged  R² window  K err window",
             "-----  -----------  --------  ----  --------  -----------  -------------  ----------------  ----------"
             "  ---------  ---------  ------------  ---------  ------------"]
    num = lambda v: "" if v is None else f"{v:.4f}"
    for f in maps.fits:
        inputs = "+".join(["row"] + ["lag"] * f.lag + ["win"] * f.window)
        lines.append(f"{f.layer:5d}  {inputs:>11}  {f.lam_rel:8.1e}  {f.blend:4.2f}  {f.r2_ridge:8.4f}  "
                     f"{f.r2_identity:11.4f}  {f.rel_err_ridge:13.4f}  {f.rel_err_identity:16.4f}  "
                     f"{num(f.r2_row):>10}  {num(f.r2_lag):>9}  {num(f.k_err_row):>9}  {num(f.k_err_lag):>12}  "
                     f"{num(f.r2_window):>9}  {num(f.k_err_window):>12}")
    return "\n".join(lines)


MAPS_FORMAT = "ridgefill-maps/1"


def save_maps(path, maps: Maps, identity, provenance) -> Path:
    """Maps + the model identity and calibration provenance they belong to (npz)."""
    from ..files import save_npz

    meta = {"split": maps.split, "layers": maps.layers, "fits": [asdict(f) for f in maps.fits],
            "identity": asdict(identity), "provenance": asdict(provenance)}
    arrays = {"weights": maps.weights, "biases": maps.biases}
    if maps.weights_prev is not None:
        arrays["weights_prev"] = maps.weights_prev
    if maps.route is not None:
        arrays.update(route_mean=maps.route.mean, route_whiten=maps.route.whiten)
    if maps.window is not None:
        arrays.update(window=maps.window, weights_window=maps.weights_window)
    if maps.kv is not None:
        meta["kv_fits"] = [asdict(f) for f in maps.kv.fits]
        arrays.update(kv_weights=maps.kv.weights, kv_biases=maps.kv.biases)
        if maps.kv.weights_prev is not None:
            arrays["kv_weights_prev"] = maps.kv.weights_prev
    return save_npz(path, MAPS_FORMAT, meta, arrays)


def load_maps(path):
    """(maps, identity, provenance) from a file written by save_maps."""
    from ..format.identity import ModelIdentity
    from .stats import Provenance

    from ..files import load_npz

    try:
        meta, data = load_npz(path, MAPS_FORMAT)
        route = RouteStats(data["route_mean"], data["route_whiten"]) if "route_mean" in data else None
        maps = Maps(int(meta["split"]), list(meta["layers"]), data["weights"], data["biases"],
                    [LayerFit(**f) for f in meta["fits"]], route=route, weights_prev=data.get("weights_prev"),
                    window=data.get("window"), weights_window=data.get("weights_window"))
        if "kv_fits" in meta:
            fits = [KVFit(**f) for f in meta["kv_fits"]]
            maps.kv = KVMaps([f.layer for f in fits], data["kv_weights"], data["kv_biases"], fits,
                             data.get("kv_weights_prev"))
        return maps, ModelIdentity(**meta["identity"]), Provenance(**meta["provenance"])
    except (KeyError, TypeError, ValueError) as err:
        raise InputError(f"cannot read maps from {path}: {err}") from None
