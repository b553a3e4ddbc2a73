"""How far a plot against a run's clock may be zoomed out, or in.

Unlimited, 180 wheel notches out over a live plot took its x range to 1e22 s: pyqtgraph's
peak downsampling then reshaped each curve into rows of ~1e20 samples and raised "array is too
big" (and "Maximum allowed dimension exceeded") from every repaint's slot, flooding stderr. The
limits keep every range finite and far past any run: a clock from a little before 0 to about
three years, values to 1e12, and no range narrower than a microsecond, so zooming stops there.

A run whose engine clock passes three years (2,000 requests at the smallest arrival rate accepted,
1e-6 per second, arrive over ~2e9 s) widens its plots' clock limit with it: a fixed limit kept the
view at 1e8 s and the curves went on past the edge, undrawn, without a word. The limit grows in
steps of CLOCK_GROWTH, so it stays a few times the run's clock (the downsampling above stays
bounded) and is set again only a few times a run.
"""

from __future__ import annotations

import math

CLOCK_MIN_S = -1.0  # a little before the run's start: its first points are not on the plot's edge
CLOCK_MAX_S = 1e8  # ~3 years of engine (or wall-clock) seconds: past any run or attachment
VALUE_MAX = 1e12  # past any count, rate, byte size or duration a plot shows
MIN_CLOCK_RANGE_S = 1e-6
MIN_VALUE_RANGE = 1e-9
CLOCK_GROWTH = 4.0  # a run past the limit: the new limit is this many times its latest clock
CLOCK_ROOM = 1.5  # ...once the latest clock comes within this factor of it (the sticky range shows 1.25x)
LARGEST_CLOCK_LIMIT_S = 1e300  # a float range wider than this overflows pyqtgraph's arithmetic


def limit_zoom(plot, y_min: float | None = 0.0, y_max: float = VALUE_MAX) -> None:
    """plot (a pg.PlotItem) zooms and pans only within the run's clock and y_min .. y_max."""
    y_span = y_max - (y_min if y_min is not None else -y_max)
    plot.setLimits(xMin=CLOCK_MIN_S, xMax=CLOCK_MAX_S, minXRange=MIN_CLOCK_RANGE_S,
                   maxXRange=CLOCK_MAX_S - CLOCK_MIN_S, yMin=y_min, yMax=y_max,
                   minYRange=MIN_VALUE_RANGE, maxYRange=y_span)


def clock_limit_for(latest_s: float | None, limit_s: float = CLOCK_MAX_S) -> float:
    """The clock limit plots need to show a run whose latest clock is latest_s: limit_s while it
    leaves room past latest_s, else a wider one (never narrower, never past LARGEST_CLOCK_LIMIT_S)."""
    if latest_s is None or not math.isfinite(latest_s) or latest_s * CLOCK_ROOM <= limit_s:
        return limit_s
    return max(limit_s, min(latest_s * CLOCK_GROWTH, LARGEST_CLOCK_LIMIT_S))


def set_clock_limit(plot, limit_s: float) -> None:
    """plot (limited by limit_zoom) may show the clock up to limit_s."""
    plot.setLimits(xMax=limit_s, maxXRange=limit_s - CLOCK_MIN_S)
