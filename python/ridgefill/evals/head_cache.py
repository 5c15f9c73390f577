"""The cache a fill's head rows leave, kept so the next variant of the same item starts from it.

Variants of one item that fill alike (ridge and its splices and selections) decode the same head rows
into the same cache; only their hooks and tails differ. After a fill head, every layer's K and V rows
of the head are kept (host copies); when the next head on that context has the same key (prompt, sinks,
tail, sequence, fill mode, split, routed share, batch sizes), the tail and everything decoded after it
are removed and the kept rows written back, which undoes whatever a hook wrote, and the head is not
decoded again. Only for models whose every layer caches K/V rows of every position (no recurrent state,
no sliding window: neither can be rolled back) and F32/F16 caches, and for contexts that only
run_head and the tail after it decode into (the evaluations' own); tests/test_select.py checks that a
variant started from kept rows answers and scores bit for bit as one decoded from scratch.
"""

from __future__ import annotations

import hashlib
import weakref
from dataclasses import dataclass

import numpy as np

from ..bench.costmodel import Shape


@dataclass
class Kept:
    key: tuple
    stop: int
    fill_range: tuple[int, int]
    n_filled: int
    n_full: int
    rows: dict[tuple[int, str], np.ndarray]


class HeadCache:
    def __init__(self):
        self._kept: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # per context

    @staticmethod
    def usable(ctx) -> bool:
        if ctx.kv_type not in ("f16", "f32") or ctx.fill_mode == "exact":
            return False
        shape = Shape.from_model(ctx.model)
        return not shape.swa_window and all(shape.is_attention(il) for il in range(shape.n_layer))

    @staticmethod
    def key_of(ctx, tokens: np.ndarray, sinks: int, tail: int, seq_id: int) -> tuple:
        return (hashlib.sha1(tokens.tobytes()).hexdigest(), sinks, tail, seq_id, ctx.fill_mode, ctx.fill_split,
                ctx.route, ctx.n_batch, ctx.n_ubatch)

    def restore(self, ctx, key: tuple) -> Kept | None:
        """Roll the context back to the kept head of `key`; None when it holds another one."""
        kept = self._kept.get(ctx)
        seq_id = key[3]
        if kept is None or kept.key != key or ctx.seq_pos_max(seq_id) < kept.stop - 1:
            return None
        ctx.seq_rm(seq_id, kept.stop, -1)
        for (il, part), rows in kept.rows.items():
            ctx.state_set(il, part, rows, 0, kept.stop, seq_id)
        return kept

    def keep(self, ctx, key: tuple, stop: int, fill_range: tuple[int, int], n_filled: int, n_full: int) -> None:
        seq_id = key[3]
        rows = {(il, p): ctx.state_get(il, p, 0, stop, seq_id) for il in range(ctx.model.n_layer) for p in ("k", "v")}
        self._kept[ctx] = Kept(key, stop, fill_range, n_filled, n_full, rows)

    def forget(self, ctx) -> None:
        self._kept.pop(ctx, None)
