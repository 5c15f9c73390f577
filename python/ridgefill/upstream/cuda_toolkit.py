"""A CUDA toolkit root from PyPI's CUDA 13 wheels, complete enough for CMake's FindCUDAToolkit.

The wheels (nvidia-cuda-nvcc, -crt, nvidia-nvvm, -cuda-runtime, -cublas, -cuda-cccl) install one tree,
`site-packages/nvidia/cu13`, with nvcc, cicc, the headers and the versioned shared libraries. Two things a
toolkit install has are missing: the unversioned library names the linker looks for (`libcudart.so`), and
`lib/stubs/libcuda.so`, the driver's link-time stub (the driver itself comes with a GPU's driver install).
The stub is generated from the toolkit's own `cuda.h`: every driver function returns
CUDA_ERROR_STUB_LIBRARY, as NVIDIA's stub does, and its soname is the driver's, so a binary linked
against it loads the real `libcuda.so.1` at run time. (The CUDA 12 wheels ship ptxas but no nvcc.)
"""

from __future__ import annotations

import re
import subprocess
import sysconfig
from pathlib import Path

from ..errors import RidgefillError

CUDA_ERROR_STUB_LIBRARY = 34
_DECL = re.compile(r"^CUresult\s+(cu[A-Za-z0-9_]+)\s*\(", re.M)


def default_root() -> Path:
    return Path(sysconfig.get_paths()["purelib"]) / "nvidia" / "cu13"


def driver_functions(preprocessed_cuda_h: str) -> list[str]:
    """The driver API's exported names, as `cuda.h` declares them once its macros are expanded
    (`cuMemAlloc` is exported as `cuMemAlloc_v2`)."""
    return sorted(set(_DECL.findall(preprocessed_cuda_h)))


def stub_source(names: list[str]) -> str:
    body = "".join(f"int {n}(void) {{ return {CUDA_ERROR_STUB_LIBRARY}; }}\n" for n in names)
    return "/* generated from cuda.h by ridgefill.upstream.cuda_toolkit: the driver's link-time stub */\n" + body


def _run(cmd: list[str], what: str) -> str:
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise RidgefillError(f"{what} failed ({' '.join(cmd)}):\n{res.stderr.strip()}")
    return res.stdout


def _link_unversioned(lib: Path) -> None:
    for versioned in sorted(lib.glob("lib*.so.*")):
        plain = lib / (versioned.name.split(".so.")[0] + ".so")
        if not plain.exists():
            plain.symlink_to(versioned.name)


def _write_stub(root: Path, cc: str) -> Path:
    pre = _run([cc, "-E", "-P", f"-I{root / 'include'}", str(root / "include" / "cuda.h")], "preprocessing cuda.h")
    names = driver_functions(pre)
    if not names:
        raise RidgefillError(f"no driver functions found in {root / 'include' / 'cuda.h'}")
    stubs = root / "lib" / "stubs"
    stubs.mkdir(exist_ok=True)
    src = stubs / "libcuda-stub.c"
    src.write_text(stub_source(names))
    out = stubs / "libcuda.so"
    _run([cc, "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(out), str(src)], "building the libcuda stub")
    return out


def complete(root: Path | None = None, cc: str = "cc") -> Path:
    """Make `root` (default: this interpreter's nvidia/cu13) usable as CUDAToolkit_ROOT; returns it."""
    root = (root or default_root()).resolve()
    missing = [p for p in ("bin/nvcc", "nvvm/bin/cicc", "include/cuda.h", "include/cccl", "lib")
               if not (root / p).exists()]
    if missing:
        raise RidgefillError(f"{root} is not a CUDA 13 wheel tree (missing {', '.join(missing)}); "
                             "install nvidia-cuda-nvcc, nvidia-cuda-crt, nvidia-nvvm, nvidia-cuda-runtime, "
                             "nvidia-cublas and nvidia-cuda-cccl")
    _link_unversioned(root / "lib")
    if not (root / "lib" / "stubs" / "libcuda.so").exists():
        _write_stub(root, cc)
    return root


def add_command(sub) -> None:
    p = sub.add_parser("cuda-toolkit", help="complete PyPI's CUDA 13 wheels into a toolkit root; print it")
    p.add_argument("--root", type=Path, help="the wheels' tree (default: this interpreter's nvidia/cu13)")


def run(args) -> int:
    print(complete(args.root))
    return 0
