"""Writing maps: an augmented GGUF (the base GGUF, every key and tensor byte for byte, + maps + metadata) or a
maps file (the maps and metadata alone, beside an unchanged base).

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

from .maps import Maps, Provenance
from .gguf_io import GGUFError, copy_gguf, field as _field, open_gguf, write_new_gguf
from .identity import ModelIdentity, fingerprints, has_maps, identity_of
from .keys import (ADAPTER_TYPE, BASE_BLOCK_COUNT, BASE_CONTEXT_LENGTH, BASE_EMBEDDING_LENGTH, BASE_LAYOUT_HASH,
                   BASE_VOCAB_SIZE, BASE_WEIGHTS_HASH, BASE_SHA256, CALIB_TOKENS, CORPUS_HASH, FORMAT_VERSION, FORMAT_VERSION_KEY, HELDOUT_R2,
                   HELDOUT_R2_IDENTITY, IDENTITY_BLEND, K_ERR, KV_BIAS, KV_K_ERR, KV_V_ERR, KV_PREV, KV_WEIGHT, LAMBDA, MAP_BIAS, MAP_KINDS, MAP_PREV,
                   MAP_TYPES, MAP_WEIGHT, MAP_WINDOW,
                   MAX_WINDOW, ROUTE_FRACTION, ROUTE_MEAN, ROUTE_WHITEN, SINK_ROWS, SPLIT_LAYER, TAIL_ROWS, WINDOW)


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


def pack(base: str | os.PathLike, maps: Maps, identity: ModelIdentity, provenance: Provenance,
         out: str | os.PathLike, map_type: str = "f16", defaults: Defaults = Defaults(), kind: str = "input") -> Path:
    """The augmented GGUF: every key and tensor of `base`, byte for byte, plus the maps and their metadata.
    `kind`: the per-layer input maps, or ("kv") the split layer's K/V maps in place of the maps of the layers they
    cover (maps.kv.layers; every other late layer keeps its input map: a hybrid's recurrent layers)."""
    reader, extra = _checked(Path(base), maps, identity, Path(out), map_type, defaults, kind)
    return copy_gguf(reader, out, add_keys=lambda w: _add_metadata(w, maps, identity, provenance, defaults),
                     extra_tensors=extra)


def write_maps(base: str | os.PathLike, maps: Maps, identity: ModelIdentity, provenance: Provenance,
               out: str | os.PathLike, map_type: str = "f16", defaults: Defaults = Defaults(), kind: str = "input") -> Path:
    """A maps file: the maps and their metadata alone, in a GGUF of llama.cpp's adapter type (general.type =
    adapter, adapter.type = ridgefill) that records the base they were fitted for; the fork loads it beside an
    unchanged base (--ridgefill-maps, Model(maps=...)) and refuses it beside another model. `kind` as in pack."""
    reader, extra = _checked(Path(base), maps, identity, Path(out), map_type, defaults, kind)

    def add_keys(writer: gguf.GGUFWriter) -> None:
        add_maps_file_header(writer, reader, identity)
        _add_metadata(writer, maps, identity, provenance, defaults)

    return write_new_gguf(out, identity.arch, add_keys, extra)


def _checked(base: Path, maps: Maps, identity: ModelIdentity, out: Path, map_type: str,
             defaults: Defaults, kind: str = "input") -> tuple[gguf.GGUFReader, list[tuple[str, np.ndarray]]]:
    """The base's reader and the maps' tensors, once the maps, the defaults and the base agree."""
    if map_type not in MAP_TYPES:
        raise PackError(f"map type must be one of {', '.join(MAP_TYPES)}, not {map_type!r}")
    if kind not in MAP_KINDS:
        raise PackError(f"maps kind must be one of {', '.join(MAP_KINDS)}, not {kind!r}")
    if kind == "kv":
        _check_kv(maps, identity.n_embd)
    if out.resolve() == base.resolve() or (out.exists() and out.samefile(base)):
        raise PackError(f"refusing to write over its base {base}")
    reader = open_gguf(base)
    if has_maps(reader):
        raise PackError(f"{base} already carries RidgeFill maps; pack from the original model")
    actual = identity_of(base, reader)
    bad = identity.mismatch(actual)
    if bad:
        raise PackError(f"maps were fitted for a different model than {base}: " + "; ".join(bad))
    d = identity.n_embd
    if kind == "input" or set(maps.kv.layers) != set(maps.layers):
        _check_input(maps, d)
    if maps.layers != list(range(maps.split + 1, identity.n_layer)):
        raise PackError(f"maps cover layers {maps.layers}, expected {maps.split + 1}..{identity.n_layer - 1}")

    n_ctx_train = int(_field(reader, f"{identity.arch}.context_length") or 0)
    for name, v in (("sink rows", defaults.sink_rows), ("tail rows", defaults.tail_rows)):
        if not 0 <= v <= n_ctx_train:
            raise PackError(f"default {name} {v} out of range [0, {n_ctx_train}] (the model's context length)")
    if not 0.0 <= defaults.route_fraction <= 1.0:
        raise PackError(f"default route fraction {defaults.route_fraction} out of range [0, 1]")
    if defaults.route_fraction > 0 and maps.route is None:
        raise PackError("a default route fraction needs routing statistics, and these maps have none (refit them)")
    own = set(maps.layers) - (set(maps.kv.layers) if kind == "kv" else set())
    extra = _tensors(maps, map_type, d, own) + (_kv_tensors(maps, map_type) if kind == "kv" else [])
    return reader, extra + _route_tensors(maps, d)


def _check_input(maps: Maps, d: int) -> None:
    if maps.weights.shape != (len(maps.layers), d, d) or maps.biases.shape != (len(maps.layers), d):
        raise PackError(f"map shapes {maps.weights.shape}/{maps.biases.shape} do not fit n_embd={d}")
    if maps.weights_prev is not None and maps.weights_prev.shape != maps.weights.shape:
        raise PackError(f"previous-row map shape {maps.weights_prev.shape} does not fit n_embd={d}")
    _check_window(maps, d)


def _check_kv(maps: Maps, d: int) -> None:
    kv = maps.kv
    if kv is None:
        raise PackError("K/V maps were asked for, and these maps have none (fit them with --kv)")
    if maps.window is not None:
        raise PackError("K/V maps replace the input maps, and window maps are input maps: one kind a file")
    if not kv.layers or kv.layers != sorted(set(kv.layers)) or not set(kv.layers) <= set(maps.layers):
        raise PackError(f"K/V maps cover layers {kv.layers}, expected late layers among {maps.layers}, ascending")
    rows = kv.weights.shape[1]
    if kv.weights.shape != (len(kv.layers), rows, d) or kv.biases.shape != (len(kv.layers), rows):
        raise PackError(f"K/V map shapes {kv.weights.shape}/{kv.biases.shape} do not fit n_embd={d}")
    if kv.weights_prev is not None and kv.weights_prev.shape != kv.weights.shape:
        raise PackError(f"previous-row K/V map shape {kv.weights_prev.shape}, expected {kv.weights.shape}")
    parts = [kv.weights, kv.biases] + ([] if kv.weights_prev is None else [kv.weights_prev])
    if not all(np.isfinite(p).all() for p in parts):
        raise PackError("K/V maps hold a non-finite value")


def _kv_tensors(maps: Maps, map_type: str) -> list[tuple[str, np.ndarray]]:
    """The split layer's K/V maps, every layer's rows stacked in layer order (one product a fill ubatch)."""
    kv, t = maps.kv, MAP_TYPES[map_type]
    stack = lambda a: np.ascontiguousarray(a.reshape(-1, a.shape[-1]).astype(t))
    out = [(KV_WEIGHT.format(maps.split), stack(kv.weights)),
           (KV_BIAS.format(maps.split), np.ascontiguousarray(kv.biases.reshape(-1).astype(np.float32)))]
    if kv.weights_prev is not None:
        out.append((KV_PREV.format(maps.split), stack(kv.weights_prev)))
    return out


def _tensors(maps: Maps, map_type: str, d: int, layers: set[int]) -> list[tuple[str, np.ndarray]]:
    """The input maps of `layers` (and the window projection they read)."""
    extra = []
    for j, layer in enumerate(maps.layers):
        if layer not in layers:
            continue
        w = maps.weights[j].astype(MAP_TYPES[map_type])  # (d_out, d_in) -> ggml ne = {d_in, d_out}
        extra.append((MAP_WEIGHT.format(layer), np.ascontiguousarray(w)))
        extra.append((MAP_BIAS.format(layer), np.ascontiguousarray(maps.biases[j].astype(np.float32))))
        if maps.prev(j) is not None:
            extra.append((MAP_PREV.format(layer), np.ascontiguousarray(maps.prev(j).astype(MAP_TYPES[map_type]))))
        if maps.win(j) is not None:
            extra.append((MAP_WINDOW.format(layer), np.ascontiguousarray(maps.win(j).astype(MAP_TYPES[map_type]))))
    if maps.window is not None:
        extra.append((WINDOW.format(maps.split), np.ascontiguousarray(maps.window.astype(MAP_TYPES[map_type]))))
    return extra


def _route_tensors(maps: Maps, d: int) -> list[tuple[str, np.ndarray]]:
    extra = []
    if maps.route is not None:
        maps.route.check(d)
        extra.append((ROUTE_MEAN.format(maps.split), np.ascontiguousarray(maps.route.mean, np.float32)))
        extra.append((ROUTE_WHITEN.format(maps.split), np.ascontiguousarray(maps.route.whiten, np.float32)))
    return extra


def add_maps_file_header(writer: gguf.GGUFWriter, reader: gguf.GGUFReader, identity: ModelIdentity) -> None:
    """A maps file's type (llama.cpp's adapter convention) and what it records of the model it was fitted for
    (the fork checks each at load)."""
    writer.add_type(gguf.GGUFType.ADAPTER)
    writer.add_string(gguf.Keys.Adapter.TYPE, ADAPTER_TYPE)
    prints = fingerprints(reader)
    tokens = reader.get_field(gguf.Keys.Tokenizer.LIST)
    writer.add_uint32(BASE_BLOCK_COUNT, identity.n_layer)
    writer.add_uint32(BASE_EMBEDDING_LENGTH, identity.n_embd)
    writer.add_uint32(BASE_CONTEXT_LENGTH, int(_field(reader, f"{identity.arch}.context_length") or 0))
    writer.add_uint32(BASE_VOCAB_SIZE, len(tokens.data) if tokens is not None else 0)
    writer.add_string(BASE_WEIGHTS_HASH, prints.weights_hash)
    writer.add_string(BASE_LAYOUT_HASH, prints.layout_hash)


def _check_window(maps: Maps, d: int) -> None:
    """A window projection (rank, W*d), W in [1, MAX_WINDOW], rank in [1, d], read by some layer's (d, rank) map."""
    if maps.window is None:
        if any(f.window for f in maps.fits):
            raise PackError("window maps need the window projection, and these maps have none")
        return
    rank, n_in = maps.window.shape if maps.window.ndim == 2 else (0, 0)
    if not (1 <= rank <= d and n_in % d == 0 and 1 <= n_in // d <= MAX_WINDOW):
        raise PackError(f"window projection shape {maps.window.shape}: expected (rank, W*{d}), W in [1, {MAX_WINDOW}], "
                        f"rank in [1, {d}]")
    if maps.weights_window is None or maps.weights_window.shape != (len(maps.layers), d, rank):
        shape = None if maps.weights_window is None else maps.weights_window.shape
        raise PackError(f"window map shape {shape} does not fit n_embd={d} and rank {rank}")
    if not any(f.window for f in maps.fits):
        raise PackError("a window projection that no layer's map reads")
    if not (np.isfinite(maps.window).all() and np.isfinite(maps.weights_window).all()):
        raise PackError("window maps hold a non-finite value")


def _add_metadata(writer, maps: Maps, identity: ModelIdentity, provenance: Provenance, defaults: Defaults):
    writer.add_uint32(FORMAT_VERSION_KEY, FORMAT_VERSION)
    writer.add_uint32(SPLIT_LAYER, maps.split)
    writer.add_uint32(SINK_ROWS, defaults.sink_rows)
    writer.add_uint32(TAIL_ROWS, defaults.tail_rows)
    writer.add_float32(ROUTE_FRACTION, float(defaults.route_fraction))
    writer.add_array(LAMBDA, [float(f.lam) for f in maps.fits])
    writer.add_array(HELDOUT_R2, [float(f.r2_ridge) for f in maps.fits])
    writer.add_array(HELDOUT_R2_IDENTITY, [float(f.r2_identity) for f in maps.fits])
    writer.add_array(IDENTITY_BLEND, [float(f.blend) for f in maps.fits])
    k_err = [f.k_err_lag if f.lag else f.k_err_row for f in maps.fits]
    if all(e is not None for e in k_err):
        writer.add_array(K_ERR, [float(e) for e in k_err])
    if maps.kv is not None and all(f.k_err is not None and f.v_err is not None for f in maps.kv.fits):
        fits = {f.layer: f for f in maps.kv.fits}  # -1 on a layer without attention, which has no K/V map
        writer.add_array(KV_K_ERR, [float(fits[l].k_err) if l in fits else -1.0 for l in maps.layers])
        writer.add_array(KV_V_ERR, [float(fits[l].v_err) if l in fits else -1.0 for l in maps.layers])
    writer.add_uint64(CALIB_TOKENS, int(provenance.n_tokens))
    writer.add_string(CORPUS_HASH, provenance.corpus_hash)
    writer.add_string(BASE_SHA256, identity.base_sha256)
