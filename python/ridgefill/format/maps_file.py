"""Maps files and augmented GGUFs into each other, at the GGUF level: the maps' tensors and ridgefill.* keys
move byte for byte, so `unpack` then `pack` gives back the augmented GGUF it started from."""

from __future__ import annotations

import functools
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import gguf

from .gguf_io import GGUFError, copy_field, copy_gguf, field, open_gguf, write_new_gguf
from .identity import Fingerprints, ModelIdentity, fingerprints, has_maps, identity_of
from .keys import (ADAPTER_TYPE, BASE_BLOCK_COUNT, BASE_EMBEDDING_LENGTH, BASE_LAYOUT_HASH, BASE_VOCAB_SIZE,
                   BASE_WEIGHTS_HASH, PREFIX, SPLIT_LAYER, is_maps_tensor)
from .write import PackError, add_maps_file_header

BASE_PREFIX = PREFIX + "base."


class OtherBase(PackError):
    pass


def is_maps_file(reader: gguf.GGUFReader) -> bool:
    return field(reader, gguf.Keys.General.TYPE) == gguf.GGUFType.ADAPTER and \
        field(reader, gguf.Keys.Adapter.TYPE) == ADAPTER_TYPE


def unpack(augmented: str | os.PathLike, out: str | os.PathLike) -> Path:
    """The maps file of an augmented GGUF: its maps and ridgefill.* keys, and its base's fingerprints (every tensor
    of the base is in it, byte for byte)."""
    reader = open_gguf(augmented)
    if is_maps_file(reader) or not has_maps(reader) or field(reader, SPLIT_LAYER) is None:
        raise PackError(f"{augmented} is not an augmented GGUF (a model with RidgeFill maps in it)")
    identity = identity_of(augmented, reader)

    def add_keys(writer: gguf.GGUFWriter) -> None:
        add_maps_file_header(writer, reader, identity)
        for f in reader.fields.values():
            if f.name.startswith(PREFIX):
                copy_field(writer, f)

    return write_new_gguf(out, identity.arch, add_keys, _raw_tensors(reader))


def pack(base: str | os.PathLike, maps_file: str | os.PathLike, out: str | os.PathLike) -> Path:
    """The augmented GGUF of a base and a maps file fitted for it (another quantization of it: with a warning)."""
    base, out = Path(base), Path(out)
    if out.resolve() == base.resolve():
        raise PackError(f"refusing to write the augmented GGUF over its base {base}")
    maps = open_gguf(maps_file)
    check_base(maps, maps_file, base)
    reader = open_gguf(base)

    def add_keys(writer: gguf.GGUFWriter) -> None:
        for f in maps.fields.values():
            if f.name.startswith(PREFIX) and not f.name.startswith(BASE_PREFIX):
                copy_field(writer, f)

    return copy_gguf(reader, out, add_keys=add_keys, extra_tensors=_raw_tensors(maps))


def check_base(maps: gguf.GGUFReader, maps_path, base_path) -> None:
    """What the fork's loader checks of a maps file beside a model, with the same verdicts."""
    if not is_maps_file(maps):
        raise PackError(f"{maps_path} is not a RidgeFill maps file (general.type = adapter, adapter.type = {ADAPTER_TYPE})")
    base = base_facts(base_path)
    if base.has_maps:
        raise PackError(f"{base_path} already carries RidgeFill maps: give the base model")
    V = gguf.GGUFValueType
    expected = {"general.architecture": (V.STRING, base.identity.arch), BASE_BLOCK_COUNT: (V.UINT32, base.identity.n_layer),
                BASE_EMBEDDING_LENGTH: (V.UINT32, base.identity.n_embd), BASE_VOCAB_SIZE: (V.UINT32, base.n_vocab)}
    for key, (vtype, value) in expected.items():
        if _value(maps, key, vtype, maps_path) != value:
            raise OtherBase(f"{maps_path}: fitted for another model: {key} = {field(maps, key)}, {base_path} has {value}")
    prints = base.fingerprints
    if _value(maps, BASE_WEIGHTS_HASH, V.STRING, maps_path) != prints.weights_hash:
        raise OtherBase(f"{maps_path}: fitted for other weights of this shape ({BASE_WEIGHTS_HASH} = "
                        f"{field(maps, BASE_WEIGHTS_HASH)}, {base_path}'s is {prints.weights_hash})")
    if _value(maps, BASE_LAYOUT_HASH, V.STRING, maps_path) != prints.layout_hash:
        warnings.warn(f"{maps_path} was fitted on another file of this model (its tensor types differ: another "
                      f"quantization?); measure the maps on {base_path}", stacklevel=2)


@dataclass(frozen=True)
class BaseFacts:
    identity: ModelIdentity
    n_vocab: int
    fingerprints: Fingerprints
    has_maps: bool


def base_facts(path) -> BaseFacts:
    """What a maps file is checked against, read once per file version (a base's vocabulary takes seconds to parse)."""
    st = os.stat(path)
    return _base_facts(str(Path(path).resolve()), st.st_ino, st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _base_facts(path: str, ino: int, size: int, mtime_ns: int) -> BaseFacts:
    reader = open_gguf(path)
    tokens = reader.get_field(gguf.Keys.Tokenizer.LIST)
    return BaseFacts(identity_of(path, reader), len(tokens.data) if tokens else 0, fingerprints(reader), has_maps(reader))


def _value(reader: gguf.GGUFReader, key: str, vtype, path):
    """A key's value, refused as the loader refuses it when missing or of another type."""
    f = reader.get_field(key)
    if f is None:
        raise PackError(f"{path}: {key} is missing")
    if f.types[0] != vtype:
        raise PackError(f"{path}: {key} has type {f.types[0].name}, expected {vtype.name}")
    return f.contents()


def _raw_tensors(reader: gguf.GGUFReader) -> list:
    """(name, data) of the RidgeFill tensors, their bytes as stored (F16 or F32: numpy's dtype names the type)."""
    out = [(t.name, t.data) for t in reader.tensors if is_maps_tensor(t.name)]
    if len(out) != len(reader.tensors) and is_maps_file(reader):
        other = next(t.name for t in reader.tensors if not is_maps_tensor(t.name))
        raise GGUFError(f"tensor {other} is not a RidgeFill map (a maps file carries blk.N.ridge_* only)")
    return out
