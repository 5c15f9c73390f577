"""Closed-form ridge maps from the split state straight to each late attention layer's K (before RoPE) and V.

Per layer and per target (K, V), ridge from x = h_s(t) (per-row) or [h_s(t), h_s(t-1)] (lagged) with λ chosen on the
held-out rows and the map refitted on all rows, as ridge.py fits input maps (ridge.MapKind; no blend toward the
identity, which has no meaning between the split state and a key). The targets are the layer's own K and V of its
exact input (kv_stats.py), so the fit minimizes the error attention reads rather than the input's.

Which maps read the previous row: the lag is decided per split, as for input maps, but by the error K/V maps are
fitted for: when the previous row cuts some layer's held-out key error by at least `lag_gain`, every layer's K and V
maps read it (the fork computes all filled layers' K/V in one product, and the previous row's in a second). Held-out error alone does not rank
kinds for retrieval: at Qwen2.5-Coder-0.5B split 12 per-row K/V maps have 5 % less key error than per-row input maps
and retrieve 11.5 needle points less, while lagged K/V maps tie the lagged input maps at a quarter of the cost
(experiments/kv-maps). A filled row of layer l costs 2 d d_kv multiply-adds (twice that lagged) against d² + 2 d d_kv
for an input map, its norm and projections.

Which layers: every late attention layer (the capture's K/V targets). A hybrid's late Gated DeltaNet layers keep their
input maps beside them in the same file: what they write (conv and delta-rule state) comes from fused projections
wider than the model, through a convolution and a recurrence, so no linear map of the split state predicts it, and
their input map costs d² against those projections' d · (2 d_k + d_v + 2 H) (format/write.py writes both kinds).
"""

from __future__ import annotations

import copy

import numpy as np

from ..errors import InputError
from ..format.maps import KVFit, KVMaps
from .heldout import heldout_sst
from .ridge import DEFAULT_GRID, DEFAULT_LAG_GAIN, Candidate, Designs, MapKind
from .stats import CalibrationStats


def fit_kv(stats: CalibrationStats, grid=DEFAULT_GRID, lag_gain: float | None = DEFAULT_LAG_GAIN,
           designs: Designs | None = None) -> KVMaps:
    """K/V maps for every late attention layer of statistics captured with K/V targets (CaptureConfig.kv).
    `designs`: x's eigendecompositions when the input maps of the same statistics were fitted (ridge.fit)."""
    if stats.kv is None:
        raise InputError("these statistics hold no K/V sums: capture them with --kv")
    stats.check_finite()
    kv, d = stats.kv, stats.identity.n_embd
    tr, ho = kv.train.with_x(stats.train), kv.heldout.with_x(stats.heldout)
    final = copy.deepcopy(tr)
    final += ho
    designs = designs or Designs()
    row = MapKind(tr, ho, final, d, designs)
    lag = MapKind(tr, ho, final, 2 * d, designs) if lag_gain is not None and tr.d >= 2 * d else None
    fit = lambda kind, j: kind.layer(j, grid, blend=False)
    c_row = [fit(row, j) for j in range(tr.m)]
    c_lag = [fit(lag, j) for j in range(tr.m)] if lag else [None] * tr.m
    err = lambda c, j: None if c is None else float(np.sqrt(max(c.sse_plain, 0.0) / heldout_sst(ho, j)))
    e_row, e_lag = [err(c, j) for j, c in enumerate(c_row)], [err(c, j) for j, c in enumerate(c_lag)]
    keys = range(0, tr.m, 2)
    lagged = lag is not None and any(e_lag[j] <= (1.0 - lag_gain) * e_row[j] for j in keys)
    m, d_kv = len(kv.layers), kv.d_kv
    weights, biases = np.empty((m, 2 * d_kv, d), np.float32), np.empty((m, 2 * d_kv), np.float32)
    prev, fits = np.zeros((m, 2 * d_kv, d), np.float32), []
    for i, il in enumerate(kv.layers):
        k, v = 2 * i, 2 * i + 1
        use_lag = lagged
        kept: list[Candidate] = [c_lag[k], c_lag[v]] if use_lag else [c_row[k], c_row[v]]
        for half, c in enumerate(kept):
            rows = slice(half * d_kv, (half + 1) * d_kv)
            weights[i, rows], biases[i, rows] = c.w[:, :d], c.b
            if use_lag:
                prev[i, rows] = c.w[:, d:]
        fits.append(KVFit(il, use_lag, kept[0].lam_rel, kept[1].lam_rel, e_row[k], e_row[v], e_lag[k], e_lag[v]))
    return KVMaps(list(kv.layers), weights, biases, fits, prev if any(f.lag for f in fits) else None)


def cost(kv: KVMaps, d: int) -> tuple[int, int]:
    """Multiply-adds per filled row and layer (mean over the layers): (K/V maps, input maps with the layer's norm
    and K and V projections, per-row)."""
    d_kv = kv.d_kv
    lagged = sum(f.lag for f in kv.fits) / len(kv.fits)
    return round(2 * d * d_kv * (1 + lagged)), d * d + 2 * d * d_kv


def report(kv: KVMaps, d: int) -> str:
    num = lambda v: "" if v is None else f"{v:.4f}"
    lines = ["K/V maps (straight into each attention layer's K before RoPE and V; held-out relative error, "
             "fitted on training rows)",
             "layer  inputs  λ/scale K  λ/scale V  K err row  K err lagged  V err row  V err lagged",
             "-----  ------  ---------  ---------  ---------  ------------  ---------  ------------"]
    for f in kv.fits:
        lines.append(f"{f.layer:5d}  {'row+lag' if f.lag else 'row':>6}  {f.lam_rel_k:9.1e}  {f.lam_rel_v:9.1e}  "
                     f"{f.k_err_row:9.4f}  {num(f.k_err_lag):>12}  {f.v_err_row:9.4f}  {num(f.v_err_lag):>12}")
    mine, theirs = cost(kv, d)
    lines.append(f"mean K err {np.mean([f.k_err for f in kv.fits]):.4f}, V err {np.mean([f.v_err for f in kv.fits]):.4f}; "
                 f"{mine / 1e6:.2f} M multiply-adds per filled row and layer (input maps, norm and projections: "
                 f"{theirs / 1e6:.2f} M)")
    return "\n".join(lines)
