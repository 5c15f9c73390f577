"""The fill path of the hybrid qwen35 / qwen35moe / qwen3next branches (Gated DeltaNet + attention).

A filled linear-attention layer must leave its conv and delta-net states exactly as the
layer computes them from its predicted input; a filled attention layer its K/V. Checked
three ways on tiny random models of the real layouts (`synth` shapes): pass-through late
layers (identity fill is then exact, so states, K/V and logits must match bit for bit; all
three architectures),
prompts whose tail covers everything (nothing filled: exact), and a numpy recurrence on
W h_s + b for the recurrent states written by a ridge fill with random maps.
"""

import numpy as np
import pytest

from ridgefill.bench import synth
from ridgefill.format.gguf_io import open_gguf, tensor_array
from ridgefill.runtime import Model

pytestmark = pytest.mark.slow

SHAPES = ("tiny-qwen35", "tiny-qwen35moe")
N, SINKS, TAIL = 320, 64, 64  # fill rows [64, 256): on ubatch (64) boundaries


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("hybrid")


@pytest.fixture(scope="module")
def toks(smollm2, sample_text):
    return smollm2.tokenize(sample_text)




def _ctx(model, flash_attn="on", capture=()):
    return model.context(n_ctx=1024, n_batch=256, n_ubatch=64, threads=2, flash_attn=flash_attn, kv_type="f32",
                         capture=capture)


def _memory(ctx, shape, layers, lo, hi):
    """Each layer's memory: K/V rows [lo, hi) of attention layers, conv/SSM state of the others."""
    out = {}
    for il in layers:
        if synth.SHAPES[shape].is_attention(il):
            out.update({(il, p): ctx.state_get(il, p, lo, hi) for p in ("k", "v")})
        else:
            out.update({(il, p): ctx.state_get(il, p) for p in ("conv", "ssm")})
    return out


def _fill(model, shape, toks, mode, split, flash_attn, layers):
    """Prefill N tokens; the late layers' memory at the end of the filled region and at the end."""
    ctx = _ctx(model, flash_attn)
    ctx.set_fill(mode, split)
    at_cut = {}
    res = ctx.prefill(toks[:N], sinks=SINKS, tail=TAIL,
                      before_tail=lambda c: at_cut.update(_memory(c, shape, layers, SINKS, N - TAIL)))
    return res, at_cut, _memory(ctx, shape, layers, SINKS, N - TAIL)


@pytest.mark.parametrize("shape", SHAPES + ("tiny-qwen3next",))
@pytest.mark.parametrize("split,flash_attn", [(2, "on"), (5, "on"), (5, "off")])
def test_passthrough_fill_reproduces_states_kv_and_logits(shape, split, flash_attn, toks, shared_models):
    """split 2: no attention layer below the split (3 and 7 attend); split 5: layer 3 runs exactly."""
    model = shared_models.passthrough(shape, split)
    assert model.arch == synth.SHAPES[shape].arch
    late = range(split, model.n_layer)
    # the reference fills at s = L: every layer exact, the same ubatches and graphs as the fill run
    ref, ref_cut, ref_end = _fill(model, shape, toks, "identity", model.n_layer, flash_attn, late)
    for mode in ("identity", "ridge"):
        res, cut, end = _fill(model, shape, toks, mode, split, flash_attn, late)
        assert res.n_filled == N - SINKS - TAIL and res.n_full == SINKS + TAIL
        for key in ref_cut:
            assert cut[key].size > 0
            np.testing.assert_array_equal(cut[key], ref_cut[key], err_msg=f"{mode} {key} at the end of the fill")
            np.testing.assert_array_equal(end[key], ref_end[key], err_msg=f"{mode} {key} after the tail")
        diff = np.abs(res.logits - ref.logits).max()
        state_diff = max(np.abs(cut[k] - ref_cut[k]).max() for k in ref_cut if k[1] in ("conv", "ssm"))
        print(f"{shape} {mode} split {split} FA {flash_attn}: max |logit diff| = {diff:.3g}, "
              f"max |recurrent state diff| = {state_diff:.3g}")
        np.testing.assert_array_equal(res.logits, ref.logits)


@pytest.mark.parametrize("shape", SHAPES)
def test_fill_changes_the_late_states_of_a_real_stack(shape, toks, shared_models):
    """Not pass-through: the fill must change what late layers hold (the test above can fail)."""
    model, _ = shared_models.random_maps(shape, 2, seed=4)
    late = range(2, model.n_layer)
    _, exact, _ = _fill(model, shape, toks, "exact", None, "on", late)
    _, ridge, _ = _fill(model, shape, toks, "ridge", 2, "on", late)
    np.testing.assert_array_equal(ridge[2, "ssm"], exact[2, "ssm"])  # the split layer's input is exact
    for key in [(4, "ssm"), (4, "conv"), (3, "k"), (7, "v")]:
        assert np.abs(ridge[key] - exact[key]).max() > 1e-3, key


@pytest.mark.parametrize("shape", SHAPES)
def test_tail_covering_the_prompt_equals_exact(shape, toks, shared_models):
    model, _ = shared_models.random_maps(shape, 2, seed=4)
    late = range(2, model.n_layer)
    results = {}
    for mode, split in (("exact", None), ("ridge", 2), ("identity", 2)):
        ctx = _ctx(model)
        ctx.set_fill(mode, split)
        hooked = []
        res = ctx.prefill(toks[:N], sinks=SINKS, tail=N - SINKS, before_tail=hooked.append)
        assert res.n_filled == 0 and len(hooked) == 1  # the hook runs even when nothing is filled
        results[mode] = res.logits, _memory(ctx, shape, late, 0, N)
    for mode in ("ridge", "identity"):
        np.testing.assert_array_equal(results[mode][0], results["exact"][0])
        for key, want in results["exact"][1].items():
            np.testing.assert_array_equal(results[mode][1][key], want, err_msg=f"{mode} {key}")


@pytest.mark.parametrize("shape", SHAPES)
def test_decoding_after_a_fill_is_deterministic(shape, toks, shared_models):
    model, _ = shared_models.random_maps(shape, 2, seed=4)
    runs = []
    for _ in range(2):
        ctx = _ctx(model)
        ctx.set_fill("ridge", 2)
        runs.append(ctx.greedy(toks[:N], 32, sinks=SINKS, tail=TAIL, stop=()))
    print(f"{shape}: {runs[0]}")
    assert len(runs[0]) == 32 and runs[0] == runs[1]


# ---- numpy reference of a Gated DeltaNet layer's conv and delta-net state ----------------

class DeltaNetLayer:
    """llama.cpp's qwen35 linear-attention state update (src/models/qwen35.cpp, ggml's ops), in float64."""

    def __init__(self, path, il):
        r = open_gguf(path)

        def get(name):
            return tensor_array(r, f"blk.{il}.{name}").astype(np.float64)

        self.norm = get("attn_norm.weight")
        self.wqkv, self.wbeta, self.walpha = get("attn_qkv.weight"), get("ssm_beta.weight"), get("ssm_alpha.weight")
        self.conv = get("ssm_conv1d.weight")  # (channels, d_conv)
        self.dt, self.a = get("ssm_dt.bias"), get("ssm_a")
        f = {k: v.contents() for k, v in r.fields.items() if not k.startswith("tokenizer.")}
        arch = f["general.architecture"]
        self.eps = float(f[f"{arch}.attention.layer_norm_rms_epsilon"])
        self.d_state = int(f[f"{arch}.ssm.state_size"])
        self.n_k = int(f[f"{arch}.ssm.group_count"])
        self.n_v = int(f[f"{arch}.ssm.time_step_rank"])

    def run(self, x, conv_state, ssm_state):
        """States after the rows x (n, d), from the states before them (as state_get returns them)."""
        ds, nk, nv = self.d_state, self.n_k, self.n_v
        ch, dc = self.conv.shape
        xn = x / np.sqrt((x * x).mean(axis=1, keepdims=True) + self.eps) * self.norm
        qkv = xn @ self.wqkv.T  # (n, channels)
        beta = 1 / (1 + np.exp(-(xn @ self.wbeta.T)))  # (n, n_v)
        g = np.logaddexp(0, xn @ self.walpha.T + self.dt) * self.a  # log-decay, (n, n_v)
        window = np.concatenate([conv_state.reshape(ch, dc - 1).T, qkv])  # (dc-1+n, channels)
        conv = np.stack([(window[t:t + dc] * self.conv.T).sum(axis=0) for t in range(len(x))])
        conv = conv / (1 + np.exp(-conv))  # silu
        k = conv[:, nk * ds:2 * nk * ds].reshape(len(x), nk, ds)
        v = conv[:, 2 * nk * ds:].reshape(len(x), nv, ds)
        k = k / np.sqrt((k * k).sum(axis=-1, keepdims=True) + self.eps)
        m = ssm_state.reshape(nv, ds, ds).copy()  # per value head: M[j, i] = S[i, j] (i: key dim, j: value dim)
        for t in range(len(x)):
            for h in range(nv):
                kk = k[t, h % nk]  # value head h reads key head h mod n_k
                m[h] *= np.exp(g[t, h])
                delta = (v[t, h] - m[h] @ kk) * beta[t, h]
                m[h] += np.outer(delta, kk)
        return window[-(dc - 1):].T.reshape(1, -1), m.reshape(1, -1)


@pytest.mark.parametrize("shape", SHAPES)
def test_filled_recurrent_state_equals_numpy_from_h_s(shape, toks, shared_models):
    split = 2
    model, m = shared_models.random_maps(shape, split, seed=4)
    maps = {il: (m.weights[j].astype(np.float64), m.biases[j]) for j, il in enumerate(m.layers)}
    lo, hi = SINKS, N - TAIL
    recurrent = [il for il in range(split + 1, model.n_layer) if not synth.SHAPES[shape].is_attention(il)]

    before = _ctx(model)  # the states at lo: the sinks run exactly
    before.prefill(toks[:lo])
    start = {(il, p): before.state_get(il, p) for il in recurrent for p in ("conv", "ssm")}

    ctx = _ctx(model, capture=[split])
    ctx.set_fill("ridge", split)
    h_rows, got = {}, {}
    ctx.prefill(toks[:N], sinks=SINKS, tail=TAIL,
                on_chunk=lambda c, s, n: h_rows.update({s: c.layer_input(split).copy()}),
                before_tail=lambda c: got.update({(il, p): c.state_get(il, p) for il in recurrent
                                                  for p in ("conv", "ssm")}))
    h_s = np.concatenate([h_rows[s] for s in sorted(h_rows)])[lo:hi].astype(np.float64)
    for il in recurrent:
        w, b = maps[il]
        layer = DeltaNetLayer(model.path, il)
        conv_want, ssm_want = layer.run(h_s @ w.T + b, start[il, "conv"], start[il, "ssm"])
        _, ssm_nomap = layer.run(h_s, start[il, "conv"], start[il, "ssm"])
        err = {p: np.abs(got[il, p] - want).max() / np.abs(want).max()
               for p, want in (("conv", conv_want), ("ssm", ssm_want))}
        nomap = np.abs(got[il, "ssm"] - ssm_nomap).max() / np.abs(ssm_want).max()
        print(f"{shape} layer {il}: relative conv-state error {err['conv']:.2e}, SSM-state error {err['ssm']:.2e} "
              f"(without the map: {nomap:.2e})")
        # F16 weights: llama.cpp rounds the activations to F16 for the projections
        assert err["conv"] < 3e-3 and err["ssm"] < 3e-3
        assert nomap > 10 * err["ssm"]


def test_calibration_and_fit_cover_every_late_layer_of_a_hybrid(tiny_dir, smollm2_path, toks):
    """Capture and the ridge fit are layer-kind agnostic: maps for attention and linear layers alike. With K/V
    targets (`--maps kv`), the attention layers get K/V maps and the linear layers keep their input maps, in one
    file that loads and fills."""
    from ridgefill import format as fmt
    from ridgefill.fit import pipeline
    from ridgefill.fit.capture import CaptureConfig

    base = synth.random_model("tiny-qwen35", tiny_dir / "cal.gguf", smollm2_path, seed=5, weight_type="f16",
                              n_ctx=4096)
    stats = pipeline.calibrate(base, CaptureConfig(split=2, tokens=3072, window=512, threads=2, kv=True),
                               show_progress=False)
    out, out_kv = tiny_dir / "cal-fitted.gguf", tiny_dir / "cal-fitted-kv.gguf"
    maps = pipeline.fit_and_pack(base, stats, out)
    assert maps.layers == list(range(3, 8))  # attention (3, 7) and Gated DeltaNet (4, 5, 6)
    r2 = [(f.r2_ridge, f.r2_identity) for f in maps.fits]
    print("held-out R² (ridge, identity) per late layer:", [(round(float(a), 3), round(float(b), 3)) for a, b in r2])
    assert all(np.isfinite(r2).all(axis=1)) and all(a >= b for a, b in r2)
    assert sorted(fmt.read_maps(out)) == maps.layers
    assert maps.kv.layers == [3, 7] and all(0 < f.k_err < 1 for f in maps.kv.fits)
    pipeline.fit_and_pack(base, stats, out_kv, kind="kv")
    info = fmt.inspect(out_kv)
    assert sorted(fmt.read_maps(out_kv)) == [4, 5, 6] and info["loads"] and info["kv"]["input_map_layers"] == [4, 5, 6]
    assert [r["layer"] for r in info["kv"]["layers"] if r["kv_k_err"] is not None] == [3, 7]
    for path in (out, out_kv):
        ctx = _ctx(Model(path))
        ctx.set_fill("ridge")
        res = ctx.prefill(toks[:N], sinks=SINKS, tail=TAIL)
        assert res.n_filled == N - SINKS - TAIL and np.isfinite(res.logits).all()


@pytest.mark.parametrize("shape", ["tiny-qwen35"])  # dense shapes use the same scaling; 32K of attention is slow
def test_synthetic_shapes_stay_finite_over_32k_tokens(shape, tiny_dir, smollm2_path):
    """synth scales residual writes by 1/sqrt(2L) (and decays the delta rule): activations stay bounded."""
    model = Model(synth.random_model(shape, tiny_dir / f"{shape}-32k.gguf", smollm2_path, seed=7, weight_type="f16",
                                     n_ctx=32768))
    ctx = model.context(n_ctx=32768, n_batch=2048, n_ubatch=512, threads=2, flash_attn="on",
                        capture=[model.n_layer - 1])
    toks = np.random.default_rng(0).integers(0, model.n_vocab, 32768, dtype=np.int32)
    rms = []
    res = ctx.prefill(toks, on_chunk=lambda c, s, n: rms.append(
        float(np.sqrt((c.layer_input(model.n_layer - 1) ** 2).mean()))))
    print(f"{shape}: RMS of the last layer's input per 2048-token chunk: {rms[0]:.3g} .. {rms[-1]:.3g}")
    assert np.isfinite(res.logits).all() and all(np.isfinite(rms)) and max(rms) < 1e3


def test_splicing_the_recurrent_state(toks, monkeypatch, shared_models):
    """eval's splices on a hybrid: exact K, V and recurrent state together reproduce exact-cut bit for bit;
    the recurrent state alone moves the result."""
    from ridgefill.evals import prefill, splice

    monkeypatch.setattr(splice, "_EXACT", splice._ExactCache())
    split = 2
    model, _ = shared_models.random_maps("tiny-qwen35", split, seed=4)

    def last_logits(split_at, hook=None):
        ctx = _ctx(model)
        ctx.set_fill("ridge" if split_at == split else "identity", split_at)
        head = prefill.run_head(ctx, toks[:N], SINKS, TAIL, hook=hook)
        assert head.fill_range == (SINKS, N - TAIL)
        prefill.greedy(head, 0)
        return ctx.logits()[0]

    cut = last_logits(model.n_layer, splice.keep_exact_cut)
    fill = last_logits(split)
    spliced = {name: last_logits(split, lambda h, p=parts: splice.splice(h, p))
               for name, parts in splice.PARTS.items() if name != "knorm"}
    print("max |logit - exact-cut|: fill {:.3g}, ".format(np.abs(fill - cut).max())
          + ", ".join(f"{n} {np.abs(x - cut).max():.3g}" for n, x in spliced.items()))
    assert np.abs(fill - cut).max() > 1e-2
    np.testing.assert_array_equal(spliced["all"], cut)
    for name in ("state", "kv"):  # each alone leaves the other layers' filled memory
        assert not np.array_equal(spliced[name], cut) and not np.array_equal(spliced[name], fill), name
    assert not splice._EXACT._ctx  # exact-cut's cache served every splice
