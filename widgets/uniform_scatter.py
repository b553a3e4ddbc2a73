"""A pyqtgraph scatter whose spots all look alike, given its spots without a Python step per spot.

pyqtgraph's ScatterPlotItem finds each new spot's picture in its symbol atlas through a key built
in Python for every spot (symbol, size, pen id, brush id), even when every spot has the same
style. The latency plot sets all of its ~1,500 spots again whenever a request gets its first token:
that loop was ~6 ms of each such frame (12 ms for the plot's two scatters). Here, when the style
columns of the new spots are uniform -- one symbol, size, pen and brush, as a PlotDataItem with
one symbol gives -- the atlas is asked once and its rectangle given to all of them; any other
case goes to pyqtgraph's own code. Written against pyqtgraph 0.14 (ScatterPlotItem.updateSpots)."""

from __future__ import annotations

import numpy as np

STYLE_FIELDS = ["symbol", "size", "pen", "brush"]


def _uniform(column: np.ndarray) -> bool:
    if column.dtype != object:
        return bool(np.all(column == column[0]))
    return len(set(map(id, column))) == 1  # the same pen object, not merely an equal one


def uniform_update_spots(scatter, original, dataSet=None) -> None:  # noqa: N803 - pyqtgraph's name
    """ScatterPlotItem.updateSpots for spots of one style; original(dataSet) for anything else."""
    data = scatter.data if dataSet is None else dataSet
    if not (scatter.opts["pxMode"] and scatter.opts["useCache"]) or not len(data):
        original(dataSet)
        return
    new = data["sourceRect"]["w"] == 0
    if not new.any():
        original(dataSet)
        return
    try:  # pyqtgraph's internals: another release (pyproject allows >= 0.13.3) takes its own path
        columns = list(scatter._style(STYLE_FIELDS, data=data, idx=new))
    except (AttributeError, TypeError, KeyError):
        original(dataSet)
        return
    if not all(_uniform(column) for column in columns):
        original(dataSet)
        return
    (rect,) = scatter.fragmentAtlas[[tuple(column[0] for column in columns)]]
    data["sourceRect"][new] = rect
    scatter._maybeRebuildAtlas()
    scatter._updateMaxSpotSizes(data=data)
    scatter.invalidate()


def give_spots_in_one_go(scatter) -> None:
    """Makes this ScatterPlotItem take uniform spots without its per-spot atlas lookups."""
    original = scatter.updateSpots
    scatter.updateSpots = lambda dataSet=None: uniform_update_spots(scatter, original, dataSet)  # noqa: N803
