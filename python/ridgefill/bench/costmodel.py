"""Multiply-add cost model of a prefill, and the speed-up RidgeFill's op count allows.

It counts multiply-adds only: memory traffic, kernel efficiency, the map's weights being read
and everything that is not a matmul are not modelled, so its "bound" is what a perfect
implementation of these ops would reach, not a physical limit; measured speed-ups are printed
as a share of it.

Per row, a full attention layer costs its projections d(d_q' + 2 d_kv) + d_q d (d_q' = 2 d_q
where Q also yields an output gate, qwen35), its FFN 3 d d_ff (active experts and shared
expert for MoE) and causal attention 2 p d_q at position p, or 2 min(p, w) d_q in a
sliding-window layer of window w (gemma3: five of every six layers). A full Gated DeltaNet layer
(hybrid models) costs its input projections d(c + d_v + 2 H) (c = 2 d_k + d_v conv
channels, d_v for the output gate, H heads for beta and alpha), the conv c w, the
delta rule 4 H s² (decay, S^T k, outer product, S^T q with s x s state per head), the
out-projection d_v d and its FFN.

A filled late layer costs its map d² (none for identity) plus what writes its memory:
K/V projections 2 d d_kv, or the input projections, conv and delta rule of a linear
layer (the fused kernel also produces its output). The split layer only writes its
memory. Sinks and tail rows run the full model. With K/V maps (gguf-format.md) a filled late
attention layer costs only its rows of the stacked K/V weight, 2 d d_kv per product (one per row,
two when the maps read the previous row): no map into its input, no norm, no K/V projection. A
hybrid's linear layers keep their input maps beside them (the fit's rule, fit/kv_fit.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from ..errors import InputError
from ..fit.route import parse_mode, selected_share
from ..runtime import PROBE_ROWS, fill_range


@dataclass(frozen=True)
class Shape:
    n_layer: int
    d: int
    d_q: int
    d_kv: int
    d_ff: int  # per-token FFN width (for MoE: active experts' total, shared included)
    q_gate: bool = False  # the Q projection also yields a per-head output gate (qwen35, qwen3next)
    attn_interval: int = 0  # hybrid: every attn_interval-th layer attends, the others are Gated DeltaNet
    ssm_heads: int = 0  # value heads H of a linear layer
    ssm_key_dim: int = 0  # d_k = key heads x state size
    ssm_state: int = 0  # s: per-head state is s x s
    ssm_conv: int = 4  # conv kernel width w
    swa_window: int = 0  # sliding-window layers attend to at most this many positions (0: none)
    swa_pattern: int = 0  # every swa_pattern-th layer attends globally, the others in the window

    @classmethod
    def from_model(cls, model) -> "Shape":
        """From a ridgefill.runtime.Model (or anything with its metadata)."""
        return cls.from_metadata(model.metadata, model.arch)

    @classmethod
    def from_gguf(cls, path) -> "Shape":
        from ..format.gguf_io import field, open_gguf

        reader = open_gguf(path)
        meta = {k: field(reader, k) for k in reader.fields if not k.startswith("tokenizer.")}
        return cls.from_metadata(meta, meta["general.architecture"])

    @classmethod
    def from_metadata(cls, meta: dict, arch: str) -> "Shape":
        def get(key, default=None):
            v = meta.get(f"{arch}.{key}", default)
            if v is None:
                raise InputError(f"metadata has no {arch}.{key}")
            return int(v)

        d = get("embedding_length")
        n_head = get("attention.head_count")
        n_head_kv = get("attention.head_count_kv", n_head)
        head = get("attention.key_length", d // n_head)
        d_ff = get("feed_forward_length")
        if get("expert_used_count", 0):  # MoE: the active experts' width, plus a shared expert's
            d_ff = get("expert_used_count") * get("expert_feed_forward_length") + \
                get("expert_shared_feed_forward_length", 0)
        hybrid = {}
        if f"{arch}.ssm.state_size" in meta and arch in ("qwen35", "qwen35moe", "qwen3next"):
            s = get("ssm.state_size")
            hybrid = dict(q_gate=True, attn_interval=get("full_attention_interval", 4),
                          ssm_heads=get("ssm.time_step_rank"), ssm_key_dim=s * get("ssm.group_count"), ssm_state=s,
                          ssm_conv=get("ssm.conv_kernel"))
        swa = {}
        if arch in SWA_PATTERN and meta.get(f"{arch}.attention.sliding_window"):
            swa = dict(swa_window=get("attention.sliding_window"), swa_pattern=SWA_PATTERN[arch])
        return cls(get("block_count"), d, n_head * head, n_head_kv * head, d_ff, **hybrid, **swa)

    def is_attention(self, il: int) -> bool:
        return self.attn_interval == 0 or (il + 1) % self.attn_interval == 0

    def window(self, il: int) -> int | None:
        """The attention window of layer il, None for a global layer."""
        if self.swa_window and self.swa_pattern and (il + 1) % self.swa_pattern != 0:
            return self.swa_window
        return None


# llama.cpp's default sliding-window pattern per architecture (models/gemma3.cpp: load_swa_pattern)
SWA_PATTERN = {"gemma3": 6}


def _ffn(sh: Shape) -> float:
    return 3 * sh.d * sh.d_ff


def _memory_write(sh: Shape, il: int) -> float:
    """What writes layer il's memory for one row: K/V projections, or a linear layer's state update."""
    if sh.is_attention(il):
        return 2 * sh.d * sh.d_kv
    d_v = sh.ssm_heads * sh.ssm_state
    channels = 2 * sh.ssm_key_dim + d_v
    return sh.d * (channels + 2 * sh.ssm_heads) + channels * sh.ssm_conv + 4 * sh.ssm_heads * sh.ssm_state ** 2


def _full_row(sh: Shape, il: int) -> float:
    """A full layer's cost for one row, without the position-dependent attention."""
    if sh.is_attention(il):
        d_q_proj = sh.d_q * (2 if sh.q_gate else 1)
        return sh.d * (d_q_proj + 2 * sh.d_kv) + sh.d_q * sh.d + _ffn(sh)
    d_v = sh.ssm_heads * sh.ssm_state
    return _memory_write(sh, il) + sh.d * d_v + d_v * sh.d + _ffn(sh)  # + output gate and out-projection


def _attn(sh: Shape, il: int) -> float:
    """Attention cost per row per unit of position (2 p d_q at position p)."""
    return 2 * sh.d_q if sh.is_attention(il) else 0.0


def _sum_positions(lo: int, hi: int, window: int | None = None) -> float:
    """Σ p for p in [lo, hi), each p capped at `window` when given."""
    if hi <= lo:
        return 0.0
    if window is None or hi <= window:
        return (hi - lo) * (lo + hi - 1) / 2
    cut = max(lo, window)
    return _sum_positions(lo, cut) + (hi - cut) * window


def _full_rows(sh: Shape, layers, lo: int, hi: int) -> float:
    """Cost of running `layers` fully for the rows [lo, hi)."""
    return sum((hi - lo) * _full_row(sh, il) + _attn(sh, il) * _sum_positions(lo, hi, sh.window(il)) for il in layers)


def prefill_cost(sh: Shape, n: int, split: int | None = None, sinks: int = 0, tail: int = 0,
                 with_map: bool = True, route: float = 0.0, lagged: float = 0, kv: float = 0,
                 select: float = 0.0, probe: int = PROBE_ROWS) -> float:
    """Multiply-adds of a prompt of n rows; split=None is the exact prefill.

    lagged: d x d products per filled row spent on earlier rows (one per lagged map; window maps their
    share, fmt.earlier_row_products).

    route: share of the filled rows routed (route.py): each filled row's leverage costs a d x d
    product, and the routed rows run layers split.. in full again, at positions spread over the
    filled range.

    kv: products of the stacked K/V maps per filled row (1, or 2 reading the previous row; 0: input maps).

    select: share of the filled rows the prompt's last `probe` rows select (Context.set_select): the probe
    scores every row at each layer up to the split (its queries against all keys), the selected rows run
    layers split.. in full, and the probe rows run every layer again; all of it after the prompt's last row."""
    return sum(layer_costs(sh, 0, n, split, sinks, tail, with_map, route, lagged, kv=kv, select=select, probe=probe))


def layer_costs(sh: Shape, lo: int, hi: int, split: int | None = None, sinks: int = 0, tail: int = 0,
                with_map: bool = True, route: float = 0.0, lagged: float = 0, n: int | None = None,
                kv: float = 0, select: float = 0.0, probe: int = PROBE_ROWS) -> list[float]:
    """Per layer, the multiply-adds of the prompt rows [lo, hi) of an n-row prompt (n: hi by default)
    under prefill_cost's fill; the lagged and routing products are charged to the layer after the split, the
    selection to the rows [lo, hi) that hold the prompt's last row."""
    n = hi if n is None else n
    f_lo, f_hi = fill_range(n, sinks, tail)
    a, b = max(lo, f_lo), min(hi, f_hi)  # the filled rows of [lo, hi)
    full = [_full_rows(sh, [il], lo, hi) for il in range(sh.n_layer)]
    if split is None or f_hi <= f_lo:
        return full
    out = _filled_layer_costs(sh, full, a, b, split, with_map, route, lagged, kv) if b > a else full
    if select > 0 and hi == n:
        _add_selection(sh, out, n, split, f_lo, f_hi, select, probe)
    return out


def _filled_layer_costs(sh: Shape, full: list[float], a: int, b: int, split: int, with_map: bool, route: float,
                        lagged: float, kv: float) -> list[float]:
    """layer_costs where the rows [a, b) of its rows are filled."""
    m = b - a
    out = [full[il] - _full_rows(sh, [il], a, b) for il in range(sh.n_layer)]  # sinks and tail rows
    for il in range(sh.n_layer):
        if il < split:
            out[il] += _full_rows(sh, [il], a, b)
        else:
            kv_maps = with_map and kv and il > split and sh.is_attention(il)  # a hybrid's linear layers keep input maps
            write = 2 * sh.d * sh.d_kv * kv if kv_maps else _memory_write(sh, il) + (sh.d * sh.d if with_map and il > split else 0)
            out[il] += m * write
            out[il] += route * _full_rows(sh, [il], a, b)
    out[min(split + 1, sh.n_layer - 1)] += m * sh.d * sh.d * ((lagged if with_map else 0) + (1 if route > 0 else 0))
    return out


def _add_selection(sh: Shape, out: list[float], n: int, split: int, f_lo: int, f_hi: int, select: float,
                   probe: int) -> None:
    """The selection's work, per layer: the probe's scores at the layers up to the split, the selected rows'
    late layers (at positions spread over the fill range) and the probe rows again."""
    p = min(probe, n)
    for il in range(sh.n_layer):
        if il <= split and sh.is_attention(il):
            out[il] += p * n * sh.d_q
        if il >= split:
            out[il] += select * _full_rows(sh, [il], f_lo, f_hi)
        out[il] += _full_rows(sh, [il], n - p, n)


def mode_costs(mode: str) -> dict:
    """The cost model's arguments for a fill mode's name (`ridge@5^10`: maps, 5 % routed, 10 % selected)."""
    base, share = parse_mode(mode)
    return {"with_map": base == "ridge", "route": share, "select": selected_share(mode)}


def bound(sh: Shape, n: int, split: int, sinks: int, tail: int, with_map: bool = True, route: float = 0.0,
          lagged: float = 0, kv: float = 0, select: float = 0.0, probe: int = PROBE_ROWS) -> float:
    """cost_exact / cost_fill: the speed-up a perfect implementation reaches."""
    return prefill_cost(sh, n) / prefill_cost(sh, n, split, sinks, tail, with_map, route, lagged, kv, select, probe)


SMOLLM2 = Shape(n_layer=30, d=576, d_q=576, d_kv=192, d_ff=1536)
