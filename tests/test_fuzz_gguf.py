"""Loader fuzz: ≥ 200 seeded mutants of a small augmented GGUF, each loaded and run in its own process.

Each mutant is classified by what the process did: refused at load (a Python exception
naming the problem), ran (ridge prefill, then an exact prefill after seq_rm compared with a
fresh exact context), or died. The test fails on any signal or hang, on any structural defect
that loads, and on any exact result that a fill changed.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import random_maps_model
from gguf_mutants import mutants
from ridgefill import format as fmt
from ridgefill.bench import synth

pytestmark = pytest.mark.slow

SPLIT = 3

RUN_ONE = r"""
import sys
import numpy as np
from ridgefill.runtime import Model

try:
    model = Model(sys.argv[1])
except Exception as err:
    print("REFUSED", str(err).replace("\n", " | "))
    sys.exit(3)

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
    print("NOFILL", err)
ctx.set_fill("exact")
ctx.seq_rm(0)
after = ctx.prefill(toks).logits
fresh = model.context(**kw).prefill(toks).logits
if not np.array_equal(after, fresh, equal_nan=True):
    print("POISON")
    sys.exit(5)
print("RAN")
"""


@pytest.fixture(scope="module")
def augmented(smollm2_path, tmp_path_factory):
    d = tmp_path_factory.mktemp("fuzz")
    base = synth.random_model("tiny-llama", d / "base.gguf", smollm2_path, weight_type="q4_0", n_ctx=2048)
    model, _ = random_maps_model(base, SPLIT, d / "aug.gguf", seed=1, route_stats=True, lag_every=2,
                                window=(3, 4))
    return model.path


def _run(mutant, path):
    mutant.write(path)
    try:
        proc = subprocess.run([sys.executable, "-c", RUN_ONE, str(path)], capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return mutant, "hang", ""
    finally:
        path.unlink(missing_ok=True)
    out = proc.stdout + proc.stderr
    kind = {0: "ran", 3: "refused", 5: "poison"}.get(proc.returncode, "signal" if proc.returncode < 0 else "error")
    return mutant, kind, out


def test_mutated_gguf_never_crashes(augmented, tmp_path):
    ms = mutants(augmented, seed=0)
    assert len(ms) >= 200
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda im: _run(im[1], tmp_path / f"m{im[0]}.gguf"), enumerate(ms)))
    counts = Counter(kind for _, kind, _ in results)
    print(f"\n{len(ms)} mutants: {dict(counts)}")
    bad = [(m.name, kind, out[-400:]) for m, kind, out in results if kind in ("signal", "hang", "poison", "error")]
    assert not bad, bad
    loaded = [(m.name, out[-300:]) for m, kind, out in results if m.must_refuse and kind != "refused"]
    assert not loaded, loaded
    unnamed = [(m.name, out[-300:]) for m, kind, out in results if m.must_refuse and m.expect not in out]
    assert not unnamed, unnamed


def test_inspect_refuses_what_the_loader_refuses(augmented, tmp_path):
    """`ridgefill inspect` makes the loader's RidgeFill checks: the same verdict on every structural mutant."""
    path = tmp_path / "m.gguf"
    assert fmt.inspect(augmented)["loads"]
    disagree = []
    for m in mutants(augmented, seed=0):
        if not m.must_refuse or m.expect == "wrong number of tensors":  # not a RidgeFill check
            continue
        m.write(path)
        if fmt.inspect(path)["loads"]:
            disagree.append(m.name)
    assert not disagree, disagree
