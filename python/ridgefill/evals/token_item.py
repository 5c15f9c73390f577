"""What every evaluation item shares: a prompt's tokens (int32), and its JSON form (tokens as a list)."""

from __future__ import annotations

from dataclasses import asdict

import numpy as np


class TokenItem:
    """Base of the item dataclasses. `ROW_PAIRS` names fields holding one [first, end) pair of rows,
    `ROW_PAIR_LISTS` fields holding a list of them: tuples in Python, lists in JSON."""

    ROW_PAIRS: tuple[str, ...] = ()
    ROW_PAIR_LISTS: tuple[str, ...] = ()

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["tokens"] = [int(t) for t in self.tokens]
        for f in self.ROW_PAIRS:
            d[f] = list(d[f])
        for f in self.ROW_PAIR_LISTS:
            d[f] = [list(p) for p in d[f]]
        return d

    @classmethod
    def from_dict(cls, d: dict):
        d = dict(d)
        d["tokens"] = np.asarray(d["tokens"], dtype=np.int32)
        for f in cls.ROW_PAIRS:
            d[f] = tuple(d[f])
        for f in cls.ROW_PAIR_LISTS:
            if f in d:  # a list with a default may be missing from older files
                d[f] = [tuple(p) for p in d[f]]
        return cls(**d)
