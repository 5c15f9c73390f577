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
from pathlib import Path

import gguf

from ..fetch import sha256_file
from .gguf_io import field, open_gguf
from .identity import model_shape
from .maps_file import check_base, is_maps_file
from .write import PackError
from .map_checks import Check, check_maps, check_route, check_window
from .keys import (BASE_SHA256, FORMAT_VERSION, FORMAT_VERSION_KEY, KEY, PER_LAYER, SPLIT_LAYER, ADAPTER_TYPE,
                   is_maps_tensor)

LOADER = ("format_version", "split_layer", "sink_rows", "tail_rows", "maps", "window", "route", "maps_file")


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
    adapter = field(reader, gguf.Keys.General.TYPE) == gguf.GGUFType.ADAPTER
    shape = open_gguf(base) if adapter and base is not None else reader  # what the K/V maps' rows must fit
    checks.append(check_maps(reader, split if split_ok else None, n_layer, n_embd, shape))
    checks.append(check_window(reader, split if split_ok else None, n_embd))
    checks.append(check_route(reader, split if split_ok else None, n_embd))
    checks.append(_finite_stats(reader))
    if adapter:
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
