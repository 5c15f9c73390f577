"""Loader fuzz: over 1,000 seeded mutants of a small augmented GGUF and of a maps file (loaded beside its base),
the same for K/V maps, and maps files beside other bases.

Each mutant is loaded and run by a worker process that goes on to the next one (a fresh worker replaces one that
dies), and classified by what happened: refused at load (a Python exception naming the problem), ran (ridge
prefill, routed rows, then an exact prefill after seq_rm compared with a fresh exact context), or died. The test
fails on any signal, hang or stray exception, on any structural defect that loads, and on any exact result that a
fill changed.
"""

from __future__ import annotations

import selectors
import subprocess
import sys
from collections import Counter
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import random_kv_maps, random_maps_model, tool
from gguf_mutants import Mutant, mutants
from ridgefill import format as fmt
from ridgefill.bench import synth
from ridgefill.format.gguf_io import copy_gguf, open_gguf
from ridgefill.format.maps import Provenance

pytestmark = pytest.mark.slow

SPLIT = 3
TIMEOUT = 120  # seconds one mutant may take

WORKER = r"""
import sys, traceback
import numpy as np
from ridgefill.runtime import Model

def run(path, maps):
    try:
        model = Model(path, maps=maps or None)
    except Exception as err:
        return "refused", str(err)
    toks = np.arange(100, 164, dtype=np.int32)
    kw = dict(n_ctx=256, n_batch=64, n_ubatch=32, threads=1)
    ctx = model.context(**kw)
    try:
        ctx.set_fill("ridge")
        ctx.prefill(np.arange(200, 360, dtype=np.int32), sinks=4, tail=8)
        ctx.set_route(0.25)  # routed rows: the late layers run in full for a quarter of each fill ubatch
        ctx.seq_rm(0)
        ctx.prefill(np.arange(200, 360, dtype=np.int32), sinks=4, tail=8)
        ctx.set_route(0.0)
    except ValueError as err:
        pass  # a mode or route this file cannot take: refused per call, and the exact check below still runs
    ctx.set_fill("exact")
    ctx.seq_rm(0)
    after = ctx.prefill(toks).logits
    fresh = model.context(**kw).prefill(toks).logits
    return ("ran", "") if np.array_equal(after, fresh, equal_nan=True) else ("poison", "exact logits changed")

for line in sys.stdin:
    path, _, maps = line.rstrip("\n").partition("\t")
    try:
        kind, msg = run(path, maps)
    except BaseException:
        kind, msg = "error", traceback.format_exc()
    print(kind + "\t" + " | ".join(msg.splitlines())[-800:], flush=True)
"""


@dataclass(frozen=True)
class Case:
    mutant: Mutant
    beside: Path | None  # the base a mutated maps file loads beside; None: the mutant is the model


class Worker:
    """One process loading case after case; a case that kills it is recorded and a new one started."""

    def __init__(self):
        self.proc = None

    def run(self, path: Path, beside: Path | None) -> tuple[str, str]:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen([sys.executable, "-c", WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.DEVNULL, text=True, bufsize=1)
        model, maps = (beside, path) if beside else (path, "")
        self.proc.stdin.write(f"{model}\t{maps}\n")
        self.proc.stdin.flush()
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        ready = sel.select(TIMEOUT)
        sel.close()
        if not ready:
            self.proc.kill()
            self.proc.wait()
            return "hang", ""
        line = self.proc.stdout.readline()
        if not line:
            rc = self.proc.wait()
            return ("signal" if rc < 0 else "error"), f"worker exited with {rc}"
        kind, _, msg = line.rstrip("\n").partition("\t")
        return kind, msg

    def close(self):
        if self.proc and self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait()


@pytest.fixture(scope="module")
def files(smollm2_path, tmp_path_factory):
    """(base, augmented GGUF, the same maps as a maps file, other bases: {name: (path, expected refusal or None)})."""
    d = tmp_path_factory.mktemp("fuzz")
    base = synth.random_model("tiny-llama", d / "base.gguf", smollm2_path, weight_type="q4_0", n_ctx=2048)
    model, _ = random_maps_model(base, SPLIT, d / "aug.gguf", seed=1, route_stats=True, lag_every=2, window=(3, 4))
    side = fmt.unpack(model.path, d / "maps.gguf")
    ident = fmt.identity_of(base)  # K/V maps for every late layer but one, which keeps its input map (mixed)
    cover = [l for l in range(SPLIT + 1, ident.n_layer) if l != SPLIT + 2]
    kv_maps = random_kv_maps(base, SPLIT, seed=2, lag=True, cover=cover, input_noise=0.1)
    kv = fmt.pack(base, kv_maps, ident, Provenance(), d / "kv.gguf", map_type="f16", kind="kv")
    kv_side = fmt.unpack(kv, d / "kv-maps.gguf")
    # another model of this shape: its norms differ (the synthetic models' norms are all ones whatever the seed)
    reweighted = copy_gguf(open_gguf(base), d / "reweighted.gguf",
                           tensor_data=lambda name, x: x * 1.5 if name == "output_norm.weight" else x)
    requant = d / "requant.gguf"
    subprocess.run([str(tool("llama-quantize")), "--allow-requantize", str(base), str(requant), "Q8_0"], check=True,
                   capture_output=True)
    other_shape = synth.random_model("tiny-qwen2", d / "qwen2.gguf", smollm2_path, weight_type="q4_0", n_ctx=2048)
    others = {"other weights of the shape": (reweighted, "fitted for other weights"),
              "another quantization": (requant, None), "another architecture": (other_shape, "architecture"),
              "the augmented GGUF": (model.path, "already carries RidgeFill maps")}
    return base, model.path, side, others, kv, kv_side


def _cases(files) -> list[Case]:
    base, aug, side, others, kv, kv_side = files
    cases = [Case(m, None) for m in mutants(aug, seed=0, n_bytes=400)]
    cases += [Case(m, base) for m in mutants(side, seed=1, n_bytes=500)]
    cases += [Case(m, None) for m in mutants(kv, seed=2, n_bytes=40)]
    cases += [Case(m, base) for m in mutants(kv_side, seed=3, n_bytes=40)]
    for name, (other, expect) in others.items():
        write = lambda p, src=side: p.write_bytes(src.read_bytes())
        cases.append(Case(Mutant(f"maps beside {name}", expect is not None, expect, write), other))
    return cases


def _run_all(cases: list[Case], tmp_path: Path) -> list[tuple[Case, str, str]]:
    def lane(i: int):
        worker, out = Worker(), []
        for j in range(i, len(cases), 2):
            path = tmp_path / f"m{j}.gguf"
            cases[j].mutant.write(path)
            out.append((cases[j], *worker.run(path, cases[j].beside)))
            path.unlink(missing_ok=True)
        worker.close()
        return out

    with ThreadPoolExecutor(2) as pool:
        return [r for lane_results in pool.map(lane, range(2)) for r in lane_results]


def test_mutated_gguf_never_crashes(files, tmp_path):
    cases = _cases(files)
    assert len(cases) >= 1000
    results = _run_all(cases, tmp_path)
    counts = Counter((c.beside is not None, kind) for c, kind, _ in results)
    print(f"\n{len(cases)} cases (maps file?, outcome): {dict(counts)}")
    bad = [(c.mutant.name, kind, out[-400:]) for c, kind, out in results if kind in ("signal", "hang", "poison", "error")]
    assert not bad, bad
    loaded = [(c.mutant.name, out[-300:]) for c, kind, out in results if c.mutant.must_refuse and kind != "refused"]
    assert not loaded, loaded
    unnamed = [(c.mutant.name, out[-300:]) for c, kind, out in results if c.mutant.must_refuse and c.mutant.expect not in out]
    assert not unnamed, unnamed
    should_load = [(c.mutant.name, out[-300:]) for c, kind, out in results
                   if c.mutant.expect is None and c.mutant.name.startswith(("maps beside", "layout_hash")) and kind != "ran"]
    assert not should_load, should_load


def _inspect_disagreements(src: Path, beside: Path | None, seed: int, workdir: Path, lane: int) -> list[str]:
    """The structural mutants of `src` (every other one, from `lane`) where `inspect` and the loader disagree."""
    path, out = workdir / f"inspect{lane}-{seed}.gguf", []
    for m in mutants(src, seed=seed, n_bytes=0)[lane::2]:
        if m.expect == "wrong number of tensors":  # not a RidgeFill check
            continue
        m.write(path)
        if fmt.inspect(path, base=beside)["loads"] == m.must_refuse:
            out.append(m.name)
    return out


def test_inspect_refuses_what_the_loader_refuses(files, tmp_path):
    """`ridgefill inspect` makes the loader's RidgeFill checks: the same verdict on every structural mutant of
    either file (a maps file checked against its base). Two processes: parsing each mutant's vocabulary is the cost."""
    base, aug, side, _, kv, kv_side = files
    assert all(fmt.inspect(p, base=b)["loads"] for p, b in ((aug, None), (side, base), (kv, None), (kv_side, base)))
    sources = ((aug, None, 0), (side, base, 1), (kv, None, 2), (kv_side, base, 3))
    jobs = [(src, beside, seed, tmp_path, lane) for src, beside, seed in sources for lane in (0, 1)]
    with ProcessPoolExecutor(2) as pool:
        disagree = [name for names in pool.map(_inspect_disagreements, *zip(*jobs)) for name in names]
    assert not disagree, disagree
