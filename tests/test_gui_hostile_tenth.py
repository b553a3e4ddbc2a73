"""The window against bad input, tenth round: an attached page whose process is killed (SIGKILL)
or whose attach is refused (it said "Play, Apply or Reset (R) starts a new one", and on that page all
three were refused); File > Record on such a page (checked over nothing recorded) or refused by its
process (the page then said "not attached" of a server it still followed); a server that serves no
KV cache usage (drawn as "in use: 0 blocks"); a chain whose first parent was never seen (called
"block 1 of its chain"); a user preset deleted on disk while the window ran (Apply said "unknown
model preset" beside a list still offering it, Delete "'mine' is not one of your presets"); the
event log's filter that matches nothing (an empty log beside "5,000 of the last 5,000 events
kept"). Each is said where the user is, nothing is drawn that the server did not say, and nothing
the user had is lost."""

from __future__ import annotations

import math
import os
import signal
import socket
from types import SimpleNamespace

import pytest
from PySide6.QtWidgets import QInputDialog, QMessageBox

from kvscope.app.cli.gui import initial_values
from kvscope.app.gui import recording_control
from kvscope.app.gui.attach_view import AttachView
from kvscope.app.gui.main_window import MainWindow
from kvscope.app.host.attach_session import map_snapshot
from kvscope.app.host.process_host import SessionHost
from kvscope.app.host.protocol import AttachFrame
from kvscope.app.lab.presets import user_preset_names, user_presets_root
from kvscope.app.lab.recording.attached_reader import AttachedRecording
from kvscope.app.lab.vllm.attachment import AttachTarget
from kvscope.app.lab.vllm.events import BlockStored, EventBatch
from kvscope.app.lab.vllm.prefix_cache_map import PrefixCacheMap, map_state, restore_map
from kvscope.widgets.event_log import EventLog
from kvscope.widgets.palette import DARK
from kvscope.widgets.prefix_cache_map_view import PrefixCacheMapView

from test_gui_hostile_fourth import TIMEOUT_MS, Args


@pytest.fixture
def said(monkeypatch):
    """Every modal dialog's (kind, title, text)."""
    out = []
    for kind in ("warning", "information", "critical"):
        monkeypatch.setattr(QMessageBox, kind, lambda parent, title, text, *a, _kind=kind, **k: out.append(
            (_kind, title, text)))
    return out


def open_boxes(win) -> list:
    return [(box.windowTitle(), box.text()) for box in win.findChildren(QMessageBox) if box.isVisible()]


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def attached_window(qtbot, monkeypatch, tmp_path, url: str, endpoint: str) -> MainWindow:
    monkeypatch.setenv("KVSCOPE_CONFIG_DIR", str(tmp_path / "config"))
    win = MainWindow(initial_values(Args()), autoplay=False, attach=AttachTarget(url=url, kv_events=endpoint,
                                                                                  scrape_interval_s=0.2))
    qtbot.addWidget(win)
    win.resize(1280, 800)
    win.show()
    return win


# -- 1. the attached page: a recording its process refuses, the process killed, an attach refused ----------

def test_a_refused_recording_then_a_killed_process_are_said_and_reset_on_the_page_attaches_again(
        qtbot, server, publisher, monkeypatch, tmp_path):
    win = attached_window(qtbot, monkeypatch, tmp_path, server().url, publisher().endpoint)
    view = win.attached
    qtbot.waitUntil(lambda: view.info is not None, timeout=TIMEOUT_MS)
    # a folder gone between the window's check and the process's open: Record unchecked, a dialog about
    # the recording, and the page still says it follows the server (it said "not attached: Cannot record")
    monkeypatch.setattr(recording_control, "writable", lambda *a, **k: None)
    assert recording_control.start(win, str(tmp_path / "gone" / "server.kvrec"))
    qtbot.waitUntil(lambda: not win.record_action.isChecked(), timeout=TIMEOUT_MS)
    assert [title for title, _ in open_boxes(win)] == [recording_control.DID_NOT_START]
    assert "Cannot record to" in open_boxes(win)[0][1]
    assert not view.failed and "not attached" not in view.status.text()
    for box in win.findChildren(QMessageBox):
        box.done(0)
    # a recording of the server: Record unchecked on the Live run page finishes it (it stopped the live
    # engine's, none, and the server's ran on unchecked); an export over it is refused meanwhile
    target = tmp_path / "server.png"  # any name: Record takes it, and an export as PNG is asked of it
    assert recording_control.start(win, str(target))
    qtbot.waitUntil(lambda: view.recording_ticks is not None, timeout=TIMEOUT_MS)
    win.pages.setCurrentIndex(0)
    monkeypatch.setattr(win, "_ask_save_path", lambda *a: str(target))
    monkeypatch.setattr(QMessageBox, "warning", lambda parent, title, text, *a, **k: said.append((title, text)))
    said = []
    win.export_actions["block_map"].trigger()
    assert said and said[-1][0] == "Not saved" and "recording in progress" in said[-1][1]
    win.record_action.trigger()
    qtbot.waitUntil(lambda: view.recording_to is None and view.recording_ticks is None, timeout=TIMEOUT_MS)
    assert AttachedRecording.open(target).num_steps >= 0  # finished whole: it opens
    win.pages.setCurrentWidget(view)
    # File > Open recording of the file the page records to: refused (it was opened half-written, "cut short")
    second = tmp_path / "second.kvrec"
    assert recording_control.start(win, str(second))
    assert not win.open_recording(str(second))
    assert said[-1][0] == "Cannot open the recording"
    assert "is the recording of the attached server in progress: uncheck File > Record" in said[-1][1]
    assert win.attached is view and win.record_action.isChecked() and view.recording_to == str(second)
    # the process killed: said, and Reset (R) on the page attaches again, as the message says
    os.kill(view.host.pid, signal.SIGKILL)
    qtbot.waitUntil(lambda: view.failed, timeout=TIMEOUT_MS)
    text = view.status.text()
    assert text.startswith("not attached: The attach process ended unexpectedly (signal 9, SIGKILL)")
    assert text.endswith("Reset (R) on this page attaches again.") and "Play, Apply" not in text
    win.reset_action.trigger()
    assert win.statusBar().currentMessage().startswith("attaching again")
    qtbot.waitUntil(lambda: not view.failed and view.status.text().startswith("vLLM 0.32.0 at "), timeout=TIMEOUT_MS)
    assert win.live_worker.config is None  # R re-attached the page: it built no live engine out of sight
    win.close()


def test_a_refused_attach_says_reset_tries_again_and_record_is_refused_before_its_dialog(
        qtbot, publisher, monkeypatch, tmp_path, said):
    win = attached_window(qtbot, monkeypatch, tmp_path, f"http://127.0.0.1:{closed_port()}", publisher().endpoint)
    view = win.attached
    qtbot.waitUntil(lambda: view.failed, timeout=TIMEOUT_MS)
    assert "connection refused" in view.status.text()
    assert view.status.text().endswith("Reset (R) on this page tries again")
    asked = []
    monkeypatch.setattr("PySide6.QtWidgets.QFileDialog.getSaveFileName", lambda *a, **k: asked.append(a) or ("", ""))
    win.record_action.trigger()
    assert asked == [] and not win.record_action.isChecked()
    assert said[-1][1] == recording_control.DID_NOT_START
    assert "the page follows no server now (cannot reach" in said[-1][2] and "Reset (R) on the page" in said[-1][2]
    win.close()


# -- 2. a server that serves no KV cache usage --------------------------------------------------------------

def test_a_scrape_without_kv_usage_is_not_drawn_as_blocks_in_use(qtbot, monkeypatch):
    """A newer vLLM's name for the usage, or a NaN (ignored): the bar drew "in use: 0 blocks"."""
    cache = PrefixCacheMap(8, 16)
    attachment = SimpleNamespace(prefix_map=cache, elapsed_s=1.0, subscriber=SimpleNamespace(
        counts=SimpleNamespace(batches=0)))
    unserved = SimpleNamespace(kv_usage=math.nan, num_running=math.nan, num_waiting=math.nan)
    monkeypatch.setattr(SessionHost, "start", lambda self: None)  # the page's process: not needed here
    monkeypatch.setattr(SessionHost, "apply", lambda self, config, play=True: None)
    view = AttachView(AttachTarget(url="http://127.0.0.1:1", kv_events="tcp://127.0.0.1:2"), DARK)
    qtbot.addWidget(view)
    view.timer.stop()
    for point, title in ((None, "KV cache of the server (its usage is not scraped yet)"),
                         (unserved, "KV cache of the server (its usage is not served)")):
        snapshot, cells = map_snapshot(attachment, point)
        view.render_frame(AttachFrame(snapshot=snapshot, cells=cells))
        assert view.blocks_bar.title == title
        assert [s.label for s in view.blocks_bar.segments] == ["not known cached"]  # no "in use: 0 blocks"
        assert "does not say" in view.blocks_bar.segments[0].tooltip
    served = SimpleNamespace(kv_usage=0.5, num_running=1.0, num_waiting=0.0)
    snapshot, cells = map_snapshot(attachment, served)
    view.render_frame(AttachFrame(snapshot=snapshot, cells=cells))
    assert view.blocks_bar.title == "KV cache of the server"
    assert [(s.label, s.blocks) for s in view.blocks_bar.segments] == [("in use", 4), ("free", 4)]


def test_a_chain_whose_first_parent_was_never_seen_is_not_called_a_prompts_first_block(qtbot, monkeypatch):
    """Attached mid-run: a stored block names a parent the map never held; its hover said "block 1 of
    its chain", as of a prompt's first block."""
    cache = PrefixCacheMap(8, 16)
    cache.apply(EventBatch(1.0, (BlockStored((11, 12), None, (), 16),  # a prompt from its start
                                 BlockStored((21, 22), 99, (), 16)), None))  # after block 99, never seen
    restored = restore_map(*map_state(cache), max_cells=64)  # a recording's replay says it the same
    attachment = SimpleNamespace(prefix_map=restored, elapsed_s=1.0, subscriber=SimpleNamespace(
        counts=SimpleNamespace(batches=1)))
    snapshot, cells = map_snapshot(attachment, None)
    view = PrefixCacheMapView()
    qtbot.addWidget(view)
    view.update_cells(snapshot, cells)
    by_hash = {int(snapshot.block_hash[c]): view.hover_text(c) for c in range(snapshot.num_blocks)
               if snapshot.block_hash[c]}
    assert "block 1 of its chain" in by_hash[11] and "block 2 of its chain" in by_hash[12]
    assert "block 1 of it as seen: its first block follows one never seen stored" in by_hash[21]
    assert "block 2 of it as seen" in by_hash[22] and "of its chain" not in by_hash[22]


# -- 3. a user preset deleted on disk while the window ran -----------------------------------------------

def save_as(window, monkeypatch, kind: str, name: str) -> None:
    monkeypatch.setattr(QInputDialog, "getText", lambda *a, **k: (name, True))
    (window.editor.save_model if kind == "models" else window.editor.save_hardware).click()


def test_apply_with_a_preset_deleted_on_disk_says_so_and_the_form_holds_another(window, monkeypatch, said):
    save_as(window, monkeypatch, "models", "mine")
    settings = window.settings
    settings.model.setCurrentIndex(settings.model.findText("mine"))
    (user_presets_root() / "models" / "mine.toml").unlink()
    assert not window.apply_settings(play=False)
    message = window.statusBar().currentMessage()
    assert message.startswith("not applied: your preset mine is no longer in ") and "deleted outside" in message
    assert "unknown model preset" not in message
    assert settings.model.findText("mine") < 0 and settings.model.currentText() == "llama-3-8b"
    assert settings.errors["model"].text() == "your preset mine was deleted: now llama-3-8b"
    assert window.editor.user_presets.count() == 0 and said == []
    assert window.apply_settings(play=False)  # the form as it now is


def test_deleting_a_preset_already_gone_on_disk_takes_it_off_the_list_without_an_error(window, monkeypatch,
                                                                                          said):
    save_as(window, monkeypatch, "hardware", "rig")
    (user_presets_root() / "hardware" / "rig.toml").unlink()
    window.editor.user_presets.setCurrentIndex(window.editor.user_presets.findText("rig (hardware)"))
    window.editor.delete_button.click()
    assert said == [] and user_preset_names("hardware") == []
    assert window.editor.user_presets.findText("rig (hardware)") < 0
    assert "your preset rig was already gone from" in window.statusBar().currentMessage()


# -- 4. the event log's filter ---------------------------------------------------------------------------

def test_the_event_log_says_how_many_lines_its_filter_matches_none_included(qtbot):
    log = EventLog(kinds=("stored", "removed"))
    qtbot.addWidget(log)
    log.show()
    log.add_lines([("stored", f"stored block #{i}") for i in range(5)] + [("removed", "removed block #2")])
    assert log.count.text() == "6 of the last 5,000 events kept"
    log.text_filter.setText("  #2 ")
    assert log.count.text() == "2 match the filter (6 of the last 5,000 events kept)"
    log.kind_filter.setCurrentText("removed")
    assert log.count.text().startswith("1 match the filter")
    log.text_filter.setText("\u202e#9")
    assert log.shown_lines() == [] and log.count.text().startswith("none match the filter")
    log.add_lines([("removed", "removed block #9")])  # a line that comes in counts at once
    assert log.count.text() == "none match the filter (7 of the last 5,000 events kept)"
    log.text_filter.setText("#9")
    assert log.count.text() == "1 match the filter (7 of the last 5,000 events kept)"
    log.text_filter.clear()
    log.kind_filter.setCurrentIndex(0)
    assert log.count.text() == "7 of the last 5,000 events kept"
