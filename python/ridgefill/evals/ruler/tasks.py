"""The task table: RULER's 13 averaged tasks by RULER's names, and the generator of their items.

Each task has RULER's metric and generation budget (tokens_to_generate); an item of target
length L has the largest haystack whose prompt fits in L minus that budget. Items are seeded
by (seed, task, L, index), so the same arguments give the same tokens on any machine with the
same GGUF tokenizer and word lists.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from . import aggregate, niah, vt
from .item import RulerItem
from .metrics import METRICS
from .prompt import Tokens, fit
from .words import common_pool
from ...errors import InputError


@dataclass(frozen=True)
class Task:
    name: str
    n_new: int  # RULER's tokens_to_generate
    metric: str = "all"  # RULER's string_match_all (part: string_match_part, the QA tasks)
    niah: niah.Niah | None = None


TASK_LIST = (
    Task("niah_single_1", 128, niah=niah.Niah("repeat")),
    Task("niah_single_2", 128, niah=niah.Niah("essay")),
    Task("niah_single_3", 128, niah=niah.Niah("essay", type_v="uuids")),
    Task("niah_multikey_1", 128, niah=niah.Niah("essay", num_k=4)),
    Task("niah_multikey_2", 128, niah=niah.Niah("needle")),
    Task("niah_multikey_3", 128, niah=niah.Niah("needle", type_k="uuids", type_v="uuids")),
    Task("niah_multivalue", 128, niah=niah.Niah("essay", num_v=4)),
    Task("niah_multiquery", 128, niah=niah.Niah("essay", num_q=4)),
    Task("vt", vt.N_NEW),
    Task("cwe", 120),
    Task("fwe", 50),
)
TASKS = tuple(t.name for t in TASK_LIST)
BY_NAME = {t.name: t for t in TASK_LIST}
# RULER's two QA tasks read SQuAD and HotpotQA, which do not install offline
MISSING = {"qa_1": "SQuAD is not available offline", "qa_2": "HotpotQA is not available offline"}


def get(name: str) -> Task:
    if name in MISSING:
        raise InputError(f"RULER task {name} cannot run here: {MISSING[name]}")
    if name not in BY_NAME:
        raise InputError(f"unknown RULER task {name!r} (one of {', '.join(TASKS)})")
    return BY_NAME[name]


def _builder(task: Task, tokens: Tokens, seed, target: int,
             where: str = "end") -> tuple[Callable[[int], tuple], int, int | None]:
    """(count -> (pieces, answers), smallest count, largest count) for one item."""
    if task.niah is not None:
        least = max(task.niah.num_k, task.niah.num_q) * task.niah.num_v
        return (lambda c: niah.pieces(task.niah, seed, c, where)), least, None
    if task.name == "vt":
        ex = vt.example(tokens, seed, where)
        return (lambda c: vt.pieces(ex, seed, c, where)), 1, None
    if task.name == "cwe":
        return (lambda c: aggregate.cwe_pieces(seed, target, c, where)), aggregate.NUM_CW + 1, len(common_pool())
    vocab = aggregate.fwe_vocab(seed, target)
    return (lambda c: aggregate.fwe_pieces(seed, vocab, c, where)), len(vocab), None


def build(model, name: str, target: int, seed: int, index: int, tokens: Tokens | None = None,
          question: str = "end") -> RulerItem:
    """Item `index` of task `name` at target length `target`; `question`: its place (prompt.frame): RULER's
    "end", or "start" (before the context; the item's id ends in /q-start, its draws are the end item's)."""
    task = get(name)
    tokens = tokens or Tokens(model)
    item_seed = [seed, TASKS.index(name), target, index]
    make, least, most = _builder(task, tokens, item_seed, target, question)
    count, pieces = fit(tokens, lambda c: make(c)[0], target - task.n_new, f"{name} at {target} tokens",
                        start=least, most=most)
    toks, spans = tokens.assemble(pieces)
    item_id = f"{name}/N{target}/{index}" + ("" if question == "end" else f"/q-{question}")
    meta = {"seed": item_seed, "haystack_units": count} | ({} if question == "end" else {"question": question})
    return RulerItem(toks, make(count)[1], name, target, spans, task.n_new, item_id, item_id, meta)


def generate(model, name: str, target: int, n_items: int, seed: int, start: int = 0,
             question: str = "end") -> list[RulerItem]:
    """Items start..n_items-1; item i depends on (name, target, seed, i, question) alone."""
    tokens = Tokens(model)
    return [build(model, name, target, seed, i, tokens, question) for i in range(start, n_items)]


def score(item: RulerItem, prediction: str) -> float:
    return METRICS[get(item.task).metric](prediction, item.answers)
