"""Per-item results as JSON lines, appended as they are measured; a rerun skips done items.

A record's key is (task, item, variant, split, sinks, tail). A line cut short by a crash
is ignored on reading (that item is measured again).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

KEY_FIELDS = ("task", "item", "variant", "split", "sinks", "tail")


def key_of(rec: dict) -> tuple:
    return tuple(rec.get(f) for f in KEY_FIELDS)


class ResultStore:
    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.records: dict[tuple, dict] = {}
        if self.path.is_file():
            for rec in read_jsonl(self.path):
                self.records[key_of(rec)] = rec

    def __contains__(self, key: tuple) -> bool:
        return key in self.records

    def __len__(self) -> int:
        return len(self.records)

    def get(self, key: tuple) -> dict | None:
        return self.records.get(key)

    def append(self, rec: dict) -> None:
        """Write one record durably (flushed and fsynced) before it counts as done."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps(rec, sort_keys=True)
        with open(self.path, "a+b") as f:
            f.seek(0, os.SEEK_END)
            if f.tell() and not _ends_with_newline(f):
                f.write(b"\n")  # after a torn line, start a fresh one
            f.write(line.encode() + b"\n")
            f.flush()
            os.fsync(f.fileno())
        self.records[key_of(rec)] = rec

    def replace(self, recs: list[dict]) -> None:
        """Put these records in place of those with their keys, rewriting the file atomically."""
        from ..files import atomic_output

        self.records.update((key_of(r), r) for r in recs)
        with atomic_output(self.path) as tmp:
            tmp.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in self.records.values()))

    def all(self) -> list[dict]:
        return list(self.records.values())


def _ends_with_newline(f) -> bool:
    f.seek(-1, os.SEEK_END)
    end = f.read(1) == b"\n"
    f.seek(0, os.SEEK_END)
    return end


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(rec, dict):
                out.append(rec)
    return out
