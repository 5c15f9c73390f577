"""`ridgefill` command line: argument parsing and output only; logic lives in the modules."""

from __future__ import annotations

import argparse
import json
import sys

from . import fetch, models


def _cmd_model_fetch(args) -> int:
    path = models.fetch_model(args.name, offline=args.offline)
    print(path)
    return 0


def _cmd_model_list(args) -> int:
    for name, e in sorted(models.REGISTRY.items()):
        cached = models.cached_path(name)
        mark = "cached" if cached.is_file() else "not fetched"
        default = " (default)" if name == models.DEFAULT_MODEL else ""
        print(f"{name}{default}\tarch={e.arch}\t{e.licence}\t{mark}")
    return 0


def _cmd_info(args) -> int:
    from .runtime import Model, version

    info = Model(args.gguf).info()
    info["libllama"] = version()
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        for k, v in info.items():
            if k != "metadata_keys":
                print(f"{k:12s} {v}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="ridgefill", description="Split prefill for llama.cpp with closed-form ridge maps.")
    sub = ap.add_subparsers(dest="cmd", required=True)

    m = sub.add_parser("model", help="pinned default models").add_subparsers(dest="model_cmd", required=True)
    f = m.add_parser("fetch", help="download, verify and cache a model; print the GGUF path")
    f.add_argument("name", nargs="?", default=models.DEFAULT_MODEL, choices=sorted(models.REGISTRY))
    f.add_argument("--offline", action="store_true", help="use the cache only")
    f.set_defaults(func=_cmd_model_fetch)
    m.add_parser("list", help="known models").set_defaults(func=_cmd_model_list)

    i = sub.add_parser("info", help="load a GGUF and print its shape")
    i.add_argument("gguf")
    i.add_argument("--json", action="store_true")
    i.set_defaults(func=_cmd_info)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (fetch.FetchError, models.UnknownModel, FileNotFoundError, ValueError, RuntimeError) as err:
        print(f"ridgefill: error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
