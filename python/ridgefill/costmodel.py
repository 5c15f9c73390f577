"""Multiply-add cost model of a prefill: the physical limit of RidgeFill's speed-up.

Per row and layer: a full layer costs its projections d(d_q + 2 d_kv) + d_q d, its FFN
3 d d_ff (active experts for MoE) and causal attention 2 p d_q at position p. A filled
late layer costs its map d² (none for identity) and its K/V projections 2 d d_kv; the
split layer itself only its K/V projections. Sinks and tail rows run the full model.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Shape:
    n_layer: int
    d: int
    d_q: int
    d_kv: int
    d_ff: int  # per-token FFN width (for MoE: active experts' total, shared included)

    @classmethod
    def from_model(cls, model) -> "Shape":
        """From a ridgefill.runtime.Model (or anything with its metadata)."""
        return cls.from_metadata(model.metadata, model.arch)

    @classmethod
    def from_gguf(cls, path) -> "Shape":
        from .gguf_io import field, open_gguf

        reader = open_gguf(path)
        meta = {k: field(reader, k) for k in reader.fields if not k.startswith("tokenizer.")}
        return cls.from_metadata(meta, meta["general.architecture"])

    @classmethod
    def from_metadata(cls, meta: dict, arch: str) -> "Shape":
        d = int(meta[f"{arch}.embedding_length"])
        n_head = int(meta[f"{arch}.attention.head_count"])
        n_head_kv = int(meta.get(f"{arch}.attention.head_count_kv", n_head))
        head = int(meta.get(f"{arch}.attention.key_length", d // n_head))
        d_ff = int(meta[f"{arch}.feed_forward_length"])
        if int(meta.get(f"{arch}.expert_used_count", 0) or 0):  # MoE: the active experts' width
            d_ff = int(meta[f"{arch}.expert_used_count"]) * int(meta[f"{arch}.expert_feed_forward_length"])
        return cls(int(meta[f"{arch}.block_count"]), d, n_head * head, n_head_kv * head, d_ff)


def _full_row(sh: Shape, p: float) -> float:
    return sh.d * (sh.d_q + 2 * sh.d_kv) + sh.d_q * sh.d + 3 * sh.d * sh.d_ff + 2 * p * sh.d_q


def _sum_positions(lo: int, hi: int) -> float:
    """Σ p for p in [lo, hi)."""
    return (hi - lo) * (lo + hi - 1) / 2 if hi > lo else 0.0


def prefill_cost(sh: Shape, n: int, split: int | None = None, sinks: int = 0, tail: int = 0,
                 with_map: bool = True) -> float:
    """Multiply-adds of a prompt of n rows; split=None is the exact prefill."""
    per_layer_const = _full_row(sh, 0)
    attn = 2 * sh.d_q
    exact = sh.n_layer * (n * per_layer_const + attn * _sum_positions(0, n))
    if split is None:
        return exact
    lo, hi = sinks, n - tail
    if hi <= lo:
        return exact
    m = hi - lo
    filled_exact_part = split * (m * per_layer_const + attn * _sum_positions(lo, hi))
    kv = 2 * sh.d * sh.d_kv
    late = sh.n_layer - split - 1
    filled_rest = m * (kv + late * (kv + (sh.d * sh.d if with_map else 0)))
    full_filled_rows = sh.n_layer * (m * per_layer_const + attn * _sum_positions(lo, hi))
    return exact - full_filled_rows + filled_exact_part + filled_rest


def bound(sh: Shape, n: int, split: int, sinks: int, tail: int, with_map: bool = True) -> float:
    """cost_exact / cost_fill: the speed-up a perfect implementation reaches."""
    return prefill_cost(sh, n) / prefill_cost(sh, n, split, sinks, tail, with_map)


SMOLLM2 = Shape(n_layer=30, d=576, d_q=576, d_kv=192, d_ff=1536)
