"""One measurement of one item under one fill variant: the record stored per item.

The context's fill mode is set by the caller; both measurements run prefill.run_head,
so a variant's hook (a splice) runs after the head and before anything is scored.
"""

from __future__ import annotations

import time

import numpy as np

from ..runtime import fill_range
from . import loss, prefill
from .loss import LossItem
from .needle import NeedleItem, string_match_all
from .ruler import RulerItem, tasks as ruler_tasks
from .prefill import Hook


def needle_record(ctx, item: NeedleItem, sinks: int, tail: int, hook: Hook | None = None) -> dict:
    """Greedy answer after a split prefill, scored with string-match-all (0..100)."""
    t0 = time.perf_counter()
    head = prefill.run_head(ctx, item.tokens, sinks, tail, hook=hook, evidence=item.needles or [item.needle_rows])
    output = ctx.model.detokenize(prefill.greedy(head, item.n_new))
    return {
        **head.notes,
        "score": string_match_all(output, item.answers),
        "output": output,
        "answers": item.answers,
        "n_filled": head.n_filled,
        "fill_range": list(head.fill_range),
        "seconds": round(time.perf_counter() - t0, 3),
    }


def ruler_record(ctx, item: RulerItem, sinks: int, tail: int, hook: Hook | None = None) -> dict:
    """Greedy answer (RULER's generation budget) after a split prefill, scored with the task's RULER
    metric (0..100); `evidence_filled` is the share of the answers' rows in [sinks, N - tail), the
    rows a fill mode predicts (the same for every mode, so subsets pair)."""
    t0 = time.perf_counter()
    head = prefill.run_head(ctx, item.tokens, sinks, tail, hook=hook, evidence=item.evidence)
    output = ctx.model.detokenize(prefill.greedy(head, item.n_new))
    return {
        **head.notes,
        "score": ruler_tasks.score(item, output),
        "output": output,
        "answers": item.answers,
        "evidence_filled": round(item.evidence_in(*fill_range(item.prompt_tokens, sinks, tail)), 4),
        "prompt_tokens": item.prompt_tokens,
        "n_filled": head.n_filled,
        "fill_range": list(head.fill_range),
        "seconds": round(time.perf_counter() - t0, 3),
    }


def loss_record(ctx, item: LossItem, sinks: int, tail: int, distant: list[int] | None, window: int,
                hook: Hook | None = None) -> dict:
    """Tail-token losses after a split prefill.

    `distant` (positions of distant-dependent tokens) comes from the exact record; when
    it is None this is the exact record, and the positions are computed here (the context
    must then be in exact mode).
    """
    t0 = time.perf_counter()
    head = prefill.run_head(ctx, item.tokens, sinks, tail, hook=hook)
    lp = prefill.tail_logprobs(head)
    rec = {**head.notes, "n_filled": head.n_filled, "fill_range": list(head.fill_range)}
    if distant is None:
        distant = [int(p) for p in loss.reference(ctx, item, tail, window, lp)]
        rec.update(distant=distant, window=window)
    mask = np.isin(loss.scored_positions(item.n_tokens, tail), distant)
    rec.update(loss.summary(lp, mask))
    rec["seconds"] = round(time.perf_counter() - t0, 3)
    return rec
