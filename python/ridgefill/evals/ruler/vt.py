"""RULER's variable tracking (vt): one chain of four hops in the noise haystack, after one
worked example (RULER's few-shot), as variable_tracking.py builds it.

The chain is `VAR A = 12345`, `VAR B = VAR A `, ... inserted in order at random places among
repeated noise sentences joined by spaces; the answer is every variable of the chain. The
example is a chain of 3-letter names sized to RULER's 500 tokens, answered in full.
"""

from __future__ import annotations

import string

import numpy as np

from .prompt import Piece, Tokens, fit, frame, joined
from .. import haystack

NOISE = haystack.NOISE.strip() + "\n"
TEMPLATE = ("Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n{context}\n"
            "Question: Find all variables that are assigned the value {query} in the text above.")
# "assgined" is RULER's own spelling; kept so the prompt is RULER's
ANSWER_PREFIX = (" Answer: According to the chain(s) of variable assignment in the text above, {num_v} variables "
                 "are assgined the value {query}, they are: ")
ASKED_PREFIX = (" Answer: According to the chain(s) of variable assignment in the text above, {num_v} variables "
                "are assgined the value asked for, they are: ")  # the question before the context
NUM_CHAINS, NUM_HOPS = 1, 4
EXAMPLE_TOKENS, N_NEW = 500, 30


def chain(rng: np.random.Generator, name_len: int) -> tuple[list[str], list[str], str]:
    """(variables, assignment lines, value) of one chain of NUM_HOPS hops."""
    names: list[str] = []
    while len(names) < NUM_HOPS + 1:
        name = "".join(rng.choice(list(string.ascii_uppercase), name_len))
        if name not in names:
            names.append(name)
    value = str(rng.integers(10000, 99999))
    lines = [f"VAR {names[0]} = {value}"] + [f"VAR {names[j + 1]} = VAR {names[j]} " for j in range(NUM_HOPS)]
    return names, lines, value


def body(rng: np.random.Generator, count: int, name_len: int, where: str = "end") -> tuple[list[Piece], list[str]]:
    """(pieces of the template with its answer prefix, the chain's variables) with `count` noise sentences."""
    names, lines, value = chain(rng, name_len)
    units: list[tuple[bool, str]] = [(False, NOISE)] * count
    at = sorted(rng.choice(count, len(lines), replace=False)) if count >= len(lines) else list(range(len(lines)))
    for j, (pos, line) in enumerate(zip(at, lines)):
        units.insert(int(pos) + j, (True, line))
    head, tail = frame(TEMPLATE, ANSWER_PREFIX, ASKED_PREFIX, where)
    context = joined([t for _, t in units], " ", lambda i: units[i][0])
    fill = dict(query=value, num_v=NUM_HOPS + 1)
    return [Piece(head.format(**fill))] + context + [Piece(tail.format(**fill))], names


def example(tokens: Tokens, seed, where: str = "end") -> list[Piece]:
    """The worked example: a 3-letter chain sized to EXAMPLE_TOKENS, with its answer."""
    def make(count: int) -> list[Piece]:
        pieces, names = body(np.random.default_rng([*seed, 1]), count, 3, where)
        return pieces + [Piece(" " + " ".join(names) + "\n\n\n\n")]  # RULER: the example's "\n\n", then "\n\n"

    return [Piece(p.text) for p in fit(tokens, make, EXAMPLE_TOKENS - N_NEW, "vt example", start=5)[1]]  # not evidence


def pieces(ex: list[Piece], seed, count: int, where: str = "end") -> tuple[list[Piece], list[str]]:
    """(prompt pieces, answers): the example `ex`, then the task with `count` noise sentences."""
    main, names = body(np.random.default_rng([*seed, 0]), count, 5, where)
    return ex + main, names
