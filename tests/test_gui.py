"""The explorer window, offscreen: every control reaches the engine, bad values are refused in
their field, the engine runs off the GUI thread, and an engine error never takes the window down."""

import subprocess
import sys
import time

import numpy as np
import pytest
from PySide6.QtCore import Qt

from kvscope.app.cli.gui import initial_values
from kvscope.app.gui.main_window import MainWindow
from kvscope.engine.snapshot import BLOCK_USED


class Args:
    backend = None
    model = None
    hardware = None
    workload = None
    model_path = None


def simulated_values(**changes):
    args = Args()
    args.backend, args.hardware, args.workload = "simulated", "h100-80gb", "chat"
    values = initial_values(args)
    values.update({"num_requests": 200, **changes})
    return values


@pytest.fixture
def window(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("KVSCOPE_CONFIG_DIR", str(tmp_path / "config"))
    win = MainWindow(simulated_values(num_requests=2000), autoplay=True)  # runs for minutes at 10x
    qtbot.addWidget(win)
    win.resize(1600, 960)
    win.show()
    qtbot.waitExposed(win)
    win.activateWindow()  # shortcuts reach the active window only
    win.speed.setCurrentText("10x")
    yield win
    win.close()


def engine_of(win, qtbot, predicate=lambda e: True, timeout=20000):
    """Wait until the engine process reports an engine (its EngineInfo: what it actually built) that
    satisfies predicate; rebuilds happen in the engine process."""
    qtbot.waitUntil(lambda: win.engine_info is not None and predicate(win.engine_info), timeout=timeout)
    return win.engine_info


def step_of(win) -> int:
    return win.latest_snapshot.step if win.latest_snapshot is not None else -1


def test_the_window_runs_the_engine_off_the_gui_thread_and_draws_it(window, qtbot):
    qtbot.waitUntil(lambda: window.latest_snapshot is not None and window.latest_snapshot.step > 20, timeout=20000)
    assert window.worker.alive
    assert window.series.columns["time_s"].size > 0
    assert window.block_map.index_image().size >= window.plan.num_blocks
    assert "running" in window.status.text() and "KV" in window.status.text()
    assert len(window.timeline.steps_shown()) > 0
    window.timer.stop()  # hold still: the bar and the snapshot must describe the same moment
    window.panels.update(window.state.nothing_new())  # the memory bar drawn again from the state
    from kvscope.engine.snapshot import BLOCK_CACHED, BLOCK_RESERVED, BLOCK_USED
    state = window.latest_snapshot.block_state
    sizes = {seg.label: seg.nbytes for seg in window.memory_bar.segments}
    held = int(np.isin(state, (BLOCK_USED, BLOCK_RESERVED)).sum())
    assert sizes.get("KV in use", 0) == held * window.plan.block_bytes
    assert sizes.get("KV cached", 0) == int((state == BLOCK_CACHED).sum()) * window.plan.block_bytes


@pytest.mark.parametrize("field,value,check", [
    ("kv_cache_dtype", "fp8", lambda e: e.resolved.kv_cache_dtype == "fp8"),
    ("block_size", 32, lambda e: e.args.block_size == 32),
    ("max_num_seqs", 7, lambda e: e.args.max_num_seqs == 7),
    ("max_model_len", 4096, lambda e: e.resolved.max_model_len == 4096),
    ("max_num_batched_tokens", 1024, lambda e: e.resolved.max_num_batched_tokens == 1024),
    ("gpu_memory_utilization", 0.5, lambda e: e.args.gpu_memory_utilization == 0.5),
    ("enable_prefix_caching", False, lambda e: not e.args.enable_prefix_caching),
    ("enable_chunked_prefill", False, lambda e: not e.args.enable_chunked_prefill),
    ("scheduling", "static", lambda e: e.args.scheduling == "static"),
    ("allocation", "contiguous", lambda e: e.allocation == "contiguous"),
    ("kv_cache_memory_bytes", 2 * 1024**3, lambda e: e.plan.kv_pool_bytes == 2 * 1024**3),
    ("hardware", "a100-40gb", lambda e: e.hardware.name == "a100-40gb"),
    ("model", "mistral-7b", lambda e: e.model.name == "mistral-7b"),
])
def test_every_engine_control_changes_the_engine(window, qtbot, field, value, check):
    engine_of(window, qtbot)
    window.settings.set_values({field: value})
    assert window.settings.apply_button.isEnabled(), window.settings.errors[field].text()
    assert window.apply_settings()
    engine_of(window, qtbot, check)


def test_workload_controls_reach_the_workload(window, qtbot):
    window.settings.set_values({"workload": "shared-system-prompt", "num_requests": 37, "arrival_rate_per_s": 0.0,
                                "output_median": 20})
    assert window.apply_settings()
    engine_of(window, qtbot, lambda e: window.config.workload.name == "shared-system-prompt")
    spec = window.config.workload
    assert spec.num_requests == 37 and spec.arrival_rate_per_s == 0.0 and spec.output_tokens.median == 20
    qtbot.waitUntil(lambda: window.done, timeout=30000)
    assert window.latest_summary["completed"] == 37
    assert window.latest_summary["prefix_cache_hit_rate"] > 0


def test_the_real_backend_is_one_setting(window, qtbot):
    window.settings.set_values({"backend": "real", "model": "tiny-llama", "hardware": "this-machine",
                                "kv_cache_memory_bytes": 32 * 1024**2, "num_requests": 5})
    assert window.apply_settings()
    engine = engine_of(window, qtbot, lambda e: e.backend == "real", timeout=60000)
    assert engine.kv_tensor_bytes == engine.plan.num_blocks * engine.plan.block_bytes
    qtbot.waitUntil(lambda: window.latest_snapshot is not None and window.latest_snapshot.step > 0, timeout=60000)


def test_an_invalid_value_is_refused_in_its_field_with_the_reason(window, qtbot):
    window.settings.set_values({"enable_chunked_prefill": False, "max_num_batched_tokens": 512, "max_model_len": 4096})
    error = window.settings.errors["max_num_batched_tokens"]
    assert not error.isHidden() and "chunked prefill" in error.text()
    assert not window.settings.apply_button.isEnabled()
    assert not window.apply_settings()
    window.settings.set_values({"max_num_batched_tokens": 4096})
    assert error.isHidden() and window.settings.apply_button.isEnabled()


def test_a_model_edit_that_cannot_exist_is_refused_and_a_good_one_is_applied(window, qtbot):
    window.settings.set_values({"model": "llama-2-7b"})
    window.settings_form.show_selected_presets()
    window.editor.model_boxes["num_key_value_heads"].setValue(5)  # 32 heads cannot share 5 KV heads
    assert "must divide" in window.editor.model_error.text()  # said in the tab where it was typed
    assert not window.settings.apply_button.isEnabled()
    window.editor.model_boxes["num_key_value_heads"].setValue(8)
    assert window.settings.apply_button.isEnabled()
    assert "128.00 KiB" in window.settings.preview.text()  # 4x smaller per token than MHA's 512 KiB
    assert window.apply_settings()
    engine_of(window, qtbot, lambda e: e.model.num_key_value_heads == 8)


def test_user_presets_are_saved_listed_and_deleted(window, qtbot):
    window.settings.set_values({"model": "llama-3-8b"})
    window.settings_form.show_selected_presets()
    window.editor.model_boxes["num_hidden_layers"].setValue(16)
    window.settings_form.save_user_preset("models", "llama-3-8b-half")
    assert window.settings.model.findText("llama-3-8b-half") >= 0
    assert window.editor.user_presets.count() == 1
    window.settings.set_values({"model": "llama-3-8b-half"})
    assert window.apply_settings()
    engine_of(window, qtbot, lambda e: e.model.num_hidden_layers == 16)
    window.settings_form.delete_user_preset("models", "llama-3-8b-half")
    assert window.settings.model.findText("llama-3-8b-half") < 0


def press(window, qtbot, key, modifier=Qt.NoModifier):
    """A key press as a person makes it: with the block map (a view, not a form field) focused."""
    window.block_map.setFocus()
    qtbot.keyClick(window.block_map, key, modifier)


def test_run_controls_and_their_shortcuts(window, qtbot):
    engine = engine_of(window, qtbot)
    qtbot.waitUntil(lambda: window.play_action.text() == "Pause" and step_of(window) > 0, timeout=10000)
    press(window, qtbot, Qt.Key_Space)  # pause
    assert window.play_action.text() == "Play"
    qtbot.wait(300)  # steps already under way, and their frames, arrive
    paused_at = step_of(window)
    qtbot.wait(300)
    assert step_of(window) == paused_at
    press(window, qtbot, Qt.Key_Right)  # exactly one step
    qtbot.waitUntil(lambda: step_of(window) == paused_at + 1, timeout=5000)
    qtbot.wait(200)
    assert step_of(window) == paused_at + 1
    index = window.speed.currentIndex()
    press(window, qtbot, Qt.Key_Minus)
    assert window.speed.currentIndex() == index - 1
    window.seed.setValue(5)
    press(window, qtbot, Qt.Key_R)  # reset with the new seed: a new engine
    engine_of(window, qtbot, lambda e: e is not engine)
    assert window.config.seed == 5


def test_the_block_map_shows_a_known_allocation(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("KVSCOPE_CONFIG_DIR", str(tmp_path))
    win = MainWindow(simulated_values(kv_cache_memory_bytes=64 * 128 * 1024 * 16, num_requests=1, workload="uniform-short",
                                      max_model_len=512), autoplay=False)
    qtbot.addWidget(win)
    engine = engine_of(win, qtbot)
    win.step_once()  # the 128-token prompt: 8 blocks of 16
    qtbot.waitUntil(lambda: win.latest_snapshot is not None and win.latest_snapshot.step == 1, timeout=10000)
    snap = win.latest_snapshot
    used = np.flatnonzero(snap.block_state == BLOCK_USED)
    assert len(used) == 8 and engine.plan.num_blocks == 64
    lut, image = win.block_map.lut(), win.block_map.index_image()
    free_color = lut[image[win.block_map.cell_at(63)]]
    for block in used:
        assert not np.array_equal(lut[image[win.block_map.cell_at(int(block))]], free_color)
    win.close()


def test_an_engine_exception_shows_a_dialog_and_the_window_keeps_working(window, qtbot):
    engine = engine_of(window, qtbot)
    window.worker.inject_failure("injected failure inside the engine")
    qtbot.waitUntil(lambda: bool(window.errors_shown), timeout=10000)
    assert "injected failure" in window.errors_shown[0]
    assert window.play_action.text() == "Play"
    assert window.apply_settings()  # a new engine: the window recovered
    engine_of(window, qtbot, lambda e: e is not engine)
    qtbot.waitUntil(lambda: step_of(window) > 5, timeout=10000)


def test_a_crashed_engine_process_is_reported_and_replaced(window, qtbot):
    import os
    import signal

    engine = engine_of(window, qtbot)
    qtbot.waitUntil(lambda: step_of(window) > 0, timeout=10000)
    before = window.latest_snapshot
    os.kill(window.worker._process.pid, signal.SIGKILL)  # as the kernel's OOM killer would
    qtbot.waitUntil(lambda: any("ended unexpectedly (signal 9" in e for e in window.errors_shown), timeout=10000)
    assert window.play_action.text() == "Play"
    assert window.apply_settings()  # a fresh engine process
    engine_of(window, qtbot, lambda e: e is not engine, timeout=30000)
    qtbot.waitUntil(lambda: window.latest_snapshot is not before and step_of(window) > 0, timeout=10000)
    assert window.worker.alive


def test_closing_the_window_stops_the_worker(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("KVSCOPE_CONFIG_DIR", str(tmp_path))
    win = MainWindow(simulated_values(), autoplay=True)
    qtbot.addWidget(win)
    engine_of(win, qtbot)
    started = time.perf_counter()
    win.close()
    assert not win.worker.alive
    assert time.perf_counter() - started < 5


def test_theme_switch(window, qtbot):
    lut_dark = window.block_map.lut().copy()
    press(window, qtbot, Qt.Key_T, Qt.ControlModifier)
    assert not window.theme.is_dark
    assert not np.array_equal(lut_dark, window.block_map.lut())


def test_gui_command_takes_a_screenshot_and_quits(tmp_path):
    shot = tmp_path / "window.png"
    env = {"QT_QPA_PLATFORM": "offscreen", "KVSCOPE_CONFIG_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    import os

    env = {**os.environ, **env}
    out = subprocess.run([sys.executable, "-m", "kvscope.app", "gui", "--hardware", "h100-80gb", "--workload", "chat",
                          "--quit-after", "3", "--screenshot", str(shot), "--size", "1280x720"],
                         capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert shot.is_file() and shot.stat().st_size > 10_000
    bad = subprocess.run([sys.executable, "-m", "kvscope.app", "gui", "--model", "nope", "--quit-after", "1"],
                         capture_output=True, text=True, timeout=60, env=env)
    assert bad.returncode == 2 and "unknown model preset" in bad.stderr and "Traceback" not in bad.stderr


def test_a_preset_shown_in_the_editor_is_not_counted_as_edited(qtbot, tmp_path, monkeypatch):
    """The editor's boxes round (79.6 GiB for the H100's 79.65): that alone must not make an edit."""
    monkeypatch.setenv("KVSCOPE_CONFIG_DIR", str(tmp_path))
    win = MainWindow(simulated_values(), autoplay=False)
    qtbot.addWidget(win)
    assert win.config.hardware.name == "h100-80gb" and win.config.model.name == "llama-3-8b"
    win.editor.memory_gib.setValue(40.0)  # a real edit still is one
    assert win.apply_settings()
    assert win.config.hardware.name == "h100-80gb (edited)" and win.config.hardware.memory_bytes == 40 * 1024**3
    win.close()


def test_the_live_run_is_recorded_and_opens_as_a_replay(window, qtbot, tmp_path, monkeypatch):
    from PySide6.QtWidgets import QMessageBox

    from kvscope.app.lab.recording import Recording

    warnings = []
    monkeypatch.setattr(QMessageBox, "warning", lambda parent, title, text, *a, **k: warnings.append(text))
    engine_of(window, qtbot)
    path = tmp_path / "live.kvrec"
    assert not window.start_recording(tmp_path / "no-such-folder" / "x.kvrec")  # refused up front
    assert "does not exist" in warnings[0] and not window.record_action.isChecked()
    assert window.start_recording(path)
    assert window.record_action.isChecked()
    qtbot.waitUntil(lambda: (window.recording_steps or 0) > 20, timeout=20000)
    assert "recording (" in window.status.text()
    window.record_action.trigger()  # unchecked: the engine closes the file
    qtbot.waitUntil(lambda: window.recording_steps is None, timeout=10000)
    recording = Recording.open(path)
    assert recording.closed and recording.num_steps > 20 and recording.warning is None
    assert recording.header["backend"] == "simulated"
    assert window.open_recording(path)
    assert not window.record_action.isEnabled()  # a replay cannot be recorded again
    window.close_recording()
    assert window.record_action.isEnabled() and not window.record_action.isChecked()


def test_gui_refuses_a_corrupt_recording_before_opening_a_window(tmp_path):
    import os

    bad = tmp_path / "bad.kvrec"
    bad.write_bytes(b"not a recording at all")
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "KVSCOPE_CONFIG_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-m", "kvscope.app", "gui", "--replay", str(bad), "--quit-after", "1"],
                         capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 2 and "bad.kvrec" in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1



def test_the_settings_and_the_preset_editor_fit_the_default_dock_width_without_scrolling(qtbot):
    """At 1280x720 the settings dock is 360 px: combo boxes sized to their longest item made the
    form wider, its right edge (every arrow) clipped behind a horizontal scroll bar."""
    from kvscope.widgets.preset_editor import PresetEditor
    from kvscope.widgets.settings_panel import SettingsPanel

    for panel in (SettingsPanel(), PresetEditor()):
        qtbot.addWidget(panel)
        room = 360 - panel.verticalScrollBar().sizeHint().width() - 2 * panel.frameWidth()
        assert panel.widget().minimumSizeHint().width() <= room


def test_a_memory_bar_segment_too_narrow_for_its_size_gives_it_in_a_row_under_the_bar(qtbot):
    from kvscope.widgets.memory_bar import MemoryBudgetBar, Segment

    bar = MemoryBudgetBar()
    qtbot.addWidget(bar)
    bar.resize(600, 64)
    bar.show()
    weights = Segment("weights", 900 * 2**20, (120, 120, 140))
    free = Segment("KV free", 3 * 2**20, (40, 200, 90))  # ~2 px of 600
    bar.set_segments("Memory budget: test", [weights, free])
    assert bar.crowded_segments() == [free]
    assert bar.segment_text(free) == "KV free: 3.00 MiB (0.3 %)"
    bar.grab()  # paints without error, the crowded one under the bar
    bar.set_segments("Memory budget: test", [weights, Segment("KV free", 900 * 2**20, (40, 200, 90))])
    assert bar.crowded_segments() == []  # half the bar each: room for both


def test_the_memory_bar_gives_no_budget_before_an_engine_has_planned_one(qtbot):
    """The real backend's first start converts the model for ~20 s: the bar said "0 B" meanwhile."""
    from kvscope.widgets.memory_bar import MemoryBudgetBar, Segment

    bar = MemoryBudgetBar()
    qtbot.addWidget(bar)
    assert "0 B" not in bar.title_text() and "none yet" in bar.title_text()
    bar.set_segments("Memory budget: test", [Segment("weights", 2**30, (120, 120, 140))])
    assert bar.title_text().startswith("Memory budget: test: 1.00 GiB")


def test_request_ids_are_never_cut_to_an_ellipsis(qtbot):
    from kvscope.engine.snapshot import REQUEST_DTYPE
    from kvscope.widgets.requests_table import RequestsTable

    table = RequestsTable()
    qtbot.addWidget(table)
    table.resize(600, 300)
    table.show()
    first = np.zeros(3, dtype=REQUEST_DTYPE)
    first["request_id"] = [1, 2, 3]  # the column is sized from these ...
    table.set_requests(first)
    later = np.zeros(2, dtype=REQUEST_DTYPE)
    later["request_id"] = [1_234_567, 88]  # ... and must still hold these whole
    table.set_requests(later)
    swatch = table.style().pixelMetric(table.style().PixelMetric.PM_SmallIconSize)
    assert table.columnWidth(0) >= table.fontMetrics().horizontalAdvance("#1234567") + swatch + 8


def test_the_default_window_fits_a_small_screen_and_an_asked_size_is_kept():
    from PySide6.QtCore import QRect

    from kvscope.app.cli.gui import default_size
    from kvscope.app.cli.main import build_parser

    assert default_size(QRect(0, 0, 1280, 720)) == (1280, 720)  # a bare X server at 1280x720
    assert default_size(QRect(0, 0, 1920, 1050)) == (1600, 960)
    assert build_parser().parse_args(["gui"]).size is None  # the default follows the screen
    assert build_parser().parse_args(["gui", "--size", "1920x1080"]).size == (1920, 1080)
