"""One invocation: every variant on the same items, over splits, tails and prompt lengths.

Tasks: `needle` (needles inside the filled region), `loss` (distant-dependent tail tokens) and
`ruler` (RULER's task family, evals.ruler; a RULER record's n_tokens is the item's target length).

Output directory:
  items/*.json     the items (tokens included), reused by a rerun so it sees the same ones
  results.jsonl    one record per (item, variant, split, sinks, tail), appended as measured;
                   a rerun skips the records already there (resume)
  results.json     run description, summary rows with paired-bootstrap intervals, all records
  summary.md       the summary as markdown tables
  plots/*.png      metric vs split / tail / length, where the sweep has more than one value
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field, replace
from itertools import zip_longest
from pathlib import Path
from typing import Callable, Iterator, Sequence

from .. import runtime
from . import items as items_io
from . import loss, measure, needle, report, ruler
from .profiles import Plan
from .session import DEFAULT_VARIANTS, Session, Variant
from .store import ResultStore
from ..errors import InputError

TASKS = ("needle", "loss", "ruler")


@dataclass(frozen=True)
class Job:
    task: str
    item: object  # NeedleItem | LossItem
    variant: Variant
    split: int | None  # None for exact and exact-cut (they do not depend on the split)
    sinks: int
    tail: int

    def key(self) -> tuple:
        return (self.task, self.item.id, self.variant.name, self.split, self.sinks, self.tail)

    def fields(self) -> dict:
        group = "loss" if self.task == "loss" else self.item.task
        return {"task": self.task, "group": group, "item": self.item.id, "cluster": self.item.cluster,
                "variant": self.variant.name, "mode": self.variant.mode, "split": self.split, "sinks": self.sinks,
                "tail": self.tail, "n_tokens": self.item.n_tokens}


@dataclass
class RunResult:
    out_dir: Path
    n_jobs: int
    n_run: int  # measured in this invocation
    n_resumed: int  # found in results.jsonl
    unavailable: list[str] = field(default_factory=list)  # variant@split without maps
    seconds: float = 0.0
    document: dict = field(default_factory=dict)  # what results.json holds


def placement_tail(tails: Sequence[int], n_tokens: int) -> int:
    """Needles go inside the filled region of the largest tail that leaves one."""
    return max((t for t in tails if t < n_tokens), default=0)


def tokenizer_id(model) -> str:
    return f"{model.metadata.get('tokenizer.ggml.model', '')}/{model.n_vocab}/{model.bos}"


def make_items(model, plan: Plan, item_dir: Path) -> dict[str, list]:
    """Items of every task and length, loaded from item_dir when saved with the same parameters."""
    out: dict[str, list] = {"needle": [], "loss": [], "ruler": []}
    for n in plan.lengths:
        if "needle" in plan.tasks:
            for name in plan.needle_tasks:
                spec = needle.TaskSpec.parse(name)
                tail = placement_tail(plan.tails, n)
                params = {"task": spec.name, "n_tokens": n, "sinks": plan.sinks, "tail": tail,
                          "n_items": plan.needle_items, "seed": plan.seed, "tokenizer": tokenizer_id(model)}
                path = item_dir / f"needle-{spec.name.replace('/', '-')}-N{n}.json"
                out["needle"] += items_io.load_or_make(path, "needle", params, lambda: needle.generate(
                    model, spec, n, plan.sinks, tail, plan.needle_items, plan.seed))
        if "ruler" in plan.tasks:
            for name in plan.ruler_tasks:
                q = plan.ruler_question
                params = {"task": name, "n_tokens": n, "n_items": plan.ruler_items, "seed": plan.seed,
                          "tokenizer": tokenizer_id(model)} | ({} if q == "end" else {"question": q})
                out["ruler"] += items_io.load_or_make(
                    item_dir / f"ruler-{name}-N{n}{'' if q == 'end' else '-q-' + q}.json", "ruler", params,
                    per_index=True, make=lambda start: ruler.generate(model, name, n, plan.ruler_items, plan.seed,
                                                                      start, q))
        if "loss" in plan.tasks:
            params = {"n_tokens": n, "n_items": plan.loss_items, "seed": plan.seed, "tokenizer": tokenizer_id(model)}
            out["loss"] += items_io.load_or_make(item_dir / f"loss-N{n}.json", "loss", params,
                                                 lambda: loss.generate(model, n, plan.loss_items, plan.seed))
    return out


def interleaved(items: list) -> list:
    """Items round-robin over their needle tasks (and lengths), so a sweep stopped part-way has
    measured every task alike: the first item of each, then the second of each, ..."""
    groups: dict[tuple, list] = {}
    for it in items:
        groups.setdefault((getattr(it, "task", ""), it.n_tokens), []).append(it)
    return [it for row in zip_longest(*groups.values()) for it in row if it is not None]


def jobs(items: dict[str, list], plan: Plan, splits: Sequence[int], variants: Sequence[Variant]) -> Iterator[Job]:
    """Exact first for each item and tail (loss needs its reference), then the other variants."""
    ordered = sorted(variants, key=lambda v: v.name != "exact")
    for task in plan.tasks:
        for item in interleaved(items[task]):
            for tail in plan.tails:
                for v in ordered:
                    if v.split_free:
                        yield Job(task, item, v, None, plan.sinks, tail)
                for split in splits:
                    for v in ordered:
                        if not v.split_free:
                            yield Job(task, item, v, split, plan.sinks, tail)


def resolve_splits(plan: Plan, session: Session) -> list[int]:
    if plan.splits:
        return list(plan.splits)
    found = session.map_splits()
    if not found:
        raise InputError(f"{session.base.path} has no ridge maps; give the split layer(s) to measure")
    return found


def resolve_rows(plan: Plan, session: Session) -> Plan:
    """Sinks and tails the plan leaves open (None) come from the GGUF, as in llama-server and llama-bench."""
    sinks, tail = session.default_rows()
    return replace(plan, sinks=sinks if plan.sinks is None else plan.sinks,
                   tails=(tail,) if plan.tails is None else plan.tails)


def check_models(store: ResultStore, jobs: Sequence[Job], session: Session) -> None:
    """Refuse to resume records that another GGUF (other maps, another base) measured. A record from
    before content fingerprints is resumed when its file sha256 is this file's, and gets the fingerprint."""
    upgraded = []
    for job in jobs:
        rec = store.get(job.key())
        if rec is None or session.model_for(job.variant, job.split) is None:
            continue
        content = session.fingerprint(job.variant, job.split)
        if rec.get("model_content") == content:
            continue
        if "model_content" in rec or rec.get("model_sha256") != session.file_sha256(job.variant, job.split):
            where = f"{job.variant.name}" + ("" if job.split is None else f" at split {job.split}")
            raise InputError(f"{store.path} holds {where} results measured with another GGUF than "
                             f"{session.model_for(job.variant, job.split).path} (or by a version that did not "
                             "record it): use another output directory")
        upgraded.append({**rec, "model_content": content})
    if upgraded:
        store.replace(upgraded)


def warn_unfilled(plan: Plan, log: Callable[[str], None]) -> None:
    for n in plan.lengths:
        for tail in plan.tails:
            warning = runtime.nothing_filled(n, plan.sinks, tail)
            if warning:
                log(warning)


def execute(session: Session, job: Job, plan: Plan, store: ResultStore) -> dict | None:
    ctx = session.context(job.variant, job.split)
    if ctx is None:
        return None
    hook = job.variant.hook
    if job.task == "needle":
        rec = measure.needle_record(ctx, job.item, job.sinks, job.tail, hook)
    elif job.task == "ruler":
        rec = measure.ruler_record(ctx, job.item, job.sinks, job.tail, hook)
    else:
        ref = store.get(("loss", job.item.id, "exact", None, job.sinks, job.tail))
        distant = None if job.variant.name == "exact" else ref["distant"]
        rec = measure.loss_record(ctx, job.item, job.sinks, job.tail, distant, plan.window, hook)
    return {**job.fields(), **rec, "model_content": session.fingerprint(job.variant, job.split),
            "model_sha256": session.file_sha256(job.variant, job.split)}


def check_plan(plan: Plan, variants: Sequence[Variant]) -> None:
    unknown = set(plan.tasks) - set(TASKS)
    if unknown:
        raise InputError(f"unknown task(s) {sorted(unknown)} (one of {', '.join(TASKS)})")
    if "loss" in plan.tasks and "exact" not in [v.name for v in variants]:
        raise InputError("the loss task needs the exact variant: it defines the distant-dependent tokens")
    if "ruler" in plan.tasks:
        for name in plan.ruler_tasks:
            ruler.tasks.get(name)  # an unknown or missing task fails before anything is measured
    if not plan.lengths or not plan.tails:
        raise InputError("a plan needs at least one length and one tail")
    counts = {"needle": plan.needle_items, "loss": plan.loss_items, "ruler": plan.ruler_items}
    bad = {t: counts[t] for t in plan.tasks if counts[t] < 1}
    if bad or min(plan.lengths) < 1:
        raise InputError(f"items per task and prompt lengths must be >= 1 (got {bad or ''} lengths {list(plan.lengths)})")


def check_window(store: ResultStore, plan: Plan) -> None:
    """Resumed loss records must share the plan's distant-token window."""
    used = {r["window"] for r in store.all() if r["task"] == "loss" and "window" in r}
    if used - {plan.window}:
        raise InputError(f"{store.path} holds loss results with window {sorted(used)}, not {plan.window}; "
                         "use another output directory")


def run(session: Session, plan: Plan, out_dir: str | Path, variants: Sequence[Variant] = DEFAULT_VARIANTS,
        progress: bool = True, log: Callable[[str], None] = lambda msg: None, plots: bool = True) -> RunResult:
    """Measure every job not yet in out_dir/results.jsonl, then write the summary files."""
    from tqdm import tqdm

    t0 = time.monotonic()
    plan = resolve_rows(plan, session)
    check_plan(plan, variants)
    warn_unfilled(plan, log)
    out = Path(out_dir)
    store = ResultStore(out / "results.jsonl")
    if "loss" in plan.tasks:
        check_window(store, plan)
    splits = resolve_splits(plan, session)
    all_jobs = list(jobs(make_items(session.base, plan, out / "items"), plan, splits, variants))
    check_models(store, all_jobs, session)
    unavailable = sorted({f"{j.variant.name}@{j.split}" for j in all_jobs if session.model_for(j.variant, j.split) is None})
    for u in unavailable:
        log(f"skipping {u}: no model with ridge maps (for a routed variant, routing statistics) at that split")
    todo = [j for j in all_jobs if j.key() not in store and session.model_for(j.variant, j.split) is not None]
    result = RunResult(out, len(all_jobs), 0, sum(j.key() in store for j in all_jobs), unavailable)
    with tqdm(total=len(todo), desc=f"eval {plan.name}", unit="run", disable=not progress) as bar:
        for job in todo:
            bar.set_postfix_str(f"{job.item.id} {job.variant.name} s={job.split} T={job.tail}", refresh=False)
            rec = execute(session, job, plan, store)
            if rec is not None:
                store.append(rec)
                result.n_run += 1
            bar.update()
    keys = {j.key() for j in all_jobs}
    records = [r for r in store.all() if (r["task"], r["item"], r["variant"], r["split"], r["sinks"], r["tail"]) in keys]
    result.seconds = time.monotonic() - t0
    result.document = write_outputs(out, plan, session, variants, records, result, plots)
    return result


def write_outputs(out: Path, plan: Plan, session: Session, variants, records: list[dict], result: RunResult,
                  plots: bool) -> dict:
    rows = report.summarize(records, n_boot=plan.n_boot, seed=plan.seed)
    doc = {
        "run": {"plan": asdict(plan), "models": session.describe(), "variants": [v.name for v in variants],
                "libllama": runtime.version(), "n_jobs": result.n_jobs, "n_run": result.n_run,
                "n_resumed": result.n_resumed, "unavailable": result.unavailable,
                "seconds": round(result.seconds, 1)},
        "summary": rows,
        "records": records,
    }
    (out / "results.json").write_text(json.dumps(doc, indent=1))
    (out / "summary.md").write_text(report.markdown(rows, plan))
    if plots:
        report.plot(rows, out / "plots")
    return doc
