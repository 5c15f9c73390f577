"""The fit pipeline: corpus -> statistics -> maps -> augmented GGUF, with progress."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, replace
from pathlib import Path

from ..sources import corpus
from .. import format as fmt
import numpy as np

from . import key_space, kv_fit, ridge, window_fit
from .capture import CaptureConfig, capture_llama, check_arch, check_split
from .stats import CalibrationStats, merge_files
from ..errors import InputError


BASIS_TOKENS = 8192  # tokens of the capture a window basis comes from, when no statistics are given
RECIPE = 3  # bump when a fit computes something else from the same corpus and settings (2: identity blend, 3: lagged maps)


def recipe_key(cfg: CaptureConfig) -> str:
    """A short hash of what a default-corpus fit depends on besides the base: the corpus, the
    capture settings and RECIPE (cached fits are keyed by it: demo, tune)."""
    settings = {k: v for k, v in asdict(cfg).items()
                if k not in ("threads", "rpc", "n_gpu_layers") and not (k == "kv" and not v)}
    blob = json.dumps([RECIPE, corpus.corpus_hash(corpus.default_calibration()), settings], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:10]


def documents(paths: list[str] | None) -> list[corpus.Document]:
    return corpus.from_paths(paths) if paths else corpus.default_calibration()


def calibrate(base: str | os.PathLike, cfg: CaptureConfig, corpus_paths: list[str] | None = None,
              backend: str = "llama", hf_path: str | None = None, show_progress: bool = True,
              window: tuple[np.ndarray, int] | None = None) -> CalibrationStats:
    """Statistics for cfg.split; `window` (basis, W): window statistics (window_fit.py)."""
    if backend not in ("llama", "hf"):
        raise InputError(f"unknown capture backend {backend!r} (llama, hf)")
    if (window is not None or cfg.kv) and backend != "llama":
        raise InputError("window and K/V statistics are captured through llama.cpp (--backend llama)")
    return calibrate_splits(base, cfg, [cfg.split], corpus_paths, backend, hf_path, show_progress, window)[0]


def window_basis(stats: CalibrationStats, q: int) -> np.ndarray:
    """The basis window statistics project earlier rows on: the one `stats` were captured with, else the top q
    principal directions (d, q) of the split state over their training rows."""
    if stats.inputs.basis is not None:
        return stats.inputs.basis
    d = stats.identity.n_embd
    if not 1 <= q <= d:
        raise InputError(f"a window basis of {q} directions: choose 1..{d} (n_embd)")
    mom = stats.train.head(d)
    mu = mom.sum_x / mom.n
    lam, vec = np.linalg.eigh(mom.xtx / mom.n - np.outer(mu, mu))
    return np.ascontiguousarray(vec[:, ::-1][:, :q])


def calibrate_splits(base: str | os.PathLike, cfg: CaptureConfig, splits: list[int],
                     corpus_paths: list[str] | None = None, backend: str = "llama", hf_path: str | None = None,
                     show_progress: bool = True, window: tuple[np.ndarray, int] | None = None) -> list[CalibrationStats]:
    """Statistics for several splits from one capture pass (llama backend), in ascending split order."""
    from tqdm import tqdm

    identity = fmt.identity_of(base)
    check_arch(identity)
    for s in splits:
        check_split(identity, s)
    docs = documents(corpus_paths)
    shard = "" if cfg.shard[1] == 1 else f", shard {cfg.shard[0]}/{cfg.shard[1]}"
    with tqdm(total=cfg.tokens // cfg.shard[1], unit="tok", desc=f"calibrate ({backend}{shard})", disable=not show_progress) as bar:
        if backend == "hf":
            if len(splits) != 1:
                raise InputError("the hf backend captures one split per pass")
            return [_capture_hf(base, hf_path, docs, replace(cfg, split=splits[0]), identity, bar.update)]
        return capture_llama(base, docs, cfg, identity, progress=bar.update, splits=splits, window=window)


def _capture_hf(base, hf_path, docs, cfg, identity, progress):
    from .capture_hf import capture_hf, load_hf
    from ..runtime import Model

    tok_model = Model(base, n_gpu_layers=0)  # the GGUF's tokenizer, so both backends see the same rows
    if hf_path is None:  # transformers dequantizes the GGUF itself
        model = load_hf(str(Path(base).parent), gguf_file=Path(base).name)
    else:
        model = load_hf(hf_path)
    return capture_hf(model, tok_model.tokenize, tok_model.bos if tok_model.add_bos else None, docs, cfg, identity, progress=progress)


def load_stats(paths: list[str]) -> CalibrationStats:
    return merge_files(paths)


def key_projections(base, stats: CalibrationStats) -> dict:
    """The late layers' key projections (key_space.projections) of the model the statistics describe."""
    bad = stats.identity.mismatch(fmt.identity_of(base))
    if bad:
        raise InputError(f"the statistics describe another model than {base}: " + "; ".join(bad))
    return key_space.projections(base, stats.layers)


def fit_and_pack(base, stats: CalibrationStats, out, map_type: str = "f16",
                 defaults: fmt.Defaults = fmt.Defaults(), maps_out=None, blend: bool = True, lam: float | None = None,
                 lag_gain: float | None = ridge.DEFAULT_LAG_GAIN, lag_keys: bool = False,
                 window_gain: float = window_fit.DEFAULT_WINDOW_GAIN,
                 ranks=window_fit.DEFAULT_RANKS, on_window=None, maps_only: bool = False,
                 kind: str = "input") -> ridge.Maps:
    """Fit, save and fmt. `lam` fixes λ/scale for every layer instead of choosing it on held-out rows;
    `lag_gain` None fits per-row maps only, `lag_keys` lets the keys' held-out error decide the lag too
    (ridge.fit); each layer's key error is measured through the base's key projections either way. Window
    statistics also get window maps where they pay (window_fit.add_window: `window_gain`, `ranks`); what it
    tried goes to on_window(WindowReport). `maps_only` writes `out` as a maps file (beside the base) rather than an
    augmented GGUF. Statistics with K/V sums also get K/V maps (kv_fit.py), kept in `maps_out` and reported;
    `kind` "kv" writes them into the GGUF in place of the input maps."""
    grid = ridge.DEFAULT_GRID if lam is None else (lam,)
    keys = key_projections(base, stats)
    designs = ridge.Designs()  # one eigendecomposition of x for the input maps and the K/V maps
    maps = ridge.fit(stats, blend=blend, grid=grid, lag_gain=lag_gain, keys=keys, lag_keys=lag_keys, designs=designs)
    if stats.kv is not None:
        maps.kv = kv_fit.fit_kv(stats, grid, lag_gain, designs)
    if stats.inputs.basis is not None:
        report = window_fit.add_window(maps, stats, grid, keys, window_gain, ranks)
        if on_window:
            on_window(report)
    if maps_out:
        ridge.save_maps(maps_out, maps, stats.identity, stats.provenance)
    if out:
        write = fmt.write_maps if maps_only else fmt.pack
        write(base, maps, stats.identity, stats.provenance, out, map_type=map_type, defaults=defaults, kind=kind)
    return maps
