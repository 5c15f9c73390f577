"""RULER's needle-in-a-haystack tasks (niah_single_*, niah_multikey_*, multivalue, multiquery).

As RULER's prepare_niah: num_k keys, num_v values each, one needle per value, shuffled; in an
essay haystack the needles go in at sentence boundaries at depths drawn from 40 evenly spaced
percentages; in the noise ("repeat") and needle haystacks at random places among the repeated
sentences or distractor needles; num_q of the keys are asked. The essay is the project's
held-out prose (RULER's Paul Graham essays do not install offline).
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from . import words
from .. import haystack
from .prompt import Piece, frame, joined
from ...sources import corpus

NOISE = haystack.NOISE.strip()  # RULER's "repeat" haystack sentence
NEEDLE = "One of the special magic {type_needle_v} for {key} is: {value}."
TEMPLATE = ("Some special magic {type_needle_v} are hidden within the following text. Make sure to memorize it. "
            "I will quiz you about the {type_needle_v} afterwards.\n{context}\nWhat are all the special magic "
            "{type_needle_v} for {query} mentioned in the provided text?")
ANSWER_PREFIX = " The special magic {type_needle_v} for {query} mentioned in the provided text are"
ASKED_PREFIX = " The special magic {type_needle_v} asked for above are"  # the question before the context
DEPTHS = np.round(np.linspace(0, 100, num=40, endpoint=True)).astype(int)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])")


@dataclass(frozen=True)
class Niah:
    haystack: str  # repeat | essay | needle
    type_k: str = "words"  # words | uuids
    type_v: str = "numbers"  # numbers | uuids
    num_k: int = 1
    num_v: int = 1
    num_q: int = 1


def random_value(rng: np.random.Generator, kind: str) -> str:
    if kind == "numbers":
        return str(rng.integers(10**6, 10**7))  # RULER's 7 digits
    if kind == "uuids":
        return str(uuid.UUID(bytes=rng.bytes(16), version=4))
    return words.random_key(rng)


@lru_cache(maxsize=1)
def essay_sentences() -> tuple[str, ...]:
    """The evaluation documents (never calibration text), whitespace-normalised, as sentences."""
    out: list[str] = []
    for doc in corpus.evaluation_documents():
        out += [s for s in _SENTENCE_END.split(" ".join(doc.text.split())) if s]
    return tuple(out)


def template(cfg: Niah, where: str = "end") -> tuple[str, str, str]:
    """(text before the context, text after it, type_needle_v), singular where one value is asked (as RULER);
    `where`: the question's place (prompt.frame)."""
    texts, kind = [TEMPLATE, ANSWER_PREFIX, ASKED_PREFIX], cfg.type_v
    if cfg.num_q * cfg.num_v == 1:
        for a, b in (("Some", "A"), ("are all", "is"), ("are", "is"), ("answers", "answer")):
            texts = [t.replace(a, b) for t in texts]
        kind = kind[:-1]
    return *frame(*texts, where), kind


def pieces(cfg: Niah, seed, count: int, where: str = "end") -> tuple[list[Piece], list[str]]:
    """(prompt pieces, answers) with `count` haystack units (sentences or distractors)."""
    rng = np.random.default_rng(seed)
    num_k = max(cfg.num_k, cfg.num_q)
    keys = [random_value(rng, cfg.type_k) for _ in range(num_k)]
    values = [[random_value(rng, cfg.type_v) for _ in range(cfg.num_v)] for _ in keys]
    needles = [(k, NEEDLE.format(type_needle_v=cfg.type_v, key=k, value=v)) for k, vs in zip(keys, values) for v in vs]
    needles = [needles[i] for i in rng.permutation(len(needles))]
    asked = [keys[i] for i in rng.choice(num_k, cfg.num_q, replace=False)]
    context = _context(cfg, rng, count, needles, set(asked))
    query = ", ".join(asked[:-1]) + ", and " + asked[-1] if len(asked) > 1 else asked[0]
    head, tail, kind = template(cfg, where)
    out = [Piece(head.format(type_needle_v=kind, query=query))] + context + \
        [Piece(tail.format(type_needle_v=kind, query=query))]
    return out, [v for k in asked for v in values[keys.index(k)]]


def _context(cfg: Niah, rng, count: int, needles, asked: set[str]) -> list[Piece]:
    if cfg.haystack == "essay":
        return _essay(rng, count, needles, asked)
    if cfg.haystack == "repeat":
        units = [(None, NOISE)] * count
    else:
        units = [(None, NEEDLE.format(type_needle_v=cfg.type_v, key=random_value(rng, cfg.type_k),
                                      value=random_value(rng, cfg.type_v))) for _ in range(count)]
    for at, needle in zip(sorted(rng.choice(count, len(needles), replace=False), reverse=True), needles):
        units.insert(int(at), needle)
    return joined([t for _, t in units], "\n", lambda i: units[i][0] in asked)


def _essay(rng, count: int, needles, asked: set[str]) -> list[Piece]:
    sents = essay_sentences()
    start = int(rng.integers(len(sents)))
    doc = [sents[(start + i) % len(sents)] for i in range(count)]
    cuts = sorted(int(count * d / 100) for d in rng.choice(DEPTHS, len(needles), replace=False))
    units, prev = [], 0
    for cut, (key, text) in zip(cuts, needles):
        units += [(None, s) for s in doc[prev:cut]] + [(key, text)]
        prev = cut
    units += [(None, s) for s in doc[prev:]]
    return joined([t for _, t in units], " ", lambda i: units[i][0] in asked)
