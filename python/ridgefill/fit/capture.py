"""Calibration capture: documents -> sufficient statistics, through the exact model.

Backend `llama`: the patched llama.cpp via the bindings (works on quantized GGUFs).
Windows that start with BOS are drawn across the documents (calib_windows); the first
`sinks` rows of every window are excluded (they run full at inference and their
activations are outliers). Whole documents go either to the training or the held-out
statistics, never both: every k-th document of each kind is held out.

Sharding (`shard=(i, n)`): every run enumerates the same windows in the same order; shard i
processes the windows whose index is i mod n, so the n shards' merged statistics are the
single run's (the sums in another order).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Callable

import numpy as np

from . import windows as calib_windows
from ..sources.corpus import Document, corpus_hash
from ..runtime import supported_archs  # builders that record each layer's input
from ..format.identity import ModelIdentity
from ..format.write import Defaults
from .defaults import DEFAULT_TOKENS
from .kv_stats import KVSink, KVTargets
from .stats import MAX_WINDOW, CalibrationStats, MapInputs, Moments, Provenance
from ..errors import RidgefillError


class CalibrationError(RidgefillError, ValueError):
    pass


@dataclass(frozen=True)
class CaptureConfig:
    split: int
    tokens: int = DEFAULT_TOKENS  # training + held-out tokens in total
    heldout_frac: float = 0.125
    window: int = 2048
    min_piece: int = 128  # shortest document piece in a window (calib_windows)
    seed: int = 0  # window sampling
    sinks: int = Defaults.sink_rows
    n_batch: int = 512
    threads: int | None = None
    shard: tuple[int, int] = (0, 1)  # (i, n): this run processes windows i, i+n, i+2n, ...
    rpc: str | None = None  # 'host:port,...': capture with the layers on ggml-rpc-servers
    n_gpu_layers: int = -1  # layers on the GPU or RPC devices (-1: all, as llama.cpp's tools; 0: CPU only)
    kv: bool = False  # also the late attention layers' K and V as targets (kv_stats.py)

    def __post_init__(self):
        i, n = self.shard
        if not (isinstance(i, int) and isinstance(n, int) and 0 <= i < n):
            raise CalibrationError(f"shard must be i/n with 0 <= i < n, not {i}/{n}")


def check_split(identity: ModelIdentity, split: int) -> None:
    if not 1 <= split <= identity.n_layer - 2:
        raise CalibrationError(f"split {split} is out of range for a {identity.n_layer}-layer model: "
                               f"choose 1 <= split <= {identity.n_layer - 2} (at least one late layer)")


def check_arch(identity: ModelIdentity) -> None:
    if identity.arch not in supported_archs():
        raise CalibrationError(f"architecture {identity.arch!r} is not supported "
                               f"(supported: {', '.join(sorted(supported_archs()))})")


def assign(docs: list[Document], cfg: CaptureConfig) -> tuple[list[Document], list[Document]]:
    """Split documents into (train, held-out): every k-th document of each kind is held out."""
    every = max(2, round(1 / cfg.heldout_frac)) if cfg.heldout_frac > 0 else 0
    train, held, seen = [], [], {}
    for d in docs:
        i = seen[d.kind] = seen.get(d.kind, -1) + 1
        (held if every and i % every == every - 1 else train).append(d)
    if not held:
        raise CalibrationError(f"need at least {every} documents to hold one out for choosing λ (got {len(docs)})")
    return train, held


# process(window, moments): run one BOS-led window through a backend and update the moments,
# given as (MapInputs, Moments) pairs: one per split, each fed from the same forward pass (update_all)
WindowFn = Callable[[np.ndarray, list[tuple[MapInputs, Moments]]], None]


def update_all(layer_input: Callable[[int], np.ndarray], earlier: Callable[[int, int], np.ndarray],
               moms: list[tuple[MapInputs, Moments]]) -> None:
    """Update each split's moments from one window's layer inputs (rows already past the sinks);
    earlier(split, n) holds the split layer's input at rows t-1..t-n of each row (earlier_rows)."""
    for inp, mom in moms:
        x = inp.x(layer_input(inp.split), earlier(inp.split, inp.n_earlier))
        mom.update(x, [layer_input(il) for il in range(inp.split + 1, inp.split + 1 + mom.m)])


def earlier_rows(h: np.ndarray, start: int, n: int, before: np.ndarray | None = None) -> np.ndarray:
    """Rows t-1 .. t-n of each row of h[start:], side by side ((rows, n*d)), with `before` (rows before h[0],
    the end of an earlier chunk of the same window, oldest first) in front. Back from a window's first row,
    that row stands for the rows before it, as in the fork's fill graph."""
    c = h if before is None else np.concatenate([before.reshape(-1, h.shape[1]), h])
    t = np.arange(start, len(h)) + (len(c) - len(h))
    return np.concatenate([c[np.maximum(t - j, 0)] for j in range(1, n + 1)], axis=1)


def previous_rows(h: np.ndarray, start: int, before: np.ndarray | None = None) -> np.ndarray:
    """The predecessors of rows h[start:] (earlier_rows, one row back)."""
    return earlier_rows(h, start, 1, before)


def accumulate(stats: list[CalibrationStats], docs: list[Document], cfg: CaptureConfig,
               tokenize: Callable[[str], np.ndarray], bos: int | None, backend: str, process: WindowFn,
               progress: Callable[[int], None] | None = None,
               kv: dict[int, KVTargets] | None = None) -> list[CalibrationStats]:
    """Feed documents to a capture backend: training and held-out documents, each within its budget.
    Every CalibrationStats (one per split) sees the same windows; `kv` (split -> its K/V targets) also feeds
    the K/V sums of the statistics that hold them."""

    def sinks(part: str) -> list:
        out = []
        for st in stats:
            mom = getattr(st, part)
            out.append((st.inputs, mom if st.kv is None else KVSink(mom, getattr(st.kv, part), kv[st.split])))
        return out

    shard, n_shards = cfg.shard

    def run(doc_set: list[Document], moms: list[tuple[int, Moments]], budget: int, seed: int) -> Provenance:
        prov = Provenance(sinks=cfg.sinks, window=cfg.window, backend=backend)
        used: dict[str, Document] = {}
        names = {d.name: d for d in doc_set}
        for k, w in enumerate(calib_windows.plan(doc_set, tokenize, bos, cfg.window, budget, cfg.min_piece, seed)):
            if k % n_shards != shard or len(w.tokens) < cfg.sinks + 16:
                continue
            process(w.tokens, moms)
            prov.n_tokens += len(w.tokens)
            used.update((n, names[n]) for n in w.documents)
            if progress:
                progress(len(w.tokens))
        prov.documents = sorted(used)
        prov.kinds = [used[n].kind for n in prov.documents]
        prov.corpus_hash = corpus_hash([used[n] for n in prov.documents])
        return prov

    n_held = int(cfg.tokens * cfg.heldout_frac)
    train_docs, held_docs = assign(docs, cfg)
    train = run(train_docs, sinks("train"), cfg.tokens - n_held, cfg.seed)
    held = run(held_docs, sinks("heldout"), n_held, cfg.seed + 1)
    for st in stats:
        st.provenance, st.heldout_provenance = train, held
    return stats


def capture_llama(model_path, docs: list[Document], cfg: CaptureConfig, identity: ModelIdentity,
                  progress: Callable[[int], None] | None = None,
                  splits: list[int] | None = None, window: tuple[np.ndarray, int] | None = None) -> list[CalibrationStats]:
    """Run the documents through llama.cpp and accumulate statistics (backend `llama`): one
    CalibrationStats per split (default [cfg.split]), all from one forward pass per window.
    `window` (basis, W): window statistics (one split only)."""
    from ..runtime import Model

    splits = sorted(set(splits or [cfg.split]))
    check_arch(identity)
    for s in splits:
        check_split(identity, s)
    model = Model(model_path, n_gpu_layers=cfg.n_gpu_layers, rpc=cfg.rpc)
    layers = list(range(splits[0], identity.n_layer))
    ctx = model.context(n_ctx=cfg.window, n_batch=cfg.n_batch, n_ubatch=cfg.n_batch, threads=cfg.threads, capture=layers)

    def process(w: np.ndarray, moms: list[tuple[MapInputs, Moments]]) -> None:
        ctx.clear()
        last: dict[int, np.ndarray] = {}  # split -> its input at the previous chunks' last rows
        ctx.prefill(w, on_chunk=lambda c, start, n: _accumulate(c, start, n, cfg.sinks, moms, last))

    bos = model.bos if model.add_bos else None
    if window is not None and len(splits) != 1:
        raise CalibrationError("window statistics are captured for one split at a time")
    basis, w_rows = window or (None, 0)
    stats = [CalibrationStats(identity, s, basis=basis, window=w_rows) for s in splits]
    kv = kv_targets(model_path, stats) if cfg.kv else None
    return [check_rows(st, cfg) for st in accumulate(stats, docs, cfg, model.tokenize, bos, "llama", process, progress, kv)]


def kv_targets(model_path, stats: list[CalibrationStats]) -> dict[int, KVTargets]:
    """Each split's K/V targets (its late attention layers, from the GGUF's weights), its statistics made to
    hold their sums."""
    from .attention import attention_layers

    attn = attention_layers(model_path, list(range(min(st.split for st in stats) + 1, stats[0].identity.n_layer)))
    out = {}
    for st in stats:
        late = {il: a for il, a in attn.items() if il > st.split}
        if not late:
            raise CalibrationError(f"split {st.split} leaves no late attention layer for K/V maps")
        out[st.split] = KVTargets(late, st.split)
        st.kv = out[st.split].stats(st.inputs.width(st.identity.n_embd))
    return out


def _accumulate(ctx, start: int, n: int, sinks: int, moms: list[tuple[MapInputs, Moments]],
                last: dict[int, np.ndarray]) -> None:
    k = max(0, sinks - start)
    full: dict[int, np.ndarray] = {}

    def rows(il: int) -> np.ndarray:
        if il not in full:
            full[il] = ctx.layer_input(il)
        return full[il]

    if k < n:
        update_all(lambda il: rows(il)[k:], lambda s, m: earlier_rows(rows(s), k, m, last.get(s)), moms)
    for inp, _ in moms:
        s = inp.split
        last[s] = rows(s)[-MAX_WINDOW:].copy() if s not in last else np.concatenate([last[s], rows(s)])[-MAX_WINDOW:]


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
