"""Until the engine's first frame the status line says the engine is starting: its process
imports torch and builds the run first (seconds on a cold start), and a blank line read as a
window that hung."""

from __future__ import annotations

from kvscope.app.gui.main_window import MainWindow
from kvscope.app.gui.window_state import STARTING_TEXT, starting_text
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


def test_the_first_start_says_it_converts_the_trained_model(tmp_path, monkeypatch):
    """The very first start converts the trained model once (~20 s on a slow machine): said, so the
    window does not look stuck; once converted, the usual line."""
    from types import SimpleNamespace

    from kvscope.app.lab.trained_model import TRAINED_MODEL

    monkeypatch.setenv("KVSCOPE_CACHE_DIR", str(tmp_path / "empty-cache"))
    trained = SimpleNamespace(backend="real", model_path=None, model=SimpleNamespace(name=TRAINED_MODEL.name))
    assert "converts the trained model into kvscope's cache, once" in starting_text(trained)
    assert starting_text(SimpleNamespace(backend="simulated", model_path=None, model=trained.model)) == STARTING_TEXT
    assert starting_text(None) == STARTING_TEXT
