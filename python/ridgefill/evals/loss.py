"""Loss on tokens that depend on distant context (LongPPL's key tokens).

Items are the first N tokens of held-out documents (corpus.evaluation_documents(): every
fifth SOTU speech, never calibration text). The scored tokens are those a tail row
predicts, positions [N-T+1, N): their rows run the full model and read the K/V of the
filled rows. The exact model scores each of them twice, with the whole prefix ("full")
and with only a short window of preceding tokens ("short"); a token is distant-dependent
when loss_short - loss_full >= 2 nats and loss_full <= 2. Each mode then reports its
mean loss on those tokens and on all scored tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..sources import corpus
from ..runtime import head_stop
from ..errors import InputError
from .token_item import TokenItem

MIN_GAIN = 2.0  # loss_short - loss_full, nats
MAX_FULL = 2.0  # loss_full, nats


@dataclass
class LossItem(TokenItem):
    id: str
    doc: str
    tokens: np.ndarray  # int32, the document's first N tokens (BOS first where the vocab adds one)
    cluster: str = ""


def generate(model, n_tokens: int, n_items: int, seed: int) -> list[LossItem]:
    """Up to n_items documents of at least n_tokens tokens, in a seeded order."""
    docs = corpus.evaluation_documents()
    order = np.random.default_rng([seed, n_tokens]).permutation(len(docs))
    items: list[LossItem] = []
    for i in order:
        if len(items) == n_items:
            break
        toks = model.tokenize(docs[i].text, add_special=True)
        if len(toks) >= n_tokens:
            name = docs[i].name
            items.append(LossItem(f"loss/N{n_tokens}/{name}", name, toks[:n_tokens].astype(np.int32), name))
    return items


def scored_positions(n_tokens: int, tail: int) -> np.ndarray:
    """Positions whose token a tail row predicts (prefill.tail_logprobs' order)."""
    return np.arange(head_stop(n_tokens, tail) + 1, n_tokens)


def short_logprobs(ctx, tokens, first: int, window: int, bos: int | None) -> np.ndarray:
    """log p(tokens[p]) for p in [first, N), each seeing between window/2 and window preceding tokens.

    Sliding windows with stride window/2 (and BOS in front when the window starts later
    than the document); `ctx` must be in exact mode.
    """
    if ctx.fill_mode != "exact":
        raise InputError("short-window scoring needs an exact-mode context")
    tokens = np.asarray(tokens, dtype=np.int32)
    stride = max(1, window // 2)
    out = []
    for c in range(first, len(tokens), stride):
        start = max(0, c - (window - stride))
        prefix = tokens[start:c]
        if start > 0 and bos is not None:
            prefix = np.concatenate([[bos], prefix]).astype(np.int32)
        out.append(ctx.continuation_logprobs(prefix, tokens[c : c + stride]))
    return np.concatenate(out) if out else np.empty(0)


def distant_mask(full: np.ndarray, short: np.ndarray) -> np.ndarray:
    """Tokens whose loss drops by >= MIN_GAIN with the full context and ends <= MAX_FULL."""
    loss_full, loss_short = -np.asarray(full), -np.asarray(short)
    return (loss_short - loss_full >= MIN_GAIN) & (loss_full <= MAX_FULL)


def summary(logprobs: np.ndarray, distant: np.ndarray) -> dict:
    """Mean losses of one document under one mode; loss_distant is None without key tokens."""
    loss = -np.asarray(logprobs)
    return {
        "loss_all": float(loss.mean()) if len(loss) else None,
        "loss_distant": float(loss[distant].mean()) if distant.any() else None,
        "n_scored": int(len(loss)),
        "n_distant": int(distant.sum()),
    }


def reference(ctx, item: LossItem, tail: int, window: int, full: np.ndarray) -> np.ndarray:
    """Distant-dependent positions of `item`, from the exact model's full-context log-probs."""
    pos = scored_positions(item.n_tokens, tail)
    bos = ctx.model.bos if ctx.model.add_bos else None
    short = short_logprobs(ctx, item.tokens, int(pos[0]), window, bos) if len(pos) else np.empty(0)
    return pos[distant_mask(full, short)]
