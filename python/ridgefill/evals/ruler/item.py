"""One RULER item: the prompt's tokens, the answers, and the rows the answers come from."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..token_item import TokenItem


@dataclass
class RulerItem(TokenItem):
    tokens: np.ndarray  # the whole prompt (template, context, question and answer prefix), int32
    answers: list[str]  # what the output must contain (RULER's "outputs")
    task: str  # RULER's name, e.g. "niah_multikey_2"
    target: int  # RULER's max_seq_length: prompt + the task's generation budget fit in it
    evidence: list[tuple[int, int]]  # [first, end) rows of every piece an answer is read from
    n_new: int  # RULER's tokens_to_generate
    id: str = ""
    cluster: str = ""  # items sharing a source document resample together
    meta: dict = field(default_factory=dict)

    ROW_PAIR_LISTS = ("evidence",)

    @property
    def n_tokens(self) -> int:
        """The nominal length (the target): what a sweep point and a report's N name."""
        return self.target

    @property
    def prompt_tokens(self) -> int:
        return len(self.tokens)

    def evidence_in(self, lo: int, hi: int) -> float:
        """Share of the evidence rows inside [lo, hi) (1.0: all of it; no evidence: 0.0)."""
        total = sum(b - a for a, b in self.evidence)
        inside = sum(max(0, min(b, hi) - max(a, lo)) for a, b in self.evidence)
        return inside / total if total else 0.0

