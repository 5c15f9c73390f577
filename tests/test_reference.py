"""The bindings agree with llama.cpp's own tools and with transformers on the same GGUF."""

import re
import subprocess

import numpy as np
import pytest

from conftest import tool

pytestmark = pytest.mark.slow

N_CTX = 128
N_CHUNKS = 4


def _binding_running_ppl(model, tokens):
    """llama-perplexity's algorithm: per n_ctx chunk (BOS first if the vocab adds one), score the second half."""
    ctx = model.context(n_ctx=N_CTX, n_batch=N_CTX, n_ubatch=N_CTX, threads=2)
    first = N_CTX // 2
    nll, count, running = 0.0, 0, []
    for c in range(N_CHUNKS):
        seq = tokens[c * N_CTX : (c + 1) * N_CTX].copy()
        if model.add_bos:
            seq[0] = model.bos
        lp = ctx.continuation_logprobs(seq[: first + 1], seq[first + 1 :])
        nll -= lp.sum()
        count += len(lp)
        running.append(np.exp(nll / count))
    return running


def test_per_token_loss_matches_llama_perplexity(smollm2, smollm2_path, sample_text, tmp_path):
    text_file = tmp_path / "text.txt"
    text_file.write_text(sample_text)
    proc = subprocess.run(
        [str(tool("llama-perplexity")), "-m", str(smollm2_path), "-f", str(text_file), "-c", str(N_CTX),
         "-b", str(N_CTX), "-ub", str(N_CTX), "--chunks", str(N_CHUNKS), "-t", "2"],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    theirs = [float(x) for x in re.findall(r"\[\d+\](\d+\.\d+),", proc.stdout + proc.stderr)]
    assert len(theirs) == N_CHUNKS, proc.stdout + proc.stderr[-2000:]

    tokens = smollm2.tokenize(sample_text)
    ours = _binding_running_ppl(smollm2, tokens)
    print(f"running PPL, llama-perplexity: {theirs}\nrunning PPL, bindings:        {[round(x, 4) for x in ours]}")
    np.testing.assert_allclose(ours, theirs, rtol=2e-4)  # their print has 4 decimals


@pytest.mark.hf
def test_captured_layer_inputs_match_transformers(smollm2, smollm2_path, sample_text):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")

    hf = transformers.AutoModelForCausalLM.from_pretrained(
        str(smollm2_path.parent), gguf_file=smollm2_path.name, dtype=torch.float32
    ).eval()
    toks = smollm2.tokenize(sample_text[:3000])[:64]
    with torch.no_grad():
        hs = hf(torch.tensor(toks[None, :].astype(np.int64)), output_hidden_states=True).hidden_states

    layers = [0, 1, 8, 15, 22, 29]
    ctx = smollm2.context(n_ctx=128, n_batch=64, n_ubatch=64, threads=2, capture=layers)
    ctx.prefill(toks)
    report = []

    def rel_err(a, b):
        return np.linalg.norm(a - b, axis=1) / np.linalg.norm(b, axis=1)

    for il in layers:
        ours = ctx.layer_input(il).astype(np.float64)
        ref = hs[il][0].double().numpy()
        # per-row relative error; llama.cpp quantizes activations to Q8 for Q4_1 matmuls,
        # so the error grows with depth
        rel = rel_err(ours, ref)
        report.append((il, rel.max(), rel.mean()))
        # it is this layer's input, not a neighbour's
        for other in (il - 1, il + 1):
            if 0 <= other < len(hs):
                assert rel.mean() < rel_err(ours, hs[other][0].double().numpy()).mean(), (il, other)
    print("relative row error per layer (max/mean):", ", ".join(f"{il}: {mx:.2e}/{mn:.2e}" for il, mx, mn in report))
    assert report[0][1] < 1e-6, "layer 0 input is the embedding row and must match exactly"
    for il, mx, mn in report:
        assert mx < 0.08 and mn < 0.04, f"layer {il}: relative error max {mx:.3g}, mean {mn:.3g}"
