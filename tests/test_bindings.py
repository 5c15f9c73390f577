"""ridgefill._core / ridgefill.runtime on the real SmolLM2 GGUF."""

import numpy as np
import pytest

from ridgefill import runtime

pytestmark = pytest.mark.slow


def test_version_identifies_the_fork_and_its_series():
    from ridgefill.upstream.tree import build_commit

    assert runtime.version() == f"{runtime.version().split(' ')[0]} (commit {build_commit()})"
    assert runtime.version().split(" ")[0].endswith("+ridgefill")


def test_model_info(smollm2):
    info = smollm2.info()
    assert info["arch"] == "llama"
    assert (info["n_layer"], info["n_embd"], info["n_head"], info["n_head_kv"]) == (30, 576, 9, 3)
    assert info["n_ctx_train"] == 8192
    assert "general.architecture" in smollm2.metadata


def test_tokenize_round_trip(smollm2):
    text = "The grass is green. The sky is blue."
    toks = smollm2.tokenize(text, add_special=False)
    assert toks.dtype == np.int32 and len(toks) > 5
    assert smollm2.detokenize(toks) == text


def test_decode_is_deterministic(smollm2, sample_text):
    toks = smollm2.tokenize(sample_text[:2000])[:300]
    ctx = smollm2.context(n_ctx=512, n_batch=128, n_ubatch=64, threads=2)
    a = ctx.prefill(toks).logits
    ctx.clear()
    b = ctx.prefill(toks).logits
    np.testing.assert_array_equal(a, b)
    assert np.isfinite(a).all()


def test_chunking_does_not_change_logits(smollm2, sample_text):
    """Whole-prompt decode vs n_batch chunks: same model, same positions, same answer."""
    toks = smollm2.tokenize(sample_text[:2000])[:256]
    big = smollm2.context(n_ctx=512, n_batch=256, n_ubatch=256, threads=2).prefill(toks).logits
    small = smollm2.context(n_ctx=512, n_batch=64, n_ubatch=64, threads=2).prefill(toks).logits
    assert np.abs(big - small).max() < 1e-2 * np.abs(big).max()
    assert np.argmax(big) == np.argmax(small)


def test_continuation_logprobs_match_logits(smollm2, sample_text):
    toks = smollm2.tokenize(sample_text[:1500])[:120]
    ctx = smollm2.context(n_ctx=256, n_batch=64, n_ubatch=64, threads=2)
    lp = ctx.continuation_logprobs(toks[:80], toks[80:])
    assert lp.shape == (40,) and (lp <= 0).all()
    # the first continuation token's log-prob from full logits of the prefix's last row
    ctx.clear()
    last = ctx.prefill(toks[:80]).logits.astype(np.float64)
    ref = last[toks[80]] - (np.log(np.exp(last - last.max()).sum()) + last.max())
    assert abs(lp[0] - ref) < 1e-4


def test_capture_rows_and_layers(smollm2, sample_text):
    toks = smollm2.tokenize(sample_text[:1500])[:100]
    ctx = smollm2.context(n_ctx=256, n_batch=64, n_ubatch=32, threads=2, capture=[0, 15, 29])
    rows = {}

    def grab(c, start, n):
        for il in c.capture:
            rows.setdefault(il, []).append(c.layer_input(il).copy())

    ctx.prefill(toks, on_chunk=grab)
    for il in (0, 15, 29):
        h = np.concatenate(rows[il])
        assert h.shape == (100, 576) and np.isfinite(h).all()
    # layer 0's input is the token embedding: identical rows for identical tokens
    h0 = np.concatenate(rows[0])
    i, j = _repeated_token(toks)
    np.testing.assert_array_equal(h0[i], h0[j])
    # a preallocated output is filled in place
    out = np.empty((100 - 64, 576), dtype=np.float32)
    assert ctx.layer_input(15, out) is not None
    np.testing.assert_array_equal(out, rows[15][-1])


def _repeated_token(toks):
    seen = {}
    for i, t in enumerate(toks):
        if t in seen:
            return seen[t], i
        seen[t] = i
    raise AssertionError("no repeated token in sample")


def test_greedy_continues(smollm2):
    ctx = smollm2.context(n_ctx=256, n_batch=64, threads=2)
    prompt = smollm2.tokenize("1, 2, 3, 4, 5, 6,")
    out = ctx.greedy(prompt, 6)
    assert "7" in smollm2.detokenize(out)


# ---- bad input: Python exceptions, never a crash --------------------------------


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        runtime.Model(tmp_path / "nope.gguf")


def test_not_a_gguf(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"PK\x03\x04" + b"\0" * 1000)
    with pytest.raises(ValueError, match="not a GGUF"):
        runtime.Model(bad)


def test_gguf_magic_but_garbage(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\xff" * 4096)
    with pytest.raises(RuntimeError, match="failed to load"):
        runtime.Model(bad)


def test_truncated_gguf(tmp_path, smollm2_path):
    cut = tmp_path / "cut.gguf"
    with open(smollm2_path, "rb") as f:
        cut.write_bytes(f.read(smollm2_path.stat().st_size // 2))
    with pytest.raises(RuntimeError, match="failed to load"):
        runtime.Model(cut)


def test_token_out_of_range(smollm2):
    ctx = smollm2.context(n_ctx=64, n_batch=32, threads=2)
    with pytest.raises(ValueError, match="out of range"):
        ctx.decode(np.array([1, smollm2.n_vocab + 5], dtype=np.int32), 0)
    with pytest.raises(ValueError, match="out of range"):
        ctx.decode(np.array([-1], dtype=np.int32), 0)
    # the context still works afterwards
    ctx.decode(np.array([1, 2, 3], dtype=np.int32), 0)


def test_prompt_longer_than_context(smollm2):
    ctx = smollm2.context(n_ctx=256, n_batch=32, threads=2)
    n_ctx = ctx.n_ctx  # llama.cpp may round the request up
    with pytest.raises(ValueError, match="n_ctx"):
        ctx.prefill(np.ones(n_ctx + 10, dtype=np.int32))
    with pytest.raises(ValueError, match="do not fit"):
        ctx.decode(np.ones(10, dtype=np.int32), n_ctx - 5)
    with pytest.raises(ValueError, match="n_batch"):
        ctx.decode(np.ones(40, dtype=np.int32), 0)


def test_capture_layer_out_of_range(smollm2):
    with pytest.raises(IndexError, match="out of range"):
        smollm2.context(n_ctx=64, capture=[30])
    with pytest.raises(IndexError, match="out of range"):
        smollm2.context(n_ctx=64, capture=[-1])
    ctx = smollm2.context(n_ctx=64, n_batch=32, capture=[3])
    with pytest.raises(RuntimeError, match="no decode"):
        ctx.layer_input(3)
    ctx.decode(np.array([1, 2], dtype=np.int32), 0)
    with pytest.raises(ValueError, match="not captured"):
        ctx.layer_input(4)
    with pytest.raises(ValueError, match="shape"):
        ctx.layer_input(3, np.empty((5, 576), dtype=np.float32))


def test_bad_context_params(smollm2):
    with pytest.raises(ValueError, match="KV cache type"):
        smollm2.context(n_ctx=64, kv_type="q9")
    with pytest.raises(ValueError, match="flash_attn"):
        smollm2.context(n_ctx=64, flash_attn="maybe")
    with pytest.raises(ValueError, match="n_ubatch"):
        smollm2.context(n_ctx=64, n_batch=16, n_ubatch=32)
