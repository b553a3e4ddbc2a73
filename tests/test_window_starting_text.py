"""Until the engine's first frame the status line says the engine is starting: its process
imports torch and builds the run first (seconds on a cold start), and a blank line read as a
window that hung."""

from __future__ import annotations

from kvscope.app.gui.main_window import STARTING_TEXT, MainWindow
from tests.test_window_behaviours import window_values


def test_the_status_line_says_the_engine_is_starting_until_its_first_frame(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("KVSCOPE_CONFIG_DIR", str(tmp_path / "config"))
    win = MainWindow(window_values(), autoplay=False)
    qtbot.addWidget(win)
    assert win.status.text() == STARTING_TEXT
    qtbot.waitUntil(lambda: win.engine_info is not None, timeout=30_000)
    qtbot.waitUntil(lambda: win.status.text() != STARTING_TEXT, timeout=5_000)
    assert "engine clock" in win.status.text()
    win.close()


def test_refused_start_up_settings_do_not_claim_an_engine_is_starting(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("KVSCOPE_CONFIG_DIR", str(tmp_path / "config"))
    win = MainWindow(window_values(model="llama-3-70b", hardware="l4-24gb"), autoplay=False)  # does not fit
    qtbot.addWidget(win)
    assert win.settings_form.current_config() is None
    assert win.status.text() != STARTING_TEXT
    win.close()


def test_a_window_opened_on_a_scenario_says_so_when_its_live_run_first_starts(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("KVSCOPE_CONFIG_DIR", str(tmp_path / "config"))
    win = MainWindow(window_values(), autoplay=False, scenario="cache-ceiling")
    qtbot.addWidget(win)
    assert win.status.text() != STARTING_TEXT  # no live engine is being built: the scenario has the CPU
    win.pages.setCurrentWidget(win.panels.page)
    win.toggle_play()  # the live run's first Play builds its engine
    assert win.status.text() == STARTING_TEXT
    qtbot.waitUntil(lambda: win.status.text() != STARTING_TEXT, timeout=30_000)
    win.close()
