"""Demo mode, for talks: F11 (or --demo) goes fullscreen with large fonts, high contrast and the
settings docks hidden; Esc or F11 puts everything back; the talk keys do what the README says."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication

from kvscope.app.gui.demo_mode import DEMO_FONT_SCALE
from kvscope.app.cli.gui import initial_values
from kvscope.app.gui.main_window import MainWindow
from kvscope.app.lab.scenarios import scenario_names


class Args:
    backend, model, hardware, workload, model_path = "simulated", None, "h100-80gb", "chat", None


@pytest.fixture
def window(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("KVSCOPE_CONFIG_DIR", str(tmp_path / "config"))
    values = initial_values(Args())
    values["num_requests"] = 2000  # runs for minutes: always something to pause, step and reset
    win = MainWindow(values, autoplay=False)
    qtbot.addWidget(win)
    win.resize(1280, 720)
    win.show()
    qtbot.waitExposed(win)
    win.activateWindow()  # shortcuts reach the active window only
    qtbot.waitUntil(lambda: win.engine_info is not None, timeout=20000)
    yield win
    win.demo.leave()  # the application font is global: leave it as it was for the next test
    win.close()


def press(window, qtbot, key):
    """A key as a presenter presses it: with a view (not a form field) focused."""
    target = window.compare if window.compare_showing() else window.block_map
    target.setFocus()
    qtbot.keyClick(target, key)


def test_f11_enters_demo_mode_and_f11_or_esc_leaves_it_as_it_was(window, qtbot):
    font = QApplication.font().pointSizeF()
    theme = window.theme.name
    assert not window.isFullScreen() and window.settings_dock.isVisible()
    press(window, qtbot, Qt.Key_F11)
    qtbot.waitUntil(window.isFullScreen, timeout=5000)
    assert window.demo.active and window.demo_action.isChecked()
    assert window.settings_dock.isHidden() and window.bottom_dock.isHidden() and window.plots_dock.isVisible()
    assert window.menuBar().isHidden()
    assert QApplication.font().pointSizeF() == pytest.approx(font * DEMO_FONT_SCALE)
    assert window.theme.name == "contrast" and window.theme.background == (0, 0, 0)
    axis = window.plots.plots["kv"].getAxis("left")  # pyqtgraph text grows too
    assert axis.style["tickFont"].pointSizeF() == pytest.approx(font * DEMO_FONT_SCALE)
    assert "font-size" in axis.labelStyle
    assert not window.plots.plots["latency"].isVisible()  # three plots fit at these sizes, not five
    press(window, qtbot, Qt.Key_Escape)
    qtbot.waitUntil(lambda: not window.isFullScreen(), timeout=5000)
    assert not window.demo.active and not window.demo_action.isChecked()
    assert window.settings_dock.isVisible() and window.bottom_dock.isVisible() and window.menuBar().isVisible()
    assert QApplication.font().pointSizeF() == pytest.approx(font)
    assert window.theme.name == theme and axis.style["tickFont"] is None
    assert window.plots.plots["latency"].isVisible()
    press(window, qtbot, Qt.Key_F11)
    qtbot.waitUntil(window.isFullScreen, timeout=5000)
    press(window, qtbot, Qt.Key_F11)
    qtbot.waitUntil(lambda: not window.isFullScreen(), timeout=5000)
    assert not window.demo.active and window.settings_dock.isVisible()


def test_the_talk_keys_in_demo_mode(window, qtbot):
    window.toggle_demo()
    qtbot.waitUntil(window.isFullScreen, timeout=5000)
    step = lambda: window.latest_snapshot.step if window.latest_snapshot is not None else -1  # noqa: E731
    assert window.play_action.text() == "Pause"  # the live run starts: the audience sees no empty page
    qtbot.waitUntil(lambda: step() > 5, timeout=10000)
    press(window, qtbot, Qt.Key_Space)  # pause
    assert window.play_action.text() == "Play"
    qtbot.wait(300)  # steps under way, and their frames, arrive
    paused_at = step()
    press(window, qtbot, Qt.Key_Right)  # one step
    qtbot.waitUntil(lambda: step() == paused_at + 1, timeout=5000)
    index = window.speed.currentIndex()
    press(window, qtbot, Qt.Key_Plus)
    assert window.speed.currentIndex() == index + 1
    press(window, qtbot, Qt.Key_Minus)
    press(window, qtbot, Qt.Key_Minus)
    assert window.speed.currentIndex() == index - 1
    info = window.engine_info
    press(window, qtbot, Qt.Key_R)  # reset: a new engine from the start
    qtbot.waitUntil(lambda: window.engine_info is not info, timeout=20000)
    qtbot.waitUntil(lambda: 0 <= step() < paused_at, timeout=10000)


def test_digit_keys_open_the_scenarios_in_order_with_their_question_on_screen(window, qtbot):
    window.toggle_demo()
    names = scenario_names()
    press(window, qtbot, Qt.Key_2)
    assert window.compare_showing() and window.current_scenario == names[1]
    panel = window.compare.panel
    assert panel.isVisible() and panel.question.isVisible() and panel.commit_button.isEnabled()
    assert window.plots_dock.isHidden()  # the comparison takes the whole screen
    press(window, qtbot, Qt.Key_1)
    assert window.current_scenario == names[0]
    window.speed.setCurrentText("max")
    press(window, qtbot, Qt.Key_Space)  # commits the guess on screen and runs
    assert panel.committed_guess is not None
    qtbot.waitUntil(lambda: window.compare.revealed is not None, timeout=30000)
    assert panel.reveal.isVisible()
    press(window, qtbot, Qt.Key_R)  # the same scenario again: a fresh guess
    assert panel.committed_guess is None and window.compare.revealed is None
    press(window, qtbot, Qt.Key_Escape)
    assert not window.demo.active
    window.pages.setCurrentIndex(0)
    assert window.settings_dock.isVisible() and window.plots_dock.isVisible()


def test_demo_mode_scales_views_built_after_it_began(window, qtbot):
    window.toggle_demo()
    window.open_scenario(scenario_names()[0])
    view = window.compare
    qtbot.waitUntil(lambda: view.info is not None, timeout=20000)
    axis = view.plots.plots["kv_usage"].getAxis("bottom")
    assert axis.style["tickFont"] is not None
    assert axis.style["tickFont"].pointSizeF() > QApplication.font().pointSizeF() / DEMO_FONT_SCALE


def test_digits_typed_in_a_field_stay_in_the_field(window, qtbot):
    box = window.settings.max_num_seqs
    box.setFocus()
    box.selectAll()
    qtbot.keyClicks(box, "12")
    assert box.text().startswith("12")
    assert not window.compare_showing() and window.current_scenario is None


def test_demo_mode_shows_the_streaming_answer_large_and_puts_the_split_back(window, qtbot):
    import dataclasses

    from kvscope.app.gui.demo_mode import DEMO_ANSWER_POINTS
    from kvscope.app.host.protocol import FrameDelta, RequestText

    split, box = window.center_split, window.prompt
    sizes = split.sizes()
    window.toggle_demo()
    qtbot.waitUntil(window.isFullScreen, timeout=5000)
    prompt_index = split.indexOf(box)
    assert split.sizes()[prompt_index] == 0  # the simulated engine answers no text: the box folds away
    assert window.inspector_dock.isHidden()
    # an engine that answers text, streaming a workload request and then a typed one
    info = dataclasses.replace(window.engine_info, no_text_reason=None)
    prompt = "<|im_start|>user\nWhy is the sky blue?<|im_end|>\n<|im_start|>assistant\n"
    window.render_frame(FrameDelta(engine_info=info, texts={3: RequestText(prompt, "Sunlight", None)}))
    shares = [size / sum(split.sizes()) for size in split.sizes()]
    assert shares[prompt_index] > 0.5  # the answer has the most room
    assert box.answer.font().pointSizeF() == DEMO_ANSWER_POINTS and box.question.isVisible()
    assert box.question.text() == "#3: Why is the sky blue?" and box.answer.answer == "Sunlight"
    window.render_frame(FrameDelta(texts={3: RequestText(None, "Sunlight scatters", None),
                                          9: RequestText(prompt.replace("sky blue", "sea salty"), "Salt", None,
                                                         typed=True)}))
    assert box.question.text() == "#9: Why is the sea salty?" and box.answer.answer == "Salt"  # the newest typed
    window.select_request(3)  # ... unless the presenter chose one
    assert box.answer.answer == "Sunlight scatters"
    window.toggle_demo()
    qtbot.waitUntil(lambda: not window.isFullScreen(), timeout=5000)
    assert not box.question.isVisible() and box.answer.font().pointSizeF() == QApplication.font().pointSizeF()
    assert split.sizes()[prompt_index] > 0 and len(split.sizes()) == len(sizes)


def test_demo_mode_fits_a_1280x720_screen_and_esc_restores_the_window_that_was_there(window, qtbot):
    from PySide6.QtCore import QRect

    window.setGeometry(QRect(40, 30, 760, 560))  # inside the test screen (offscreen: 800x800)
    qtbot.waitUntil(lambda: window.geometry().width() == 760, timeout=5000)
    before = QRect(window.geometry())
    assert window.seed.isVisible() and window.theme_action.isVisible()
    window.toggle_demo()
    qtbot.waitUntil(window.isFullScreen, timeout=5000)
    assert not window.seed.isVisible() and not window.theme_action.isVisible()  # desk controls leave the toolbar
    for opened in (None, scenario_names()[0]):
        if opened:
            window.open_scenario(opened)
        hint = window.minimumSizeHint()
        assert hint.width() <= 1280 and hint.height() <= 720, f"demo mode needs {hint.width()}x{hint.height()}"
    press(window, qtbot, Qt.Key_Escape)
    qtbot.waitUntil(lambda: not window.isFullScreen(), timeout=5000)
    qtbot.waitUntil(lambda: window.geometry() == before, timeout=5000)
    assert window.seed.isVisible() and window.theme_action.isVisible()


def test_plus_steps_the_speed_one_notch_at_a_time(window, qtbot):
    window.speed.setCurrentText("1x")
    seen = []
    for _ in range(5):
        press(window, qtbot, Qt.Key_Plus)
        seen.append(window.speed.currentText())
    assert seen == ["2x", "5x", "10x", "20x", "50x"]
