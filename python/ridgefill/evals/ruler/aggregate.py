"""RULER's aggregation tasks: common-words extraction (cwe) and frequent-words extraction (fwe).

cwe (common_words_extraction.py): a numbered list in which 10 words appear 30 times and the
others 3 times (6 and 1 below 4096 tokens), after one worked example of 40 words (20); the
answer is the 10 common words. fwe (freq_words_extraction.py): coded 6-letter words drawn
with Zipf counts (alpha 2) from a vocabulary of target // 50 words whose top word is '...'
(noise); the answer is the next three. Every occurrence of an answer word is evidence.
"""

from __future__ import annotations

import math
import string

import numpy as np

from . import words
from .prompt import Piece, frame, joined

CWE_TEMPLATE = ("Below is a numbered list of words. In these words, some appear more often than others. Memorize the "
                "ones that appear most often.\n{context}\nQuestion: What are the 10 most common words in the above "
                "list?")
CWE_PREFIX = " Answer: The top 10 words that appear most often in the list are:"
NUM_CW = 10
FWE_TEMPLATE = ("Read the following coded text and track the frequency of each coded word. Find the three most "
                "frequently appeared coded words. {context}\nQuestion: Do not provide any explanation. Please ignore "
                "the dots '....'. What are the three most frequently appeared words in the above coded text?")
FWE_PREFIX = " Answer: According to the coded text above, the three most frequently appeared words are:"
ALPHA, CODED_LEN = 2.0, 6
ZETA_ALPHA = math.pi ** 2 / 6  # zeta(2)


def cwe_repeats(target: int) -> tuple[tuple[int, int, int], tuple[int, int]]:
    """((example words, common, uncommon repeats), (common, uncommon repeats)) as RULER sets them."""
    return ((20, 3, 1), (6, 1)) if target < 4096 else ((40, 10, 3), (30, 3))


def _word_list(rng, n_words: int, common: int, uncommon: int) -> tuple[list[str], list[str]]:
    pool = words.common_pool()
    picked = [pool[i] for i in rng.choice(len(pool), min(n_words, len(pool)), replace=False)]
    top = picked[:NUM_CW]
    listed = top * common + picked[NUM_CW:] * uncommon
    return [listed[i] for i in rng.permutation(len(listed))], top


def _numbered(listed: list[str]) -> list[str]:
    return [f"{i + 1}. {w}" for i, w in enumerate(listed)]


def cwe_pieces(seed, target: int, count: int, where: str = "end") -> tuple[list[Piece], list[str]]:
    """(prompt pieces, the 10 common words) for a list drawn from `count` distinct words."""
    rng = np.random.default_rng(seed)
    (n_ex, c_ex, u_ex), (c, u) = cwe_repeats(target)
    ex_list, ex_top = _word_list(rng, n_ex, c_ex, u_ex)
    listed, top = _word_list(rng, max(count, NUM_CW + 1), c, u)
    head, tail = frame(CWE_TEMPLATE, CWE_PREFIX, CWE_PREFIX, where)  # the question names no row: same prefix
    example = head + " ".join(_numbered(ex_list)) + tail + " " + " ".join(_numbered(ex_top)) + "\n" + head
    common = set(top)
    context = joined(_numbered(listed), " ", lambda i: listed[i] in common)
    return [Piece(example)] + context + [Piece(tail)], top


def fwe_vocab(seed, target: int) -> list[str]:
    """target // 50 distinct coded words in a seeded order, the first replaced by '...' (noise)."""
    rng = np.random.default_rng([*seed, 1])
    size = max(target // 50, 4)
    vocab: set[str] = set()
    while len(vocab) < size:
        vocab.add("".join(rng.choice(list(string.ascii_lowercase), CODED_LEN)))
    out = sorted(vocab)
    out = [out[i] for i in rng.permutation(len(out))]
    out[0] = "..."
    return out


def fwe_pieces(seed, vocab: list[str], count: int, where: str = "end") -> tuple[list[Piece], list[str]]:
    """(prompt pieces, the three most frequent coded words) for `count` words of Zipf text."""
    rng = np.random.default_rng([*seed, 2])
    k = np.arange(1, len(vocab) + 1)
    counts = (count * k ** -ALPHA / ZETA_ALPHA).astype(int)
    text = [w for w, n in zip(vocab, counts) for _ in range(n)]
    text = [text[i] for i in rng.permutation(len(text))]
    answer = vocab[1:4]
    head, tail = frame(FWE_TEMPLATE, FWE_PREFIX, FWE_PREFIX, where)
    wanted = set(answer)
    context = [Piece(" " + w, w in wanted) for w in text]
    return [Piece(head.rstrip(" "))] + context + [Piece(tail)], answer
