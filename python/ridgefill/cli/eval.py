"""`ridgefill eval needle|loss|sweep|splice`: argument parsing and output; the work is in ridgefill.evals."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .args import add_gpu_layers, list_option
from ..evals import profiles
from ..evals.ruler.prompt import QUESTION_PLACES

COMMANDS = {
    "needle": (("needle",), "needle retrieval with every needle inside the filled region [k, N-T)"),
    "loss": (("loss",), "loss on distant-dependent tail tokens (LongPPL-style) and on all tail tokens"),
    "ruler": (("ruler",), "RULER's task family (niah, variable tracking, common and frequent words) scored as RULER "
                          "scores it, per task and averaged, with the filled-region subset"),
    "sweep": (("needle", "loss"), "both measurements, on the same sweep"),
    "splice": (("needle", "loss"), "splice attribution: the share of the ridge-vs-exact gap closed by exact K, V, "
                                   "K norms, K+V in the filled rows (hybrids: recurrent state, all)"),
}
SPLICE_MODES = ("exact", "exact-cut", "ridge", "ridge-k", "ridge-v", "ridge-knorm", "ridge-kv")
HYBRID_SPLICE_MODES = ("ridge-state", "ridge-all")  # recurrent state; K, V and state (the sanity check)
MAX_NEW = 256  # room after the prompt for generated answers


def splice_modes(model) -> tuple[str, ...]:
    from ..bench.costmodel import Shape

    return SPLICE_MODES + (HYBRID_SPLICE_MODES if Shape.from_model(model).attn_interval else ())


def add_commands(sub) -> argparse.ArgumentParser:
    ev = sub.add_parser("eval", help="quality of split prefill: needles, distant-token loss, bootstrap intervals")
    es = ev.add_subparsers(dest="eval_cmd", required=True)
    for name, (tasks, help_text) in COMMANDS.items():
        p = es.add_parser(name, help=help_text, description=help_text)
        _add_args(p)
        p.set_defaults(func=cmd_eval, eval_tasks=tasks)
    return ev


def _add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", action="append", metavar="GGUF",
                   help="augmented GGUF (repeatable: ridge at split s uses the one fitted at s; exact and identity "
                        "use the first); default: the default model fitted at the demo's split (fitted if not cached)")
    p.add_argument("--maps", action="append", metavar="GGUF",
                   help="a maps file beside --model, the base (repeatable: one model per maps file, each at its split)")
    p.add_argument("--profile", choices=sorted(profiles.PROFILES), default="quick", help="measurement plan (default quick)")
    p.add_argument("--out", metavar="DIR", help="output directory (default ridgefill-eval-PROFILE); "
                                                "a rerun with the same directory resumes")
    p.add_argument("--json", action="store_true", help="print results.json (summary and per-item records) to stdout")
    p.add_argument("--seed", type=int, help="item generation and bootstrap seed")
    list_option(p, "--split", int, metavar="S", help="split layers (default: the profile's, else the maps' split)")
    p.add_argument("--sinks", type=int, metavar="K", help="sink rows k")
    list_option(p, "--tail", int, metavar="T", help="tail rows T")
    list_option(p, "--lengths", int, metavar="N", help="prompt lengths in tokens")
    list_option(p, "--modes", default=None,
                   help="variants to run (default exact,identity,ridge; also exact-cut: exact values in the fill "
                        "run's batches; ridge-k, -v, -knorm, -kv, -state, -all: splices (ridge-k-early, -kv-late, ...: "
                        "in the half of the filled layers next to the split, or the top half); eval splice runs "
                        "exact,exact-cut,ridge and the ridge splices; ridge@P, identity@P: P %% of each fill "
                        "ubatch routed through the full late layers)")
    list_option(p, "--needle-tasks", metavar="TASK",
                   help="needle tasks as task/haystack/value, e.g. single/noise/uuid,multikey/prose/number")
    list_option(p, "--tasks", metavar="TASK", help="measurements to run instead of the command's: needle, loss, "
                                                   "ruler (e.g. `eval splice --tasks ruler` diagnoses RULER's tasks)")
    list_option(p, "--ruler-tasks", metavar="TASK", help="RULER tasks by RULER's names (default: all 11 that run "
                                                         "offline: niah_single_1..3, niah_multikey_1..3, "
                                                         "niah_multivalue, niah_multiquery, vt, cwe, fwe)")
    p.add_argument("--ruler-question", choices=QUESTION_PLACES, default=None,
                   help="where RULER's question sits: end (RULER's, after the context; default) or start (before "
                        "it, the prompt ending in an answer prefix that names nothing: what selection cannot read)")
    p.add_argument("--items", type=int, metavar="N", help="needle (and RULER) items per task and length")
    p.add_argument("--docs", type=int, metavar="N", help="documents per length for the loss")
    p.add_argument("--window", type=int, metavar="W", help="short-context window of the distant-token criterion")
    p.add_argument("--bootstrap", type=int, metavar="B", help="bootstrap replicates (default 10000)")
    p.add_argument("--threads", type=int, default=None)
    add_gpu_layers(p, "--gpu-layers")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def plan_from_args(args) -> profiles.Plan:
    return profiles.get(args.profile).with_(
        lengths=args.lengths, tails=args.tail, splits=args.split, sinks=args.sinks, seed=args.seed,
        needle_tasks=args.needle_tasks, needle_items=args.items, loss_items=args.docs, window=args.window,
        ruler_tasks=args.ruler_tasks, ruler_items=args.items, ruler_question=args.ruler_question,
        n_boot=args.bootstrap, tasks=args.tasks or args.eval_tasks)


def default_models(threads: int | None, ngl: int = -1) -> list[Path]:
    from .. import demo
    from ..sources import models

    base = models.fetch_model(models.DEFAULT_MODEL)
    gguf, split, _ = demo.demo_fit(base, threads, ngl)
    print(f"model: {models.DEFAULT_MODEL} with the demo's maps at split {split}", file=sys.stderr, flush=True)
    return [gguf]


def cmd_eval(args) -> int:
    from ..evals import runner
    from ..evals.session import Session, variants_named

    plan = plan_from_args(args)
    splice_cmd = args.eval_cmd == "splice"
    paths = args.model or default_models(args.threads, args.n_gpu_layers)
    out = Path(args.out or f"ridgefill-eval-{plan.name}")
    session = Session(paths, n_ctx=max(plan.lengths) + MAX_NEW, threads=args.threads, n_gpu_layers=args.n_gpu_layers,
                      maps=args.maps or ())
    variants = variants_named(args.modes or (splice_modes(session.base) if splice_cmd else ("exact", "identity", "ridge")))
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    res = runner.run(session, plan, out, variants, progress=not args.quiet, log=log, plots=not args.no_plots)
    if splice_cmd:
        from ..evals import attribution

        res.document["splice_shares"] = rows = attribution.shares(res.document["records"], n_boot=plan.n_boot,
                                                                  seed=plan.seed)
        (out / "results.json").write_text(json.dumps(res.document, indent=1))
        (out / "splices.md").write_text(attribution.markdown(rows) + "\n")
    if args.json:
        print(json.dumps(res.document, indent=1))
    else:
        print(Path(out / "summary.md").read_text())
        if splice_cmd:
            print(Path(out / "splices.md").read_text())
        log(f"{res.n_run} measured, {res.n_resumed} resumed, {res.seconds:.0f} s; results in {out}/")
    return 0
