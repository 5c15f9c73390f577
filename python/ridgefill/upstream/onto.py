"""The upstream a rebase goes onto: a llama.cpp folder, a tarball of one, or a llama-cpp-python version."""

from __future__ import annotations

import re
import tarfile
from dataclasses import dataclass
from pathlib import Path

from .. import fetch, paths
from . import tree as upstream
from .tree import UpstreamError

_VERSION = re.compile(r"\d+(\.\d+)+((a|b|rc|\.post|\.dev)\d+)?")


@dataclass
class Source:
    path: Path  # a folder, or a tarball whose members under `prefix` are the tree
    prefix: str
    label: str


def resolve_source(spec: str) -> Source:
    """`spec`: a llama.cpp folder (or unpacked sdist), a .tar.gz/.tgz of either, or an sdist version."""
    path = Path(spec).expanduser()
    if path.is_dir():
        vendored = path / "vendor" / "llama.cpp"
        return Source(vendored if vendored.is_dir() else path, "", str(path))
    if path.is_file():
        if not path.name.endswith((".tar.gz", ".tgz")):
            raise UpstreamError(f"--onto {spec}: a file must be a .tar.gz or .tgz tarball")
        return _tarball(path, path.name)
    if _VERSION.fullmatch(spec):
        return _tarball(_fetch_version(spec), f"llama-cpp-python=={spec} sdist")
    raise UpstreamError(f"--onto {spec!r} is neither an existing folder or .tar.gz/.tgz tarball "
                        "nor a llama-cpp-python version like 0.3.34")


def _tarball(path: Path, label: str) -> Source:
    try:
        names = upstream.tar_names(path)
    except (OSError, tarfile.TarError) as err:
        raise UpstreamError(f"{path}: not a readable tarball ({err})") from None
    return Source(path, _tar_prefix(names), label)


def _tar_prefix(names: list[str]) -> str:
    """An sdist's vendor/llama.cpp/, else the one folder wrapping everything, else the top."""
    tops = {n.split("/", 1)[0] for n in names if n}
    wrapper = f"{tops.pop()}/" if len(tops) == 1 and any("/" in n for n in names) else ""
    for prefix in ("vendor/llama.cpp/", wrapper + "vendor/llama.cpp/"):
        if any(n.startswith(prefix) for n in names):
            return prefix
    return wrapper


def _fetch_version(version: str) -> Path:
    if upstream.SDIST_SPEC == f"llama-cpp-python=={version}":
        return upstream.fetch_sdist()
    dest = paths.cache_dir() / "upstream"
    path = dest / f"llama_cpp_python-{version}.tar.gz"
    if not path.is_file():
        path = fetch.pip_download(f"llama-cpp-python=={version}", dest, sdist=True)
    print(f"{path.name}: sha256 {fetch.sha256_file(path)} (not pinned yet)")
    return path
