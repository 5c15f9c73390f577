"""The pinned upstream llama.cpp and the fork's patch series.

The upstream tree is the `vendor/llama.cpp` of the llama-cpp-python sdist, pinned by
version and sha256. `prepare` turns it into a git work tree under build/llama.cpp with
one commit for upstream (tag `upstream`) and one commit per file in ggml-patches/.
Developers edit that tree, commit, and `export` writes the commits back as the series.

Only files a patch touches are rewritten when the series changes (git reset + git am),
so CMake's persistent build folder recompiles just those. `rebase` (rebase.py) moves the
series to another upstream.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

from .. import fetch
from .. import paths
from ..errors import RidgefillError

SDIST_SPEC = "llama-cpp-python==0.3.36"
SDIST_NAME = "llama_cpp_python-0.3.36.tar.gz"
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
SDIST_VENDOR = "llama_cpp_python-0.3.36/vendor/llama.cpp/"
UPSTREAM_COMMIT = "0c1e570"

_GIT_ENV = {
    "GIT_AUTHOR_NAME": "ridgefill",
    "GIT_AUTHOR_EMAIL": "ridgefill@localhost",
    "GIT_COMMITTER_NAME": "ridgefill",
    "GIT_COMMITTER_EMAIL": "ridgefill@localhost",
}
_BASE_DATE = "2026-01-01T00:00:00+00:00"
_STAMP = "ridgefill-series"


class UpstreamError(RidgefillError, RuntimeError):
    pass


def patches_dir() -> Path:
    return paths.repo_root() / "ggml-patches"


def tree_dir() -> Path:
    return paths.upstream_tree()


def fetch_sdist() -> Path:
    """The verified sdist in the cache, downloaded on first use or when corrupted."""
    return fetch.cached_package(SDIST_SPEC, SDIST_NAME, SDIST_SHA256, paths.cache_dir() / "upstream", sdist=True)


def series() -> list[Path]:
    return sorted(patches_dir().glob("*.patch"))


def series_hash() -> str:
    h = hashlib.sha256()
    for p in series():
        h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def _git(tree: Path, *args: str, check: bool = True, env: dict | None = None) -> str:
    full_env = {**os.environ, **_GIT_ENV, **(env or {})}
    proc = subprocess.run(["git", "-C", str(tree), *args], capture_output=True, text=True, env=full_env)
    if check and proc.returncode != 0:
        raise UpstreamError(f"git {' '.join(args)} failed:\n{proc.stderr.strip()}")
    return proc.stdout.strip()


def _unpack_base(tree: Path) -> None:
    """Fresh work tree: the sdist's vendor/llama.cpp committed and tagged `upstream`."""
    unpack_base(tree, fetch_sdist(), f"upstream llama.cpp {UPSTREAM_COMMIT} ({SDIST_SPEC} sdist)", SDIST_VENDOR)


def unpack_base(tree: Path, source: Path, message: str, prefix: str = "") -> None:
    """Fresh git work tree at `tree`: `source` committed as `message` and tagged `upstream`.

    `source` is a folder, or a tarball whose members under `prefix` form the tree.
    """
    staging = tree.with_name(tree.name + ".unpacking")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    if source.is_dir():
        _copy_source(source, staging)
    else:
        _extract(source, staging, prefix)
    if not any(staging.iterdir()):
        raise UpstreamError(f"{source} holds no files{f' under {prefix}' if prefix else ''}")
    _git(staging, "init", "-q", "-b", "main")
    _git(staging, "config", "core.autocrlf", "false")
    _git(staging, "add", "-A", "-f")
    date = {"GIT_AUTHOR_DATE": _BASE_DATE, "GIT_COMMITTER_DATE": _BASE_DATE}
    _git(staging, "commit", "-q", "--no-verify", "-m", message, env=date)
    _git(staging, "tag", "upstream")
    os.replace(staging, tree)


def tar_names(archive: Path) -> list[str]:
    with tarfile.open(archive) as tf:
        return [_tar_name(n) for n in tf.getnames()]


def _tar_name(name: str) -> str:
    while name.startswith("./"):
        name = name[2:]
    return "" if name == "." else name


def _extract(archive: Path, dest: Path, prefix: str) -> None:
    with tarfile.open(archive) as tf:
        keep = []
        for m in tf.getmembers():
            name = _tar_name(m.name)
            if not name.startswith(prefix):
                continue
            m.name = name[len(prefix):]
            if m.islnk():
                m.linkname = _tar_name(m.linkname)[len(prefix):]
            # a vendored tree is a submodule: its `.git` file points outside the sdist
            if m.name and m.name.split("/")[0] != ".git":
                keep.append(m)
        tf.extractall(dest, members=keep, filter="data")


def _copy_source(src: Path, dest: Path) -> None:
    """A checkout's tracked files (its build outputs stay behind), or a plain folder without `.git`."""
    if not (src / ".git").exists():
        shutil.copytree(src, dest, symlinks=True, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".git"))
        return
    for name in _git(src, "ls-files", "-z", "--cached").split("\0"):
        if name and ((src / name).is_file() or (src / name).is_symlink()):
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src / name, dest / name, follow_symlinks=False)


def _stamp_path(tree: Path) -> Path:
    return tree / ".git" / _STAMP


def _read_stamp(tree: Path) -> tuple[str, str] | None:
    try:
        series_h, head = _stamp_path(tree).read_text().split()
        return series_h, head
    except (OSError, ValueError):
        return None


def _write_stamp(tree: Path) -> None:
    _stamp_path(tree).write_text(f"{series_hash()} {_git(tree, 'rev-parse', 'HEAD')}\n")


def _require_clean(tree: Path, action: str) -> None:
    dirty = _git(tree, "status", "--porcelain", "--untracked-files=no")
    if dirty:
        raise UpstreamError(f"{tree} has uncommitted changes; commit them (then `export`) before {action}:\n{dirty}")


def status(tree: Path | None = None) -> str:
    tree = tree or tree_dir()
    if not (tree / ".git").is_dir():
        return "absent"
    stamp = _read_stamp(tree)
    head = _git(tree, "rev-parse", "HEAD")
    if stamp is None:
        return "unstamped"
    if stamp[1] != head:
        return "unexported-commits"
    if stamp[0] != series_hash():
        return "series-changed"
    return "up-to-date"


def prepare(tree: Path | None = None, force: bool = False) -> Path:
    """Make `tree` = pinned upstream + ggml-patches/*.patch, touching only what changed."""
    tree = tree or tree_dir()
    if not (tree / ".git").is_dir():
        shutil.rmtree(tree, ignore_errors=True)
        tree.parent.mkdir(parents=True, exist_ok=True)
        _unpack_base(tree)
    state = status(tree)
    if state == "up-to-date":
        return tree
    if state == "unexported-commits" and not force:
        raise UpstreamError(
            f"{tree} has commits that are not in ggml-patches/: run `python -m ridgefill.upstream export` "
            "to keep them, or `prepare --force` to drop them"
        )
    if not force:
        _require_clean(tree, "re-applying the series")
    _git(tree, "am", "--abort", check=False)
    _git(tree, "reset", "-q", "--hard", "upstream")
    for patch in series():
        proc = subprocess.run(["git", "-C", str(tree), "am", "-q", "--keep-cr", "--committer-date-is-author-date", str(patch)],
                              capture_output=True, text=True, env={**os.environ, **_GIT_ENV})
        if proc.returncode != 0:
            _git(tree, "am", "--abort", check=False)
            raise UpstreamError(f"{patch.name} does not apply to upstream {UPSTREAM_COMMIT}:\n{proc.stdout}{proc.stderr}")
    _write_stamp(tree)
    return tree


def export(tree: Path | None = None, out: Path | None = None) -> list[Path]:
    """Write the commits above `upstream` back to ggml-patches/ (or `out`) as the ordered series."""
    tree = tree or tree_dir()
    if not (tree / ".git").is_dir():
        raise UpstreamError(f"no upstream work tree at {tree}; run `prepare` first")
    _require_clean(tree, "exporting")
    out = out or patches_dir()
    out.mkdir(parents=True, exist_ok=True)
    staging = out / ".export"
    shutil.rmtree(staging, ignore_errors=True)
    _git(tree, "format-patch", "-q", "--zero-commit", "--no-signature", "-N", "-o", str(staging), "upstream..HEAD")
    for old in out.glob("*.patch"):
        old.unlink()
    written = []
    for p in sorted(staging.glob("*.patch")):
        written.append(out / p.name)
        os.replace(p, out / p.name)
    staging.rmdir()
    if out == patches_dir():
        _write_stamp(tree)
    return written


def build_commit() -> str:
    """A build identifier: upstream commit + a short hash of the patch series."""
    return f"{UPSTREAM_COMMIT}+rf.{series_hash()[:8]}"
