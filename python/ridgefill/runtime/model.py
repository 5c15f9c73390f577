"""A loaded GGUF model (ridgefill._core.Model), the library's version and its RPC servers."""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Sequence

import numpy as np

from .. import _core
from ..errors import InputError, LoadError, MissingFile

from .context import Context

GGUF_MAGIC = b"GGUF"
ALL_LAYERS = -1  # n_gpu_layers as llama.cpp's tools default it: every layer on the devices there are



def version() -> str:
    """libllama's version string and build commit, as the tools' --version print them: the fork's version ends in
    '+ridgefill', its commit names the upstream commit and the patch series' hash ('0c1e570+rf.c789fdf9')."""
    return f"{_core.version()} (commit {_core.build_commit()})"


def devices() -> list[tuple[str, str, str]]:
    """The backend devices models load onto, as llama.cpp lists them: (name, description, type), type one of
    cpu, gpu, igpu, accel. A Vulkan build lists Mesa's software driver only when GGML_VK_VISIBLE_DEVICES names it."""
    return [tuple(d) for d in _core.devices()]


def add_rpc_servers(endpoints: str) -> None:
    """Register ggml-rpc-servers ('host:port,...') for the models loaded afterwards; each must be listening."""
    import socket

    eps = [e.strip() for e in endpoints.split(",") if e.strip()]
    for ep in eps:
        host, _, port = ep.rpartition(":")
        if not host or not port.isdigit():
            raise InputError(f"rpc endpoint {ep!r} is not host:port")
        try:
            socket.create_connection((host, int(port)), timeout=5).close()
        except OSError as err:
            raise InputError(f"no rpc-server listening at {ep}: {err}") from None
    try:
        _core.add_rpc_servers(eps)
    except (RuntimeError, ValueError) as err:
        raise LoadError(str(err)) from None


def _check_gguf_file(path: Path, kind: str = "model") -> None:
    if not path.exists():
        raise MissingFile(f"{kind} file not found: {path}")
    if not path.is_file():
        raise InputError(f"{kind} path is not a file: {path}")
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != GGUF_MAGIC:
        raise InputError(f"{path} is not a GGUF file (magic {magic!r}, expected {GGUF_MAGIC!r})")


class Model:
    """A loaded GGUF model. Cheap to share between contexts."""

    def __init__(self, path: str | os.PathLike, n_gpu_layers: int = ALL_LAYERS, use_mmap: bool = True,
                 rpc: str | None = None, maps: str | os.PathLike | None = None):
        """n_gpu_layers: layers (and their maps) on the GPU or RPC devices, -1 (llama.cpp's default) every one of
        them, 0 none; on a CPU-only build there are no devices and every layer stays on the CPU.
        rpc: 'host:port,...' of ggml-rpc-servers, registered as devices first.
        maps: a maps GGUF beside the model (`fit --maps-only`), loaded with it (llama-server's --ridgefill-maps)."""
        self.path = Path(path)
        self.maps = Path(maps) if maps else None
        _check_gguf_file(self.path)
        if self.maps:
            _check_gguf_file(self.maps, "maps")
        if rpc:
            add_rpc_servers(rpc)
        try:
            self._m = _core.Model(str(self.path), n_gpu_layers=n_gpu_layers, use_mmap=use_mmap,
                                  maps=str(self.maps or ""))
        except RuntimeError as err:
            raise LoadError(str(err)) from None
        for line in self._m.load_warnings.splitlines():
            if line.startswith("llama_rf_"):  # the fork's word on the maps (another quantization of the base)
                warnings.warn(line.split(": ", 1)[-1], UserWarning, stacklevel=2)
        self._meta: dict[str, str] | None = None

    @property
    def metadata(self) -> dict[str, str]:
        if self._meta is None:
            self._meta = dict(self._m.metadata())
        return self._meta

    @property
    def source(self) -> str:
        """What was loaded: the file, or the base and the maps file beside it."""
        return str(self.path) if self.maps is None else f"{self.path} + {self.maps}"

    @property
    def arch(self) -> str:
        return self.metadata.get("general.architecture", "")

    n_layer = property(lambda self: self._m.n_layer)
    n_embd = property(lambda self: self._m.n_embd)
    n_head = property(lambda self: self._m.n_head)
    n_head_kv = property(lambda self: self._m.n_head_kv)
    n_vocab = property(lambda self: self._m.n_vocab)
    n_ctx_train = property(lambda self: self._m.n_ctx_train)
    bos = property(lambda self: self._m.bos)
    eos = property(lambda self: self._m.eos)
    add_bos = property(lambda self: self._m.add_bos)  # whether the vocab starts sequences with BOS
    # ridgefill.* metadata (split layer 0 = no maps)
    rf_split_layer = property(lambda self: self._m.rf_split_layer)
    rf_sink_rows = property(lambda self: self._m.rf_sink_rows)
    rf_tail_rows = property(lambda self: self._m.rf_tail_rows)
    rf_has_route = property(lambda self: self._m.rf_has_route)  # routing statistics on the split layer
    rf_route_fraction = property(lambda self: self._m.rf_route_fraction)  # ridgefill.route_fraction (0: none)

    @property
    def head_dim(self) -> int:
        """Width of one key head (the K cache holds n_head_kv of them per row)."""
        key = self.metadata.get(f"{self.arch}.attention.key_length")
        return int(key) if key else self.n_embd // self.n_head

    def info(self) -> dict:
        return {
            "path": str(self.path),
            "maps": str(self.maps) if self.maps else None,
            "arch": self.arch,
            "desc": self._m.desc,
            "n_layer": self.n_layer,
            "n_embd": self.n_embd,
            "n_head": self.n_head,
            "n_head_kv": self.n_head_kv,
            "n_vocab": self.n_vocab,
            "n_ctx_train": self.n_ctx_train,
            "n_params": self._m.n_params,
            "size_bytes": self._m.size,
            "metadata_keys": sorted(self.metadata),
        }

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False) -> np.ndarray:
        return self._m.tokenize(text, add_special=add_special, parse_special=parse_special)

    def detokenize(self, tokens: Sequence[int] | np.ndarray, special: bool = False) -> str:
        return self._m.detokenize_bytes(np.asarray(tokens, dtype=np.int32), special=special).decode("utf-8", "replace")

    def context(self, **kwargs) -> Context:
        return Context(self, **kwargs)
