"""The CUDA toolkit root assembled from PyPI's CUDA 13 wheels (`make setup-cuda`)."""

import ctypes
import subprocess

import pytest

from ridgefill.errors import RidgefillError
from ridgefill.upstream import cuda_toolkit

CUDA_H = """\
#define CUDAAPI
typedef int CUresult;
typedef unsigned long long CUdeviceptr;
#define cuMemAlloc cuMemAlloc_v2
CUresult CUDAAPI cuGetErrorString(CUresult error, const char **pStr);
CUresult CUDAAPI cuMemAlloc(CUdeviceptr *dptr, unsigned long bytesize);
typedef CUresult (CUDAAPI *CUhostFn)(void *userData);
"""


def _wheel_tree(root):
    for d in ("bin", "nvvm/bin", "include/cccl", "lib"):
        (root / d).mkdir(parents=True)
    (root / "bin" / "nvcc").write_text("")
    (root / "nvvm" / "bin" / "cicc").write_text("")
    (root / "include" / "cuda.h").write_text(CUDA_H)
    (root / "lib" / "libcudart.so.13").write_text("")
    return root


def test_driver_functions_are_the_exported_names():
    pre = "CUresult cuGetErrorString(CUresult e, const char **s);\nCUresult cuMemAlloc_v2(void *p);\n" \
          "typedef CUresult ( *CUhostFn)(void *userData);\nCUresult cuMemAlloc_v2(void *p);\n"
    assert cuda_toolkit.driver_functions(pre) == ["cuGetErrorString", "cuMemAlloc_v2"]
    src = cuda_toolkit.stub_source(["cuMemAlloc_v2"])
    assert "int cuMemAlloc_v2(void) { return 34; }" in src


def test_a_tree_that_is_not_the_wheels_is_refused(tmp_path):
    (tmp_path / "lib").mkdir()
    with pytest.raises(RidgefillError, match=r"missing bin/nvcc, nvvm/bin/cicc, include/cuda.h, include/cccl"):
        cuda_toolkit.complete(tmp_path)


@pytest.mark.slow
def test_complete_links_libraries_and_builds_the_driver_stub(tmp_path):
    root = cuda_toolkit.complete(_wheel_tree(tmp_path / "cu13"))
    lib = root / "lib"
    assert (lib / "libcudart.so").is_symlink() and (lib / "libcudart.so").resolve() == lib / "libcudart.so.13"
    stub = lib / "stubs" / "libcuda.so"
    dyn = subprocess.run(["readelf", "-d", "--dyn-syms", str(stub)], capture_output=True, text=True, check=True).stdout
    assert "[libcuda.so.1]" in dyn  # the driver's soname: binaries load the real driver at run time
    assert "cuMemAlloc_v2" in dyn and "cuGetErrorString" in dyn and "CUhostFn" not in dyn
    lib_stub = ctypes.CDLL(str(stub))
    assert lib_stub.cuMemAlloc_v2() == cuda_toolkit.CUDA_ERROR_STUB_LIBRARY
    assert cuda_toolkit.complete(root) == root  # a second run keeps what is there
