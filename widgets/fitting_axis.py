"""A plot axis whose tick labels never overlap, and the colouring of a plot's axes.

pyqtgraph keeps at least 2.25 labelled intervals on an axis however short it is, and always
labels that level: on a plot squeezed to a few dozen pixels (five stacked plots at 1280x720) the
labels of 0, 0.2, ... 1.0 were drawn on top of each other, and in demo mode's large font the
labels 9 10 11 12 13 of a narrow x axis ran together. Here the labelled spacing widens to the next
1-2-5 step until the labels fit; the finer spacings stay as unlabelled ticks. An axis of whole
things (requests, lanes, tokens, preemptions) is never labelled between whole numbers.
"""

from __future__ import annotations

import math

import pyqtgraph as pg
from PySide6.QtGui import QColor, QFontMetricsF

LABEL_ROOM = 1.3  # label heights of axis per label (value axes)
LABEL_GAP_EMS = 1.5  # room between two labels of a horizontal axis, in widths of an "m"


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
    def __init__(self, orientation: str, whole_numbers: bool = False, **kwargs):
        super().__init__(orientation, **kwargs)
        self.whole_numbers = whole_numbers
        self._horizontal = orientation in ("bottom", "top")
        self._labelled_spacing = 0.0  # the spacing of the labelled level, as tickSpacing chose it

    def tickSpacing(self, minVal: float, maxVal: float, size: float):  # noqa: N802 - pyqtgraph's name
        levels = super().tickSpacing(minVal, maxVal, size)
        if not levels or self._tickSpacing is not None:
            return levels
        low, high = min(minVal, maxVal), max(minVal, maxVal)
        # A horizontal axis labels one level only, its finest that fits: pyqtgraph also labels a finer
        # level where its crowding rule lets it, and in demo mode's large font "0.5" landed between
        # the labels 0.4 and 0.6 ("0.40.50.6")
        spacing = levels[-1][0] if self._horizontal else levels[0][0]
        spacing = max(spacing, 1.0) if self.whole_numbers else spacing
        while _labels(low, high, spacing) > self._labels_that_fit(low, high, spacing, size):
            spacing = nice_step_at_least(spacing * 1.5)  # the next step of 1, 2, 5, 10, ...
        # From 2 to 5 the labels can fall from three to one (0 - 440 on a 40 px plot: 0 alone, no
        # scale to read); 2.5 then gives two
        quarter = spacing / 2
        if (_labels(low, high, spacing) < 2 and math.isclose(spacing / 10 ** math.floor(math.log10(spacing)), 5.0)
                and (not self.whole_numbers or quarter >= 10)
                and 2 <= _labels(low, high, quarter) <= self._labels_that_fit(low, high, quarter, size)):
            spacing = quarter
        self._labelled_spacing = spacing
        finest = 1.0 if self.whole_numbers else 0.0
        if spacing == levels[0][0]:
            return [level for level in levels if level[0] >= finest]
        return [(spacing, 0)] + [level for level in levels if finest <= level[0] < spacing]

    def tickStrings(self, values, scale, spacing):  # noqa: N802 - pyqtgraph's name
        """Thousands as "12k", millions as "3M": a value axis is about 58 px wide, and pyqtgraph drops
        a label wider than its axis (a throughput axis of 0 - 20,000 tokens/s was labelled "0" alone)."""
        if self._horizontal and spacing < self._labelled_spacing * (1 - 1e-9):
            return [""] * len(values)  # a finer level's ticks, unlabelled (see tickSpacing)
        largest = max((abs(v * scale) for v in values), default=0.0)
        if largest < 10_000:
            return super().tickStrings(values, scale, spacing)
        unit, suffix = (1e6, "M") if largest >= 1_000_000 else (1e3, "k")
        step = f"{spacing * scale / unit:.6f}".rstrip("0").rstrip(".")  # as many decimals as the spacing has
        decimals = len(step.partition(".")[2])
        return [f"{v * scale / unit:.{decimals}f}{suffix}" if v else "0" for v in values]

    def _labels_that_fit(self, low: float, high: float, spacing: float, size: float) -> int:
        metrics = QFontMetricsF(self.style["tickFont"] or self.font())
        if self.orientation in ("left", "right"):
            return max(2, int(size / (metrics.height() * LABEL_ROOM)))
        decimals = max(0, -math.floor(math.log10(spacing)))
        widest = max(metrics.horizontalAdvance(f"{value:.{decimals}f}") for value in (low, high))
        return max(2, int(size / (widest + LABEL_GAP_EMS * metrics.horizontalAdvance("m"))))

    def label_height(self) -> float:
        return QFontMetricsF(self.style["tickFont"] or self.font()).height()


def color_axes(plot: pg.PlotItem, foreground: tuple) -> None:
    """A plot's left and bottom axes -- line, tick labels and axis label -- in the theme's colour."""
    for side in ("left", "bottom"):
        axis = plot.getAxis(side)
        axis.setPen(pg.mkPen(foreground))
        axis.setTextPen(pg.mkPen(foreground))
        axis.label.setDefaultTextColor(QColor(*foreground))
