"""A map's held-out squared error, from the held-out statistics alone (Moments), in closed form: of the layer's
input, or of what a projection P of it gives (the keys the layer writes, key_space.py)."""

from __future__ import annotations

import numpy as np

from .stats import Moments


def heldout_sse(w: np.ndarray, b: np.ndarray, ho: Moments, j: int, p: np.ndarray | None = None) -> float:
    """Σ‖y − Wx − b‖² over held-out rows, from their statistics alone; with `p`, Σ‖P (y − Wx − b)‖² (needs the
    held-out Σ y yᵀ, Moments.yyt)."""
    if p is not None:
        return _projected_sse(p, w, b, ho, j)
    xty = ho.xty[j]  # Σ x yᵀ, (d_in, d_out)
    sse = ho.yy[j]
    sse -= 2.0 * np.einsum("ij,ji->", w, xty)
    sse -= 2.0 * b @ ho.sum_y[j]
    sse += np.einsum("ij,ij->", w @ ho.xtx, w)
    sse += 2.0 * b @ (w @ ho.sum_x)
    sse += ho.n * (b @ b)
    return float(sse)


def heldout_sst(ho: Moments, j: int, p: np.ndarray | None = None) -> float:
    """Σ‖y − μy‖² (with `p`: Σ‖P (y − μy)‖²) over the held-out rows: the error of predicting every row by the mean."""
    mu = ho.sum_y[j] / ho.n
    if p is None:
        return float(ho.yy[j] - ho.n * (mu @ mu))
    pm = p @ mu
    return float(np.einsum("ij,ij->", p @ ho.yyt[j], p) - ho.n * (pm @ pm))


def _projected_sse(p: np.ndarray, w: np.ndarray, b: np.ndarray, ho: Moments, j: int) -> float:
    a, c = p @ w, p @ b
    sse = np.einsum("ij,ij->", p @ ho.yyt[j], p)
    sse -= 2.0 * np.einsum("ij,ji->", a, ho.xty[j] @ p.T)
    sse -= 2.0 * c @ (p @ ho.sum_y[j])
    sse += np.einsum("ij,ij->", a @ ho.xtx, a)
    sse += 2.0 * c @ (a @ ho.sum_x)
    sse += ho.n * (c @ c)
    return float(sse)


def grid_sse(eig, a: np.ndarray, mu_y: np.ndarray, ho: Moments, j: int, lams) -> np.ndarray:
    """heldout_sse for W(λ) = A diag(1/(Λ+λ)) Vᵀ at every λ, in O(d²) per λ (eigenbasis; `eig` a ridge._Eig)."""
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
    """(α, held-out SSE) minimising the error of I + α(W − I), α b over α in [0, 1] (per-row maps)."""
    eye = np.eye(len(b))
    e0, e1 = heldout_sse(eye, 0 * b, ho, j), heldout_sse(w, b, ho, j)
    eh = heldout_sse((eye + w) / 2, b / 2, ho, j)
    c = 2.0 * (e1 + e0 - 2.0 * eh)  # SSE(α) = e0 + β α + c α², through α = 0, 1/2, 1
    beta = e1 - e0 - c
    alpha = 1.0 if c <= 0 else float(np.clip(-beta / (2.0 * c), 0.0, 1.0))
    candidates = {0.0: e0, 1.0: e1, alpha: e0 + beta * alpha + c * alpha**2}
    alpha = min(candidates, key=candidates.get)
    return alpha, candidates[alpha]
