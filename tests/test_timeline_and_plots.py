"""The batch timeline and the live plots: what they draw for known data, their ring buffer and
lane bookkeeping, hover and click, missing data, themes. Timings are printed, not asserted."""

import math
import time

import numpy as np
import pyqtgraph as pg
import pytest
from PySide6.QtCore import Qt

from kvscope.widgets.batch_lanes import (
    DECODE, EMPTY, FINISHED, JOINED, PREEMPTED, PREFILL_SMALL, BatchLanes, TimelineStep,
)
from kvscope.widgets.batch_timeline import BatchTimelineView
from kvscope.widgets.live_plots import (
    BIG_SCATTER_POINTS, COMPUTE_WINDOW_S, LivePlots,
)
from kvscope.widgets.minmax_decimation import decimate_minmax
from kvscope.widgets.palette import DARK, LIGHT, request_color
from kvscope.widgets.trailing_mean import windowed_mean


def step(n, ids, tokens, prefill, joined=(), finished=(), preempted=(), duration_s=0.0125):
    return TimelineStep(n, n * duration_s, duration_s, list(ids), list(tokens), list(prefill),
                        list(joined), list(finished), list(preempted))


# Request 1: a 512-token prompt chunk at step 0, decodes at 1-3, finishes at 3.
# Request 2 joins at step 2 (100-token chunk), decodes at 3-4, is preempted at step 5.
# Request 3 joins at step 4 (40-token chunk) on request 1's freed lane 0.
# Request 4 joins at step 6 (2000-token chunk) on request 2's freed lane 1.
KNOWN = [
    step(0, [1], [512], [True], joined=[1]),
    step(1, [1], [1], [False]),
    step(2, [1, 2], [1, 100], [False, True], joined=[2]),
    step(3, [1, 2], [1, 1], [False, False], finished=[1]),
    step(4, [2, 3], [1, 40], [False, True], joined=[3]),
    step(5, [3], [1], [False], preempted=[2]),
    step(6, [3, 4], [1, 2000], [False, True], joined=[4]),
]
# Chunk-size bins: <32, 32-255, 256-1023, >=1024 tokens.
P_32_255, P_256_1023, P_1024 = PREFILL_SMALL + 1, PREFILL_SMALL + 2, PREFILL_SMALL + 3


@pytest.fixture
def timeline(qtbot):
    view = BatchTimelineView(capacity=400, max_lanes=256)
    qtbot.addWidget(view)
    return view


def test_index_image_codes_and_lane_reuse(timeline):
    timeline.add_steps(KNOWN[:3])
    timeline.add_steps([])  # an empty frame changes nothing
    timeline.add_steps(KNOWN[3:])
    img = timeline.index_image()
    assert img.dtype == np.uint8 and img.shape == (256, 7)
    expected_lane0 = [P_256_1023, DECODE, DECODE, DECODE, P_32_255, DECODE, DECODE]
    expected_lane1 = [EMPTY, EMPTY, P_32_255, DECODE, DECODE, EMPTY, P_1024]
    assert img[0].tolist() == expected_lane0
    assert img[1].tolist() == expected_lane1
    assert not img[2:].any()
    assert timeline.steps_shown().tolist() == list(range(7))
    # Lanes: 3 took 1's lane, 4 took 2's lane; the finished and preempted hold none.
    assert timeline.lane_of(3) == 0 and timeline.lane_of(4) == 1
    assert timeline.lane_of(1) == -1 and timeline.lane_of(2) == -1
    assert timeline.lanes_in_use == 2
    # The drawn image item holds the same codes, and its LUT maps them to the theme.
    assert np.array_equal(timeline._image.image, img)
    assert tuple(timeline._lut[DECODE, :3]) == DARK.decode
    assert tuple(timeline._lut[P_1024, :3]) == DARK.prefill
    assert tuple(timeline._lut[EMPTY, :3]) == DARK.background
    assert tuple(timeline._lut[PREFILL_SMALL, :3]) != DARK.prefill  # small chunks: a lighter shade


def test_marks_at_step_and_lane(timeline):
    timeline.add_steps(KNOWN)
    assert timeline.marks(JOINED) == [(0, 0, 1), (2, 1, 2), (4, 0, 3), (6, 1, 4)]
    assert timeline.marks(FINISHED) == [(3, 0, 1)]
    assert timeline.marks(PREEMPTED) == [(5, 1, 2)]
    # The scatter items are drawn inside those cells (x = step, y = lane).
    x, y = timeline._scatter[FINISHED].getData()
    assert np.floor(x).tolist() == [3] and np.floor(y).tolist() == [0]
    x, y = timeline._scatter[PREEMPTED].getData()
    assert np.floor(x).tolist() == [5] and np.floor(y).tolist() == [1]
    x, y = timeline._scatter[JOINED].getData()
    assert np.floor(x).tolist() == [0, 2, 4, 6] and np.floor(y).tolist() == [0, 1, 0, 1]
    # Token bars: stacked prefill + decode per step.
    edges, total, decode = timeline.token_bars()
    assert total.tolist() == [512, 1, 101, 2, 41, 1, 2001]
    assert decode.tolist() == [0, 1, 1, 2, 1, 1, 1]


def test_the_lanes_are_plain_data_a_view_only_draws():
    """The lane bookkeeping and the ring buffer need no Qt: the same answers with no widget."""
    import ast
    from pathlib import Path

    from kvscope.widgets import batch_lanes

    tree = ast.parse(Path(batch_lanes.__file__).read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not {m for m in imported if m.split(".")[0] in ("PySide6", "pyqtgraph")}
    lanes = BatchLanes(capacity=400, max_lanes=256)
    lanes.add_steps(KNOWN)
    img = lanes.index_image()
    assert img[0].tolist() == [P_256_1023, DECODE, DECODE, DECODE, P_32_255, DECODE, DECODE]
    assert img[1].tolist() == [EMPTY, EMPTY, P_32_255, DECODE, DECODE, EMPTY, P_1024]
    assert lanes.marks(PREEMPTED) == [(5, 1, 2)]
    assert lanes.cells_of(3)[0].tolist() == [False] * 4 + [True] * 3
    assert lanes.step_label(6) == "6" and lanes.step_label(9) == "9"  # extrapolated past the newest
    lanes.clear()
    assert lanes.count == 0 and lanes.lanes_in_use == 0 and lanes.index_image().shape == (256, 0)


def test_ring_buffer_keeps_capacity(qtbot):
    view = BatchTimelineView(capacity=10, max_lanes=16)
    qtbot.addWidget(view)
    # Request i runs only in step i (a 1-token chunk that finishes at once).
    steps = [step(i, [i], [1], [True], joined=[i], finished=[i]) for i in range(25)]
    view.add_steps(steps[:4])
    assert view.index_image().shape == (16, 4)
    view.add_steps(steps[4:22])  # more steps than the capacity in one frame
    view.add_steps(steps[22:])
    assert view.steps_shown().tolist() == list(range(15, 25))
    img = view.index_image()
    assert img.shape == (16, 10)
    assert (img[0] == PREFILL_SMALL).all() and not img[1:].any()  # every request reused lane 0
    assert [m[0] for m in view.marks(FINISHED)] == list(range(15, 25))
    assert [m[0] for m in view.marks(JOINED)] == list(range(15, 25))
    assert "request 24" in view.hover_text_at(24.5, 0.5)  # x counts steps since clear()
    assert view.hover_text_at(14.5, 0.5) == ""  # scrolled out
    view.clear()
    assert view.index_image().shape == (16, 0)
    assert view.marks(FINISHED) == [] and view.lanes_in_use == 0



def test_the_steps_held_fill_the_width_until_the_ring_is_full(timeline):
    """A slow engine (the real backend: ~5 steps a second) once filled 27 of the 400 columns, the rest
    blank: the x range grows with the steps held, from 24 steps, and scrolls once the ring is full."""
    def x_range():
        low, high = timeline._plot.vb.viewRange()[0]
        return round(low), round(high)

    steps = [step(i, [1], [1], [i == 0], joined=[1] if i == 0 else []) for i in range(600)]
    timeline.add_steps(steps[:3])
    assert x_range() == (0, 24)  # a few steps: no step drawn as a full-width bar
    timeline.add_steps(steps[3:27])
    low, high = x_range()
    assert low == 0 and 27 <= high <= 28  # 27 steps take the width (in steps of 4), not 27 of 400
    timeline.add_steps(steps[27:250])
    assert x_range() == (0, 252)
    timeline.add_steps(steps[250:])  # more than the ring holds: 400 wide, the newest step at the right
    low, high = x_range()
    assert high - low == 400 and 600 <= high <= 604

def test_overflow_beyond_lane_cap_is_reported(qtbot):
    view = BatchTimelineView(capacity=5, max_lanes=8)
    qtbot.addWidget(view)
    ids = list(range(100, 120))
    view.add_steps([step(0, ids, [1] * 20, [False] * 20, joined=ids)])
    assert view.lanes_in_use == 8
    img = view.index_image()
    assert (img[:, 0] == DECODE).all()  # the first 8 of the batch got the 8 lanes
    assert view.lane_of(100) == 0 and view.lane_of(107) == 7 and view.lane_of(108) == -1
    text = view.overflow_text()
    assert "8 lanes" in text and "12" in text
    assert not view._overflow_label.isHidden()
    assert view.overflow_requests_total == 12
    # The token bars still count all 20.
    assert view.token_bars()[1].tolist() == [20]
    # When the lanes free up, the leftover requests get lanes; once the overflow scrolls out of
    # the window the notice goes.
    view.add_steps([step(1, ids, [1] * 20, [False] * 20, finished=ids[:8])])
    view.add_steps([step(2 + i, ids[8:], [1] * 12, [False] * 12) for i in range(6)])
    assert view.lanes_in_use == 8 and view.overflow_requests_total == 12
    assert view.overflow_text() != ""  # 4 still lack a lane
    view.add_steps([step(8 + i, ids[8:16], [1] * 8, [False] * 8) for i in range(6)])
    assert view.overflow_text() == "" and view._overflow_label.isHidden()


def test_hover_text_and_mouse_move(timeline, qtbot):
    timeline.add_steps(KNOWN)
    text = timeline.hover_text_at(0.5, 0.5)
    assert "step 0" in text and "request 1" in text
    assert "prefill chunk of 512 tokens" in text and "12.50 ms" in text
    assert "decode (1 token)" in timeline.hover_text_at(1.5, 0.5)
    assert "finished" in timeline.hover_text_at(3.5, 0.5)
    assert "request 2" in timeline.hover_text_at(5.5, 1.5) and "preempted" in timeline.hover_text_at(5.5, 1.5)
    assert "prefill chunk of 2,000 tokens" in timeline.hover_text_at(6.5, 1.5)
    assert timeline.hover_text_at(1.5, 1.5) == ""  # an empty cell
    assert timeline.hover_text_at(100.5, 0.5) == ""  # no such step yet
    # A real mouse move over the cell (step 2, lane 1) produces the same text.
    timeline.resize(1000, 500)
    timeline.show()
    qtbot.waitExposed(timeline)
    qtbot.mouseMove(timeline.timeline_viewport(), timeline.timeline_pos(2.5, 1.5))
    qtbot.waitUntil(lambda: "request 2" in timeline.last_hover_text, timeout=2000)
    assert "prefill chunk of 100 tokens" in timeline.last_hover_text


def test_click_emits_request_selected(timeline, qtbot):
    timeline.add_steps(KNOWN)
    timeline.resize(1000, 500)
    timeline.show()
    qtbot.waitExposed(timeline)
    vp = timeline.timeline_viewport()
    with qtbot.waitSignal(timeline.request_selected, timeout=2000) as blocker:
        qtbot.mouseClick(vp, Qt.MouseButton.LeftButton, pos=timeline.timeline_pos(3.5, 1.5))
    assert blocker.args == [2]
    assert timeline.selected_request == 2
    with qtbot.waitSignal(timeline.request_selected, timeout=2000) as blocker:
        qtbot.mouseClick(vp, Qt.MouseButton.LeftButton, pos=timeline.timeline_pos(1.5, 1.5))
    assert blocker.args == [-1]


def test_select_request_highlights_without_signal(timeline, qtbot):
    timeline.add_steps(KNOWN)
    with qtbot.assertNotEmitted(timeline.request_selected):
        timeline.select_request(3)
    mask = timeline._highlight.image
    assert mask is not None and mask.shape == (256, 7)
    assert np.flatnonzero(mask[0]).tolist() == [4, 5, 6] and not mask[1:].any()
    assert tuple(timeline._highlight.lut[1][:3]) == request_color(3)
    assert timeline._lane_band.isVisible() and tuple(timeline._lane_band.getRegion()) == (0, 1)
    timeline.select_request(-1)
    assert not timeline._lane_band.isVisible()


def test_timeline_theme_switch(timeline):
    timeline.add_steps(KNOWN)
    timeline.set_theme(LIGHT)
    assert tuple(timeline._lut[DECODE, :3]) == LIGHT.decode
    assert tuple(timeline._image.lut[DECODE, :3]) == LIGHT.decode
    assert timeline._scatter[PREEMPTED].opts["brush"].color().getRgb()[:3] == LIGHT.warning
    assert "#%02x%02x%02x" % LIGHT.good in timeline._legend.text()
    assert np.array_equal(timeline.index_image(), timeline._image.image)  # data kept


def test_timeline_speed_1024_requests(qtbot, capsys):
    view = BatchTimelineView()
    qtbot.addWidget(view)
    ids = np.arange(1024)
    steps = []
    for s in range(60):
        pre = (ids + s) % 50 == 0
        toks = np.where(pre, 256, 1)
        fin = ids[(ids + s) % 97 == 0]
        steps.append(step(s, ids, toks, pre, joined=ids if s == 0 else [], finished=fin))
    view.add_steps(steps[:1])
    t0 = time.perf_counter()
    view.add_steps(steps[1:])
    dt = time.perf_counter() - t0
    with capsys.disabled():
        print(f"\n[timing] BatchTimelineView.add_steps, 59 steps x 1,024 requests: {dt * 1e3:.1f} ms")
    assert view.overflow_text() != ""  # 1,024 running requests > 256 lanes: said, not dropped


# ---------------------------------------------------------------------- live plots

def synthetic_series(n=500, m=80):
    rng = np.random.default_rng(0)
    t = np.cumsum(rng.uniform(0.01, 0.03, n))
    ft = np.sort(rng.uniform(0, t[-1], m))
    return {
        "time_s": t,
        "kv_usage": np.clip(np.linspace(0, 1.2, n), 0, 1),
        "compute_utilization": np.linspace(0.1, 0.4, n),
        "num_running": np.minimum(np.arange(n), 200).astype(np.int64),
        "num_waiting": np.maximum(np.arange(n) - 300, 0).astype(np.int64),
        "throughput_tokens_per_s": rng.uniform(1000, 2000, n),
        "preemptions": np.cumsum(rng.random(n) < 0.05),
        "first_token_time_s": ft,
        "ttft_s": rng.uniform(0.2, 0.5, m),
        "queue_time_s": rng.uniform(0.05, 0.1, m),
    }


@pytest.fixture
def plots(qtbot):
    w = LivePlots()
    qtbot.addWidget(w)
    return w


def test_set_series_updates_curves(plots):
    s = synthetic_series()
    plots.set_series(s)
    for key, scale in (("kv_usage", 100.0), ("num_running", 1.0),
                       ("num_waiting", 1.0), ("throughput_tokens_per_s", 1.0), ("preemptions", 1.0)):
        x, y = plots.curves[key].getData()
        assert np.allclose(x, s["time_s"]), key
        assert np.allclose(y, s[key] * scale), key
    x, y = plots.curves["compute_utilization"].getData()  # drawn as its mean over the last second
    assert np.allclose(x, s["time_s"])
    assert np.allclose(y, windowed_mean(s["time_s"], s["compute_utilization"] * 100.0, COMPUTE_WINDOW_S))
    for key in ("ttft_s", "queue_time_s"):
        x, y = plots.curves[key].getData()
        assert np.allclose(x, s["first_token_time_s"]) and np.allclose(y, s[key]), key
    assert not plots.latency_log_y  # 0.05 .. 0.5 s: a linear axis
    # KV usage and compute share one percent axis, with the wall at 100 %.
    assert plots.curves["kv_usage"] in plots.plots["kv"].listDataItems()
    assert plots.curves["compute_utilization"] in plots.plots["kv"].listDataItems()
    assert plots.wall_line.value() == 100 and "KV pool full" in plots.legend_html("kv")
    assert "peak FLOP/s" in plots.plots["kv"].vb.toolTip()  # what compute utilisation means


def test_compute_utilisation_is_a_time_weighted_mean_over_the_last_second():
    t = np.arange(0.0, 3.0, 0.1) + 0.1
    spiky = np.where(np.arange(len(t)) % 10 == 0, 1.0, 0.0)  # one prefill step in ten at 100 %
    smooth = windowed_mean(t, spiky, 1.0)
    assert smooth[-1] == pytest.approx(0.1)  # ten steps of 0.1 s in the last second, one at 100 %
    assert smooth.max() <= 1.0 and smooth[15:].max() < 0.2  # no spike to 100 % once a second has passed


def test_nothing_is_written_over_the_kv_plot_s_data(plots):
    """The wall is named in the legend: no text item sits in the KV plot, where it could cover the
    curve as it reaches 100 %."""
    plots.set_series(synthetic_series())
    texts = [item for item in plots.plots["kv"].vb.addedItems if isinstance(item, pg.TextItem)]
    texts += [child for child in plots.wall_line.childItems() if isinstance(child, pg.TextItem)]
    assert texts == [] and "KV pool full" in plots.legend_html("kv")


def test_titles_axes_and_legends(plots):
    kv = plots.plots["kv"]
    assert "KV cache vs compute" in kv.titleLabel.text
    for legend in ("KV cache usage", "compute (1 s mean)"):
        assert legend in kv.titleLabel.text
    assert "KV pool full" in kv.titleLabel.text  # named in the legend, never over the curve
    for name, words in (("requests", ("running", "waiting")), ("latency", ("TTFT", "queue time")),
                        ("throughput", ("output tokens/s",)), ("preemptions", ("preemptions",))):
        for w in words:
            assert w in plots.plots[name].titleLabel.text, (name, w)
    for plot in plots.plots.values():
        assert plot.getAxis("bottom").labelText == "engine clock (s)"
        assert plot.getAxis("left").labelText
    assert "%" in kv.getAxis("left").labelText


def test_long_series_are_decimated_keeping_peaks(plots, capsys):
    n = 100_000
    t = np.arange(n) * 0.01
    kv = np.full(n, 0.5)
    kv[54_321] = 1.0  # a single-step spike must survive the decimation
    s = {"time_s": t, "kv_usage": kv, "compute_utilization": np.full(n, 0.3),
         "num_running": np.arange(n) % 300, "num_waiting": np.arange(n) % 50,
         "throughput_tokens_per_s": np.sin(t) * 100 + 1000, "preemptions": np.arange(n) // 1000,
         "first_token_time_s": np.sort(np.random.default_rng(0).uniform(0, t[-1], n)),
         "ttft_s": np.geomspace(0.01, 100, n), "queue_time_s": np.geomspace(0.001, 90, n)}
    plots.set_series(s)  # warm-up
    # time a frame that redraws the thinned scatter too: one more request, the throttle's wait over
    s = {**s, "queue_time_s": s["queue_time_s"] * 0.999}
    plots._latency_throttle.cancel()
    t0 = time.perf_counter()
    plots.set_series(s)
    dt = time.perf_counter() - t0
    with capsys.disabled():
        print(f"\n[timing] LivePlots.set_series, 100k-point arrays: {dt * 1e3:.1f} ms")
    x, y = plots.curves["kv_usage"].getData()
    assert len(x) <= plots.max_points + 100
    assert y.max() == pytest.approx(100.0) and y.min() == pytest.approx(50.0)
    assert np.all(np.diff(x) >= 0)
    assert plots.latency_log_y  # 0.001 .. 100 s: log y
    assert plots.latency_shown < plots.latency_total == n
    assert f"of {n:,} shown" in plots.plots["latency"].titleLabel.text
    x, y = plots.curves["ttft_s"].getData()
    assert len(x) <= plots.max_points + 1
    assert y.max() == pytest.approx(2.0)  # log10(100 s): the worst request is kept


def test_decimate_minmax_unit():
    x = np.arange(10.0)
    y = np.array([0, 5, 1, 1, -3, 2, 2, 9, 0, 4.0])
    xs, ys = decimate_minmax(x, y, 4)  # 2 bins of 5: min and max of each, in time order
    assert xs.tolist() == [1, 4, 7, 8] and ys.tolist() == [5, -3, 9, 0]
    assert decimate_minmax(x, y, 100)[0] is x


def test_missing_and_empty_keys(plots):
    plots.set_series({})
    for item in plots.curves.values():
        x, y = item.getData()
        assert x is None or len(x) == 0
    s = synthetic_series()
    plots.set_series(s)
    partial = {"time_s": s["time_s"], "kv_usage": s["kv_usage"], "num_waiting": np.array([]),
               "ttft_s": s["ttft_s"]}  # no finish times: no latency points
    plots.set_series(partial)
    assert len(plots.curves["kv_usage"].getData()[0]) == len(s["time_s"])
    for key in ("num_waiting", "num_running", "ttft_s", "queue_time_s", "preemptions"):
        x, _ = plots.curves[key].getData()
        assert x is None or len(x) == 0, key
    plots.set_series({"kv_usage": s["kv_usage"]})  # no clock: nothing to draw against
    x, _ = plots.curves["kv_usage"].getData()
    assert x is None or len(x) == 0
    plots.clear()
    assert plots.latency_total == 0


def test_x_follows_data_until_user_pans(plots, qtbot):
    s = synthetic_series()
    plots.set_series(s)
    plots.plots["requests"].vb.sigRangeChangedManually.emit([True, False])  # as a mouse pan does
    plots.plots["requests"].setXRange(1.0, 2.0, padding=0)
    assert plots.x_range("kv") == pytest.approx((1.0, 2.0))  # shared by value
    plots.set_series(synthetic_series(n=900))
    assert plots.x_range("latency") == pytest.approx((1.0, 2.0))  # not pulled back while exploring
    plots.resize(1000, 500)
    plots.show()
    qtbot.waitExposed(plots)
    vp = plots._view.viewport()
    qtbot.mouseDClick(vp, Qt.MouseButton.LeftButton)  # QTest sends no release after the double
    qtbot.mouseRelease(vp, Qt.MouseButton.LeftButton)  # click; the scene reports clicks on release
    lo, hi = plots.x_range("preemptions")
    assert hi > 10.0  # following the data again


def test_plots_theme_switch(plots):
    plots.set_series(synthetic_series())
    plots.set_theme(LIGHT)
    assert plots.curves["kv_usage"].opts["pen"].color().getRgb()[:3] == LIGHT.warning
    assert plots.curves["compute_utilization"].opts["pen"].color().getRgb()[:3] == LIGHT.decode
    assert plots.wall_line.pen.color().getRgb()[:3] == LIGHT.accent
    assert plots._view.backgroundBrush().color().getRgb()[:3] == LIGHT.background
    assert plots.plots["kv"].getAxis("left").textPen().color().getRgb()[:3] == LIGHT.foreground
    assert "#%02x%02x%02x" % LIGHT.decode in plots.plots["kv"].titleLabel.text
    plots.set_theme(DARK)
    assert plots.curves["kv_usage"].opts["pen"].color().getRgb()[:3] == DARK.warning
    assert len(plots.curves["kv_usage"].getData()[0]) == 500  # data kept


def test_a_big_latency_scatter_is_redrawn_at_most_four_times_a_second_a_small_one_every_frame(plots, qtbot):
    def finished(n):
        return {"time_s": np.arange(10) * 0.1, "kv_usage": np.full(10, 0.5),
                "first_token_time_s": np.linspace(0, 1, n), "ttft_s": np.full(n, 0.2), "queue_time_s": np.full(n, 0.1)}

    plots.set_series(finished(100))
    plots.set_series(finished(120))
    assert plots.latency_total == 120  # small: every frame
    big = BIG_SCATTER_POINTS + 500
    plots.set_series(finished(big))
    assert plots.latency_total == big
    plots.set_series(finished(big + 50))
    assert plots.latency_total == big  # within BIG_SCATTER_INTERVAL_S of the last redraw: kept ...
    qtbot.waitUntil(lambda: plots.latency_total == big + 50, timeout=5000)  # ... and drawn when it is over
    plots._latency_throttle.cancel()  # as if BIG_SCATTER_INTERVAL_S had passed
    plots.set_series(finished(big + 80))
    assert plots.latency_total == big + 80


def test_a_frame_of_many_steps_draws_what_one_step_per_frame_draws(qtbot):
    """add_steps gives lanes step by step but writes the drawn columns together: the picture must
    not depend on how the steps were grouped into frames."""
    rng = np.random.default_rng(5)
    running, next_id, steps = [], 0, []
    for n in range(300):
        joined = []
        if rng.random() < 0.5 or not running:
            running.append(next_id)
            joined = [next_id]
            next_id += 1
        prefill = [rid in joined for rid in running]
        tokens = [int(rng.integers(1, 3000)) if p else 1 for p in prefill]
        finished = [rid for rid in running if rid not in joined and rng.random() < 0.03]
        steps.append(step(n, list(running), tokens, prefill, joined=joined, finished=finished))
        running = [rid for rid in running if rid not in finished]
    views = []
    for grouping in (1, 7, 300):
        view = BatchTimelineView(capacity=120, max_lanes=12)  # few lanes: some entries overflow
        qtbot.addWidget(view)
        for i in range(0, len(steps), grouping):
            view.add_steps(steps[i:i + grouping])
        views.append(view)
    first = views[0]
    prefill_tokens, decode_tokens = first.tokens_shown()
    shown = steps[-120:]
    assert prefill_tokens.tolist() == [sum(t for t, p in zip(s.num_new_tokens, s.is_prefill) if p) for s in shown]
    assert decode_tokens.tolist() == [sum(t for t, p in zip(s.num_new_tokens, s.is_prefill) if not p) for s in shown]
    assert first.overflow_requests_total > 0
    for view in views[1:]:
        assert np.array_equal(view.index_image(), first.index_image())
        assert np.array_equal(view.steps_shown(), first.steps_shown())
        assert all(np.array_equal(a, b) for a, b in zip(view.tokens_shown(), first.tokens_shown()))
        assert all(view.marks(kind) == first.marks(kind) for kind in (JOINED, FINISHED))
        assert view.overflow_requests_total == first.overflow_requests_total


def test_after_a_gap_in_the_steps_lanes_of_requests_no_longer_running_are_free_again(qtbot):
    """A fast run hands the timeline only the newest steps of each frame: requests that finished
    in between never show their finish, and must not keep their lanes forever."""
    view = BatchTimelineView(capacity=50, max_lanes=4)
    qtbot.addWidget(view)
    for frame in range(10):  # each frame: 4 new requests run 3 steps; they finish unseen
        first_id, first_step = 4 * frame, 1000 * frame
        ids = list(range(first_id, first_id + 4))
        view.add_steps([step(first_step + k, ids, [1] * 4, [False] * 4, joined=ids if k == 0 else [])
                        for k in range(3)])
        assert sorted(view.lane_of(r) for r in ids) == [0, 1, 2, 3]
    assert view.overflow_requests_total == 0
    view.add_steps([step(10_000, [36, 99], [1, 1], [False, False], joined=[99])])  # 36 ran before the gap
    assert view.lane_of(36) == 0 and view.lane_of(37) == -1 and view.lane_of(99) == 1


def test_a_step_retried_after_running_out_of_memory_is_no_gap(qtbot):
    """The engine numbers the retry of a step that ran out of device memory like the failed one:
    the requests of the batch keep their lanes."""
    view = BatchTimelineView(capacity=50, max_lanes=4)
    qtbot.addWidget(view)
    view.add_steps([step(7, [1, 2], [1, 1], [False, False], joined=[1, 2])])
    view.add_steps([step(8, [], [], []), step(8, [2], [1], [False])])  # 8 failed, 8 again with 1 preempted
    assert view.lane_of(1) == 0 and view.lane_of(2) == 1


def test_a_short_value_axis_labels_only_what_fits_a_tall_one_is_left_alone(qtbot):
    import pyqtgraph as pg

    from kvscope.widgets.fitting_axis import FittingAxis, nice_step_at_least

    assert [nice_step_at_least(v) for v in (0.21, 1.0, 3.0, 7.0, 0.0007)] == [0.5, 1.0, 5.0, 10.0, 0.001]
    axis, plain = FittingAxis("left"), pg.AxisItem("left")
    line = axis.label_height()
    for low, high in ((0.0, 1.0), (-8.0, 118.0), (0.0, 2345.0)):
        short = 3 * line  # room for two labels
        major = axis.tickSpacing(low, high, short)[0][0]
        labels = math.floor(high / major) - math.ceil(low / major) + 1
        assert 1 <= labels <= 2, (low, high, major)
        assert plain.tickSpacing(low, high, short)[0][0] < major  # pyqtgraph's own would crowd them
        assert axis.tickSpacing(low, high, 40 * line) == plain.tickSpacing(low, high, 40 * line)


def test_a_short_axis_whose_1_2_5_steps_leave_one_label_takes_two_at_2_5(qtbot):
    """0 - 410 output tokens/s on a short plot: 200 gives three labels (too many), 500 gives "0"
    alone (no scale to read); 250 gives two."""
    from kvscope.widgets.fitting_axis import FittingAxis

    axis = FittingAxis("left")
    short = 3 * axis.label_height()  # room for two labels
    assert axis.tickSpacing(0.0, 410.0, short)[0][0] == 250.0
    assert axis.tickSpacing(0.0, 118.0, short)[0][0] == 100.0  # two labels already: left as it was
    counts = FittingAxis("left", whole_numbers=True)
    assert counts.tickSpacing(0.0, 4.1, short)[0][0] != 2.5  # never a count between whole numbers


def test_an_x_axis_labels_one_level_only(qtbot):
    """Demo mode's large font: pyqtgraph labelled a finer level too where its crowding rule let it,
    and "0.5" landed between the labels 0.4 and 0.6 ("0.40.50.6")."""
    from PySide6.QtGui import QFont, QFontMetricsF

    from kvscope.widgets.fitting_axis import FittingAxis

    axis = FittingAxis("bottom")
    axis.setStyle(tickFont=QFont("DejaVu Sans", 16))
    width = 6 * QFontMetricsF(axis.style["tickFont"]).horizontalAdvance("0.5")
    levels = axis.tickSpacing(-0.02, 0.99, width)
    labelled, finer = levels[0][0], [spacing for spacing, _ in levels[1:]]
    assert finer and all(spacing < labelled for spacing in finer)
    for spacing in finer:  # their ticks stay, unlabelled
        assert axis.tickStrings([0.1, 0.3], 1.0, spacing) == ["", ""]
    assert axis.tickStrings([0.0, labelled], 1.0, labelled) != ["", ""]
    values = FittingAxis("left")  # a value axis keeps pyqtgraph's finer labels where they fit
    values.tickSpacing(0.0, 2000.0, 400.0)
    assert values.tickStrings([500.0, 1500.0], 1.0, 500.0) == ["500", "1500"]


def test_large_values_are_labelled_in_thousands_so_the_labels_fit_the_axis(qtbot):
    """pyqtgraph drops a tick label wider than its axis: the live plots' 58 px value axes showed
    a throughput of 0 - 20,000 tokens/s labelled "0" and nothing else."""
    import pyqtgraph as pg
    from PySide6.QtGui import QImage, QPainter

    from kvscope.widgets.fitting_axis import FittingAxis

    axis = FittingAxis("left")
    assert axis.tickStrings([0, 10_000, 20_000], 1, 10_000) == ["0", "10k", "20k"]
    assert axis.tickStrings([0, 12_500, 25_000], 1, 2_500) == ["0", "12.5k", "25.0k"]
    assert axis.tickStrings([0, 1e6, 1.5e6], 1, 5e5) == ["0", "1.0M", "1.5M"]
    assert axis.tickStrings([0, 500, 1000], 1, 500) == ["0", "500", "1000"]  # small values as pyqtgraph writes them
    widget = pg.PlotWidget(axisItems={"left": axis})
    qtbot.addWidget(widget)
    axis.setWidth(58)
    widget.setLabel("left", "tokens/s")
    widget.plot([0, 1, 2, 3], [0, 12_000, 19_000, 15_000])
    widget.setYRange(0, 20_000, padding=0.05)
    widget.resize(300, 120)
    widget.show()
    qtbot.waitExposed(widget)
    image = QImage(10, 10, QImage.Format.Format_ARGB32)
    painter = QPainter(image)
    drawn = [text for _, _, text in axis.generateDrawSpecs(painter)[2]]
    painter.end()
    assert "0" in drawn and any(text.endswith("k") for text in drawn), drawn


def test_whole_number_axes_have_no_ticks_between_integers_and_x_labels_fit_side_by_side(qtbot):
    from PySide6.QtGui import QFontMetricsF

    from kvscope.widgets.fitting_axis import FittingAxis

    counts = FittingAxis("left", whole_numbers=True)
    assert all(spacing >= 1 for spacing, _ in counts.tickSpacing(0.0, 1.0, 400.0))  # 0 and 1, not 0.2 ... 0.8
    x_axis = FittingAxis("bottom")
    metrics = QFontMetricsF(x_axis.font())
    width = 8 * metrics.horizontalAdvance("13")  # room for about four labels
    major = x_axis.tickSpacing(0.5, 13.2, width)[0][0]
    labels = math.floor(13.2 / major) - math.ceil(0.5 / major) + 1
    assert labels * metrics.horizontalAdvance("13") < width


def test_lines_break_where_the_engine_stood_idle_and_compute_is_capped_at_100_percent(plots):
    from kvscope.widgets.live_plots import break_at_gaps, idle_gaps

    t = np.concatenate([np.arange(10) * 0.05, 4.0 + np.arange(10) * 0.05])  # idle from 0.45 s to 4.0 s
    gaps = idle_gaps(t)
    assert gaps.tolist() == [pytest.approx(2.225)]
    x, y = break_at_gaps(t, np.ones_like(t), gaps)
    assert len(x) == len(t) + 1 and np.isnan(x[10]) and np.isnan(y[10]) and x[11] == 4.0
    steady = np.arange(20) * 0.05
    assert not idle_gaps(steady).size and not idle_gaps(np.arange(100_000) * 0.01).size
    n = len(t)
    plots.set_series({"time_s": t, "kv_usage": np.full(n, 0.5), "compute_utilization": np.full(n, 1.2),
                      "num_running": np.ones(n), "num_waiting": np.zeros(n),
                      "throughput_tokens_per_s": np.ones(n), "preemptions": np.zeros(n)})
    x, y = plots.curves["compute_utilization"].getData()
    assert np.nanmax(y) == pytest.approx(100.0) and np.isnan(y).sum() == 1


def test_a_throttled_timeline_draws_the_newest_steps_soon_after_a_burst(qtbot):
    """The window's timeline redraws at most 30 times a second: frames coming faster fold their
    steps into the lanes at once, and a timer draws the newest within the interval."""
    view = BatchTimelineView(capacity=400, max_lanes=256, refresh_interval_s=1.0)
    qtbot.addWidget(view)
    view.add_steps(KNOWN[:3])
    qtbot.waitUntil(lambda: view._image.image is not None and view._image.image.shape[1] == 3, timeout=3000)
    view.add_steps(KNOWN[3:])  # within the interval of that drawing: folded in, drawn later
    assert view.steps_shown().tolist() == list(range(7))
    assert view._image.image.shape[1] == 3
    qtbot.waitUntil(lambda: view._image.image.shape[1] == 7, timeout=3000)
    assert np.array_equal(view._image.image, view.index_image())
