"""RULER's word lists: wonderwords' nouns, adjectives and verbs (PyPI `wonderwords`, MIT).

NIAH keys are `adjective-noun` pairs; common-words extraction draws from all three lists.
Both are sorted, and the common words shuffled with RULER's fixed seed, so every machine
draws from the same lists in the same order.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources

import numpy as np

FILES = {"noun": "nounlist.txt", "adjective": "adjectivelist.txt", "verb": "verblist.txt"}
SHUFFLE_SEED = 42  # RULER's random_seed


@lru_cache(maxsize=None)
def category(name: str) -> tuple[str, ...]:
    text = (resources.files("wonderwords.assets") / FILES[name]).read_text(encoding="utf-8")
    return tuple(sorted({w.strip() for w in text.splitlines() if w.strip()}))


def random_key(rng: np.random.Generator) -> str:
    """A uniform draw from every adjective-noun pair (RULER's WORDS for needle keys), without
    building the 6 million pairs."""
    adj, noun = category("adjective"), category("noun")
    return f"{adj[rng.integers(len(adj))]}-{noun[rng.integers(len(noun))]}"


@lru_cache(maxsize=1)
def common_pool() -> tuple[str, ...]:
    """Nouns, adjectives and verbs without repeats, sorted, then shuffled with RULER's seed."""
    pool = sorted(set(category("noun")) | set(category("adjective")) | set(category("verb")))
    order = np.random.default_rng(SHUFFLE_SEED).permutation(len(pool))
    return tuple(pool[i] for i in order)
