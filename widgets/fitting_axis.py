"""A plot's value axis whose tick labels never overlap.

pyqtgraph keeps at least 2.25 labelled intervals on an axis however short it is, and always
labels that level: on a plot squeezed to a few dozen pixels (five stacked plots at 1280x720) the
labels of 0, 0.2, ... 1.0 were drawn on top of each other. Here the labelled spacing widens to
the next 1-2-5 step until the labels fit; the finer spacings stay as unlabelled ticks.
"""

from __future__ import annotations

import math

import pyqtgraph as pg
from PySide6.QtGui import QFontMetricsF

LABEL_ROOM = 1.3  # label heights of axis per label


def nice_step_at_least(value: float) -> float:
    """The smallest 1, 2 or 5 times a power of ten that is >= value (> 0)."""
    power = 10.0 ** math.floor(math.log10(value))
    for factor in (1, 2, 5, 10):
        if factor * power >= value * (1 - 1e-9):
            return factor * power
    return 10 * power


def _labels(low: float, high: float, spacing: float) -> int:
    return math.floor(high / spacing) - math.ceil(low / spacing) + 1


class FittingAxis(pg.AxisItem):
    def tickSpacing(self, minVal: float, maxVal: float, size: float):  # noqa: N802 - pyqtgraph's name
        levels = super().tickSpacing(minVal, maxVal, size)
        if not levels or self.orientation not in ("left", "right") or self._tickSpacing is not None:
            return levels
        low, high = min(minVal, maxVal), max(minVal, maxVal)
        fits = max(2, int(size / (self.label_height() * LABEL_ROOM)))
        spacing = levels[0][0]
        if _labels(low, high, spacing) <= fits:
            return levels
        while _labels(low, high, spacing) > fits:
            spacing = nice_step_at_least(spacing * 1.5)  # the next step of 1, 2, 5, 10, ...
        return [(spacing, 0)] + [level for level in levels if level[0] < spacing]

    def label_height(self) -> float:
        return QFontMetricsF(self.style["tickFont"] or self.font()).height()
