"""Items as JSON (tokens as lists), with the parameters that generated them.

A saved file lets a run be repeated exactly, on any machine, without the generator.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .loss import LossItem
from .needle import NeedleItem
from .ruler import RulerItem
from ..errors import InputError, RidgefillError

FORMAT = 1
KINDS = {"needle": NeedleItem, "loss": LossItem, "ruler": RulerItem}


class ItemsMismatch(RidgefillError, ValueError):
    pass


def save(path: str | os.PathLike, kind: str, items: list, params: dict) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"format": FORMAT, "kind": kind, "params": params, "items": [it.to_dict() for it in items]}
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(doc))
    tmp.replace(path)
    return path


def load(path: str | os.PathLike) -> tuple[str, list, dict]:
    """(kind, items, params) of a saved file."""
    doc = json.loads(Path(path).read_text())
    if doc.get("format") != FORMAT or doc.get("kind") not in KINDS:
        raise InputError(f"{path}: not a ridgefill items file (format {FORMAT})")
    cls = KINDS[doc["kind"]]
    return doc["kind"], [cls.from_dict(d) for d in doc["items"]], doc["params"]


def load_or_make(path: str | os.PathLike, kind: str, params: dict, make, per_index: bool = False) -> list:
    """The items saved at `path` if they were made with `params`; else make() them and save.

    per_index: item i depends on its index, not on how many were asked for (RULER's), so a saved file made
    with other `n_items` serves too: its first n_items, or all of it plus make(start) for the items after it.
    """
    path = Path(path)
    if not path.is_file():
        items = make(0) if per_index else make()
        save(path, kind, items, params)
        return items
    got_kind, items, got = load(path)
    if got_kind == kind and got == params:
        return items
    if got_kind == kind and per_index and _except_count(got) == _except_count(params):
        want = params["n_items"]
        if len(items) < want:
            items += make(len(items))
            save(path, kind, items, params)
        return items[:want]
    raise ItemsMismatch(f"{path} holds items made with other parameters ({got}); "
                        f"use another output directory, or delete it, to run with {params}")


def _except_count(params: dict) -> dict:
    return {k: v for k, v in params.items() if k != "n_items"}
