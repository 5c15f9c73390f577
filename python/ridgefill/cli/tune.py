"""`ridgefill tune`: the arguments and the report of tune.operating_point."""

from __future__ import annotations

import sys
from pathlib import Path

from ..evals import profiles
from ..format import Defaults
from ..tune import frontier
from ..tune.operating_point import NoOperatingPoint, check_measured_maps, fit_config, run
from .args import add_gpu_layers, list_option


def add_commands(sub) -> None:
    p = sub.add_parser("tune", help="fit candidate splits from one capture, measure quality and speed, and write the "
                                    "fastest configuration within a quality budget")
    p.add_argument("base", help="base GGUF")
    list_option(p, "--splits", int, metavar="S", help="candidate split layers (default: the upper half, "
                                                      "L/2 .. L-3)")
    list_option(p, "--tails", int, metavar="T", help="candidate tail rows (default 1024)")
    list_option(p, "--routes", float, metavar="P", help="candidate routed shares in percent of each fill ubatch "
                                                          "(default 0: none; e.g. 0,2,5,10)")
    list_option(p, "--selects", float, metavar="Q", help="candidate selected shares in percent of the filled rows, "
                                                           "chosen by the prompt's last 64 rows (default 0: none; ridge^Q)")
    p.add_argument("--sinks", type=int, default=Defaults.sink_rows)
    list_option(p, "--lengths", int, metavar="N", help="prompt lengths (default 4096)")
    p.add_argument("--budget-needles", type=float, default=5.0, help="needle points ridge may lose against exact")
    p.add_argument("--budget-loss", type=float, default=0.02, help="nats of distant-token loss ridge may add")
    p.add_argument("--profile", choices=sorted(profiles.PROFILES), default="quick", help="eval plan (default quick)")
    p.add_argument("--budget-ruler", type=float, default=None,
                   help="RULER average points ridge may lose against exact (adds RULER's tasks to the measurement)")
    p.add_argument("--needles-only", action="store_true", help="skip the loss measurement (a wide first pass)")
    p.add_argument("--ruler", action="store_true", help="also measure RULER's tasks (reported beside the needles)")
    p.add_argument("--ruler-only", action="store_true", help="measure RULER's tasks alone (no needles, no loss)")
    list_option(p, "--ruler-tasks", metavar="TASK", help="RULER tasks (default: the 11 that run offline)")
    list_option(p, "--needle-tasks", metavar="TASK", help="needle tasks (default: the profile's)")
    p.add_argument("--items", type=int, help="needle and RULER items per task and length (default: the profile's)")
    p.add_argument("--docs", type=int, help="loss documents per length (default: the profile's)")
    list_option(p, "--modes", default=None, help="variants (default exact,identity,ridge; ridge@P: P %% routed; "
                                                  "ridge^Q: Q %% selected)")
    p.add_argument("--tokens", type=int, default=16384, help="calibration tokens of the one capture")
    p.add_argument("--measure", action="store_true", help="also time each candidate with llama-bench")
    p.add_argument("--runs", type=int, default=3, help="llama-bench runs per mode and length with --measure")
    p.add_argument("--threads", type=int, default=None)
    add_gpu_layers(p)
    p.add_argument("--work-dir", help="resumable work directory (default ridgefill-tune-<base name>)")
    p.add_argument("--title", help="report title")
    p.add_argument("--report-only", action="store_true",
                   help="run no eval: report the quality the work directory's store holds (a sweep left "
                        "part-way); with --measure, still time the candidates")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("-o", "--output", help="augmented GGUF to write with the chosen split, sinks and tail")
    p.add_argument("--maps-only", action="store_true",
                   help="write the output as a maps file beside the base (--ridgefill-maps) instead")
    p.set_defaults(func=cmd_tune)


def _quality_text(row: dict) -> str:
    """'needles R vs exact E' and/or 'RULER R vs exact E', whichever the row measured."""
    parts = [f"{label} {row[key].get('ridge', float('nan')):.1f} vs exact {row[key].get('exact', float('nan')):.1f}"
             for key, label in (("needle", "needles"), ("ruler", "RULER")) if key in row]
    return ", ".join(parts) or "no quality measured"


def _loss_gap_text(row: dict) -> str:
    gap = row.get("loss_diff", {}).get("ridge-exact")
    return f", distant-token loss {gap['mean']:+.3f} nats over exact" if gap else ""


def cmd_tune(args) -> int:
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    rows, work = run(args, log)
    print((work / "frontier.md").read_text())
    print(f"frontier: {work / 'frontier.md'}, {work / 'frontier.png'}")
    if not args.output:
        return 0
    chosen, best = frontier.choose(rows, args.budget_needles, args.budget_loss, args.budget_ruler)
    if chosen is None:
        where = ("none measured" if best is None else
                 f"the best found is split {best['split']}, tail {best['tail']} at {best['n_tokens']} tokens: "
                 + _quality_text(best) + _loss_gap_text(best))
        ruler = "" if args.budget_ruler is None else f", --budget-ruler {args.budget_ruler}"
        raise NoOperatingPoint(f"no configuration meets --budget-needles {args.budget_needles}, --budget-loss "
                               f"{args.budget_loss}{ruler}; {where}. Widen the budget or add earlier splits / longer tails")
    # the store holds the quality, not the maps (a fresh clone of a committed report): fit the chosen split if absent
    frontier.fit_candidates(Path(args.base), [chosen["split"]], fit_config(args), work, log)
    check_measured_maps(work, chosen["split"])
    frontier.write_tuned(Path(args.base), work, chosen, Path(args.output), maps_only=args.maps_only)
    print(f"chosen: split {chosen['split']}, sinks {chosen['sinks']}, tail {chosen['tail']}, "
          f"routed {100 * chosen.get('route', 0.0):g} % "
          f"({frontier.speedup(chosen):.2f}x, {_quality_text(chosen)})")
    if chosen.get("select", 0.0) > 0:  # a serving setting, not a default the GGUF records
        print(f"serve it with --ridgefill-select {chosen['select']:g} (llama-server, llama-bench) or "
              f"Context.set_select({chosen['select']:g})")
    print(f"wrote {args.output}")
    return 0
