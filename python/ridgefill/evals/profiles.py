"""Named measurement plans: `quick` (CI, a few minutes on 2 CPU cores) and `full`."""

from __future__ import annotations

from dataclasses import dataclass, replace

from .needle import TASKS
from .ruler import TASKS as RULER_TASKS
from ..errors import InputError

ALL_NEEDLES = tuple(f"{t}/{h}/number" for t in TASKS for h in ("noise", "prose")) + (
    "single/noise/uuid", "single/prose/uuid")


@dataclass(frozen=True)
class Plan:
    name: str
    lengths: tuple[int, ...]  # prompt tokens N
    sinks: int | None  # k; None: the GGUF's ridgefill.sink_rows, as llama-server and llama-bench use
    tails: tuple[int, ...] | None  # T; None: the GGUF's ridgefill.tail_rows
    splits: tuple[int, ...] | None  # None: the split of the model's maps
    needle_tasks: tuple[str, ...]  # TaskSpec names
    needle_items: int  # per task and length; depths spread evenly
    loss_items: int  # documents per length
    window: int  # short-context window of the distant-token criterion
    tasks: tuple[str, ...] = ("needle", "loss")  # and "ruler": RULER's task family (evals.ruler)
    ruler_tasks: tuple[str, ...] = RULER_TASKS
    ruler_items: int = 1  # per RULER task and length
    ruler_question: str = "end"  # where RULER's question sits: RULER's "end", or "start" (before the context)
    seed: int = 0
    n_boot: int = 10_000

    def with_(self, **changes) -> "Plan":
        return replace(self, **{k: v for k, v in changes.items() if v is not None})


QUICK = Plan(
    name="quick",
    lengths=(1024,),
    sinks=None,
    tails=(256,),  # a 1K prompt keeps rows to fill only with a tail shorter than a GGUF's default (1024)
    splits=None,
    # multikey is left to `full`: SmolLM2-135M misses it even exactly at 1K tokens, and CI time is short
    needle_tasks=("single/noise/number", "single/prose/number", "multivalue/noise/number", "multiquery/prose/number"),
    needle_items=1,
    loss_items=3,
    window=128,  # SmolLM2-135M on SOTU prose: ~1 distant-dependent token per 256-token tail at 128
)

FULL = Plan(
    name="full",
    lengths=(4096,),
    sinks=None,
    tails=None,
    splits=(15, 17, 18, 20),
    # the quick profile's tasks (all of them: --needle-tasks with ALL_NEEDLES' names); sized so the
    # report (9 runs per item over the 4 splits, ~45 s per 4K run on 2 cores) takes a few resumable hours
    needle_tasks=("single/noise/number", "single/prose/number", "multivalue/noise/number", "multiquery/prose/number"),
    needle_items=4,
    loss_items=6,
    window=512,
    # about 10-12 items a task put the RULER average's interval near +-5 points at split 16 (issue 40)
    ruler_items=12,
)

PROFILES = {p.name: p for p in (QUICK, FULL)}


def get(name: str) -> Plan:
    try:
        return PROFILES[name]
    except KeyError:
        raise InputError(f"unknown profile {name!r} (one of {', '.join(PROFILES)})") from None
