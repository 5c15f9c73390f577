"""The one base of every error RidgeFill reports to its user.

`ridgefill` (the CLI) prints a RidgefillError as one line and exits 1; any other exception is a
bug and keeps its traceback. Each error also derives from the builtin it refines, so callers
that catch ValueError or FileNotFoundError keep working.
"""

from __future__ import annotations


class RidgefillError(Exception):
    """Bad input, a missing or corrupt file, a tool or download that failed: the user can fix it."""


class InputError(RidgefillError, ValueError):
    """An argument, a file's content or a model that does not fit what was asked."""


class MissingFile(RidgefillError, FileNotFoundError):
    """A file that should be there is not."""


class LoadError(RidgefillError, RuntimeError):
    """llama.cpp refused a model or a context (its log line says why)."""
