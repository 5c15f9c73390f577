"""bench overhead's arithmetic: the ratio of paired rounds and its interval."""

from __future__ import annotations

import pytest

from ridgefill.bench import overhead


def test_ratio_is_the_geometric_mean_of_paired_rounds_and_its_interval_holds_it():
    exact = [100.0, 200.0, 120.0, 90.0]
    ridge = [110.0, 220.0, 132.0, 99.0]  # 10 % slower in every round, whatever the round's speed
    ratio, lo, hi = overhead.ratio_interval(exact, ridge)
    assert ratio == pytest.approx(1.10) and lo == pytest.approx(1.10) and hi == pytest.approx(1.10)
    assert not overhead.within({"ratio": ratio}, 0.02)

    ratio, lo, hi = overhead.ratio_interval([100.0, 100.0, 100.0, 100.0], [99.0, 101.0, 98.0, 102.0])
    assert lo < ratio < hi and ratio == pytest.approx(1.0, abs=1e-3)
    assert overhead.within({"ratio": ratio}, 0.02)


def test_the_report_says_which_tests_are_within_the_tolerance():
    rows = [{"test": t, "rounds": 2, "reps": 1, "exact_ms": [10.0, 10.0], "ridge_ms": r, "ratio": x, "ratio_lo": x,
             "ratio_hi": x} for t, r, x in (("tg128", [10.1, 10.1], 1.01), ("pp512", [11.0, 11.0], 1.10))]
    table = overhead.markdown("m.gguf", rows)
    assert "| tg128 | 2 x 1 | 10.0 | 10.1 | 1.010 (1.010-1.010) | yes |" in table
    assert "| pp512 | 2 x 1 | 10.0 | 11.0 | 1.100 (1.100-1.100) | no |" in table


@pytest.mark.slow  # runs llama-bench
def test_ridge_mode_with_lagged_maps_computes_exact_graphs_where_nothing_is_filled(shared_models):
    model, _ = shared_models.random_maps("smollm2", 20, seed=1, lag_every=2)  # test_fill's lagged maps
    # a prompt shorter than the sinks and the tail, then decoding: no split state kept, no map, no copy; and a
    # context shorter than the default probe of 64 rows, which selection off must not refuse
    for test in (["-p", "32", "-n", "0"], ["-p", "0", "-n", "4"]):
        assert overhead.same_graph(str(model.path), test), test
    # the listing tells graphs apart: where a fill range follows, ridge mode keeps states and fills
    filling = ["-p", "64", "-n", "0", "--ridgefill-sink", "4", "--ridgefill-tail", "8"]
    exact, ridge = (overhead.graph_nodes(str(model.path), filling, mode) for mode in ("exact", "ridge"))
    assert exact != ridge and any("SET_ROWS" in n and "rf_kept" in n for n in ridge), ridge[-5:]
