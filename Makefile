# RidgeFill developer entry points. `make demo` and `make test` work from a fresh clone.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

PYTHON  ?= python3
VENV    := .venv
PY      := $(VENV)/bin/python
PIP     := $(PY) -m pip --disable-pip-version-check
EXTRAS  ?= test,hf
PYTEST_ARGS ?=
# HOST_OPT=-O1 compiles llama.cpp's host-side code (server, vocabulary, loader) at -O1 for a faster cold build
# while developing; empty (the default) builds everything with upstream's release flags (docs/development.md)
HOST_OPT ?=

# the editable install maps each module to its file: a module added, moved or removed needs a reinstall
MODULES := $(VENV)/.modules
$(shell mkdir -p $(VENV) && find python/ridgefill -name '*.py' | LC_ALL=C sort > $(MODULES).new && \
  (cmp -s $(MODULES).new $(MODULES) || mv $(MODULES).new $(MODULES)); rm -f $(MODULES).new)
# a HOST_OPT other than the last build's rebuilds
$(shell echo "$(HOST_OPT)" > $(VENV)/.host-opt.new && (cmp -s $(VENV)/.host-opt.new $(VENV)/.host-opt || \
  mv $(VENV)/.host-opt.new $(VENV)/.host-opt); rm -f $(VENV)/.host-opt.new)
BUILD_INPUTS := pyproject.toml CMakeLists.txt $(wildcard cpp/*) $(wildcard ggml-patches/*.patch) \
  $(wildcard python/ridgefill/upstream/*.py) $(MODULES) $(VENV)/.host-opt

.PHONY: setup deps test test-fast demo patches-apply patches-export check-series clean setup-vulkan test-vulkan setup-cuda

all: setup

$(VENV)/.deps: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# build requirements (the build runs without isolation so the build folder persists)
	$(PIP) install -q scikit-build-core==0.11.6 pybind11==3.0.1 ninja
	touch $@

# Fetch + verify + patch upstream, then build libllama, llama-server, llama-bench and
# ridgefill._core in the persistent build/cmake folder (ccache when present). The old editable
# install's module map goes first: at configure time it would shadow python/ for moved modules.
$(VENV)/.installed: $(VENV)/.deps $(BUILD_INPUTS)
	@start=$$(date +%s); \
	rm -f $(VENV)/lib/python*/site-packages/_ridgefill_editable.pth; \
	$(PIP) install -q --no-build-isolation -C cmake.define.RIDGEFILL_HOST_OPT="$(HOST_OPT)" -e ".[$(EXTRAS)]"; \
	echo "setup: build + install took $$(( $$(date +%s) - start )) s"
	touch $@

setup: $(VENV)/.installed
	@$(VENV)/bin/llama-server --version 2>&1 | head -1

# The whole suite (what CI runs).
test: setup
	$(PY) -m ridgefill model fetch smollm2-135m >/dev/null
	$(PY) -m pytest -q -rs --durations=25 $(PYTEST_ARGS)

# Seconds, not minutes: skips model loads, subprocess tools and transformers.
test-fast: setup
	$(PY) -m pytest -q -m "not slow" $(PYTEST_ARGS)

# MODEL=<registry name> (ridgefill model list) runs it on another model, e.g. MODEL=qwen2.5-coder-1.5b;
# NGL=N puts N layers on a GPU build's devices (-ngl; default all of them, as llama.cpp's tools)
demo: setup
	$(PY) -m ridgefill demo $(if $(MODEL),--model $(MODEL)) $(if $(NGL),--n-gpu-layers $(NGL))

# Patch workflow: build/llama.cpp is a git tree (tag `upstream` + one commit per patch).
patches-apply: $(VENV)/.deps
	PYTHONPATH=python $(PY) -m ridgefill.upstream prepare

patches-export:
	PYTHONPATH=python $(PY) -m ridgefill.upstream export

# Bisect safety: every prefix of the series builds (fresh upstream, one build per patch), then the fast suite.
check-series: setup
	@start=$$(date +%s); \
	PYTHONPATH=python $(PY) -m ridgefill.upstream check-series; \
	$(PY) -m pytest -q -m "not slow"; \
	echo "check-series: $$(( $$(date +%s) - start )) s"

# A variant of the package in its own venv and build folder: $(1) venv, $(2) build folder, $(3) packages
# its build needs, $(4) shell words run first in the build's shell, $(5) pip -C settings.
define install-variant
	$(PYTHON) -m venv $(1)
	$(1)/bin/python -m pip install -q --disable-pip-version-check scikit-build-core==0.11.6 pybind11==3.0.1 ninja $(3)
	@start=$$(date +%s); $(4) \
	rm -f $(1)/lib/python*/site-packages/_ridgefill_editable.pth; \
	$(1)/bin/python -m pip install -q --disable-pip-version-check --no-build-isolation \
	  -C build-dir=$(2) $(5) -e ".[test]"; \
	echo "$(1): build + install took $$(( $$(date +%s) - start )) s"
	touch $(1)/.installed
endef

# The same package built with llama.cpp's Vulkan backend, to run the fill, routing and lag graphs on a
# GPU-style backend: Mesa's software driver (lavapipe) where there is no GPU.
# Not part of `make test` (a cold build took 10-39 min on 2 cores beside other work; docs/backend-ops.md).
VK_VENV := .venv-vulkan
VK_PKGS := mesa-vulkan-drivers glslc libvulkan-dev spirv-headers
$(VK_VENV)/.installed: $(BUILD_INPUTS)
	@dpkg -s $(VK_PKGS) >/dev/null 2>&1 || { apt-get update -q && apt-get install -y -q $(VK_PKGS); }
	$(call install-variant,$(VK_VENV),build/vulkan,,,-C cmake.define.GGML_VULKAN=ON)

setup-vulkan: $(VK_VENV)/.installed

# Vulkan against the CPU: exactness constructions, the server, and the fill graph's backend splits.
test-vulkan: setup-vulkan
	$(VK_VENV)/bin/python -m ridgefill model fetch smollm2-135m >/dev/null
	GGML_VK_VISIBLE_DEVICES=$${GGML_VK_VISIBLE_DEVICES-0} XDG_RUNTIME_DIR=$${XDG_RUNTIME_DIR-/tmp} \
	  $(VK_VENV)/bin/python -m pytest -q -rs -m vulkan $(PYTEST_ARGS)

# The same package built with CUDA for sm_80 and sm_90 (A100, H100/H200), with nvcc, the headers and
# the libraries from PyPI's CUDA 13 wheels (no GPU needed to compile; docs/backend-ops.md#cuda-build).
# Not part of `make test`: a cold build took 47 min on 2 cores (docs/backend-ops.md#cuda-build).
CU_VENV := .venv-cuda
CU_PKGS := nvidia-cuda-nvcc==13.5.37 nvidia-cuda-crt==13.5.37 nvidia-nvvm==13.5.37 \
  nvidia-cuda-runtime==13.5.37 nvidia-cublas==13.10.0.20 nvidia-cuda-cccl==13.3.5.0.6
CU_ROOT  = root=$$(PYTHONPATH=python $(CU_VENV)/bin/python -m ridgefill.upstream cuda-toolkit); \
  export CUDAToolkit_ROOT=$$root CUDACXX=$$root/bin/nvcc;
$(CU_VENV)/.installed: $(BUILD_INPUTS)
	$(call install-variant,$(CU_VENV),build/cuda,$(CU_PKGS),$(CU_ROOT),-C cmake.define.GGML_CUDA=ON)

# Where no GPU driver is installed, the driver's stub stands in for libcuda.so.1: the tools load and find no device.
setup-cuda: $(CU_VENV)/.installed
	@root=$$(PYTHONPATH=python $(CU_VENV)/bin/python -m ridgefill.upstream cuda-toolkit); dir=$$(mktemp -d); \
	ldconfig -p | grep "libcuda.so.1 " >/dev/null || ln -s $$root/lib/stubs/libcuda.so $$dir/libcuda.so.1; \
	LD_LIBRARY_PATH=$$dir $(CU_VENV)/bin/llama-server --version 2>&1 | sed -n 1p; \
	LD_LIBRARY_PATH=$$dir $(CU_VENV)/bin/llama-server --list-devices 2>&1 | grep -v "^Available"; rm -rf $$dir

clean:
	rm -rf build/cmake build/vulkan build/cuda $(VENV) $(VK_VENV) $(CU_VENV)
