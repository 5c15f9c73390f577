"""Argument types every entry point shares: the one list-argument convention, shards and shares.

Every option that takes several values accepts them space-separated, comma-separated or both:
`--lengths 1024 2048`, `--lengths 1024,2048` and `--lengths 1024, 2048` are the same list.
Integer options also take inclusive ranges: `--splits 15-18` is `--splits 15 16 17 18`.
"""

from __future__ import annotations

import argparse
import math
from typing import Callable, Sequence


class _Flatten(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, tuple(v for group in values for v in group))


def mode(text: str) -> str:
    """A fill mode's name (route.parse_mode: exact, identity, ridge, identity@P, ridge@P, and ^Q selecting)."""
    from ..fit.route import parse_mode

    parse_mode(text)
    return text


def list_option(p: argparse.ArgumentParser, flag: str, item: Callable = str, choices: Sequence | None = None,
                **kwargs) -> argparse.Action:
    """Add `flag` taking one or more values of type `item` (optionally from `choices`), as a tuple."""
    def parse(text: str) -> list:
        out = []
        for x in (x.strip() for x in text.split(",") if x.strip()):
            for v in _range(x) if item is int and "-" in x[1:] else [_one(x)]:
                if choices is not None and v not in choices:
                    raise argparse.ArgumentTypeError(f"{v!r} is not one of {', '.join(map(str, choices))}")
                out.append(v)
        return out

    def _one(x: str):
        try:
            return item(x)
        except ValueError as err:
            from ..errors import RidgefillError

            why = str(err) if isinstance(err, RidgefillError) else f"{x!r} is not a valid {item.__name__}"
            raise argparse.ArgumentTypeError(why) from None

    def _range(x: str) -> list[int]:
        lo, _, hi = x.partition("-")
        a, b = _one(lo), _one(hi)
        if b < a:
            raise argparse.ArgumentTypeError(f"range {x!r} is empty")
        return list(range(a, b + 1))

    if "default" in kwargs and kwargs["default"] is not None:
        kwargs["default"] = tuple(kwargs["default"])
    return p.add_argument(flag, nargs="+", type=parse, action=_Flatten, **kwargs)


def shard(text: str) -> tuple[int, int]:
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected I/N, e.g. 0/2, not {text!r}") from None
    if not 0 <= i < n:
        raise argparse.ArgumentTypeError(f"shard {text}: need 0 <= I < N")
    return i, n


def _checked(text: str, parse: Callable, ok: Callable, need: str, what: str = "a number"):
    try:
        value = parse(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, not {text!r}") from None
    if not ok(value):
        raise argparse.ArgumentTypeError(f"{text}: need {need}")
    return value


def share(text: str) -> float:
    return _checked(text, float, lambda v: math.isfinite(v) and 0 <= v < 1, "a share in [0, 1)")


def positive_float(text: str) -> float:
    return _checked(text, float, lambda v: math.isfinite(v) and v > 0, "a finite number > 0")


def window_rows(text: str) -> int:
    """Rows back a window map reads: 1..16 (the fork's limit)."""
    return _checked(text, int, lambda v: 1 <= v <= 16, "rows in [1, 16]", "a row count")


def positive_int(text: str) -> int:
    return _checked(text, int, lambda v: v > 0, "an integer > 0", "an integer")


def gpu_layers(text: str) -> int:
    """-ngl N: a layer count >= 0, or -1 (llama.cpp's default: every layer on the devices there are)."""
    return _checked(text, int, lambda v: v >= -1, "N >= 0, or -1 for every layer", "a layer count or -1")


def add_gpu_layers(p: argparse.ArgumentParser, *aliases: str) -> argparse.Action:
    """-ngl/--n-gpu-layers, as llama.cpp's tools spell and default it, on a command that loads a model."""
    return p.add_argument("-ngl", "--n-gpu-layers", *aliases, dest="n_gpu_layers", type=gpu_layers, default=-1,
                          metavar="N", help="layers on the GPU or RPC devices (default -1: every layer, as llama.cpp's "
                                            "tools; 0: CPU only). A CPU-only build has no devices")


def tensor_split(text: str) -> str:
    """-ts: auto, even, or llama.cpp's layer shares per device (bench.pipeline.parse_tensor_split)."""
    from ..bench.pipeline import parse_tensor_split
    from ..errors import InputError

    try:
        return parse_tensor_split(text)
    except InputError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def add_tensor_split(p: argparse.ArgumentParser) -> argparse.Action:
    """-ts/--tensor-split of a command that measures prefill over several devices."""
    return p.add_argument("-ts", "--tensor-split", type=tensor_split, default="auto", metavar="auto|even|N/M/..",
                          help="layers per device when the prefill is pipelined (every layer on more than one device): "
                               "auto (default) places each mode's layers so that the devices share its work evenly, "
                               "even keeps llama.cpp's placement by free memory, N/M/.. is passed on as llama.cpp's -ts")
