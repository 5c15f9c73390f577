"""RULER-style needle-in-a-haystack items with token-exact needle placement.

The haystack is RULER's noise sentence repeated (or prose documents); the needle's row
range is known exactly, so it can be placed inside the filled region [k, N-T).
Scoring is RULER's string-match-all: the share of reference values found in the output.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

NOISE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
INTRO = ("Some special magic numbers are hidden within the following text. Make sure to memorize it. "
         "I will quiz you about the numbers afterwards.\n")
NEEDLE = "One of the special magic numbers for {key} is: {value}. "
QUESTION = ("\nWhat is the special magic number for {key} mentioned in the provided text? "
            "The special magic number for {key} mentioned in the provided text is")

_ADJ = ("amber", "brisk", "calm", "dusty", "eager", "faint", "gentle", "hollow", "icy", "jolly", "keen", "lucid",
        "mellow", "nimble", "odd", "placid", "quiet", "rustic", "silent", "tidy", "vivid", "witty", "young", "zesty")
_NOUN = ("anchor", "badger", "candle", "dolphin", "engine", "falcon", "garden", "harbor", "island", "jacket", "kettle",
         "lantern", "meadow", "needle", "orchard", "pepper", "quarry", "river", "saddle", "tunnel", "violin", "walnut")


@dataclass
class NeedleItem:
    tokens: np.ndarray  # the whole prompt
    answers: list[str]
    key: str
    needle_rows: tuple[int, int]  # [first, last) rows of the needle sentence
    meta: dict = field(default_factory=dict)

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)


def random_key(rng: np.random.Generator) -> str:
    return f"{rng.choice(_ADJ)}-{rng.choice(_NOUN)}"


def single_needle(model, n_tokens: int, depth: float, seed: int, haystack: str = NOISE) -> NeedleItem:
    """One needle whose first row sits at `depth` (0..1) of the haystack, prompt of ~n_tokens rows."""
    rng = np.random.default_rng(seed)
    key, value = random_key(rng), str(rng.integers(1_000_000, 10_000_000))
    intro = model.tokenize(INTRO, add_special=True)
    needle = model.tokenize(NEEDLE.format(key=key, value=value), add_special=False)
    question = model.tokenize(QUESTION.format(key=key), add_special=False)
    hay_len = n_tokens - len(intro) - len(needle) - len(question)
    if hay_len < 16:
        raise ValueError(f"n_tokens={n_tokens} leaves no room for a haystack")
    hay = _haystack_tokens(model, haystack, hay_len)
    at = int(round(depth * hay_len))
    tokens = np.concatenate([intro, hay[:at], needle, hay[at:], question]).astype(np.int32)
    first = len(intro) + at
    return NeedleItem(tokens, [value], key, (first, first + len(needle)), {"depth": depth, "seed": seed})


def _haystack_tokens(model, text: str, n: int) -> np.ndarray:
    unit = model.tokenize(text, add_special=False)
    reps = -(-n // len(unit))
    return np.tile(unit, reps)[:n]


def string_match_all(output: str, answers: list[str]) -> float:
    """RULER's score for one item, 0..100."""
    out = output.lower()
    return 100.0 * sum(a.lower() in out for a in answers) / len(answers)
