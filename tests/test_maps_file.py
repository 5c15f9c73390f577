"""A maps file beside an unchanged base: written, packed and unpacked byte for byte, loaded by the fork as the
augmented GGUF's maps are, and refused beside another model with the mismatch named."""

from __future__ import annotations

import hashlib
import subprocess
import sys

import numpy as np
import pytest

from ridgefill import format as fmt
from ridgefill.errors import LoadError
from ridgefill.fit.stats import Provenance
from ridgefill.format import keys
from ridgefill.format.gguf_io import copy_gguf, open_gguf
from ridgefill.runtime import Model

from conftest import random_maps_model, tool

pytestmark = pytest.mark.slow

SPLIT = 26
SINKS, TAIL = 4, 64


def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def files(smollm2_path, tmp_path_factory):
    """(augmented GGUF, maps file, Maps): the same random maps (lagged, window, routing statistics) both ways."""
    root = tmp_path_factory.mktemp("maps-file")
    aug, maps = random_maps_model(smollm2_path, SPLIT, root / "aug.gguf", seed=3, route_stats=True, lag_every=2,
                                  window=(2, 16))
    side = fmt.write_maps(smollm2_path, maps, fmt.identity_of(smollm2_path), Provenance(), root / "maps.gguf",
                          map_type="f32")
    return aug.path, side, maps


def test_a_maps_file_is_an_adapter_that_records_its_base_and_holds_the_maps_alone(smollm2_path, files):
    aug, side, maps = files
    r = open_gguf(side)
    field = lambda k: fmt.gguf_io.field(r, k)
    assert (field("general.type"), field("adapter.type"), field("general.architecture")) == ("adapter", "ridgefill", "llama")
    ident = fmt.identity_of(smollm2_path)
    assert (field(keys.BASE_BLOCK_COUNT), field(keys.BASE_EMBEDDING_LENGTH)) == (ident.n_layer, ident.n_embd)
    assert field(keys.BASE_SHA256) == ident.base_sha256 and field(keys.SPLIT_LAYER) == SPLIT
    assert all(keys.is_maps_tensor(t.name) for t in r.tensors)
    assert side.stat().st_size < aug.stat().st_size - smollm2_path.stat().st_size + 1024 * 1024
    np.testing.assert_array_equal(fmt.read_maps(side)[SPLIT + 1][0], maps.weights[0])


def test_unpack_and_pack_are_byte_for_byte_inverse(smollm2_path, files, tmp_path):
    aug, side, _ = files
    assert _sha(fmt.unpack(aug, tmp_path / "unpacked.gguf")) == _sha(side)  # what `fit --maps-only` writes
    assert _sha(fmt.pack_maps_file(smollm2_path, side, tmp_path / "repacked.gguf")) == _sha(aug)


def test_the_fork_fills_from_a_maps_file_as_from_the_augmented_gguf(smollm2_path, files, smollm2, sample_text):
    aug, side, _ = files
    base_sha = _sha(smollm2_path)
    tokens = smollm2.tokenize(sample_text)[:400]
    out = {}
    for name, model in (("aug", Model(aug)), ("side", Model(smollm2_path, maps=side))):
        assert model.rf_split_layer == SPLIT and model.rf_has_route
        ctx = model.context(n_ctx=512, n_batch=128, n_ubatch=64, threads=2)
        ctx.set_fill("ridge")
        res = ctx.prefill(tokens, sinks=SINKS, tail=TAIL)
        assert res.n_filled == len(tokens) - SINKS - TAIL
        out[name] = res.logits
    np.testing.assert_array_equal(out["aug"], out["side"])
    assert _sha(smollm2_path) == base_sha  # the base stays as downloaded


def _changed_copy(base, out, tensor: str, change):
    reader = open_gguf(base)
    return copy_gguf(reader, out, tensor_data=lambda name, data: change(data) if name == tensor else data)


def test_a_maps_file_beside_another_model_is_refused_with_the_mismatch_named(smollm2_path, files, shared_models, tmp_path):
    aug, side, _ = files
    with pytest.raises(LoadError, match="ridgefill.base.block_count|architecture"):
        Model(shared_models.base("tiny-qwen2"), maps=side)
    other = _changed_copy(smollm2_path, tmp_path / "other.gguf", "output_norm.weight", lambda d: (d * 1.5).astype(d.dtype))
    with pytest.raises(LoadError, match="fitted for other weights of this shape"):
        Model(other, maps=side)
    with pytest.raises(LoadError, match="already carries RidgeFill maps"):
        Model(aug, maps=side)
    with pytest.raises(LoadError, match="not a RidgeFill maps file"):
        Model(smollm2_path, maps=smollm2_path)
    with pytest.raises(fmt.OtherBase, match="fitted for other weights"):
        fmt.pack_maps_file(other, side, tmp_path / "x.gguf")


def test_another_quantization_of_the_base_loads_the_maps_with_a_warning(smollm2_path, files, tmp_path):
    _, side, _ = files
    requant = tmp_path / "q4.gguf"
    subprocess.run([str(tool("llama-quantize")), "--allow-requantize", str(smollm2_path), str(requant), "Q4_0"],
                   check=True, capture_output=True)
    with pytest.warns(UserWarning, match="fitted on another file of this model"):
        model = Model(requant, maps=side)
    assert model.rf_split_layer == SPLIT
    with pytest.warns(UserWarning, match="another file of this model"):
        fmt.pack_maps_file(requant, side, tmp_path / "q4-aug.gguf")


def test_server_and_bench_take_a_maps_file(smollm2_path, files, smollm2, sample_text, tmp_path):
    from ridgefill.serve.server import LlamaServer

    aug, side, _ = files
    prompt = smollm2.detokenize(smollm2.tokenize(sample_text)[:400])
    args = ["-b", "128", "-ub", "64", "--ridgefill", "ridge", "--ridgefill-sink", str(SINKS), "--ridgefill-tail", str(TAIL)]
    body = {"prompt": prompt, "n_predict": 8, "temperature": 0.0, "cache_prompt": False}
    with LlamaServer(aug, args, ctx=512, threads=2) as srv:
        want = srv.post("/completion", body)
    with LlamaServer(smollm2_path, args + ["--ridgefill-maps", str(side)], ctx=512, threads=2) as srv:
        got = srv.post("/completion", body)
    assert got["timings"]["ridgefill_filled_n"] == want["timings"]["ridgefill_filled_n"] > 0
    assert got["content"] == want["content"]

    bench = [str(tool("llama-bench")), "-m", str(smollm2_path), "-p", "256", "-n", "0", "-r", "1", "-o", "json",
             "--ridgefill", "ridge", "--ridgefill-sink", "4", "--ridgefill-tail", "64"]
    proc = subprocess.run(bench + ["--ridgefill-maps", str(side)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    import json

    row = json.loads(proc.stdout)[0]
    assert row["ridgefill_maps"] == str(side) and row["ridgefill_filled_n"] == 256 - 4 - 64
    bad = subprocess.run([*bench[:2], str(aug), *bench[3:], "--ridgefill-maps", str(side)], capture_output=True, text=True)
    assert bad.returncode != 0 and "carries maps of its own" in bad.stderr and '"avg_ns"' not in bad.stdout


def test_eval_takes_a_base_and_a_maps_file_and_scores_what_the_augmented_gguf_scores(smollm2_path, files, tmp_path):
    import json

    aug, side, _ = files
    common = ["needle", "--lengths", "512", "--items", "2", "--needle-tasks", "single/noise/number", "multivalue/prose/number",
              "--modes", "exact", "ridge", "--sinks", "4", "--tail", "64",
              "--threads", "2", "--no-plots", "--quiet", "--json"]
    runs = {}
    for name, model in (("aug", ["--model", str(aug)]), ("side", ["--model", str(smollm2_path), "--maps", str(side)])):
        proc = subprocess.run([sys.executable, "-m", "ridgefill", "eval", *common, *model, "--out", str(tmp_path / name)],
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr[-2000:]
        runs[name] = {(r["item"], r["variant"]): r["score"] for r in json.loads(proc.stdout)["records"]}
    assert runs["aug"] == runs["side"] and {v for _, v in runs["aug"]} == {"exact", "ridge"}


def test_bench_ttft_takes_a_base_and_a_maps_file(smollm2_path, files):
    import json

    _, side, _ = files
    proc = subprocess.run([sys.executable, "-m", "ridgefill", "bench", "ttft", "--model", str(smollm2_path), "--maps",
                           str(side), "--lengths", "256", "--runs", "1", "--modes", "exact", "ridge", "--sinks", "4",
                           "--tail", "64", "--paths", "bench", "server", "--json", "--quiet"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for path in json.loads(proc.stdout).values():
        assert path["maps"] == str(side) and path["split"] == SPLIT
        assert path["results"][0]["fill_rows"]["ridge"].startswith(f"{256 - 4 - 64} rows filled")


def test_soak_leak_check_serves_a_maps_file_beside_the_base(smollm2_path, files, smollm2):
    from pathlib import Path

    import argparse as text_source

    from ridgefill.serve import soak

    _, side, _ = files
    tokens = smollm2.tokenize(Path(text_source.__file__).read_text())
    check = soak.leak_check(smollm2_path, smollm2_path, "ridge", tokens, 2, maps=side)
    assert check["filled_rows"] > 0 and check["exact_after_fill_equals_stock"]
