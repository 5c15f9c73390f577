"""A Hugging Face checkpoint to a (quantized) GGUF with llama.cpp's own tools.

Step one of the HF path: the pinned upstream's `convert_hf_to_gguf.py` (from the patched tree
under build/llama.cpp, with its own gguf-py) writes the GGUF, and the built `llama-quantize`
optionally quantizes it. Step two is `ridgefill fit` on the result; the ridge maps it adds stay
F16/F32 (and llama-quantize of an augmented GGUF leaves them alone: the series' loader patch).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from ..errors import MissingFile, RidgefillError
from ..files import atomic_output
from ..paths import tool_path, upstream_tree

OUTTYPES = ("f32", "f16", "bf16", "q8_0")  # what convert_hf_to_gguf.py writes itself


class ConvertError(RidgefillError, RuntimeError):
    pass


def converter() -> Path:
    script = upstream_tree() / "convert_hf_to_gguf.py"
    if not script.is_file():
        raise MissingFile(f"{script} not found: the patched upstream tree is made by `make setup`")
    return script


def hf_to_gguf(hf_dir: str | os.PathLike, out: str | os.PathLike, outtype: str = "f16", quantize: str | None = None,
               threads: int | None = None) -> Path:
    """Convert `hf_dir` (config.json, weights, tokenizer) to `out`; with `quantize` (e.g. Q4_K_M) quantize it."""
    hf_dir, out = Path(hf_dir), Path(out)
    if not (hf_dir / "config.json").is_file():
        raise MissingFile(f"{hf_dir} is not a Hugging Face checkpoint (no config.json)")
    if outtype not in OUTTYPES:
        raise ConvertError(f"--outtype must be one of {', '.join(OUTTYPES)}, not {outtype!r}")
    with atomic_output(out) as tmp:
        if quantize is None:
            _convert(hf_dir, tmp, outtype)
        else:
            with tempfile.TemporaryDirectory(dir=out.parent, prefix=f".{out.name}.") as work:
                full = Path(work) / "model.gguf"
                _convert(hf_dir, full, outtype)
                _run([str(tool_path("llama-quantize")), str(full), str(tmp), quantize, str(threads or os.cpu_count() or 1)],
                     f"llama-quantize {quantize}")
    return out


def _convert(hf_dir: Path, out: Path, outtype: str) -> None:
    _run([sys.executable, str(converter()), str(hf_dir), "--outfile", str(out), "--outtype", outtype],
         "convert_hf_to_gguf.py")


def _run(cmd: list[str], what: str) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip()[-2000:]
        raise ConvertError(f"{what} failed (exit {proc.returncode}):\n{tail}")
