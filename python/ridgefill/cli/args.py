"""The one list-argument convention of the command line.

Every option that takes several values accepts them space-separated, comma-separated or both:
`--lengths 1024 2048`, `--lengths 1024,2048` and `--lengths 1024, 2048` are the same list.
Integer options also take inclusive ranges: `--splits 15-18` is `--splits 15 16 17 18`.
"""

from __future__ import annotations

import argparse
from typing import Callable, Sequence


class _Flatten(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, tuple(v for group in values for v in group))


def mode(text: str) -> str:
    """A fill mode's name (route.parse_mode: exact, identity, ridge, identity@P, ridge@P)."""
    from .route import parse_mode

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
            from .errors import RidgefillError

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
