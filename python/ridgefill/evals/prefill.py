"""Split prefill as the evaluations run it: head rows, a hook, then the tail.

A prompt of N rows with sinks k and tail T is decoded in two phases:

1. the head, rows [0, N-T): no outputs; in a fill mode rows [k, N-T) take the fill path
   (split_prefill.prefill_head, through Context.prefill_head);
2. the tail, rows [N-T, N): the full model, with outputs where the metric needs them:
   every row's next-token log-probability (tail_logprobs) or a greedy answer (greedy).

Between the two a hook may read or overwrite the cache (a splice: replace one component
of the filled rows with the exact one), so every tail row, and every score, sees it.
Exact mode runs through the same two phases with an empty fill range. A fill head repeated on the same
context (the next variant of an item) starts from the rows the first one left (head_cache.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from ..runtime import Context
from ..errors import InputError
from .head_cache import HeadCache


@dataclass
class Head:
    """State after the head phase; what a hook gets."""

    ctx: Context
    tokens: np.ndarray
    stop: int  # first tail row; the head was rows [0, stop)
    fill_range: tuple[int, int]  # rows that took the fill path, [lo, hi); (0, 0) when none
    n_filled: int
    n_full: int
    seq_id: int = 0
    evidence: list[tuple[int, int]] | None = None  # [first, end) rows the item's answers are read from
    notes: dict = field(default_factory=dict)  # what a hook reports into the item's record
    tail_from: int | None = None  # a hook that decoded the tail's first rows itself: where the tail goes on


Hook = Callable[[Head], None]
HEADS = HeadCache()  # a fill's head, kept for the next variant of the same item


def run_head(ctx: Context, tokens, sinks: int, tail: int, seq_id: int = 0, hook: Hook | None = None,
             evidence: list[tuple[int, int]] | None = None) -> Head:
    """Clear `seq_id` and decode the head rows without outputs; then call `hook`."""
    tokens = np.asarray(tokens, dtype=np.int32)
    if len(tokens) > ctx.n_ctx:
        raise InputError(f"{len(tokens)} tokens do not fit n_ctx={ctx.n_ctx}")
    key = HEADS.key_of(ctx, tokens, sinks, tail, seq_id)
    # a selecting fill keeps its filled rows' split states for the tail's probe: its head is decoded, not restored
    selecting = ctx.select > 0
    kept = HEADS.restore(ctx, key) if HEADS.usable(ctx) and not selecting else None
    if kept is not None:
        head = Head(ctx, tokens, kept.stop, kept.fill_range, kept.n_filled, kept.n_full, seq_id, evidence)
    else:
        HEADS.forget(ctx)
        ctx.seq_rm(seq_id)
        res = ctx.prefill_head(tokens, sinks=sinks, tail=tail, seq_id=seq_id, keep_range=selecting)
        head = Head(ctx, tokens, res.n_tokens, res.fill_range, res.n_filled, res.n_full, seq_id, evidence)
        if HEADS.usable(ctx) and head.stop > 0 and not selecting:
            HEADS.keep(ctx, key, head.stop, head.fill_range, head.n_filled, head.n_full)
    if hook is not None:
        hook(head)
    return head


def tail_logprobs(head: Head) -> np.ndarray:
    """log p(tokens[p] | tokens[:p]) for p in [stop+1, N): every token a tail row predicts."""
    ctx, toks, seq = head.ctx, head.tokens, head.seq_id
    if head.tail_from is not None:
        raise InputError("this variant decodes the tail's first rows in its hook, without outputs: it has no "
                         "log-probabilities of them to score (use it with answers: needles, RULER)")
    rows = np.arange(head.stop, len(toks) - 1)
    out = np.empty(len(rows), dtype=np.float64)
    for start, n in ctx.decode_chunks(toks[rows], head.stop, seq, "all"):
        out[start : start + n] = ctx.token_logprobs(toks[rows[start : start + n] + 1])
    _note_selected(head)
    return out  # the last row predicts nothing inside the prompt and is not decoded


def greedy(head: Head, n_new: int, stop: Sequence[int] = ()) -> list[int]:
    """Decode the tail rows, then up to n_new tokens greedily (argmax)."""
    ctx, toks, seq = head.ctx, head.tokens, head.seq_id
    start = head.stop if head.tail_from is None else head.tail_from
    for _ in ctx.decode_chunks(toks[start:], start, seq, "last"):
        pass
    _note_selected(head)
    return ctx.greedy_continue(ctx.logits()[0], len(toks), n_new, seq_id=seq, stop=stop)


def _note_selected(head: Head) -> None:
    """The rows the fork's probe selected in the tail just decoded (Context.set_select), into the record."""
    if head.ctx.select > 0:
        head.notes["n_selected"] = int(head.ctx.selected_count)


def context_hook(fn: Callable[[Context], None]) -> Hook:
    """A hook from a callable of the context alone (Context.prefill's before_tail style)."""
    return lambda head: fn(head.ctx)
