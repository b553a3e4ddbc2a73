"""What keeps a frame within its budget (issue 15) draws the same as doing all the work each frame:
the block map's redraw of changed blocks only, its kept overview and flash cells, the 32-bit image
items, and the views that wait while hidden or draw at most N times a second -- each shows the
newest data, at the latest when shown or after its interval."""

import numpy as np
import pyqtgraph as pg
import pytest
from PySide6.QtCore import QEvent, QObject
from PySide6.QtGui import QImage

from kvscope.engine.snapshot import REQUEST_DTYPE, Snapshot
from kvscope.widgets import block_map_grid as grid
from kvscope.widgets.batch_lanes import TimelineStep
from kvscope.widgets.batch_timeline import BatchTimelineView, token_bar_image
from kvscope.widgets.event_log import EventLog
from kvscope.widgets.image_item import ImageItem
from kvscope.widgets.live_plots import LivePlots
from kvscope.widgets.memory_bar import MemoryBudgetBar, Segment
from kvscope.widgets.requests_table import RequestsTable
from kvscope.widgets.throttled_label import ThrottledLabel

pytestmark = [pytest.mark.qt_log_ignore("This plugin does not support")]


def _snapshot(owner, state, ref):
    n = len(owner)
    return Snapshot(0.0, 0, 16, owner.copy(), state.copy(), ref.copy(), np.zeros(n, np.uint16),
                    np.zeros(n, np.uint64), np.zeros(0, REQUEST_DTYPE), 0.0, 0, 0)


def test_redrawing_only_changed_blocks_draws_what_a_full_redraw_does():
    rng = np.random.default_rng(7)
    n, width, k = 5000, 500, 50
    owner, state, ref = np.full(n, -1, np.int64), np.zeros(n, np.uint8), np.zeros(n, np.int32)
    kept, fresh = grid.BlockGrid(), grid.BlockGrid()
    kept.resize(n, width)
    fresh.resize(n, width)
    partial_draws = 0
    for step in range(120):
        changed = rng.choice(n, rng.integers(0, 2000 if step % 10 == 0 else 300), replace=False)
        owner[changed] = rng.integers(-1, 5000, len(changed))
        state[changed] = rng.integers(0, 7, len(changed))  # 5 and 6: states the map does not know
        ref[changed] = rng.integers(0, 4, len(changed))
        snap = _snapshot(owner, state, ref)
        partial_draws += kept._changed_blocks(snap) is not None
        kept.draw(snap)
        fresh.resize(n, width)  # nothing drawn before: every block
        fresh.draw(snap)
        assert np.array_equal(kept.index_image, fresh.index_image)
        assert kept.block_counts() == fresh.block_counts()
        assert np.array_equal(kept.shared_mask, fresh.shared_mask)
        if step % 3 == 0:  # the overview kept between calls, against one computed afresh
            assert np.array_equal(kept.aggregate(k), fresh.aggregate(k))
    assert partial_draws > 100  # most steps took the path being tested


def test_the_majority_of_a_cell_counts_like_a_full_histogram():
    rng = np.random.default_rng(3)
    for trial in range(100):
        cells, k = int(rng.integers(1, 200)), int(rng.integers(1, 20))
        groups = rng.integers(0, int(rng.integers(1, 256)), (cells, k)).astype(np.uint8)
        groups[: cells // 2] = groups[: cells // 2, :1]  # half the cells of one value
        keys = groups.astype(np.int64) + (np.arange(cells) * 256)[:, None]
        histogram = np.bincount(keys.reshape(-1), minlength=cells * 256).reshape(cells, 256)
        assert np.array_equal(grid.majority(groups), histogram.argmax(axis=1).astype(np.uint8))  # ties: lower


def test_kept_flash_cells_follow_the_flashes():
    n, width, k = 3000, 300, 30
    g = grid.BlockGrid()
    g.resize(n, width)
    rng = np.random.default_rng(1)
    now = 0.0
    for _ in range(40):
        now += 0.05
        g.advance_flashes(now, {"allocated": rng.integers(0, n, 20), "evicted": rng.integers(0, n, 5)})
        assert np.array_equal(g.flash_cells(k), g.reduce_overlay(g.flash_image, k, brightest=True))
    assert len(np.unique(g.flashing)) == len(g.flashing)  # each flashing block once
    for _ in range(20):  # zoomed in: no overview asked for a while, the changes pile up past the limit
        now += 0.01
        g.advance_flashes(now, {"allocated": rng.integers(0, n, 20)})
    assert g._flash_touched_count <= n // grid.REDRAW_ALL_SHARE
    assert np.array_equal(g.flash_cells(k), g.reduce_overlay(g.flash_image, k, brightest=True))
    g.advance_flashes(now + grid.FLASH_SECONDS, None)
    assert not g.flash_cells(k).any() and not len(g.flashing)


def test_the_32_bit_image_item_paints_what_pyqtgraph_paints(qtbot):
    rng = np.random.default_rng(0)

    def pixels(image: QImage) -> np.ndarray:
        image = image.convertToFormat(QImage.Format.Format_ARGB32_Premultiplied)
        return np.array([[image.pixel(x, y) for x in range(image.width())] for y in range(image.height())])

    for trial in range(30):
        n = int(rng.choice([2, 3, 64, 256]))
        lut = rng.integers(0, 256, (n, int(rng.choice([3, 4])))).astype(np.uint8)
        levels = (0, int(rng.choice([n, n - 1])))
        image = rng.integers(0, 256 if trial % 2 else n, (6, 9)).astype(np.uint8)  # some past the table
        theirs, ours = pg.ImageItem(axisOrder="row-major"), ImageItem(axisOrder="row-major")
        for item in (theirs, ours):
            item.setImage(image, autoLevels=False, levels=levels, lut=lut)
            item.render()
        assert ours.qimage.format() != QImage.Format.Format_Indexed8
        assert np.array_equal(pixels(theirs.qimage), pixels(ours.qimage))


def test_token_bars_stack_prompt_tokens_on_decode_tokens():
    image = token_bar_image(np.array([0, 30, 0]), np.array([10.0, 10.0, 0.0]), top=40.0, rows=4)
    assert image[:, 0].tolist() == [1, 0, 0, 0]  # 10 decode tokens: the first of 4 rows of 10
    assert image[:, 1].tolist() == [1, 2, 2, 2]  # 10 decode, then 30 prompt tokens
    assert not image[:, 2].any()
    assert token_bar_image(np.array([0]), np.array([1.0]), top=1000.0, rows=4)[0, 0] == 1  # never lost


def test_timeline_marks_are_given_again_only_when_they_change(qtbot):
    view = BatchTimelineView(capacity=20, max_lanes=8)
    qtbot.addWidget(view)
    view.add_steps([TimelineStep(0, 0.0, 0.01, [1, 2], [5, 5], [True, True], [1, 2], [], [])])
    finished = view._scatter["finished"]
    assert view._scatter["joined"].isVisible() and not finished.isVisible()  # no finished mark: not drawn
    view.add_steps([TimelineStep(1, 0.01, 0.01, [1, 2], [1, 1], [False, False], [], [1], [])])
    assert finished.isVisible() and np.floor(finished.getData()[0]).tolist() == [1]


def test_a_hidden_event_log_formats_its_lines_when_shown(qtbot):
    log = EventLog(capacity=5)
    qtbot.addWidget(log)
    formatted = []

    def line(n):
        formatted.append(n)
        return "kind", f"event {n}"

    log.add_lines(list(range(8)), line)
    assert formatted == [] and log.view.toPlainText() == ""  # hidden: kept, not formatted
    log.show()
    qtbot.waitUntil(lambda: log.shown_lines() == [f"event {n}" for n in range(3, 8)])  # the newest 5
    assert all(n >= 3 for n in formatted)  # what scrolled out while hidden was never formatted
    log.add_lines([8], line)
    assert log.shown_lines()[-1] == "event 8"


def test_a_hidden_requests_table_takes_the_newest_rows_when_shown(qtbot):
    table = RequestsTable()
    qtbot.addWidget(table)
    rows = np.zeros(3, REQUEST_DTYPE)
    rows["request_id"] = [4, 5, 6]
    table.show_requests(rows)
    assert table.model_.rowCount() == 0  # hidden: nothing set
    table.show()
    qtbot.waitUntil(lambda: table.model_.rowCount() == 3)
    fewer = np.zeros(2, REQUEST_DTYPE)
    fewer["request_id"] = [7, 8]
    table.show_requests(fewer)  # shown: at once, the rows past the new count removed
    assert table.model_.rowCount() == 2 and table.model_.data(table.model_.index(1, 0)) == "#8"


def test_throttled_step_curves_draw_the_newest_series_after_the_interval(qtbot):
    plots = LivePlots(step_interval_s=0.05)
    qtbot.addWidget(plots)

    def series(n):
        t = np.arange(n, dtype=np.float64)
        return {"time_s": t, "kv_usage": np.full(n, 0.5), "num_running": np.full(n, 3.0)}

    plots.set_series(series(10))
    assert len(plots.curves["kv_usage"].getData()[0]) == 10  # the first draws at once
    plots.set_series(series(11))
    plots.set_series(series(12))
    assert len(plots.curves["kv_usage"].getData()[0]) == 10  # within the interval: later ...
    qtbot.waitUntil(lambda: len(plots.curves["num_running"].getData()[0]) == 12, timeout=2000)  # ... the newest


def test_throttled_label_and_memory_bar_end_on_the_newest(qtbot):
    label = ThrottledLabel(interval_s=0.05)
    qtbot.addWidget(label)
    label.setText("step 1")
    label.setText("step 2")
    assert label.text() == "step 2"  # what the window knows at once ...
    qtbot.waitUntil(lambda: text_on_show(label) == "step 2", timeout=2000)  # ... and shows soon after

    bar = MemoryBudgetBar()
    qtbot.addWidget(bar)
    bar.resize(600, 60)
    bar.show()
    qtbot.waitExposed(bar)
    painted = []

    class PaintCounter(QObject):
        def eventFilter(self, obj, event):  # noqa: N802 - Qt's name
            if event.type() == QEvent.Type.Paint:
                painted.append(bar.total_bytes)  # what this paint draws
            return False

    counter = PaintCounter()
    bar.installEventFilter(counter)
    for used in (1, 2, 3):
        bar.set_segments("Memory budget", [Segment("KV in use", used * 2**30, (200, 100, 50), "")])
        qtbot.wait(1)
    qtbot.waitUntil(lambda: bool(painted) and painted[-1] == 3 * 2**30, timeout=2000)
    assert len(painted) < 3  # not a paint per call


def test_a_status_line_wider_than_the_window_ends_in_an_ellipsis_and_says_all_in_its_tooltip(qtbot):
    label = ThrottledLabel(interval_s=0.0)
    qtbot.addWidget(label)
    label.resize(200, 20)
    label.show()
    whole = "engine clock 12.00 s   step 3,400   running 25   simulated times: datasheet peaks, uncalibrated"
    label.setText(whole)
    qtbot.waitUntil(lambda: text_on_show(label).endswith("\u2026"), timeout=2000)
    assert label.text() == whole and label.toolTip() == whole
    assert label.minimumSizeHint().width() == 0  # it does not hold the window wider than the screen
    label.resize(2000, 20)
    qtbot.waitUntil(lambda: text_on_show(label) == whole, timeout=2000)
    assert label.toolTip() == ""


def text_on_show(label: ThrottledLabel) -> str:
    """The text the label shows now (its text() is the newest given)."""
    return super(ThrottledLabel, label).text()
