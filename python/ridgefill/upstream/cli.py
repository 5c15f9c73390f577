"""`ridgefill upstream` and `python -m ridgefill.upstream`: the fork's tree, series and rebase commands."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import RidgefillError
from . import cuda_toolkit, rebase, series_check, series_doc, tree


def add_commands(sub) -> None:
    """The subcommands, on `sub` (subparsers with dest `upstream_cmd`); `ridgefill upstream` shares them."""
    sub.add_parser("fetch", help="download and verify the pinned sdist; print its path")
    p = sub.add_parser("prepare", help="build/llama.cpp = upstream + ggml-patches/")
    p.add_argument("--force", action="store_true", help="drop local commits/changes in the tree")
    p.add_argument("--tree", type=Path)
    e = sub.add_parser("export", help="write the tree's commits back to ggml-patches/")
    e.add_argument("--tree", type=Path)
    sub.add_parser("status", help="is the tree in step with ggml-patches/?")
    sub.add_parser("build-commit", help="print the build identifier")
    for module in (rebase, series_check, series_doc, cuda_toolkit):
        module.add_command(sub)


def run(args) -> int:
    try:
        if args.upstream_cmd == "fetch":
            print(tree.fetch_sdist())
        elif args.upstream_cmd == "prepare":
            print(tree.prepare(args.tree, force=args.force))
        elif args.upstream_cmd == "export":
            for p in tree.export(args.tree):
                print(p)
        elif args.upstream_cmd == "status":
            print(tree.status())
        elif args.upstream_cmd == "build-commit":
            print(tree.build_commit())
        elif args.upstream_cmd == "rebase":
            return rebase.run(args)
        elif args.upstream_cmd == "check-series":
            return series_check.run(args)
        elif args.upstream_cmd == "series-doc":
            return series_doc.run(args)
        elif args.upstream_cmd == "cuda-toolkit":
            return cuda_toolkit.run(args)
    except RidgefillError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ridgefill.upstream", description=tree.__doc__.split("\n")[0])
    add_commands(ap.add_subparsers(dest="upstream_cmd", required=True))
    return run(ap.parse_args(argv))
