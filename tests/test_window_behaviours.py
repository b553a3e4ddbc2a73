"""What a person sees of a run: the latency plot shows a request's TTFT as soon as its first token
comes (live and replayed alike), demo mode gives back the window it found, and a small pool's
block map fills the height it has."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from PySide6.QtCore import Qt

from kvscope.app.host.replay import first_token_rows
from kvscope.app.host.session import EngineSession, RunConfig
from kvscope.app.lab.presets import load_hardware, load_model, load_workload
from kvscope.app.lab.recording import Recording
from kvscope.app.lab.workload import LengthDist
from kvscope.engine import EngineArgs


def live_session(num_requests: int = 60, **workload) -> EngineSession:
    session = EngineSession()
    spec = load_workload("chat").with_overrides(num_requests=num_requests, **workload)
    session.handle("apply", (RunConfig("simulated", load_model("llama-3-8b"), load_hardware("h100-80gb"),
                                       EngineArgs(), spec), False))
    session.take_frame()  # the build
    return session


def test_a_live_frame_carries_the_ttft_of_a_request_that_is_still_running():
    session = live_session()
    for _ in range(400):
        session.handle("step", None)
        frame = session.take_frame()
        running = {int(row["request_id"]): float(row["ttft_s"]) for row in frame.snapshot.requests}
        still_running = [ttft for _, ttft, _ in frame.first_tokens if ttft in running.values()]
        if still_running:
            break
    else:
        raise AssertionError("no frame in 400 steps carried a running request's first token")
    first_token_time, ttft, queue_time = frame.first_tokens[0]
    assert ttft > 0 and 0 <= queue_time <= ttft and first_token_time <= frame.snapshot.time_s


def test_every_request_s_first_token_is_sent_once_whether_it_finishes_before_a_frame_or_after():
    # short answers: many end between two frames, never in a snapshot
    session = live_session(num_requests=150, output_tokens=LengthDist("uniform", min=1, max=12))
    sent = []
    while not session.take_frame().done:
        for _ in range(7):  # several steps a frame, as a fast engine runs
            session.handle("step", None)
        frame = session.take_frame()
        sent += frame.first_tokens
        if frame.done:
            break
    metrics = session.engine.metrics
    assert len(sent) == len(metrics.ttft) > 100
    assert sorted(t for _, t, _ in sent) == sorted(metrics.ttft)
    assert sorted(q for _, _, q in sent) == sorted(metrics.queue_time)


def test_a_first_token_sent_at_its_request_s_finish_is_the_request_s_own():
    """The session reads finished requests from the engine's metrics (it no longer wraps them): the
    latency plot's point of a request that never was in a snapshot is still its own first token."""
    session = live_session(num_requests=150, output_tokens=LengthDist("uniform", min=1, max=12))
    engine = session.engine
    finished, record_finish = [], engine.metrics.on_finish  # the test watches; the session does not
    engine.metrics.on_finish = lambda request: (finished.append(request), record_finish(request))
    sent = []
    while True:
        for _ in range(7):
            session.handle("step", None)
        frame = session.take_frame()
        sent += frame.first_tokens
        if frame.done:
            break
    truth = sorted((r.first_token_time - r.arrival_time, r.first_scheduled_time - r.arrival_time, r.first_token_time)
                   for r in finished)
    got = sorted((ttft, queue_time, first_token_time) for first_token_time, ttft, queue_time in sent)
    assert len(got) == len(truth) == 150
    assert [row[:2] for row in got] == [row[:2] for row in truth]  # TTFT and queue time: the very same numbers
    np.testing.assert_allclose([row[2] for row in got], [row[2] for row in truth], rtol=0, atol=1e-9)


def test_a_replay_draws_the_first_tokens_the_live_run_sent(tmp_path):
    session = live_session(num_requests=80)
    path = tmp_path / "run.kvrec"
    session.handle("record", str(path))
    sent = []
    for _ in range(300):  # stopped mid-run: requests still running have their TTFT in the recording too
        session.handle("step", None)
        sent += session.take_frame().first_tokens
    session.handle("stop_recording", None)
    assert session.engine.requests, "the recording should end with requests still running"
    recording = Recording.open(path)
    rows = first_token_rows(recording, recording.series()["time_s"])
    assert len(rows["ttft_s"]) == len(sent) > 0
    live = np.array(sorted(sent))
    replayed = np.array(sorted(zip(rows["first_token_time_s"], rows["ttft_s"], rows["queue_time_s"])))
    np.testing.assert_allclose(replayed, live, rtol=0, atol=1e-9)
    assert np.all(np.diff(rows["step"]) >= 0)


class _Args:
    backend = "simulated"
    model = None
    hardware = "h100-80gb"
    workload = "chat"
    model_path = None


def window_values(**changes) -> dict:
    from kvscope.app.cli.gui import initial_values

    values = initial_values(_Args())
    values.update({"num_requests": 200, **changes})
    return values


def test_the_latency_plot_shows_a_ttft_while_its_request_still_runs(qtbot, tmp_path, monkeypatch):
    from kvscope.app.gui.main_window import MainWindow

    monkeypatch.setenv("KVSCOPE_CONFIG_DIR", str(tmp_path / "config"))
    # Long answers: at 1x no request ends for several seconds, so a TTFT drawn now is a running one's.
    win = MainWindow(window_values(num_requests=40, output_median=4000), autoplay=True)
    qtbot.addWidget(win)
    win.show()

    def a_running_request_is_drawn() -> bool:
        snapshot = win.latest_snapshot
        x, _ = win.plots.curves["ttft_s"].getData()
        if snapshot is None or x is None or len(x) == 0:
            return False
        running_ttfts = snapshot.requests["ttft_s"]
        return bool(np.isin(win.series.columns["ttft_s"].view(), running_ttfts[np.isfinite(running_ttfts)]).any())

    qtbot.waitUntil(a_running_request_is_drawn, timeout=20000)
    x, _ = win.plots.curves["ttft_s"].getData()
    assert len(x) == win.series.columns["ttft_s"].size  # every TTFT sent is drawn (no thinning this small)
    win.close()


PROJECTOR = (1280, 720)


def on_a_projector_screen() -> bool:
    from PySide6.QtWidgets import QApplication

    screen = QApplication.primaryScreen()
    return screen is not None and screen.geometry().size().toTuple() == PROJECTOR


def test_demo_mode_on_a_1280x720_screen_fits_every_scenario_and_esc_restores_the_window(qtbot, tmp_path, monkeypatch):
    from PySide6.QtCore import QRect
    from PySide6.QtWidgets import QApplication

    if not on_a_projector_screen():
        pytest.skip("needs a 1280x720 screen: the test below runs it on one")

    from kvscope.app.gui.main_window import MainWindow
    from kvscope.app.lab.scenarios import scenario_names

    monkeypatch.setenv("KVSCOPE_CONFIG_DIR", str(tmp_path / "config"))
    win = MainWindow(window_values(), autoplay=False)
    qtbot.addWidget(win)
    win.show()
    qtbot.waitExposed(win)
    screen = win.screen().geometry()
    before = QRect(30, 20, 1200, 680)  # narrower than some scenario pages were at demo mode's font
    for name in scenario_names():
        win.pages.setCurrentIndex(0)  # the live page, as before a scenario
        win.setGeometry(before)
        qtbot.waitUntil(lambda: win.geometry() == before, timeout=5000)
        win.toggle_demo()
        qtbot.waitUntil(win.isFullScreen, timeout=5000)
        win.open_scenario(name)
        hint = win.minimumSizeHint()
        assert hint.width() <= screen.width() and hint.height() <= screen.height(), \
            f"{name}: demo mode needs {hint.width()}x{hint.height()} on a {screen.width()}x{screen.height()} screen"
        qtbot.waitUntil(lambda: screen.contains(win.geometry()), timeout=5000)
        win.activateWindow()  # a window shown fullscreen is not active on every platform: Esc needs it
        qtbot.waitUntil(lambda: QApplication.activeWindow() is win, timeout=5000)
        win.compare.setFocus()
        qtbot.keyClick(win.compare, Qt.Key_Escape)
        qtbot.waitUntil(lambda: not win.isFullScreen(), timeout=5000)
        qtbot.waitUntil(lambda: win.geometry() == before, timeout=5000)
    win.close()


def test_demo_mode_is_checked_on_a_1280x720_screen(tmp_path):
    """The test above, in a Qt of its own whose (offscreen) screen is a 1280x720 projector."""
    config = tmp_path / "projector.json"
    config.write_text(json.dumps({"screens": [{"name": "projector", "x": 0, "y": 0, "width": PROJECTOR[0],
                                               "height": PROJECTOR[1], "logicalDpi": 96, "dpr": 1}]}))
    env = {**os.environ, "QT_QPA_PLATFORM": f"offscreen:configfile={config}"}
    test = f"{__file__}::test_demo_mode_on_a_1280x720_screen_fits_every_scenario_and_esc_restores_the_window"
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", test],
                         env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and "1 passed" in run.stdout, run.stdout[-3000:] + run.stderr[-2000:]


def drawn_share(view) -> tuple[float, float]:
    """(share of the map's height, share of its width) the pool's drawn cells cover."""
    rows, width = view.grid_shape()
    side = view.cell_px()
    return rows * side / view._vb.height(), width * side / view._vb.width()


def test_a_small_pool_s_square_cells_grow_to_fill_the_map_up_to_a_maximum(qtbot):
    from kvscope.widgets import block_map as bm
    from test_block_map import random_snapshot

    view = bm.BlockMapView()
    qtbot.addWidget(view)
    view.resize(490, 260)
    view.show()
    qtbot.waitExposed(view)
    sides = {}
    for blocks in (1500, 400, 113, 12):
        view.update_snapshot(random_snapshot(blocks))
        assert view.blocks_per_cell() == 1  # a big pool's overview cells are k blocks wide: not these
        (x0, x1), (y0, y1) = view._vb.viewRange()
        assert view._vb.width() / (x1 - x0) == pytest.approx(view._vb.height() / (y1 - y0), rel=0.02)  # square
        sides[blocks] = view.cell_px()
        height_share, width_share = drawn_share(view)
        assert max(height_share, width_share) > 0.9 or sides[blocks] == pytest.approx(bm.MAX_CELL_PX), (blocks, sides)
    assert sides[1500] < sides[400] < sides[113] <= sides[12] == pytest.approx(bm.MAX_CELL_PX)


def test_at_1280x720_a_small_pool_s_map_covers_most_of_its_height(qtbot, tmp_path, monkeypatch):
    from kvscope.app.gui.main_window import MainWindow

    monkeypatch.setenv("KVSCOPE_CONFIG_DIR", str(tmp_path / "config"))
    # llama-3-8b's blocks are 2 MiB: a 240 MiB pool is 120 blocks, as small as the default window's
    win = MainWindow(window_values(kv_cache_memory_bytes=240 * 1024**2, max_model_len=1024), autoplay=True)
    qtbot.addWidget(win)
    win.resize(1280, 720)
    win.show()
    qtbot.waitExposed(win)
    win.arrange_docks()
    qtbot.waitUntil(lambda: win.latest_snapshot is not None and win.latest_snapshot.step > 0, timeout=20000)
    assert win.latest_snapshot.num_blocks < 200
    view = win.block_map
    qtbot.waitUntil(lambda: drawn_share(view)[0] > 0.75, timeout=5000)
    assert view._vb.height() > 60  # the split gives the map room: left to size hints it had ~45 px
    win.close()
