"""The window against bad input, sixth round: a run whose engine clock passes the plots' old clock
limit (1e8 s: a year-long trace slowed a hundredfold); demo mode started with a size and a theme; a
recording cut short while it is replayed (one dialog, not one a frame); the engine killed while
recording (the dialog says what the file keeps); names a file dialog returns as typed (over 255
bytes, 10,000 characters of right-to-left overrides, a NUL) for a config.json, a model folder, a
trace or a recording. Each is said where the user is, short, and nothing the user had is lost."""

from __future__ import annotations

import os
import re
import signal
import time
from types import SimpleNamespace

import numpy as np
import pytest
from PySide6.QtCore import QRect
from PySide6.QtWidgets import QFileDialog, QMessageBox

from kvscope.app.gui import recording_control
from kvscope.app.lab.recording.format import STEPS
from kvscope.app.lab.recording.reader import steps_held
from kvscope.app.lab.recording.records import open_records
from kvscope.widgets.compare_plots import ComparePlots
from kvscope.widgets.live_plots import LivePlots

from small_recording import record_small_run
from test_gui_hostile_fourth import TIMEOUT_MS, running

YEAR_S = 365.25 * 86400


@pytest.fixture
def warned(monkeypatch):
    said = []
    monkeypatch.setattr(QMessageBox, "warning", lambda parent, title, text, *a, **k: said.append((title, text)))
    monkeypatch.setattr(QMessageBox, "information", lambda parent, title, text, *a, **k: said.append((title, text)))
    return said


def pick(monkeypatch, button, path) -> None:
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(path), ""))
    button.click()


# -- 1. A clock past 1e8 s ---------------------------------------------------------------------------

def steps_until(end_s: float, n: int = 400) -> dict:
    t = np.linspace(0.0, end_s, n)
    return {"time_s": t, "kv_usage": np.full(n, 0.5), "num_running": np.ones(n), "num_waiting": np.ones(n),
            "throughput_tokens_per_s": np.ones(n), "compute_utilization": np.full(n, 0.3),
            "preemptions": np.zeros(n)}


@pytest.mark.parametrize("end_s", [2e8, 2e9, 1e15])
def test_the_live_plots_follow_a_clock_past_1e8_s_to_its_latest_step(qtbot, end_s):
    plots = LivePlots()
    qtbot.addWidget(plots)
    plots.resize(400, 800)
    plots.show()
    plots.set_series(steps_until(end_s))
    plots.grab()
    lo, hi = plots.x_range()
    assert lo <= 0.0 and hi >= end_s  # the newest step is on the plot, not past its right edge
    plots.clear()  # a new run starts with the usual limit: zooming far out stops at three years again
    plots.set_series(steps_until(10.0))
    assert plots.plots["kv"].vb.state["limits"]["xLimits"][1] == 1e8


def test_the_comparison_plots_follow_a_clock_past_1e8_s(qtbot):
    plots = ComparePlots()
    qtbot.addWidget(plots)
    plots.set_configurations(["a", "b"])
    t = np.linspace(0.0, 3e9, 100)
    plots.set_series(0, t, np.full(100, 0.5), np.ones(100), np.arange(100.0))
    for key, plot in plots.plots.items():
        if plot.isVisible():
            assert plot.vb.viewRange()[0][1] >= 3e9, key


def test_a_year_long_trace_slowed_a_hundredfold_plays_with_its_plots_following_the_clock(
        window, qtbot, monkeypatch, tmp_path, warned):
    """A trace may span a year and be replayed 0.01 times as fast: its clock reaches ~3e9 s."""
    trace = tmp_path / "year.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(
        f"2023-{month:02d}-01 00:00:00.0,100,4\n" for month in range(1, 13)))
    window.settings.num_requests.setValue(12)  # its rows: more is refused at Requests (fourteenth pass)
    pick(monkeypatch, window.settings.open_trace, trace)
    window.settings.trace_speedup.setValue(0.01)
    window.speed.setCurrentText("max")
    assert window.apply_settings(play=True), window.settings.errors["workload"].text()
    qtbot.waitUntil(lambda: window.latest_snapshot is not None and window.latest_snapshot.time_s > 10 * YEAR_S,
                    timeout=TIMEOUT_MS)
    qtbot.waitUntil(lambda: window.plots.x_range()[1] >= window.latest_snapshot.time_s, timeout=TIMEOUT_MS)
    assert not warned


# -- 2. Demo mode started with a size and a theme -----------------------------------------------------

@pytest.fixture
def leaves_demo_mode(window):
    yield window
    window.demo.leave()  # the application font is global: leave it as it was for the next test


def test_demo_mode_started_with_a_size_and_a_theme_presents_at_that_size_in_that_theme(leaves_demo_mode, qtbot):
    """`kvscope gui --demo --size 1280x720 --theme light`: the talk's projector size and theme are
    demo mode's, not the desk's to come back to after it."""
    window = leaves_demo_mode
    window.setGeometry(QRect(40, 30, 760, 560))  # inside the test screen (offscreen: 800x800)
    qtbot.waitUntil(lambda: window.geometry().width() == 760, timeout=5000)
    before = QRect(window.geometry())
    window.start_demo(size=(1280, 720), theme="light")
    assert window.demo.active and window.theme.name == "light" and not window.isFullScreen()
    qtbot.waitUntil(lambda: (window.width(), window.height()) == (1280, 720), timeout=5000)
    window.demo._cover_the_screen()  # the timer of a window manager that granted no fullscreen
    assert (window.width(), window.height()) == (1280, 720)
    hint = window.minimumSizeHint()
    assert hint.width() <= 1280 and hint.height() <= 720, f"demo mode needs {hint.width()}x{hint.height()}"
    window.toggle_demo()  # F11 leaves to the desk as it was
    qtbot.waitUntil(lambda: window.geometry() == before, timeout=5000)
    assert window.theme.name == "dark"
    window.toggle_demo()  # and enters again at the talk's size and theme
    assert window.theme.name == "light"
    qtbot.waitUntil(lambda: (window.width(), window.height()) == (1280, 720), timeout=5000)


@pytest.mark.parametrize("size, theme, says", [((1280, 720), "purple", "theme 'purple'"),
                                               ((0, 720), None, "size (0, 720)")])
def test_demo_mode_refuses_a_theme_or_size_it_cannot_show_before_changing_anything(leaves_demo_mode, size, theme,
                                                                                   says):
    window = leaves_demo_mode
    with pytest.raises(ValueError, match=says.replace("(", r"\(").replace(")", r"\)")):
        window.start_demo(size=size, theme=theme)
    assert not window.demo.active and window.theme.name == "dark" and window.menuBar().isVisible()


# -- 3. An engine or a replay that fails on every frame; an engine killed while recording --------------

def stopped_boxes(window) -> list:
    return [box for box in window.findChildren(QMessageBox)
            if box.isVisible() and box.windowTitle() in ("The engine stopped", "The replay stopped")]


def test_a_recording_cut_short_while_it_is_replayed_is_said_in_one_dialog_not_one_a_frame(window, qtbot, tmp_path):
    path = record_small_run(tmp_path / "small.kvrec")
    assert window.open_recording(str(path))
    qtbot.waitUntil(lambda: window.engine_info is not None and "(replay)" in window.engine_info.label,
                    timeout=TIMEOUT_MS)
    path.write_bytes(path.read_bytes()[:200])  # cut short behind the window's back
    window.scrubber.slider.setValue(window.scrubber.num_steps)  # a seek reads it
    qtbot.waitUntil(lambda: len(window.errors_shown) > 0, timeout=TIMEOUT_MS)
    window._show_error(window.errors_shown[-1])  # the same error again, as a frame would bring it
    window.toggle_replay()  # Play: a snapshot is asked for at every frame
    qtbot.waitUntil(lambda: len(window.errors_shown) > 1, timeout=TIMEOUT_MS)  # Play's read failed too
    qtbot.waitUntil(lambda: window.play_action.text() == "Play", timeout=TIMEOUT_MS)
    boxes = stopped_boxes(window)
    assert len(boxes) == 1 and boxes[0].windowTitle() == "The replay stopped"
    assert "truncated" in boxes[0].text() and "Back to the live engine" in boxes[0].text()
    boxes[0].done(0)
    window.close_recording()  # the window is not stuck on the damaged file
    qtbot.waitUntil(lambda: window.engine_info is not None and "(replay)" not in window.engine_info.label,
                    timeout=TIMEOUT_MS)


def test_an_engine_killed_while_recording_says_the_file_keeps_the_steps_recorded(window, qtbot, tmp_path):
    running(window, qtbot)
    path = tmp_path / "killed.kvrec"
    assert window.start_recording(str(path))
    # a chunk of steps whole in the file: its size growing was not one (the keyframe came first)
    qtbot.waitUntil(lambda: steps_held(path) > 0, timeout=TIMEOUT_MS)
    os.kill(window.worker._process.pid, signal.SIGKILL)  # as the kernel's OOM killer would
    qtbot.waitUntil(lambda: len(stopped_boxes(window)) == 1, timeout=TIMEOUT_MS)
    text = stopped_boxes(window)[0].text()
    kept = re.search(rf"The recording {re.escape(str(path))} was cut off: it keeps the ([\d,]+) steps written", text)
    assert "ended unexpectedly" in text and kept and "Open recording" in text
    assert not window.record_action.isChecked()
    stopped_boxes(window)[0].done(0)
    assert window.open_recording(str(path))  # and it does, with the steps the dialog counted
    qtbot.waitUntil(lambda: window.scrubber.num_steps == int(kept[1].replace(",", "")), timeout=TIMEOUT_MS)


def test_an_engine_killed_while_recording_over_a_file_names_both_and_keeps_the_old_one(window, qtbot, tmp_path):
    """The new recording was written beside the existing one (renamed over it only when complete):
    the dialog said the existing file, which it never touched, was cut off and held the steps."""
    running(window, qtbot)
    path = tmp_path / "old.kvrec"
    record_small_run(path)
    before = path.read_bytes()
    assert window.start_recording(str(path))
    qtbot.waitUntil(lambda: any(steps_held(p) > 0 for p in tmp_path.glob(".old.kvrec.*.partial")), timeout=TIMEOUT_MS)
    os.kill(window.worker._process.pid, signal.SIGKILL)
    qtbot.waitUntil(lambda: len(stopped_boxes(window)) == 1, timeout=TIMEOUT_MS)
    text = stopped_boxes(window)[0].text()
    cut = tmp_path / "old.cut-off.kvrec"
    assert f"{path} keeps the recording that was there before" in text and f"{cut} keeps the" in text
    assert path.read_bytes() == before and steps_held(cut) > 0 and not list(tmp_path.glob(".*.partial"))
    stopped_boxes(window)[0].done(0)


@pytest.mark.parametrize("over_a_file", [False, True])
def test_a_recording_cut_before_its_first_steps_says_it_holds_none(window, tmp_path, over_a_file):
    """Killed within its first second, the file holds the header and the pool's first keyframe: it
    was said to keep "the steps written", and opened as an empty replay."""
    full = tmp_path / "full.kvrec"
    record_small_run(full)
    opened = open_records(full)
    opened.handle.close()
    first_steps = next(e.offset for e in opened.entries if e.type == STEPS)
    path = tmp_path / "cut.kvrec"
    window.state.recording_path = str(path)
    window.state.recording_replaces_since = time.time() if over_a_file else None
    written = tmp_path / ".cut.kvrec.abcd1234.partial" if over_a_file else path
    written.write_bytes(full.read_bytes()[:first_steps])
    if over_a_file:
        path.write_bytes(b"the recording that was there")
    said = recording_control.kept_note(window, SimpleNamespace(recording_ended=True), 40)
    assert steps_held(written) == 0 and "holds no step" in said and "Open recording" not in said
    assert not over_a_file or ("keeps the recording that was there before" in said and not written.exists()
                               and path.read_bytes() == b"the recording that was there")
    written.write_bytes(full.read_bytes())  # a neighbour with its steps is said to keep them
    assert "Open recording" in recording_control.kept_note(window, SimpleNamespace(recording_ended=True), 40)


# -- 4. Names a file dialog returns as typed: over 255 bytes, 10,000 characters, a NUL ------------------

LONG_NAME = "/tmp/" + "\u202ex" * 5000 + ".json"  # right-to-left overrides, 10,000 characters
LONG_FOLDER = "/tmp/" + "y" * 300  # one name of 300 bytes: the system refuses it


@pytest.mark.parametrize("path", [LONG_NAME, LONG_FOLDER + "/config.json"])
def test_a_config_json_whose_name_the_system_refuses_is_refused_at_the_model_said_short(window, qtbot, monkeypatch,
                                                                                        path):
    pick(monkeypatch, window.settings.open_config, path)
    assert not window.apply_settings(play=False)  # was an OSError out of Apply
    said = window.settings.errors["model"].text()
    assert "cannot be read (file name too long)" in said and len(said) < 300 and "\u202e" not in said


def test_a_model_folder_whose_name_the_system_refuses_is_refused_at_the_model(window, qtbot, monkeypatch):
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *a, **k: LONG_FOLDER)
    window.settings._choose_model_dir()
    assert not window.apply_settings(play=False)
    assert "cannot be read (file name too long)" in window.settings.errors["model"].text()


def test_a_trace_of_10000_characters_is_refused_said_short_and_the_dock_keeps_its_width(window, qtbot,
                                                                                         monkeypatch):
    width = window.settings_dock.width()
    pick(monkeypatch, window.settings.open_trace, LONG_NAME)
    said = window.settings.errors["workload"].text()
    assert "cannot be read (file name too long)" in said and len(said) < 300 and "kept workload chat" in said
    assert window.settings.trace_path is None and window.settings_dock.width() == width


@pytest.mark.parametrize("path", [LONG_NAME, "/tmp/a\x00b.kvrec"])
def test_a_recording_whose_name_cannot_be_opened_is_a_short_dialog_not_a_traceback(window, warned, path):
    assert not window.open_recording(path)
    (title, text), = warned
    assert title == "Cannot open the recording" and len(text) < 300 and "[Errno" not in text
