"""What a run at maximum speed asks of the timeline and the plots: every frame brings hundreds of
steps and thousands of points, and the views must draw them without redoing work a frame does not
need: lanes given without per-step array calls, value axes that stay put while the data fits
them, curves reduced to about one min/max pair per pixel."""

import numpy as np
import pytest

from kvscope.widgets.batch_lanes import FINISHED, JOINED, PREEMPTED, BatchLanes, TimelineStep
from kvscope.widgets.batch_timeline import LANE_ROWS_STEP, BatchTimelineView
from kvscope.widgets.live_plots import LivePlots
from kvscope.widgets.minmax_decimation import MinMaxDecimator, decimate_minmax
from kvscope.widgets.trailing_mean import TrailingMean, windowed_mean


def _frames_of_a_fast_run(seed: int, frames: int, steps_per_frame: int, batch: int):
    """Frames of steps as a flat-out engine sends them: a batch of about `batch` requests, some
    finishing or preempted each step and new ones joining, now and then a prompt chunk."""
    rng = np.random.default_rng(seed)
    running, next_id, n, out = list(range(batch)), batch, 0, []
    for _ in range(frames):
        steps = []
        for _ in range(steps_per_frame):
            n += 1
            finished = [r for r in running if rng.random() < 0.02]
            preempted = [r for r in running if r not in finished and rng.random() < 0.005]
            running = [r for r in running if r not in finished and r not in preempted]
            joined = []
            while len(running) < batch + int(rng.integers(-2, 3)):
                running.append(next_id)
                joined.append(next_id)
                next_id += 1
            tokens = [int(rng.integers(2, 2048)) if r in joined else 1 for r in running]
            steps.append(TimelineStep(n, n * 1e-3, 1e-3, list(running), tokens, [t > 1 for t in tokens],
                                      joined, finished, preempted))
        out.append(steps)
    return out


def test_lanes_follow_the_batch_and_free_every_lane_of_a_request_that_left():
    lanes = BatchLanes(capacity=400, max_lanes=64)
    for frame in _frames_of_a_fast_run(seed=3, frames=20, steps_per_frame=400, batch=12):
        lanes.add_steps(frame)
        last = frame[-1]
        held = {lanes.lane_of(r) for r in last.request_ids}
        # every request of the newest batch holds a lane of its own, and nobody else holds one
        assert -1 not in held and len(held) == len(last.request_ids)
        assert lanes.lanes_in_use == len(last.request_ids)
        for kind, listed in ((FINISHED, last.finished), (PREEMPTED, last.preempted)):
            assert all(lanes.lane_of(r) == -1 for r in listed), kind
        # a request that joined in the newest step sits on the lowest lane free when it came
        shown = lanes.marks(JOINED)
        assert all(0 <= lane < 64 for _, lane, _ in shown)


def test_the_timeline_value_axes_keep_their_range_while_the_data_fits(qtbot):
    view = BatchTimelineView(capacity=400, max_lanes=256)
    qtbot.addWidget(view)
    view.resize(900, 300)
    frames = _frames_of_a_fast_run(seed=4, frames=12, steps_per_frame=400, batch=9)
    lane_tops, bar_tops = [], []
    for frame in frames:
        view.add_steps(frame)
        view._refresh()  # as the throttle would, now
        lane_tops.append(view._plot.vb.viewRange()[1][1])
        bar_tops.append(view._bars.vb.viewRange()[1][1])
    # nine or so lanes in use: a multiple of LANE_ROWS_STEP that holds them, the same every frame
    assert all(top % LANE_ROWS_STEP == 0 and top >= 9 for top in lane_tops)
    assert len(set(lane_tops)) == 1
    # every frame has prompt chunks up to ~2,000 tokens: the bars' height held, and held them all
    assert len(set(bar_tops)) <= 3
    for frame, top in zip(frames, bar_tops):
        tallest = max(sum(s.num_new_tokens) for s in frame)
        assert tallest <= top


def test_a_lone_request_gets_a_short_lane_view_not_a_tall_empty_one(qtbot):
    view = BatchTimelineView(capacity=400, max_lanes=256)
    qtbot.addWidget(view)
    view.add_steps([TimelineStep(1, 0.0, 1e-3, [0], [100], [True], [0], [], [])])
    view._refresh()
    assert view._plot.vb.viewRange()[1] == pytest.approx([0, LANE_ROWS_STEP])


def test_a_long_curve_is_drawn_as_about_one_min_max_pair_per_pixel(qtbot):
    plots = LivePlots(max_points=3000)
    qtbot.addWidget(plots)
    plots.resize(400, 900)
    plots.show()
    n = 3000
    x = np.linspace(0.0, 300.0, n)
    y = 0.5 + 0.4 * np.sin(x)
    plots.set_series({"time_s": x, "kv_usage": y, "compute_utilization": y / 2, "num_running": 10 * y,
                      "num_waiting": 5 * y, "throughput_tokens_per_s": 100 * y,
                      "preemptions": np.arange(n, dtype=float)})
    item = plots.curves["throughput_tokens_per_s"]
    qtbot.waitUntil(lambda: item.getViewBox().width() > 100)
    drawn = item._getDisplayDataset()
    width_px = item.getViewBox().width()
    assert len(drawn.x) <= 2.5 * width_px < n
    # the envelope survives: the curve's drawn peaks are the data's
    assert drawn.y.max() == pytest.approx(100 * y.max()) and drawn.y.min() == pytest.approx(100 * y.min())


def test_the_compute_line_s_mean_computed_for_new_points_only_equals_the_mean_over_the_whole_run():
    rng = np.random.default_rng(7)
    t = np.cumsum(rng.exponential(0.01, 5000))
    t[2000:] += 3.0  # an idle stretch: its gap must not weigh as busy time either way
    y = rng.random(5000) * 100
    whole = windowed_mean(t, y, 1.0)
    mean = TrailingMean(1.0)
    first = mean.of(t[:40], y[:40])
    assert np.allclose(first, windowed_mean(t[:40], y[:40], 1.0))
    for end in (41, 300, 1999, 2000, 2001, 2500, 5000):  # frames of 1 to ~1,700 new points
        grown = mean.of(t[:end], y[:end])
        assert len(grown) == end
        # past the first window the means are the whole run's; in it, the first point's weight is
        # the median spacing of the points seen when it was first computed
        late = t[:end] > t[0] + 1.0
        assert np.allclose(grown[late], whole[:end][late])
    # a series that is not the one computed (a new run, or a replay's seek) is computed again
    other = mean.of(t[:100] + 50.0, y[:100])
    assert np.allclose(other, windowed_mean(t[:100] + 50.0, y[:100], 1.0))


def test_a_growing_series_decimated_frame_by_frame_keeps_its_peaks_in_time_order_within_budget():
    rng = np.random.default_rng(11)
    n = 200_000
    x = np.cumsum(rng.exponential(0.002, n))
    y = np.cumsum(rng.normal(0, 1, n))
    y[rng.integers(0, n, 50)] = np.nan  # a NaN is neither a min nor a max
    spikes = np.arange(5_000, n, 10_000)
    y[spikes] = 1e6  # short peaks, one point each, far more than a bin apart: every one must be drawn
    decimator = MinMaxDecimator(3000)
    end = 0
    while end < n:
        end = min(n, end + int(rng.integers(1, 5000)))  # frames of 1 to 5,000 new points
        xs, ys = decimator.of(x[:end], y[:end])
        assert np.all(np.diff(xs) > 0)  # real points, in time order, none twice
        assert len(xs) <= 3000 + decimator._k
        assert np.isin(xs, x[:end]).all()
        seen = y[:end]
        assert np.nanmax(ys) == np.nanmax(seen) and np.nanmin(ys) == np.nanmin(seen)
        assert np.count_nonzero(ys == 1e6) == np.count_nonzero(spikes < end)
    whole_x, _ = decimate_minmax(x, y, 3000)
    assert abs(len(xs) - len(whole_x)) < 0.5 * len(whole_x)  # about the budget decimating whole gives
    # a series that did not grow from the one seen (a new run) is decimated afresh
    xs, ys = decimator.of(x[:1000] + 1.0, y[:1000])
    assert np.array_equal(xs, x[:1000] + 1.0)
