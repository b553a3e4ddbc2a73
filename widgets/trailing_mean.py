"""The compute line's smoothing: at each step point, the time-weighted mean over the preceding
window of engine time, computed over the whole run once and then for the new points only.

Recomputed over the whole series every frame, it took ~50 ms a frame after ten minutes at maximum
speed (300,000 points), most of the live plots' time and growing with the run; a point's mean only
reads the window before it, so the points already computed keep their values.
"""

from __future__ import annotations

import numpy as np

from kvscope.widgets.minmax_decimation import same_point

# Two points further apart than this have the engine idle between them: the gap does not weigh as
# busy time here, and the live plots break their lines there.
GAP_MIN_S = 0.5


def windowed_mean(t: np.ndarray, y: np.ndarray, window_s: float, max_dt: float = GAP_MIN_S) -> np.ndarray:
    """At each point, the mean of y over the preceding window_s of time, each point weighted by the
    time since the previous one (capped at max_dt, so an idle gap does not weigh as busy time)."""
    if len(t) < 2:
        return y.astype(np.float64)
    dt = np.minimum(np.diff(t, prepend=t[0]), max_dt)
    dt[0] = min(max_dt, float(np.median(dt[1:]))) if len(dt) > 1 else 1.0
    weighted = np.concatenate(([0.0], np.cumsum(y * dt)))
    weights = np.concatenate(([0.0], np.cumsum(dt)))
    start = np.searchsorted(t, t - window_s, side="right")
    end = np.arange(1, len(t) + 1)
    total = weights[end] - weights[start]
    return np.where(total > 0, (weighted[end] - weighted[start]) / np.where(total > 0, total, 1.0), y)


class TrailingMean:
    """windowed_mean(t, y, window_s) of a series that only grows, the old points' means kept."""

    def __init__(self, window_s: float):
        self.window_s = window_s
        self.clear()

    def clear(self) -> None:
        self._means = np.zeros(0)
        self._last = None  # (time, value) of the newest point computed: a series that changed is recomputed

    def of(self, t: np.ndarray, y: np.ndarray) -> np.ndarray:
        done = len(self._means)
        if not done or len(t) < done or not same_point((t[done - 1], y[done - 1]), self._last):
            self._means = windowed_mean(t, y, self.window_s)
        elif len(t) > done:
            # from the last point at or before the first new point's window: its own weight
            # (the time since the point before it) is never read by the new means
            j = max(0, int(np.searchsorted(t, t[done] - self.window_s, side="right")) - 1)
            self._means = np.concatenate((self._means, windowed_mean(t[j:], y[j:], self.window_s)[done - j:]))
        if len(t):
            self._last = (t[len(t) - 1], y[len(y) - 1])
        return self._means
