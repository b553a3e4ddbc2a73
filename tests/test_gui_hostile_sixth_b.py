"""The window against bad input, sixth round (second part): user presets saved over one the user
has, or into a presets folder that is read-only or a file; an attached server's address with a
password, a direction override or 10,000 characters in the page's tab; prompts of nothing visible
or at the 100,000-character cap; Enter held down; a theme switched with a refusal on screen; run
keys pressed in bursts while an engine builds; the window closed while it builds. Each is said
where the user is, with no traceback, and nothing the user had is lost."""

from __future__ import annotations

import os
import pathlib
import socket
import subprocess
import sys

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QTextCursor
from PySide6.QtWidgets import QApplication, QInputDialog, QMessageBox

from kvscope.app.cli.gui import initial_values
from kvscope.app.gui.main_window import MainWindow
from kvscope.app.gui.prompt_box import PromptBox
from kvscope.app.gui.window_state import WindowState
from kvscope.app.host.protocol import FrameDelta
from kvscope.app.lab.chat_workload import MAX_TEXT_CHARS
from kvscope.app.lab.presets import user_preset_names, user_presets_root
from kvscope.app.lab.vllm.attachment import AttachTarget
from kvscope.widgets.palette import hex_color

from test_gui_hostile_fourth import TIMEOUT_MS


@pytest.fixture
def said(monkeypatch):
    """Every dialog's (kind, title, text); a question is answered by `said.answer` (No unless set)."""
    class Said(list):
        answer = QMessageBox.No

    out = Said()
    for kind in ("warning", "information", "critical"):
        monkeypatch.setattr(QMessageBox, kind, lambda parent, title, text, *a, _kind=kind, **k: out.append(
            (_kind, title, text)))

    def question(parent, title, text, *a, **k):
        out.append(("question", title, text))
        return out.answer

    monkeypatch.setattr(QMessageBox, "question", question)
    return out


def save_as(window, monkeypatch, kind: str, name: str) -> None:
    monkeypatch.setattr(QInputDialog, "getText", lambda *a, **k: (name, True))
    (window.editor.save_model if kind == "models" else window.editor.save_hardware).click()


# -- 1. a preset name the user already has ------------------------------------------------------------

def test_saving_over_a_preset_you_have_asks_and_no_keeps_it_as_it_was(window, monkeypatch, said):
    editor = window.editor
    editor.model_boxes["num_key_value_heads"].setValue(8)
    save_as(window, monkeypatch, "models", "mine")
    path = user_presets_root() / "models" / "mine.toml"
    before = path.read_bytes()
    editor.model_boxes["num_key_value_heads"].setValue(4)
    save_as(window, monkeypatch, "models", "mine")
    assert [(kind, title) for kind, title, _ in said] == [("question", "Replace preset?")]
    assert "already have a model preset named mine" in said[0][2]
    assert path.read_bytes() == before
    assert "your preset mine is kept as it was" in window.statusBar().currentMessage()
    said.answer = QMessageBox.Yes
    save_as(window, monkeypatch, "models", "mine")
    assert path.read_bytes() != before and "num_key_value_heads = 4" in path.read_text()


def test_a_new_name_is_saved_without_a_question(window, monkeypatch, said):
    save_as(window, monkeypatch, "hardware", "rig")
    assert said == [] and user_preset_names("hardware") == ["rig"]


# -- 2. the presets folder read-only, or a file in its place ---------------------------------------------

@pytest.mark.parametrize("kind", ["models", "hardware"])
@pytest.mark.parametrize("file_at", ["presets", "presets/kind"])
def test_a_file_where_the_presets_folder_goes_is_said_in_a_dialog(window, monkeypatch, said, kind, file_at):
    root = user_presets_root()
    blocked = root if file_at == "presets" else root / kind
    blocked.parent.mkdir(parents=True, exist_ok=True)
    blocked.write_text("not a folder")
    save_as(window, monkeypatch, kind, "mine")
    assert [(k, title) for k, title, _ in said] == [("warning", "Preset not saved")]
    assert "cannot make the folder" in said[0][2] and "your presets live there" in said[0][2]
    assert blocked.read_text() == "not a folder"


def test_a_read_only_presets_folder_is_said_at_save_and_at_delete(window, monkeypatch, said):
    save_as(window, monkeypatch, "models", "mine")

    def refused(*_a, **_k):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(pathlib.Path, "unlink", refused)
    window.editor.user_presets.setCurrentIndex(window.editor.user_presets.findText("mine (model)"))
    window.editor.delete_button.click()
    assert said[-1][:2] == ("warning", "Preset not deleted") and "Permission denied" in said[-1][2]
    assert user_preset_names("models") == ["mine"] and window.editor.user_presets.findText("mine (model)") >= 0
    monkeypatch.setattr(pathlib.Path, "mkdir", refused)  # presets/hardware does not exist yet
    save_as(window, monkeypatch, "hardware", "rig")
    assert said[-1][:2] == ("warning", "Preset not saved") and "Permission denied" in said[-1][2]


# -- 3. an attached server's address in the page's tab ---------------------------------------------------

def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize("address, shown, hidden", [
    ("http://user:s3cret@127.0.0.1:{port}/#frag", "http://...@127.0.0.1:{port}", "s3cret"),
    ("http://127.0.0.1:{port}/\u202eevil\nline", "\\u202eevil\\nline", "\u202e"),
    ("http://127.0.0.1:{port}/" + "a" * 10_000, "10,0", "a" * 100),
])
def test_an_attached_address_is_said_in_its_tab_without_password_overrides_or_its_whole_length(
        qtbot, tmp_path, monkeypatch, address, shown, hidden):
    monkeypatch.setenv("KVSCOPE_CONFIG_DIR", str(tmp_path / "config"))
    port = _closed_port()
    url = address.format(port=port)
    target = AttachTarget(url, kv_events=f"tcp://127.0.0.1:{port}")
    win = MainWindow(initial_values(_AttachArgs()), autoplay=False, attach=target)
    qtbot.addWidget(win)
    win.resize(1280, 800)
    win.show()
    view = win.attached
    index = win.pages.indexOf(view)
    tab, tip = win.pages.tabText(index), win.pages.tabToolTip(index)
    assert shown.format(port=port) in tab and hidden not in tab and hidden not in tip
    assert len(tab) < 120
    # nothing listens there: the page says so in bounded time and the window stays usable
    qtbot.waitUntil(lambda: view.status.text().startswith("not attached: "), timeout=TIMEOUT_MS)
    assert hidden not in view.status.text()
    win.pages.setCurrentIndex(0)
    win.toggle_theme()
    assert win.pages.currentIndex() == 0 and win.settings_dock.widget().isEnabled()
    win.close()


class _AttachArgs:
    backend, model, hardware, workload, model_path = "simulated", None, "h100-80gb", "chat", None


# -- 4. the prompt box ----------------------------------------------------------------------------------

class _TextEngine:
    no_text_reason = None


@pytest.fixture
def box(qtbot):
    view = PromptBox()
    qtbot.addWidget(view)
    view.show()
    view.sent = []
    view.prompt_submitted.connect(view.sent.append)
    view.take(WindowState().take(FrameDelta(engine_info=_TextEngine())))
    return view


@pytest.mark.parametrize("text", ["\u200b\u200c\u200d", "\x00\x00", "\u202e \u2066\n", "\u2060\u00ad"])
def test_a_prompt_of_nothing_visible_is_refused_and_kept(box, qtbot, text):
    box.input.setPlainText(text)
    qtbot.keyClick(box.input, Qt.Key_Return)
    assert box.sent == [] and box.awaiting is None
    assert "invisible" in box.status_text() or "Type a prompt first" in box.status_text()
    assert box.input.toPlainText() == text


@pytest.mark.parametrize("text", ["é\u0301 \u05e9\u05dc\u05d5\u05dd", "👍🏽 ok", "a\x00b"])
def test_a_prompt_with_something_visible_is_sent_as_typed(box, qtbot, text):
    box.input.setPlainText(text)
    qtbot.keyClick(box.input, Qt.Key_Return)
    assert box.sent == [text]


def test_the_cap_counts_characters_not_utf16_units_and_holds_at_100000(box, qtbot):
    emoji = "😀" * MAX_TEXT_CHARS  # 200,000 UTF-16 units in Qt: still 100,000 characters
    box.input.setPlainText(emoji)
    qtbot.keyClick(box.input, Qt.Key_Return)
    assert box.sent == [emoji]
    box.answered(None, "refused for the test")
    box.input.setPlainText(emoji + "!")
    qtbot.keyClick(box.input, Qt.Key_Return)
    assert len(box.sent) == 1 and "100,001 characters" in box.status_text()


def test_enter_held_down_sends_once_until_the_engine_answers(box, qtbot):
    box.input.setPlainText("hello")
    for _ in range(30):
        qtbot.keyClick(box.input, Qt.Key_Return)
    assert box.sent == ["hello"] and box.input.toPlainText() == "hello"
    box.input.moveCursor(QTextCursor.End)
    qtbot.keyClick(box.input, Qt.Key_Return, Qt.ShiftModifier)
    assert box.input.toPlainText() == "hello\n" and box.sent == ["hello"]


def test_a_refusal_on_screen_takes_the_new_themes_warning_colour(box):
    from kvscope.widgets.palette import LIGHT

    box.input.setPlainText("\u200b")
    box.send()
    box.set_theme(LIGHT)
    assert hex_color(LIGHT.warning) in box.status.styleSheet() and "invisible" in box.status_text()


# -- 5. keys in bursts while an engine builds; the window closed while it builds ------------------------------

BURST = [(Qt.Key_Space, Qt.NoModifier), (Qt.Key_Right, Qt.NoModifier), (Qt.Key_R, Qt.NoModifier),
         (Qt.Key_Plus, Qt.NoModifier), (Qt.Key_Minus, Qt.NoModifier), (Qt.Key_Return, Qt.ControlModifier),
         (Qt.Key_F11, Qt.NoModifier), (Qt.Key_Escape, Qt.NoModifier), (Qt.Key_K, Qt.ControlModifier),
         (Qt.Key_T, Qt.ControlModifier), (Qt.Key_Escape, Qt.NoModifier)]


def test_run_keys_pressed_in_bursts_while_the_engine_builds_leave_a_running_window(window, qtbot):
    window.apply_settings(play=True)
    for _ in range(3):
        for key, modifiers in BURST:
            qtbot.keyClick(QApplication.focusWidget() or window, key, modifiers)
    qtbot.waitUntil(lambda: window.latest_snapshot is not None, timeout=TIMEOUT_MS)
    assert not window.demo.active and not [b for b in window.findChildren(QMessageBox) if b.isVisible()]


CLOSE_WHILE_BUILDING = """
import sys
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication


def main():
    app = QApplication([])
    sys.path.insert(0, sys.argv[1])
    from kvscope.app.cli.gui import initial_values
    from kvscope.app.gui.main_window import MainWindow
    from test_gui_hostile_fourth import Args

    window = MainWindow({**initial_values(Args()), "num_requests": 2000}, autoplay=False)
    window.show()
    window.apply_settings(play=True)
    QTimer.singleShot(50, window.close)
    QTimer.singleShot(1000, app.quit)
    app.exec()
    print("exited")


if __name__ == "__main__":  # the engine's process is spawned: it imports this file again
    main()
"""


def test_closing_the_window_while_its_engine_builds_exits_without_a_traceback(tmp_path):
    script = tmp_path / "close_while_building.py"
    script.write_text(CLOSE_WHILE_BUILDING)
    done = subprocess.run([sys.executable, str(script), os.path.dirname(__file__)], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "KVSCOPE_CONFIG_DIR": str(tmp_path / "config"),
                                           "QT_QPA_PLATFORM": "offscreen"})
    assert done.returncode == 0 and "exited" in done.stdout
    assert "Traceback" not in done.stderr and "Error" not in done.stderr


# -- 6. the theme switched on an attached server's page ----------------------------------------------------

def test_the_attached_pages_blocks_bar_and_notes_follow_a_theme_switch(qtbot, tmp_path, monkeypatch):
    from attach_fixtures import WAIT_S, FixtureServer, LoopbackPublisher, play_script, vllm_routes
    from kvscope.app.lab.presets import load_model

    monkeypatch.setenv("KVSCOPE_CONFIG_DIR", str(tmp_path / "config"))
    http, pub = FixtureServer(vllm_routes()), LoopbackPublisher()
    try:
        target = AttachTarget(http.url, kv_events=pub.endpoint, replay=pub.replay_endpoint,
                              model=load_model("tiny-llama"))
        win = MainWindow(initial_values(_AttachArgs()), autoplay=False, attach=target)
        qtbot.addWidget(win)
        win.show()
        view = win.attached
        qtbot.waitUntil(lambda: view.info is not None, timeout=int(WAIT_S * 1000))
        play_script(pub)
        qtbot.waitUntil(lambda: view.latest_snapshot is not None, timeout=int(WAIT_S * 1000))
        view.timer.stop()  # no frame comes to redraw it: as a paused replay
        win.toggle_theme()
        theme = win.theme
        colour_of = {"in use": theme.decode, "cached, free (at least)": theme.good, "free": theme.free_block}
        assert view.blocks_bar.segments
        assert all(segment.color == colour_of[segment.label] for segment in view.blocks_bar.segments)
        assert hex_color(theme.grid) in view.details.toHtml()
        win.close()
    finally:
        pub.stop()
        http.stop()


def test_a_scenarios_answer_on_screen_takes_the_new_themes_colour(qtbot):
    from kvscope.widgets.palette import DARK, LIGHT
    from kvscope.widgets.scenario_panel import ScenarioPanel

    panel = ScenarioPanel(theme=DARK)
    qtbot.addWidget(panel)
    panel.show()
    panel.show_reveal("3.2 GiB", "within 10%", "the lesson", "the run")
    panel.set_theme(LIGHT)  # the dark theme's yellow on white could not be read
    assert hex_color(LIGHT.accent) in panel.reveal.text() and hex_color(DARK.accent) not in panel.reveal.text()
    assert "3.2 GiB" in panel.reveal.text() and "the lesson" in panel.reveal.text()
    panel.reset()
    panel.set_theme(DARK)
    assert panel.reveal.isHidden() and panel.reveal.text() == ""
