"""The lagged-map experiment (bench/lagged) writes K/V it computes in numpy into the fork's cache:
those K/V must be the fork's own, or its needle scores say nothing about the maps."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from lagged import attn_kv, prefix_rows, rope_neox, rope_norm  # noqa: E402

from ridgefill.runtime import Model  # noqa: E402
from ridgefill.sources import models  # noqa: E402


CASES = {"smollm2-135m": [17, 23, 29], "qwen2.5-coder-0.5b": [13, 18, 23]}  # llama, qwen2 (biases, NEOX RoPE)


@pytest.fixture(scope="module")
def sample_text() -> str:
    import textwrap

    return Path(textwrap.__file__).read_text()


def test_rope_norm_rotates_adjacent_pairs_by_position():
    x = np.zeros((2, 1, 4))
    x[:, 0, 0] = 1.0  # pair (0, 1) of dims; pair (2, 3) stays 0
    out = rope_norm(x, np.array([0, 3]), base=10_000.0)
    np.testing.assert_allclose(out[0, 0], [1, 0, 0, 0])
    np.testing.assert_allclose(out[1, 0], [np.cos(3.0), np.sin(3.0), 0, 0], atol=1e-12)
    np.testing.assert_allclose(np.linalg.norm(out, axis=-1), 1.0)


def test_rope_neox_rotates_the_halves_by_position():
    x = np.zeros((1, 1, 4))
    x[0, 0, 0] = 1.0  # pair (0, 2)
    np.testing.assert_allclose(rope_neox(x, np.array([3]), base=10_000.0)[0, 0], [np.cos(3.0), 0, np.sin(3.0), 0],
                               atol=1e-12)


@pytest.mark.parametrize("name", CASES)
def test_numpy_kv_match_the_cached_kv_of_an_exact_prefill(name, sample_text):
    path = models.fetch_model(name)
    model, layers = Model(path), CASES[name]
    toks = model.tokenize(sample_text)[:700]
    rows = prefix_rows(model, toks, layers, threads=2)
    ctx = model.context(n_ctx=1024, n_batch=512, n_ubatch=512, threads=2)
    ctx.prefill(toks)
    kv = attn_kv(path, layers)
    for il in layers:
        k, v = kv[il](rows[il], np.arange(len(toks)))
        ek, ev = ctx.state_get(il, "k", 0, len(toks)), ctx.state_get(il, "v", 0, len(toks))
        # the fork quantizes activations to 8 bits for its quantized matmuls and caches F16: about 1-2 %
        err = np.linalg.norm(k - ek) / np.linalg.norm(ek)
        assert err < 0.03, il
        assert np.linalg.norm(v - ev) / np.linalg.norm(ev) < 0.04, il
        np.testing.assert_allclose(kv[il].values(rows[il]), v)
        # positions off by one are several times farther off: the check sees RoPE
        k_off, _ = kv[il](rows[il], np.arange(len(toks)) + 1)
        assert np.linalg.norm(k_off - ek) / np.linalg.norm(ek) > 3 * err, il
