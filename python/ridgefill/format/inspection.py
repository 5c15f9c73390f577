"""`ridgefill inspect`: an augmented GGUF's metadata, map tensors and the loader's checks, as one dict."""

from __future__ import annotations

import os

import numpy as np

from . import validate
from .gguf_io import GGUFError, open_gguf
from .identity import has_maps, model_shape
from .keys import MAP_BIAS, MAP_PREV, MAP_WINDOW, PER_LAYER, PREFIX, ROUTE_WHITEN, WINDOW, is_maps_tensor, layer_of


def inspect(path: str | os.PathLike, base: str | os.PathLike | None = None) -> dict:
    """RidgeFill metadata, map tensors and the loader's checks (validate.py) of an augmented GGUF."""
    reader = open_gguf(path)
    if not has_maps(reader):
        raise GGUFError(f"{path} carries no RidgeFill maps")
    meta = {k[len(PREFIX):]: _plain(reader.fields[k].contents()) for k in reader.fields if k.startswith(PREFIX)}
    tensors = {t.name: t for t in reader.tensors}
    layers, total = [], 0
    for name in sorted((n for n in tensors if n.endswith(".ridge_map.weight") and is_maps_tensor(n)), key=layer_of):
        layer = layer_of(name)
        w, b, p = tensors[name], tensors.get(MAP_BIAS.format(layer)), tensors.get(MAP_PREV.format(layer))
        v = tensors.get(MAP_WINDOW.format(layer))
        nbytes = sum(int(t.n_bytes) for t in (w, b, p, v) if t is not None)
        total += nbytes
        layers.append({
            "layer": layer,
            **{k: _per_layer(meta, k, layer) for k in PER_LAYER},
            "type": w.tensor_type.name,
            "shape": [int(x) for x in w.shape],
            "bias": b is not None,
            "previous_row": p is not None,
            "window": v is not None,
            "bytes": nbytes,
        })
    checks = [c.as_dict() for c in validate.check_file(path, base, reader)]
    split = meta.get("split_layer")
    route = isinstance(split, int) and ROUTE_WHITEN.format(split) in tensors
    proj = tensors.get(WINDOW.format(split)) if isinstance(split, int) else None
    d = model_shape(reader)[2] or 1
    window = None if proj is None else {"rows": int(proj.shape[0]) // d, "rank": int(proj.shape[1])}
    total += 0 if proj is None else int(proj.n_bytes)
    kv_t = [t for t in tensors.values() if ".ridge_kv" in t.name]
    kv = None
    if kv_t and isinstance(split, int):
        own = {r["layer"] for r in layers}  # layers that keep their input maps beside the K/V maps (a hybrid's)
        kv = {"rows": int(kv_t[0].shape[-1]), "previous_row": any("ridge_kv_prev" in t.name for t in kv_t),
              "bytes": sum(int(t.n_bytes) for t in kv_t), "input_map_layers": sorted(own),
              "layers": [{"layer": l, **{k: _per_layer(meta, k, l) for k in ("kv_k_err", "kv_v_err", "k_err")}}
                         for l in range(split + 1, split + 1 + len(meta.get("lambda") or []))]}
        total += kv["bytes"]
    return {"path": str(path), "metadata": meta, "layers": layers, "kv": kv, "map_bytes": total, "route": route,
            "window": window,
            "checks": checks,
            "loads": all(c["ok"] for c in checks if c["name"] in validate.LOADER)}


def _per_layer(meta: dict, name: str, layer: int):
    """The per-layer statistic `name` of `layer` (lists start at split + 1), None where the metadata lacks it."""
    values, split = meta.get(PER_LAYER[name][len(PREFIX):]), meta.get("split_layer")
    if not isinstance(values, list) or not isinstance(split, int) or not 0 <= layer - split - 1 < len(values):
        return None
    value = values[layer - split - 1]
    return None if name.startswith("kv_") and value < 0 else value  # -1: the layer has no K/V map


def _plain(v):
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, np.generic):
        return v.item()
    return v
