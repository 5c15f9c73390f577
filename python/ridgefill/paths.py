"""Where RidgeFill keeps things: the repository checkout, the download cache, the fork's binaries."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from .errors import MissingFile


def cache_dir() -> Path:
    """Download cache, outside git. Override with RIDGEFILL_CACHE."""
    root = os.environ.get("RIDGEFILL_CACHE")
    path = Path(root) if root else Path.home() / ".cache" / "ridgefill"
    path.mkdir(parents=True, exist_ok=True)
    return path


def repo_root() -> Path:
    """The source checkout this package lives in (python/ridgefill/ -> root)."""
    return Path(__file__).resolve().parents[2]


def build_dir() -> Path:
    """Ignored build folder of the checkout: the patched upstream tree and CMake output."""
    return Path(os.environ.get("RIDGEFILL_BUILD", repo_root() / "build"))


def upstream_tree() -> Path:
    """The patched upstream llama.cpp tree (a git tree: tag `upstream` + one commit per patch)."""
    return build_dir() / "llama.cpp"


def tool_path(name: str) -> Path:
    """A fork binary: next to the running interpreter (the venv), else on PATH."""
    here = Path(sys.executable).parent / name
    if here.exists():
        return here
    found = shutil.which(name)
    if not found:
        raise MissingFile(f"{name} not found; run `make setup`")
    return Path(found)
