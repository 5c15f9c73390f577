"""`check-series`: the series is bisect-safe when every prefix of it builds.

A fresh tree of the pinned upstream gets the patches one at a time with
`git am`; after each, libllama and the tools are built in one persistent CMake folder (the
project's own CMakeLists pointed at that tree), so each step recompiles only what the patch
touched and ccache serves repeats. The first patch that does not apply or does not build is
named with the compiler's last lines.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .. import paths
from . import tree as upstream
from .tree import UpstreamError, _git

TARGETS = ("llama", "llama-server", "llama-bench", "llama-perplexity", "llama-quantize", "ggml-rpc-server")


@dataclass
class Step:
    patch: str
    seconds: float
    ok: bool
    detail: str = ""


class SeriesBroken(UpstreamError):
    pass


def default_dir() -> Path:
    return paths.build_dir() / "series-check"


def fresh_tree(tree: Path, make_base=upstream._unpack_base) -> None:
    """`tree` = upstream alone (tag `upstream`; `make_base(tree)` makes it), reused when already there."""
    if (tree / ".git").is_dir():
        _git(tree, "am", "--abort", check=False)
        _git(tree, "reset", "-q", "--hard", "upstream")
        _git(tree, "clean", "-q", "-fdx")
        return
    shutil.rmtree(tree, ignore_errors=True)
    tree.parent.mkdir(parents=True, exist_ok=True)
    make_base(tree)


def configure(tree: Path, build: Path, standalone: bool = False) -> None:
    """The project's CMake over `tree` (its flags and targets); `standalone`: the tree's own CMakeLists."""
    if (build / "build.ninja").exists():
        return
    cmd = ["cmake", "-S", str(tree), "-B", str(build), "-G", "Ninja"]
    if not standalone:
        import pybind11

        cmd = ["cmake", "-S", str(paths.repo_root()), "-B", str(build), "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
               f"-DRIDGEFILL_UPSTREAM_DIR={tree}", "-DRIDGEFILL_PREPARE_UPSTREAM=OFF",
               "-DRIDGEFILL_HOST_OPT=-O1",  # a build check: host code at -O1 compiles 30-50 % faster
               f"-DPython_EXECUTABLE={sys.executable}", f"-Dpybind11_DIR={pybind11.get_cmake_dir()}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(paths.repo_root() / "python")})
    if proc.returncode != 0:
        raise SeriesBroken(f"CMake configure of {tree} failed:\n{_tail(proc.stdout + proc.stderr)}")


def build(build_dir: Path, jobs: int, targets=TARGETS) -> subprocess.CompletedProcess:
    # paths relative to the repo, so that ccache serves this tree's objects to later checks too
    env = {**os.environ, "CCACHE_BASEDIR": str(paths.repo_root())}
    return subprocess.run(["cmake", "--build", str(build_dir), "-j", str(jobs), "--target", *targets],
                          capture_output=True, text=True, env=env)


def _tail(text: str, n: int = 40) -> str:
    lines = [l for l in text.splitlines() if l.strip()]
    errors = [l for l in lines if " error" in l or "error:" in l]
    return "\n".join((errors[:10] + ["..."] if errors else []) + lines[-n:])


def check(series: list[Path], workdir: Path | None = None, jobs: int | None = None, progress=print,
          make_base=upstream._unpack_base, standalone: bool = False, targets=TARGETS) -> list[Step]:
    """Apply `series` to a fresh upstream one patch at a time, building after each; raise at the first failure.

    `make_base`, `standalone` and `targets` let a test check a small tree with its own CMakeLists.
    """
    workdir = workdir or default_dir()
    jobs = jobs or os.cpu_count() or 2
    tree, build_dir = workdir / "llama.cpp", workdir / "cmake"
    fresh_tree(tree, make_base)
    steps = []
    t0 = time.perf_counter()
    configure(tree, build_dir, standalone)
    proc = build(build_dir, jobs, targets)
    steps.append(Step("upstream", time.perf_counter() - t0, proc.returncode == 0, _tail(proc.stdout)))
    progress(f"upstream: built in {steps[-1].seconds:.0f} s")
    if proc.returncode != 0:
        raise SeriesBroken(f"the upstream tree itself does not build:\n{steps[-1].detail}")
    for i, patch in enumerate(series, 1):
        t = time.perf_counter()
        am = subprocess.run(["git", "-C", str(tree), "am", "-q", "--keep-cr", str(patch)], capture_output=True, text=True,
                            env={**os.environ, **upstream._GIT_ENV})
        if am.returncode != 0:
            _git(tree, "am", "--abort", check=False)
            raise SeriesBroken(f"[{i}/{len(series)}] {patch.name} does not apply:\n{am.stdout}{am.stderr}")
        proc = build(build_dir, jobs, targets)
        step = Step(patch.name, time.perf_counter() - t, proc.returncode == 0, _tail(proc.stdout + proc.stderr))
        steps.append(step)
        progress(f"[{i}/{len(series)}] {patch.name}: {'builds' if step.ok else 'DOES NOT BUILD'} ({step.seconds:.0f} s)")
        if not step.ok:
            raise SeriesBroken(f"{patch.name} is the first patch that does not build:\n{step.detail}")
    progress(f"every prefix of the {len(series)} patches builds ({time.perf_counter() - t0:.0f} s in all)")
    return steps


def add_command(sub) -> None:
    c = sub.add_parser("check-series", help="apply the series patch by patch to a fresh upstream and build after each")
    c.add_argument("--patches", type=Path, help="a folder of *.patch (default: ggml-patches/)")
    c.add_argument("--workdir", type=Path, help="tree and build folder (default: build/series-check)")
    c.add_argument("-j", "--jobs", type=int)


def run(args) -> int:
    series = sorted(args.patches.glob("*.patch")) if args.patches else upstream.series()
    if not series:
        raise UpstreamError(f"no *.patch in {args.patches or upstream.patches_dir()}")
    check(series, args.workdir, args.jobs)
    return 0
