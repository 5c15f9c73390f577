"""GGUF reading and copy-with-changes on top of llama.cpp's `gguf` package.

Copies keep every key and tensor of the source byte for byte unless the caller changes
them, and are written through a temporary file renamed on success.
"""

from __future__ import annotations

import functools
import hashlib
import os
import time
from pathlib import Path
from typing import Callable, Iterable

import gguf
import numpy as np

from ..files import atomic_output
from ..errors import MissingFile, RidgefillError


class GGUFError(RidgefillError, ValueError):
    pass


class _Reader(gguf.GGUFReader):
    """GGUFReader over a plain ndarray view of its memmap: numpy.memmap's per-slice
    bookkeeping makes parsing a 50K-entry vocabulary about 4x slower otherwise."""

    @property
    def data(self):
        return self._data

    @data.setter
    def data(self, value):
        self._data = value.view(np.ndarray)


SETTLED_S = 2.0  # a file unmodified for this long is parsed once per process (see open_gguf)


def open_gguf(path: str | os.PathLike) -> gguf.GGUFReader:
    """A reader of the GGUF at `path`. Parsing a 50K-entry vocabulary takes seconds, and one command reads the
    same model several times (identity, defaults, maps), so a file that has not changed for SETTLED_S seconds
    is parsed once and its reader shared (read-only memmap) until the file's inode, size or times change: a
    file modified later gets a new mtime at least SETTLED_S past the cached one. A file written just now
    (a mutant rewritten in place) is parsed every time."""
    path = Path(path)
    if not path.is_file():
        raise MissingFile(f"GGUF not found: {path}")
    st = path.stat()
    try:
        if time.time() - st.st_mtime < SETTLED_S:
            return _Reader(path)
        return _settled_reader(str(path.resolve()), st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    except Exception as err:  # the reader raises ValueError, struct.error, IndexError... on bad files
        raise GGUFError(f"{path} is not a readable GGUF file: {err}") from None


@functools.lru_cache(maxsize=4)
def _settled_reader(path: str, ino: int, size: int, mtime_ns: int, ctime_ns: int) -> gguf.GGUFReader:
    return _Reader(path)


def content_sha256(path: str | os.PathLike, skip_keys: Iterable[str] = (),
                   skip_tensor: Callable[[str], bool] = lambda name: False) -> str:
    """sha256 of what a GGUF holds rather than of its bytes: every key with its encoded value and every
    tensor's name, type, shape and data, in file order, leaving out `skip_keys` and the tensors
    `skip_tensor` names. Adding a key or a tensor moves offsets and counts, so the same model in a
    file with one more tensor has another file sha256 but, skipping that tensor, this digest."""
    reader = open_gguf(path)
    skip, h = set(skip_keys), hashlib.sha256()
    for f in reader.fields.values():
        if f.name.startswith("GGUF.") or f.name in skip:  # the header's version and counts
            continue
        h.update(b"key\0" + f.name.encode() + b"\0")
        for part in f.parts[2:]:  # after the name's length and bytes: the value's type and encoding
            h.update(part.tobytes())
    for t in reader.tensors:
        if skip_tensor(t.name):
            continue
        h.update(f"tensor\0{t.name}\0{int(t.tensor_type)}\0{tuple(int(n) for n in t.shape)}\0".encode())
        h.update(np.ascontiguousarray(t.data).view(np.uint8).reshape(-1))
    return h.hexdigest()


def field(reader: gguf.GGUFReader, key: str):
    f = reader.get_field(key)
    return None if f is None else f.contents()


def tensor_array(reader: gguf.GGUFReader, name: str) -> np.ndarray:
    """A tensor dequantized to float32 in numpy order (ggml ne reversed: (d_out, d_in) for a matmul weight)."""
    t = next((t for t in reader.tensors if t.name == name), None)
    if t is None:
        raise KeyError(f"no tensor {name!r}")
    return gguf.quants.dequantize(t.data, t.tensor_type).reshape(tuple(int(n) for n in t.shape[::-1]))


def copy_gguf(
    reader: gguf.GGUFReader,
    out: str | os.PathLike,
    add_keys: Callable[[gguf.GGUFWriter], None] = lambda w: None,
    tensor_data: Callable[[str, np.ndarray], np.ndarray] = lambda name, data: data,
    extra_tensors: Iterable[tuple[str, np.ndarray]] = (),
    drop_keys: Callable[[str], bool] = lambda k: False,
) -> Path:
    """Write `out` = the reader's file, plus keys/tensors, with optional raw tensor changes.

    `tensor_data(name, raw)` may return a replacement of the same dtype, shape and size.
    """
    out = Path(out)
    arch = field(reader, gguf.Keys.General.ARCHITECTURE)
    if arch is None:
        raise GGUFError("source GGUF has no general.architecture")
    with atomic_output(out) as tmp:
        _write(reader, tmp, arch, add_keys, tensor_data, list(extra_tensors), drop_keys)
    return out


def write_new_gguf(out: str | os.PathLike, arch: str, add_keys: Callable[[gguf.GGUFWriter], None],
                   tensors: Iterable[tuple[str, np.ndarray]]) -> Path:
    """Write a GGUF of these keys and tensors alone (through a temporary file renamed on success)."""
    out, tensors = Path(out), list(tensors)
    with atomic_output(out) as tmp:
        writer = gguf.GGUFWriter(tmp, arch=arch)
        add_keys(writer)
        for name, arr in tensors:
            writer.add_tensor_info(name, arr.shape, arr.dtype, arr.nbytes)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for _, arr in tensors:
            writer.write_tensor_data(arr)
        writer.close()
    return out


def copy_field(writer: gguf.GGUFWriter, f) -> None:
    """Copy one key (a ReaderField) with its value type, arrays with their element type."""
    vtype = f.types[0]
    writer.add_key_value(f.name, f.contents(), vtype, sub_type=f.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None)


def _write(reader, path, arch, add_keys, tensor_data, extra, drop_keys):
    writer = gguf.GGUFWriter(path, arch=arch, endianess=reader.endianess)
    alignment = field(reader, gguf.Keys.General.ALIGNMENT)
    if alignment is not None:
        writer.data_alignment = int(alignment)
    for f in reader.fields.values():
        if f.name == gguf.Keys.General.ARCHITECTURE or f.name.startswith("GGUF.") or drop_keys(f.name):
            continue  # written by GGUFWriter itself / virtual / dropped
        copy_field(writer, f)
    add_keys(writer)

    for t in reader.tensors:
        writer.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
    for name, arr in extra:
        writer.add_tensor_info(name, arr.shape, arr.dtype, arr.nbytes)

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for t in reader.tensors:
        data = tensor_data(t.name, t.data)
        if data.nbytes != t.data.nbytes:
            raise GGUFError(f"replacement for {t.name} has {data.nbytes} bytes, expected {t.data.nbytes}")
        writer.write_tensor_data(data, tensor_endianess=reader.endianess)
    for _, arr in extra:
        writer.write_tensor_data(arr)
    writer.close()
