"""The live run's frames while another page shows: a few a second, enough to bring an error, not
60. At 60 the window and the paused live engine woke ~190 times a second between them, and each
wake-up took a core from a real comparison's torch threads on a 2-core machine."""

from __future__ import annotations

from kvscope.app.gui.main_window import FRAME_INTERVAL_MS, HIDDEN_FRAME_INTERVAL_MS, MainWindow
from tests.test_window_behaviours import window_values


def test_the_live_page_asks_for_frames_slowly_only_while_hidden(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("KVSCOPE_CONFIG_DIR", str(tmp_path / "config"))  # the window keeps its state there
    win = MainWindow(window_values(), autoplay=False)
    qtbot.addWidget(win)
    assert win.timer.interval() == FRAME_INTERVAL_MS
    assert win.open_scenario("cache-ceiling")
    assert win.compare_showing() and win.timer.isActive()
    assert win.timer.interval() == HIDDEN_FRAME_INTERVAL_MS > FRAME_INTERVAL_MS
    win.pages.setCurrentWidget(win.panels.page)
    assert win.timer.interval() == FRAME_INTERVAL_MS
    win.pages.setCurrentWidget(win.compare)
    assert win.timer.interval() == HIDDEN_FRAME_INTERVAL_MS
    win.close()
