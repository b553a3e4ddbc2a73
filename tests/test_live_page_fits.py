"""The live page at 1280x720 and 1920x1080 as the simulated default shows it (issue 15): the prompt
box's "typed prompts are off" hint fits its box and the reason under it is not cut, the batch
timeline keeps a lane strip and its step axis's label whole, the block map's legend is not cut, and
the splitter grips keep clear of the text above them."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from PySide6.QtCore import QPoint

from kvscope.app.cli.gui import initial_values
from kvscope.app.gui.main_window import MainWindow

LANE_STRIP_MIN_PX = 40  # at 110 - 130 px of token bars, 1280x720 left the lanes ~5 px
GRIP_CLEARANCE_PX = 14  # the grip's centre below the last line of text above it: it was 10 px, touching it


@pytest.fixture(params=[(1280, 720), (1920, 1080)], ids=["1280x720", "1920x1080"])
def window(request, qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("KVSCOPE_CONFIG_DIR", str(tmp_path / "config"))
    args = SimpleNamespace(backend="simulated", model=None, hardware=None, workload=None, model_path=None)
    win = MainWindow(initial_values(args), autoplay=False)
    qtbot.addWidget(win)
    win.resize(*request.param)
    win.show()
    qtbot.waitExposed(win)
    win.arrange_docks()
    qtbot.waitUntil(lambda: win.engine_info is not None, timeout=20000)
    qtbot.waitUntil(lambda: win.prompt.no_text_reason != "no engine is running yet")
    yield win
    win.close()


def test_the_off_prompt_box_says_so_inside_its_box_and_why_under_it_uncut(window, qtbot):
    box = window.prompt
    assert box.no_text_reason is not None and "simulated" in box.no_text_reason
    hint = box.input.placeholderText()
    assert box.input.fontMetrics().horizontalAdvance(hint) <= box.input.viewport().width()
    assert box.no_text_reason in box.status_text()  # the whole reason, in the wrapped line under the box
    qtbot.waitUntil(lambda: box.status.height() >= box.status.heightForWidth(box.status.width()))
    assert box.answer.isHidden()  # no answer can come: its pane gives its height to the panels above
    assert box.height() <= box.compact_height(box.width()) + 1


def test_the_batch_timeline_keeps_a_lane_strip_and_its_axis_label_whole(window, qtbot):
    timeline = window.timeline
    lanes = timeline._plot.vb.sceneBoundingRect()
    assert lanes.height() >= LANE_STRIP_MIN_PX
    label = timeline._plot.getAxis("bottom").label
    assert label.isVisible() and label.toPlainText().strip() == "engine step"
    text_bottom = label.mapRectToScene(label.boundingRect()).bottom()
    assert text_bottom <= timeline._view.viewport().height() + 3  # the label's own padding may touch the edge


def test_the_block_map_legend_is_whole_and_the_grips_keep_clear_of_the_text(window, qtbot):
    block_map, split = window.block_map, window.center_split
    legend = block_map._legend
    qtbot.waitUntil(lambda: legend.height() >= legend.heightForWidth(legend.width()))
    for index, above in ((1, block_map._status), (2, window.timeline._view)):
        handle = split.handle(index)
        grip_y = handle.mapTo(split, QPoint(0, handle.height() // 2)).y()
        text_bottom = above.mapTo(split, QPoint(0, above.height())).y()
        assert grip_y - text_bottom >= GRIP_CLEARANCE_PX or index == 2  # the timeline's plot ends in its margin
        assert grip_y > text_bottom


def test_an_engine_that_answers_text_gets_the_prompt_box_its_share_back(window, qtbot):
    import dataclasses

    from kvscope.app.gui.main_window import DESK_SPLIT
    from kvscope.app.host.protocol import FrameDelta

    split, box = window.center_split, window.prompt
    at = split.indexOf(box)
    compact = split.sizes()[at]
    window.render_frame(FrameDelta(engine_info=dataclasses.replace(window.engine_info, no_text_reason=None)))
    assert not box.answer.isHidden()
    qtbot.waitUntil(lambda: split.sizes()[at] > compact)
    total = sum(split.sizes())  # its share, or its least height (the input and a few lines of answer)
    assert split.sizes()[at] == pytest.approx(max(total * DESK_SPLIT["prompt"], box.minimumSizeHint().height()), abs=3)
