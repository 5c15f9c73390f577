"""RULER-style needle-in-a-haystack items with token-exact needle placement.

Tasks (RULER's niah family): `single` (one needle, one key asked), `multikey` (the asked
needle among distractor needles with other keys), `multivalue` (several values for one
key, all asked), `multiquery` (several keys, all asked). Values are 7-digit numbers or
UUIDs; haystacks are RULER's noise sentences or held-out prose (haystack.py).

Every needle lies inside the filled region [k, N-T) of its N-token prompt, so a fill mode
has to carry it through predicted K/V. Items are generated from a seed and saved as JSON
(items.py), so a run can be repeated exactly. Scoring is RULER's string-match-all.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import numpy as np

from . import haystack
from .haystack import NOISE  # noqa: F401  (re-exported: the demo's haystack)
from ..errors import InputError
from ..runtime import fill_range
from .token_item import TokenItem

TASKS = ("single", "multikey", "multivalue", "multiquery")
VALUES = ("number", "uuid")
N_NEEDLES = {"single": 1, "multikey": 4, "multivalue": 4, "multiquery": 4}

INTRO = ("Some special magic {kinds} are hidden within the following text. Make sure to memorize it. "
         "I will quiz you about the {kinds} afterwards.\n")
NEEDLE = " One of the special magic {kinds} for {key} is: {value}."
QUESTION = ("\nWhat is the special magic {kind} for {key} mentioned in the provided text? "
            "The special magic {kind} for {key} mentioned in the provided text is")
QUESTION_ALL = ("\nWhat are all the special magic {kinds} for {key} mentioned in the provided text? "
                "The special magic {kinds} for {key} mentioned in the provided text are")

_ADJ = ("amber", "brisk", "calm", "dusty", "eager", "faint", "gentle", "hollow", "icy", "jolly", "keen", "lucid",
        "mellow", "nimble", "odd", "placid", "quiet", "rustic", "silent", "tidy", "vivid", "witty", "young", "zesty")
_NOUN = ("anchor", "badger", "candle", "dolphin", "engine", "falcon", "garden", "harbor", "island", "jacket", "kettle",
         "lantern", "meadow", "needle", "orchard", "pepper", "quarry", "river", "saddle", "tunnel", "violin", "walnut")


@dataclass(frozen=True)
class TaskSpec:
    task: str = "single"
    haystack: str = "noise"
    value: str = "number"

    def __post_init__(self):
        for name, val, allowed in (("task", self.task, TASKS), ("haystack", self.haystack, haystack.KINDS),
                                   ("value", self.value, VALUES)):
            if val not in allowed:
                raise InputError(f"unknown needle {name} {val!r} (one of {', '.join(allowed)})")

    @property
    def name(self) -> str:
        return f"{self.task}/{self.haystack}/{self.value}"

    @classmethod
    def parse(cls, name: str) -> "TaskSpec":
        """'single/noise/number'; missing parts take the defaults ('multikey' = multikey/noise/number)."""
        parts = name.split("/")
        if len(parts) > 3:
            raise InputError(f"needle task {name!r}: expected task[/haystack[/value]]")
        return cls(*parts)


@dataclass
class NeedleItem(TokenItem):
    tokens: np.ndarray  # the whole prompt, int32
    answers: list[str]  # values the answer must contain
    key: str  # the (first) key asked
    needle_rows: tuple[int, int]  # [first row of the first needle, end of the last needle)
    meta: dict = field(default_factory=dict)
    needles: list[tuple[int, int]] = field(default_factory=list)  # [first, end) rows of each needle
    id: str = ""
    task: str = "single/noise/number"
    keys: list[str] = field(default_factory=list)  # every key asked
    n_new: int = 16  # tokens to generate
    cluster: str = ""  # items sharing a source document resample together

    ROW_PAIRS = ("needle_rows",)
    ROW_PAIR_LISTS = ("needles",)


@dataclass
class _Needle:
    key: str
    value: str
    depth: float  # 0..1 within the free rows of the region


def random_key(rng: np.random.Generator) -> str:
    return f"{rng.choice(_ADJ)}-{rng.choice(_NOUN)}"


def random_value(rng: np.random.Generator, kind: str) -> str:
    if kind == "uuid":
        return str(uuid.UUID(bytes=rng.bytes(16), version=4))
    return str(rng.integers(1_000_000, 10_000_000))


def _distinct_keys(rng: np.random.Generator, n: int) -> list[str]:
    keys: list[str] = []
    while len(keys) < n:
        k = random_key(rng)
        if k not in keys:
            keys.append(k)
    return keys


def _depths(n: int) -> list[float]:
    return [0.5] if n == 1 else list(np.linspace(0.0, 1.0, n))


def plan(spec: TaskSpec, depth: float, rng: np.random.Generator) -> tuple[list[_Needle], list[str]]:
    """(needles in depth order, keys asked) for one item; `depth` places the asked needle."""
    m = N_NEEDLES[spec.task]
    if spec.task == "single":
        key = random_key(rng)
        return [_Needle(key, random_value(rng, spec.value), depth)], [key]
    depths = _depths(m)
    if spec.task == "multivalue":
        key = random_key(rng)
        return [_Needle(key, random_value(rng, spec.value), d) for d in depths], [key]
    keys = _distinct_keys(rng, m)
    needles = [_Needle(k, random_value(rng, spec.value), d) for k, d in zip(keys, depths)]
    if spec.task == "multikey":
        target = int(round(depth * (m - 1)))
        return needles, [needles[target].key]
    return needles, keys


def _question(spec: TaskSpec, keys: list[str]) -> str:
    kinds = spec.value + "s"
    if spec.task in ("single", "multikey"):
        return QUESTION.format(kind=spec.value, key=keys[0])
    key = keys[0] if len(keys) == 1 else ", ".join(keys[:-1]) + " and " + keys[-1]
    return QUESTION_ALL.format(kinds=kinds, key=key)


def _answers(needles: list[_Needle], keys: list[str]) -> list[str]:
    return [n.value for n in needles if n.key in keys]


def region(n_tokens: int, sinks: int, tail: int, head: int, foot: int) -> tuple[int, int]:
    """Rows a needle may occupy: inside [k, N-T), after the intro and before the question."""
    lo, hi = fill_range(n_tokens, sinks, tail)
    return max(lo, head), min(hi, n_tokens - foot)


def place(breaks: np.ndarray, base: int, free: int, depths: list[float]) -> list[int]:
    """Haystack insertion points, one per needle, non-decreasing, in [base, base + free].

    Each lands on the sentence break nearest its depth's target; without one in range,
    on the target itself.
    """
    ok = breaks[(breaks >= base) & (breaks <= base + free)]
    out: list[int] = []
    for d in depths:
        target = base + int(round(d * free))
        prev = out[-1] if out else base
        cand = ok[ok >= prev]
        out.append(int(cand[np.argmin(np.abs(cand - target))]) if len(cand) else max(target, prev))
    return out


def build(model, spec: TaskSpec, n_tokens: int, sinks: int, tail: int, seed, depth: float,
          item_id: str = "") -> NeedleItem:
    """One item of exactly n_tokens rows whose needles all lie inside [sinks, n_tokens - tail)."""
    rng = np.random.default_rng(seed)
    needles, keys = plan(spec, depth, rng)
    kinds = spec.value + "s"
    intro = model.tokenize(INTRO.format(kinds=kinds), add_special=True)
    question = model.tokenize(_question(spec, keys), add_special=False)
    pieces = [model.tokenize(NEEDLE.format(kinds=kinds, key=n.key, value=n.value), add_special=False) for n in needles]
    lo, hi = region(n_tokens, sinks, tail, len(intro), len(question))
    total = sum(len(p) for p in pieces)
    free = hi - lo - total
    if free < 0:
        raise InputError(f"{spec.name}: {len(pieces)} needle(s) of {total} tokens do not fit rows [{lo}, {hi}) "
                         f"of a {n_tokens}-token prompt (sinks {sinks}, tail {tail})")
    hay = haystack.make(model, spec.haystack, n_tokens - len(intro) - total - len(question), rng)
    at = place(haystack.sentence_breaks(model, hay.tokens), lo - len(intro), free, [n.depth for n in needles])
    tokens, rows = _assemble(intro, hay.tokens, pieces, at, question)
    answers = _answers(needles, keys)
    n_new = sum(len(model.tokenize(" " + a, add_special=False)) + 2 for a in answers) + 4
    meta = {"depth": depth, "seed": seed if isinstance(seed, int) else list(seed), "sinks": sinks, "tail": tail}
    return NeedleItem(tokens, answers, keys[0], (rows[0][0], rows[-1][1]), meta, rows, item_id, spec.name, keys,
                      n_new, hay.source if spec.haystack == "prose" else item_id)


def _assemble(intro, hay, pieces, at, question) -> tuple[np.ndarray, list[tuple[int, int]]]:
    parts, rows, prev, row = [intro], [], 0, len(intro)
    for piece, a in zip(pieces, at):
        parts.append(hay[prev:a])
        row += a - prev
        rows.append((row, row + len(piece)))
        parts.append(piece)
        row += len(piece)
        prev = a
    parts += [hay[prev:], question]
    return np.concatenate(parts).astype(np.int32), rows


def item_depth(i: int, n: int) -> float:
    """Depths of n items spread evenly over [0, 1]."""
    return 0.5 if n == 1 else i / (n - 1)


def generate(model, spec: TaskSpec, n_tokens: int, sinks: int, tail: int, n_items: int, seed: int) -> list[NeedleItem]:
    """n_items items of one task and length, depths spread evenly, each from its own seed."""
    code = [TASKS.index(spec.task), haystack.KINDS.index(spec.haystack), VALUES.index(spec.value)]
    return [build(model, spec, n_tokens, sinks, tail, [seed, *code, n_tokens, i], item_depth(i, n_items),
                  item_id=f"{spec.name}/N{n_tokens}/{i}") for i in range(n_items)]


def single_needle(model, n_tokens: int, depth: float, seed: int, haystack_kind: str = "noise") -> NeedleItem:
    """One number needle at `depth` (0..1) of the haystack, in a prompt of n_tokens rows."""
    return build(model, TaskSpec("single", haystack_kind), n_tokens, 0, 0, seed, depth, item_id=f"single/{seed}")


def string_match_all(output: str, answers: list[str]) -> float:
    """RULER's score for one item, 0..100: the share of the answers found in the output."""
    out = output.lower()
    return 100.0 * sum(a.lower() in out for a in answers) / len(answers)
