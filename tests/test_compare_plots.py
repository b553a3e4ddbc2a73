"""The comparison's plots keep their axes still while the data stays inside them (a moving axis
re-lays-out every plot each frame) and move them once the data leaves."""

from __future__ import annotations

import numpy as np

from kvscope.widgets.compare_plots import ComparePlots


def _run(plots: ComparePlots, steps: int) -> None:
    t = np.arange(steps) * 0.1
    for i in range(2):
        plots.set_series(i, t, np.full(steps, 0.5), np.full(steps, 8.0 + i), np.arange(steps) * 2.0)


def _shown_plots(qtbot) -> ComparePlots:
    plots = ComparePlots()
    qtbot.addWidget(plots)
    plots.resize(900, 300)
    plots.show()
    qtbot.waitExposed(plots)
    plots.set_configurations(["a", "b"])
    return plots


def test_axes_hold_still_inside_their_headroom_and_follow_data_that_leaves(qtbot):
    plots = _shown_plots(qtbot)
    _run(plots, 100)  # t up to 9.9 s
    x_range = plots.plots["num_running"].vb.viewRange()[0]
    assert x_range[0] == 0.0 and x_range[1] >= 9.9
    _run(plots, 105)  # 10.4 s: inside the headroom
    assert plots.plots["num_running"].vb.viewRange()[0] == x_range
    _run(plots, 400)  # 39.9 s: outside
    moved = plots.plots["num_running"].vb.viewRange()[0]
    assert moved[1] >= 39.9 and moved != x_range
    assert plots.plots["output_tokens"].vb.viewRange()[1][1] >= 399 * 2.0  # y follows too
    assert plots.plots["kv_usage"].vb.viewRange()[1] == [0.0, 105.0]  # KV stays 0 - 105 %


def test_a_pan_stops_following_until_the_next_comparison(qtbot):
    plots = _shown_plots(qtbot)
    _run(plots, 100)
    vb = plots.plots["num_running"].vb
    vb.sigRangeChangedManually.emit(vb.state["mouseEnabled"])  # what a drag or wheel zoom emits
    vb.setXRange(2.0, 3.0, padding=0)
    _run(plots, 400)
    assert vb.viewRange()[0] == [2.0, 3.0]
    plots.clear()
    _run(plots, 400)
    assert vb.viewRange()[0][1] >= 39.9
