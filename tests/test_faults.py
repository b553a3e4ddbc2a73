"""Faults a window meets outside its control, each ending in a message and a window that works:
the engine process killed mid-run (the OOM killer, kill -9), a disk that fills while a run is
recorded (a 256 KiB tmpfs), a recording damaged where the replay has not read it yet."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from kvscope.app.cli.gui import initial_values
from kvscope.app.gui.main_window import MainWindow
from kvscope.app.lab.recording import Recording, RecordingError

TIMEOUT_MS = 60_000  # a loaded 2-core machine builds an engine process in seconds; a hang fails here


class Args:
    backend, model, hardware, workload, model_path = "simulated", None, "h100-80gb", "chat", None


@pytest.fixture
def window(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("KVSCOPE_CONFIG_DIR", str(tmp_path / "config"))
    values = initial_values(Args())
    values.update(num_requests=100_000)
    win = MainWindow(values, autoplay=False)
    qtbot.addWidget(win)
    win.resize(1280, 800)
    win.show()
    win.speed.setCurrentText("max")
    yield win
    win.close()


def engine_step(window) -> int:
    return window.latest_snapshot.step if window.latest_snapshot is not None else -1


def running_engine(window, qtbot, past_step: int = 50) -> None:
    qtbot.waitUntil(lambda: engine_step(window) > past_step, timeout=TIMEOUT_MS)


def test_killing_the_engine_process_mid_run_is_reported_and_play_starts_a_new_one(window, qtbot):
    window.apply_settings(play=True)
    running_engine(window, qtbot)
    first_pid, first_info = window.worker.pid, window.engine_info
    os.kill(first_pid, signal.SIGKILL)
    qtbot.waitUntil(lambda: bool(window.errors_shown), timeout=TIMEOUT_MS)
    error = window.errors_shown[-1]
    assert "engine process ended unexpectedly (signal 9, SIGKILL)" in error and "Traceback" not in error
    assert window.statusBar().currentMessage() == "the engine process ended unexpectedly"
    assert window.play_action.text() == "Play" and not window.worker.alive

    window.play_pressed()  # the same key as ever: a new process, the same settings, running
    qtbot.waitUntil(lambda: window.engine_info is not first_info and engine_step(window) > 10, timeout=TIMEOUT_MS)
    assert window.worker.alive and window.worker.pid != first_pid
    assert window.engine_info.label == first_info.label and window.play_action.text() == "Pause"
    assert len(window.errors_shown) == 1


def test_after_the_engine_process_is_killed_apply_builds_the_new_settings(window, qtbot):
    window.apply_settings(play=True)
    running_engine(window, qtbot)
    first_pid = window.worker.pid
    os.kill(first_pid, signal.SIGKILL)
    qtbot.waitUntil(lambda: bool(window.errors_shown), timeout=TIMEOUT_MS)
    window.settings.max_num_seqs.setValue(8)
    assert window.apply_settings(play=True)
    qtbot.waitUntil(lambda: engine_step(window) > 10 and window.engine_info.args.max_num_seqs == 8,
                    timeout=TIMEOUT_MS)
    assert window.worker.pid != first_pid and window.latest_snapshot.num_running <= 8


@pytest.fixture
def small_disk(tmp_path):
    """A 256 KiB file system: a recording fills it within a second of the run."""
    folder = tmp_path / "small-disk"
    folder.mkdir()
    try:
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(folder)],
                                 capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"cannot mount a small tmpfs here: {exc}")
    if mounted.returncode != 0:
        pytest.skip(f"mounting a small tmpfs is not permitted here: {mounted.stderr.strip() or mounted.returncode}")
    yield folder
    subprocess.run(["umount", "-l", str(folder)], capture_output=True, timeout=30)


def test_a_disk_that_fills_during_a_recording_stops_it_with_one_message_and_the_run_goes_on(window, qtbot, small_disk):
    window.apply_settings(play=True)
    running_engine(window, qtbot)
    target = small_disk / "run.kvrec"
    assert window.start_recording(target)
    qtbot.waitUntil(lambda: bool(window.errors_shown), timeout=TIMEOUT_MS)
    error = window.errors_shown[-1]
    assert "No space left on device" in error and str(target) in error and "Traceback" not in error
    qtbot.waitUntil(lambda: not window.record_action.isChecked(), timeout=TIMEOUT_MS)
    # the run goes on
    step_at_error = engine_step(window)
    qtbot.waitUntil(lambda: engine_step(window) > step_at_error + 100, timeout=TIMEOUT_MS)
    assert window.worker.alive and len(window.errors_shown) == 1
    # the partial file, if any is left, is unfinished: refused as a whole, or read up to its last whole record
    if target.exists():
        with pytest.raises(RecordingError):
            Recording.open(target).close()
        try:
            with Recording.open(target, allow_truncated=True) as recording:
                assert recording.warning
        except RecordingError:
            pass  # not even the header and first keyframe fit: nothing to replay, said so
    # and the window records again where there is room
    elsewhere = small_disk.parent / "again.kvrec"
    assert window.start_recording(elsewhere)
    qtbot.waitUntil(lambda: window.recording_steps is not None and window.recording_steps > 10, timeout=TIMEOUT_MS)
    window.toggle_recording(False)
    qtbot.waitUntil(lambda: not window.record_action.isChecked(), timeout=TIMEOUT_MS)
    qtbot.waitUntil(lambda: "recording written" in window.statusBar().currentMessage(), timeout=TIMEOUT_MS)
    with Recording.open(elsewhere) as recording:
        assert recording.num_steps > 10


def test_a_recording_damaged_beyond_where_it_was_checked_stops_the_replay_and_keeps_the_window(
        window, qtbot, tmp_path):
    from tests.small_recording import record_small_run

    path = record_small_run(tmp_path / "run.kvrec")
    assert window.open_recording(str(path))
    data = bytearray(path.read_bytes())
    middle = len(data) // 2  # checked at opening were the first and last states: the middle is read on play
    data[middle:middle + 64] = bytes(b ^ 0xFF for b in data[middle:middle + 64])
    path.write_bytes(bytes(data))
    window.speed.setCurrentText("max")
    window.play_pressed()
    qtbot.waitUntil(lambda: bool(window.errors_shown), timeout=TIMEOUT_MS)
    assert "Traceback" not in window.errors_shown[-1] and "run.kvrec" in window.errors_shown[-1]
    window.close_recording()  # back to the live engine, which runs
    window.play_pressed()
    qtbot.waitUntil(lambda: engine_step(window) > 10 and window.replay_path is None, timeout=TIMEOUT_MS)


def test_growth_is_measured_from_the_warm_up_on_with_its_slope():
    from kvscope.app.bench.bench_soak import growth

    mb = 1_000_000
    samples = [(0.0, 10 * mb), (60.0, 90 * mb), (120.0, 100 * mb), (720.0, 106 * mb), (1320.0, 112 * mb),
               (1500.0, None)]
    g = growth(samples, warmup_s=120.0)
    assert g["start_mb"] == 100 and g["end_mb"] == 112 and g["growth_mb"] == pytest.approx(12)
    assert g["slope_mb_per_10_min"] == pytest.approx(6) and g["peak_mb"] == 112
    assert growth(samples[:3], warmup_s=120.0) == {}  # one sample past the warm-up: no figure


def test_a_short_soak_samples_the_window_and_its_engine_process(qapp, monkeypatch, tmp_path):
    from kvscope.app.bench import bench_soak

    monkeypatch.setenv("KVSCOPE_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setattr(bench_soak, "SAMPLE_INTERVAL_S", 0.5)
    monkeypatch.setattr(bench_soak, "WARMUP_S", 1.0)
    result = bench_soak.soak(minutes=0.1)
    assert len(result["window_samples"]) >= 8 and result["engine_errors"] == 0
    assert all(rss and rss > 10_000_000 for _, rss in result["window_samples"])
    assert all(rss and rss > 10_000_000 for _, rss in result["engine_samples"][1:])  # alive until the end
    assert result["window"]["to_s"] >= 5.5 and result["engine"]["peak_mb"] > 10
