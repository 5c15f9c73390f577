"""Seeded mutants of a small augmented GGUF or maps file, for the loader fuzz test (test_fuzz_gguf.py).

Families:
- byte-level: truncations and byte flips anywhere in the file (header, metadata, tensor
  infos, data); the fork may load the result or refuse it, but must not crash;
- structural: the file rewritten through gguf-py with one defect in the RidgeFill part
  (map type, shape, non-finite values, missing or extra tensors, bad metadata); the fork
  must refuse every one of these at load, with a message naming the tensor or key;
- K/V maps (blk.{s}.ridge_kv.*), where the source has them: types, shapes, values, placement, beside a
  per-layer map;
- a maps file's own keys (its type and the base it records): refused with the key named, except another
  layout of the same weights (another quantization), which loads.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import gguf
import numpy as np

Q = gguf.GGMLQuantizationType
V = gguf.GGUFValueType


@dataclass(frozen=True)
class Mutant:
    name: str
    must_refuse: bool       # the loader must reject it (structural defects)
    expect: str | None      # a substring of the load error, when must_refuse
    write: Callable[[Path], None]


@dataclass
class _Tensor:
    name: str
    data: np.ndarray        # numpy order; raw bytes (uint8, byte shape) for block formats
    qtype: Q


class _Model:
    """The source file's keys and tensors, to be rewritten with one change."""

    def __init__(self, path: Path):
        r = gguf.GGUFReader(path)
        self.arch = str(r.get_field("general.architecture").contents())
        self.kvs = []
        for f in r.fields.values():
            if f.name.startswith("GGUF.") or f.name == "general.architecture":
                continue
            sub = f.types[-1] if f.types[0] == V.ARRAY else None
            self.kvs.append((f.name, f.contents(), f.types[0], sub))
        self.tensors = [_Tensor(t.name, np.array(t.data), t.tensor_type) for t in r.tensors]
        self.alignment = r.alignment

    def key(self, name):
        return next(v for k, v, _, _ in self.kvs if k == name)

    def write(self, out: Path, kvs=None, tensors=None, arch=None):
        w = gguf.GGUFWriter(out, arch=arch or self.arch)
        w.data_alignment = self.alignment
        for k, v, vt, sub in (self.kvs if kvs is None else kvs):
            w.add_key_value(k, v, vt, sub_type=sub)
        ts = self.tensors if tensors is None else tensors
        for t in ts:
            raw = None if t.qtype in (Q.F32, Q.F16, Q.F64, Q.I8, Q.I16, Q.I32, Q.I64) else t.qtype
            w.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, raw_dtype=raw)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        for t in ts:
            w.write_tensor_data(t.data)
        w.close()


def mutants(src: Path, seed: int = 0, n_bytes: int = 150) -> list[Mutant]:
    m = _Model(src)
    data = src.read_bytes()
    rng = np.random.default_rng(seed)
    out = _byte_mutants(data, rng, n_bytes) + _structural_mutants(m, rng)
    return out + (_maps_file_mutants(m) if _is_maps_file(m) else [])


def _is_maps_file(m: _Model) -> bool:
    return any(k == "adapter.type" for k, _, _, _ in m.kvs)


def _byte_mutants(data: bytes, rng, n: int) -> list[Mutant]:
    out = []
    header_end = min(len(data), 1 << 20)  # keys and tensor infos sit in the first MiB of a small model

    def write_bytes(b: bytes):
        return lambda p: p.write_bytes(b)

    for i in range(n // 3):
        cut = int(rng.integers(0, len(data))) if i % 2 else int(rng.integers(0, header_end))
        out.append(Mutant(f"truncate@{cut}", False, None, write_bytes(data[:cut])))
    for i in range(n - n // 3):
        b = bytearray(data)
        k = int(rng.integers(1, 9))
        region = header_end if i % 3 else len(data)
        for pos in rng.integers(0, region, size=k):
            b[int(pos)] ^= 1 << int(rng.integers(0, 8))
        out.append(Mutant(f"flip{k}@{i}", False, None, write_bytes(bytes(b))))
    return out


def _replace(m: _Model, name: str, t: _Tensor | None) -> list[_Tensor]:
    """The tensor list with `name` replaced by `t` (dropped when t is None)."""
    ts = [x for x in m.tensors if x.name != name]
    return ts if t is None else ts + [t]


def _with_key(m: _Model, key: str, value, vtype, sub=None):
    return [kv for kv in m.kvs if kv[0] != key] + ([] if value is None else [(key, value, vtype, sub)])


def _structural_mutants(m: _Model, rng) -> list[Mutant]:
    split = int(m.key("ridgefill.split_layer"))
    maps_file = _is_maps_file(m)
    n_layer = int(m.key("ridgefill.base.block_count" if maps_file else f"{m.arch}.block_count"))
    n_ctx = int(m.key("ridgefill.base.context_length" if maps_file else f"{m.arch}.context_length"))
    out: list[Mutant] = []

    def add(name, expect, kvs=None, tensors=None):
        out.append(Mutant(name, True, expect, lambda p, kvs=kvs, tensors=tensors: m.write(p, kvs, tensors)))

    maps = [t for t in m.tensors if t.name.endswith(".ridge_map.weight")]
    if maps:
        _map_mutants(m, rng, maps, split, n_layer, maps_file, add)
    _kv_mutants(m, split, add)
    _metadata_mutants(m, split, n_layer, n_ctx, maps_file, add)
    _route_mutants(m, split, add)
    _prev_mutants(m, split, n_layer, add)
    _window_mutants(m, split, add)
    return out


def _map_mutants(m: _Model, rng, maps: list[_Tensor], split: int, n_layer: int, maps_file: bool, add) -> None:
    """Per-layer maps (blk.{l}.ridge_map.weight/bias)."""
    w0 = maps[0]
    d = w0.data.shape[0]
    f32 = w0.data.astype(np.float32)
    bias0 = next(t for t in m.tensors if t.name == w0.name.replace(".weight", ".bias"))
    # map weight types outside {f32, f16}
    for qt, arr in [(Q.F64, f32.astype(np.float64)), (Q.I32, f32.astype(np.int32)), (Q.I8, f32.astype(np.int8)),
                    (Q.I16, f32.astype(np.int16)), (Q.Q8_0, gguf.quants.quantize(f32, Q.Q8_0)),
                    (Q.Q4_0, gguf.quants.quantize(f32, Q.Q4_0)), (Q.BF16, gguf.quants.quantize(f32, Q.BF16))]:
        for t in (w0, maps[-1]):
            add(f"type-{qt.name}-{t.name}", t.name, tensors=_replace(m, t.name, _Tensor(t.name, arr, qt)))
    # bias types other than f32
    b32 = bias0.data.astype(np.float32)
    for qt, arr in [(Q.F16, b32.astype(np.float16)), (Q.I32, b32.astype(np.int32)), (Q.F64, b32.astype(np.float64))]:
        add(f"bias-type-{qt.name}", bias0.name, tensors=_replace(m, bias0.name, _Tensor(bias0.name, arr, qt)))
    # shapes
    for shape in [(d, d + 1), (d - 1, d), (d + 32, d), (d, d // 2), (2, d, d)]:
        arr = np.resize(f32, shape).astype(np.float32)
        add(f"shape-{'x'.join(map(str, shape))}", w0.name, tensors=_replace(m, w0.name, _Tensor(w0.name, arr, Q.F32)))
    for shape in [(d + 1,), (d - 1,), (d, 1), (d, 2)]:  # (1, d) is ne {d, 1} = {d}: valid
        arr = np.resize(b32, shape).astype(np.float32)
        add(f"bias-shape-{'x'.join(map(str, shape))}", bias0.name,
            tensors=_replace(m, bias0.name, _Tensor(bias0.name, arr, Q.F32)))
    # non-finite values, in weights of either type and in biases
    for bad in (np.nan, np.inf, -np.inf):
        for t in (w0, maps[len(maps) // 2], maps[-1]):
            arr = t.data.copy()
            arr.reshape(-1)[int(rng.integers(0, arr.size))] = bad
            add(f"nonfinite-{bad}-{t.name}-{t.qtype.name}", t.name, tensors=_replace(m, t.name, _Tensor(t.name, arr, t.qtype)))
        for qt, dt in ((Q.F32, np.float32), (Q.F16, np.float16)):
            arr = f32.astype(dt)
            arr.reshape(-1)[-1] = bad
            add(f"nonfinite-{bad}-{qt.name}-last", w0.name, tensors=_replace(m, w0.name, _Tensor(w0.name, arr, qt)))
        arr = b32.copy()
        arr[int(rng.integers(0, d))] = bad
        add(f"nonfinite-{bad}-bias", bias0.name, tensors=_replace(m, bias0.name, _Tensor(bias0.name, arr, Q.F32)))
    # missing and extra tensors
    for t in (w0, maps[-1]):
        add(f"missing-{t.name}", t.name, tensors=_replace(m, t.name, None))
    for layer in (0, split):
        name = f"blk.{layer}.ridge_map.weight"
        add(f"extra-map-{layer}", name, tensors=m.tensors + [_Tensor(name, f32, Q.F32)])
    add(f"extra-map-{n_layer}", "wrong number of tensors",
        tensors=m.tensors + [_Tensor(f"blk.{n_layer}.ridge_map.weight", f32, Q.F32)])
    add("extra-tensor", "not a RidgeFill map" if maps_file else "wrong number of tensors",
        tensors=m.tensors + [_Tensor("blk.0.surprise.weight", f32, Q.F32)])


def _metadata_mutants(m: _Model, split: int, n_layer: int, n_ctx: int, maps_file: bool, add) -> None:
    fv, sl, sr, tr = ("ridgefill." + k for k in ("format_version", "split_layer", "sink_rows", "tail_rows"))
    for v in (0, 2, 999, 2**32 - 1):
        add(f"format_version={v}", "format_version", kvs=_with_key(m, fv, v, V.UINT32))
    add("format_version-string", "format_version", kvs=_with_key(m, fv, "1", V.STRING))
    add("format_version-f32", "format_version", kvs=_with_key(m, fv, 1.0, V.FLOAT32))
    add("format_version-missing", "format_version", kvs=_with_key(m, fv, None, None))
    for v in (0, n_layer - 1, n_layer, 2**31, 2**32 - 1):
        add(f"split_layer={v}", "split", kvs=_with_key(m, sl, v, V.UINT32))
    add("split_layer-int32-neg", "split_layer", kvs=_with_key(m, sl, -1, V.INT32))
    add("split_layer-string", "split_layer", kvs=_with_key(m, sl, "3", V.STRING))
    add("split_layer-missing", "ridgefill.split_layer is missing" if maps_file else "without ridgefill.split_layer",
        kvs=_with_key(m, sl, None, None))
    for key in (sr, tr):
        for v in (n_ctx + 1, 2**31, 2**32 - 1):
            add(f"{key}={v}", key, kvs=_with_key(m, key, v, V.UINT32))
        add(f"{key}-int32-neg", key, kvs=_with_key(m, key, -1, V.INT32))
        add(f"{key}-f32", key, kvs=_with_key(m, key, 4.5, V.FLOAT32))
        add(f"{key}-bool", key, kvs=_with_key(m, key, True, V.BOOL))


def _kv_mutants(m: _Model, split: int, add) -> None:
    """K/V maps (blk.{split}.ridge_kv.weight/bias, blk.{split}.ridge_kv_prev.weight), when present."""
    w = next((t for t in m.tensors if t.name == f"blk.{split}.ridge_kv.weight"), None)
    if w is None:
        return
    b = next(t for t in m.tensors if t.name == f"blk.{split}.ridge_kv.bias")
    p = next((t for t in m.tensors if t.name == f"blk.{split}.ridge_kv_prev.weight"), None)
    rows, d = w.data.shape
    w32, b32 = w.data.astype(np.float32), b.data.astype(np.float32)
    for t in [w] + [p] * (p is not None):
        for qt, arr in [(Q.F64, w32.astype(np.float64)), (Q.I32, w32.astype(np.int32)), (Q.BF16, gguf.quants.quantize(w32, Q.BF16)),
                        (Q.Q8_0, gguf.quants.quantize(w32, Q.Q8_0))]:
            add(f"kv-type-{qt.name}-{t.name}", t.name, tensors=_replace(m, t.name, _Tensor(t.name, arr, qt)))
        for shape in [(rows + 1, d), (rows - 2, d), (rows, d - 1), (d, rows), (2, rows, d)]:
            arr = np.resize(w32, shape).astype(np.float32)
            add(f"kv-shape-{'x'.join(map(str, shape))}-{t.name}", t.name, tensors=_replace(m, t.name, _Tensor(t.name, arr, Q.F32)))
        for bad in (np.nan, np.inf):
            for qt, dt in ((Q.F32, np.float32), (Q.F16, np.float16)):
                arr = w32.astype(dt)
                arr.reshape(-1)[-1] = bad
                add(f"kv-nonfinite-{bad}-{qt.name}-{t.name}", t.name, tensors=_replace(m, t.name, _Tensor(t.name, arr, qt)))
    for qt, arr in [(Q.F16, b32.astype(np.float16)), (Q.I32, b32.astype(np.int32))]:
        add(f"kv-bias-type-{qt.name}", b.name, tensors=_replace(m, b.name, _Tensor(b.name, arr, qt)))
    for shape in [(rows + 1,), (rows - 1,), (rows, 2)]:
        add(f"kv-bias-shape-{'x'.join(map(str, shape))}", b.name,
            tensors=_replace(m, b.name, _Tensor(b.name, np.resize(b32, shape).astype(np.float32), Q.F32)))
    arr = b32.copy()
    arr[0] = np.nan
    add("kv-bias-nonfinite", b.name, tensors=_replace(m, b.name, _Tensor(b.name, arr, Q.F32)))
    add("kv-bias-missing", b.name, tensors=_replace(m, b.name, None))
    add("kv-weight-missing", w.name, tensors=_replace(m, w.name, None))
    at0 = [_Tensor(t.name.replace(f"blk.{split}.", "blk.0."), t.data, t.qtype) for t in (w, b)]
    add("kv-at-0", "blk.0.ridge_kv", tensors=[t for t in m.tensors if t not in (w, b)] + at0)
    name = f"blk.{split + 1}.ridge_map.weight"  # the layer leaves the K/V maps' cover: their rows no longer fit
    add("kv-and-a-map-of-a-covered-layer", w.name, tensors=m.tensors + [_Tensor(name, np.eye(d, dtype=np.float32), Q.F32)])


def _prev_mutants(m: _Model, split: int, n_layer: int, add) -> None:
    """Lagged maps' previous-row weights (blk.{l}.ridge_map_prev.weight), when present."""
    prev = [t for t in m.tensors if t.name.endswith(".ridge_map_prev.weight")]
    if not prev:
        return
    p0 = prev[0]
    d = p0.data.shape[0]
    f32 = p0.data.astype(np.float32)
    for qt, arr in [(Q.F64, f32.astype(np.float64)), (Q.I32, f32.astype(np.int32)), (Q.BF16, gguf.quants.quantize(f32, Q.BF16)),
                    (Q.Q8_0, gguf.quants.quantize(f32, Q.Q8_0))]:
        add(f"prev-type-{qt.name}", p0.name, tensors=_replace(m, p0.name, _Tensor(p0.name, arr, qt)))
    for shape in [(d, d + 1), (d - 1, d), (d,), (2, d, d)]:
        arr = np.resize(f32, shape).astype(np.float32)
        add(f"prev-shape-{'x'.join(map(str, shape))}", p0.name, tensors=_replace(m, p0.name, _Tensor(p0.name, arr, Q.F32)))
    for bad in (np.nan, np.inf, -np.inf):
        for qt, dt in ((Q.F32, np.float32), (Q.F16, np.float16)):
            arr = f32.astype(dt)
            arr.reshape(-1)[-1] = bad
            add(f"prev-nonfinite-{bad}-{qt.name}", p0.name, tensors=_replace(m, p0.name, _Tensor(p0.name, arr, qt)))
    for layer in (0, split):
        name = f"blk.{layer}.ridge_map_prev.weight"
        add(f"prev-at-{layer}", name, tensors=m.tensors + [_Tensor(name, f32, Q.F32)])
    add(f"prev-at-{n_layer}", "wrong number of tensors",
        tensors=m.tensors + [_Tensor(f"blk.{n_layer}.ridge_map_prev.weight", f32, Q.F32)])


def _window_mutants(m: _Model, split: int, add) -> None:
    """Window maps (blk.{split}.ridge_window.weight, blk.{l}.ridge_map_window.weight), when present."""
    proj = next((t for t in m.tensors if t.name == f"blk.{split}.ridge_window.weight"), None)
    maps = [t for t in m.tensors if t.name.endswith(".ridge_map_window.weight")]
    if proj is None or not maps:
        return
    rank, n_in = proj.data.shape
    d, v0 = maps[0].data.shape[0], maps[0]
    p32, v32 = proj.data.astype(np.float32), v0.data.astype(np.float32)
    for t, a32 in ((proj, p32), (v0, v32)):
        for qt, arr in [(Q.F64, a32.astype(np.float64)), (Q.I32, a32.astype(np.int32)), (Q.BF16, gguf.quants.quantize(a32, Q.BF16))]:
            add(f"window-type-{qt.name}-{t.name}", t.name, tensors=_replace(m, t.name, _Tensor(t.name, arr, qt)))
        for bad in (np.nan, np.inf):
            for qt, dt in ((Q.F32, np.float32), (Q.F16, np.float16)):
                arr = a32.astype(dt)
                arr.reshape(-1)[-1] = bad
                add(f"window-nonfinite-{bad}-{qt.name}-{t.name}", t.name, tensors=_replace(m, t.name, _Tensor(t.name, arr, qt)))
    # W*d not a multiple of d, W above 16, rank above d, a 3-d projection
    for shape in [(rank, n_in + 1), (rank, 17 * d), (d + 1, n_in), (2, rank, n_in)]:
        arr = np.resize(p32, shape).astype(np.float32)
        add(f"window-shape-{'x'.join(map(str, shape))}", proj.name, tensors=_replace(m, proj.name, _Tensor(proj.name, arr, Q.F32)))
    for shape in [(d, rank + 1), (d + 1, rank), (rank, d)]:  # rank + 1 columns, d + 1 rows, transposed
        arr = np.resize(v32, shape).astype(np.float32)
        add(f"window-map-shape-{'x'.join(map(str, shape))}", v0.name, tensors=_replace(m, v0.name, _Tensor(v0.name, arr, Q.F32)))
    add("window-projection-missing", proj.name, tensors=_replace(m, proj.name, None))
    add("window-maps-missing", proj.name, tensors=[t for t in m.tensors if t not in maps])
    add("window-projection-at-0", "blk.0.ridge_window.weight", tensors=m.tensors + [_Tensor("blk.0.ridge_window.weight", p32, Q.F32)])
    name = f"blk.{split}.ridge_map_window.weight"
    add(f"window-map-at-{split}", name, tensors=m.tensors + [_Tensor(name, v32, Q.F32)])


def _route_mutants(m: _Model, split: int, add) -> None:
    """Routing statistics (blk.{split}.ridge_route.mean/whiten, ridgefill.route_fraction), when present."""
    names = {t.name: t for t in m.tensors if ".ridge_route." in t.name}
    if not names:
        return
    mean, whiten = names[f"blk.{split}.ridge_route.mean"], names[f"blk.{split}.ridge_route.whiten"]
    d = mean.data.shape[0]
    for t in (mean, whiten):
        f32 = t.data.astype(np.float32)
        for qt, arr in [(Q.F16, f32.astype(np.float16)), (Q.I32, f32.astype(np.int32)), (Q.F64, f32.astype(np.float64))]:
            add(f"route-type-{qt.name}-{t.name}", t.name, tensors=_replace(m, t.name, _Tensor(t.name, arr, qt)))
        for bad in (np.nan, np.inf):
            arr = f32.copy()
            arr.reshape(-1)[-1] = bad
            add(f"route-nonfinite-{bad}-{t.name}", t.name, tensors=_replace(m, t.name, _Tensor(t.name, arr, Q.F32)))
        add(f"route-missing-{t.name}", t.name, tensors=_replace(m, t.name, None))
        moved = t.name.replace(f"blk.{split}.", "blk.0.")
        add(f"route-moved-{t.name}", moved, tensors=_replace(m, t.name, _Tensor(moved, f32, Q.F32)))
    for shape in [(d, d + 1), (d - 1, d), (d,)]:
        arr = np.resize(whiten.data.astype(np.float32), shape)
        add(f"route-shape-whiten-{'x'.join(map(str, shape))}", whiten.name,
            tensors=_replace(m, whiten.name, _Tensor(whiten.name, arr, Q.F32)))
    for shape in [(d + 1,), (d, d)]:
        arr = np.resize(mean.data.astype(np.float32), shape)
        add(f"route-shape-mean-{'x'.join(map(str, shape))}", mean.name,
            tensors=_replace(m, mean.name, _Tensor(mean.name, arr, Q.F32)))
    key = "ridgefill.route_fraction"
    for v in (-0.1, 1.5, float("nan"), float("inf")):
        add(f"route_fraction={v}", key, kvs=_with_key(m, key, v, V.FLOAT32))
    add("route_fraction-string", key, kvs=_with_key(m, key, "0.1", V.STRING))
    add("route_fraction-without-statistics", key, kvs=_with_key(m, key, 0.25, V.FLOAT32),
        tensors=[t for t in m.tensors if ".ridge_route." not in t.name])


def _maps_file_mutants(m: _Model) -> list[Mutant]:
    """A maps file's type and the base it records; the base it is loaded beside is the one it was written for."""
    out: list[Mutant] = []

    def add(name, expect, kvs=None, tensors=None, arch=None, refuse=True):
        out.append(Mutant(name, refuse, expect, lambda p, kvs=kvs, tensors=tensors, arch=arch: m.write(p, kvs, tensors, arch)))

    for key, other in (("general.type", "model"), ("adapter.type", "lora")):
        add(f"{key}={other}", "not a RidgeFill maps file", kvs=_with_key(m, key, other, V.STRING))
        add(f"{key}-uint32", key, kvs=_with_key(m, key, 1, V.UINT32))
    add("general.type-missing", "general.type", kvs=_with_key(m, "general.type", None, None))
    add("adapter.type-missing", "not a RidgeFill maps file", kvs=_with_key(m, "adapter.type", None, None))
    add("architecture=qwen2", "architecture", arch="qwen2")
    for k in ("block_count", "embedding_length", "vocab_size"):
        key = f"ridgefill.base.{k}"
        for v in (int(m.key(key)) + 1, 0, 2**32 - 1):
            add(f"{key}={v}", key, kvs=_with_key(m, key, v, V.UINT32))
        add(f"{key}-string", key, kvs=_with_key(m, key, str(m.key(key)), V.STRING))
        add(f"{key}-int64", key, kvs=_with_key(m, key, int(m.key(key)), V.INT64))
        add(f"{key}-missing", key, kvs=_with_key(m, key, None, None))
    for key in ("ridgefill.base.weights_hash", "ridgefill.base.layout_hash"):
        add(f"{key}-uint32", key, kvs=_with_key(m, key, 7, V.UINT32))
        add(f"{key}-missing", key, kvs=_with_key(m, key, None, None))
    add("weights_hash-other", "fitted for other weights", kvs=_with_key(m, "ridgefill.base.weights_hash", "0" * 16, V.STRING))
    add("layout_hash-other (another quantization: loads)", None, refuse=False,
        kvs=_with_key(m, "ridgefill.base.layout_hash", "0" * 16, V.STRING))
    norm = np.ones(int(m.key("ridgefill.base.embedding_length")), np.float32)
    for name in ("blk.0.attn_norm.weight", "output_norm.weight", "blk.x.ridge_map.weight", "ridge_map.weight"):
        add(f"foreign-tensor-{name}", "not a RidgeFill map", tensors=m.tensors + [_Tensor(name, norm, Q.F32)])
    return out
