"""`ridgefill`: the one parser over every command group, and the entry point."""

from __future__ import annotations

import argparse
import sys

from ..errors import RidgefillError
from ..sources import models
from ..upstream import cli as upstream_cli
from . import bench, eval, fit, tune
from . import models as model_commands
from .args import add_gpu_layers


def _cmd_demo(args) -> int:
    from .. import demo

    return demo.main(args.model, args.threads, args.n_gpu_layers)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="ridgefill", description="Split prefill for llama.cpp with closed-form ridge maps.")
    ap.add_argument("--version", action=_Version, help="print the package's version and the fork's, and exit")
    sub = ap.add_subparsers(dest="cmd", required=True)
    for group in (model_commands, fit, bench):
        group.add_commands(sub)
    up = sub.add_parser("upstream", help="the upstream llama.cpp tree and the patch series (prepare, export, rebase, ...)")
    upstream_cli.add_commands(up.add_subparsers(dest="upstream_cmd", required=True))
    up.set_defaults(func=upstream_cli.run)
    for group in (eval, tune):
        group.add_commands(sub)

    dm = sub.add_parser("demo", help="the main job on a registry model (what `make demo [MODEL=...]` runs)")
    dm.add_argument("--model", default=models.DEFAULT_MODEL, choices=sorted(models.REGISTRY))
    dm.add_argument("--threads", type=int, default=None)
    add_gpu_layers(dm)
    dm.set_defaults(func=_cmd_demo)
    return ap


class _Version(argparse.Action):
    """`ridgefill --version`: the package, and the llama.cpp fork its bindings were built from."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        from .. import __version__

        try:
            from ..runtime import version

            fork = version()
        except ImportError:
            fork = "not built (ridgefill._core is missing: make setup)"
        print(f"ridgefill {__version__}\nllama.cpp fork: {fork}")
        parser.exit()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    args.argv = argv  # for reports that state the command behind them
    _exit_on_sigterm()
    try:
        return args.func(args)
    except RidgefillError as err:
        print(f"ridgefill: error: {err}", file=sys.stderr)
        return 1


def _exit_on_sigterm() -> None:
    """SIGTERM unwinds like Ctrl-C does, so every half-written output and temporary folder is removed."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
