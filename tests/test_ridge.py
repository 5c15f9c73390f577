"""Closed-form ridge from streamed statistics, against direct numpy computation."""

import numpy as np
import pytest

from ridgefill.fit import heldout, ridge
from ridgefill.fit.capture import previous_rows
from ridgefill.fit.stats import CalibrationStats, Moments, Provenance, StatsError
from ridgefill.format import ModelIdentity

D = 12


def _identity(n_layer=6, d=D):
    return ModelIdentity("llama", n_layer, d, "0" * 64)


def _x(rng, n):
    return (rng.normal(size=(n, D)) * np.linspace(0.2, 3.0, D) + 1.5).astype(np.float32)


def _lagged(x):
    """The statistics' input for rows x of one window: [x_t, x_{t-1}] (calibrate.previous_rows)."""
    return np.concatenate([x, previous_rows(x, 0)], axis=1)


def _stats(rng, n_train=3000, n_ho=1000):
    """Layer 4: y = W x + b + noise (W not symmetric); layer 5: y = x exactly."""
    st = CalibrationStats(_identity(), split=3, provenance=Provenance(sinks=4))
    w_true = rng.normal(size=(D, D)) / np.sqrt(D)
    b_true = rng.normal(size=D)
    for mom, n in ((st.train, n_train), (st.heldout, n_ho)):
        for _ in range(3):  # streamed in batches
            x = _x(rng, n // 3)
            y4 = x @ w_true.T + b_true + 0.05 * rng.normal(size=x.shape)
            mom.update(_lagged(x), [y4.astype(np.float32), x.copy()])
    return st, [w_true, np.eye(D)], [b_true, np.zeros(D)]


def test_moments_match_direct_sums():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(50, D)).astype(np.float32)
    y = rng.normal(size=(50, D)).astype(np.float32)
    m = Moments(D, 1)
    m.update(x[:20], [y[:20]])
    m.update(x[20:], [y[20:]])
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    np.testing.assert_allclose(m.xtx, x64.T @ x64, rtol=1e-12)
    np.testing.assert_allclose(m.xty[0], x64.T @ y64, rtol=1e-12)
    np.testing.assert_allclose(m.yy[0], (y64 ** 2).sum(), rtol=1e-12)
    assert m.n == 50 and m.yyt is None
    full = Moments(D, 1, outer_y=True)
    full.update(x, [y])
    np.testing.assert_allclose(full.yyt[0], y64.T @ y64, rtol=1e-12)


def test_fit_recovers_map_and_orientation():
    rng = np.random.default_rng(1)
    st, w_true, b_true = _stats(rng)
    maps = ridge.fit(st)
    assert maps.layers == [4, 5]
    w = maps.weights[0].astype(np.float64)
    assert np.abs(w - w_true[0]).max() < 0.05
    # a transposed map would be far off: the test catches orientation
    assert np.abs(w.T - w_true[0]).max() > 0.3
    np.testing.assert_allclose(maps.biases[0], b_true[0], atol=0.1)
    f0, f1 = maps.fits
    assert f0.r2_ridge > 0.99 and f0.r2_ridge > f0.r2_identity
    # layer 5 is y = x exactly: identity is perfect, ridge (small λ) nearly so
    assert f1.r2_identity == pytest.approx(1.0, abs=1e-9)
    assert f1.r2_ridge > 0.999


def test_grid_sse_matches_direct_formula_and_numpy():
    rng = np.random.default_rng(2)
    st, _, _ = _stats(rng)
    eig = ridge._Eig(st.train)
    a, mu_y = eig.a_matrix(st.train, 0)
    lams = [1e-3 * eig.scale, 0.1 * eig.scale, 3.0 * eig.scale]
    fast = heldout.grid_sse(eig, a, mu_y, st.heldout, 0, lams)
    for lam, f in zip(lams, fast):
        w, b = eig.solve(a, mu_y, lam)
        assert f == pytest.approx(heldout.heldout_sse(w, b, st.heldout, 0), rel=1e-9)


def test_closed_form_equals_explicit_ridge():
    """W from the eigendecomposition = solve((Cxx + λI), Cxy) computed directly."""
    rng = np.random.default_rng(3)
    st, _, _ = _stats(rng)
    tr = st.train
    eig = ridge._Eig(tr)
    a, mu_y = eig.a_matrix(tr, 0)
    lam = 0.05 * eig.scale
    w, b = eig.solve(a, mu_y, lam)
    mu_x = tr.sum_x / tr.n
    cxx = tr.xtx / tr.n - np.outer(mu_x, mu_x)
    cxy = tr.xty[0] / tr.n - np.outer(mu_x, mu_y)
    w_ref = np.linalg.solve(cxx + lam * np.eye(2 * D), cxy).T
    np.testing.assert_allclose(w, w_ref, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(b, mu_y - w_ref @ mu_x, rtol=1e-8, atol=1e-10)


def test_stats_save_load_merge(tmp_path):
    rng = np.random.default_rng(4)
    a, _, _ = _stats(rng)
    b, _, _ = _stats(rng)
    pa, pb = a.save(tmp_path / "a.npz"), b.save(tmp_path / "b.npz")
    la = CalibrationStats.load(pa)
    la.merge(CalibrationStats.load(pb))
    assert la.train.n == a.train.n + b.train.n
    np.testing.assert_allclose(la.train.xty, a.train.xty + b.train.xty)
    np.testing.assert_allclose(la.heldout.yyt, a.heldout.yyt + b.heldout.yyt)
    assert la.train.yyt is None and la.provenance.sinks == 4


def test_statistics_without_the_held_out_outer_products_are_refused(tmp_path):
    import json

    a, _, _ = _stats(np.random.default_rng(4), n_train=300, n_ho=90)
    with np.load(a.save(tmp_path / "a.npz")) as z:
        arrays = {k: z[k] for k in z.files if k != "heldout_yyt"}
        meta = json.loads(str(z["meta"]))
    np.savez(tmp_path / "no-yyt.npz", **arrays)
    with pytest.raises(StatsError, match="heldout_yyt has no array"):
        CalibrationStats.load(tmp_path / "no-yyt.npz")
    arrays["meta"] = np.array(json.dumps({**meta, "format": "ridgefill-stats/2"}))
    np.savez(tmp_path / "v2.npz", **arrays)
    with pytest.raises(StatsError, match="capture them again"):
        CalibrationStats.load(tmp_path / "v2.npz")


def test_merge_refuses_other_model(tmp_path):
    a = CalibrationStats(_identity(), 3)
    b = CalibrationStats(ModelIdentity("llama", 6, D, "1" * 64), 3)
    with pytest.raises(StatsError, match="different models"):
        a.merge(b)
    with pytest.raises(StatsError, match="different splits"):
        a.merge(CalibrationStats(_identity(), 2))


def test_nonfinite_statistics_name_the_layer():
    st = CalibrationStats(_identity(), 3)
    x = np.ones((4, D), np.float32)
    y_bad = np.full((4, D), np.nan, np.float32)
    st.train.update(_lagged(x), [x, y_bad])
    st.heldout.update(_lagged(x), [x, x])
    with pytest.raises(StatsError, match="layer\\(s\\) 5"):
        ridge.fit(st)


def test_split_out_of_range():
    with pytest.raises(StatsError, match="out of range"):
        CalibrationStats(_identity(), 5)
    with pytest.raises(StatsError, match="out of range"):
        CalibrationStats(_identity(), 0)


def test_load_rejects_garbage(tmp_path):
    p = tmp_path / "x.npz"
    p.write_bytes(b"not a zip")
    with pytest.raises(StatsError, match="cannot read"):
        CalibrationStats.load(p)


def test_blend_falls_back_to_identity_where_held_out_rows_say_so():
    """Training rows follow y = 2x on a subspace the held-out rows do not share; there y = x.
    The ridge map's held-out error is then worse than the identity's, and α goes to 0; on
    statistics where the map generalises, α stays 1. The stored map is I + α(W − I)."""
    rng = np.random.default_rng(4)
    st = CalibrationStats(_identity(), split=3, provenance=Provenance(sinks=4))
    for _ in range(2):
        x = _x(rng, 2000)
        st.train.update(_lagged(x), [(2.0 * x).astype(np.float32), (2.0 * x).astype(np.float32)])
    x = _x(rng, 800)
    st.heldout.update(_lagged(x), [x.copy(), (2.0 * x).astype(np.float32)])
    maps = ridge.fit(st, refit_all=False)
    back, keep = maps.fits
    assert back.blend == 0.0 and keep.blend == 1.0
    np.testing.assert_array_equal(maps.weights[0], np.eye(D, dtype=np.float32))
    np.testing.assert_array_equal(maps.biases[0], 0)
    assert back.r2_ridge == pytest.approx(back.r2_identity)
    np.testing.assert_allclose(maps.weights[1], 2 * np.eye(D), atol=1e-3)
    unblended = ridge.fit(st, refit_all=False, blend=False)
    assert unblended.fits[0].r2_ridge < back.r2_ridge and unblended.fits[0].blend == 1.0


def test_best_blend_is_the_minimum_of_the_held_out_parabola():
    rng = np.random.default_rng(5)
    st, _, _ = _stats(rng)
    w = rng.normal(size=(D, D)) / np.sqrt(D)
    b = rng.normal(size=D)
    ho = st.heldout.head(D)
    alpha, sse = heldout.best_blend(w, b, ho, 0)
    grid = np.linspace(0, 1, 2001)
    errs = [heldout.heldout_sse(np.eye(D) + a * (w - np.eye(D)), a * b, ho, 0) for a in grid]
    assert sse == pytest.approx(min(errs), rel=1e-6)
    assert alpha == pytest.approx(grid[int(np.argmin(errs))], abs=1e-3)


def test_a_fixed_lambda_is_used_for_every_layer_and_matches_numpy():
    rng = np.random.default_rng(6)
    st, _, _ = _stats(rng)
    maps = ridge.fit(st, grid=(3.0,), refit_all=False, blend=False)
    assert [f.lam_rel for f in maps.fits] == [3.0, 3.0]
    tr = st.train.head(D)  # the per-row map reads the statistics' first D columns
    mu_x = tr.sum_x / tr.n
    cxx = tr.xtx / tr.n - np.outer(mu_x, mu_x)
    lam = 3.0 * np.trace(cxx) / D
    mu_y = tr.sum_y[0] / tr.n
    cxy = tr.xty[0] / tr.n - np.outer(mu_x, mu_y)
    w_ref = np.linalg.solve(cxx + lam * np.eye(D), cxy).T
    np.testing.assert_allclose(maps.weights[0], w_ref, rtol=1e-4, atol=1e-5)
    default = ridge.fit(st, refit_all=False, blend=False)
    assert default.fits[0].r2_ridge > maps.fits[0].r2_ridge  # λ = 3 scales over-shrink a well-posed map


@pytest.mark.parametrize("grid", [(), (0.0,), (-1.0,), (float("nan"),), (1e-3, float("inf"))])
def test_a_bad_lambda_grid_is_refused(grid):
    from ridgefill.errors import InputError

    st, _, _ = _stats(np.random.default_rng(7), n_train=300, n_ho=90)
    with pytest.raises(InputError, match="λ grid"):
        ridge.fit(st, grid=grid)


def _sequence_stats(rng, n_train=4000, n_ho=1500, lag_weight=0.8):
    """Rows of windows where layer 4 reads the previous row too, y4 = A x_t + lag_weight B x_{t-1} + b
    (a previous-token head), and layer 5 is y = x."""
    st = CalibrationStats(_identity(), split=3, provenance=Provenance(sinks=4))
    a, bm = rng.normal(size=(D, D)) / np.sqrt(D), rng.normal(size=(D, D)) / np.sqrt(D)
    bias = rng.normal(size=D)
    for mom, n in ((st.train, n_train), (st.heldout, n_ho)):
        for _ in range(4):  # windows
            x = _x(rng, n // 4)
            y4 = x @ a.T + lag_weight * previous_rows(x, 0) @ bm.T + bias + 0.02 * rng.normal(size=x.shape)
            mom.update(_lagged(x), [y4.astype(np.float32), x.copy()])
    return st, a, lag_weight * bm, bias


def test_a_lagged_map_is_kept_where_the_previous_row_matters():
    st, a, bm, bias = _sequence_stats(np.random.default_rng(8))
    maps = ridge.fit(st)
    lagged, plain = maps.fits
    assert lagged.lag and lagged.r2_lag > 0.99 > lagged.r2_row and lagged.r2_ridge == lagged.r2_lag
    assert np.abs(maps.weights[0] - a).max() < 0.05 and np.abs(maps.prev(0) - bm).max() < 0.05
    # once the split lags, a layer reads the previous row wherever that lowers its held-out error at all
    assert plain.lag == (plain.r2_lag > plain.r2_row) and (maps.prev(1) is None) != plain.lag
    assert maps.weights_prev.shape == maps.weights.shape
    # no previous row in the fit: the per-row map, whatever the statistics carry
    none = ridge.fit(st, lag_gain=None)
    assert none.weights_prev is None and not any(f.lag for f in none.fits)
    assert none.fits[0].r2_row == pytest.approx(lagged.r2_row) and none.fits[0].r2_ridge >= lagged.r2_row


def test_a_lagged_map_equals_explicit_ridge_on_both_rows():
    """W = [W_row, W_prev] = solve(Cxx + λI, Cxy)ᵀ over x = [x_t, x_{t-1}] (train + held-out rows)."""
    st, _, _, _ = _sequence_stats(np.random.default_rng(9), lag_weight=0.3)
    maps = ridge.fit(st, grid=(1e-2,), blend=False, lag_gain=0.0)
    assert maps.fits[0].lag
    tot = Moments(2 * D, 2, D)
    tot += st.train
    tot += st.heldout
    mu_x, mu_y = tot.sum_x / tot.n, tot.sum_y[0] / tot.n
    cxx = tot.xtx / tot.n - np.outer(mu_x, mu_x)
    cxy = tot.xty[0] / tot.n - np.outer(mu_x, mu_y)
    w_ref = np.linalg.solve(cxx + 1e-2 * np.trace(cxx) / (2 * D) * np.eye(2 * D), cxy).T
    np.testing.assert_allclose(maps.weights[0], w_ref[:, :D], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(maps.prev(0), w_ref[:, D:], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(maps.biases[0], mu_y - w_ref @ mu_x, rtol=1e-4, atol=1e-4)


def test_a_small_gain_keeps_the_per_row_map():
    """The previous row helps layer 4 a little (held-out error −3 %) and no layer more: the default keeps
    per-row maps, lag_gain 0 takes the lagged one."""
    st, _, _, _ = _sequence_stats(np.random.default_rng(10), lag_weight=0.002)
    default, eager = ridge.fit(st), ridge.fit(st, lag_gain=0.0)
    assert not default.fits[0].lag and eager.fits[0].lag
    assert 1 - default.fits[0].r2_row > 1 - eager.fits[0].r2_lag > (1 - ridge.DEFAULT_LAG_GAIN) * (1 - default.fits[0].r2_row)


@pytest.mark.parametrize("gain", [-0.1, 1.0, float("nan")])
def test_a_bad_lag_gain_is_refused(gain):
    from ridgefill.errors import InputError

    st, _, _ = _stats(np.random.default_rng(7), n_train=300, n_ho=90)
    with pytest.raises(InputError, match="lag gain"):
        ridge.fit(st, lag_gain=gain)


def test_previous_rows_shift_one_row_and_carry_the_chunk_before():
    h = np.arange(12.0).reshape(4, 3)
    np.testing.assert_array_equal(previous_rows(h, 0), h[[0, 0, 1, 2]])  # the window's first row stands for itself
    np.testing.assert_array_equal(previous_rows(h, 2), h[[1, 2]])
    before = np.full(3, -1.0)
    np.testing.assert_array_equal(previous_rows(h, 0, before), np.vstack([before, h[:3]]))


def test_statistics_of_another_shape_are_refused(tmp_path):
    st, _, _ = _stats(np.random.default_rng(11), n_train=300, n_ho=90)
    p = st.save(tmp_path / "a.npz")
    other = CalibrationStats(ModelIdentity("llama", 6, D + 1, "0" * 64), 3)
    other.train, other.heldout = st.train, st.heldout
    q = other.save(tmp_path / "b.npz")
    assert CalibrationStats.load(p).train.n == st.train.n
    with pytest.raises(StatsError, match="train_sum_x has shape"):
        CalibrationStats.load(q)


def _key_stats(rng, lag_weight=0.3, n_train=6000, n_ho=2000):
    """Layer 4 gets the previous row in one direction (its coordinate 0), beside unit noise in the other
    D - 2 coordinates: its input error barely moves with the previous row, the keys P reads (coordinates
    0 and 1, quiet) do. Layer 5: y = x."""
    st = CalibrationStats(_identity(), split=3, provenance=Provenance(sinks=4))
    a, v = rng.normal(size=(D, D)) / np.sqrt(D), rng.normal(size=D) / np.sqrt(D)
    noise = np.r_[0.02, 0.02, np.ones(D - 2)]
    for mom, n in ((st.train, n_train), (st.heldout, n_ho)):
        for _ in range(4):
            x = _x(rng, n // 4)
            y4 = x @ a.T + noise * rng.normal(size=x.shape)
            y4[:, 0] += lag_weight * previous_rows(x, 0) @ v
            mom.update(_lagged(x), [y4.astype(np.float32), x.copy()])
    p = np.zeros((2, D))
    p[0, 0], p[1, 1] = 1.5, -0.7
    return st, p


def test_key_error_from_statistics_equals_direct_sums():
    rng = np.random.default_rng(12)
    x = _lagged(_x(rng, 300)).astype(np.float64)
    y = rng.normal(size=(300, D)) + 2.0
    mom = Moments(2 * D, 1, D, outer_y=True)
    mom.update(x[:120], [y[:120]])
    mom.update(x[120:], [y[120:]])
    p, w, b = rng.normal(size=(5, D)), rng.normal(size=(D, 2 * D)), rng.normal(size=D)
    err = (y - x @ w.T - b) @ p.T
    assert heldout.heldout_sse(w, b, mom, 0, p) == pytest.approx((err ** 2).sum(), rel=1e-9)
    centred = (y - y.mean(0)) @ p.T
    assert heldout.heldout_sst(mom, 0, p) == pytest.approx((centred ** 2).sum(), rel=1e-9)


def test_the_keys_can_decide_a_lag_the_input_error_does_not_see():
    st, p = _key_stats(np.random.default_rng(13))
    blind, measured, keyed = ridge.fit(st), ridge.fit(st, keys={4: p}), ridge.fit(st, keys={4: p}, lag_keys=True)
    f_blind, f_measured, f_keyed = blind.fits[0], measured.fits[0], keyed.fits[0]
    # the previous row cuts layer 4's input error by less than the gain, its key error by far more
    assert 1 - f_blind.r2_lag > (1 - ridge.DEFAULT_LAG_GAIN) * (1 - f_blind.r2_row)
    assert not f_blind.lag and blind.weights_prev is None and f_blind.k_err_row is None
    # measured and reported, the keys decide only when asked to
    assert not f_measured.lag and f_measured.k_err_lag < 0.2 * f_measured.k_err_row
    np.testing.assert_array_equal(measured.weights, blind.weights)
    assert f_keyed.lag and keyed.prev(0) is not None
    assert f_keyed.k_err_lag < 0.2 * f_keyed.k_err_row
    assert keyed.fits[1].k_err_row is None  # no projection given for layer 5
    # the keys only add a reason to lag: with no lag to take, they change nothing
    none = ridge.fit(st, keys={4: p}, lag_gain=None, lag_keys=True)
    assert none.weights_prev is None and none.fits[0].k_err_lag is None
    np.testing.assert_array_equal(none.weights, ridge.fit(st, lag_gain=None).weights)
