"""Selected rows in the fork (llama_rf_set_select): the prompt's last rows score the filled rows by their
attention at the exact layers, and the rows they pick run the late layers in full before the probe runs again.

References, all exact computation:
- q = 0 is the plain fill, bit for bit (cache and logits);
- q = 1 with a tail no longer than the probe selects every filled row: cache and logits equal an exact
  prefill cut into the same ubatches, in every dense branch (llama, qwen2, qwen3, qwen3moe);
- the probe's scores equal numpy's (fit.attention.attention_paid over the captured layer inputs, the largest
  over the layers up to the split), and the rows it selects are numpy's top rows of the pooled scores
  (evals/select.py, the splice the fork implements);
- the selected rows' late K/V and the probe's logits equal the full model over a cache of filled and exact
  rows: the prompt decoded as fill segments with each selected row exact between them;
- a planted needle's rows are selected;
- fractions and probes out of range, and memories selection cannot serve, are refused.
"""

import numpy as np
import pytest

from ridgefill.errors import InputError
from ridgefill.evals.select import pooled, top_rows
from ridgefill.fit import route
from ridgefill.fit.attention import attention_layers, attention_paid

pytestmark = pytest.mark.slow

SPLIT, N, SINKS, TAIL, PROBE, UBATCH = 20, 200, 8, 16, 16, 256
POOL = ("max", 63)  # LLAMA_RF_SELECT_POOL


def _ctx(model, capture=(), ubatch=UBATCH, batch=UBATCH):
    return model.context(n_ctx=1024, n_batch=batch, n_ubatch=ubatch, threads=2, flash_attn="on", kv_type="f32",
                         capture=capture)


def _cache(ctx, n_layer, n=N):
    return {(il, part): ctx.state_get(il, part, 0, n) for il in range(n_layer) for part in ("k", "v")}


def _select(model, toks, q, split=SPLIT, probe=PROBE, tail=TAIL, ubatch=UBATCH, batch=UBATCH):
    ctx = _ctx(model, ubatch=ubatch, batch=batch)
    ctx.set_fill("identity", split)
    ctx.set_select(q, probe)
    res = ctx.prefill(toks, sinks=SINKS, tail=tail)
    return ctx, res


@pytest.fixture(scope="module")
def prompt(smollm2, sample_text):
    return np.asarray(smollm2.tokenize(sample_text)[:N], np.int32)


def test_a_decimal_share_selects_its_rows_exactly(smollm2, prompt):
    """q = 0.1 of 170 filled rows selects 17: the fork holds q as a float (0.10000000149), which rounded up is 18."""
    ctx, res = _select(smollm2, prompt, 0.1, tail=N - SINKS - 170)
    assert res.n_filled == 170 and ctx.selected_count == 17 == route.share_rows(0.1, 170)


def test_q0_is_the_plain_fill_bit_for_bit(smollm2, prompt):
    plain, res0 = _select(smollm2, prompt, 0.0)
    ctx, res = _select(smollm2, prompt, 0.0)
    assert ctx.selected_count == 0 and len(ctx.selected_rows()) == 0 and res.n_filled == N - SINKS - TAIL
    np.testing.assert_array_equal(res.logits, res0.logits)
    want = _cache(plain, smollm2.n_layer)
    for key, rows in _cache(ctx, smollm2.n_layer).items():
        np.testing.assert_array_equal(rows, want[key], err_msg=str(key))


def _exact_same_cuts(model, toks, tail=TAIL, ubatch=UBATCH, batch=UBATCH):
    """Exact prefill in the ubatches a selecting fill runs: sinks, the fill range cut where the prompt's n_batch
    chunks end, the tail (= the probe)."""
    ctx = _ctx(model, ubatch=ubatch, batch=batch)
    ctx.set_fill("exact")
    n = len(toks)
    ctx.decode(toks[:SINKS], 0, outputs="none")
    cuts = [SINKS, *range(batch, n - tail, batch), n - tail]
    for lo, hi in zip(cuts, cuts[1:]):
        ctx.decode(toks[lo:hi], lo, outputs="none")
    ctx.decode(toks[n - tail :], n - tail, outputs="last")
    return ctx, ctx.logits()[0]


def test_q1_selects_every_filled_row_and_equals_exact(smollm2, prompt):
    ctx, res = _select(smollm2, prompt, 1.0)
    assert ctx.selected_count == ctx.routed_count == res.n_filled == N - SINKS - TAIL
    np.testing.assert_array_equal(ctx.selected_rows(), np.arange(SINKS, N - TAIL))
    ref, logits = _exact_same_cuts(smollm2, prompt)
    want = _cache(ref, smollm2.n_layer)
    for key, rows in _cache(ctx, smollm2.n_layer).items():
        np.testing.assert_allclose(rows, want[key], rtol=1e-5, atol=1e-5, err_msg=str(key))
    np.testing.assert_allclose(res.logits, logits, rtol=1e-4, atol=1e-4)
    plain, _ = _select(smollm2, prompt, 0.0)
    assert np.abs(plain.logits() - logits).max() > 1.0  # identity fill at 20 of 30 is far from exact


@pytest.mark.parametrize("shape", ["tiny-qwen2", "tiny-qwen3", "tiny-qwen3moe"])
def test_q1_equals_exact_in_every_dense_branch(shape, shared_models, sample_text, smollm2):
    from ridgefill.runtime import Model

    model = Model(shared_models.base(shape))
    toks = np.asarray(smollm2.tokenize(sample_text)[:N], np.int32) % model.n_vocab
    split = model.n_layer // 2
    ctx, res = _select(model, toks, 1.0, split=split, ubatch=64)
    assert ctx.selected_count == res.n_filled > 0
    ref, logits = _exact_same_cuts(model, toks, ubatch=64)
    want = _cache(ref, model.n_layer)
    for key, rows in _cache(ctx, model.n_layer).items():
        np.testing.assert_allclose(rows, want[key], rtol=1e-4, atol=1e-4, err_msg=f"{shape} {key}")
    np.testing.assert_allclose(res.logits, logits, rtol=1e-3, atol=1e-3)


@pytest.fixture(scope="module")
def f32_model(tmp_path_factory, smollm2_path):
    """A random tiny qwen3 (q/k norms, NEOX RoPE) in f32, so that ggml's products round as numpy's do."""
    from ridgefill.bench import synth
    from ridgefill.runtime import Model

    return Model(synth.random_model("tiny-qwen3", tmp_path_factory.mktemp("f32") / "tiny-qwen3-f32.gguf",
                                    smollm2_path, seed=3, weight_type="f32", n_ctx=4096))


def test_scores_and_picks_equal_numpys(f32_model, prompt):
    """numpy: the largest share of attention the last PROBE rows pay each row at any layer up to the split,
    from the exact layer inputs; then evals/select.py's pooling and top rows."""
    model, q, split = f32_model, 0.25, 2
    toks = prompt % model.n_vocab
    cap = _ctx(model, capture=range(split + 1))
    cap.decode(toks, 0, outputs="last")
    layers = attention_layers(model.path, list(range(split + 1)))
    want = np.max([attention_paid(layers[il], cap.layer_input(il), PROBE) for il in layers], axis=0)

    ctx, _ = _select(model, toks, q, split=split)
    got = ctx.select_scores()
    assert got.shape == (N,) and len(layers) == split + 1
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-6)
    n_sel = int(np.ceil(q * (N - SINKS - TAIL)))
    rows, pool = ctx.selected_rows(), pooled(want.astype(np.float64), POOL)
    top = top_rows(pool, SINKS, N - TAIL, n_sel)
    assert ctx.selected_count == len(rows) == n_sel
    # the same rows, but for rows tied with the last one taken within the scores' rounding
    cut = pool[top].min()
    assert all(abs(pool[r] - cut) <= 1e-3 * cut for r in np.setxor1d(rows, top)), (rows, top)


def test_selected_rows_and_probe_run_the_full_model_over_the_filled_cache(smollm2, prompt):
    """The reference decodes the prompt as [sinks, exact] + fill segments with each selected row exact between
    them + [probe, exact]: every selected row attends over the filled rows and the selected rows before it, as the
    fork's pass does. Its lower layers are cut into other ubatches, whose kernels round differently, so the late
    rows are held to a tenth of the plain fill's error."""
    ctx, res = _select(smollm2, prompt, 0.25)
    rows = ctx.selected_rows()
    assert 0 < len(rows) and np.any(np.diff(rows) > 1)  # scattered, not one block
    got = _cache(ctx, smollm2.n_layer)
    plain, plain_res = _select(smollm2, prompt, 0.0)
    filled = _cache(plain, smollm2.n_layer)

    ref = _ctx(smollm2)
    ref.set_fill("identity", SPLIT)
    ref.decode(prompt[:SINKS], 0, outputs="none")
    cuts = sorted({SINKS, N - TAIL} | set(rows.tolist()) | set((rows + 1).tolist()))
    for lo, hi in zip(cuts, cuts[1:]):
        ref.set_fill_range(0, lo, lo if lo in set(rows.tolist()) else hi)
        ref.decode(prompt[lo:hi], lo, outputs="none")
    ref.set_fill_range(0, 0, 0)
    ref.decode(prompt[N - TAIL :], N - TAIL, outputs="last")
    want = _cache(ref, smollm2.n_layer)

    others = np.setdiff1d(np.arange(SINKS, N - TAIL), rows)
    for (il, part), r in got.items():
        if il <= SPLIT:
            continue
        np.testing.assert_array_equal(r[others], filled[(il, part)][others], err_msg=f"{il} {part}")
        err_sel = np.abs(r[rows] - want[(il, part)][rows]).max()
        err_fill = np.abs(filled[(il, part)][rows] - want[(il, part)][rows]).max()
        assert err_sel < 0.1 * err_fill, (il, part, err_sel, err_fill)
    err_sel = np.abs(res.logits - ref.logits()[0]).max()
    err_fill = np.abs(plain_res.logits - ref.logits()[0]).max()
    assert err_sel < 0.1 * err_fill, (err_sel, err_fill)


def test_a_planted_needles_rows_are_selected(smollm2, sample_text):
    filler = smollm2.tokenize(sample_text)
    needle = smollm2.tokenize(" The secret passphrase is purple-falcon-42. Remember it.", add_special=False)
    question = smollm2.tokenize(" Question: what is the secret passphrase? Answer: The secret passphrase is",
                                add_special=False)
    n_fill = 600
    at = 300
    toks = np.concatenate([filler[:at], needle, filler[at:n_fill], question]).astype(np.int32)
    model_ctx = smollm2.context(n_ctx=2048, n_batch=512, n_ubatch=512, threads=2, flash_attn="on", kv_type="f32")
    model_ctx.set_fill("identity", SPLIT)
    model_ctx.set_select(0.25, 64)  # the sinks' and the text's own hot rows take 63-row windows too
    model_ctx.prefill(toks, sinks=4, tail=len(question))
    rows = set(model_ctx.selected_rows().tolist())
    planted = set(range(at, at + len(needle)))
    assert planted <= rows, sorted(planted - rows)


def test_an_evaluation_head_keeps_its_range_for_the_tails_probe(smollm2, prompt):
    """The evaluations decode the head and the tail in calls of their own (evals/prefill.py): a selecting context
    decodes its head afresh with the fill range kept, so the tail's output call probes, selecting what one prefill
    call selects; the next head (plain) is not the selecting one's."""
    from ridgefill.evals import prefill

    ctx = _ctx(smollm2)
    ctx.set_fill("identity", SPLIT)
    ctx.set_select(0.25, PROBE)
    head = prefill.run_head(ctx, prompt, SINKS, TAIL)
    prefill.greedy(head, 2)
    assert ctx.selected_count == head.notes["n_selected"] == int(np.ceil(0.25 * (N - SINKS - TAIL)))
    np.testing.assert_array_equal(ctx.selected_rows(), _select(smollm2, prompt, 0.25)[0].selected_rows())
    ctx.set_select(0.0, PROBE)
    ctx.reset_fill_counts()
    prefill.greedy(prefill.run_head(ctx, prompt, SINKS, TAIL), 2)
    assert ctx.selected_count == 0


def test_bad_values_are_refused(smollm2):
    ctx = _ctx(smollm2)
    for q, probe in ((-0.1, 16), (1.5, 16), (float("nan"), 16), (0.1, 0), (0.1, UBATCH + 1)):
        with pytest.raises(InputError):
            ctx.set_select(q, probe)
    assert ctx.select == 0.0 and ctx.probe == 64
    ctx.set_select(0.1, 32)
    assert ctx.select == pytest.approx(0.1) and ctx.probe == 32


def test_recurrent_memories_and_windows_not_cached_are_refused(tiny_qwen35, gemma3):
    ctx = tiny_qwen35.context(n_ctx=512, n_batch=64, n_ubatch=64, threads=2, kv_type="f32")
    with pytest.raises(InputError, match="selection is not supported"):
        ctx.set_select(0.1, 16)
    ctx = gemma3.context(n_ctx=2048, n_batch=64, n_ubatch=64, threads=2, kv_type="f32", swa_full=False)
    with pytest.raises(InputError, match="full-size SWA cache"):
        ctx.set_select(0.1, 16)
    ctx.set_select(0.0, 16)  # selecting nothing needs no window


@pytest.fixture(scope="module")
def tiny_qwen35(shared_models):
    from ridgefill.runtime import Model

    return Model(shared_models.base("tiny-qwen35"))


# ---- a sliding-window model: gemma3's five window layers of six read their 512-row windows ---------------------

G_N, G_SPLIT = 832, 12  # longer than the window; layers 5 and 11 are the global ones up to the split


@pytest.fixture(scope="module")
def gemma3(shared_models):
    from ridgefill.runtime import Model

    return Model(shared_models.base("gemma3-270m"))


@pytest.fixture(scope="module")
def gemma3_prompt(gemma3, sample_text):
    toks = np.asarray(gemma3.tokenize(sample_text)[:G_N], np.int32)
    assert len(toks) == G_N
    return toks


def test_gemma3_q1_equals_exact_beyond_its_window(gemma3, gemma3_prompt):
    """Every filled row selected: each runs the late window layers at the probe over the window the full-size SWA
    cache still holds, so cache and logits equal exact prefill cut into the same ubatches (one batch: the selected
    rows' pass cuts them where the fill did; a quantized model's kernels round by ubatch size)."""
    ctx, res = _select(gemma3, gemma3_prompt, 1.0, split=G_SPLIT, batch=G_N)
    assert ctx.selected_count == res.n_filled == G_N - SINKS - TAIL
    ref, logits = _exact_same_cuts(gemma3, gemma3_prompt, batch=G_N)
    want = _cache(ref, gemma3.n_layer, G_N)
    for key, rows in _cache(ctx, gemma3.n_layer, G_N).items():
        np.testing.assert_allclose(rows, want[key], rtol=1e-4, atol=1e-4, err_msg=str(key))
    np.testing.assert_allclose(res.logits, logits, rtol=1e-3, atol=1e-3)
    plain, _ = _select(gemma3, gemma3_prompt, 0.0, split=G_SPLIT)
    assert np.abs(plain.logits() - logits).max() > 1.0


def test_gemma3_probes_its_global_layers_as_numpy_does(gemma3, gemma3_prompt):
    """The scores come from the global layers up to the split (a window does not reach the filled rows from the
    prompt's end): numpy's attention_paid over the captured inputs of layers 5 and 11."""
    cap = _ctx(gemma3, capture=range(G_SPLIT + 1))
    inputs = {il: np.empty((G_N, gemma3.n_embd), np.float32) for il in range(G_SPLIT + 1)}
    for start, m in cap.decode_chunks(gemma3_prompt, 0, 0, "none"):
        for il in inputs:
            inputs[il][start : start + m] = cap.layer_input(il)
    layers = attention_layers(gemma3.path, list(range(G_SPLIT + 1)))
    global_layers = [il for il in layers if not layers[il].window]
    assert global_layers == [5, 11]
    paid = {il: attention_paid(layers[il], inputs[il], PROBE) for il in layers}
    want = np.max([paid[il] for il in global_layers], axis=0)
    every_layer = np.max(list(paid.values()), axis=0)
    ctx, _ = _select(gemma3, gemma3_prompt, 0.1, split=G_SPLIT)
    got = ctx.select_scores()
    assert got.shape == (G_N,)
    # a quantized model: ggml rounds the activations it multiplies by q4_K weights, numpy does not
    err = np.abs(got - want).mean()
    assert err < 3e-3 and np.corrcoef(got, want)[0, 1] > 0.995, err
    assert np.abs(got - every_layer).mean() > 10 * err  # the window layers are not probed


# ---- llama-server and llama-bench ---------------------------------------------------------

SRV_ARGS = ["-b", "256", "-ub", "64", "-fa", "on", "--ridgefill", "identity", "--ridgefill-split", str(SPLIT),
            "--ridgefill-sink", "64", "--ridgefill-tail", "24"]
SRV_N = 600  # fill rows [64, 576)


def _complete(srv, tokens, **extra):
    body = {"prompt": [int(t) for t in tokens], "n_predict": 4, "temperature": 0.0, "cache_prompt": True, **extra}
    return srv.post("/completion", body)


def test_server_selects_per_request_and_keys_the_cache_on_it(smollm2, smollm2_path, sample_text):
    """The server's rows equal the bindings' (the same fill and selection, one prompt in 256-row batches), a request
    changes q without reusing a cache filled under another, and bad values get a 400."""
    from ridgefill.serve.server import LlamaServer, ServerError

    toks = smollm2.tokenize(sample_text)[:SRV_N]
    n_fill = SRV_N - 64 - 24
    with LlamaServer(smollm2_path, SRV_ARGS + ["--ridgefill-probe", "24"], ctx=1024, threads=2) as srv:
        plain = _complete(srv, toks)["timings"]
        assert plain["ridgefill_filled_n"] == n_fill and plain["ridgefill_selected_n"] == 0
        sel = _complete(srv, toks, ridgefill_select=0.1)["timings"]
        assert sel["cache_n"] == 0  # KV filled without selection is not reused
        assert sel["ridgefill_filled_n"] == n_fill and sel["ridgefill_selected_n"] == int(np.ceil(0.1 * n_fill))
        assert sel["ridgefill_routed_n"] == sel["ridgefill_selected_n"]
        again = _complete(srv, toks, ridgefill_select=0.1)["timings"]
        assert again["cache_n"] > 0
        other = _complete(srv, toks, ridgefill_select=0.25)["timings"]
        assert other["cache_n"] == 0 and other["ridgefill_selected_n"] == int(np.ceil(0.25 * n_fill))
        for bad in (-0.5, 1.5, "0.1", [0.1], True, {"q": 1}):
            with pytest.raises(ServerError) as err:
                _complete(srv, toks, ridgefill_select=bad)
            assert err.value.status == 400, bad
        assert srv.alive()


def test_server_refuses_a_probe_larger_than_a_ubatch(smollm2, smollm2_path, sample_text, tmp_path):
    """Selecting with a probe larger than a ubatch stops the server at load; without selection the server starts,
    fills, and refuses a request's selection with a 400 that names the probe."""
    from ridgefill.serve.server import LlamaServer, ServerError

    log = tmp_path / "srv.log"
    srv = LlamaServer(smollm2_path, SRV_ARGS + ["--ridgefill-select", "0.1", "--ridgefill-probe", "65"], ctx=1024,
                      threads=2, log=log)
    with pytest.raises(ServerError, match="exited"):
        srv.start()
    assert "must fit a ubatch" in log.read_text()

    toks = smollm2.tokenize(sample_text)[:SRV_N]
    with LlamaServer(smollm2_path, SRV_ARGS + ["--ridgefill-probe", "65"], ctx=1024, threads=2) as srv:
        assert _complete(srv, toks)["timings"]["ridgefill_filled_n"] == SRV_N - 64 - 24
        with pytest.raises(ServerError) as err:
            _complete(srv, toks, ridgefill_select=0.1)
        assert err.value.status == 400 and "--ridgefill-probe" in str(err.value)
        assert _complete(srv, toks, ridgefill_select=0)["timings"]["ridgefill_selected_n"] == 0


def test_server_selects_on_gemma3_with_a_full_size_window_cache(gemma3, gemma3_prompt, tmp_path):
    """A sliding-window model selects with --swa-full and says what it needs without it: at load where
    --ridgefill-select asks, with a 400 where a request does."""
    from ridgefill.serve.server import LlamaServer, ServerError

    args = ["-b", "256", "-ub", "256", "-fa", "on", "--ridgefill", "identity", "--ridgefill-split", str(G_SPLIT),
            "--ridgefill-sink", "64", "--ridgefill-tail", "64"]
    log = tmp_path / "srv.log"
    with pytest.raises(ServerError, match="exited"):
        LlamaServer(gemma3.path, args + ["--ridgefill-select", "0.1"], ctx=1024, threads=2, log=log).start()
    assert "full-size SWA cache" in log.read_text()
    n_fill = G_N - 64 - 64
    with LlamaServer(gemma3.path, args, ctx=1024, threads=2) as srv:
        with pytest.raises(ServerError) as err:
            _complete(srv, gemma3_prompt, ridgefill_select=0.1)
        assert err.value.status == 400 and "--swa-full" in str(err.value)
        assert _complete(srv, gemma3_prompt)["timings"]["ridgefill_filled_n"] == n_fill
    with LlamaServer(gemma3.path, args + ["--swa-full"], ctx=1024, threads=2) as srv:
        timings = _complete(srv, gemma3_prompt, ridgefill_select=0.1)["timings"]
        assert timings["ridgefill_filled_n"] == n_fill
        assert timings["ridgefill_selected_n"] == route.share_rows(0.1, n_fill)


def test_llama_bench_reports_selected_rows(smollm2_path):
    import json
    import subprocess

    from conftest import tool

    bench = [str(tool("llama-bench")), "-m", str(smollm2_path), "-p", "512", "-n", "0", "-r", "1", "-t", "2",
             "-b", "256", "-ub", "64", "--ridgefill", "identity", "--ridgefill-split", str(SPLIT),
             "--ridgefill-sink", "64", "--ridgefill-tail", "64"]
    run = subprocess.run([*bench, "--ridgefill-select", "0,0.1", "--ridgefill-probe", "32", "-o", "json"],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    rows = sorted(json.loads(run.stdout), key=lambda r: r["ridgefill_select"])
    assert [r["ridgefill_selected_n"] for r in rows] == [0, int(np.ceil(0.1 * 384))]
    assert all(r["ridgefill_filled_n"] == 384 and r["ridgefill_probe"] == 32 for r in rows)
    for bad, why in ((["--ridgefill-select", "2"], "selected share"), (["--ridgefill-probe", "0"], "at least one"),
                     (["--ridgefill-select", "0.1", "--ridgefill-probe", "65"], "fit a ubatch"),
                     (["-p", "48", "--ridgefill-select", "0.1"], "fit a ubatch")):  # the context clamps the ubatch
        out = subprocess.run([*bench, *bad, "-o", "json"], capture_output=True, text=True, timeout=120)
        assert out.returncode != 0 and why in out.stderr, (bad, out.stderr[-500:])
    exact = subprocess.run([*bench[:-8], "--ridgefill-select", "0.1", "-o", "json"], capture_output=True, text=True,
                           timeout=120)
    assert exact.returncode != 0 and "fills none" in exact.stderr
