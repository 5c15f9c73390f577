"""Calibration windows: which tokens a capture runs, drawn across many documents and kinds.

A window is BOS (where the vocab adds one) followed by pieces of documents packed to
`window` rows, as pretraining packs text: each piece is a contiguous slice of one document,
of a length drawn log-uniformly in [min_piece, window] (the last piece of a window takes
what is left), from a document drawn by kind
(corpus.KIND_WEIGHTS) and then in a shuffled cycle over that kind's documents, at a uniform
offset. So a token budget sees many documents of every kind, and rows at every position of
the window (maps are used at every position of a long prompt), instead of a few whole
documents in corpus order.

The plan depends only on the documents, the tokenizer and the seed: every shard of a
sharded capture enumerates the same windows and processes its own (calibrate.accumulate).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterator

import numpy as np

from ..sources.corpus import KIND_WEIGHTS, Document

SEPARATOR = "\n\n"  # between two pieces of a window


@dataclass
class Window:
    tokens: np.ndarray  # int32, BOS first where the model adds one
    documents: list[str] = field(default_factory=list)  # names of the documents its pieces came from


class _Kind:
    """One kind's documents in a seeded cycle: each is drawn once before any is drawn again."""

    def __init__(self, docs: list[Document], rng: np.random.Generator):
        self.docs, self.rng, self.order = docs, rng, []

    def next(self) -> Document:
        if not self.order:
            self.order = list(self.rng.permutation(len(self.docs)))
        return self.docs[self.order.pop()]


def plan(docs: list[Document], tokenize: Callable[[str], np.ndarray], bos: int | None, window: int, budget: int,
         min_piece: int, seed: int) -> Iterator[Window]:
    """Windows of at most `window` rows and `budget` tokens in all; the last one may be shorter."""
    rng = np.random.default_rng(seed)
    docs = [d for d in docs if d.text.strip()]
    by_kind: dict[str, list[Document]] = {}
    for d in docs:
        by_kind.setdefault(d.kind, []).append(d)
    kinds = list(by_kind)
    weights = np.array([KIND_WEIGHTS.get(k, 1.0) for k in kinds])
    cycles = {k: _Kind(by_kind[k], np.random.default_rng([seed, i])) for i, k in enumerate(kinds)}
    cache: dict[str, np.ndarray] = {}
    head = [] if bos is None else [bos]

    def body(text: str) -> np.ndarray:
        toks = np.asarray(tokenize(text), dtype=np.int32)
        return toks[1:] if bos is not None and len(toks) and toks[0] == bos else toks

    def tokens_of(doc: Document) -> np.ndarray:
        if doc.name not in cache:
            cache[doc.name] = body(doc.text)
        return cache[doc.name]

    sep = body(SEPARATOR)

    left = budget
    while left > len(head):  # a small budget still gets one short window
        size = min(window, left)
        parts, names, have = [np.asarray(head, dtype=np.int32)], [], len(head)
        while have < size:
            gap = len(sep) if names else 0
            doc = cycles[kinds[rng.choice(len(kinds), p=weights / weights.sum())]].next()
            toks = tokens_of(doc)
            want = int(np.exp(rng.uniform(np.log(min_piece), np.log(max(window, min_piece + 1)))))
            n = min(want, size - have - gap, len(toks))
            if n <= 0:
                break
            start = int(rng.integers(0, len(toks) - n + 1))
            parts += [sep, toks[start : start + n]] if gap else [toks[start : start + n]]
            names.append(doc.name)
            have += gap + n
        w = np.concatenate(parts).astype(np.int32)
        left -= len(w)
        yield Window(w, names)
