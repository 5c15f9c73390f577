"""Hugging Face checkpoint -> GGUF -> quantized GGUF -> fitted maps, with llama.cpp's own tools.

The checkpoint is written here by transformers (random weights, a sentencepiece tokenizer trained on
the spot): no hub. Every step runs the real tool: upstream's convert_hf_to_gguf.py, the built
llama-quantize, then ridgefill fit; the result must pass the loader's checks and fill."""

import subprocess
import sys

import numpy as np
import pytest

from conftest import tool

pytestmark = [pytest.mark.slow, pytest.mark.hf]

SPLIT = 2


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory, sample_text):
    spm = pytest.importorskip("sentencepiece")
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    d = tmp_path_factory.mktemp("hf")
    (d / "train.txt").write_text(sample_text)
    spm.SentencePieceTrainer.train(input=str(d / "train.txt"), model_prefix=str(d / "tokenizer"), vocab_size=512,
                                   model_type="bpe", bos_id=1, eos_id=2, unk_id=0, pad_id=-1,
                                   byte_fallback=True, minloglevel=2)
    (d / "train.txt").unlink()
    (d / "tokenizer.vocab").unlink()
    cfg = transformers.LlamaConfig(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                                   bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(cfg).save_pretrained(d)
    return d


def _ridgefill(*args):
    out = subprocess.run([sys.executable, "-m", "ridgefill", *map(str, args)], capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    return out


def _types(path) -> dict[str, str]:
    from ridgefill.format.gguf_io import open_gguf

    return {t.name: t.tensor_type.name for t in open_gguf(path).tensors}


def test_hf_checkpoint_to_quantized_gguf_to_fitted_maps(hf_dir, tmp_path):
    from ridgefill import format as fmt
    from ridgefill.runtime import Model

    base = tmp_path / "tiny-q4_k_m.gguf"
    _ridgefill("hf-to-gguf", hf_dir, "--quantize", "Q4_K_M", "-o", base)
    types = _types(base)
    assert types["blk.0.attn_q.weight"] in ("Q4_K", "Q5_K", "Q6_K")  # Q4_K_M mixes these
    assert sorted(p.name for p in tmp_path.iterdir()) == [base.name]  # no f16 intermediate left

    out = tmp_path / "tiny-fitted.gguf"
    _ridgefill("fit", base, "--split", SPLIT, "--tokens", 2048, "--window", 256, "--tail", 64, "-o", out)
    info = fmt.inspect(out, base=base)
    assert all(c["ok"] for c in info["checks"]), [c for c in info["checks"] if not c["ok"]]
    types = _types(out)
    assert types["blk.3.ridge_map.weight"] == "F16" and types["blk.3.ridge_map.bias"] == "F32"
    assert types["blk.0.attn_q.weight"] == _types(base)["blk.0.attn_q.weight"]  # the base tensors as quantized

    model = Model(out)
    ctx = model.context(n_ctx=512, n_batch=512, threads=2)
    ctx.set_fill("ridge")
    toks = model.tokenize("The quick brown fox jumps over the lazy dog. " * 30)[:400]
    res = ctx.prefill(toks, sinks=4, tail=64)
    assert res.n_filled == len(toks) - 68 and np.isfinite(res.logits).all()


def test_llama_quantize_keeps_ridge_maps_unquantized(hf_dir, tmp_path):
    from ridgefill import format as fmt

    base = tmp_path / "tiny-f16.gguf"
    _ridgefill("hf-to-gguf", hf_dir, "-o", base)
    fitted = tmp_path / "fitted.gguf"
    _ridgefill("fit", base, "--split", SPLIT, "--tokens", 1024, "--window", 256, "--tail", 64, "-o", fitted)
    q = tmp_path / "fitted-q8.gguf"
    run = subprocess.run([str(tool("llama-quantize")), str(fitted), str(q), "Q8_0", "2"], capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    types = _types(q)
    assert types["blk.0.attn_q.weight"] == "Q8_0" and types["blk.3.ridge_map.weight"] == "F16"
    assert all(c["ok"] for c in fmt.inspect(q)["checks"])


def test_a_folder_that_is_not_a_checkpoint_is_a_clear_error(tmp_path):
    out = subprocess.run([sys.executable, "-m", "ridgefill", "hf-to-gguf", str(tmp_path), "-o", str(tmp_path / "x.gguf")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "is not a Hugging Face checkpoint (no config.json)" in out.stderr
