"""Which model a GGUF is: architecture, layer count, width and file hash; whether it carries maps."""

from __future__ import annotations

import functools
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import gguf
import numpy as np

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


FNV_OFFSET, FNV_PRIME, MASK64 = 0xCBF29CE484222325, 0x100000001B3, (1 << 64) - 1


def fnv1a(data: bytes, h: int = FNV_OFFSET) -> int:
    """FNV-1a, 64 bit (llama_rf_fnv1a in the fork)."""
    for byte in data:
        h = ((h ^ byte) * FNV_PRIME) & MASK64
    return h


@dataclass(frozen=True)
class Fingerprints:
    """What a maps file records of its base, as the fork's loader computes it (src/llama-rf-maps.cpp): the data of
    every 1-D F32 tensor (norms, biases), which llama-quantize keeps, so another quantization of one model shares
    it; and every tensor's name, type and shape, which differ between quantizations."""

    weights_hash: str
    layout_hash: str


def fingerprints(reader: gguf.GGUFReader) -> Fingerprints:
    """Of the base's tensors: an augmented GGUF's maps left out."""
    weights, layout = FNV_OFFSET, FNV_OFFSET
    for t in sorted((t for t in reader.tensors if not keys.is_maps_tensor(t.name)), key=lambda t: t.name.encode()):
        shape = [int(n) for n in t.shape] + [1] * (4 - len(t.shape))  # ggml ne, padded to GGML_MAX_DIMS
        name = t.name.encode() + b"\0"
        layout = fnv1a(name + int(t.tensor_type).to_bytes(4, "little") +
                       b"".join(n.to_bytes(8, "little", signed=True) for n in shape), layout)
        if t.tensor_type == gguf.GGMLQuantizationType.F32 and all(n == 1 for n in shape[1:]):
            weights = fnv1a(name + np.ascontiguousarray(t.data).tobytes(), weights)
    return Fingerprints(f"{weights:016x}", f"{layout:016x}")


def model_shape(reader: gguf.GGUFReader) -> tuple[str, int, int, int]:
    """(architecture, layers the maps may cover, width, training context) of the model a file's maps are for: the
    file's own keys, or, in a maps file, those it records of its base. 0 where a key is missing or not a count."""
    arch = field(reader, "general.architecture")

    def count(key: str) -> int:
        v = field(reader, key)
        return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else 0

    if field(reader, gguf.Keys.General.TYPE) == gguf.GGUFType.ADAPTER:
        return (arch, count(keys.BASE_BLOCK_COUNT), count(keys.BASE_EMBEDDING_LENGTH),
                count(keys.BASE_CONTEXT_LENGTH))
    return (arch, count(f"{arch}.block_count") - count(f"{arch}.nextn_predict_layers"),
            count(f"{arch}.embedding_length"), count(f"{arch}.context_length"))
