"""Window maps fitted from window statistics (window_fit.py), against planted linear models: no model loads."""

import numpy as np
import pytest

from ridgefill.fit import ridge, window_fit
from ridgefill.fit.capture import earlier_rows
from ridgefill.fit.stats import CalibrationStats, MapInputs, Provenance, StatsError
from ridgefill.format import ModelIdentity

D, W = 12, 4


def _stats(rng, lag3: float, basis=None, n_windows=(40, 12), rows=160):
    """Layer 4: y = A h(t) + lag3 * B h(t-3) + noise with B of rank 2; layer 5: y = C h(t) + noise."""
    basis = np.eye(D) if basis is None else basis
    st = CalibrationStats(ModelIdentity("llama", 6, D, "0" * 64), 3, Provenance(sinks=4), basis=basis, window=W)
    a, c = (rng.normal(size=(D, D)) / np.sqrt(D) for _ in range(2))
    b = rng.normal(size=(D, 2)) @ rng.normal(size=(2, D)) / np.sqrt(D)
    for mom, n in zip((st.train, st.heldout), n_windows):
        for _ in range(n):
            h = rng.normal(size=(rows, D)) * np.linspace(0.5, 2.0, D) + 0.3
            e = earlier_rows(h, 0, W)
            y4 = h @ a.T + lag3 * e[:, 2 * D:3 * D] @ b.T + 0.05 * rng.normal(size=h.shape)
            y5 = h @ c.T + 0.05 * rng.normal(size=h.shape)
            mom.update(st.inputs.x(h, e), [y4, y5])
    return st, (a, b, c)


def test_a_planted_earlier_row_is_found_and_the_fork_projection_predicts_it():
    rng = np.random.default_rng(0)
    st, (a, b, c) = _stats(rng, lag3=1.0)
    maps = ridge.fit(st)
    r2_before = maps.fits[0].r2_ridge
    rep = window_fit.add_window(maps, st, ranks=(1, 2, 4))
    assert rep.rows == 4 and rep.rank >= 2, rep.lines()  # row t-3 needs a width of 4 and rank 2
    assert maps.fits[0].window and maps.fits[0].r2_ridge > 0.99 > r2_before
    assert maps.window.shape == (rep.rank, 4 * D) and maps.win(0).shape == (D, rep.rank)
    # what the fork computes: W h(t) + W_win (rf_window [h(t-1); ..; h(t-4)]) + b, on new rows
    h = rng.normal(size=(300, D)) * np.linspace(0.5, 2.0, D) + 0.3
    e = earlier_rows(h, 0, 4)
    want = h @ a.T + e[:, 2 * D:3 * D] @ b.T
    got = h @ maps.weights[0].T + (e @ maps.window.T) @ maps.win(0).T + maps.biases[0]
    assert np.abs(got - want).max() / np.abs(want).max() < 0.05
    assert maps.fits[1].r2_window is not None and "kept: rows t-1..t-4" in rep.lines()[0]


def test_no_window_where_earlier_rows_carry_nothing():
    rng = np.random.default_rng(1)
    st, _ = _stats(rng, lag3=0.0)
    maps = ridge.fit(st)
    before = maps.weights.copy()
    rep = window_fit.add_window(maps, st, ranks=(2, 4))
    assert rep.rows == 0 and maps.window is None and not any(f.window for f in maps.fits)
    np.testing.assert_array_equal(maps.weights, before)
    assert all(s > 0.95 * rep.base_score for _, _, s in rep.tried)


def test_a_projected_basis_keeps_what_it_spans():
    """With a basis of q < d directions the window reads only Vᵀh(t-j): a signal inside its span is found."""
    rng = np.random.default_rng(2)
    basis = np.linalg.qr(rng.normal(size=(D, D)))[0]
    st, _ = _stats(rng, lag3=1.0, basis=basis)
    maps = ridge.fit(st)
    assert window_fit.add_window(maps, st, ranks=(2,)).rows == 4 and maps.fits[0].r2_ridge > 0.99


def test_window_statistics_save_load_and_merge_only_with_the_same_basis(tmp_path):
    rng = np.random.default_rng(3)
    st, _ = _stats(rng, lag3=1.0, n_windows=(2, 1), rows=40)
    back = CalibrationStats.load(st.save(tmp_path / "w.npz"))
    assert back.inputs.same(st.inputs) and back.train.xtx.shape == (2 * D + W * D,) * 2
    np.testing.assert_array_equal(back.train.xty, st.train.xty)
    back.merge(st)
    assert back.train.n == 2 * st.train.n
    other, _ = _stats(rng, lag3=1.0, basis=np.linalg.qr(rng.normal(size=(D, D)))[0], n_windows=(1, 1), rows=40)
    with pytest.raises(StatsError, match="different window columns"):
        st.merge(other)
    plain = CalibrationStats(st.identity, 3, Provenance(sinks=4))
    with pytest.raises(StatsError, match="different window columns"):
        plain.merge(st)


@pytest.mark.parametrize("kwargs", [dict(basis=np.eye(D), window=0), dict(window=2), dict(basis=np.eye(D), window=17)])
def test_map_inputs_refuse_a_window_without_a_basis_and_the_reverse(kwargs):
    with pytest.raises(StatsError):
        MapInputs(3, **kwargs)


def test_the_window_columns_are_the_basis_projections_of_earlier_rows():
    rng = np.random.default_rng(4)
    h = rng.normal(size=(6, D))
    basis = rng.normal(size=(D, 3))
    x = MapInputs(3, basis, 2).x(h, earlier_rows(h, 0, 2))
    np.testing.assert_array_equal(x[:, :D], h)
    np.testing.assert_array_equal(x[:, D:2 * D], h[[0, 0, 1, 2, 3, 4]])
    np.testing.assert_allclose(x[:, 2 * D:2 * D + 3], h[[0, 0, 1, 2, 3, 4]] @ basis)
    np.testing.assert_allclose(x[:, 2 * D + 3:], h[[0, 0, 0, 1, 2, 3]] @ basis)


@pytest.mark.slow
def test_window_statistics_shard_and_fit_maps_the_fork_runs_as_numpy(smollm2_path, tmp_path):
    """`calibrate --window-rows` (its own basis pass), shards of it with `--basis-from` that merge to the single
    run, then `fit --stats` keeps window maps, and the fork's filled layer inputs are those maps in numpy."""
    import subprocess
    import sys

    from conftest import calibrate_cli, check_earlier_inputs
    from ridgefill.fit import pipeline
    from ridgefill.runtime import Model

    win = ("--window-rows", 3, "--window-basis", 24)
    one = calibrate_cli(smollm2_path, tmp_path / "one.npz", *win, tokens=4096)
    assert one.inputs.window == 3 and one.inputs.basis.shape == (576, 24)
    for i in (0, 1):
        calibrate_cli(smollm2_path, tmp_path / f"s{i}.npz", *win, "--basis-from", tmp_path / "one.npz",
                      "--shard", f"{i}/2", tokens=4096)
    merged = pipeline.load_stats([tmp_path / f"s{i}.npz" for i in (0, 1)])
    assert merged.inputs.same(one.inputs) and merged.train.n == one.train.n
    np.testing.assert_allclose(merged.train.xtx, one.train.xtx, rtol=1e-9, atol=1e-6)

    out, maps_out = tmp_path / "win.gguf", tmp_path / "win-maps.npz"
    run = subprocess.run([sys.executable, "-m", "ridgefill", "fit", str(smollm2_path), "--stats", str(tmp_path / "one.npz"),
                          "--window-gain", "0", "--window-ranks", "8,16", "--type", "f32", "--maps-out", str(maps_out),
                          "-o", str(out)], capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "window maps: held-out error" in run.stdout and "kept: rows t-1..t-" in run.stdout, run.stdout[-3000:]
    maps, _, _ = ridge.load_maps(maps_out)
    late = [f.layer for f in maps.fits if f.window][:3]
    assert late and maps.window.shape[1] == maps.window_rows * 576
    model = Model(out)
    check_earlier_inputs(model, maps, model.tokenize("The quick brown fox jumps over the lazy dog. " * 40)[:400],
                         maps.split, late, n_batch=400, n_ubatch=96, sinks=4, tail=32, tol=2e-4, min_window=2e-3)
