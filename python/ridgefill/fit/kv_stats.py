"""Statistics for maps straight into each late attention layer's keys and values (issue 54).

A filled attention layer keeps only the K and V it writes, so a map may predict them directly rather than the layer's
input. For every late layer with attention, the exact K (the layer's own norm, projection, bias and per-head key norm;
before RoPE, which is applied after the map as for any key) and V of each captured row are the targets, regressed on
the same x as the input maps ([h_s(t), h_s(t-1)]). The sums share x's moments (n, Σx, XᵀX) with the input statistics
(stats.Moments) and add, per target, Σy, Xᵀy and Σ‖y‖²: a layer's K and V are two targets (2j and 2j+1 for its j-th
attention layer). The split state is read raw: RMS-normalizing it first ties on held-out key error
(experiments/kv-maps: 0.216 raw against 0.215), so the fork reads h_s as it is.
"""

from __future__ import annotations

import numpy as np

from .moments import Moments, StatsError


class TargetMoments:
    """Σy, Xᵀy and Σ‖y‖² of m targets of width d_out, for rows whose x moments another Moments holds."""

    def __init__(self, d_in: int, m: int, d_out: int):
        self.n = 0
        self.sum_y = np.zeros((m, d_out))
        self.xty = np.zeros((m, d_in, d_out))
        self.yy = np.zeros(m)

    @property
    def m(self) -> int:
        return self.sum_y.shape[0]

    def update(self, x: np.ndarray, ys: list[np.ndarray]) -> None:
        if len(ys) != self.m or any(y.shape != (len(x), self.sum_y.shape[1]) for y in ys):
            raise StatsError(f"expected {self.m} targets of shape ({len(x)}, {self.sum_y.shape[1]}), got "
                             f"{[y.shape for y in ys]}")
        x64 = np.asarray(x, dtype=np.float64)
        self.n += len(x64)
        for j, y in enumerate(ys):
            y64 = np.asarray(y, dtype=np.float64)
            self.sum_y[j] += y64.sum(0)
            self.xty[j] += x64.T @ y64
            self.yy[j] += np.einsum("ij,ij->", y64, y64)

    def __iadd__(self, other: "TargetMoments") -> "TargetMoments":
        if other.xty.shape != self.xty.shape:
            raise StatsError(f"cannot add K/V statistics of shape {other.xty.shape} to {self.xty.shape}")
        self.n += other.n
        self.sum_y += other.sum_y
        self.xty += other.xty
        self.yy += other.yy
        return self

    def with_x(self, xmom: Moments) -> Moments:
        """A Moments of these targets over the x moments of `xmom` (the same rows; views, not copies)."""
        if xmom.n != self.n:
            raise StatsError(f"K/V statistics of {self.n} rows beside input statistics of {xmom.n}: captured apart")
        m = Moments.__new__(Moments)
        m.n, m.sum_x, m.xtx = xmom.n, xmom.sum_x, xmom.xtx
        m.sum_y, m.xty, m.yy, m.yyt = self.sum_y, self.xty, self.yy, None
        return m

    _FIELDS = ("sum_y", "xty", "yy")

    def arrays(self, prefix: str) -> dict[str, np.ndarray]:
        return {f"{prefix}n": np.asarray(self.n), **{f"{prefix}{k}": getattr(self, k) for k in self._FIELDS}}

    @classmethod
    def from_arrays(cls, data, prefix: str, shape: tuple[int, int, int]) -> "TargetMoments":
        t = cls(*shape)
        t.n = int(data[f"{prefix}n"])
        for k in cls._FIELDS:
            a = np.array(data[f"{prefix}{k}"], dtype=np.float64)
            if a.shape != getattr(t, k).shape:
                raise StatsError(f"{prefix}{k} has shape {a.shape}, expected {getattr(t, k).shape}")
            setattr(t, k, a)
        return t


class KVStats:
    """Training and held-out K/V target sums of the late attention layers `layers` (K/V width d_kv)."""

    def __init__(self, layers: list[int], d_in: int, d_kv: int):
        if not layers:
            raise StatsError("K/V statistics need at least one late attention layer")
        self.layers, self.d_in, self.d_kv = list(layers), d_in, d_kv
        self.train = TargetMoments(d_in, 2 * len(layers), d_kv)
        self.heldout = TargetMoments(d_in, 2 * len(layers), d_kv)

    def same(self, other: "KVStats | None") -> bool:
        return other is not None and (other.layers, other.d_in, other.d_kv) == (self.layers, self.d_in, self.d_kv)

    def merge(self, other: "KVStats") -> None:
        self.train += other.train
        self.heldout += other.heldout

    def meta(self) -> dict:
        return {"layers": self.layers, "d_kv": self.d_kv}

    def arrays(self) -> dict[str, np.ndarray]:
        return {**self.train.arrays("kv_train_"), **self.heldout.arrays("kv_heldout_")}

    @classmethod
    def load(cls, meta: dict, data, d_in: int) -> "KVStats":
        kv = cls([int(l) for l in meta["layers"]], d_in, int(meta["d_kv"]))
        shape = (d_in, 2 * len(kv.layers), kv.d_kv)
        kv.train = TargetMoments.from_arrays(data, "kv_train_", shape)
        kv.heldout = TargetMoments.from_arrays(data, "kv_heldout_", shape)
        return kv

    def nonfinite_layers(self) -> list[int]:
        bad = set()
        for t in (self.train, self.heldout):
            for j in range(t.m):
                if not (np.isfinite(t.sum_y[j]).all() and np.isfinite(t.xty[j]).all() and np.isfinite(t.yy[j])):
                    bad.add(self.layers[j // 2])
        return sorted(bad)


class KVTargets:
    """The exact K (before RoPE) and V of the late attention layers, from their inputs: the targets a capture
    feeds KVStats with. `attn`: layer -> fit.attention.AttentionLayer (its weights from the GGUF)."""

    def __init__(self, attn: dict, split: int):
        self.attn, self.split = attn, split
        widths = {a.n_head_kv * a.head_dim for a in attn.values()}
        if len(widths) != 1:
            raise StatsError(f"K/V maps need one K/V width across the late attention layers, not {sorted(widths)}")
        self.d_kv = widths.pop()
        self.layers = sorted(attn)

    def stats(self, d_in: int) -> KVStats:
        return KVStats(self.layers, d_in, self.d_kv)

    def __call__(self, ys: list[np.ndarray]) -> list[np.ndarray]:
        """[K_l, V_l for each attention layer l] from ys, the inputs of layers split+1, split+2, ..."""
        out = []
        for il in self.layers:
            y, a = ys[il - self.split - 1], self.attn[il]
            out += [a.keys_pre_rope(y), a.values(y)]
        return out


class KVSink:
    """Feeds one split's input moments and its K/V target sums from the same rows (capture.update_all calls
    update(x, ys) with the late layers' inputs ys)."""

    def __init__(self, mom: Moments, kv: TargetMoments, targets: KVTargets):
        self.mom, self.kv, self.targets = mom, kv, targets

    @property
    def m(self) -> int:
        return self.mom.m

    def update(self, x: np.ndarray, ys: list[np.ndarray]) -> None:
        self.mom.update(x, ys)
        if len(x):
            self.kv.update(x, self.targets(ys))
