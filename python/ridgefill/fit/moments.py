"""Streaming float64 moments of rows (x, y_1..y_m): the sums every ridge map is solved from (stats.py)."""

from __future__ import annotations

import numpy as np

from ..errors import RidgefillError


class StatsError(RidgefillError, ValueError):
    pass


class Moments:
    """Streaming float64 moments of (x, y_1..y_m) rows; x has d_in columns, each y d_out (default d_in).
    With `outer_y`, also each target's Σ y yᵀ (yyt, (m, d_out, d_out))."""

    def __init__(self, d_in: int, m: int, d_out: int | None = None, outer_y: bool = False):
        d_out = d_in if d_out is None else d_out
        self.n = 0
        self.sum_x = np.zeros(d_in)
        self.sum_y = np.zeros((m, d_out))
        self.xtx = np.zeros((d_in, d_in))
        self.xty = np.zeros((m, d_in, d_out))
        self.yy = np.zeros(m)
        self.yyt = np.zeros((m, d_out, d_out)) if outer_y else None

    @property
    def d(self) -> int:
        """Columns of x."""
        return self.sum_x.shape[0]

    @property
    def d_out(self) -> int:
        return self.sum_y.shape[1]

    def head(self, k: int) -> "Moments":
        """The moments of the first k columns of x (views, not copies)."""
        m = Moments.__new__(Moments)
        m.n, m.sum_y, m.yy, m.yyt = self.n, self.sum_y, self.yy, self.yyt
        m.sum_x, m.xtx, m.xty = self.sum_x[:k], self.xtx[:k, :k], self.xty[:, :k, :]
        return m

    @property
    def m(self) -> int:
        return self.sum_y.shape[0]

    def update(self, x: np.ndarray, ys: list[np.ndarray]) -> None:
        if len(ys) != self.m:
            raise StatsError(f"expected {self.m} target layers, got {len(ys)}")
        if np.ndim(x) != 2 or np.shape(x)[1] != self.d:
            raise StatsError(f"rows x have shape {np.shape(x)}, expected (n, {self.d})")
        if len(x) == 0:
            return
        x64 = np.asarray(x, dtype=np.float64)
        self.n += len(x64)
        self.sum_x += x64.sum(0)
        self.xtx += x64.T @ x64
        for j, y in enumerate(ys):
            if y.shape != (len(x), self.d_out):
                raise StatsError(f"target {j} has shape {y.shape}, expected {(len(x), self.d_out)}")
            y64 = np.asarray(y, dtype=np.float64)
            self.sum_y[j] += y64.sum(0)
            self.xty[j] += x64.T @ y64
            self.yy[j] += np.einsum("ij,ij->", y64, y64)
            if self.yyt is not None:
                self.yyt[j] += y64.T @ y64

    def __iadd__(self, other: "Moments") -> "Moments":
        if (other.d, other.m, other.d_out) != (self.d, self.m, self.d_out):
            raise StatsError(f"cannot add moments of shape (d_in={other.d}, m={other.m}, d_out={other.d_out}) "
                             f"to (d_in={self.d}, m={self.m}, d_out={self.d_out})")
        self.n += other.n
        self.sum_x += other.sum_x
        self.sum_y += other.sum_y
        self.xtx += other.xtx
        self.xty += other.xty
        self.yy += other.yy
        # a sum that misses one part's Σ y yᵀ has none
        self.yyt = None if self.yyt is None or other.yyt is None else self.yyt + other.yyt
        return self

    _FIELDS = ("sum_x", "sum_y", "xtx", "xty", "yy", "yyt")

    def arrays(self, prefix: str) -> dict[str, np.ndarray]:
        out = {f"{prefix}n": np.asarray(self.n)}
        out.update({f"{prefix}{k}": np.asarray(getattr(self, k)) for k in self._FIELDS if getattr(self, k) is not None})
        return out

    @classmethod
    def from_arrays(cls, data, prefix: str) -> "Moments":
        m = cls.__new__(cls)
        m.n = int(data[f"{prefix}n"])
        for k in cls._FIELDS:
            setattr(m, k, np.array(data[f"{prefix}{k}"], dtype=np.float64) if f"{prefix}{k}" in data else None)
        return m

    def nonfinite_targets(self) -> list[int]:
        """Indices j whose statistics hold NaN/Inf (x's own moments count against every j)."""
        x_bad = not (np.isfinite(self.sum_x).all() and np.isfinite(self.xtx).all())
        return [j for j in range(self.m)
                if x_bad or not (np.isfinite(self.sum_y[j]).all() and np.isfinite(self.xty[j]).all() and np.isfinite(self.yy[j])
                                 and (self.yyt is None or np.isfinite(self.yyt[j]).all()))]
