"""The prompt box: a typed prompt goes to the engine, its answer streams in below it, a refused
prompt stays in the box with the reason, and the box is off (saying why) where no text can be sent.
The last tests run the real window on the trained model."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from kvscope.app.gui.prompt_box import PromptBox
from kvscope.app.gui.window_state import WindowState
from kvscope.app.host.protocol import FrameDelta, RequestText
from kvscope.engine.config import ConfigError

PROMPT = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"


class Info:
    def __init__(self, no_text_reason=None):
        self.no_text_reason = no_text_reason


@pytest.fixture
def box(qtbot):
    view = PromptBox()
    qtbot.addWidget(view)
    view.show()
    state = WindowState()
    sent = []
    view.prompt_submitted.connect(sent.append)
    return view, state, sent


def feed(view, state, frame):
    view.take(state.take(frame))


def test_enter_sends_the_prompt_and_its_answer_streams_below(box, qtbot):
    view, state, sent = box
    feed(view, state, FrameDelta(engine_info=Info()))
    assert view.input.isEnabled() and view.send_button.isEnabled()
    qtbot.keyClicks(view.input, "What is the capital of France?")
    qtbot.keyClick(view.input, Qt.Key_Return, Qt.ShiftModifier)  # a new line, not a send
    assert sent == [] and view.input.toPlainText().endswith("\n")
    qtbot.keyClick(view.input, Qt.Key_Return)
    assert sent == ["What is the capital of France?\n"] and not view.send_button.isEnabled()
    selected = []
    view.request_selected.connect(selected.append)
    feed(view, state, FrameDelta(submitted_request_id=7, texts={7: RequestText(PROMPT, "", None, typed=True)}))
    assert selected == [7] and view.input.toPlainText() == "" and view.send_button.isEnabled()
    for output in ("The capital", "The capital of France is Paris."):
        feed(view, state, FrameDelta(texts={7: RequestText(None, output, None)}))
        assert view.answer.answer == output
    feed(view, state, FrameDelta(texts={7: RequestText(None, "The capital of France is Paris.", "stop")}))
    assert view.answer.toPlainText() == "You: What is the capital of France?\n\nThe capital of France is Paris."
    assert "request #7: the model ended its answer" in view.status_text()


def test_a_refused_prompt_stays_in_the_box_with_the_reason(box, qtbot):
    view, state, sent = box
    feed(view, state, FrameDelta(engine_info=Info()))
    qtbot.keyClicks(view.input, "A very long prompt")
    view.send_button.click()
    reason = "the prompt is 3,000 tokens with the chat template, and the context (max_model_len) holds 2,048"
    feed(view, state, FrameDelta(prompt_refused=reason))
    assert view.input.toPlainText() == "A very long prompt"  # nothing lost
    assert reason in view.status_text() and view.status_text().startswith("Not sent")
    assert view.send_button.isEnabled()


def test_ctrl_return_in_the_box_sends_the_prompt_instead_of_applying_the_settings(box, qtbot):
    from PySide6.QtGui import QAction, QKeySequence

    view, state, sent = box
    applied = []
    apply_action = QAction(view)  # as the window's Apply (Ctrl+Return) is
    apply_action.setShortcut(QKeySequence("Ctrl+Return"))
    apply_action.triggered.connect(lambda: applied.append(True))
    view.addAction(apply_action)
    feed(view, state, FrameDelta(engine_info=Info()))
    view.input.setFocus()
    qtbot.keyClicks(view.input, "Hello")
    qtbot.keyClick(view.input, Qt.Key_Return, Qt.ControlModifier)
    assert sent == ["Hello"] and applied == []


def test_the_run_keys_typed_in_the_box_are_text(box, qtbot):
    from PySide6.QtGui import QAction, QKeySequence

    view, state, sent = box
    fired = []
    for key in ("Space", "R", "1", "Right", "+", "S"):  # the window's run keys (menus.py)
        action = QAction(view)
        action.setShortcut(QKeySequence(key))
        action.triggered.connect(lambda _=False, k=key: fired.append(k))
        view.addAction(action)
    feed(view, state, FrameDelta(engine_info=Info()))
    view.input.setFocus()
    qtbot.keyClicks(view.input, "R1 +S")
    qtbot.keyClick(view.input, Qt.Key_Left)
    qtbot.keyClick(view.input, Qt.Key_Right)
    assert view.input.toPlainText() == "R1 +S" and fired == []


def test_the_box_is_off_with_the_reason_where_no_text_can_be_sent(box, qtbot):
    view, state, sent = box
    assert not view.input.isEnabled() and "no engine is running yet" in view.toolTip()
    reason = "the simulated backend has no model to answer with"
    feed(view, state, FrameDelta(engine_info=Info(reason)))
    assert not view.input.isEnabled() and not view.send_button.isEnabled()
    assert view.toolTip() == f"Typed prompts are off: {reason}" and reason in view.status_text()
    view.send()
    assert sent == []


# -- the real window, the trained model ------------------------------------------------------------
@pytest.fixture(scope="module")
def trained_model():
    from kvscope.app.lab.trained_model import ensure_trained_model, find_gguf

    try:
        find_gguf()
    except ConfigError as exc:
        pytest.skip(f"the trained model's package is not installed (`make test` installs it): {exc}")
    return ensure_trained_model()  # converted once per test run, before the engine process looks for it


@pytest.fixture
def window(qtbot, tmp_path, monkeypatch, trained_model):
    from kvscope.app.cli.gui import initial_values
    from kvscope.app.gui.main_window import MainWindow

    class Args:
        backend, model, hardware, workload, model_path = "real", "smollm2-135m-instruct", None, "chat-text", None

    monkeypatch.setenv("KVSCOPE_CONFIG_DIR", str(tmp_path / "config"))
    values = initial_values(Args())
    values.update(num_requests=1, max_model_len=512)  # one workload request: the typed one is not queued
    win = MainWindow(values, autoplay=False)
    qtbot.addWidget(win)
    win.resize(1280, 720)
    win.show()
    win.arrange_docks()
    qtbot.waitUntil(lambda: win.engine_info is not None, timeout=120000)
    assert win.engine_info.no_text_reason is None and win.prompt.input.isEnabled()
    yield win
    win.close()


def test_a_typed_prompt_reaches_the_engine_and_its_answer_streams_in(window, qtbot):
    box = window.prompt
    window.prompt_action.trigger()  # Ctrl+K
    assert box.input.hasFocus()
    qtbot.keyClicks(box.input, "What is the capital of France?")
    qtbot.keyClick(box.input, Qt.Key_Return)
    qtbot.waitUntil(lambda: box.shown_request >= 0, timeout=10000)
    request_id = box.shown_request
    assert window.selected_request == request_id and window.inspector.selected == request_id
    lengths = set()

    def answered():
        record = window.state.texts.get(request_id)
        lengths.add(len(box.answer.answer))
        return record is not None and record.finished

    qtbot.waitUntil(answered, timeout=60000)
    assert "Paris" in box.answer.answer and "the model ended its answer" in box.status_text()
    assert len(lengths - {0}) > 1  # it arrived in pieces, as it was written
    assert window.inspector.text.answer == box.answer.answer  # the inspector shows the same request
    assert "What is the capital of France?" in window.inspector.text.prompt


def test_a_prompt_longer_than_the_context_is_refused_in_the_box_with_the_reason(window, qtbot):
    box = window.prompt
    long_prompt = "Please read this sentence. " * 200
    box.input.setPlainText(long_prompt)
    box.send_button.click()
    qtbot.waitUntil(lambda: box.refusal is not None, timeout=10000)
    assert "max_model_len" in box.status_text() and "512" in box.status_text()
    assert box.input.toPlainText() == long_prompt
