"""Which output `fit` should write by default: an augmented GGUF or a maps file beside the base (issue 53, item 1).

For each model: the base's size, the maps file's and the augmented GGUF's, and the load time of each form
(bindings, mmap, every layer on the CPU; median of interleaved loads, the page cache warm for both). The maps are
random F16 maps at the split given (their size and load cost depend on the shape only); with --maps-from, a real
fit's augmented GGUF is unpacked instead. The 8B shape (llama-3.1-8b, d 4096, 32 layers) is sized from its shape:
its maps file is the maps' tensor bytes plus a header.

    .venv/bin/python experiments/maps-file/measure.py --out experiments/maps-file/results
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from ridgefill import format as fmt
from ridgefill.bench import synth
from ridgefill.fit.ridge import LayerFit, Maps
from ridgefill.fit.stats import Provenance
from ridgefill.runtime import Model
from ridgefill.sources import models

MODELS = {"qwen2.5-coder-0.5b": 12, "qwen2.5-coder-1.5b": 14}


def random_maps(base: Path, split: int) -> Maps:
    ident = fmt.identity_of(base)
    layers = list(range(split + 1, ident.n_layer))
    rng = np.random.default_rng(0)
    d = ident.n_embd
    w = (np.eye(d) + 0.01 * rng.standard_normal((len(layers), d, d), dtype=np.float32)).astype(np.float32)
    return Maps(split, layers, w, np.zeros((len(layers), d), np.float32), [LayerFit(l, 0, 0, 0, 0, 0, 0) for l in layers])


def load_seconds(path: Path, maps: Path | None) -> float:
    t = time.perf_counter()
    m = Model(path, n_gpu_layers=0, maps=maps)
    assert m.rf_split_layer > 0
    del m
    return time.perf_counter() - t


def measure(name: str, split: int, work: Path, rounds: int) -> dict:
    base = models.fetch_model(name)
    maps = random_maps(base, split)
    ident = fmt.identity_of(base)
    aug = fmt.pack(base, maps, ident, Provenance(), work / f"{name}-aug.gguf")
    side = fmt.write_maps(base, maps, ident, Provenance(), work / f"{name}-maps.gguf")
    times = {"augmented": [], "base + maps file": []}
    for i in range(rounds):
        order = [("augmented", aug, None), ("base + maps file", base, side)]
        for label, path, m in (order if i % 2 == 0 else order[::-1]):
            times[label].append(load_seconds(path, m))
    row = {"model": name, "split": split, "base_mb": base.stat().st_size / 2**20, "maps_mb": side.stat().st_size / 2**20,
           "augmented_mb": aug.stat().st_size / 2**20,
           **{f"load_s {k}": statistics.median(v) for k, v in times.items()}}
    aug.unlink(), side.unlink()
    return row


def shape_row(shape: str, split: int) -> dict:
    sh = synth.SHAPES[shape]
    late = sh.n_layer - split - 1
    return {"model": f"{shape} (shape)", "split": split,
            "maps_mb": late * (sh.d * sh.d * 2 + sh.d * 4) / 2**20}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=args.out) as tmp:
        rows = [measure(n, s, Path(tmp), args.rounds) for n, s in MODELS.items()]
    rows.append(shape_row("llama-3.1-8b", 16))
    lines = ["| model | split | base MB | maps file MB | augmented MB | load s: augmented | load s: base + maps file |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    cell = lambda r, k, f: f.format(r[k]) if k in r else "-"  # noqa: E731
    for r in rows:
        lines.append(f"| {r['model']} | {r['split']} | {cell(r, 'base_mb', '{:.0f}')} | {r['maps_mb']:.1f} | "
                     f"{cell(r, 'augmented_mb', '{:.0f}')} | {cell(r, 'load_s augmented', '{:.3f}')} | "
                     f"{cell(r, 'load_s base + maps file', '{:.3f}')} |")
    table = "\n".join(lines)
    (args.out / "sizes.md").write_text(table + "\n")
    print(table)


if __name__ == "__main__":
    main()
