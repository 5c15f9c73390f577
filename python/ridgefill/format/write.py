"""Augmented GGUF = base GGUF (every key and tensor byte for byte) + ridge maps + metadata.

Uses llama.cpp's own `gguf` package for reading and writing. The output is written to a
temporary file beside OUT and renamed only when complete, so an interrupted write leaves
no partial OUT.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np

from .fetch import sha256_file
from .gguf_io import GGUFError, copy_gguf, field as _field, open_gguf
from .ridge import Maps
from .stats import ModelIdentity, Provenance

FORMAT_VERSION = 1
KEY = "ridgefill.{}"
MAP_WEIGHT = "blk.{}.ridge_map.weight"
MAP_BIAS = "blk.{}.ridge_map.bias"
MAP_PREV = "blk.{}.ridge_map_prev.weight"  # a lagged map's weight on the previous row's split state
ROUTE_MEAN = "blk.{}.ridge_route.mean"
ROUTE_WHITEN = "blk.{}.ridge_route.whiten"
MAP_TYPES = {"f32": np.float32, "f16": np.float16}


class PackError(GGUFError):
    pass


@dataclass(frozen=True)
class Defaults:
    """Runtime defaults recorded in the GGUF; llama-server and the bindings can override them."""

    sink_rows: int = 4
    tail_rows: int = 1024
    route_fraction: float = 0.0  # share of each fill ubatch routed through the full model

    @classmethod
    def stored(cls, sink_rows, tail_rows) -> "Defaults":
        """A GGUF's stored ridgefill.sink_rows/tail_rows (None: not stored; 0 is a value), else these defaults."""
        return cls(cls.sink_rows if sink_rows is None else int(sink_rows),
                   cls.tail_rows if tail_rows is None else int(tail_rows))


def identity_of(path: str | os.PathLike, reader: gguf.GGUFReader | None = None) -> ModelIdentity:
    """Model identity of a GGUF: arch, layer count, width and file sha256."""
    reader = reader or open_gguf(path)
    arch = _field(reader, "general.architecture")
    if arch is None:
        raise PackError(f"{path}: no general.architecture key")
    n_layer = _field(reader, f"{arch}.block_count")
    n_embd = _field(reader, f"{arch}.embedding_length")
    if n_layer is None or n_embd is None:
        raise PackError(f"{path}: missing {arch}.block_count or {arch}.embedding_length")
    return ModelIdentity(arch, int(n_layer), int(n_embd), sha256_file(Path(path)))


def has_maps(reader: gguf.GGUFReader) -> bool:
    return any(t.name.endswith(".ridge_map.weight") for t in reader.tensors) or any(
        k.startswith("ridgefill.") for k in reader.fields)


def pack(base: str | os.PathLike, maps: Maps, identity: ModelIdentity, provenance: Provenance,
         out: str | os.PathLike, map_type: str = "f16", defaults: Defaults = Defaults()) -> Path:
    base, out = Path(base), Path(out)
    if map_type not in MAP_TYPES:
        raise PackError(f"map type must be one of {', '.join(MAP_TYPES)}, not {map_type!r}")
    if out.resolve() == base.resolve() or (out.exists() and out.samefile(base)):
        raise PackError(f"refusing to write the augmented GGUF over its base {base}")
    reader = open_gguf(base)
    if has_maps(reader):
        raise PackError(f"{base} already carries RidgeFill maps; pack from the original model")
    actual = identity_of(base, reader)
    bad = identity.mismatch(actual)
    if bad:
        raise PackError(f"maps were fitted for a different model than {base}: " + "; ".join(bad))
    d = identity.n_embd
    if maps.weights.shape != (len(maps.layers), d, d) or maps.biases.shape != (len(maps.layers), d):
        raise PackError(f"map shapes {maps.weights.shape}/{maps.biases.shape} do not fit n_embd={d}")
    if maps.weights_prev is not None and maps.weights_prev.shape != maps.weights.shape:
        raise PackError(f"previous-row map shape {maps.weights_prev.shape} does not fit n_embd={d}")
    if maps.layers != list(range(maps.split + 1, identity.n_layer)):
        raise PackError(f"maps cover layers {maps.layers}, expected {maps.split + 1}..{identity.n_layer - 1}")

    n_ctx_train = int(_field(reader, f"{identity.arch}.context_length") or 0)
    for name, v in (("sink rows", defaults.sink_rows), ("tail rows", defaults.tail_rows)):
        if not 0 <= v <= n_ctx_train:
            raise PackError(f"default {name} {v} out of range [0, {n_ctx_train}] (the model's context length)")

    extra = []
    for j, layer in enumerate(maps.layers):
        w = maps.weights[j].astype(MAP_TYPES[map_type])  # (d_out, d_in) -> ggml ne = {d_in, d_out}
        extra.append((MAP_WEIGHT.format(layer), np.ascontiguousarray(w)))
        extra.append((MAP_BIAS.format(layer), np.ascontiguousarray(maps.biases[j].astype(np.float32))))
        if maps.prev(j) is not None:
            extra.append((MAP_PREV.format(layer), np.ascontiguousarray(maps.prev(j).astype(MAP_TYPES[map_type]))))
    if maps.route is not None:
        maps.route.check(d)
        extra.append((ROUTE_MEAN.format(maps.split), np.ascontiguousarray(maps.route.mean, np.float32)))
        extra.append((ROUTE_WHITEN.format(maps.split), np.ascontiguousarray(maps.route.whiten, np.float32)))
    if not 0.0 <= defaults.route_fraction <= 1.0:
        raise PackError(f"default route fraction {defaults.route_fraction} out of range [0, 1]")
    if defaults.route_fraction > 0 and maps.route is None:
        raise PackError("a default route fraction needs routing statistics, and these maps have none (refit them)")
    return copy_gguf(reader, out, add_keys=lambda w: _add_metadata(w, maps, identity, provenance, defaults),
                     extra_tensors=extra)


def _add_metadata(writer, maps: Maps, identity: ModelIdentity, provenance: Provenance, defaults: Defaults):
    writer.add_uint32(KEY.format("format_version"), FORMAT_VERSION)
    writer.add_uint32(KEY.format("split_layer"), maps.split)
    writer.add_uint32(KEY.format("sink_rows"), defaults.sink_rows)
    writer.add_uint32(KEY.format("tail_rows"), defaults.tail_rows)
    writer.add_float32(KEY.format("route_fraction"), float(defaults.route_fraction))
    writer.add_array(KEY.format("lambda"), [float(f.lam) for f in maps.fits])
    writer.add_array(KEY.format("heldout_r2"), [float(f.r2_ridge) for f in maps.fits])
    writer.add_array(KEY.format("heldout_r2_identity"), [float(f.r2_identity) for f in maps.fits])
    writer.add_array(KEY.format("identity_blend"), [float(f.blend) for f in maps.fits])
    writer.add_uint64(KEY.format("calib_tokens"), int(provenance.n_tokens))
    writer.add_string(KEY.format("corpus_hash"), provenance.corpus_hash)
    writer.add_string(KEY.format("base_sha256"), identity.base_sha256)


def inspect(path: str | os.PathLike, base: str | os.PathLike | None = None) -> dict:
    """RidgeFill metadata, map tensors and the loader's checks (validate.py) of an augmented GGUF."""
    from . import validate

    reader = open_gguf(path)
    if not has_maps(reader):
        raise PackError(f"{path} carries no RidgeFill maps")
    meta = {k[len("ridgefill."):]: _plain(reader.fields[k].contents()) for k in reader.fields if k.startswith("ridgefill.")}
    tensors = {t.name: t for t in reader.tensors}
    layers, total = [], 0
    for name in sorted((n for n in tensors if n.endswith(".ridge_map.weight")), key=lambda n: int(n.split(".")[1])):
        layer = int(name.split(".")[1])
        w, b, p = tensors[name], tensors.get(MAP_BIAS.format(layer)), tensors.get(MAP_PREV.format(layer))
        nbytes = int(w.n_bytes) + (int(b.n_bytes) if b else 0) + (int(p.n_bytes) if p else 0)
        total += nbytes
        layers.append({
            "layer": layer,
            **{k: _per_layer(meta, k, layer) for k in _STAT_KEYS},
            "type": w.tensor_type.name,
            "shape": [int(x) for x in w.shape],
            "bias": b is not None,
            "previous_row": p is not None,
            "bytes": nbytes,
        })
    checks = [c.as_dict() for c in validate.check_file(path, base, reader)]
    split = meta.get("split_layer")
    route = isinstance(split, int) and ROUTE_WHITEN.format(split) in tensors
    return {"path": str(path), "metadata": meta, "layers": layers, "map_bytes": total, "route": route, "checks": checks,
            "loads": all(c["ok"] for c in checks if c["name"] in validate.LOADER)}


_STAT_KEYS = {"lambda": "lambda", "r2_ridge": "heldout_r2", "r2_identity": "heldout_r2_identity",
              "blend": "identity_blend"}  # inspect's per-layer name: the metadata key (a list from split + 1)


def _per_layer(meta: dict, key: str, layer: int):
    """The per-layer statistic of `layer` (lists start at split + 1), None where the metadata lacks it."""
    values, split = meta.get(_STAT_KEYS[key]), meta.get("split_layer")
    if not isinstance(values, list) or not isinstance(split, int) or not 0 <= layer - split - 1 < len(values):
        return None
    return values[layer - split - 1]


def read_maps(path: str | os.PathLike) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """{layer: (W, b)} as float32 numpy, W in (d_out, d_in) orientation."""
    reader = open_gguf(path)
    tensors = {t.name: t for t in reader.tensors}
    out = {}
    for name, t in tensors.items():
        if name.endswith(".ridge_map.weight"):
            layer = int(name.split(".")[1])
            b = tensors.get(MAP_BIAS.format(layer))
            # the reader gives numpy order: ggml ne = {d_in, d_out} -> shape (d_out, d_in)
            bias = np.asarray(b.data, dtype=np.float32) if b is not None else np.zeros(t.data.shape[0], np.float32)
            out[layer] = (np.asarray(t.data, dtype=np.float32), bias)
    if not out:
        raise PackError(f"{path} carries no RidgeFill maps")
    return out


def n_lagged(path: str | os.PathLike) -> int:
    """How many late layers' maps also read the previous row (0 for a file without maps)."""
    return sum(t.name.endswith(".ridge_map_prev.weight") for t in open_gguf(path).tensors)


def read_prev_maps(path: str | os.PathLike) -> dict[int, np.ndarray]:
    """{layer: W_prev} (float32, (d_out, d_in)) of the layers whose map also reads the previous row."""
    reader = open_gguf(path)
    return {int(t.name.split(".")[1]): np.asarray(t.data, dtype=np.float32)
            for t in reader.tensors if t.name.endswith(".ridge_map_prev.weight")}


def read_route(path: str | os.PathLike):
    """The routing statistics stored on the split layer, or None when the GGUF has none."""
    from .route import RouteStats

    reader = open_gguf(path)
    tensors = {t.name: t for t in reader.tensors}
    split = _field(reader, KEY.format("split_layer"))
    m, w = tensors.get(ROUTE_MEAN.format(split)), tensors.get(ROUTE_WHITEN.format(split))
    if m is None or w is None:
        return None
    return RouteStats(np.asarray(m.data, np.float32), np.asarray(w.data, np.float32))


def _plain(v):
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, np.generic):
        return v.item()
    return v
