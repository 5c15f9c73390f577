"""The checks the fork's loader makes on an augmented GGUF, in Python, for `ridgefill inspect`.

Each check has a name, a verdict and a message naming the key or tensor at fault. The loader
(patch "model : validate RidgeFill maps and metadata at load") refuses a file that fails any
of the `LOADER` checks; `inspect` also reports checks the loader cannot make: finite held-out
statistics and, when given the base GGUF, whether `ridgefill.base_sha256` is that file's.
"""

from __future__ import annotations

import math
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np

from ..fetch import sha256_file
from .gguf_io import field, open_gguf
from .identity import model_shape
from .maps_file import check_base, is_maps_file
from .write import PackError
from .keys import (BASE_SHA256, FORMAT_VERSION, FORMAT_VERSION_KEY, KEY, KV_BIAS, KV_PREV, KV_WEIGHT, MAP_BIAS, MAP_PREV, MAP_SUFFIXES, MAP_WEIGHT,
                   MAP_WEIGHT_TYPES, MAX_WINDOW, PER_LAYER, ROUTE_FRACTION, ROUTE_MEAN, ROUTE_WHITEN, SPLIT_LAYER, WINDOW, ADAPTER_TYPE, is_maps_tensor)

LOADER = ("format_version", "split_layer", "sink_rows", "tail_rows", "maps", "window", "route", "maps_file")


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    message: str

    def as_dict(self) -> dict:
        return {"name": self.name, "ok": self.ok, "message": self.message}


def check_file(path: str | os.PathLike, base: str | os.PathLike | None = None,
               reader: gguf.GGUFReader | None = None) -> list[Check]:
    reader = reader or open_gguf(path)
    _, n_layer, n_embd, n_ctx_train = model_shape(reader)

    checks = [_format_version(reader)]
    split = _uint32(reader, SPLIT_LAYER)
    checks.append(_in_range("split_layer", split, 1, n_layer - 1))
    for key in ("sink_rows", "tail_rows"):
        checks.append(_in_range(key, _uint32(reader, KEY.format(key)), 0, n_ctx_train, optional=True,
                                bound_name="n_ctx_train"))
    split_ok = isinstance(split, int) and 1 <= split < n_layer
    checks.append(_maps(reader, split if split_ok else None, n_layer, n_embd))
    checks.append(_window(reader, split if split_ok else None, n_embd))
    checks.append(_route(reader, split if split_ok else None, n_embd))
    checks.append(_finite_stats(reader))
    if field(reader, gguf.Keys.General.TYPE) == gguf.GGUFType.ADAPTER:
        checks.append(_maps_file(reader, path, base))
    elif base is not None:
        checks.append(_base_sha256(reader, Path(base)))
    return checks


def _maps_file(reader, path, base) -> Check:
    """A maps file: RidgeFill tensors only; with `base`, the loader's verdict on loading it beside that model."""
    if not is_maps_file(reader):
        return Check("maps_file", False, f"an adapter but not a RidgeFill maps file (adapter.type is not {ADAPTER_TYPE})")
    other = next((t.name for t in reader.tensors if not is_maps_tensor(t.name)), None)
    if other is not None:
        return Check("maps_file", False, f"tensor {other} is not a RidgeFill map (a maps file carries blk.N.ridge_* only)")
    if base is None:
        return Check("maps_file", True, "a maps file (give --base to check it against a model)")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            check_base(reader, path, base)
        except PackError as err:
            return Check("maps_file", False, str(err))
    return Check("maps_file", True, "; ".join(str(w.message) for w in caught) or f"fitted for {base}")


def _uint32(reader, key: str):
    """The key's value if it is a uint32, None if absent, else a description of what it is."""
    f = reader.get_field(key)
    if f is None:
        return None
    if f.types != [gguf.GGUFValueType.UINT32]:
        return f"a {'/'.join(t.name for t in f.types)} ({f.contents()!r})"
    return int(f.contents())


def _format_version(reader) -> Check:
    v = _uint32(reader, FORMAT_VERSION_KEY)
    if v is None:
        return Check("format_version", False, f"{FORMAT_VERSION_KEY} is missing")
    if not isinstance(v, int):
        return Check("format_version", False, f"{FORMAT_VERSION_KEY} is {v}, expected uint32")
    if v != FORMAT_VERSION:
        return Check("format_version", False, f"{FORMAT_VERSION_KEY} = {v} is not supported (this build reads {FORMAT_VERSION})")
    return Check("format_version", True, f"{FORMAT_VERSION_KEY} = {v}")


def _in_range(name: str, v, lo: int, hi: int, optional: bool = False, bound_name: str | None = None) -> Check:
    key = KEY.format(name)
    if v is None:
        return Check(name, optional, f"{key} is absent (default)" if optional else f"{key} is missing")
    if not isinstance(v, int):
        return Check(name, False, f"{key} is {v}, expected uint32")
    bound = f"{hi} ({bound_name})" if bound_name else str(hi)
    if not lo <= v <= hi:
        return Check(name, False, f"{key} = {v} is out of range [{lo}, {bound}]")
    return Check(name, True, f"{key} = {v}")


def _maps(reader, split: int | None, n_layer: int, n_embd: int) -> Check:
    tensors = {t.name: t for t in reader.tensors
               if any(f".ridge_map{k}." in t.name for k in ("", "_prev", "_window"))}
    if split is None:
        return Check("maps", False, f"maps not checked: no valid {SPLIT_LAYER}")
    kv = {t.name: t for t in reader.tensors if ".ridge_kv" in t.name}
    if kv:
        return _kv_maps(reader, kv, tensors, split, n_layer, n_embd)
    for name in sorted(tensors):
        blk, layer, rest = (name.split(".", 2) + ["", ""])[:3]
        if blk != "blk" or not layer.isdigit() or rest not in MAP_SUFFIXES:
            return Check("maps", False, f"{name}: not a RidgeFill map tensor")
        if not split < int(layer) < n_layer:
            return Check("maps", False, f"{name}: map for a layer outside ({split}, {n_layer})")
    n_prev = 0
    for layer in range(split + 1, n_layer):
        prev = tensors.get(MAP_PREV.format(layer))
        bad = (_map_problem(tensors.get(MAP_WEIGHT.format(layer)), tensors.get(MAP_BIAS.format(layer)), layer, n_embd)
               or (prev is not None and _weight_problem(prev, n_embd)))
        if bad:
            return Check("maps", False, bad)
        n_prev += prev is not None
    return Check("maps", True, f"{n_layer - split - 1} maps ({n_prev} also reading the previous row), "
                               f"f32/f16 {n_embd}x{n_embd}, finite")


def _kv_maps(reader, kv: dict, per_layer: dict, split: int, n_layer: int, n_embd: int) -> Check:
    """K/V maps (patch "model, graph : RidgeFill K/V maps"): on the split layer only, in place of every per-layer
    map, {d, rows} f32/f16 with an F32 bias of the rows and an optional lagged weight of the same shape; rows are
    the late layers' K and V widths summed (from the file's keys; a maps file's are checked at load)."""
    names = [KV_WEIGHT.format(split), KV_BIAS.format(split), KV_PREV.format(split)]
    for name in kv:
        if name not in names:
            return Check("maps", False, f"{name}: K/V maps belong to the split layer {split} only")
    if per_layer:
        return Check("maps", False, f"{min(per_layer)}: a per-layer map beside the split layer's K/V maps (one kind a file)")
    w, b, p = (kv.get(n) for n in names)
    if w is None or b is None:
        return Check("maps", False, f"{names[0] if w is None else names[1]}: missing; K/V maps need a weight and a bias")
    rows = _ne(w)[-1] if len(_ne(w)) == 2 else 0
    want = _kv_rows(reader, split, n_layer)
    if want is not None and rows != want:
        return Check("maps", False, f"{w.name}: {rows} rows, expected {want} (the K and V widths of layers "
                                    f"{split + 1}..{n_layer - 1})")
    if b.tensor_type != gguf.GGMLQuantizationType.F32 or _ne(b) != [rows] or not np.isfinite(np.asarray(b.data)).all():
        return Check("maps", False, f"{b.name}: expected a finite F32 bias of {rows} rows, got {b.tensor_type.name} {_ne(b)}")
    bad = next((x for x in (_tensor_problem(t, [n_embd, rows]) for t in (w, p) if t is not None) if x), None)
    if bad:
        return Check("maps", False, bad)
    return Check("maps", True, f"K/V maps of layers {split + 1}..{n_layer - 1}: {rows} rows"
                               f"{', reading the previous row too' if p is not None else ''}, finite")


def _kv_rows(reader, split: int, n_layer: int) -> int | None:
    """The late layers' K and V widths summed, from an augmented file's keys (None in a maps file)."""
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
    return sum(heads(l) * (n_k + n_v) for l in range(split + 1, n_layer))


def _window(reader, split: int | None, n_embd: int) -> Check:
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


def _route(reader, split: int | None, n_embd: int) -> Check:
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


def _finite_stats(reader) -> Check:
    for key in PER_LAYER.values():
        f = reader.get_field(key)
        if f is None:
            continue
        values = f.contents()
        if not isinstance(values, list) or not all(isinstance(x, (int, float)) and math.isfinite(x) for x in values):
            return Check("stats", False, f"{key} holds a non-finite or non-numeric value")
    return Check("stats", True, "lambda and held-out R² are finite")


def _base_sha256(reader, base: Path) -> Check:
    recorded = field(reader, BASE_SHA256)
    actual = sha256_file(base)
    if recorded != actual:
        return Check("base_sha256", False, f"{BASE_SHA256} = {recorded!r}, but {base} has sha256 {actual}")
    return Check("base_sha256", True, f"{BASE_SHA256} matches {base}")
