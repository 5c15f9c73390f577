"""Sufficient statistics for the ridge maps, streamed in float64.

For the split layer's state and each late layer's input y_l = h_l (l > s): n, Σx, Σy_l,
XᵀX, XᵀY_l and Σ‖y_l‖² (on held-out rows the whole Σ y_l y_lᵀ, so that a map's held-out error
can be measured through any linear read of y_l, such as the layer's key projection), where
x = [h_s(t), h_s(t-1)] holds the row's split state and its predecessor's (the previous row of the
same window), so that a map may also read the previous row (ridge.py); the first d columns are the
per-row statistics. Window statistics (MapInputs with a basis V, d x q) append Vᵀh_s(t-j) for
j = 1..W, from which window maps are fitted (window_fit.py). Activations are never stored; statistics from
several runs add up (sharded calibration), provided they describe the same model,
split and layers. A second, disjoint set (held-out documents) selects λ. Captured with K/V targets, the
statistics also hold the late attention layers' K and V sums over the same x (kv_stats.py).
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ..files import load_npz, save_npz
from ..format.identity import ModelIdentity
from ..format.maps import Provenance
from .kv_stats import KVStats
from .moments import Moments, StatsError

MAX_WINDOW = 16  # rows back a window map reads (the fork's hparams.rf_max_window)

FORMAT = "ridgefill-stats/3"  # 2: x carries the previous row's split state; 3: held-out Σ y yᵀ


@dataclass(frozen=True, eq=False)
class MapInputs:
    """What the statistics' x holds for a row t: [h_s(t), h_s(t-1)] and, with a basis V (d, q) and a window
    W, also Vᵀh_s(t-1), ..., Vᵀh_s(t-W) (the candidates a window map's projection is fitted from)."""

    split: int
    basis: np.ndarray | None = None
    window: int = 0

    def __post_init__(self):
        if (self.basis is None) != (self.window == 0) or not 0 <= self.window <= MAX_WINDOW:
            raise StatsError(f"window statistics need a basis and a window in [1, {MAX_WINDOW}], "
                             f"not {self.window} rows with {'no' if self.basis is None else 'a'} basis")

    @property
    def n_earlier(self) -> int:
        """Rows before t that x reads."""
        return max(1, self.window)

    def width(self, d: int) -> int:
        return 2 * d + (0 if self.basis is None else self.window * self.basis.shape[1])

    def x(self, h: np.ndarray, earlier: np.ndarray) -> np.ndarray:
        """x for rows h (n, d) given their earlier rows (n, n_earlier*d), capture.earlier_rows."""
        d = h.shape[1]
        parts = [h, earlier[:, :d]]
        if self.basis is not None:
            z = earlier[:, :self.window * d].reshape(len(h), self.window, d) @ self.basis
            parts.append(z.reshape(len(h), -1))
        return np.concatenate(parts, axis=1)

    def same(self, other: "MapInputs") -> bool:
        return (self.window == other.window and (self.basis is None) == (other.basis is None)
                and (self.basis is None or np.array_equal(self.basis, other.basis)))


class CalibrationStats:
    """Training and held-out moments for maps from layer `split` to each later layer."""

    def __init__(self, identity: ModelIdentity, split: int, provenance: Provenance | None = None,
                 basis: np.ndarray | None = None, window: int = 0):
        if not 1 <= split < identity.n_layer - 1:
            raise StatsError(f"split {split} out of range: need 1 <= split < n_layer-1 = {identity.n_layer - 1}")
        if basis is not None and (basis.ndim != 2 or basis.shape[0] != identity.n_embd or not np.isfinite(basis).all()):
            raise StatsError(f"a window basis must be a finite (n_embd={identity.n_embd}, q) matrix, not {basis.shape}")
        self.identity = identity
        self.split = split
        self.inputs = MapInputs(split, basis, window)
        self.layers = list(range(split + 1, identity.n_layer))
        self.provenance = provenance or Provenance()
        self.heldout_provenance = Provenance()
        d, m = identity.n_embd, len(self.layers)
        self.train = Moments(self.inputs.width(d), m, d)  # x = [h_s(t), h_s(t-1), window columns]
        self.heldout = Moments(self.inputs.width(d), m, d, outer_y=True)
        self.kv = None  # kv_stats.KVStats: the late attention layers' K and V as targets too (capture's kv)

    def merge(self, other: "CalibrationStats") -> None:
        bad = self.identity.mismatch(other.identity)
        if bad:
            raise StatsError("statistics are for different models: " + "; ".join(bad))
        if other.split != self.split:
            raise StatsError(f"statistics are for different splits: {self.split} and {other.split}")
        if not other.inputs.same(self.inputs):
            raise StatsError("statistics hold different window columns (window or basis): capture every shard "
                             "with the same --window and basis")
        if (self.kv is None) != (other.kv is None) or (self.kv is not None and not self.kv.same(other.kv)):
            raise StatsError("statistics hold different K/V sums (one with --kv, one without, or other layers): "
                             "capture every shard alike")
        if other.provenance.sinks != self.provenance.sinks:
            raise StatsError(f"statistics exclude different sink rows: {self.provenance.sinks} and {other.provenance.sinks}")
        self.train += other.train
        self.heldout += other.heldout
        if self.kv is not None:
            self.kv.merge(other.kv)
        self.provenance = self.provenance.merged(other.provenance)
        self.heldout_provenance = self.heldout_provenance.merged(other.heldout_provenance)

    def check_finite(self) -> None:
        for name, mom in (("training", self.train), ("held-out", self.heldout)):
            bad = mom.nonfinite_targets()
            if bad:
                layers = ", ".join(str(self.layers[j]) for j in bad)
                raise StatsError(f"non-finite {name} statistics for layer(s) {layers}: the model produced NaN/Inf activations")
        bad = [] if self.kv is None else self.kv.nonfinite_layers()
        if bad:
            raise StatsError(f"non-finite K/V statistics for layer(s) {', '.join(map(str, bad))}")

    def meta(self) -> dict:
        return {
            "format": FORMAT,
            "identity": asdict(self.identity),
            "split": self.split,
            "window": self.inputs.window,
            "layers": self.layers,
            "provenance": asdict(self.provenance),
            "heldout_provenance": asdict(self.heldout_provenance),
            "kv": None if self.kv is None else self.kv.meta(),
        }

    def save(self, path: str | os.PathLike) -> Path:
        meta = {k: v for k, v in self.meta().items() if k != "format"}
        basis = {} if self.inputs.basis is None else {"window_basis": self.inputs.basis}
        kv = {} if self.kv is None else self.kv.arrays()
        return save_npz(path, FORMAT, meta, {**self.train.arrays("train_"), **self.heldout.arrays("heldout_"), **basis, **kv})

    @classmethod
    def load(cls, path: str | os.PathLike) -> "CalibrationStats":
        try:
            meta, data = load_npz(path, FORMAT)
            basis = np.array(data["window_basis"], np.float64) if "window_basis" in data else None
            st = cls(ModelIdentity(**meta["identity"]), int(meta["split"]), Provenance(**meta["provenance"]),
                     basis=basis, window=int(meta.get("window", 0)))
            st.heldout_provenance = Provenance(**meta["heldout_provenance"])
            st.train = Moments.from_arrays(data, "train_")
            st.heldout = Moments.from_arrays(data, "heldout_")
            if meta.get("kv"):
                st.kv = KVStats.load(meta["kv"], data, st.inputs.width(st.identity.n_embd))
        except (KeyError, TypeError, ValueError) as err:
            hint = (" (statistics from before the previous row and the held-out Σ y yᵀ were captured: capture them again)"
                    if re.search(r"stats/[12]\b", str(err)) else "")
            raise StatsError(f"cannot read statistics from {path}: {err}{hint}") from None
        st._check_shapes(path)
        return st

    def _check_shapes(self, path) -> None:
        d, m = self.identity.n_embd, len(self.layers)
        k = self.inputs.width(d)
        want = {"sum_x": (k,), "sum_y": (m, d), "xtx": (k, k), "xty": (m, k, d), "yy": (m,),
                "yyt": (m, d, d)}
        for name, mom in (("train", self.train), ("heldout", self.heldout)):
            for k, shape in want.items():
                if k == "yyt" and name == "train":
                    continue
                if getattr(mom, k) is None or getattr(mom, k).shape != shape:
                    got = "no array" if getattr(mom, k) is None else f"shape {getattr(mom, k).shape}"
                    raise StatsError(f"cannot read statistics from {path}: {name}_{k} has {got}, "
                                     f"expected {shape} for n_embd={d} and {m} late layers")
        kv = self.kv
        if kv is not None and ((kv.train.n, kv.heldout.n) != (self.train.n, self.heldout.n)
                               or not set(kv.layers) <= set(self.layers)):
            raise StatsError(f"cannot read statistics from {path}: its K/V sums cover other rows or layers "
                             f"({kv.train.n}/{kv.heldout.n} rows, layers {kv.layers})")


def merge_files(paths: list[str | os.PathLike]) -> CalibrationStats:
    if not paths:
        raise StatsError("no statistics files given")
    total = CalibrationStats.load(paths[0])
    for p in paths[1:]:
        total.merge(CalibrationStats.load(p))
    return total
