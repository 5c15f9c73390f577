"""Paired bootstrap over clusters (documents or items) for the difference of two modes.

Both modes are measured on the same items; a replicate resamples cluster indices with
replacement (the same draw for both modes) and takes the mean difference over every item
of the drawn clusters. The interval is the percentile interval of the replicates.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np
from ..errors import InputError

N_BOOT = 10_000
LEVEL = 0.95


@dataclass
class Interval:
    mean: float  # mean difference a - b over all items
    lo: float
    hi: float
    n_items: int
    n_clusters: int
    level: float = LEVEL
    n_boot: int = N_BOOT

    def to_dict(self) -> dict:
        return asdict(self)


def cluster_sums(diff: np.ndarray, clusters: Sequence | None) -> tuple[np.ndarray, np.ndarray]:
    """Per-cluster sums of the differences and item counts; no clusters: one item each."""
    if clusters is None:
        return diff, np.ones(len(diff))
    labels, inv = np.unique(np.asarray(clusters, dtype=str), return_inverse=True)
    return np.bincount(inv, weights=diff, minlength=len(labels)), np.bincount(inv, minlength=len(labels)).astype(float)


def paired_bootstrap(a, b, clusters: Sequence | None = None, n_boot: int = N_BOOT, seed: int = 0,
                     level: float = LEVEL) -> Interval:
    """Percentile interval of mean(a - b), resampling clusters; a[i] and b[i] are one item."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1 or len(a) == 0:
        raise InputError(f"need two equal-length, non-empty 1-D samples (got {a.shape} and {b.shape})")
    if clusters is not None and len(clusters) != len(a):
        raise InputError(f"{len(clusters)} cluster labels for {len(a)} items")
    sums, counts = cluster_sums(a - b, clusters)
    reps = replicates(sums, counts, n_boot, np.random.default_rng(seed))
    tail = 100 * (1 - level) / 2
    lo, hi = np.percentile(reps, [tail, 100 - tail])
    return Interval(float((a - b).mean()), float(lo), float(hi), len(a), len(sums), level, n_boot)


def stratified_paired_bootstrap(strata: Sequence, n_boot: int = N_BOOT, seed: int = 0,
                                level: float = LEVEL) -> Interval:
    """Percentile interval of the mean over strata of each stratum's mean(a - b): a task-averaged
    score (RULER's average) whose items are resampled within their own task. `strata` holds one
    1-D array of paired differences a - b per stratum."""
    strata = [np.asarray(s, dtype=np.float64) for s in strata]
    if not strata or any(s.ndim != 1 or len(s) == 0 for s in strata):
        raise InputError("need at least one stratum, each a non-empty 1-D sample of differences")
    rng = np.random.default_rng(seed)
    reps = np.zeros(n_boot)
    for s in strata:
        for start in range(0, n_boot, 1000):
            n = min(1000, n_boot - start)
            reps[start : start + n] += s[rng.integers(0, len(s), size=(n, len(s)))].mean(axis=1) / len(strata)
    tail = 100 * (1 - level) / 2
    lo, hi = np.percentile(reps, [tail, 100 - tail])
    n_items = sum(len(s) for s in strata)
    return Interval(float(np.mean([s.mean() for s in strata])), float(lo), float(hi), n_items, n_items, level, n_boot)


def replicates(sums: np.ndarray, counts: np.ndarray, n_boot: int, rng: np.random.Generator,
               block: int = 1000) -> np.ndarray:
    """Mean difference of each replicate, drawn in blocks to bound memory."""
    out = np.empty(n_boot)
    for start in range(0, n_boot, block):
        idx = rng.integers(0, len(sums), size=(min(block, n_boot - start), len(sums)))
        out[start : start + len(idx)] = sums[idx].sum(axis=1) / counts[idx].sum(axis=1)
    return out


REFERENCES = ("exact", "exact-cut")


def pairs(variants: Sequence[str]) -> list[tuple[str, str]]:
    """(a, b) pairs to report as a - b: every other variant against exact (and against
    exact-cut, when measured), then ridge - identity, then each routed variant (`mode@P`)
    against its mode without routing (and a routed ridge against identity)."""
    out = [(v, "exact") for v in variants if v != "exact" and "exact" in variants]
    if "exact-cut" in variants:
        out += [(v, "exact-cut") for v in variants if v not in REFERENCES]
    if "ridge" in variants and "identity" in variants:
        out.append(("ridge", "identity"))
    for v in (v for v in variants if "@" in v):
        base = v.split("@")[0]
        out += [(v, b) for b in (base, "identity" if base == "ridge" else None) if b in variants]
    return out
