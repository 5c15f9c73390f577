"""A map's held-out error as the keys its layer writes from it.

A late layer l writes its cache from k = W_k (g ⊙ y / rms(y)) + b_k, then RoPE. The fit chooses λ by the
error of the layer input y, but retrieval reads the keys: a previous-token head that writes the previous row
into a few directions can cut a layer's key error by a quarter while its input error moves 4 %
(experiments/windowed-maps). The key error of a map (W, b) is measured here as Σ‖P (y − W x − b)‖² with
P = W_k diag(g): RoPE rotates a key and its error alike (norms kept), the bias cancels, and rms(y) is taken as
one scale for every row, which the ratios the fit compares cancel, so this is the key error up to the per-row
weighting of the RMS norm (and, where a model has them, of per-head key norms). From the held-out statistics
alone (heldout.py, with P): it needs their Σ y yᵀ (stats.Moments.yyt).
"""

from __future__ import annotations

import os

import numpy as np


def projections(base: str | os.PathLike, layers: list[int]) -> dict[int, np.ndarray]:
    """P_l = W_k diag(g) (float64, (n_embd_k, n_embd)) of each layer that has an attention key projection
    and its input norm; layers without one (recurrent layers of a hybrid) are left out."""
    from ..format.gguf_io import open_gguf, tensor_array

    reader = open_gguf(base)
    names = {t.name for t in reader.tensors}
    out = {}
    for il in layers:
        k, g = f"blk.{il}.attn_k.weight", f"blk.{il}.attn_norm.weight"
        if k in names and g in names:
            out[il] = tensor_array(reader, k).astype(np.float64) * tensor_array(reader, g).astype(np.float64)[None, :]
    return out
