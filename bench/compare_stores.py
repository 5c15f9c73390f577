#!/usr/bin/env python3
"""Ridge from other fits against one store's exact and identity, on the items all of them measured.

    bench/compare_stores.py BASE_STORE OTHER_STORE [OTHER_STORE ...]

BASE_STORE holds exact, identity and ridge records (`ridgefill eval needle --out`); each OTHER_STORE
holds ridge records of another fit on a copy of BASE_STORE's items. Prints each fit's mean needle
score and ridge − identity, ridge − exact and ridge − (base ridge) with 95 % paired-bootstrap
intervals (10^4 replicates, seed 0), as bench/results/fit-fix-s20.md reports them.
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

from ridgefill.evals import stats  # noqa: E402


def scores(store: str, variant: str) -> dict[str, tuple[float, str]]:
    recs = (json.loads(line) for line in open(Path(store) / "results.jsonl"))
    return {r["item"]: (r["score"], r["cluster"]) for r in recs if r["variant"] == variant}


def diff(a: dict, b: dict, common: list[str]) -> str:
    iv = stats.paired_bootstrap([a[i][0] for i in common], [b[i][0] for i in common], [a[i][1] for i in common])
    return f"{iv.mean:+.1f} [{iv.lo:+.1f}, {iv.hi:+.1f}]"


def main(base: str, others: list[str]) -> None:
    exact, identity, ridge0 = (scores(base, v) for v in ("exact", "identity", "ridge"))
    for store in [base, *others]:
        ridge = scores(store, "ridge")
        common = sorted(set(exact) & set(identity) & set(ridge0) & set(ridge))
        mean = lambda d: sum(d[i][0] for i in common) / len(common)  # noqa: E731
        print(f"{store}: n={len(common)} exact {mean(exact):.1f} identity {mean(identity):.1f} ridge {mean(ridge):.1f}"
              f" | ridge-identity {diff(ridge, identity, common)} | ridge-exact {diff(ridge, exact, common)}"
              f" | ridge-base ridge {diff(ridge, ridge0, common)}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
