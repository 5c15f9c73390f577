"""Which model a GGUF is: architecture, layer count, width and file hash; whether it carries maps."""

from __future__ import annotations

import functools
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import gguf

from ..fetch import sha256_file
from . import keys
from .gguf_io import GGUFError, field, open_gguf


@dataclass(frozen=True)
class ModelIdentity:
    arch: str
    n_layer: int
    n_embd: int
    base_sha256: str  # sha256 of the base GGUF file

    def mismatch(self, other: "ModelIdentity") -> list[str]:
        return [f"{k}: {a!r} != {b!r}" for k, a, b in ((k, getattr(self, k), getattr(other, k)) for k in asdict(self)) if a != b]


def identity_of(path: str | os.PathLike, reader: gguf.GGUFReader | None = None) -> ModelIdentity:
    """Model identity of a GGUF: arch, layer count, width and file sha256."""
    reader = reader or open_gguf(path)
    arch = field(reader, "general.architecture")
    if arch is None:
        raise GGUFError(f"{path}: no general.architecture key")
    n_layer = field(reader, f"{arch}.block_count")
    n_embd = field(reader, f"{arch}.embedding_length")
    if n_layer is None or n_embd is None:
        raise GGUFError(f"{path}: missing {arch}.block_count or {arch}.embedding_length")
    return ModelIdentity(arch, int(n_layer), int(n_embd), file_sha256(path))


def file_sha256(path: str | os.PathLike) -> str:
    """sha256 of a file, hashed once per process while its inode, size and mtime stay (a fit checks and then
    packs the same base: a 27B GGUF is tens of seconds of hashing)."""
    st = os.stat(path)
    return _sha256(str(Path(path).resolve()), st.st_ino, st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _sha256(path: str, ino: int, size: int, mtime_ns: int) -> str:
    return sha256_file(Path(path))


def has_maps(reader: gguf.GGUFReader) -> bool:
    return any(t.name.endswith(".ridge_map.weight") for t in reader.tensors) or any(
        k.startswith(keys.PREFIX) for k in reader.fields)
