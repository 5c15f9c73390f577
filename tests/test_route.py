"""Routed rows: the rows of a fill ubatch with the highest leverage run the late layers in full.

References, all exact computation:
- p = 0 is today's fill, bit for bit (cached K/V of every layer);
- p = 1 routes every filled row, so the cache equals an exact prefill cut into the same ubatches;
- a routed row's K/V equal "the full model over a cache of filled and exact rows": the same
  prompt decoded as [filled rows before r] + [row r, exact] + [filled rows after r];
- the row routed is the one numpy's leverage (route.py) ranks first, and a row planted out of
  the calibration distribution is that row.
"""

import numpy as np
import pytest

from ridgefill import format as fmt
from ridgefill.fit import route
from ridgefill.errors import InputError
from ridgefill.fit.ridge import LayerFit, Maps
from ridgefill.fit.stats import Moments, Provenance

SPLIT, N, SINKS, TAIL, UBATCH = 20, 200, 8, 16, 256


# ---- statistics (no model) ---------------------------------------------------------------

def _moments(x: np.ndarray) -> Moments:
    mom = Moments(x.shape[1], 0)
    mom.n, mom.sum_x, mom.xtx = len(x), x.sum(axis=0), x.T @ x
    return mom


def test_leverage_is_the_regularised_mahalanobis_distance():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(500, 16)) @ rng.normal(size=(16, 16)) + 3.0
    stats = route.from_moments(_moments(x), eps=1e-3)
    mu, cov = x.mean(axis=0), np.cov(x.T, bias=True)
    reg = cov + 1e-3 * np.trace(cov) / 16 * np.eye(16)
    h = rng.normal(size=(7, 16)) * 4
    want = np.einsum("ij,ij->i", h - mu, np.linalg.solve(reg, (h - mu).T).T)
    np.testing.assert_allclose(route.leverage(h, stats), want, rtol=2e-4)
    assert np.allclose(np.triu(stats.whiten, 1), 0)


def test_far_rows_score_highest():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(1000, 8))
    stats = route.from_moments(_moments(x))
    h = np.vstack([rng.normal(size=(20, 8)), 6 * np.ones((1, 8))])
    assert int(np.argmax(route.leverage(h, stats))) == 20


def test_n_routed_is_ceil_of_the_share():
    assert [route.n_routed(p, 512) for p in (0, 0.02, 0.05, 0.1, 1.0)] == [0, 11, 26, 52, 512]
    assert route.n_routed(0.001, 10) == 1
    assert route.n_routed(1.0, 7) == 7
    # a share is the decimal it was written as, though the fork holds it as a float (0.1f*340 = 34.0000005)
    assert [route.share_rows(q, n) for q, n in ((0.1, 340), (0.05, 220), (0.1, 260), (0.1, 341))] == [34, 11, 26, 35]


def test_too_few_rows_is_an_error():
    with pytest.raises(InputError, match="at least 2"):
        route.from_moments(_moments(np.ones((1, 4))))


def test_fit_stores_routing_statistics_of_the_training_rows():
    from ridgefill.fit import ridge
    from ridgefill.fit.stats import CalibrationStats
    from ridgefill.format import ModelIdentity

    rng = np.random.default_rng(2)
    d = 6
    stats = CalibrationStats(ModelIdentity("llama", 5, d, "0" * 64), split=2)
    for part, n in ((stats.train, 300), (stats.heldout, 100)):
        x = rng.normal(size=(n, d))
        ys = [x @ rng.normal(size=(d, d)) for _ in stats.layers]
        part.update(np.hstack([x, rng.normal(size=(n, d))]), ys)  # x = [h_s(t), h_s(t-1)]
    maps = ridge.fit(stats)
    both = stats.train.n + stats.heldout.n
    assert maps.route is not None and maps.route.mean.shape == (d,)
    np.testing.assert_allclose(maps.route.mean, (stats.train.sum_x + stats.heldout.sum_x)[:d] / both, rtol=1e-5)


# ---- the fork (SmolLM2) ------------------------------------------------------------------

def _route_model(base, out, calib_rows: np.ndarray, seed: int = 0, split: int = SPLIT, noise: float = 0.05):
    """base + maps at `split` (W = I + noise, b = noise; noise 0: identity maps) + routing statistics
    from calib_rows (split-layer states)."""
    ident = fmt.identity_of(base)
    rng = np.random.default_rng(seed)
    layers = list(range(split + 1, ident.n_layer))
    d = ident.n_embd
    w = (np.eye(d) + noise * rng.normal(size=(len(layers), d, d))).astype(np.float32)
    b = (2 * noise * rng.normal(size=(len(layers), d))).astype(np.float32)
    maps = Maps(split, layers, w, b, [LayerFit(l, 0, 0, 0, 0, 0, 0) for l in layers],
                route=route.from_moments(_moments(calib_rows.astype(np.float64))))
    from ridgefill.runtime import Model

    return Model(fmt.pack(base, maps, ident, Provenance(), out, map_type="f32")), maps


def _ctx(model, capture=()):
    return model.context(n_ctx=1024, n_batch=UBATCH, n_ubatch=UBATCH, threads=2, flash_attn="on", kv_type="f32",
                         capture=capture)


def _cache(ctx, n_layer, n):
    return {(il, part): ctx.state_get(il, part, 0, n) for il in range(n_layer) for part in ("k", "v")}


def _head(ctx, tokens, p, mode="ridge"):
    ctx.seq_rm(0)
    ctx.set_fill(mode)
    ctx.set_route(p)
    res = ctx.prefill_head(tokens, sinks=SINKS, tail=TAIL)
    return res, ctx.routed_count


@pytest.fixture(scope="module")
def prompt(smollm2, sample_text):
    return np.asarray(smollm2.tokenize(sample_text)[:N], np.int32)


@pytest.fixture(scope="module")
def h_s(smollm2, prompt):
    """Exact split-layer states of the prompt's rows."""
    ctx = _ctx(smollm2, capture=[SPLIT])
    ctx.decode(prompt, 0, outputs="last")
    return ctx.layer_input(SPLIT).astype(np.float64)


@pytest.fixture(scope="module")
def model(smollm2_path, h_s, tmp_path_factory):
    return _route_model(smollm2_path, tmp_path_factory.mktemp("route") / "route.gguf", h_s)


@pytest.mark.slow
def test_model_reports_its_routing_statistics(model, smollm2):
    m, maps = model
    assert m.rf_has_route and m.rf_route_fraction == 0.0
    assert not smollm2.rf_has_route
    mean, whiten = fmt.read_route(m.path)
    np.testing.assert_array_equal(mean, maps.route.mean)
    np.testing.assert_array_equal(whiten, maps.route.whiten)
    assert fmt.inspect(m.path)["route"] and fmt.inspect(m.path)["loads"]


@pytest.mark.slow
def test_p0_is_todays_fill_bit_for_bit(model, prompt):
    m, _ = model
    ctx = _ctx(m)
    ctx.set_fill("ridge")
    ctx.seq_rm(0)
    ctx.prefill_head(prompt, sinks=SINKS, tail=TAIL)
    before = _cache(ctx, m.n_layer, N - TAIL)
    res, routed = _head(ctx, prompt, 0.0)
    assert routed == 0 and res.n_filled == N - TAIL - SINKS
    after = _cache(ctx, m.n_layer, N - TAIL)
    for key in before:
        np.testing.assert_array_equal(after[key], before[key], err_msg=str(key))


@pytest.mark.slow
def test_p1_routes_every_filled_row_and_equals_exact(model, prompt):
    m, _ = model
    ctx = _ctx(m)
    res, routed = _head(ctx, prompt, 1.0)
    assert routed == res.n_filled == N - TAIL - SINKS
    got = _cache(ctx, m.n_layer, N - TAIL)
    # exact computation cut into the same ubatches: sinks, then the rest of the head
    ctx.seq_rm(0)
    ctx.set_route(0.0)
    ctx.set_fill("exact")
    ctx.decode(prompt[:SINKS], 0, outputs="none")
    ctx.decode(prompt[SINKS : N - TAIL], SINKS, outputs="none")
    want = _cache(ctx, m.n_layer, N - TAIL)
    for key in want:
        np.testing.assert_allclose(got[key], want[key], rtol=1e-4, atol=1e-4, err_msg=str(key))
    filled = _cache_after_fill(ctx, m, prompt)
    late = [(il, p) for il in range(SPLIT + 1, m.n_layer) for p in ("k", "v")]
    assert max(np.abs(filled[k] - want[k]).max() for k in late) > 1e-2  # the fill differs; routing undid it


def _cache_after_fill(ctx, m, prompt):
    _head(ctx, prompt, 0.0)
    return _cache(ctx, m.n_layer, N - TAIL)


@pytest.mark.slow
def test_the_routed_row_is_the_highest_leverage_one_and_runs_in_full(model, prompt, h_s):
    """k = 1: the row numpy ranks first is routed. Every other row, and that row below the late
    layers, keeps the fill's K/V bit for bit; its late-layer K/V are the full model's over a cache of
    filled and exact rows: the prompt decoded as [fill before r] + [r, full model] + [fill after r].
    That reference cuts the lower layers into other ubatches, whose kernels round differently
    (llama.cpp's batch-partition noise), so the late rows are held to a tenth of the fill's error."""
    m, maps = model
    n_fill = N - TAIL - SINKS
    lev = route.leverage(h_s[SINKS : N - TAIL], maps.route)
    r = SINKS + int(np.argmax(lev))
    assert np.sort(lev)[-1] > 1.01 * np.sort(lev)[-2]  # a clear first (else float order could pick another)
    ctx = _ctx(m)
    _, routed = _head(ctx, prompt, 0.5 / n_fill)
    assert routed == 1
    got = _cache(ctx, m.n_layer, N - TAIL)
    filled = _cache_after_fill(ctx, m, prompt)

    ctx.seq_rm(0)
    ctx.set_fill("ridge")
    ctx.decode(prompt[:SINKS], 0, outputs="none")
    for lo, hi, fill in ((SINKS, r, True), (r, r + 1, False), (r + 1, N - TAIL, True)):
        if hi > lo:
            ctx.set_fill_range(0, lo, hi if fill else lo)
            ctx.decode(prompt[lo:hi], lo, outputs="none")
    ctx.set_fill_range(0, 0, 0)
    want = _cache(ctx, m.n_layer, N - TAIL)

    others = np.arange(N - TAIL) != r
    for (il, part), rows in got.items():
        np.testing.assert_array_equal(rows[others], filled[(il, part)][others], err_msg=f"{il} {part}")
        if il <= SPLIT:
            np.testing.assert_array_equal(rows[r], filled[(il, part)][r], err_msg=f"{il} {part}")
            continue
        err_routed = np.abs(rows[r] - want[(il, part)][r]).max()
        err_filled = np.abs(filled[(il, part)][r] - want[(il, part)][r]).max()
        assert err_routed < 0.1 * err_filled, (il, part, err_routed, err_filled)


def _one_call_and_one_per_ubatch(m, prompt, ub=64, p=0.1):
    """The head decoded in one call of several fill ubatches, then in one call per ubatch (same cuts):
    (routed rows expected, the two caches, the cache of the plain fill)."""
    ctx = m.context(n_ctx=1024, n_batch=UBATCH, n_ubatch=ub, threads=2, flash_attn="on", kv_type="f32")
    cuts = list(range(SINKS, N - TAIL, ub)) + [N - TAIL]
    want_routed = sum(int(np.ceil(p * (hi - lo))) for lo, hi in zip(cuts, cuts[1:]))
    _, routed = _head(ctx, prompt, p)
    assert routed == want_routed and len(cuts) > 3
    got = _cache(ctx, m.n_layer, N - TAIL)

    ctx.seq_rm(0)
    ctx.reset_fill_counts()
    ctx.decode(prompt[:SINKS], 0, outputs="none")
    ctx.set_fill_range(0, SINKS, N - TAIL)
    for lo, hi in zip(cuts, cuts[1:]):
        ctx.decode(prompt[lo:hi], lo, outputs="none")
    ctx.set_fill_range(0, 0, 0)
    assert ctx.routed_count == want_routed
    want = _cache(ctx, m.n_layer, N - TAIL)
    return want_routed, got, want, _cache_after_fill(ctx, m, prompt)


@pytest.mark.slow
def test_routed_rows_of_one_decode_call_run_as_they_would_after_each_ubatch(model, prompt):
    """A decode call of several fill ubatches routes each ubatch's own picks, but runs them in one
    pass at its end; decoding each ubatch in a call of its own routes after every ubatch. Both
    route the same rows and write the same cache: no fill ubatch reads a routed row's late K/V."""
    m, _ = model
    n_routed, got, want, filled = _one_call_and_one_per_ubatch(m, prompt)
    last_k = (m.n_layer - 1, "k")
    assert np.count_nonzero(np.abs(got[last_k] - filled[last_k]).max(axis=1) > 0) == n_routed
    for key in want:
        np.testing.assert_allclose(got[key], want[key], rtol=1e-5, atol=1e-5, err_msg=str(key))


@pytest.mark.slow
def test_a_sliding_window_cache_routes_across_ubatches_too(shared_models, prompt, tmp_path):
    """gemma3's SWA cache routes after every fill ubatch (its next ubatch may take window cells);
    one call of several ubatches still equals one call per ubatch."""
    from ridgefill.runtime import Model

    base, split = shared_models.base("gemma3-270m"), 12
    m, _ = _route_model(base, tmp_path / "route.gguf", _states(Model(base), prompt, split), split=split)
    _, got, want, filled = _one_call_and_one_per_ubatch(m, prompt)
    assert _late_err(got, filled, split, m.n_layer) > 1e-2
    for key in want:
        np.testing.assert_allclose(got[key], want[key], rtol=1e-5, atol=1e-5, err_msg=str(key))


def _full_layer(path, il, h, pos, k_cache, v_cache):
    """numpy: llama layer il for one row h at position pos, attending over cached K/V rows [0, pos]
    (K already rotated, as the cache holds it): the row's input to layer il + 1."""
    from test_state import LayerWeights, rope_norm
    from ridgefill.format.gguf_io import open_gguf, tensor_array

    r = open_gguf(path)
    lw = LayerWeights(path, il)
    w = {n: tensor_array(r, f"blk.{il}.{n}.weight").astype(np.float64) for n in
         ("attn_q", "attn_output", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down")}
    n_head = int(r.fields["llama.attention.head_count"].contents())
    n_kv = int(r.fields["llama.attention.head_count_kv"].contents())
    hd = lw.head_dim

    def norm(x, g):
        return x / np.sqrt((x * x).mean() + lw.eps) * g

    q = rope_norm((w["attn_q"] @ norm(h, lw.norm))[None], np.array([float(pos)]), hd, lw.base)[0].reshape(n_head, hd)
    k, v = k_cache.reshape(len(k_cache), n_kv, hd), v_cache.reshape(len(v_cache), n_kv, hd)
    out = np.empty((n_head, hd))
    for hh in range(n_head):
        g = hh // (n_head // n_kv)
        a = k[:, g] @ q[hh] / np.sqrt(hd)
        a = np.exp(a - a.max())
        out[hh] = (a / a.sum()) @ v[:, g]
    h1 = h + w["attn_output"] @ out.reshape(-1)
    x = norm(h1, w["ffn_norm"])
    gate = w["ffn_gate"] @ x
    return h1 + w["ffn_down"] @ (gate / (1 + np.exp(-gate)) * (w["ffn_up"] @ x))


@pytest.mark.slow
def test_the_routed_row_equals_a_numpy_full_layer_over_the_cache(model, prompt, h_s):
    """The routed row's layer SPLIT+1 K/V = numpy's full layer SPLIT (attention over the cache's exact
    layer-SPLIT rows, FFN) followed by layer SPLIT+1's norm, projections and RoPE; the fill alone
    writes K/V far from it."""
    from test_state import LayerWeights

    m, maps = model
    r = SINKS + int(np.argmax(route.leverage(h_s[SINKS : N - TAIL], maps.route)))
    ctx = _ctx(m)
    _head(ctx, prompt, 0.5 / (N - TAIL - SINKS))
    k_s, v_s = ctx.state_get(SPLIT, "k", 0, r + 1).astype(np.float64), ctx.state_get(SPLIT, "v", 0, r + 1).astype(np.float64)
    h_next = _full_layer(m.path, SPLIT, h_s[r], r, k_s, v_s)
    k_want, v_want = LayerWeights(m.path, SPLIT + 1).kv(h_next[None], np.array([float(r)]))
    k_got, v_got = ctx.state_get(SPLIT + 1, "k", r, r + 1), ctx.state_get(SPLIT + 1, "v", r, r + 1)
    _head(ctx, prompt, 0.0)
    k_fill = ctx.state_get(SPLIT + 1, "k", r, r + 1)
    k_err = np.abs(k_got - k_want).max() / np.abs(k_want).max()
    v_err = np.abs(v_got - v_want).max() / np.abs(v_want).max()
    fill_err = np.abs(k_fill - k_want).max() / np.abs(k_want).max()
    print(f"routed row {r}: relative K error {k_err:.2e}, V error {v_err:.2e}; filled K error {fill_err:.2e}")
    # llama.cpp quantizes activations to 8 bits against the Q4_1 weights: ~1e-2 is its noise floor
    assert k_err < 3e-2 and v_err < 3e-2
    assert fill_err > 5 * k_err


@pytest.mark.slow
def test_a_planted_out_of_distribution_row_is_the_one_routed(model, smollm2, prompt, h_s):
    m, maps = model
    planted = prompt.copy()
    where = SINKS + 97
    # a row the statistics never saw: a run of one rare token
    odd = smollm2.tokenize("\u2603\u2603\u2603", add_special=False)
    planted[where : where + len(odd)] = odd
    ctx = _ctx(smollm2, capture=[SPLIT])
    ctx.decode(planted, 0, outputs="last")
    lev = route.leverage(ctx.layer_input(SPLIT)[SINKS : N - TAIL], maps.route)
    top = SINKS + int(np.argmax(lev))
    assert where <= top < where + len(odd)
    mctx = _ctx(m)
    _head(mctx, planted, 0.5 / (N - TAIL - SINKS))
    k_routed = mctx.state_get(m.n_layer - 1, "k", 0, N - TAIL)
    _head(mctx, planted, 0.0)
    k_filled = mctx.state_get(m.n_layer - 1, "k", 0, N - TAIL)
    changed = np.flatnonzero(np.abs(k_routed - k_filled).max(axis=1) > 0)
    assert list(changed) == [top]


@pytest.mark.slow
def test_bad_route_requests_are_errors(model, smollm2):
    m, _ = model
    ctx = _ctx(m)
    for p in (-0.1, 1.5, float("nan")):
        with pytest.raises(InputError, match="out of range"):
            ctx.set_route(p)
    plain = _ctx(smollm2)
    with pytest.raises(InputError, match="routing statistics"):
        plain.set_route(0.1)
    plain.set_route(0.0)
    ctx.set_route(0.1)
    with pytest.raises(InputError, match="split layer"):
        ctx.set_fill("identity", SPLIT - 2)
    assert ctx.route == pytest.approx(0.1)


# ---- every dense family, and the pass-through construction --------------------------------

FAMILIES = [("tiny-qwen2", 4), ("tiny-qwen3", 4), ("tiny-qwen3moe", 4), ("gemma3-270m", 12)]


def _states(model, tokens, split):
    ctx = _ctx(model, capture=[split])
    ctx.decode(tokens, 0, outputs="last")
    return ctx.layer_input(split).astype(np.float64)


def _exact_cut(model, tokens):
    """Exact K/V of the head, in the ubatches a fill run cuts it into (sinks, then the rest)."""
    ctx = _ctx(model)
    ctx.decode(tokens[:SINKS], 0, outputs="none")
    ctx.decode(tokens[SINKS : N - TAIL], SINKS, outputs="none")
    return _cache(ctx, model.n_layer, N - TAIL)


def _late_err(got, want, split, n_layer):
    return max(np.abs(got[(il, p)] - want[(il, p)]).max() for il in range(split + 1, n_layer) for p in ("k", "v"))


@pytest.mark.slow
@pytest.mark.parametrize("shape,split", FAMILIES)
def test_p1_equals_exact_on_every_dense_family(shape, split, shared_models, prompt, tmp_path):
    from ridgefill.runtime import Model

    base = shared_models.base(shape)
    m, _ = _route_model(base, tmp_path / "route.gguf", _states(Model(base), prompt, split), split=split)
    want = _exact_cut(m, prompt)
    ctx = _ctx(m)
    res, routed = _head(ctx, prompt, 1.0)
    assert routed == res.n_filled == N - TAIL - SINKS
    got = _cache(ctx, m.n_layer, N - TAIL)
    filled = _cache_after_fill(ctx, m, prompt)
    err, err_fill = _late_err(got, want, split, m.n_layer), _late_err(filled, want, split, m.n_layer)
    print(f"{shape}: max |routed - exact| {err:.3g}, max |filled - exact| {err_fill:.3g}")
    assert err < 1e-3 * max(1.0, err_fill) and err_fill > 1e-2


@pytest.mark.slow
@pytest.mark.parametrize("shape,split", [("smollm2", 20), ("tiny-qwen3", 4), ("gemma3-270m", 12)])
def test_any_p_on_the_passthrough_is_exact(shape, split, shared_models, prompt, tmp_path):
    """Layers from the split on write nothing to the residual stream, so identity maps fill exactly and
    every routed share must leave the cache exact too."""
    from ridgefill.runtime import Model

    base = shared_models.passthrough_path(shape, split)
    m, _ = _route_model(base, tmp_path / "pt.gguf", _states(Model(base), prompt, split), split=split, noise=0.0)
    want = _exact_cut(m, prompt)
    for p in (0.0, 0.05, 0.5):
        ctx = _ctx(m)
        _, routed = _head(ctx, prompt, p)
        assert routed == route.n_routed(p, N - TAIL - SINKS)
        got = _cache(ctx, m.n_layer, N - TAIL)
        assert _late_err(got, want, split, m.n_layer) < 1e-3, p


@pytest.mark.slow
def test_routing_is_refused_for_recurrent_memory(shared_models, prompt, tmp_path):
    from ridgefill.runtime import Model

    base = shared_models.base("tiny-qwen35")
    m, _ = _route_model(base, tmp_path / "hy.gguf", _states(Model(base), prompt, 4), split=4)
    ctx = _ctx(m)
    ctx.set_fill("ridge")
    with pytest.raises(InputError, match="recurrent"):
        ctx.set_route(0.1)
    ctx.set_route(0.0)


# ---- llama-server and llama-bench ---------------------------------------------------------

SRV_ARGS = ["-b", "256", "-ub", "64", "-fa", "on", "--ridgefill-sink", "64", "--ridgefill-tail", "24"]
SRV_N = 600  # fill rows [64, 576): eight ubatches of 64


def _complete(srv, tokens, **extra):
    body = {"prompt": [int(t) for t in tokens], "n_predict": 4, "temperature": 0.0, "cache_prompt": True, **extra}
    return srv.post("/completion", body)


@pytest.fixture(scope="module")
def long_prompt(smollm2, sample_text):
    return smollm2.tokenize(sample_text)[:SRV_N]


@pytest.mark.slow
def test_server_routes_per_request_and_keys_the_cache_on_it(model, long_prompt):
    from ridgefill.serve.server import LlamaServer

    m, _ = model
    with LlamaServer(m.path, SRV_ARGS + ["--ridgefill", "ridge"], ctx=1024, threads=2) as srv:
        plain = _complete(srv, long_prompt)["timings"]
        assert plain["ridgefill_filled_n"] == 512 and plain["ridgefill_routed_n"] == 0
        routed = _complete(srv, long_prompt, ridgefill_route=0.1)["timings"]
        assert routed["cache_n"] == 0  # KV filled without routing is not reused for a routed request
        assert routed["ridgefill_filled_n"] == 512 and routed["ridgefill_routed_n"] == 8 * route.n_routed(0.1, 64)
        again = _complete(srv, long_prompt, ridgefill_route=0.1)["timings"]
        assert again["cache_n"] > 0
        other = _complete(srv, long_prompt, ridgefill_route=0.25)["timings"]
        assert other["cache_n"] == 0 and other["ridgefill_routed_n"] == 8 * route.n_routed(0.25, 64)


@pytest.mark.slow
def test_server_refuses_bad_route_requests_and_stays_up(model, smollm2_path, long_prompt, tmp_path):
    from ridgefill.serve.server import LlamaServer, ServerError

    m, _ = model
    with LlamaServer(m.path, SRV_ARGS + ["--ridgefill", "ridge"], ctx=1024, threads=2) as srv:
        for bad in (-0.5, 1.5, "0.1", [0.1], True):
            with pytest.raises(ServerError) as err:
                _complete(srv, long_prompt, ridgefill_route=bad)
            assert err.value.status == 400, bad
        assert srv.alive()
    with LlamaServer(smollm2_path, SRV_ARGS + ["--ridgefill", "identity", "--ridgefill-split", "15"], ctx=1024,
                     threads=2) as srv:
        with pytest.raises(ServerError, match="routing is not available") as err:
            _complete(srv, long_prompt, ridgefill_route=0.1)
        assert err.value.status == 400 and srv.alive()
        assert _complete(srv, long_prompt, ridgefill_route=0)["timings"]["ridgefill_routed_n"] == 0
    log = tmp_path / "srv.log"
    srv = LlamaServer(smollm2_path, SRV_ARGS + ["--ridgefill", "identity", "--ridgefill-split", "15",
                                                "--ridgefill-route", "0.1"], ctx=1024, threads=2, log=log)
    with pytest.raises(ServerError, match="exited"):
        srv.start()
    assert "routing statistics" in log.read_text()


@pytest.mark.slow
def test_llama_bench_reports_routed_rows(model):
    import json
    import subprocess

    from conftest import tool

    m, _ = model
    run = subprocess.run([str(tool("llama-bench")), "-m", str(m.path), "-p", "512", "-n", "0", "-r", "1", "-t", "2",
                          "-b", "256", "-ub", "64", "--ridgefill", "ridge", "--ridgefill-sink", "64",
                          "--ridgefill-tail", "64", "--ridgefill-route", "0.05", "-o", "json"],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    (row,) = json.loads(run.stdout)
    assert row["ridgefill_route"] == pytest.approx(0.05)
    assert row["ridgefill_filled_n"] == 384 and row["ridgefill_routed_n"] == 6 * route.n_routed(0.05, 64)
    bad = subprocess.run([str(tool("llama-bench")), "-m", str(m.path), "-p", "64", "-n", "0", "--ridgefill", "ridge",
                          "--ridgefill-route", "2"], capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0
