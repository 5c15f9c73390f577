"""Generated calibration text: the kinds no pinned corpus ships (records with numbers, logs,
tables, lists, long repetitive documents).

Seeded and deterministic, so the corpus hash pins them like any file. Nothing here uses an
evaluation's template or haystack: no "special magic" phrasing, no question about a value,
no RULER noise sentence. Keys and values are drawn from vocabularies of their own.
"""

from __future__ import annotations

import numpy as np

_FIRST = ("Ada", "Bruno", "Chen", "Dalia", "Emeka", "Freya", "Goran", "Hana", "Ines", "Jonas", "Kofi", "Lena",
          "Mateo", "Nadia", "Oskar", "Priya", "Quinn", "Rosa", "Sami", "Tomas", "Uma", "Viktor", "Wen", "Yara")
_LAST = ("Abbott", "Becker", "Castillo", "Dubois", "Eriksen", "Fischer", "Garcia", "Horvat", "Ivanova", "Jensen",
         "Kowalski", "Larsen", "Moreau", "Novak", "Okafor", "Petrov", "Rossi", "Schmidt", "Tanaka", "Varga")
_CITY = ("Aberdeen", "Bergen", "Cordoba", "Dresden", "Eindhoven", "Florence", "Gdansk", "Hobart", "Izmir", "Kyoto",
         "Lyon", "Malmo", "Nantes", "Oporto", "Perth", "Quebec", "Riga", "Seville", "Tartu", "Utrecht")
_ITEM = ("copper wire", "oak planks", "glass jars", "wool blankets", "steel bolts", "paper reams", "rice sacks",
         "olive oil", "clay bricks", "cotton rolls", "tin cans", "salt blocks", "coffee beans", "rope coils")
_SERVICE = ("auth", "billing", "cache", "gateway", "indexer", "mailer", "queue", "scheduler", "search", "storage")
_LEVEL = ("INFO", "INFO", "INFO", "DEBUG", "WARN", "ERROR")
_EVENT = ("request served", "connection opened", "connection closed", "retrying upstream", "cache miss",
          "job finished", "job started", "timeout waiting for lock", "config reloaded", "disk usage high")
_SUBJECT = ("The committee", "Our team", "The council", "A survey", "The report", "The inspector", "The tenant",
            "Each station", "The museum", "The ferry")
_VERB = ("recorded", "reviewed", "approved", "measured", "counted", "delivered", "postponed", "repaired",
         "inspected", "announced")
_OBJECT = ("the eastern bridge", "three new wells", "the winter schedule", "the harbor lights", "a small library",
           "the old mill", "forty street lamps", "the train timetable", "the rainfall data", "the school roof")


def _name(rng) -> str:
    return f"{rng.choice(_FIRST)} {rng.choice(_LAST)}"


def records(rng: np.random.Generator, n: int) -> str:
    """Key-value records: people, places, ids, amounts, dates."""
    out = []
    for _ in range(n):
        out.append(f"Record {int(rng.integers(10_000, 99_999))}\n"
                   f"  name: {_name(rng)}\n  city: {rng.choice(_CITY)}\n"
                   f"  account: {int(rng.integers(10**6, 10**8))}\n"
                   f"  balance: {rng.uniform(0, 50_000):.2f}\n"
                   f"  opened: {int(rng.integers(1990, 2025))}-{int(rng.integers(1, 13)):02d}-"
                   f"{int(rng.integers(1, 29)):02d}\n")
    return "\n".join(out)


def log(rng: np.random.Generator, n: int) -> str:
    """Service log lines with timestamps, levels, hosts and numbers."""
    t = int(rng.integers(0, 86_400))
    lines = []
    for _ in range(n):
        t += int(rng.integers(0, 40))
        svc = rng.choice(_SERVICE)
        lines.append(f"2024-{int(rng.integers(1, 13)):02d}-{int(rng.integers(1, 29)):02d} "
                     f"{t // 3600 % 24:02d}:{t // 60 % 60:02d}:{t % 60:02d}.{int(rng.integers(0, 1000)):03d} "
                     f"{rng.choice(_LEVEL):5s} {svc}[{int(rng.integers(100, 9999))}] {rng.choice(_EVENT)} "
                     f"id={int(rng.integers(10**5, 10**9))} took={int(rng.integers(1, 5000))}ms "
                     f"host=node-{int(rng.integers(1, 64)):02d}")
    return "\n".join(lines)


def table(rng: np.random.Generator, n: int) -> str:
    """A markdown table and a CSV block of shipments."""
    rows = [(rng.choice(_CITY), rng.choice(_ITEM), int(rng.integers(1, 5000)), rng.uniform(0.5, 900))
            for _ in range(n)]
    md = ["| city | item | quantity | unit price |", "| --- | --- | ---: | ---: |"]
    md += [f"| {c} | {i} | {q} | {p:.2f} |" for c, i, q, p in rows[: n // 2]]
    csv = ["city,item,quantity,unit_price"] + [f"{c},{i},{q},{p:.2f}" for c, i, q, p in rows[n // 2:]]
    return "Shipments by city\n\n" + "\n".join(md) + "\n\nshipments.csv:\n" + "\n".join(csv)


def numbered_list(rng: np.random.Generator, n: int) -> str:
    """A numbered inventory list with quantities and reference numbers."""
    return "Inventory\n" + "\n".join(
        f"{i + 1}. {int(rng.integers(1, 900))} x {rng.choice(_ITEM)}, shelf {rng.choice(list('ABCDEFGH'))}{int(rng.integers(1, 40))}, "
        f"ref {int(rng.integers(10**6, 10**7))}, checked by {_name(rng)}" for i in range(n))


def repetitive(rng: np.random.Generator, n: int) -> str:
    """A short paragraph of our own repeated many times with small changes (minutes of a recurring meeting)."""
    sentences = [f"{rng.choice(_SUBJECT)} {rng.choice(_VERB)} {rng.choice(_OBJECT)}." for _ in range(5)]
    out = []
    for i in range(n):
        out.append(f"Meeting {i + 1}. " + " ".join(sentences))
        if rng.random() < 0.2:
            sentences[int(rng.integers(len(sentences)))] = (
                f"{rng.choice(_SUBJECT)} {rng.choice(_VERB)} {rng.choice(_OBJECT)}.")
    return "\n".join(out)


GENERATORS = {"records": records, "log": log, "table": table, "list": numbered_list, "repetitive": repetitive}
ROWS = {"records": 120, "log": 300, "table": 400, "list": 300, "repetitive": 400}  # ~20-40K characters each


def documents(n_per_kind: int = 12, seed: int = 0) -> list[tuple[str, str, str]]:
    """(kind, name, text) for n_per_kind generated documents of every kind."""
    out = []
    for k, (kind, gen) in enumerate(GENERATORS.items()):
        for i in range(n_per_kind):
            rng = np.random.default_rng([seed, k, i])
            out.append((kind, f"synthetic:{kind}-{i:02d}", gen(rng, ROWS[kind])))
    return out
