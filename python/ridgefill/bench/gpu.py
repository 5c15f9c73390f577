"""The GPU run of bench/gpu.sh: synthetic real-size shapes, TTFT exact vs fill at long prompts.

Two halves, because the GPU machine has no network and no compiled RidgeFill:
- `pack_carry` (here): the patched llama.cpp tree trimmed to what a CUDA build of llama-bench
  needs, a tokenizer-only GGUF (the synthetic models' vocabulary) and the gguf wheel;
- `run` (there): write each shape's seeded random-weight GGUF with identity maps and routing
  statistics at split L/2 (speed only: fitted ones cost the same), then TTFT exact / identity /
  ridge / ridge@P (routed rows) through the CUDA llama-bench with every layer offloaded,
  interleaved, beside the cost-model bound; beside it, random lagged K/V maps in a maps file beside
  the base (exact / ridge: one product for every filled attention layer's K and V instead of a map, a
  norm and two projections per layer, a hybrid's linear layers on their input maps; ridge^10, where no
  layer is recurrent: the fork selects 10 % of the filled rows by the prompt's last 64 rows, whose probe
  and second pass it pays); and for a dense shape `bench overhead`: tg128 and pp512 (nothing filled) in ridge mode beside the lagged
  maps against exact mode, interleaved, with the graphs compared node for node (issue 53's "the decode
  path pays nothing for the fill", on a quiet machine); then `bench batches` at one length: every ubatch
  synchronized and timed alone, exact against each fill mode at the same positions beside the cost
  model's ratio (which ubatches fall short of the bound: the fill's, the tail's, the probe's).
Nothing here needs the compiled bindings, so it runs with the repo's python/ on PYTHONPATH.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import tarfile
import time
from pathlib import Path

from . import batches, overhead, ttft as bench, synth, report as ttft_report
from .. import fetch
from ..sources import models
from ..format.gguf_io import copy_field, field, open_gguf

# what a CUDA build of llama-bench reads from the patched tree (docs, models, examples, tests stay)
SOURCE_PARTS = ("CMakeLists.txt", "cmake", "common", "ggml", "include", "src", "tools", "vendor", "LICENSE", "licenses")
SKIP_DIRS = {"ggml-sycl", "ggml-vulkan", "ggml-opencl", "ggml-cann", "ggml-musa", "ggml-metal", "ggml-webgpu",
             "ggml-hexagon", "ggml-zdnn", "ggml-openvino", "public", "tests"}
GGUF_WHEEL = "gguf==0.19.0"
DEFAULT_MODES = ("exact", "identity", "ridge", "ridge@10")


def pack_carry(src_tree: Path, dest: Path) -> Path:
    """Everything the GPU machine needs, into `dest` (for the device tool's `carry`)."""
    dest.mkdir(parents=True, exist_ok=True)
    tar = dest / "llama-src.tar.gz"
    with tarfile.open(tar, "w:gz") as tf:
        for part in SOURCE_PARTS:
            p = src_tree / part
            if p.exists():
                tf.add(p, arcname=f"llama.cpp/{part}", filter=_skip_filter)
    tokenizer_gguf(models.fetch_model(models.DEFAULT_MODEL), dest / "tokenizer.gguf")
    wheels = dest / "wheels"
    wheels.mkdir(exist_ok=True)
    if not list(wheels.glob("gguf-*.whl")):
        fetch.pip_download(GGUF_WHEEL, wheels)
    return dest


def _skip_filter(info: tarfile.TarInfo):
    return None if set(Path(info.name).parts) & SKIP_DIRS else info


def tokenizer_gguf(src: str | os.PathLike, out: Path) -> Path:
    """A GGUF with `src`'s tokenizer.* keys and nothing else (what synth.random_model copies)."""
    import gguf

    reader = open_gguf(src)
    writer = gguf.GGUFWriter(out, arch=field(reader, "general.architecture"))
    for f in reader.fields.values():
        if f.name.startswith("tokenizer."):
            copy_field(writer, f)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    return out


def make_model(shape: str, workdir: Path, tokenizer: Path, weight_type: str, n_ctx: int) -> tuple[Path, Path | None, int]:
    """The shape's random-weight GGUF with identity maps and routing statistics at split L/2, and its base beside
    with a maps file of K/V maps (kv_files); (model, maps file or None, split). A hybrid's identity maps are a maps
    file beside the base, so one copy of its weights is on disk (the 27B shape in Q8_0 is 29 GB of a 64 GiB disk)."""
    sh = synth.SHAPES[shape]
    split = sh.n_layer // 2
    base = workdir / f"{shape}.gguf"
    out = workdir / f"{shape}-s{split}{'-maps' if sh.attn_interval else ''}.gguf"
    if not out.exists():
        synth.random_model(shape, base, tokenizer, weight_type=weight_type, n_ctx=n_ctx, shared_layers=True)
        synth.identity_maps(base, split, out, route=True, maps_only=bool(sh.attn_interval))
        synth.kv_maps_file(base, split, workdir / f"{shape}-s{split}-kv.gguf")
    return (base, out, split) if sh.attn_interval else (out, None, split)


KV_MODES = ("exact", "ridge", "ridge^10")


def shape_modes(shape: str, modes) -> tuple[str, ...]:
    """`modes` less routed (@) and selected (^) rows on a hybrid, which refuses both (its recurrent state would take
    those rows twice)."""
    hybrid = bool(synth.SHAPES[shape].attn_interval)
    return tuple(m for m in modes if not (hybrid and ("@" in m or "^" in m)))


def kv_files(shape: str, workdir: Path, split: int) -> tuple[Path, Path] | None:
    """(base, K/V maps file) that make_model wrote for the shape (a hybrid's keeps input maps for its linear layers)."""
    base, maps = workdir / f"{shape}.gguf", workdir / f"{shape}-s{split}-kv.gguf"
    return (base, maps) if base.exists() and maps.exists() else None


def run(llama_bench: Path, shapes: list[str], lengths: list[int], runs: int, workdir: Path, out_json: Path,
        tokenizer: Path, sinks: int = 4, tail: int = 2048, ngl: int = 999, weight_type: str = "f16",
        threads: int = 8, ubatch: int = 2048, deadline: float | None = None, modes=DEFAULT_MODES,
        progress=print, overhead_rounds: int = 4, batch_rounds: int = 2) -> dict:
    """`deadline` (time.time()): no new prompt length (nor overhead or batch run) is started after it; results so
    far are kept. `overhead_rounds` 0 skips `bench overhead`, `batch_rounds` 0 `bench batches` (at the second
    length, or the only one)."""
    workdir.mkdir(parents=True, exist_ok=True)
    report = {"machine": platform.node(), "gpu": _gpu_name(), "llama_bench": str(llama_bench),
              "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "shapes": {}}
    for shape in shapes:
        t0 = time.perf_counter()
        model, model_maps, split = make_model(shape, workdir, tokenizer, weight_type, max(lengths) + 256)
        progress(f"{shape}: model written in {time.perf_counter() - t0:.0f} s (split {split})")
        for n in lengths:
            if deadline is not None and time.time() > deadline:
                progress(f"{shape}: deadline reached, {n} tokens and longer not measured")
                report.setdefault("skipped", []).append({"shape": shape, "n_tokens": n})
                continue
            runs_of = lambda path, ms, maps=None: bench.ttft(  # noqa: E731
                str(path), [n], runs=runs, modes=ms, threads=threads, sinks=sinks, tail=tail, split=split, batch=ubatch,
                ubatch=ubatch, tool=str(llama_bench), ngl=ngl, progress=progress, maps=maps)
            _add(report, shape, runs_of(model, shape_modes(shape, modes), model_maps and str(model_maps)))
            kv = kv_files(shape, workdir, split)
            if kv:
                _add(report, f"{shape} K/V maps", runs_of(kv[0], shape_modes(shape, KV_MODES), str(kv[1])))
            out_json.write_text(json.dumps(report, indent=2))  # partial results survive a timeout
        for key in (shape, f"{shape} K/V maps"):
            if key in report["shapes"]:
                progress(ttft_report.markdown(report["shapes"][key]))
        if not synth.SHAPES[shape].attn_interval:  # measured on dense shapes; a hybrid's decode path is not compared
            _overhead(report, shape, kv_files(shape, workdir, split), llama_bench, overhead_rounds, threads, deadline,
                      progress)
        out_json.write_text(json.dumps(report, indent=2))
        timed = [(shape, model, model_maps, shape_modes(shape, modes))]
        if kv_files(shape, workdir, split):
            timed.append((f"{shape} K/V maps", *kv_files(shape, workdir, split), shape_modes(shape, KV_MODES)))
        for key, path, maps, ms in timed if batch_rounds > 0 else ():
            if deadline is not None and time.time() > deadline:
                progress(f"{key}: deadline reached, batches not timed")
                break
            _batches(report, key, path, maps, ms, lengths[min(1, len(lengths) - 1)], llama_bench, batch_rounds,
                     threads, ubatch, split, sinks, tail, ngl, progress)
            out_json.write_text(json.dumps(report, indent=2))
        for p in {model, model_maps, *(kv_files(shape, workdir, split) or ())} - {None}:
            p.unlink()
    return report


def _overhead(report: dict, shape: str, kv: tuple[Path, Path] | None, llama_bench: Path, rounds: int, threads: int,
              deadline: float | None, progress) -> None:
    """`bench overhead` beside the shape's lagged K/V maps file, into report["overhead"][shape]."""
    if kv is None or rounds <= 0:
        return
    if deadline is not None and time.time() > deadline:
        progress(f"{shape}: deadline reached, overhead not measured")
        return
    rows = overhead.overhead(str(kv[0]), rounds=rounds, reps=3, threads=threads, tool=str(llama_bench),
                             progress=progress, maps=str(kv[1]))
    report.setdefault("overhead", {})[shape] = rows
    progress(overhead.markdown(f"{shape} + lagged K/V maps", rows))


def _batches(report: dict, key: str, model: Path, maps: Path | None, modes, n: int, llama_bench: Path, rounds: int,
             threads: int, ubatch: int, split: int, sinks: int, tail: int, ngl: int, progress) -> None:
    """`bench batches` of one model (and maps file) at n tokens, into report["batches"][key]."""
    res = batches.batch_times(str(model), n, modes, rounds, threads, ubatch, split, sinks, tail, str(llama_bench), ngl,
                              maps and str(maps), warmup=ngl != 0, progress=progress)
    report.setdefault("batches", {})[key] = res
    progress(batches.markdown(res))


def _add(report: dict, key: str, summary: dict) -> None:
    """One length's summary into report["shapes"][key], after the lengths measured before."""
    if key in report["shapes"]:
        summary["results"] = report["shapes"][key]["results"] + summary["results"]
    report["shapes"][key] = summary


def _gpu_name() -> str:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30)
        return out.stdout.strip() or "none"
    except (OSError, subprocess.SubprocessError):
        return "none"
