"""Synthetic GGUFs for correctness constructions and speed measurements.

`passthrough`: a copy of a real model whose layers from `split` on add nothing to the
residual stream (attention-output and FFN-down weights zeroed, which is exact for every
GGML block format: a zero block scales to zero). Then h_l = h_s for every l >= s, the
identity map is exact, and a correct fill path reproduces the exact K/V and logits.
`identity_maps`: the same model augmented with W = I, b = 0 ridge maps (F32, exact).

Synthetic models are for correctness and speed only; no quality figure comes from them.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import format as fmt
from ..files import atomic_output
from ..format.gguf_io import copy_gguf, open_gguf
from ..fit.ridge import LayerFit, Maps
from ..fit.route import RouteStats
from ..fit.stats import Provenance
from ..errors import InputError

_ZEROED = re.compile(r"blk\.(\d+)\.(attn_output|ffn_down|ffn_down_exps|ffn_down_shexp|ssm_out)\.weight$")


def passthrough(base: str | os.PathLike, split: int, out: str | os.PathLike) -> Path:
    reader = open_gguf(base)
    ident = fmt.identity_of(base, reader)
    if not 1 <= split < ident.n_layer:
        raise InputError(f"split {split} out of range [1, {ident.n_layer})")
    zeroed = []

    def data(name, raw):
        m = _ZEROED.match(name)
        if m and int(m.group(1)) >= split:
            zeroed.append(name)
            return np.zeros_like(raw)
        return raw

    copy_gguf(reader, out, tensor_data=data)
    if not zeroed:
        raise InputError(f"{base}: found no output projections to zero")
    return Path(out)


def identity_maps(base: str | os.PathLike, split: int, out: str | os.PathLike, map_type: str = "f32",
                  defaults: fmt.Defaults = fmt.Defaults(), route: bool = False, maps_only: bool = False) -> Path:
    """`route`: routing statistics too (μ = 0, P = I, so leverage = ‖h‖²; they cost what fitted ones do);
    `maps_only`: a maps file beside `base` rather than an augmented GGUF."""
    ident = fmt.identity_of(base)
    layers = list(range(split + 1, ident.n_layer))
    d = ident.n_embd
    stats = RouteStats(np.zeros(d, np.float32), np.eye(d, dtype=np.float32)) if route else None
    maps = Maps(split, layers, np.broadcast_to(np.eye(d, dtype=np.float32), (len(layers), d, d)).copy(),
                np.zeros((len(layers), d), np.float32), [LayerFit(l, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0) for l in layers],
                route=stats)
    write = fmt.write_maps if maps_only else fmt.pack
    return write(base, maps, ident, Provenance(backend="synthetic"), out, map_type=map_type, defaults=defaults)


def kv_maps_file(base: str | os.PathLike, split: int, out: str | os.PathLike, lagged: bool = True, seed: int = 0,
                 map_type: str = "f16") -> Path:
    """A maps file of random K/V maps (gguf-format.md) beside `base`, lagged by default (speed only: fitted ones
    cost the same), for every late attention layer; a hybrid's late linear layers keep identity input maps in it."""
    from ..format.maps import KVFit, KVMaps
    from .costmodel import Shape as CostShape

    ident = fmt.identity_of(base)
    names = {t.name for t in open_gguf(base).tensors}
    layers = list(range(split + 1, ident.n_layer))
    attn = [l for l in layers if f"blk.{l}.attn_k.weight" in names]
    rows, d = 2 * CostShape.from_gguf(base).d_kv, ident.n_embd
    rng = np.random.default_rng(seed)
    w = lambda: (rng.standard_normal((len(attn), rows, d), np.float32) / np.sqrt(d))
    kv = KVMaps(attn, w(), np.zeros((len(attn), rows), np.float32),
                [KVFit(l, lagged, 0.0, 0.0, 0.0, 0.0) for l in attn], w() if lagged else None)
    eye = np.broadcast_to(np.eye(d, dtype=np.float32), (len(layers), d, d))  # a view: only the linear layers' are written
    maps = Maps(split, layers, eye, np.zeros((len(layers), d), np.float32),
                [LayerFit(l, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0) for l in layers], kv=kv)
    return fmt.write_maps(base, maps, ident, Provenance(backend="synthetic"), out, map_type=map_type, kind="kv")


# ---- shape-faithful random-weight models (speed only) ----------------------------------

@dataclass(frozen=True)
class Shape:
    arch: str
    n_layer: int
    d: int
    n_head: int
    n_kv: int
    head_dim: int
    d_ff: int
    qk_norm: bool = False  # per-head RMS norm of Q and K (qwen3)
    qkv_bias: bool = False  # biases on Q, K, V (qwen2)
    n_expert: int = 0  # MoE FFN: experts, experts per token, expert FFN width
    n_expert_used: int = 0
    d_ff_exp: int = 0
    d_ff_shexp: int = 0  # shared expert beside the routed ones (qwen35moe)
    # hybrid (qwen35*): every `attn_interval`-th layer attends, the others are Gated DeltaNet
    attn_interval: int = 0
    ssm_d_state: int = 0  # key/value head width of the linear attention
    ssm_n_group: int = 0  # key heads
    ssm_dt_rank: int = 0  # value heads
    ssm_d_conv: int = 4
    rope_dim: int = 0  # rotated dims per head (0: all)
    rope_sections: tuple[int, ...] = ()  # MRoPE sections (qwen35*)

    @property
    def hybrid(self) -> bool:
        return self.attn_interval > 0

    def is_attention(self, il: int) -> bool:
        return not self.hybrid or (il + 1) % self.attn_interval == 0


SHAPES = {
    "tiny-llama": Shape("llama", 8, 256, 4, 2, 64, 768),
    "tiny-qwen2": Shape("qwen2", 8, 256, 4, 2, 64, 768, qkv_bias=True),
    "tiny-qwen3": Shape("qwen3", 8, 256, 4, 2, 64, 768, qk_norm=True),
    "tiny-qwen3moe": Shape("qwen3moe", 8, 256, 4, 2, 64, 768, qk_norm=True, n_expert=8, n_expert_used=2, d_ff_exp=128),
    "llama-3.2-1b": Shape("llama", 16, 2048, 32, 8, 64, 8192),
    "llama-3.1-8b": Shape("llama", 32, 4096, 32, 8, 128, 14336),
    "qwen3-8b": Shape("qwen3", 36, 4096, 32, 8, 128, 12288, qk_norm=True),
    "qwen3-30b-a3b": Shape("qwen3moe", 48, 2048, 32, 4, 128, 6144, qk_norm=True,
                           n_expert=128, n_expert_used=8, d_ff_exp=768),
    "tiny-qwen35": Shape("qwen35", 8, 256, 4, 2, 64, 768, qk_norm=True, attn_interval=4, ssm_d_state=32,
                         ssm_n_group=2, ssm_dt_rank=4, rope_dim=16, rope_sections=(3, 3, 2, 0)),
    "tiny-qwen35moe": Shape("qwen35moe", 8, 256, 4, 2, 64, 768, qk_norm=True, n_expert=8, n_expert_used=2,
                            d_ff_exp=128, d_ff_shexp=128, attn_interval=4, ssm_d_state=32, ssm_n_group=2,
                            ssm_dt_rank=4, rope_dim=16, rope_sections=(3, 3, 2, 0)),
    "tiny-qwen3next": Shape("qwen3next", 8, 256, 4, 2, 64, 768, qk_norm=True, n_expert=8, n_expert_used=2,
                            d_ff_exp=128, d_ff_shexp=128, attn_interval=4, ssm_d_state=32, ssm_n_group=2,
                            ssm_dt_rank=4, rope_dim=16),
    "qwen3.5-9b": Shape("qwen35", 32, 4096, 16, 4, 256, 12288, qk_norm=True, attn_interval=4, ssm_d_state=128,
                        ssm_n_group=16, ssm_dt_rank=32, rope_dim=64, rope_sections=(11, 11, 10, 0)),
    # the seed's model: Qwen3.8-27B's config.json (as Qwen3.5-27B's and Qwen3.6-27B's): hidden 5120, 64 layers
    # (every 4th full attention: 24 Q / 4 KV heads of 256, 64 rotated dims, MRoPE [11, 11, 10]), Gated DeltaNet
    # with 16 key / 48 value heads of 128, conv 4, FFN 17408; its one multi-token-prediction layer is not
    # part of prefill and is left out (docs/results.md, "The GPU run")
    "qwen3.8-27b": Shape("qwen35", 64, 5120, 24, 4, 256, 17408, qk_norm=True, attn_interval=4, ssm_d_state=128,
                         ssm_n_group=16, ssm_dt_rank=48, rope_dim=64, rope_sections=(11, 11, 10, 0)),
}

_F32_TENSORS = re.compile(r".*\.ssm_conv1d\.weight$")  # the conv kernel stays F32 (ggml_ssm_conv)


def random_model(shape: str, out: str | os.PathLike, tokenizer_from: str | os.PathLike, seed: int = 0,
                 weight_type: str = "q8_0", n_ctx: int = 131072, shared_layers: bool = False) -> Path:
    """A seeded random-weight GGUF of a real model's shape with a real tokenizer (speed only).

    Projections are drawn with std 1/sqrt(fan_in) and residual writes scaled by 1/sqrt(2L),
    so activations stay finite over long prompts; norms are 1. `shared_layers`: every layer
    of a kind (attention, linear attention) gets the same draws (same speed, a fraction of
    the time to write an 8B-sized file).
    """
    import gguf

    if shape not in SHAPES:
        raise InputError(f"unknown shape {shape!r}; known: {', '.join(SHAPES)}")
    sh = SHAPES[shape]
    qtype = {"f32": gguf.GGMLQuantizationType.F32, "f16": gguf.GGMLQuantizationType.F16,
             "q8_0": gguf.GGMLQuantizationType.Q8_0,
             "q4_0": gguf.GGMLQuantizationType.Q4_0}[weight_type]
    src = open_gguf(tokenizer_from)
    rng = np.random.default_rng(seed)
    n_vocab = len(src.fields["tokenizer.ggml.tokens"].data)
    tensors = _random_tensors(sh, n_vocab, rng, shared_layers)

    out = Path(out)
    with atomic_output(out) as part:
        _write_random(gguf, part, shape, sh, n_ctx, src, tensors, qtype)
    return out


def _random_tensors(sh: Shape, n_vocab: int, rng: np.random.Generator, shared_layers: bool = False):
    def w(*shape, scale=1.0):
        return (rng.standard_normal(shape, dtype=np.float32) * (scale / np.sqrt(shape[-1]))).astype(np.float32)

    d, hq, hkv = sh.d, sh.n_head * sh.head_dim, sh.n_kv * sh.head_dim
    res = 1.0 / np.sqrt(2 * sh.n_layer)
    ones = lambda n: np.ones(n, np.float32)  # noqa: E731
    bias = lambda n: (0.1 * rng.standard_normal(n)).astype(np.float32)  # noqa: E731
    tensors = [("token_embd.weight", w(n_vocab, d, scale=np.sqrt(d))), ("output_norm.weight", ones(d)),
               ("output.weight", w(n_vocab, d))]
    drawn: dict[bool, tuple[int, int]] = {}  # layer kind (attention?) -> its first layer's tensors
    for i in range(sh.n_layer):
        p = f"blk.{i}."
        kind = sh.is_attention(i)
        if shared_layers and kind in drawn:  # the same arrays as the first layer of this kind
            start, stop = drawn[kind]
            tensors += [(p + name.split(".", 2)[2], arr) for name, arr in tensors[start:stop]]
            continue
        start = len(tensors)
        # qwen35*: the attention's Q projection also yields the output gate; the FFN norm is post-attention
        q_rows = 2 * hq if sh.hybrid else hq
        ffn_norm = "post_attention_norm" if sh.hybrid else "ffn_norm"
        tensors += [(p + "attn_norm.weight", ones(d)), (p + f"{ffn_norm}.weight", ones(d))]
        if sh.is_attention(i):
            tensors += [(p + "attn_q.weight", w(q_rows, d)), (p + "attn_k.weight", w(hkv, d)),
                        (p + "attn_v.weight", w(hkv, d)), (p + "attn_output.weight", w(d, hq, scale=res))]
        else:
            tensors += _linear_attention_tensors(sh, p, w, rng, res)
        if sh.qkv_bias:
            tensors += [(p + "attn_q.bias", bias(hq)), (p + "attn_k.bias", bias(hkv)), (p + "attn_v.bias", bias(hkv))]
        if sh.qk_norm and sh.is_attention(i):
            tensors += [(p + "attn_q_norm.weight", ones(sh.head_dim)), (p + "attn_k_norm.weight", ones(sh.head_dim))]
        if sh.n_expert:
            e, f = sh.n_expert, sh.d_ff_exp
            tensors += [(p + "ffn_gate_inp.weight", w(e, d)),
                        (p + "ffn_gate_exps.weight", w(e, f, d)), (p + "ffn_up_exps.weight", w(e, f, d)),
                        (p + "ffn_down_exps.weight", w(e, d, f, scale=res))]
            if sh.d_ff_shexp:
                g = sh.d_ff_shexp
                tensors += [(p + "ffn_gate_inp_shexp.weight", w(d)),
                            (p + "ffn_gate_shexp.weight", w(g, d)), (p + "ffn_up_shexp.weight", w(g, d)),
                            (p + "ffn_down_shexp.weight", w(d, g, scale=res))]
        else:
            tensors += [(p + "ffn_gate.weight", w(sh.d_ff, d)), (p + "ffn_up.weight", w(sh.d_ff, d)),
                        (p + "ffn_down.weight", w(d, sh.d_ff, scale=res))]
        drawn[kind] = (start, len(tensors))
    return tensors


def _linear_attention_tensors(sh: Shape, p: str, w, rng: np.random.Generator, res: float):
    """A Gated DeltaNet layer's tensors (llama.cpp's qwen35 names and shapes).

    ssm_a is -exp(A_log) and ssm_dt the softplus bias, so that the per-step decay
    exp(softplus(alpha + dt) * a) lies in (0, 1) and the state stays bounded.
    """
    d = sh.d
    key_dim, value_dim = sh.ssm_d_state * sh.ssm_n_group, sh.ssm_d_state * sh.ssm_dt_rank
    conv_dim = 2 * key_dim + value_dim
    h = sh.ssm_dt_rank
    return [(p + "attn_qkv.weight", w(conv_dim, d)), (p + "attn_gate.weight", w(value_dim, d)),
            (p + "ssm_conv1d.weight", w(conv_dim, sh.ssm_d_conv)),
            (p + "ssm_dt.bias", rng.uniform(-1.0, 0.0, h).astype(np.float32)),
            (p + "ssm_a", -np.exp(rng.uniform(-1.0, 1.0, h)).astype(np.float32)),
            *([(p + "ssm_ba.weight", w(2 * h, d))] if sh.arch == "qwen3next"  # one fused projection
              else [(p + "ssm_beta.weight", w(h, d)), (p + "ssm_alpha.weight", w(h, d))]),
            (p + "ssm_norm.weight", np.ones(sh.ssm_d_state, np.float32)),
            (p + "ssm_out.weight", w(d, value_dim, scale=res))]


def _write_random(gguf, path, name, sh: Shape, n_ctx, src, tensors, qtype):
    writer = gguf.GGUFWriter(path, arch=sh.arch)
    writer.add_name(f"ridgefill-synthetic-{name}")
    writer.add_block_count(sh.n_layer)
    writer.add_context_length(n_ctx)
    writer.add_embedding_length(sh.d)
    writer.add_feed_forward_length(sh.d_ff)
    writer.add_head_count(sh.n_head)
    writer.add_head_count_kv(sh.n_kv)
    writer.add_key_length(sh.head_dim)
    writer.add_value_length(sh.head_dim)
    writer.add_rope_dimension_count(sh.rope_dim or sh.head_dim)
    writer.add_rope_freq_base(500000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    if sh.n_expert:
        writer.add_expert_count(sh.n_expert)
        writer.add_expert_used_count(sh.n_expert_used)
        writer.add_expert_feed_forward_length(sh.d_ff_exp)
    if sh.d_ff_shexp:
        writer.add_expert_shared_feed_forward_length(sh.d_ff_shexp)
    if sh.hybrid:
        writer.add_full_attention_interval(sh.attn_interval)
        writer.add_ssm_conv_kernel(sh.ssm_d_conv)
        writer.add_ssm_state_size(sh.ssm_d_state)
        writer.add_ssm_group_count(sh.ssm_n_group)
        writer.add_ssm_time_step_rank(sh.ssm_dt_rank)
        writer.add_ssm_inner_size(sh.ssm_d_state * sh.ssm_dt_rank)
    if sh.rope_sections:
        writer.add_rope_dimension_sections(list(sh.rope_sections))
    for f in src.fields.values():
        if f.name.startswith("tokenizer."):
            vtype = f.types[0]
            sub = f.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
            writer.add_key_value(f.name, f.contents(), vtype, sub_type=sub)
    encoded: dict[int, np.ndarray] = {}  # shared arrays are encoded once
    for name, arr in tensors:
        if _F32_TENSORS.match(name):
            writer.add_tensor(name, arr)
            continue
        plain = {gguf.GGMLQuantizationType.F16: np.float16, gguf.GGMLQuantizationType.F32: np.float32}.get(qtype)
        if arr.ndim >= 2 and id(arr) not in encoded:
            encoded[id(arr)] = arr.astype(plain) if plain else gguf.quants.quantize(arr, qtype)
        if arr.ndim >= 2 and not plain:
            writer.add_tensor(name, encoded[id(arr)], raw_dtype=qtype)
        else:
            writer.add_tensor(name, encoded.get(id(arr), arr))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
