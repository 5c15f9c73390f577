"""The multiply-add cost model behind every printed bound (docs/method.md)."""

import dataclasses
import pytest

from ridgefill.bench import costmodel, synth
from ridgefill.bench.costmodel import Shape, bound, prefill_cost

DENSE = Shape(n_layer=4, d=8, d_q=8, d_kv=4, d_ff=16)
# interval 2: layer 0 is Gated DeltaNet, layer 1 attends (gated Q); H = 2 heads of state 4, d_k = 4
HYBRID = Shape(n_layer=2, d=8, d_q=8, d_kv=4, d_ff=16, q_gate=True, attn_interval=2, ssm_heads=2, ssm_key_dim=4,
               ssm_state=4, ssm_conv=4)


def test_dense_exact_cost_by_hand():
    n = 10
    per_row = 8 * (8 + 2 * 4) + 8 * 8 + 3 * 8 * 16  # projections, out-projection, FFN
    assert prefill_cost(DENSE, n) == 4 * (n * per_row + 2 * 8 * sum(range(n)))


def test_dense_filled_cost_by_hand():
    n, split, k, t = 10, 1, 2, 3
    m = n - k - t
    per_row = 8 * (8 + 2 * 4) + 8 * 8 + 3 * 8 * 16
    kv = 2 * 8 * 4
    late = 4 - split - 1
    full_filled = 4 * (m * per_row + 2 * 8 * sum(range(k, n - t)))
    kept = split * (m * per_row + 2 * 8 * sum(range(k, n - t))) + m * kv + m * late * (kv + 8 * 8)
    assert prefill_cost(DENSE, n, split, k, t) == prefill_cost(DENSE, n) - full_filled + kept
    kept_identity = kept - m * late * 8 * 8
    assert prefill_cost(DENSE, n, split, k, t, with_map=False) == prefill_cost(DENSE, n) - full_filled + kept_identity
    # routed rows: a leverage product per filled row, then layers split.. in full for the routed share
    p = 0.25
    routed = m * 8 * 8 + p * (4 - split) * (m * per_row + 2 * 8 * sum(range(k, n - t)))
    assert prefill_cost(DENSE, n, split, k, t, route=p) == pytest.approx(prefill_cost(DENSE, n) - full_filled + kept + routed)


def test_routing_costs_less_than_the_split_it_replaces_at_small_shares():
    sh, n = costmodel.SMOLLM2, 4096
    assert bound(sh, n, 17, 4, 1024, route=0.0) > bound(sh, n, 17, 4, 1024, route=0.05) > bound(sh, n, 17, 4, 1024, route=0.5)
    assert bound(sh, n, 17, 4, 1024, route=1.0) < 1.0  # routing everything is slower than exact


def test_hybrid_costs_by_hand():
    n = 6
    d_v, channels = 2 * 4, 2 * 4 + 2 * 4
    write_linear = 8 * (channels + 2 * 2) + channels * 4 + 4 * 2 * 4 * 4
    linear_row = write_linear + 8 * d_v + d_v * 8 + 3 * 8 * 16
    attn_row = 8 * (2 * 8 + 2 * 4) + 8 * 8 + 3 * 8 * 16
    assert prefill_cost(HYBRID, n) == n * (linear_row + attn_row) + 2 * 8 * sum(range(n))
    # split 0: the linear layer writes its state only, the attention layer gets a map and its K/V
    m = n - 1 - 1
    filled = m * write_linear + m * (2 * 8 * 4 + 8 * 8)
    full = m * (linear_row + attn_row) + 2 * 8 * sum(range(1, n - 1))
    assert prefill_cost(HYBRID, n, 0, 1, 1) == prefill_cost(HYBRID, n) - full + filled


def test_bound_is_one_without_filled_rows_and_grows_with_length():
    sh = costmodel.SMOLLM2
    assert bound(sh, 1024, 15, 4, 1024) == 1.0
    b = [bound(sh, n, 15, 4, 1024) for n in (2048, 4096, 8192, 32768)]
    assert all(1 < x < y for x, y in zip(b, b[1:]))
    assert bound(sh, 8192, 15, 4, 1024, with_map=False) > bound(sh, 8192, 15, 4, 1024)
    assert bound(sh, 8192, 15, 4, 1024) > bound(sh, 8192, 18, 4, 1024)


@pytest.mark.slow  # reads the 98 MB test model's tokenizer
@pytest.mark.parametrize("name", ["tiny-qwen35", "tiny-qwen35moe", "tiny-qwen3next", "tiny-qwen3moe", "tiny-llama"])
def test_shape_from_gguf_matches_the_synthetic_shape(name, tmp_path, smollm2_path):
    src = synth.SHAPES[name]
    sh = Shape.from_gguf(synth.random_model(name, tmp_path / "m.gguf", smollm2_path, weight_type="f16", n_ctx=512))
    assert (sh.n_layer, sh.d, sh.d_q, sh.d_kv) == (src.n_layer, src.d, src.n_head * src.head_dim, src.n_kv * src.head_dim)
    assert sh.d_ff == (src.n_expert_used * src.d_ff_exp + src.d_ff_shexp if src.n_expert else src.d_ff)
    assert sh.attn_interval == src.attn_interval and sh.q_gate == src.hybrid
    if src.hybrid:
        assert (sh.ssm_heads, sh.ssm_state, sh.ssm_key_dim) == (src.ssm_dt_rank, src.ssm_d_state,
                                                                src.ssm_d_state * src.ssm_n_group)
        assert [sh.is_attention(i) for i in range(sh.n_layer)] == [src.is_attention(i) for i in range(src.n_layer)]


def test_sliding_window_layers_cost_their_window():
    """gemma3: five of six layers attend to at most `window` positions; below the window nothing changes."""
    glob = costmodel.Shape(n_layer=12, d=256, d_q=256, d_kv=128, d_ff=1024)
    swa = costmodel.Shape(n_layer=12, d=256, d_q=256, d_kv=128, d_ff=1024, swa_window=512, swa_pattern=6)
    assert [swa.window(il) for il in range(6)] == [512] * 5 + [None]
    assert costmodel.prefill_cost(swa, 512) == costmodel.prefill_cost(glob, 512)
    n = 4096
    per_pos = 2 * 256 * 10  # 10 of 12 layers are windowed
    capped = sum(p - min(p, 512) for p in range(n))  # positions the window drops
    assert costmodel.prefill_cost(glob, n) - costmodel.prefill_cost(swa, n) == per_pos * capped
    meta = {"general.architecture": "gemma3", "gemma3.embedding_length": 256, "gemma3.attention.head_count": 2,
            "gemma3.attention.head_count_kv": 1, "gemma3.attention.key_length": 128, "gemma3.feed_forward_length": 1024,
            "gemma3.block_count": 12, "gemma3.attention.sliding_window": 512}
    assert costmodel.Shape.from_metadata(meta, "gemma3") == swa


def test_a_lagged_map_costs_one_more_d_by_d_product_per_filled_row():
    from ridgefill.bench import costmodel

    sh = costmodel.SMOLLM2
    n, split, sinks, tail = 4096, 16, 4, 1024
    plain = costmodel.prefill_cost(sh, n, split, sinks, tail)
    assert costmodel.prefill_cost(sh, n, split, sinks, tail, lagged=2) - plain == 2 * (n - tail - sinks) * sh.d * sh.d
    assert costmodel.bound(sh, n, split, sinks, tail, lagged=2) < costmodel.bound(sh, n, split, sinks, tail)
    # identity fill has no maps to lag
    assert costmodel.prefill_cost(sh, n, split, sinks, tail, with_map=False, lagged=2) == \
        costmodel.prefill_cost(sh, n, split, sinks, tail, with_map=False)


def test_kv_maps_cost_their_rows_of_the_stacked_weight_per_product():
    """A filled late layer with K/V maps costs 2 d d_kv per product (2 products lagged) instead of its map, norm
    and K/V projections (d² + 2 d d_kv); the split layer still projects its own K/V."""
    n, split, k, t = 10, 1, 2, 3
    m, late = n - k - t, 4 - split - 1
    kv = 2 * 8 * 4
    plain = prefill_cost(DENSE, n, split, k, t)
    assert prefill_cost(DENSE, n, split, k, t, kv=1) == plain - m * late * 8 * 8
    assert prefill_cost(DENSE, n, split, k, t, kv=2) == plain - m * late * 8 * 8 + m * late * kv
    assert prefill_cost(DENSE, n, split, k, t, with_map=False, kv=2) == prefill_cost(DENSE, n, split, k, t, with_map=False)
    sh = costmodel.SMOLLM2
    assert bound(sh, 4096, 16, 4, 1024, kv=2) > bound(sh, 4096, 16, 4, 1024, lagged=1) > bound(sh, 4096, 16, 4, 1024, lagged=2)


def test_a_hybrids_linear_layers_keep_their_input_maps_beside_kv_maps():
    """K/V maps cover a hybrid's late attention layers only: its linear layers still pay their map d² and state
    update, so kv=1 saves one map per filled row for each late attention layer and nothing else."""
    sh = dataclasses.replace(HYBRID, n_layer=4)  # attention at 1 and 3, linear at 0 and 2
    n, split, k, t = 10, 1, 2, 3
    m = n - k - t
    assert [sh.is_attention(il) for il in range(4)] == [False, True, False, True]
    assert prefill_cost(sh, n, split, k, t, kv=1) == prefill_cost(sh, n, split, k, t) - m * 8 * 8


def test_selection_costs_its_probe_scores_selected_rows_and_probe_again():
    """select = 1 runs every filled row's late layers, as route = 1 does (without the leverage products), plus
    the probe's scores at the layers up to the split and the probe rows once more; the selection is charged
    once, to the ubatch of the prompt's last row."""
    from ridgefill.bench.pipeline import Fill, ubatch_costs

    sh, n, split, sinks, tail, probe = costmodel.SMOLLM2, 4096, 15, 4, 1024, 64
    lo, hi = sinks, n - tail
    scores = probe * n * sh.d_q * (split + 1)
    again = costmodel._full_rows(sh, range(sh.n_layer), n - probe, n)
    leverage = (hi - lo) * sh.d * sh.d
    got = prefill_cost(sh, n, split, sinks, tail, select=1.0, probe=probe)
    assert got == pytest.approx(prefill_cost(sh, n, split, sinks, tail, route=1.0) - leverage + scores + again)
    assert bound(sh, n, split, sinks, tail, select=0.1) < bound(sh, n, split, sinks, tail)
    per_ubatch = ubatch_costs(sh, n, 512, Fill(split, sinks, tail, select=0.1))
    assert sum(map(sum, per_ubatch)) == pytest.approx(prefill_cost(sh, n, split, sinks, tail, select=0.1))
    plain = ubatch_costs(sh, n, 512, Fill(split, sinks, tail))
    assert [sum(u) for u in per_ubatch[:-1]] == [sum(u) for u in plain[:-1]]


def test_mode_names_carry_the_selected_share():
    from ridgefill.errors import InputError
    from ridgefill.fit.route import mode_name, parse_mode, selected_share
    from ridgefill.serve.server import ridgefill_flags

    assert (parse_mode("ridge^10"), selected_share("ridge^10")) == (("ridge", 0.0), 0.1)
    assert (parse_mode("ridge@5^10%"), selected_share("ridge@5^10%")) == (("ridge", 0.05), 0.1)
    assert selected_share("identity@5") == 0.0 and mode_name("ridge", 0.05, 0.1) == "ridge@5^10"
    for bad in ("exact^10", "ridge^200", "ridge^", "ridge^10@5"):
        with pytest.raises(InputError):
            selected_share(bad)
    assert ridgefill_flags("ridge^10")[-2:] == ["--ridgefill-select", "0.1"]
    assert "--ridgefill-select" not in ridgefill_flags("ridge@5")
