"""Prompts as pieces of text, tokenized piece by piece, sized to a token budget.

A task builds its prompt as a list of Pieces; evidence pieces hold what an answer is read
from. Tokenizing each piece on its own (the first with the model's BOS) gives every piece's
rows exactly; pieces split where RULER's text joins sentences or words, before a space or a
newline, where a BPE pre-tokenizer splits anyway.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ...errors import InputError


@dataclass(frozen=True)
class Piece:
    text: str
    evidence: bool = False


class Tokens:
    """The model's tokenization of each distinct piece, cached (haystacks repeat their pieces)."""

    def __init__(self, model):
        self.model = model
        self._cache: dict[tuple[str, bool], np.ndarray] = {}

    def of(self, text: str, first: bool = False) -> np.ndarray:
        key = (text, first)
        if key not in self._cache:
            self._cache[key] = np.asarray(self.model.tokenize(text, add_special=first), dtype=np.int32)
        return self._cache[key]

    def count(self, pieces: list[Piece]) -> int:
        return sum(len(self.of(p.text, i == 0)) for i, p in enumerate(pieces))

    def assemble(self, pieces: list[Piece]) -> tuple[np.ndarray, list[tuple[int, int]]]:
        """(tokens, [first, end) rows of each evidence piece)."""
        parts, spans, row = [], [], 0
        for i, p in enumerate(pieces):
            toks = self.of(p.text, i == 0)
            if p.evidence:
                spans.append((row, row + len(toks)))
            parts.append(toks)
            row += len(toks)
        return np.concatenate(parts).astype(np.int32), spans


QUESTION_PLACES = ("end", "start")  # RULER's: the question after the context; or before it


def frame(template: str, prefix: str, asked: str, where: str = "end") -> tuple[str, str]:
    """(text before the context, text after it) of a RULER template whose `{context}` is followed by the
    question and then the answer prefix `prefix`. where="start": the question moves before the context (its
    "above" read as "below") and the prompt ends with `asked`, an answer prefix that does not name what the
    question asks for, so nothing after the context says which rows hold the answer."""
    head, tail = (template + prefix).split("{context}")
    if where == "end":
        return head, tail
    if where != "start":
        raise InputError(f"question place {where!r}: one of {', '.join(QUESTION_PLACES)}")
    question = tail[: len(tail) - len(prefix)].strip()
    question = question.replace("the above ", "the following ").replace(" above", " below")
    return head + question + "\n", "\n" + asked.strip()


def joined(texts: list[str], sep: str, evidence: Callable[[int], bool] = lambda i: False) -> list[Piece]:
    """`sep.join(texts)` as pieces: each text after the first carries the separator in front."""
    return [Piece(t if i == 0 else sep + t, evidence(i)) for i, t in enumerate(texts)]


def fit(tokens: Tokens, make: Callable[[int], list[Piece]], budget: int, what: str, start: int = 1,
        most: int | None = None) -> tuple[int, list[Piece]]:
    """(count, pieces) with the largest haystack count whose prompt has at most `budget` tokens.

    make(count) must be deterministic; lengths grow with count. Doubling finds a count that is
    too long, then bisection the largest one that fits.
    """
    lo, pieces = start, make(start)
    if tokens.count(pieces) > budget:
        raise InputError(f"{what}: even the smallest prompt ({tokens.count(pieces)} tokens) exceeds "
                         f"{budget} tokens; ask for a longer target length")
    hi = lo * 2
    while (most is None or hi <= most) and tokens.count(make(hi)) <= budget:
        lo, hi = hi, hi * 2
    hi = min(hi, most + 1) if most is not None else hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if tokens.count(make(mid)) <= budget:
            lo = mid
        else:
            hi = mid
    return lo, make(lo)
