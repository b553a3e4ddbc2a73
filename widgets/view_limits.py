"""How far a plot against a run's clock may be zoomed out, or in.

Unlimited, 180 wheel notches out over a live plot took its x range to 1e22 s: pyqtgraph's
peak downsampling then reshaped each curve into rows of ~1e20 samples and raised "array is too
big" (and "Maximum allowed dimension exceeded") from every repaint's slot, flooding stderr. The
limits keep every range finite and far past any run: a clock from a little before 0 to about
three years, values to 1e12, and no range narrower than a microsecond, so zooming stops there.
"""

from __future__ import annotations

CLOCK_MIN_S = -1.0  # a little before the run's start: its first points are not on the plot's edge
CLOCK_MAX_S = 1e8  # ~3 years of engine (or wall-clock) seconds: past any run or attachment
VALUE_MAX = 1e12  # past any count, rate, byte size or duration a plot shows
MIN_CLOCK_RANGE_S = 1e-6
MIN_VALUE_RANGE = 1e-9


def limit_zoom(plot, y_min: float | None = 0.0, y_max: float = VALUE_MAX) -> None:
    """plot (a pg.PlotItem) zooms and pans only within the run's clock and y_min .. y_max."""
    y_span = y_max - (y_min if y_min is not None else -y_max)
    plot.setLimits(xMin=CLOCK_MIN_S, xMax=CLOCK_MAX_S, minXRange=MIN_CLOCK_RANGE_S,
                   maxXRange=CLOCK_MAX_S - CLOCK_MIN_S, yMin=y_min, yMax=y_max,
                   minYRange=MIN_VALUE_RANGE, maxYRange=y_span)
