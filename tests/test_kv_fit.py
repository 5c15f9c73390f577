"""Maps straight into the late attention layers' K and V (fit/kv_stats.py, fit/kv_fit.py), against numpy on the
rows themselves, and on the real SmolLM2 capture."""

import numpy as np
import pytest

from ridgefill.errors import InputError
from ridgefill.fit import kv_fit, ridge
from ridgefill.fit.attention import AttentionLayer
from ridgefill.fit.kv_stats import KVSink, KVTargets
from ridgefill.fit.stats import CalibrationStats, StatsError
from ridgefill.format import ModelIdentity

D, SPLIT, N_LAYER = 16, 2, 5


def _layer(rng, il, n_head=4, n_head_kv=2, hd=4, k_norm=False):
    m = lambda *s: rng.normal(size=s).astype(np.float32)
    return AttentionLayer(il, 1 + 0.1 * m(D), 1e-6, m(n_head * hd, D), m(n_head_kv * hd, D), m(n_head_kv * hd, D),
                          None, m(n_head_kv * hd), m(n_head_kv * hd), None, 1 + 0.1 * m(hd) if k_norm else None,
                          n_head, n_head_kv, hd, hd, True, 10000.0, 1.0, 1 / np.sqrt(hd))


def _rows(seed, n, lag_weight):
    """Split states h (n, D) and late layers' inputs: y_l = A_l h(t) + lag_weight B_l h(t-1) + noise, the same A_l,
    B_l for every `n` (training and held-out rows)."""
    maps = np.random.default_rng(seed).normal(size=(N_LAYER - SPLIT - 1, 2, D, D))
    rng = np.random.default_rng(seed + n)
    h = rng.normal(size=(n, D))
    prev = np.vstack([h[:1], h[:-1]])
    ys = [h @ a + lag_weight * prev @ b + 0.05 * rng.normal(size=(n, D)) for a, b in maps]
    return np.hstack([h, prev]), ys


def _stats(lag_weight=0.0, seed=0, n_train=3000, n_held=600, mix=None):
    rng = np.random.default_rng(seed)
    attn = {il: _layer(rng, il, k_norm=il == 4) for il in (3, 4)}
    targets = KVTargets(attn, SPLIT)
    st = CalibrationStats(ModelIdentity("llama", N_LAYER, D, "0" * 64), SPLIT)
    st.kv = targets.stats(2 * D)
    rows = {}
    for part, n in (("train", n_train), ("heldout", n_held)):
        x, ys = _rows(seed + 1, n, lag_weight) if mix is None else mix(part)
        KVSink(getattr(st, part), getattr(st.kv, part), targets).update(x, ys)
        rows[part] = (x, targets(ys))
    return st, rows


def _ridge(x, y, lam_rel):
    """Centred ridge at λ = lam_rel · tr(Cxx)/d, written out."""
    mu_x, mu_y = x.mean(0), y.mean(0)
    cxx = (x - mu_x).T @ (x - mu_x) / len(x)
    lam = lam_rel * np.trace(cxx) / x.shape[1]
    w = np.linalg.solve(cxx + lam * np.eye(x.shape[1]), (x - mu_x).T @ (y - mu_y) / len(x)).T
    return w, mu_y - w @ mu_x


def test_kv_targets_are_the_layers_keys_before_rope_and_values():
    rng = np.random.default_rng(3)
    a = _layer(rng, 3, k_norm=True)
    h = rng.normal(size=(7, D))
    k, v = KVTargets({3: a}, SPLIT)([h])  # layer 3's input is the first late layer's (split 2)
    pos = np.zeros(7, np.int64)  # RoPE at position 0 is the identity
    np.testing.assert_allclose(k, a.keys(h, pos).reshape(7, -1), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(v, a.values(h), rtol=1e-6)


@pytest.mark.parametrize("lag_weight", [0.0, 1.0])
def test_kv_maps_are_the_ridge_solution_on_the_rows(lag_weight):
    """Each layer's K and V maps are the centred ridge on every row (training + held-out) at the λ chosen,
    and the held-out errors are those of the maps fitted on the training rows."""
    st, rows = _stats(lag_weight)
    kv = kv_fit.fit_kv(st)
    assert kv.layers == [3, 4] and kv.d_kv == 8
    x_all = np.vstack([rows["train"][0], rows["heldout"][0]])
    for i, f in enumerate(kv.fits):
        width = 2 * D if f.lag else D
        for half, lam_rel in ((0, f.lam_rel_k), (1, f.lam_rel_v)):
            t = 2 * i + half
            y_all = np.vstack([rows["train"][1][t], rows["heldout"][1][t]])
            w, b = _ridge(x_all[:, :width], y_all, lam_rel)
            got_w = kv.weights[i, half * 8:(half + 1) * 8]
            if f.lag:
                got_w = np.hstack([got_w, kv.weights_prev[i, half * 8:(half + 1) * 8]])
            np.testing.assert_allclose(got_w, w, rtol=1e-4, atol=1e-5)
            np.testing.assert_allclose(kv.biases[i, half * 8:(half + 1) * 8], b, rtol=1e-4, atol=1e-5)
            w_tr, b_tr = _ridge(rows["train"][0][:, :width], rows["train"][1][t], lam_rel)
            x_ho, y_ho = rows["heldout"][0][:, :width], rows["heldout"][1][t]
            err = np.linalg.norm(y_ho - x_ho @ w_tr.T - b_tr) / np.linalg.norm(y_ho - y_ho.mean(0))
            want = (f.k_err_lag, f.v_err_lag)[half] if f.lag else (f.k_err_row, f.v_err_row)[half]
            assert want == pytest.approx(err, rel=1e-6)


def test_the_previous_row_is_read_where_it_cuts_the_key_error():
    per_row = kv_fit.fit_kv(_stats(0.0)[0])
    assert not any(f.lag for f in per_row.fits) and all(f.k_err_row < 0.5 for f in per_row.fits), per_row.fits
    lagged = kv_fit.fit_kv(_stats(1.0)[0])
    assert all(f.lag and f.k_err_lag < 0.6 * f.k_err_row for f in lagged.fits), lagged.fits
    assert kv_fit.fit_kv(_stats(1.0)[0], lag_gain=None).weights_prev is None
    text = kv_fit.report(lagged, D)
    assert "row+lag" in text and "multiply-adds" in text


def test_input_and_kv_maps_of_one_capture_share_its_eigendecompositions(monkeypatch):
    """fit_and_pack's order: input maps, then K/V maps, with one ridge.Designs: x's covariance is decomposed once
    per width and row set (per-row and lagged; training and all rows), and the maps equal separate fits'."""
    st, _ = _stats(1.0)
    alone_in, alone_kv = ridge.fit(st), kv_fit.fit_kv(st)
    calls = []
    eigh = np.linalg.eigh
    monkeypatch.setattr(np.linalg, "eigh", lambda a: calls.append(a.shape) or eigh(a))
    designs = ridge.Designs()
    maps = ridge.fit(st, designs=designs)
    kv = kv_fit.fit_kv(st, designs=designs)
    assert sorted(calls) == [(D, D), (D, D), (2 * D, 2 * D), (2 * D, 2 * D)]
    np.testing.assert_array_equal(maps.weights, alone_in.weights)
    np.testing.assert_array_equal(kv.weights, alone_kv.weights)
    np.testing.assert_array_equal(kv.weights_prev, alone_kv.weights_prev)


def test_kv_sums_save_load_and_merge(tmp_path):
    a, _ = _stats(0.5, seed=0)
    b, _ = _stats(0.5, seed=7)
    loaded = CalibrationStats.load(a.save(tmp_path / "a.npz"))
    np.testing.assert_array_equal(loaded.kv.train.xty, a.kv.train.xty)
    assert loaded.kv.layers == [3, 4] and loaded.kv.heldout.n == a.heldout.n
    n = a.kv.train.n
    a.merge(b)
    assert a.kv.train.n == a.train.n == n + b.train.n
    plain = CalibrationStats(a.identity, SPLIT)
    with pytest.raises(StatsError, match="K/V sums"):
        plain.merge(b)
    with pytest.raises(InputError, match="--kv"):
        kv_fit.fit_kv(plain)


def test_a_stats_file_whose_kv_sums_cover_other_rows_is_refused(tmp_path):
    st, _ = _stats(0.0)
    st.kv.train.n += 1
    with pytest.raises(StatsError, match="other rows"):
        CalibrationStats.load(st.save(tmp_path / "bad.npz"))


def test_non_finite_kv_sums_are_refused():
    st, _ = _stats(0.0)
    st.kv.heldout.xty[3, 0, 0] = np.nan
    with pytest.raises(StatsError, match="K/V statistics for layer"):
        kv_fit.fit_kv(st)


def test_kv_maps_round_trip_the_saved_maps(tmp_path):
    st, _ = _stats(1.0)
    maps = ridge.fit(st)
    maps.kv = kv_fit.fit_kv(st)
    ident = st.identity
    back, _, _ = ridge.load_maps(ridge.save_maps(tmp_path / "m.npz", maps, ident, st.provenance))
    np.testing.assert_array_equal(back.kv.weights, maps.kv.weights)
    np.testing.assert_array_equal(back.kv.weights_prev, maps.kv.weights_prev)
    assert back.kv.fits == maps.kv.fits


@pytest.mark.slow
def test_the_real_capture_fits_kv_maps_that_beat_the_mean(smollm2_path, tmp_path):
    """SmolLM2 split 24 with K/V sums: every late layer's K/V maps predict better than the mean on held-out rows,
    the saved statistics give the same maps, and `fit` reports them."""
    import subprocess
    import sys

    from ridgefill.fit import pipeline
    from ridgefill.fit.capture import CaptureConfig

    cfg = CaptureConfig(split=24, tokens=3072, window=512, n_batch=256, threads=2, kv=True)
    st = pipeline.calibrate(smollm2_path, cfg, show_progress=False)
    assert st.kv.layers == list(range(25, 30)) and st.kv.d_kv == 192 and st.kv.train.n == st.train.n
    kv = kv_fit.fit_kv(st)
    for f in kv.fits:
        assert 0 < f.k_err < 1 and 0 < f.v_err < 1, f
    path = st.save(tmp_path / "s.npz")
    r = subprocess.run([sys.executable, "-m", "ridgefill", "fit", str(smollm2_path), "--stats", str(path),
                        "--maps-out", str(tmp_path / "m.npz")], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "K/V maps" in r.stdout and "K err lagged" in r.stdout
    back, _, _ = ridge.load_maps(tmp_path / "m.npz")
    np.testing.assert_allclose(back.kv.weights, kv.weights, rtol=1e-6)
