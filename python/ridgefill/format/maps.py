"""What a fit produces and a maps file stores: per late layer a map of the split layer's state (and, optionally,
of earlier rows'), its held-out figures, the split state's routing statistics and the calibration's provenance.
`fit` computes them; `format` packs them into a GGUF and reads them back."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import InputError


@dataclass
class Provenance:
    documents: list[str] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)  # corpus kind of each document ([] in older files)
    n_tokens: int = 0
    corpus_hash: str = ""
    sinks: int = 0
    window: int = 0
    backend: str = ""

    def summary(self) -> str:
        """'N tokens from D documents (kind count, ...)'."""
        counts: dict[str, int] = {}
        for k in self.kinds:
            counts[k] = counts.get(k, 0) + 1
        kinds = f" ({', '.join(f'{k} {n}' for k, n in counts.items())})" if counts else ""
        return f"{self.n_tokens} tokens from {len(self.documents)} documents{kinds}"

    def merged(self, other: "Provenance") -> "Provenance":
        return Provenance(
            documents=self.documents + [d for d in other.documents if d not in self.documents],
            kinds=self.kinds + [k for d, k in zip(other.documents, other.kinds) if d not in self.documents],
            n_tokens=self.n_tokens + other.n_tokens,
            corpus_hash=",".join(h for h in (self.corpus_hash, other.corpus_hash) if h),
            sinks=self.sinks,
            window=self.window,
            backend=self.backend if self.backend == other.backend else f"{self.backend}+{other.backend}",
        )


@dataclass
class RouteStats:
    mean: np.ndarray  # (d,) float32
    whiten: np.ndarray  # (d, d) float32, lower triangular: leverage = ‖whiten @ (h − mean)‖²

    def check(self, d: int) -> None:
        if self.mean.shape != (d,) or self.whiten.shape != (d, d):
            raise InputError(f"routing statistics of shape {self.mean.shape}/{self.whiten.shape} do not fit n_embd={d}")
        if not (np.isfinite(self.mean).all() and np.isfinite(self.whiten).all()):
            raise InputError("routing statistics are not finite")



@dataclass
class LayerFit:
    layer: int
    lam: float  # absolute λ
    lam_rel: float  # λ / (tr(Cxx)/d)
    r2_ridge: float  # held-out, map fitted on training statistics only
    r2_identity: float
    rel_err_ridge: float  # sqrt(SSE / Σ‖y − μy‖²) on held-out rows
    rel_err_identity: float
    blend: float = 1.0  # α of W = I + α(W_ridge − I); r2_ridge and rel_err_ridge are the blended map's
    lag: bool = False  # the map also reads the previous row's split state (Maps.weights_prev)
    window: bool = False  # the map also reads the window projection's columns (Maps.weights_window)
    # held-out R² of the per-row map before its blend and of the lagged map, whichever was kept: the two
    # the lag decision compares (its gain is 1 - (1 - r2_lag) / (1 - r2_row))
    r2_row: float | None = None
    r2_lag: float | None = None
    # held-out relative error of the keys the layer writes (key_space.py) from the per-row map before its blend
    # and from the lagged map; None without the layer's key projection
    k_err_row: float | None = None
    k_err_lag: float | None = None
    # held-out R² and key error of the window map (window_fit.py), where one was fitted for the layer
    r2_window: float | None = None
    k_err_window: float | None = None


@dataclass
class KVFit:
    """One late attention layer's K/V maps (fit/kv_fit.py): whether they read the previous row, λ/scale chosen for
    K and for V, and the held-out relative errors of K (before RoPE) and V from each kind, fitted on training rows."""

    layer: int
    lag: bool
    lam_rel_k: float
    lam_rel_v: float
    k_err_row: float
    v_err_row: float
    k_err_lag: float | None = None
    v_err_lag: float | None = None

    @property
    def k_err(self) -> float:
        return self.k_err_lag if self.lag else self.k_err_row

    @property
    def v_err(self) -> float:
        return self.v_err_lag if self.lag else self.v_err_row


@dataclass
class KVMaps:
    """Maps from the split state straight to each late attention layer's K before RoPE and V: per layer
    [K; V] = W [h_s(t)] + W_prev [h_s(t-1)] + b, the K rows first."""

    layers: list[int]
    weights: np.ndarray  # (m, 2 * d_kv, d) float32
    biases: np.ndarray  # (m, 2 * d_kv) float32
    fits: list[KVFit]
    weights_prev: np.ndarray | None = None  # (m, 2 * d_kv, d), zero where not fits[j].lag

    @property
    def d_kv(self) -> int:
        return self.weights.shape[1] // 2


@dataclass
class Maps:
    split: int
    layers: list[int]
    weights: np.ndarray  # (m, d_out, d_in), float32, PyTorch Linear orientation
    biases: np.ndarray  # (m, d_out), float32
    fits: list[LayerFit]
    route: RouteStats | None = None  # the split-layer state's routing statistics (None in older files)
    weights_prev: np.ndarray | None = None  # (m, d_out, d_in) maps of the previous row's split state (zero where not fit.lag)

    # window maps: the projection (rank, W*d) of rows t-1..t-W's split states stacked, shared by every late
    # layer, and each layer's map (m, d_out, rank) of its columns (zero where not fit.window)
    window: np.ndarray | None = None
    weights_window: np.ndarray | None = None
    kv: KVMaps | None = None  # maps straight into the late attention layers' K and V, where fitted (`fit --kv`)

    def prev(self, j: int) -> np.ndarray | None:
        """The previous-row map of the j-th late layer, None when it reads its own row only."""
        return self.weights_prev[j] if self.weights_prev is not None and self.fits[j].lag else None

    def win(self, j: int) -> np.ndarray | None:
        """The window map of the j-th late layer, None when it reads no window."""
        ok = self.window is not None and self.weights_window is not None and self.fits[j].window
        return self.weights_window[j] if ok else None

    @property
    def window_rows(self) -> int:
        """W: the rows before each row that the window projection reads (0 without one)."""
        return 0 if self.window is None else self.window.shape[1] // self.weights.shape[-1]
