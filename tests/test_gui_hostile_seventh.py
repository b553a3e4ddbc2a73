"""The window against bad input, seventh round: the failed-build banner after a theme switch; an
export to a name with a NUL, a lone surrogate or a right-to-left override; "2,5" typed where a
comma only separates thousands; a pasted prompt of one enormous word; a comparison whose labels
hold markup or 500 characters. Each is said where the user is, with no traceback, freeze or
other number than the one typed."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QTextOption
from PySide6.QtWidgets import QMessageBox

from kvscope.app.gui.config_column import ConfigColumn
from kvscope.app.gui.prompt_box import PromptBox
from kvscope.app.host.session import BUILD_FAILED_STATUS
from kvscope.widgets.number_box import NumberBox
from kvscope.widgets.palette import DARK, LIGHT, hex_color
from kvscope.widgets.settings_panel import SettingsPanel
from kvscope.widgets.text_exchange import TextExchangeView

ANYWHERE = QTextOption.WrapMode.WrapAnywhere
AT_SPACES = QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere


@pytest.fixture
def said(monkeypatch):
    out = []
    for kind in ("warning", "information"):
        monkeypatch.setattr(QMessageBox, kind, lambda parent, title, text, *a, **k: out.append((title, text)))
    return out


# -- 1. the failed-build banner follows a theme switch ------------------------------------------------

def test_the_failed_build_banner_takes_the_new_themes_warning_colour(window):
    window.builds.applied()
    assert window.builds.take(SimpleNamespace(error="boom: no engine", status=BUILD_FAILED_STATUS),
                              SimpleNamespace(new_engine=False))
    assert hex_color(DARK.warning) in window.builds.banner.styleSheet()
    window.set_theme("light")
    style = window.builds.banner.styleSheet()
    assert hex_color(LIGHT.warning) in style and hex_color(DARK.warning) not in style


# -- 2. exports to names no file can have -------------------------------------------------------------

@pytest.mark.parametrize("key, name", [("plot:kv", "a\x00b.png"), ("block_map", "\ud800.png")])
def test_an_export_to_a_name_with_a_nul_or_a_lone_surrogate_says_why_in_a_dialog(window, said, monkeypatch,
                                                                                tmp_path, key, name):
    monkeypatch.setattr(window, "_ask_save_path", lambda *a: f"{tmp_path}/{name}")
    window.export_actions[key].trigger()
    assert len(said) == 1 and said[0][0] == "Not saved" and "no file can have this name" in said[0][1]


def test_a_saved_name_with_a_direction_override_is_said_escaped(window, said, monkeypatch, tmp_path):
    path = tmp_path / "\u202egnp.exe.png"
    monkeypatch.setattr(window, "_ask_save_path", lambda *a: str(path))
    window.export_actions["plot:kv"].trigger()
    assert path.exists() and said == []
    message = window.statusBar().currentMessage()
    assert message.startswith("saved ") and "\\u202e" in message and "\u202e" not in message


# -- 3. a comma where it only separates thousands ------------------------------------------------------

def type_and_enter(qtbot, box, text: str) -> None:
    box.setFocus()
    box.lineEdit().selectAll()
    qtbot.keyClicks(box.lineEdit(), text)
    qtbot.keyClick(box.lineEdit(), Qt.Key_Return)


@pytest.mark.parametrize("text", ["2,5", "0,5", "1,0,2,4"])
def test_a_misplaced_thousands_separator_is_refused_not_read_as_another_number(qtbot, text):
    panel = SettingsPanel()
    qtbot.addWidget(panel)
    panel.show()
    box = panel.trace_speedup
    before = box.value()
    type_and_enter(qtbot, box, text)
    assert box.value() == before  # Qt read "2,5" as 25
    assert panel.errors["trace_speedup"].isVisibleTo(panel)
    assert "only separates thousands" in panel.errors["trace_speedup"].text()
    type_and_enter(qtbot, box, "1,000")  # a separator in its place is still a thousands separator
    assert box.value() == 1000


def test_a_box_that_shows_no_separators_does_not_drop_a_misplaced_one_on_enter(qtbot):
    box = NumberBox()  # the seed's box: Qt's fixup removed the comma, and "2,5" became 25
    box.setRange(0, 2**31 - 1)
    box.setKeyboardTracking(False)
    qtbot.addWidget(box)
    box.show()
    type_and_enter(qtbot, box, "2,5")
    assert box.value() == 0


# -- 4. a prompt of one enormous word ---------------------------------------------------------------------

def test_a_pasted_word_of_200000_characters_wraps_anywhere_and_plain_text_at_spaces(qtbot):
    box = PromptBox()
    qtbot.addWidget(box)
    box.show()
    box.input.setPlainText("a" * 200_000)  # at spaces Qt took 2 s for this, minutes for 2 MB
    assert box.input.wordWrapMode() == ANYWHERE
    box.input.setPlainText("a question of ordinary words")
    assert box.input.wordWrapMode() == AT_SPACES
    view = TextExchangeView()
    qtbot.addWidget(view)
    view.show_exchange("b" * 100_000, "")
    assert view.wordWrapMode() == ANYWHERE
    view.show_exchange("hello", "world")
    assert view.wordWrapMode() == AT_SPACES


# -- 5. a comparison's labels: text, and short enough to fit ------------------------------------------

def test_a_configuration_label_is_shown_as_text_and_a_long_one_keeps_the_column_narrow(qtbot):
    column = ConfigColumn()
    qtbot.addWidget(column)
    column.set_config("<b>8k</b> & <i>", "", (200, 0, 0))
    assert "&lt;b&gt;8k&lt;/b&gt; &amp; &lt;i&gt;" in column.header.text()
    column.set_config("x" * 500 + "\u202e", "", (200, 0, 0))
    assert column.minimumSizeHint().width() < 400  # 500 characters made the page 4,000 px wide
    header = column.header.text()
    assert "\u202e" not in header and "\\u202e" in header and "characters)" in header
