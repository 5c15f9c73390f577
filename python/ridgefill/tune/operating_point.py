"""The operating point: measure the frontier over candidate splits and tails, then pick the fastest
operating point within a quality budget and write it as the GGUF's defaults.

Without -o it only measures and reports (the frontier reports in bench/results come from it).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

from . import frontier, frontier_report
from .. import format as fmt
from .command_line import command_line
from ..bench.costmodel import Shape
from ..errors import InputError, RidgefillError
from ..evals import profiles, runner
from ..evals.session import Session, variants_named
from ..fit.route import mode_name

MAX_NEW = 256  # room after the prompt for generated answers (as `ridgefill eval`)


class NoOperatingPoint(RidgefillError):
    pass


def default_splits(n_layer: int) -> list[int]:
    return list(range(n_layer // 2, n_layer - 2))


def check_routes(routes, flag: str = "--routes") -> list[float]:
    """--routes (or --selects) in percent -> shares in [0, 1], 0 (plain ridge) always among them."""
    shares = sorted({0.0, *(r / 100 for r in routes or ())})
    bad = [100 * r for r in shares if not 0 <= r <= 1]
    if bad:
        raise InputError(f"{flag} must be percentages in [0, 100], not {bad}")
    return shares


def plan_from_args(args) -> profiles.Plan:
    return profiles.get(args.profile).with_(
        lengths=args.lengths or (4096,), tails=args.tails or (fmt.Defaults.tail_rows,), sinks=args.sinks,
        needle_tasks=args.needle_tasks, needle_items=args.items, loss_items=args.docs,
        ruler_tasks=getattr(args, "ruler_tasks", None), ruler_items=args.items, tasks=plan_tasks(args))


def plan_tasks(args) -> tuple[str, ...]:
    """needle and loss (--needles-only: needle), and RULER's tasks with --ruler or a RULER budget;
    --ruler-only: RULER's alone."""
    if getattr(args, "ruler_only", False):
        return ("ruler",)
    base = ("needle",) if args.needles_only else ("needle", "loss")
    wants_ruler = getattr(args, "ruler", False) or getattr(args, "budget_ruler", None) is not None
    return base + (("ruler",) if wants_ruler else ())


def measure_ttft(gguf: Path, split: int, sinks: int, tail: int, lengths: Sequence[int], modes, runs: int,
                 threads: int, work: Path, log, ngl: int = -1) -> dict:
    from ..bench import ttft as bench

    path = work / "ttft" / f"s{split}-t{tail}.json"
    if path.exists():
        have = json.loads(path.read_text())
        if sorted(r["n_tokens"] for r in have["results"]) == sorted(lengths) and have["modes"] == list(modes):
            return have
    log(f"llama-bench: split {split}, tail {tail}, {list(lengths)} tokens, {runs} runs of {', '.join(modes)}")
    out = bench.ttft(str(gguf), list(lengths), runs=runs, modes=modes, threads=threads, sinks=sinks, tail=tail,
                     split=split, progress=lambda m: None, ngl=ngl)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1))
    return out


def fit_config(args) -> frontier.FitConfig:
    return frontier.FitConfig(tokens=args.tokens, threads=args.threads, n_gpu_layers=args.n_gpu_layers)


def measured_summary(args, base: Path, splits, plan, variants, work: Path, log) -> tuple[list[dict], dict]:
    """Fit what is missing, measure what is missing; the eval summary rows and the plan run."""
    cands = frontier.fit_candidates(base, splits, fit_config(args), work, log)
    report_commands(args, base, work)  # now, not at the end: a run stopped part-way has measured something
    session = Session([base] + [cands[s] for s in splits], n_ctx=max(plan.lengths) + MAX_NEW, threads=args.threads,
                      n_gpu_layers=args.n_gpu_layers)
    res = runner.run(session, plan, work / "eval", variants, progress=not args.quiet, log=log, plots=False)
    log(f"eval: {res.n_run} measured, {res.n_resumed} resumed")
    return res.document["summary"], res.document["run"]["plan"]


def stored_summary(work: Path, plan) -> tuple[list[dict], dict]:
    """The summary of every record in the work directory's store, as measured so far."""
    from dataclasses import asdict

    from ..evals import report
    from ..evals.store import ResultStore

    store = work / "eval" / "results.jsonl"
    if not store.is_file():
        raise InputError(f"{store} does not exist: nothing measured yet")
    rows = report.summarize(ResultStore(store).all(), n_boot=plan.n_boot, seed=plan.seed)
    (work / "eval" / "summary.md").write_text(report.markdown(rows, plan))  # per task, as `eval` writes it
    return rows, asdict(plan)


def lagged_of(gguf: Path, ttft: dict | None) -> float:
    """The d x d products a candidate's maps spend on earlier rows (fmt.earlier_row_products): from its GGUF,
    else from its stored TTFT run (a fresh clone has no GGUFs)."""
    if gguf.is_file():
        return fmt.earlier_row_products(gguf)
    return float((ttft or {}).get("lagged_maps", 0))


def stored_ttft(work: Path, split: int, tail: int) -> dict | None:
    path = work / "ttft" / f"s{split}-t{tail}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def run(args, log) -> tuple[list[dict], Path]:
    base = Path(args.base)
    work = Path(args.work_dir or f"ridgefill-tune-{base.stem}")
    shape = Shape.from_gguf(base)
    frontier.check_budgets(args.budget_needles, args.budget_loss, getattr(args, "budget_ruler", None))
    splits = sorted(set(args.splits or default_splits(shape.n_layer)))
    plan = plan_from_args(args).with_(splits=tuple(splits))
    routes, selects = check_routes(args.routes), check_routes(getattr(args, "selects", None), "--selects")
    fills = [(r, q) for r in routes for q in selects]
    variants = variants_named(args.modes or ("exact", "identity", *(mode_name("ridge", r, q) for r, q in fills)))
    summary, plan_doc = (stored_summary(work, plan) if args.report_only else
                         measured_summary(args, base, splits, plan, variants, work, log))
    if args.measure and args.report_only:  # timing needs the candidates' GGUFs, which a fresh clone lacks
        frontier.fit_candidates(base, splits, fit_config(args), work, log)
    modes = tuple(v.name for v in variants if v.name in ("exact", "identity", "ridge") or "@" in v.name or "^" in v.name)
    rows = []
    for s in splits:
        for tail in plan.tails:
            ttft = (measure_ttft(work / "fit" / f"s{s}.gguf", s, plan.sinks, tail, plan.lengths, modes, args.runs,
                                 args.threads or 2, work, log, args.n_gpu_layers) if args.measure else
                    stored_ttft(work, s, tail))
            lagged = lagged_of(work / "fit" / f"s{s}.gguf", ttft)
            for route, select in fills:
                for n in plan.lengths:
                    rows.append(frontier.row_for(frontier.Point(s, plan.sinks, tail, n, route, select), summary, shape,
                                                 ttft, lagged))
    title = report_title(args.title, work, base)
    (work / "frontier.json").write_text(json.dumps({"base": str(base), "title": title, "plan": plan_doc,
                                                    "tokens": args.tokens, "rows": rows}, indent=1))
    commands = report_commands(args, base, work)
    (work / "frontier.md").write_text(frontier_report.markdown(rows, title, commands, plan.window))
    frontier_report.plot(rows, work / "frontier.png", title)
    return rows, work


def check_measured_maps(work: Path, split: int) -> None:
    """The maps about to be written are the ones the store's ridge records at `split` measured."""
    from ..evals.session import fingerprint
    from ..evals.store import ResultStore

    store = work / "eval" / "results.jsonl"
    records = ResultStore(store).all() if store.is_file() else []
    measured = {r["model_content"] for r in records if r.get("split") == split and r.get("mode") == "ridge"
                and "model_content" in r}
    have = fingerprint(work / "fit" / f"s{split}.gguf", split, routed=False)
    if measured and have not in measured:
        raise InputError(f"{work / 'fit'}/s{split}.gguf (content {have[:12]}) holds other maps than the ones "
                         f"{store} measured ({', '.join(sorted(m[:12] for m in measured))}): refit or rerun the eval")


def report_title(title: str | None, work: Path, base: Path) -> str:
    """The title given, else the one the work directory's report already has (a `--report-only -o` run
    must not retitle a committed report), else one from the base's name."""
    if title:
        return title
    try:  # the report about to be rewritten; one that cannot be read has no title to keep
        stored = json.loads((work / "frontier.json").read_text()).get("title")
    except (OSError, ValueError, AttributeError):
        stored = None
    return stored if isinstance(stored, str) and stored else f"{base.name}: quality vs speed by split"


def report_commands(args, base: Path, work: Path) -> list[str]:
    """The commands that measured the work directory, this one recorded if it measured anything."""
    argv = getattr(args, "argv", None)
    command = command_line(argv, base, work) if argv else None
    if command and (args.measure or not args.report_only):
        return frontier.record_command(work, command)
    return frontier.recorded_commands(work) or ([command] if command else [])
