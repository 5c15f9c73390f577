"""Splice variants: a fill run whose filled rows get one component back from exact computation.

After the head rows of a ridge (or identity) fill, the hook overwrites, for the filled rows of
every late layer (split+1 .. L-1), one cached component with its exact value; the tail and every
score then see it. The share of the fill-vs-exact gap a splice closes says which component
carries the error:

- `*-k`      the keys;
- `*-v`      the values;
- `*-knorm`  only the keys' per-row, per-head norms (the filled keys' directions are kept;
             RoPE is a rotation, so the norms of the cached keys are the pre-RoPE ones);
- `*-kv`     keys and values (a sanity check on attention-only models: it reproduces
             `exact-cut`, see below);
- `*-state`  the recurrent state (conv and delta-rule state) of every late linear-attention
             layer of a hybrid model, as it stands after the head rows;
- `*-all`    K, V and recurrent state (the sanity check for hybrid models);
- `*-k-early`, `*-k-late`, `*-v-...`, `*-kv-...`: the same in half of the filled layers only, the
             half next to the split (`early`: the first ceil(n/2) of the n late layers) or the top
             half (`late`), to say which filled layers carry the error.

The exact values come from the same prompt run at split = L over the same fill range (every
layer exact, the fill run's ubatches), i.e. the `exact-cut` variant's cache, so a splice of
both K and V gives exact-cut's results bit for bit and no batch-partition noise enters.
When the `exact-cut` variant runs before the splices of an item (the runner's order), its
cache is kept and serves them, so the exact values are computed once per item.
Needs an F32 or F16 KV cache (quantized caches cannot be written row by row).
"""

from __future__ import annotations

import hashlib

import numpy as np

from ..bench import costmodel
from ..runtime import Context
from .prefill import Head, run_head
from .session import EXACT_CUT, Variant, register
from ..errors import InputError

ROW_PARTS = ("k", "v")  # attention layers: one row per position, rows [lo, hi) are spliced
STATE_PARTS = ("conv", "ssm")  # recurrent layers: one state per sequence
PARTS = {"k": ("k",), "v": ("v",), "knorm": ("knorm",), "kv": ROW_PARTS, "state": STATE_PARTS,
         "all": ROW_PARTS + STATE_PARTS}


def layer_parts(model) -> dict[int, tuple[str, ...]]:
    """What each layer caches: K/V rows (attention) or a recurrent state (hybrid linear layers)."""
    shape = costmodel.Shape.from_model(model)
    return {il: ROW_PARTS if shape.is_attention(il) else STATE_PARTS for il in range(model.n_layer)}


def read(ctx: Context, il: int, part: str, lo: int, hi: int, seq_id: int) -> np.ndarray:
    if part in STATE_PARTS:
        return ctx.state_get(il, part, seq_id=seq_id)
    return ctx.state_get(il, part, lo, hi, seq_id)


def write(ctx: Context, il: int, part: str, values: np.ndarray, lo: int, hi: int, seq_id: int) -> None:
    if part in STATE_PARTS:
        ctx.state_set(il, part, values, seq_id=seq_id)
    else:
        ctx.state_set(il, part, values, lo, hi, seq_id)


def weights_id(model) -> str:
    """Augmented GGUFs of one base hold its tensors byte for byte: the same exact values."""
    return model.metadata.get("ridgefill.base_sha256") or str(model.path)


class _ExactCache:
    """Exact K/V of the filled rows (and recurrent states) of the last prompt seen (one entry: items come one by one)."""

    def __init__(self):
        self.key = None
        self.rows: dict[tuple[int, str], np.ndarray] = {}
        self.layers: set[int] = set()
        self._ctx: dict[tuple, Context] = {}

    @staticmethod
    def key_of(head: Head) -> tuple:
        ctx = head.ctx
        return (weights_id(ctx.model), hashlib.sha1(head.tokens.tobytes()).hexdigest(), head.stop, head.fill_range,
                ctx.n_batch, ctx.n_ubatch, ctx.kv_type, ctx.flash_attn)

    def keep(self, head: Head, layers: list[int]) -> None:
        """Take the filled rows (recurrent layers: the state) of `layers` from a head run at split = L."""
        lo, hi = head.fill_range
        kinds = layer_parts(head.ctx.model)
        self.rows = {(il, p): read(head.ctx, il, p, lo, hi, head.seq_id) for il in layers for p in kinds[il]}
        self.layers = set(layers)
        self.key = self.key_of(head)

    def get(self, head: Head, layers: list[int]) -> dict[tuple[int, str], np.ndarray]:
        if self.key_of(head) != self.key or not self.layers.issuperset(layers):
            ref = self._context(head.ctx)
            lo, _ = head.fill_range
            ref_head = run_head(ref, head.tokens, sinks=lo, tail=len(head.tokens) - head.stop, seq_id=head.seq_id)
            self.keep(ref_head, layers)
        return self.rows

    def _context(self, ctx: Context) -> Context:
        """A second context on the same model, same sizes, filling at split = L (exact values)."""
        k = (ctx.model.source, ctx.n_ctx, ctx.n_batch, ctx.n_ubatch, ctx.kv_type, ctx.flash_attn)
        if k not in self._ctx:
            ref = ctx.model.context(n_ctx=ctx.n_ctx, n_batch=ctx.n_batch, n_ubatch=ctx.n_ubatch, threads=ctx.threads,
                                    kv_type=ctx.kv_type, flash_attn=ctx.flash_attn)
            ref.set_fill("identity", ctx.model.n_layer)
            self._ctx[k] = ref
        return self._ctx[k]


_EXACT = _ExactCache()


GROUPS = ("early", "late")  # halves of the late layers a grouped splice writes (None: all of them)


def late_layers(ctx: Context, group: str | None = None) -> list[int]:
    """The filled layers split+1 .. L-1, or one half of them: `early` the first ceil(n/2), `late` the rest."""
    layers = list(range(ctx.fill_split + 1, ctx.model.n_layer))
    half = (len(layers) + 1) // 2
    return {None: layers, "early": layers[:half], "late": layers[half:]}[group]


def with_exact_norms(filled: np.ndarray, exact: np.ndarray, head_dim: int) -> np.ndarray:
    """Filled rows rescaled per head to the exact rows' norms (directions kept)."""
    f = filled.reshape(len(filled), -1, head_dim)
    e = exact.reshape(len(exact), -1, head_dim)
    fn = np.linalg.norm(f, axis=2, keepdims=True)
    en = np.linalg.norm(e, axis=2, keepdims=True)
    return (f * (en / np.maximum(fn, 1e-30))).reshape(filled.shape).astype(np.float32)


def splice(head: Head, parts: tuple[str, ...], group: str | None = None) -> None:
    """Overwrite `parts` of the filled rows of every late layer (of `group`) that has them with exact values."""
    ctx, (lo, hi) = head.ctx, head.fill_range
    kinds = layer_parts(ctx.model)
    layers = late_layers(ctx)
    todo = [(il, p) for il in late_layers(ctx, group) for p in parts if ("k" if p == "knorm" else p) in kinds[il]]
    if not todo:
        raise InputError(f"splice {'+'.join(parts)}: no layer after split {ctx.fill_split} caches it "
                         f"({ctx.model.arch}; the recurrent state needs a hybrid model)")
    if hi <= lo:
        return  # nothing was filled (e.g. T >= N): nothing to splice
    exact = _EXACT.get(head, layers)
    for il, part in todo:
        if part == "knorm":
            filled = ctx.state_get(il, "k", lo, hi, head.seq_id)
            ctx.state_set(il, "k", with_exact_norms(filled, exact[il, "k"], ctx.model.head_dim), lo, hi, head.seq_id)
        else:
            write(ctx, il, part, exact[il, part], lo, hi, head.seq_id)


def _hook(parts: tuple[str, ...], group: str | None = None):
    return lambda head: splice(head, parts, group)


def keep_exact_cut(head: Head) -> None:
    """exact-cut's hook: its head cache is the splices' exact values; keep them for the item's splices."""
    if head.fill_range[1] > head.fill_range[0]:
        _EXACT.keep(head, list(range(head.ctx.model.n_layer)))


register(Variant(EXACT_CUT.name, EXACT_CUT.mode, hook=keep_exact_cut, all_layers=True))
for _mode in ("ridge", "identity"):
    for _name, _parts in PARTS.items():
        register(Variant(f"{_mode}-{_name}", _mode, hook=_hook(_parts)))
    for _name in ("k", "v", "kv"):
        for _group in GROUPS:
            register(Variant(f"{_mode}-{_name}-{_group}", _mode, hook=_hook(PARTS[_name], _group)))
