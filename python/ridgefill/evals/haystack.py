"""Haystack tokens for needle items: RULER's noise sentences or held-out prose.

Both are built in tokens, so a prompt's length and every needle's rows are exact. Needles
are inserted only after a sentence-ending token, so the text around them reads naturally.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..sources import corpus
from ..errors import InputError

NOISE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
KINDS = ("noise", "prose")
_ENDS = (".", "!", "?", '."', ".'", ":")


@dataclass
class Haystack:
    tokens: np.ndarray  # int32, exactly the length asked for
    source: str  # "noise", or the first document's name (the item's cluster)


def noise(model, n: int) -> Haystack:
    unit = model.tokenize(NOISE, add_special=False)
    return Haystack(np.tile(unit, -(-n // len(unit)))[:n].astype(np.int32), "noise")


def prose(model, n: int, rng: np.random.Generator) -> Haystack:
    """Evaluation documents (never calibration text) from a seeded start, concatenated."""
    docs = corpus.evaluation_documents()
    first = int(rng.integers(len(docs)))
    parts, have, i = [], 0, first
    while have < n:
        toks = model.tokenize(docs[i % len(docs)].text.strip() + "\n\n", add_special=False)
        parts.append(toks)
        have += len(toks)
        i += 1
        if i - first > len(docs):
            raise InputError(f"the evaluation documents hold fewer than {n} tokens")
    return Haystack(np.concatenate(parts)[:n].astype(np.int32), docs[first].name)


def make(model, kind: str, n: int, rng: np.random.Generator) -> Haystack:
    if kind == "noise":
        return noise(model, n)
    if kind == "prose":
        return prose(model, n, rng)
    raise InputError(f"unknown haystack {kind!r} (one of {', '.join(KINDS)})")


def sentence_breaks(model, tokens: np.ndarray) -> np.ndarray:
    """Indices b (0..n) where inserting before tokens[b] follows a sentence end (0 included)."""
    ends = {int(t) for t in np.unique(tokens) if _is_end(model.detokenize([int(t)]))}
    after = np.flatnonzero(np.isin(tokens, list(ends))) + 1 if ends else np.empty(0, np.int64)
    return np.concatenate([[0], after]).astype(np.int64)


def _is_end(piece: str) -> bool:
    return piece.endswith("\n") or piece.rstrip(" ").endswith(_ENDS)
