"""`kvscope gui --replay FILE`: a recorded run in the window with no engine, scrubbed to any step
and shown exactly as it was; a damaged file is refused with the reader's reason."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox

from kvscope.app.cli.main import main
from kvscope.app.cli.gui import initial_values
from kvscope.app.gui.main_window import MainWindow
from kvscope.engine import Engine, EngineArgs
from kvscope.app.lab.presets import load_hardware, load_model, load_workload
from kvscope.app.lab.recording import Recording, RunRecorder
from kvscope.app.lab.workload import generate_requests
from kvscope.widgets.block_map import BlockMapView
from kvscope.widgets.palette import DARK, LIGHT, hex_color

SNAPSHOT_ARRAYS = ("block_owner", "block_state", "block_ref_cnt", "block_fill", "block_hash")


class Args:
    backend, model, hardware, workload, model_path = "simulated", None, "h100-80gb", "chat", None


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A small simulated run, recorded; with the engine's own snapshot after every step."""
    path = tmp_path_factory.mktemp("replay") / "run.kvrec"
    engine = Engine(load_model("llama-3-8b"), load_hardware("l4-24gb"),
                    EngineArgs(num_gpu_blocks_override=300, max_model_len=2048))
    workload = load_workload("chat").with_overrides(num_requests=40, arrival_rate_per_s=8.0)
    engine.add_workload(generate_requests(workload, engine.model.vocab_size, seed=1))
    recorder = RunRecorder(engine, path, {"label": "replay test", "workload": workload}, keyframe_interval=64)
    snapshots = []
    while (result := engine.step()) is not None:
        recorder.record_step(result)
        snapshots.append(engine.snapshot())
    recorder.close(engine.summary())
    return path, snapshots, engine.summary()


@pytest.fixture
def warnings(monkeypatch):
    shown = []
    monkeypatch.setattr(QMessageBox, "warning", lambda parent, title, text, *a, **k: shown.append(text))
    return shown


@pytest.fixture
def window(qtbot, recorded, tmp_path, monkeypatch):
    monkeypatch.setenv("KVSCOPE_CONFIG_DIR", str(tmp_path / "config"))
    win = MainWindow(initial_values(Args()), autoplay=False, replay=str(recorded[0]))
    qtbot.addWidget(win)
    win.resize(1280, 800)
    win.show()
    qtbot.waitExposed(win)
    win.activateWindow()
    yield win
    win.close()


def shown_step(window) -> int:
    return window.latest_snapshot.step if window.latest_snapshot is not None else -1


def test_the_window_replays_with_no_engine_and_its_settings_locked(window, qtbot, recorded):
    qtbot.waitUntil(lambda: window.engine_info is not None, timeout=10000)
    assert window.engine_info.label == "replay test (replay)"
    assert window.replay_path == str(recorded[0]) and window.worker is not window.live_worker
    assert window.settings.values()["hardware"] == "l4-24gb"  # the form shows what was recorded
    assert not window.settings_dock.widget().isEnabled() and "recorded" in window.settings_dock.widget().toolTip()
    assert not window.seed.isEnabled() and not window.apply_action.isEnabled()
    assert window.replay_bar.isVisible() and window.scrubber.num_steps == len(recorded[1])
    assert "steps replayed" in window.scrubber.label.text() and "engine clock " in window.scrubber.label.text()
    qtbot.waitUntil(lambda: "Play (Space) replays it" in window.statusBar().currentMessage())  # what to do
    window.set_theme("light")  # the scrubber's groove follows the theme (the style's own was invisible on dark)
    assert hex_color(LIGHT.grid) in window.scrubber.slider.styleSheet()
    window.set_theme("dark")
    assert hex_color(DARK.grid) in window.scrubber.slider.styleSheet()


@pytest.mark.parametrize("position", [1, 37, 150, -1])
def test_a_seek_shows_the_snapshot_exactly_as_recorded(window, qtbot, recorded, position):
    path, snapshots, _ = recorded
    position = len(snapshots) if position == -1 else position
    live = snapshots[position - 1]
    window.scrubber.slider.setValue(position)  # as a drag ends there
    qtbot.waitUntil(lambda: shown_step(window) == live.step and window.worker.position == position, timeout=10000)
    shown = window.latest_snapshot
    with Recording.open(path) as recording:
        expected = recording.snapshot_at(position - 1)
    for name in SNAPSHOT_ARRAYS:
        assert np.array_equal(getattr(shown, name), getattr(expected, name)), name
        assert np.array_equal(getattr(shown, name), getattr(live, name)), name
    assert (shown.time_s, shown.num_running, shown.num_waiting) == (live.time_s, live.num_running, live.num_waiting)
    reference = BlockMapView()  # what the block map draws for the engine's own snapshot
    qtbot.addWidget(reference)
    reference.resize(window.block_map.size())  # a small pool's grid follows the map's shape
    reference.update_snapshot(live)
    assert np.array_equal(window.block_map.index_image(), reference.index_image())
    qtbot.waitUntil(lambda: f"{position:,} of {len(snapshots):,} steps replayed" in window.scrubber.label.text(),
                    timeout=2000)
    assert window.scrubber.slider.value() == position


def first_drawn_position(recorded) -> int:
    """Steps replayed until the run's fullest moment: the first step at its highest KV usage."""
    with Recording.open(recorded[0]) as recording:
        usage = recording.series()["kv_usage"]
    return 1 + max(range(len(usage)), key=lambda i: (usage[i], -i))


def test_a_replay_opens_at_its_fullest_moment_not_the_empty_pool(window, qtbot, recorded):
    _, snapshots, _ = recorded
    opening = first_drawn_position(recorded)
    assert 1 < opening < len(snapshots)  # the middle of the run, where its pool was fullest
    qtbot.waitUntil(lambda: window.worker.position == opening and shown_step(window) == snapshots[opening - 1].step,
                    timeout=10000)
    held = [np.count_nonzero(snap.block_owner >= 0) for snap in snapshots]
    assert np.count_nonzero(window.latest_snapshot.block_owner >= 0) == held[opening - 1] > held[0]
    assert window.scrubber.slider.value() == opening
    assert f"{opening:,} of {len(snapshots):,} steps replayed" in window.scrubber.label.text()


def test_a_click_on_the_scrubber_seeks_there(window, qtbot, recorded):
    from PySide6.QtCore import QPoint

    _, snapshots, _ = recorded
    slider = window.scrubber.slider
    qtbot.waitUntil(lambda: window.worker.position is not None, timeout=10000)
    qtbot.mouseClick(slider, Qt.LeftButton, pos=QPoint(slider.width() * 3 // 4, slider.height() // 2))
    expected = 0.75 * len(snapshots)
    assert abs(slider.value() - expected) <= 0.1 * len(snapshots)  # at the click, not one page along
    clicked = slider.value()
    qtbot.waitUntil(lambda: window.worker.position == clicked and shown_step(window) == snapshots[clicked - 1].step,
                    timeout=10000)


def test_play_step_and_reset_keys_drive_the_replay(window, qtbot, recorded):
    _, snapshots, summary = recorded
    opening = first_drawn_position(recorded)
    qtbot.waitUntil(lambda: window.worker.position == opening, timeout=10000)
    window.block_map.setFocus()
    qtbot.keyClick(window.block_map, Qt.Key_Right)  # one step
    qtbot.waitUntil(lambda: window.worker.position == opening + 1 and shown_step(window) == snapshots[opening].step,
                    timeout=5000)
    window.speed.setCurrentText("max")
    qtbot.keyClick(window.block_map, Qt.Key_Space)  # play to the end
    assert window.play_action.text() == "Pause"
    qtbot.waitUntil(lambda: window.done, timeout=20000)
    assert window.latest_summary["completed"] == summary["completed"]
    qtbot.waitUntil(lambda: window.scrubber.slider.value() == len(snapshots), timeout=2000)
    qtbot.keyClick(window.block_map, Qt.Key_R)  # back to the start
    qtbot.waitUntil(lambda: window.worker.position == 0 and window.latest_snapshot.step == 0, timeout=5000)


def test_a_damaged_recording_is_refused_and_the_window_keeps_working(window, qtbot, recorded, tmp_path, warnings):
    path = recorded[0]
    truncated = tmp_path / "cut.kvrec"
    truncated.write_bytes(path.read_bytes()[:9])  # inside the signature
    garbage = tmp_path / "garbage.kvrec"
    garbage.write_bytes(b"not a recording at all")
    damaged = tmp_path / "damaged.kvrec"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte in a record's payload
    damaged.write_bytes(bytes(data))
    worker = window.worker
    for bad in (truncated, garbage, tmp_path / "missing.kvrec", damaged):
        assert not window.open_recording(str(bad))
    assert "truncated" in warnings[0] and "not a kvscope recording" in warnings[1] and "no such file" in warnings[2]
    assert "corrupt" in warnings[3]
    assert window.worker is worker and window.replay_path == str(path)  # the replay it had goes on
    window.scrubber.slider.setValue(5)
    qtbot.waitUntil(lambda: window.worker.position == 5, timeout=5000)


def test_a_recording_cut_short_replays_up_to_its_last_whole_record(window, qtbot, recorded, tmp_path):
    path, snapshots, _ = recorded
    cut = tmp_path / "cut.kvrec"
    cut.write_bytes(path.read_bytes()[: int(path.stat().st_size * 0.6)])  # as if its recorder was killed
    assert window.open_recording(str(cut))
    assert 0 < window.scrubber.num_steps < len(snapshots)
    assert "truncated: the last complete step is" in window.statusBar().currentMessage()
    window.scrubber.slider.setValue(window.scrubber.num_steps)
    live = snapshots[window.scrubber.num_steps - 1]
    qtbot.waitUntil(lambda: shown_step(window) == live.step, timeout=10000)
    assert np.array_equal(window.latest_snapshot.block_owner, live.block_owner)


def test_back_to_the_live_engine(window, qtbot):
    window.close_recording()
    assert window.worker is window.live_worker and window.replay_path is None
    assert window.settings_dock.widget().isEnabled() and window.seed.isEnabled() and not window.replay_bar.isVisible()
    qtbot.waitUntil(lambda: window.engine_info is not None and "(replay)" not in window.engine_info.label, timeout=20000)


def test_the_replayed_recording_exports_as_a_perfetto_trace(window, qtbot, tmp_path, monkeypatch):
    out = tmp_path / "trace.json"
    monkeypatch.setattr(window, "_ask_save_path", lambda *a: str(out))
    assert window.export_actions["perfetto"].isEnabled()
    assert window.exports.ask_perfetto()
    trace = json.loads(out.read_text())
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    assert len(events) > 10


def test_the_command_line_refuses_a_missing_recording_in_one_line(capsys, tmp_path):
    assert main(["gui", "--replay", str(tmp_path / "nope.kvrec")]) == 2
    err = capsys.readouterr().err
    assert "no such file" in err and "Traceback" not in err


def test_a_recording_started_mid_run_says_the_engine_step_beside_the_count(qtbot, tmp_path):
    """The status bar shows the engine's own step number; a run recorded from its 10th step showed
    '142 of 215 steps replayed' beside 'step 158' with nothing to tell the two apart."""
    from kvscope.app.host.replay import read_replay_info
    from kvscope.widgets.replay_scrubber import ReplayScrubber

    path = tmp_path / "late.kvrec"
    engine = Engine(load_model("llama-3-8b"), load_hardware("l4-24gb"), EngineArgs(num_gpu_blocks_override=300))
    engine.add_workload(generate_requests(load_workload("chat").with_overrides(num_requests=20), 128256, seed=1))
    for _ in range(10):
        engine.step()
    recorder = RunRecorder(engine, path, {"label": "late start"})
    while (result := engine.step()) is not None:
        recorder.record_step(result)
    recorder.close(engine.summary())
    info = read_replay_info(path)
    assert info.steps_before == 10
    scrubber = ReplayScrubber()
    qtbot.addWidget(scrubber)
    scrubber.set_recording(info.num_steps, info.end_times, info.steps_before)
    scrubber.set_position(5)
    assert scrubber.label.text().startswith(f"5 of {info.num_steps:,} steps replayed (engine step 15) \u00b7 ")
