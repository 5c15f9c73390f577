"""The command line a report states: the one that measures it and, rerun, resumes it.

Given the argv a command ran with: the base as its fetch command (a registry model) or file name,
the work directory relative to here, an option given twice as its last (argparse's rule; bench/frontier
passes its own --work-dir and --title before the caller's), and without the flags that change no figure.
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path
from typing import Sequence

NOT_IN_COMMAND = ("--report-only", "--quiet", "-o", "--output")


def _base_arg(base: Path) -> str:
    from ..sources import models

    for name in models.REGISTRY:
        if base.absolute() == models.cached_path(name).absolute():
            return f"$(ridgefill model fetch {name})"
    return base.name


def _groups(argv: Sequence[str], base: Path) -> list[list[str]]:
    """argv as [flag, its values...] groups; the base and the subcommand are groups of their own."""
    out: list[list[str]] = []
    for a in argv:
        if not out or a == str(base) or (a.startswith("-") and not re.match(r"-[\d.]", a)) or out[-1][0] == str(base):
            out.append([a])
        else:
            out[-1].append(a)
    return out


def command_line(argv: Sequence[str], base: Path, work: Path) -> str:
    groups = _groups(argv, base)
    flag = lambda g: g[0].split("=")[0]  # noqa: E731
    last = {flag(g): i for i, g in enumerate(groups)}
    out = []
    for i, g in enumerate(groups):
        if flag(g) in NOT_IN_COMMAND or (g[0].startswith("-") and last[flag(g)] != i):
            continue
        for a in g:
            if a == str(base):
                out.append(_base_arg(base))
            elif Path(a).absolute() == work.absolute():
                out.append(os.path.relpath(work.absolute()))
            else:
                out.append(a)
    return "ridgefill " + " ".join(a if a.startswith("$(") else shlex.quote(a) for a in out)
