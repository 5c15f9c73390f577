"""Routing statistics: how far a row's split-layer state lies from the calibration rows.

A routed row of a fill ubatch runs every layer from the split on in full instead of taking the
fill path. The rows picked are those with the highest leverage

    leverage(h) = (h − μ)ᵀ (C + εI)⁻¹ (h − μ) = ‖P (h − μ)‖²,   P = L⁻¹,  L Lᵀ = C + εI

where μ and C are the mean and covariance of the split-layer states in the calibration
statistics, and ε = ROUTE_EPS · tr(C)/d keeps directions the calibration rows never moved in
from dominating. The rows a linear map predicts worst are rare ones (a number in prose, a name
seen once), which lie far from μ in this metric. The GGUF stores μ and P on the split layer
(blk.{s}.ridge_route.mean, blk.{s}.ridge_route.whiten); the fork scores rows in-graph.
"""

from __future__ import annotations

import math
import re

import numpy as np

from ..errors import InputError
from ..format.maps import RouteStats  # noqa: F401  (re-exported: what from_moments makes)
from .stats import Moments

ROUTE_EPS = 1e-3
MODES = ("exact", "identity", "ridge")
_MODE = re.compile(r"^(exact|identity|ridge)(?:@(\d+(?:\.\d+)?)%?)?(?:\^(\d+(?:\.\d+)?)%?)?$")


def parse_mode(name: str) -> tuple[str, float]:
    """A fill mode's name -> (mode, routed share): 'ridge' -> ('ridge', 0), 'ridge@5' or 'ridge@5%'
    -> ('ridge', 0.05); a selection suffix ('ridge^10', selected_share) is allowed. The one vocabulary of
    evals, llama-bench runs and tune."""
    m = _match(name)
    if m.group(2) is None:
        return m.group(1), 0.0
    return m.group(1), _share(name, m.group(2), "routed")


def selected_share(name: str) -> float:
    """The share of the filled rows a mode name's `^Q` selects by the prompt's last rows (Context.set_select):
    'ridge^10' -> 0.10, 'ridge@5^10' -> 0.10, 'ridge' -> 0."""
    m = _match(name)
    return 0.0 if m.group(3) is None else _share(name, m.group(3), "selected")


def _match(name: str) -> re.Match:
    m = _MODE.match(name)
    if m is None or (m.group(1) == "exact" and (m.group(2) or m.group(3)) is not None):
        raise InputError(f"unknown mode {name!r} (one of {', '.join(MODES)}, or identity@P / ridge@P: P % of each "
                         "fill ubatch routed; a suffix ^Q: Q % of the filled rows selected by the prompt's last rows)")
    return m


def _share(name: str, pct: str, what: str) -> float:
    if float(pct) > 100:
        raise InputError(f"mode {name!r}: the {what} share must be a percentage in [0, 100]")
    return float(pct) / 100


def mode_name(mode: str, share: float, select: float = 0.0) -> str:
    """The inverse of parse_mode and selected_share: 'ridge@5' for ('ridge', 0.05), 'ridge' for a share of 0,
    'ridge^10' for a selected share of 0.1."""
    return (mode if share == 0 else f"{mode}@{100 * share:g}") + ("" if select == 0 else f"^{100 * select:g}")


def from_moments(mom: Moments, eps: float = ROUTE_EPS) -> RouteStats:
    """μ and P from the split-layer state's streamed moments (n, Σx, XᵀX)."""
    if mom.n < 2:
        raise InputError(f"need at least 2 calibration rows for routing statistics, have {mom.n}")
    mu = mom.sum_x / mom.n
    cov = mom.xtx / mom.n - np.outer(mu, mu)
    cov = (cov + cov.T) / 2
    d = len(mu)
    reg = cov + eps * max(float(np.trace(cov)) / d, np.finfo(np.float64).tiny) * np.eye(d)
    low = np.linalg.cholesky(reg)
    whiten = np.linalg.solve(low, np.eye(d))  # L⁻¹, lower triangular
    return RouteStats(mu.astype(np.float32), whiten.astype(np.float32))


def leverage(h: np.ndarray, stats: RouteStats) -> np.ndarray:
    """Leverage of each row of h (n, d), in float64: the score the fork computes in-graph."""
    z = (np.asarray(h, np.float64) - stats.mean) @ stats.whiten.astype(np.float64).T
    return np.einsum("ij,ij->i", z, z)


def share_rows(p: float, n_rows: int) -> int:
    """Rows a share p of n_rows takes (routed rows of a fill ubatch, selected rows of a prompt): ceil(p · n_rows)
    with p read as the decimal it was written as, as the fork computes it (llama_rf_share_rows: p a float32, less a
    relative 1e-6 before rounding up, so 0.1 of 340 rows is 34)."""
    return min(n_rows, math.ceil(float(np.float32(p)) * n_rows * (1.0 - 1e-6)))


def n_routed(p: float, n_rows: int) -> int:
    """Rows routed of a fill ubatch of n_rows."""
    return share_rows(p, n_rows)
