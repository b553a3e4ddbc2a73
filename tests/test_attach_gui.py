"""The window attached to a loopback vLLM: a local HTTP server serving the captured /metrics and a
publisher replaying the captured batches (a gap replay fills, a restart). The server's page fills
the prefix-cache map, lists the events, plots the scrapes, shows predicted beside observed, hides
the live run's docks and disables its settings with the reason (pytest-qt)."""

from __future__ import annotations

import pytest

from attach_fixtures import WAIT_S, FixtureServer, LoopbackPublisher, cached_after_run1, play_script, vllm_routes
from kvscope.app.cli.gui import initial_values
from kvscope.app.gui.attach_view import SETTINGS_TOOLTIP
from kvscope.app.gui.main_window import MainWindow
from kvscope.app.lab.presets import load_model
from kvscope.app.lab.vllm.attachment import AttachTarget
from kvscope.engine.snapshot import BLOCK_CACHED


class Args:
    backend, model, hardware, workload, model_path = "simulated", None, "h100-80gb", "chat", None


@pytest.fixture
def attached(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("KVSCOPE_CONFIG_DIR", str(tmp_path / "config"))
    http, pub = FixtureServer(vllm_routes()), LoopbackPublisher()
    target = AttachTarget(http.url, kv_events=pub.endpoint, replay=pub.replay_endpoint, model=load_model("tiny-llama"))
    win = MainWindow(initial_values(Args()), autoplay=False, attach=target)
    qtbot.addWidget(win)
    win.resize(1280, 800)
    win.show()
    qtbot.waitExposed(win)
    yield win, pub
    win.close()
    pub.stop()
    http.stop()


def test_the_attached_page_shows_the_servers_cache_events_and_metrics(attached, qtbot):
    window, pub = attached
    view = window.attached
    assert window.pages.currentWidget() is view
    qtbot.waitUntil(lambda: view.info is not None, timeout=int(WAIT_S * 1000))
    play_script(pub)
    qtbot.waitUntil(lambda: view.counts.get("batches") == 26 and view.latest_snapshot is not None
                    and view.latest_snapshot.count(BLOCK_CACHED) == cached_after_run1(), timeout=int(WAIT_S * 1000))
    assert not view.errors
    lines = view.event_log.shown_lines()
    assert any("block(s) stored" in line for line in lines)
    assert any("evicted" in line for line in lines)
    assert any("missing batches replayed" in line for line in lines)
    assert any("restarted" in line for line in lines)
    assert view.block_map.block_counts()["cached"] == cached_after_run1()
    assert "placed by kvscope" in view.block_map.status_text()
    cell = int(view.latest_snapshot.block_state.argmax())  # a cached cell
    assert "placed by kvscope" in view.block_map.hover_text(cell) and "prefix chain" in view.block_map.hover_text(cell)
    assert [s.label for s in view.blocks_bar.segments][:1] in (["cached, free (at least)"], ["in use"])
    html = view.details.toHtml()
    assert "Predicted by kvscope" in html and "Not published by vLLM" in html and "tiny-llama" in html
    assert "gaps 1" in view.status.text() and "restarts 1" in view.status.text()
    # the live run's settings mean nothing to the server: disabled, saying why; its docks hidden
    assert not window.settings_dock.widget().isEnabled()
    assert window.settings_dock.widget().toolTip() == SETTINGS_TOOLTIP
    assert window.plots_dock.isHidden() and window.bottom_dock.isHidden() and window.inspector_dock.isHidden()
    window.pages.setCurrentIndex(0)
    assert window.settings_dock.widget().isEnabled() and not window.plots_dock.isHidden()


def test_file_record_on_the_attached_page_records_the_server_and_its_replay_shows_it(attached, qtbot, tmp_path):
    window, pub = attached
    view = window.attached
    qtbot.waitUntil(lambda: view.info is not None, timeout=int(WAIT_S * 1000))
    path = tmp_path / "server.kvrec"
    assert window.start_recording(str(path))  # File > Record the run, with the server's page showing
    qtbot.waitUntil(lambda: view.recording_ticks is not None, timeout=int(WAIT_S * 1000))
    play_script(pub)
    qtbot.waitUntil(lambda: view.counts.get("batches") == 26, timeout=int(WAIT_S * 1000))
    window.toggle_recording(False)
    qtbot.waitUntil(lambda: path.exists() and view.recording_ticks is None, timeout=int(WAIT_S * 1000))
    live_cached = view.latest_snapshot.count(BLOCK_CACHED)

    assert window.open_recording(str(path))
    replay = window.attached
    assert replay is not view and replay.recording is not None and window.pages.currentWidget() is replay
    replay.host.set_speed(0)
    qtbot.waitUntil(lambda: replay.counts.get("batches") == 26 and replay.latest_snapshot is not None
                    and replay.latest_snapshot.count(BLOCK_CACHED) == live_cached, timeout=int(WAIT_S * 1000))
    assert not replay.errors and "replay of server.kvrec" in replay.status.text()
    assert any("missing batches replayed" in line for line in replay.event_log.shown_lines())
    replay.seek(0)  # the scrubber's seek: back to the map the recording began with
    qtbot.waitUntil(lambda: replay.latest_snapshot.count(BLOCK_CACHED) == 0, timeout=int(WAIT_S * 1000))
    assert replay.scrubber.slider.value() == 0


def test_a_damaged_attached_recording_leaves_the_window_as_it_was(attached, tmp_path, monkeypatch):
    from PySide6.QtWidgets import QMessageBox

    window, _ = attached
    shown = []
    monkeypatch.setattr(QMessageBox, "warning", lambda *args: shown.append(args[2]))
    bad = tmp_path / "bad.kvrec"
    bad.write_bytes(b"\x89KVREC\r\n\x1a\n" + bytes(4))
    assert not window.open_recording(str(bad))
    assert len(shown) == 1 and "bad.kvrec" in shown[0] and window.attached.recording is None


def test_play_step_and_reset_on_the_attached_page_leave_the_live_engine_alone(attached, qtbot):
    """The attached server runs by itself: Space, Right and R there built and played the live engine
    out of sight. They say so in the status bar instead."""
    window, _pub = attached
    assert window.pages.currentWidget() is window.attached
    for action in (window.play_action, window.step_action, window.reset_action):
        action.trigger()
        assert "attached server runs by itself" in window.statusBar().currentMessage()
    assert window.engine_info is None and window.latest_snapshot is None  # nothing was built or stepped
    window.attached.stop()
    window.pages.setCurrentWidget(window.panels.page)
    window.reset_action.trigger()  # on the live page the keys act again: R builds and plays the engine
    qtbot.waitUntil(lambda: window.latest_snapshot is not None, timeout=WAIT_S * 1000)


def test_ctrl_k_from_another_page_shows_the_prompt_box(attached, qtbot):
    window, _pub = attached
    window.prompt_action.trigger()
    assert window.pages.currentWidget() is window.panels.page
