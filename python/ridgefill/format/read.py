"""Reading an augmented GGUF's maps and routing statistics back as numpy arrays."""

from __future__ import annotations

import os

import numpy as np

from .gguf_io import GGUFError, field, open_gguf
from .identity import model_shape
from .keys import MAP_BIAS, ROUTE_MEAN, ROUTE_WHITEN, SPLIT_LAYER, WINDOW, layer_of


def read_maps(path: str | os.PathLike) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """{layer: (W, b)} as float32 numpy, W in (d_out, d_in) orientation."""
    reader = open_gguf(path)
    tensors = {t.name: t for t in reader.tensors}
    out = {}
    for name, t in tensors.items():
        if name.endswith(".ridge_map.weight"):
            b = tensors.get(MAP_BIAS.format(layer_of(name)))
            # the reader gives numpy order: ggml ne = {d_in, d_out} -> shape (d_out, d_in)
            bias = np.asarray(b.data, dtype=np.float32) if b is not None else np.zeros(t.data.shape[0], np.float32)
            out[layer_of(name)] = (np.asarray(t.data, dtype=np.float32), bias)
    if not out:
        raise GGUFError(f"{path} carries no RidgeFill maps")
    return out


def n_lagged(path: str | os.PathLike) -> int:
    """How many late layers' maps also read the previous row (0 for a file without maps)."""
    return sum(t.name.endswith(".ridge_map_prev.weight") for t in open_gguf(path).tensors)


def earlier_row_products(path: str | os.PathLike) -> float:
    """The n_embd x n_embd products a filled row spends on earlier rows (the cost model's `lagged`): one per
    lagged map, and, in those units, a window's W*n_embd x rank projection and each window map's rank x n_embd."""
    reader = open_gguf(path)
    d = model_shape(reader)[2]
    window = WINDOW.format(field(reader, SPLIT_LAYER))
    n = 0.0
    for t in reader.tensors:
        if t.name.endswith(".ridge_map_prev.weight"):
            n += 1
        elif t.name == window or t.name.endswith(".ridge_map_window.weight"):
            n += float(np.prod([int(x) for x in t.shape])) / (d * d)
    return n


def kv_products(path: str | os.PathLike) -> int:
    """Products of the split layer's stacked K/V maps per filled row (the cost model's `kv`): 0 without K/V maps,
    1, or 2 when they also read the previous row."""
    names = [t.name for t in open_gguf(path).tensors]
    return sum(n.endswith(".ridge_kv.weight") or n.endswith(".ridge_kv_prev.weight") for n in names)


def read_prev_maps(path: str | os.PathLike) -> dict[int, np.ndarray]:
    """{layer: W_prev} (float32, (d_out, d_in)) of the layers whose map also reads the previous row."""
    reader = open_gguf(path)
    return {layer_of(t.name): np.asarray(t.data, dtype=np.float32)
            for t in reader.tensors if t.name.endswith(".ridge_map_prev.weight")}


def read_route(path: str | os.PathLike) -> tuple[np.ndarray, np.ndarray] | None:
    """(mean, whiten) of the routing statistics stored on the split layer, or None when the GGUF has none."""
    reader = open_gguf(path)
    tensors = {t.name: t for t in reader.tensors}
    split = field(reader, SPLIT_LAYER)
    m, w = tensors.get(ROUTE_MEAN.format(split)), tensors.get(ROUTE_WHITEN.format(split))
    if m is None or w is None:
        return None
    return np.asarray(m.data, np.float32), np.asarray(w.data, np.float32)


def read_window(path: str | os.PathLike) -> tuple[np.ndarray, dict[int, np.ndarray]] | None:
    """(projection (rank, W*d), {layer: window map (d, rank)}) as float32, or None when the GGUF has no window maps."""
    reader = open_gguf(path)
    tensors = {t.name: t for t in reader.tensors}
    proj = tensors.get(WINDOW.format(field(reader, SPLIT_LAYER)))
    if proj is None:
        return None
    return np.asarray(proj.data, np.float32), {layer_of(n): np.asarray(t.data, np.float32)
                                               for n, t in tensors.items() if n.endswith(".ridge_map_window.weight")}
