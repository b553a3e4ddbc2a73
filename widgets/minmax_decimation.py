"""Long series drawn as the min and max of each bin of points, so peaks stay visible: at once
(decimate_minmax), or for a series that only grows, bin by bin as its points come (MinMaxDecimator).

A live plot's series grows by a point every 2 ms at maximum speed; decimated whole on every frame
it cost ~4 ms a curve after ten minutes (300,000 points), six curves a frame. The growing version
keeps its bins and folds each frame's new points into new ones; when the bins are more than the
budget, neighbours merge pairwise (the min of two mins, the max of two maxes), so the bins double
in size as the series does and the work per frame stays that of the new points.
"""

from __future__ import annotations

import numpy as np


def decimate_minmax(x: np.ndarray, y: np.ndarray, max_points: int) -> tuple:
    """At most about max_points points that keep every bin's min and max (peaks stay visible)."""
    n = len(x)
    if n <= max_points:
        return x, y
    bins = max(1, max_points // 2)
    k = -(-n // bins)
    m = (n // k) * k
    yb = y[:m].reshape(-1, k)
    xb = x[:m].reshape(-1, k)
    nan = np.isnan(yb)
    imin = np.argmin(np.where(nan, np.inf, yb), axis=1)
    imax = np.argmax(np.where(nan, -np.inf, yb), axis=1)
    lo, hi = np.minimum(imin, imax), np.maximum(imin, imax)
    rows = np.arange(len(yb))
    xs = np.empty(2 * len(yb))
    ys = np.empty(2 * len(yb))
    xs[0::2], xs[1::2] = xb[rows, lo], xb[rows, hi]
    ys[0::2], ys[1::2] = yb[rows, lo], yb[rows, hi]
    if m < n:  # the newest points, fewer than one bin: keep them all
        xs = np.concatenate((xs, x[m:]))
        ys = np.concatenate((ys, y[m:]))
    return xs, ys


def same_point(a: tuple, b: tuple) -> bool:
    """Two (x, y) points equal, a NaN equal to a NaN: the check that a series only grew."""
    return all(u == v or (u != u and v != v) for u, v in zip(a, b))


def _bin_extremes(y: np.ndarray, start: int, k: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices (into y) of the min and the max of `count` bins of k points from `start`; a NaN is
    neither (a bin of NaNs gives its first point for both)."""
    block = y[start:start + count * k].reshape(count, k)
    nan = np.isnan(block)
    offsets = start + k * np.arange(count)
    return (offsets + np.argmin(np.where(nan, np.inf, block), axis=1),
            offsets + np.argmax(np.where(nan, -np.inf, block), axis=1))


class MinMaxDecimator:
    """decimate_minmax for a series that only grows: each call's new points go into new bins."""

    def __init__(self, max_points: int):
        self.max_bins = max(1, int(max_points) // 2)
        self.max_points = int(max_points)
        self.clear()

    def clear(self) -> None:
        self._k = 0  # points per bin; 0: the series is short enough to draw whole
        self._imin = self._imax = np.zeros(0, dtype=np.int64)
        self._binned = 0  # points in bins; the rest are drawn as they are
        self._last: tuple | None = None  # (count, x, y) of the newest point seen

    def of(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n = len(x)
        if self._last is not None and not (n >= self._last[0] and same_point(
                (x[self._last[0] - 1], y[self._last[0] - 1]), self._last[1:])):
            self.clear()  # not the series seen before: a new run, or a replay's seek
        self._last = (n, x[n - 1], y[n - 1]) if n else None
        if not self._k:
            if n <= self.max_points:
                return x, y
            self._k = -(-n // self.max_bins)
        k = self._k
        new_bins = (n - self._binned) // k
        if new_bins:
            imin, imax = _bin_extremes(y, self._binned, k, new_bins)
            self._imin, self._imax = np.concatenate((self._imin, imin)), np.concatenate((self._imax, imax))
            self._binned += new_bins * k
        while len(self._imin) > self.max_bins:
            self._merge_pairs(y)
        lo, hi = np.minimum(self._imin, self._imax), np.maximum(self._imin, self._imax)
        at = np.empty(2 * len(lo), dtype=np.int64)
        at[0::2], at[1::2] = lo, hi
        at = np.concatenate((at, np.arange(self._binned, n)))  # the newest points, fewer than a bin
        return x[at], y[at]

    def _merge_pairs(self, y: np.ndarray) -> None:
        """Neighbouring bins two by two (an odd last bin stays as it is); new bins are twice as long."""
        pairs = len(self._imin) // 2
        imin, imax = self._imin, self._imax
        a, b = imin[0:2 * pairs:2], imin[1:2 * pairs:2]
        low_a, low_b = np.nan_to_num(y[a], nan=np.inf), np.nan_to_num(y[b], nan=np.inf)
        merged_min = np.where(low_b < low_a, b, a)
        a, b = imax[0:2 * pairs:2], imax[1:2 * pairs:2]
        high_a, high_b = np.nan_to_num(y[a], nan=-np.inf), np.nan_to_num(y[b], nan=-np.inf)
        merged_max = np.where(high_b > high_a, b, a)
        self._imin = np.concatenate((merged_min, imin[2 * pairs:]))
        self._imax = np.concatenate((merged_max, imax[2 * pairs:]))
        self._k *= 2
