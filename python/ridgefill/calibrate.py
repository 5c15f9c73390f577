"""Calibration capture: documents -> sufficient statistics, through the exact model.

Backend `llama`: the patched llama.cpp via the bindings (works on quantized GGUFs).
Each document is cut into windows that start with BOS; the first `sinks` rows of every
window are excluded (they run full at inference and their activations are outliers).
Whole documents go either to the training or the held-out statistics, never both.

Sharding (`shard=(i, n)`): every run enumerates the same windows in the same order; shard i
processes the windows whose index is i mod n, so the n shards' merged statistics are the
single run's (the sums in another order).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np

from .corpus import Document, corpus_hash
from .runtime import CAPTURE_ARCHS as SUPPORTED_ARCHS  # builders that record each layer's input
from .stats import CalibrationStats, ModelIdentity, Moments, Provenance
from .errors import RidgefillError


class CalibrationError(RidgefillError, ValueError):
    pass


@dataclass(frozen=True)
class CaptureConfig:
    split: int
    tokens: int = 65536  # training + held-out tokens in total
    heldout_frac: float = 0.125
    window: int = 2048
    sinks: int = 4
    n_batch: int = 512
    threads: int | None = None
    shard: tuple[int, int] = (0, 1)  # (i, n): this run processes windows i, i+n, i+2n, ...
    rpc: str | None = None  # 'host:port,...': capture with the layers on ggml-rpc-servers

    def __post_init__(self):
        i, n = self.shard
        if not (isinstance(i, int) and isinstance(n, int) and 0 <= i < n):
            raise CalibrationError(f"shard must be i/n with 0 <= i < n, not {i}/{n}")


def check_split(identity: ModelIdentity, split: int) -> None:
    if not 1 <= split <= identity.n_layer - 2:
        raise CalibrationError(f"split {split} is out of range for a {identity.n_layer}-layer model: "
                               f"choose 1 <= split <= {identity.n_layer - 2} (at least one late layer)")


def check_arch(identity: ModelIdentity) -> None:
    if identity.arch not in SUPPORTED_ARCHS:
        raise CalibrationError(f"architecture {identity.arch!r} is not supported "
                               f"(supported: {', '.join(sorted(SUPPORTED_ARCHS))})")


def assign(docs: list[Document], cfg: CaptureConfig) -> tuple[list[Document], list[Document]]:
    """Split documents into (train, held-out): every k-th document is held out."""
    every = max(2, round(1 / cfg.heldout_frac)) if cfg.heldout_frac > 0 else 0
    train = [d for i, d in enumerate(docs) if not every or i % every != every - 1]
    held = [d for i, d in enumerate(docs) if every and i % every == every - 1]
    if not held:
        raise CalibrationError(f"need at least {every} documents to hold one out for choosing λ (got {len(docs)})")
    return train, held


def windows(tokens: np.ndarray, bos: int | None, window: int, budget: int, min_len: int) -> Iterator[np.ndarray]:
    """Windows of at most `window` rows over one document, within a token budget.

    With `bos` (models whose vocab adds BOS) every window starts with it, as a prompt would.
    """
    head = [] if bos is None else [bos]
    body = tokens[1:] if bos is not None and len(tokens) and tokens[0] == bos else tokens
    step = window - len(head)
    for start in range(0, len(body), step):
        if budget <= 0:
            return
        piece = body[start : start + min(step, budget - len(head))]
        if len(piece) + len(head) < min_len:
            return
        budget -= len(piece) + len(head)
        yield np.concatenate([head, piece]).astype(np.int32)


# process(window, moments): run one BOS-led window through a backend and update the moments
WindowFn = Callable[[np.ndarray, Moments], None]


def accumulate(stats: CalibrationStats, docs: list[Document], cfg: CaptureConfig, tokenize: Callable[[str], np.ndarray],
               bos: int | None, backend: str, process: WindowFn,
               progress: Callable[[int], None] | None = None) -> CalibrationStats:
    """Feed documents to a capture backend: training and held-out documents, each within its budget."""

    shard, n_shards = cfg.shard

    def run(doc_set: list[Document], mom: Moments, budget: int) -> Provenance:
        prov = Provenance(sinks=cfg.sinks, window=cfg.window, backend=backend)
        used, seen, k = [], 0, 0  # seen: tokens of every shard's windows so far; k: window index
        for doc in doc_set:
            if seen >= budget:
                break
            mine = False
            for w in windows(tokenize(doc.text), bos, cfg.window, budget - seen, cfg.sinks + 16):
                seen += len(w)
                k += 1
                if (k - 1) % n_shards != shard:
                    continue
                process(w, mom)
                prov.n_tokens += len(w)
                mine = True
                if progress:
                    progress(len(w))
            if mine:
                used.append(doc)
        prov.documents = [d.name for d in used]
        prov.corpus_hash = corpus_hash(used)
        return prov

    n_held = int(cfg.tokens * cfg.heldout_frac)
    train_docs, held_docs = assign(docs, cfg)
    stats.provenance = run(train_docs, stats.train, cfg.tokens - n_held)
    stats.heldout_provenance = run(held_docs, stats.heldout, n_held)
    return stats


def capture_llama(model_path, docs: list[Document], cfg: CaptureConfig, identity: ModelIdentity,
                  progress: Callable[[int], None] | None = None) -> CalibrationStats:
    """Run the documents through llama.cpp and accumulate statistics (backend `llama`)."""
    from .runtime import Model

    check_arch(identity)
    check_split(identity, cfg.split)
    model = Model(model_path, n_gpu_layers=999 if cfg.rpc else 0, rpc=cfg.rpc)
    layers = list(range(cfg.split, identity.n_layer))
    ctx = model.context(n_ctx=cfg.window, n_batch=cfg.n_batch, n_ubatch=cfg.n_batch, threads=cfg.threads, capture=layers)

    def process(w: np.ndarray, mom: Moments) -> None:
        ctx.clear()
        ctx.prefill(w, on_chunk=lambda c, start, n: _accumulate(c, start, n, layers, cfg.sinks, mom))

    bos = model.bos if model.add_bos else None
    stats = accumulate(CalibrationStats(identity, cfg.split), docs, cfg, model.tokenize, bos, "llama", process, progress)
    return check_rows(stats, cfg)


def _accumulate(ctx, start: int, n: int, layers: list[int], sinks: int, mom: Moments) -> None:
    keep = slice(max(0, sinks - start), n)
    x = ctx.layer_input(layers[0])[keep]
    ys = [ctx.layer_input(il)[keep] for il in layers[1:]]
    mom.update(x, ys)


def check_rows(stats: CalibrationStats, cfg: CaptureConfig) -> CalibrationStats:
    """Refuse statistics without rows; warn when there are too few rows for n_embd. A shard's rows are
    checked once merged (fitting refuses empty statistics), so a shard may hold none."""
    if cfg.shard[1] > 1:
        return stats
    if stats.train.n == 0 or stats.heldout.n == 0:
        raise CalibrationError("calibration produced no rows (documents too short or token budget too small)")
    d = stats.identity.n_embd
    if stats.train.n < 4 * d:
        warnings.warn(f"only {stats.train.n} calibration rows for n_embd={d}: the covariance is rank-deficient "
                      "and λ (chosen on held-out rows) carries the fit; use more --tokens", stacklevel=2)
    return stats
