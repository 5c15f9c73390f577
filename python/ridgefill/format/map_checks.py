"""The checks of an augmented GGUF's or maps file's RidgeFill tensors, as the fork's loader makes them: the
per-layer input maps, the split layer's K/V maps (and the layers they cover), window maps and routing statistics.
validate.py runs them beside the metadata checks."""

from __future__ import annotations

from dataclasses import dataclass

import gguf
import numpy as np

from .gguf_io import field
from .keys import (KV_BIAS, KV_PREV, KV_WEIGHT, MAP_BIAS, MAP_PREV, MAP_SUFFIXES, MAP_WEIGHT, MAP_WEIGHT_TYPES,
                   MAX_LAYERS, MAX_WINDOW, ROUTE_FRACTION, ROUTE_MEAN, ROUTE_WHITEN, SPLIT_LAYER, WINDOW)


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    message: str

    def as_dict(self) -> dict:
        return {"name": self.name, "ok": self.ok, "message": self.message}


def check_maps(reader, split: int | None, n_layer: int, n_embd: int, shape=None) -> Check:
    """`shape`: the reader whose keys and tensors give the model's layers (a maps file's base; default `reader`)."""
    tensors = {t.name: t for t in reader.tensors
               if any(f".ridge_map{k}." in t.name for k in ("", "_prev", "_window"))}
    if split is None:
        return Check("maps", False, f"maps not checked: no valid {SPLIT_LAYER}")
    if n_layer > MAX_LAYERS:
        return Check("maps", False, f"maps not checked: {n_layer} layers, more than llama.cpp loads ({MAX_LAYERS})")
    kv = {t.name: t for t in reader.tensors if ".ridge_kv" in t.name}
    if kv:
        return _kv_maps(reader, shape or reader, kv, tensors, split, n_layer, n_embd)
    return _input_maps(tensors, split, n_layer, n_embd, list(range(split + 1, n_layer)))


def _input_maps(tensors: dict, split: int, n_layer: int, n_embd: int, layers: list[int]) -> Check:
    """The per-layer input maps of `layers` (every other late layer must carry none)."""
    for name in sorted(tensors):
        blk, layer, rest = (name.split(".", 2) + ["", ""])[:3]
        if blk != "blk" or not layer.isdigit() or rest not in MAP_SUFFIXES:
            return Check("maps", False, f"{name}: not a RidgeFill map tensor")
        if not split < int(layer) < n_layer:
            return Check("maps", False, f"{name}: map for a layer outside ({split}, {n_layer})")
        if int(layer) not in layers:
            return Check("maps", False, f"{name}: a map of a layer the split layer's K/V maps cover, without its weight")
    n_prev = 0
    for layer in layers:
        prev = tensors.get(MAP_PREV.format(layer))
        bad = (_map_problem(tensors.get(MAP_WEIGHT.format(layer)), tensors.get(MAP_BIAS.format(layer)), layer, n_embd)
               or (prev is not None and _weight_problem(prev, n_embd)))
        if bad:
            return Check("maps", False, bad)
        n_prev += prev is not None
    return Check("maps", True, f"{len(layers)} maps ({n_prev} also reading the previous row), "
                               f"f32/f16 {n_embd}x{n_embd}, finite")


def _kv_maps(reader, shape, kv: dict, per_layer: dict, split: int, n_layer: int, n_embd: int) -> Check:
    """K/V maps (patch "model, graph : RidgeFill K/V maps"): on the split layer only, {d, rows} f32/f16 with an F32
    bias of the rows and an optional lagged weight of the same shape. They cover every late layer without a map of
    its own (those keep their input maps, checked as usual: a hybrid's recurrent layers); a covered layer must be an
    attention layer, and rows are the covered layers' K and V widths summed (from the model's keys: the file's, or
    a maps file's base where given; else they are checked at load)."""
    names = [KV_WEIGHT.format(split), KV_BIAS.format(split), KV_PREV.format(split)]
    for name in kv:
        if name not in names:
            return Check("maps", False, f"{name}: K/V maps belong to the split layer {split} only")
    window = next((t.name for t in reader.tensors if ".ridge_window." in t.name or ".ridge_map_window." in t.name), None)
    if window:
        return Check("maps", False, f"{window}: window maps beside the split layer's K/V maps")
    w, b, p = (kv.get(n) for n in names)
    if w is None or b is None:
        return Check("maps", False, f"{names[0] if w is None else names[1]}: missing; K/V maps need a weight and a bias")
    covered = [l for l in range(split + 1, n_layer) if MAP_WEIGHT.format(l) not in per_layer]
    if not covered:
        return Check("maps", False, f"{w.name}: K/V maps beside a map of every late layer: they would cover none")
    own = _input_maps(per_layer, split, n_layer, n_embd, [l for l in range(split + 1, n_layer) if l not in covered])
    if not own.ok:
        return own
    names_all = {t.name for t in shape.tensors}
    base_tensors = any(t.name.startswith("blk.") and ".ridge" not in t.name for t in shape.tensors)
    bad = next((l for l in covered if base_tensors and f"blk.{l}.attn_k.weight" not in names_all), None)
    if bad is not None:
        return Check("maps", False, f"{w.name}: covers layer {bad}, which has no attention (a recurrent layer needs "
                                    f"its own map {MAP_WEIGHT.format(bad)})")
    rows = _ne(w)[-1] if len(_ne(w)) == 2 else 0
    want = _kv_rows(shape, covered)
    if want is not None and rows != want:
        return Check("maps", False, f"{w.name}: {rows} rows, expected {want} (the K and V widths of layers "
                                    f"{_span(covered)})")
    if b.tensor_type != gguf.GGMLQuantizationType.F32 or _ne(b) != [rows] or not np.isfinite(np.asarray(b.data)).all():
        return Check("maps", False, f"{b.name}: expected a finite F32 bias of {rows} rows, got {b.tensor_type.name} {_ne(b)}")
    bad = next((x for x in (_tensor_problem(t, [n_embd, rows]) for t in (w, p) if t is not None) if x), None)
    if bad:
        return Check("maps", False, bad)
    mixed = f"; input maps of layers {_span([l for l in range(split + 1, n_layer) if l not in covered])}" \
        if len(covered) < n_layer - split - 1 else ""
    return Check("maps", True, f"K/V maps of layers {_span(covered)}: {rows} rows"
                               f"{', reading the previous row too' if p is not None else ''}, finite{mixed}")


def _span(layers: list[int]) -> str:
    contiguous = layers == list(range(layers[0], layers[-1] + 1))
    return f"{layers[0]}..{layers[-1]}" if contiguous and len(layers) > 2 else ", ".join(map(str, layers))


def _kv_rows(reader, layers: list[int]) -> int | None:
    """`layers`' K and V widths summed, from an augmented file's keys (None in a maps file)."""
    if field(reader, gguf.Keys.General.TYPE) == gguf.GGUFType.ADAPTER:
        return None
    arch = field(reader, "general.architecture")
    get = lambda k, default=None: next((v for v in (field(reader, f"{arch}.{k}"),) if v is not None), default)
    n_head = get("attention.head_count")
    kv_heads = get("attention.head_count_kv", n_head)
    heads = lambda l: kv_heads[l] if isinstance(kv_heads, list) else kv_heads
    d = get("embedding_length")
    n_k = get("attention.key_length", d // n_head if isinstance(n_head, int) and n_head else 0)
    n_v = get("attention.value_length", n_k)
    return sum(heads(l) * (n_k + n_v) for l in layers)


def check_window(reader, split: int | None, n_embd: int) -> Check:
    """Window maps: one projection {W*d, rank} (W in [1, MAX_WINDOW], rank in [1, d]) on the split layer only,
    each late layer's optional {rank, d} map of its columns (their layers are checked with the maps); both
    f32 or f16 and finite; a projection without maps and maps without it are refused."""
    proj = [t for t in reader.tensors if ".ridge_window." in t.name]
    maps = [t for t in reader.tensors if ".ridge_map_window." in t.name]
    if not proj and not maps:
        return Check("window", True, "no window maps")
    if split is None:
        return Check("window", False, f"window maps not checked: no valid {SPLIT_LAYER}")
    name = WINDOW.format(split)
    for t in proj:
        if t.name != name:
            return Check("window", False, f"{t.name}: the window projection belongs to the split layer {split} only")
    if not proj:
        return Check("window", False, f"{maps[0].name}: a window map needs the window projection {name}")
    if not maps:
        return Check("window", False, f"{name}: a window projection that no map reads")
    p = proj[0]
    ne = _ne(p)
    if n_embd <= 0:
        return Check("window", False, f"{name}: not checked, the model's width is unknown")
    if len(ne) != 2 or ne[0] % n_embd or not 1 <= ne[0] // n_embd <= MAX_WINDOW or not 1 <= ne[1] <= n_embd:
        return Check("window", False, f"{name}: shape {ne}, expected [W*{n_embd}, rank] with W in [1, {MAX_WINDOW}] "
                                      f"and rank in [1, {n_embd}]")
    for t, shape in [(p, ne)] + [(m, [ne[1], n_embd]) for m in maps]:
        bad = _tensor_problem(t, shape)
        if bad:
            return Check("window", False, bad)
    return Check("window", True, f"window maps at {len(maps)} layers read rows t-1..t-{ne[0] // n_embd} "
                                 f"through {ne[1]} columns")


def check_route(reader, split: int | None, n_embd: int) -> Check:
    """Routing statistics (patch "model : load RidgeFill routing statistics"): optional, both or
    neither, f32, on the split layer only; ridgefill.route_fraction in [0, 1] and > 0 only with them."""
    tensors = {t.name: t for t in reader.tensors if ".ridge_route." in t.name}
    f = reader.get_field(ROUTE_FRACTION)
    if f is not None and f.types != [gguf.GGUFValueType.FLOAT32]:
        return Check("route", False, f"{ROUTE_FRACTION} is a {'/'.join(t.name for t in f.types)}, expected float32")
    fraction = float(f.contents()) if f is not None else 0.0
    if not 0.0 <= fraction <= 1.0:
        return Check("route", False, f"{ROUTE_FRACTION} = {fraction:g} is out of range [0, 1]")
    if split is None:
        return Check("route", not tensors, f"routing statistics not checked: no valid {SPLIT_LAYER}")
    names = {ROUTE_MEAN.format(split): [n_embd], ROUTE_WHITEN.format(split): [n_embd, n_embd]}
    for name in tensors:
        if name not in names:
            return Check("route", False, f"{name}: routing statistics belong to the split layer {split} only")
    if not tensors:
        if fraction > 0:
            return Check("route", False, f"{ROUTE_FRACTION} = {fraction:g} needs {' and '.join(names)}, which are missing")
        return Check("route", True, "no routing statistics (routing unavailable)")
    for name, shape in names.items():
        t = tensors.get(name)
        if t is None:
            return Check("route", False, f"{name}: missing; routing needs both {' and '.join(names)}")
        if t.tensor_type != gguf.GGMLQuantizationType.F32:
            return Check("route", False, f"{name}: type {t.tensor_type.name}, routing statistics must be F32")
        if _ne(t) != shape:
            return Check("route", False, f"{name}: shape {_ne(t)}, expected {shape}")
        if not np.isfinite(np.asarray(t.data)).all():
            return Check("route", False, f"{name}: non-finite value (NaN or Inf)")
    return Check("route", True, f"routing statistics at layer {split}, default fraction {fraction:g}")


def _ne(t) -> list[int]:
    """ggml ne of a tensor without trailing 1s ({d, 1} is the same shape as {d})."""
    ne = [int(n) for n in t.shape]
    while len(ne) > 1 and ne[-1] == 1:
        ne.pop()
    return ne


def _weight_problem(w, d: int) -> str | None:
    return _tensor_problem(w, [d, d])


def _tensor_problem(w, shape: list[int]) -> str | None:
    if w.tensor_type not in MAP_WEIGHT_TYPES:
        return f"{w.name}: type {w.tensor_type.name} is not supported (f32 or f16)"
    if _ne(w) != shape:
        return f"{w.name}: shape {_ne(w)}, expected {shape}"
    if not np.isfinite(np.asarray(w.data)).all():
        return f"{w.name}: non-finite value (NaN or Inf)"
    return None


def _map_problem(w, b, layer: int, d: int) -> str | None:
    if w is None:
        return f"{MAP_WEIGHT.format(layer)}: missing"
    if b is not None and b.tensor_type != gguf.GGMLQuantizationType.F32:
        return f"{b.name}: type {b.tensor_type.name}, biases must be F32"
    if b is not None and _ne(b) != [d]:
        return f"{b.name}: shape {_ne(b)}, expected [{d}]"
    if b is not None and not np.isfinite(np.asarray(b.data)).all():
        return f"{b.name}: non-finite value (NaN or Inf)"
    return _weight_problem(w, d)
