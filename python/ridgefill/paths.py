"""Where RidgeFill keeps things: the repository checkout and the download cache."""

from __future__ import annotations

import os
from pathlib import Path


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
