"""The window against bad input, fourth round: File > Record and File > Export to paths that cannot
take the file (a name over 255 bytes, a folder, /dev/full) or that the run reads; Record with no
engine; a scenario guess typed as text the box cannot hold; the live plots zoomed far out; the
window after an Apply whose engine could not be built; `kvscope gui --size` below the window's
minimum. Each says why, in a dialog, beside the field or in one line, and loses nothing."""

import dataclasses
import os
import subprocess
import sys

import numpy as np
import pytest
from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import QApplication, QFileDialog, QMessageBox

from kvscope.app.cli.gui import initial_values
from kvscope.app.gui.main_window import MainWindow
from kvscope.app.gui.scenario_texts import scenario_texts
from kvscope.app.lab.scenarios import load_scenario
from kvscope.app.lab.workload import WorkloadSpec
from kvscope.widgets.attach_plots import AttachPlots
from kvscope.widgets.compare_plots import ComparePlots
from kvscope.widgets.live_plots import LivePlots
from kvscope.widgets.scenario_panel import ScenarioPanel

TRACE = "TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(
    f"2023-11-16 18:15:{i:02d}.0000000,{100 + i},{20 + i}\n" for i in range(40))
TIMEOUT_MS = 30000
DID_NOT_START = "Recording did not start"  # the dialog's title: about the recording, not the engine


class Args:
    backend, model, hardware, workload, model_path = "simulated", "llama-3-8b", "h100-80gb", "chat", None


def make_window(qtbot, **kwargs) -> MainWindow:
    win = MainWindow({**initial_values(Args()), "num_requests": 2000}, **kwargs)
    qtbot.addWidget(win)
    win.resize(1280, 800)
    win.show()
    qtbot.waitExposed(win)
    return win


@pytest.fixture
def warned(monkeypatch):
    said = []
    monkeypatch.setattr(QMessageBox, "warning", lambda parent, title, text, *a, **k: said.append((title, text)))
    monkeypatch.setattr(QMessageBox, "information", lambda parent, title, text, *a, **k: said.append((title, text)))
    return said


def running(win, qtbot, steps: int = 5) -> None:
    if win.engine_info is None:
        assert win.apply_settings(play=True)
    qtbot.waitUntil(lambda: win.latest_snapshot is not None and win.latest_snapshot.step > steps, timeout=TIMEOUT_MS)


def open_boxes(win) -> list:
    return [(box.windowTitle(), box.text()) for box in win.findChildren(QMessageBox) if box.isVisible()]


def close_boxes(win) -> None:
    for box in win.findChildren(QMessageBox):
        if box.isVisible():
            box.done(0)


# -- 1. File > Record and File > Export to paths that cannot take the file -------------------------

def test_record_refuses_a_path_that_cannot_be_written_with_a_recording_dialog_and_stays_unchecked(
        window, qtbot, warned, tmp_path):
    running(window, qtbot)
    (tmp_path / "folder").mkdir()
    for path in (tmp_path / ("x" * 300 + ".kvrec"), tmp_path / "folder", tmp_path / "none" / "x.kvrec"):
        said = len(warned)
        assert not window.start_recording(str(path))
        assert not window.record_action.isChecked()
        title, text = warned[said]
        assert title == DID_NOT_START and text and "Traceback" not in text


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
def test_a_recording_that_fails_in_the_engine_unchecks_record_says_so_and_the_run_goes_on(window, qtbot):
    running(window, qtbot)
    assert window.start_recording("/dev/full")  # writable here: only the engine's writing fails
    qtbot.waitUntil(lambda: any(title == DID_NOT_START for title, _ in open_boxes(window)), timeout=TIMEOUT_MS)
    assert not window.record_action.isChecked()
    assert not any(title == "The engine stopped" for title, _ in open_boxes(window))
    close_boxes(window)
    step = window.latest_snapshot.step
    qtbot.waitUntil(lambda: window.latest_snapshot.step > step + 5, timeout=TIMEOUT_MS)  # the run goes on
    assert window.play_action.text() == "Pause"


def test_record_before_any_engine_is_refused_before_the_file_dialog_and_left_unchecked(
        qtbot, tmp_path, monkeypatch, warned):
    monkeypatch.setenv("KVSCOPE_CONFIG_DIR", str(tmp_path / "config"))
    win = make_window(qtbot, autoplay=False, scenario="cache-ceiling")  # the live engine is not built
    asked = []
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: asked.append(a) or (str(tmp_path / "r.kvrec"), ""))
    win.pages.setCurrentIndex(0)
    win.record_action.trigger()  # Ctrl+Shift+R
    assert not win.record_action.isChecked() and not asked
    assert warned and warned[-1][0] == DID_NOT_START and "no engine" in warned[-1][1]
    assert not win.start_recording(str(tmp_path / "r.kvrec"))  # and called directly
    assert not win.record_action.isChecked() and not (tmp_path / "r.kvrec").exists()
    win.close()


def test_record_refuses_every_file_the_run_reads(window, qtbot, warned, tmp_path):
    trace = tmp_path / "trace.csv"
    trace.write_text(TRACE)
    window.settings.trace_path = str(trace)
    window.settings.num_requests.setValue(40)  # its rows: more is refused at Requests (fourteenth pass)
    running(window, qtbot)
    assert window.config.workload.trace_path == str(trace)
    window.settings.trace_path = None  # the form moved on; the running engine still reads the trace
    config = tmp_path / "config.json"
    config.write_text("{}")
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"weights")
    window.settings.config_path = str(config)
    refused = {str(trace): "trace", str(config): "config.json", str(folder / "model.safetensors"): "model.safetensors"}
    for path, what in refused.items():
        if what == "model.safetensors":
            window.settings.config_path, window.settings.model_path = None, str(folder)
        before = open(path, "rb").read()
        said = len(warned)
        assert not window.start_recording(path)
        title, text = warned[said]
        assert title == DID_NOT_START and what in text and "destroy" in text
        assert open(path, "rb").read() == before and not window.record_action.isChecked()


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
def test_exports_to_a_device_or_an_overlong_name_say_why_and_never_claim_saved(window, qtbot, warned, tmp_path,
                                                                               monkeypatch):
    running(window, qtbot, steps=20)
    full = tmp_path / "full.png"
    full.symlink_to("/dev/full")
    keys = [key for key in window.export_actions if window.export_actions[key].isEnabled()]
    assert "block_map" in keys and any(key.startswith("plot:") for key in keys)
    for key in keys:
        for path in (str(full), str(tmp_path / ("x" * 300 + ".png"))):
            monkeypatch.setattr(window, "_ask_save_path", lambda *a, _p=path: _p)
            said = len(warned)
            window.statusBar().clearMessage()
            window.export_actions[key].trigger()
            assert len(warned) == said + 1, (key, path, window.statusBar().currentMessage())
            assert "saved" not in window.statusBar().currentMessage()
            assert len(warned[said][1]) < 400  # the 300-character name is cut, the reason shows


# -- 3. the scenario's guess -------------------------------------------------------------------------

def guess_panel(qtbot, scenario: str) -> tuple[ScenarioPanel, list]:
    panel = ScenarioPanel()
    qtbot.addWidget(panel)
    panel.show()
    committed = []
    panel.guess_committed.connect(committed.append)
    panel.set_scenario(**scenario_texts(load_scenario(scenario)))
    return panel, committed


def type_guess(qtbot, panel: ScenarioPanel, text: str) -> None:
    box = panel.guess_number
    box.setFocus()
    box.lineEdit().selectAll()
    qtbot.keyClick(box.lineEdit(), Qt.Key_Delete)
    qtbot.keyClicks(box, text)
    qtbot.keyClick(box, Qt.Key_Return)


@pytest.mark.parametrize("typed, says", [
    ("150", "above the largest"), ("-5", "below the smallest"), ("nan", "not a finite"), ("inf", "not a finite"),
    ("abc", "not a number"), ("", "type a guess first"), ("12.345", "more decimals"),
])
def test_a_guess_the_box_cannot_hold_is_not_committed_and_the_reason_shows_beside_it(qtbot, typed, says):
    panel, committed = guess_panel(qtbot, "benchmark-trap")  # a percentage: 0 to 100 %
    type_guess(qtbot, panel, typed)
    assert committed == [] and panel.committed_guess is None and panel.commit_button.isEnabled()
    assert panel.guess_notice.isVisible() and says in panel.guess_notice.text()
    assert panel.guess_number.lineEdit().text().startswith(typed)  # kept, to be mended
    assert not panel.commit()  # the button, Space and Step commit nothing either
    assert committed == []


def test_a_guess_is_taken_whole_as_typed_not_filtered_key_by_key(qtbot):
    panel, committed = guess_panel(qtbot, "cache-ceiling")  # sequences, up to 1e9
    type_guess(qtbot, panel, "1e9")
    assert committed == [1e9]  # not 19: the "e" was dropped key by key
    panel, committed = guess_panel(qtbot, "benchmark-trap")
    type_guess(qtbot, panel, "150 %")
    assert committed == [] and "150" in panel.guess_notice.text()  # not 15
    type_guess(qtbot, panel, "42")
    assert committed == [42.0] and not panel.guess_notice.isVisible()


# -- 4. the live plots zoomed far out --------------------------------------------------------------

def wheel_out(item, notches: int = 180, delta: int = -120) -> None:
    view = item.scene().views()[0]
    pos = QPointF(view.mapFromScene(item.vb.sceneBoundingRect().center()))
    for _ in range(notches):
        QApplication.sendEvent(view.viewport(), QWheelEvent(pos, QPointF(view.viewport().mapToGlobal(pos.toPoint())),
                                                            QPoint(0, 0), QPoint(0, delta), Qt.NoButton,
                                                            Qt.NoModifier, Qt.ScrollUpdate, False))


@pytest.mark.parametrize("delta", [-120, 120])
def test_plots_zoomed_far_out_or_in_stop_at_a_limit_without_an_error(qtbot, delta):
    # pytest-qt fails a test on any exception raised in a Qt slot (pyqtgraph's repaints)
    t = np.linspace(0.0, 30.0, 3000)
    live = LivePlots()
    qtbot.addWidget(live)
    live.resize(500, 900)
    live.show()
    live.set_series({"time_s": t, "kv_usage": t / 30, "num_running": t, "num_waiting": t, "throughput_tokens_per_s": t,
                     "compute_utilization": t / 30, "preemptions": t, "first_token_time_s": t[::10],
                     "ttft_s": t[::10] / 10, "queue_time_s": t[::10] / 20})
    attach = AttachPlots()
    qtbot.addWidget(attach)
    attach.resize(500, 900)
    attach.show()
    attach.set_series({"time_s": t, "kv_usage": t / 30, "num_running": t, "generation_tokens_per_s": t})
    compare = ComparePlots()
    qtbot.addWidget(compare)
    compare.resize(1200, 400)
    compare.show()
    compare.set_configurations(["a", "b"])
    for index in range(2):
        compare.set_series(index, t, t / 30, t, t * 10)
    qtbot.waitExposed(compare)
    for plots in (live.plots, attach.plots, compare.plots):
        for item in plots.values():
            if item.isVisible():
                wheel_out(item, delta=delta)
    qtbot.wait(50)  # the repaints that raised
    for plots in (live.plots, attach.plots, compare.plots):
        for item in plots.values():
            (x0, x1), (y0, y1) = item.vb.viewRange()
            assert np.isfinite([x0, x1, y0, y1]).all() and x1 - x0 <= 1.01e8


# -- 5. after an Apply whose engine could not be built ---------------------------------------------

def fail_a_build(window, qtbot, tmp_path, monkeypatch):
    """Apply a run the engine's process cannot build (an empty trace); the settings before it, returned."""
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    good = window.settings_form.current_config()
    bad = dataclasses.replace(good, workload=WorkloadSpec(name="empty", trace_path=str(empty), num_requests=10))
    # the form refuses an empty trace where it is picked; the engine's process is the last check
    monkeypatch.setattr(window.settings_form, "current_config", lambda: bad)
    assert window.apply_settings(play=True)
    qtbot.waitUntil(lambda: window.builds.failed is not None, timeout=TIMEOUT_MS)
    return good


def test_after_a_failed_build_the_previous_run_is_marked_and_play_and_step_say_why(window, qtbot, tmp_path,
                                                                                   monkeypatch):
    running(window, qtbot, steps=20)
    good = fail_a_build(window, qtbot, tmp_path, monkeypatch)
    assert "empty" in window.builds.failed
    assert window.builds.banner.isVisible() and "previous run" in window.builds.banner.text()
    assert any(title == "The engine could not be built" for title, _ in open_boxes(window))
    close_boxes(window)
    assert window.status.text().startswith("no engine")
    window.play_pressed()
    assert window.play_action.text() == "Play" and "could not be built" in window.statusBar().currentMessage()
    window.statusBar().clearMessage()
    window.step_pressed()
    assert window.play_action.text() == "Play" and "could not be built" in window.statusBar().currentMessage()
    monkeypatch.setattr(window.settings_form, "current_config", lambda: good)
    assert window.apply_settings(play=True)  # an Apply that builds: the window is whole again
    qtbot.waitUntil(lambda: window.builds.failed is None and not window.builds.banner.isVisible(), timeout=TIMEOUT_MS)
    qtbot.waitUntil(lambda: window.latest_snapshot.step > 5, timeout=TIMEOUT_MS)


# -- 6. kvscope gui --size below the window's minimum ----------------------------------------------

def test_gui_size_below_the_windows_minimum_is_refused_in_one_line_naming_it(tmp_path):
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "KVSCOPE_CONFIG_DIR": str(tmp_path)}
    shot = tmp_path / "s.png"
    out = subprocess.run([sys.executable, "-m", "kvscope.app", "gui", "--hardware", "h100-80gb", "--workload", "chat",
                          "--size", "320x240", "--quit-after", "1", "--screenshot", str(shot)],
                         capture_output=True, text=True, timeout=120, env=env)
    lines = [line for line in out.stderr.splitlines() if "propagateSizeHints" not in line]
    assert out.returncode == 2 and len(lines) == 1, out.stderr[-2000:]
    assert "--size 320x240" in lines[0] and "cannot be smaller than" in lines[0] and not shot.exists()
