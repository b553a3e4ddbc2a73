"""The window against bad input, fifth round: Enter or Tab on a box left at "default"; Apply
(Ctrl+Return, the button) with a number typed and not entered; numbers past a box's range typed or
pasted; a preset chosen after a config.json was opened; a recording opened after a failed build;
an export over the recording being written; an Apply while recording whose file cannot be
finished; a prompt of megabytes; a guess of -0 or 1e-400. Each is said where the user is, and
nothing the user had, typed or recorded is lost or replaced by another value without a word."""

from __future__ import annotations

import json
import math

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QFileDialog, QMessageBox

from kvscope.app.gui.prompt_box import PromptBox
from kvscope.app.gui.scenario_verdict import guess_verdict
from kvscope.app.gui.window_state import WindowState
from kvscope.app.host.protocol import FrameDelta
from kvscope.app.lab.chat_workload import MAX_TEXT_CHARS
from kvscope.app.lab.recording import Recording, RecordingError
from kvscope.app.lab.scenarios import load_scenario
from kvscope.widgets.kept_value_notice import KeptValueNotice

from small_recording import record_small_run
from test_engine_session import session_with_engine
from test_gui_hostile_fourth import TIMEOUT_MS, close_boxes, fail_a_build, guess_panel, running, type_guess

TINY_LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 64, "intermediate_size": 128,
              "vocab_size": 512, "max_position_embeddings": 512}


@pytest.fixture
def warned(monkeypatch):
    said = []
    monkeypatch.setattr(QMessageBox, "warning", lambda parent, title, text, *a, **k: said.append((title, text)))
    return said


def select_typed(qtbot, box, text: str, paste: bool = False) -> None:
    """Focus the box, select what it shows and type (or paste) text over it; no Enter."""
    box.setFocus()
    box.lineEdit().selectAll()
    if paste:
        QGuiApplication.clipboard().setText(text)
        qtbot.keyClick(box.lineEdit(), Qt.Key_V, Qt.ControlModifier)
    else:
        qtbot.keyClicks(box.lineEdit(), text)


# -- 1. Enter or Tab on a box at its special value ---------------------------------------------------

def test_enter_or_leaving_a_box_that_shows_default_says_nothing_is_refused(window, qtbot):
    settings = window.settings
    for key in ("max_model_len", "kv_cache_memory_bytes", "max_num_seqs", "arrival_rate_per_s", "prompt_median",
                "shared_prefix_fraction"):
        box = settings.fields[key]
        assert box.text() == box.specialValueText()  # "default" / "preset's"
        box.setFocus()
        qtbot.keyClick(box.lineEdit(), Qt.Key_Return)
        box.clearFocus()  # Tab away
        assert settings.errors[key].isHidden(), (key, settings.errors[key].text())


# -- 2. Apply with a number typed and not entered ----------------------------------------------------

def test_ctrl_return_or_apply_takes_the_number_typed_in_the_box(window, qtbot):
    settings = window.settings
    select_typed(qtbot, settings.max_model_len, "2048")  # no Enter, no Tab
    qtbot.keyClick(settings.max_model_len.lineEdit(), Qt.Key_Return, Qt.ControlModifier)
    assert window.config.engine_args.max_model_len == 2048  # not the default the box showed before
    select_typed(qtbot, settings.num_requests, "7")
    settings.apply_button.click()
    assert window.config.workload.num_requests == 7
    select_typed(qtbot, window.seed, "42")
    qtbot.keyClick(window.seed.lineEdit(), Qt.Key_Return, Qt.ControlModifier)
    assert window.config.seed == 42
    window.settings_form.dock.widget().setCurrentIndex(1)
    heads = window.editor.model_boxes["num_key_value_heads"]
    select_typed(qtbot, heads, "2")
    qtbot.keyClick(heads.lineEdit(), Qt.Key_Return, Qt.ControlModifier)
    assert window.config.model.num_key_value_heads == 2


def test_apply_with_a_typed_number_the_box_cannot_take_is_refused_with_why_and_keeps_the_text(window, qtbot):
    settings = window.settings
    before = window.config
    box = settings.gpu_memory_utilization
    select_typed(qtbot, box, "0")  # below 0.05: Enter would put 0.92 back
    qtbot.keyClick(box.lineEdit(), Qt.Key_Return, Qt.ControlModifier)
    assert window.config is before  # nothing applied: not the 0.92 the user did not ask for
    said = "0 is below the smallest value this field takes, 0.05: kept 0.92"
    assert said in settings.errors["gpu_memory_utilization"].text()
    assert said in window.statusBar().currentMessage() and window.statusBar().currentMessage().startswith("not applied")
    assert box.lineEdit().text() == "0"  # still there, to be mended
    select_typed(qtbot, window.seed, "99999999999")
    qtbot.keyClick(window.seed.lineEdit(), Qt.Key_Return, Qt.ControlModifier)
    assert window.config is before and "above the largest value" in window.statusBar().currentMessage()


# -- 3. numbers past a box's range, typed or pasted ---------------------------------------------------

@pytest.mark.parametrize("key, text, says", [
    ("num_requests", "99999999999", "99999999999 is above the largest value this field takes, 10,000,000 requests"),
    ("num_requests", "-5", "-5 is below the smallest value this field takes, 1 request"),
    ("trace_speedup", "-2", "-2 is below the smallest value this field takes, 0.01x"),
    ("gpu_memory_utilization", "5", "5 is above the largest value this field takes, 1.00"),
])
@pytest.mark.parametrize("paste", [False, True])
def test_a_number_past_the_range_stays_as_typed_and_enter_says_why(window, qtbot, key, text, says, paste):
    settings = window.settings
    box = settings.fields[key]
    before = box.value()
    select_typed(qtbot, box, text, paste)
    assert box.cleanText() == text  # not 9,999,999 (digits dropped) nor 5 (the sign dropped), nor nothing
    qtbot.keyClick(box.lineEdit(), Qt.Key_Return)
    assert box.value() == before and says in settings.errors[key].text()


def test_a_pasted_number_of_400_digits_is_named_short_and_the_form_keeps_its_width(window, qtbot):
    settings = window.settings
    select_typed(qtbot, settings.max_model_len, "9" * 400, paste=True)
    qtbot.keyClick(settings.max_model_len.lineEdit(), Qt.Key_Return)
    label = settings.errors["max_model_len"]
    assert "(400 characters) is above the largest value" in label.text() and len(label.text()) < 150
    qtbot.wait(50)
    assert not settings.horizontalScrollBar().isVisible()


def test_the_editor_notices_a_kept_value_once_however_many_presets_were_shown(window):
    for model in ("llama-2-7b", "mistral-7b", "llama-3-8b"):
        for hardware in ("a100-80gb", "h100-80gb"):
            window.settings.set_values({"model": model, "hardware": hardware})
    box = window.editor.memory_gib
    assert len([child for child in box.children() if isinstance(child, KeptValueNotice)]) == 1


# -- 4. a preset chosen after a config.json ------------------------------------------------------------

def choose(qtbot, combo, text: str) -> None:
    """As a user chooses: the list opened, the item clicked."""
    combo.showPopup()
    view = combo.view()
    index = view.model().index(combo.findText(text), 0)
    view.scrollTo(index)
    qtbot.mouseClick(view.viewport(), Qt.LeftButton, pos=view.visualRect(index).center())


def test_a_preset_chosen_after_opening_a_config_json_is_the_model_shown_and_applied(window, qtbot, tmp_path,
                                                                                  monkeypatch):
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY_LLAMA))
    settings, editor = window.settings, window.editor
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(config), ""))
    settings.open_config.click()
    assert editor.model_boxes["hidden_size"].value() == 64
    choose(qtbot, settings.model, "mistral-7b")
    qtbot.waitUntil(lambda: settings.config_path is None)
    assert editor.model_name.text() == "mistral-7b" and editor.model_boxes["hidden_size"].value() == 4096
    assert window.apply_settings(play=False)
    assert window.config.model.name == "mistral-7b" and window.config.model.num_hidden_layers == 32  # not edited


def test_the_same_preset_chosen_again_after_a_bad_model_folder_clears_the_folders_refusal(window, qtbot, tmp_path,
                                                                                       monkeypatch):
    settings = window.settings
    (tmp_path / "empty").mkdir()
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *a, **k: str(tmp_path / "empty"))
    assert settings.backend.currentData() == "simulated"
    settings.open_dir.click()
    assert "config.json: cannot read" in settings.errors["model"].text()
    assert settings.backend.currentData() == "real"  # a model folder runs on the real backend
    choose(qtbot, settings.model, settings.model.currentText())  # the name the list still shows
    qtbot.waitUntil(lambda: settings.errors["model"].isHidden())
    assert settings.model_path is None and settings.apply_button.isEnabled()
    # the folder's backend went with it: the preset runs where the run did (it stayed on real, with random weights)
    assert settings.backend.currentData() == "simulated"


# -- 5. a recording opened after a failed build ----------------------------------------------------------

def test_a_recording_opened_after_a_failed_build_is_not_called_the_previous_run_and_steps(window, qtbot, tmp_path,
                                                                                        monkeypatch):
    running(window, qtbot)
    good = fail_a_build(window, qtbot, tmp_path, monkeypatch)
    close_boxes(window)
    monkeypatch.setattr(window.settings_form, "current_config", lambda: good)
    assert window.open_recording(str(record_small_run(tmp_path / "run.kvrec")))
    qtbot.waitUntil(lambda: window.worker.position is not None, timeout=TIMEOUT_MS)
    assert not window.builds.banner.isVisible()
    assert not window.status.text().startswith("no engine")
    position = window.worker.position
    window.statusBar().clearMessage()
    window.step_pressed()  # Right: one step of the recording
    assert "cannot step" not in window.statusBar().currentMessage()
    qtbot.waitUntil(lambda: window.worker.position == position + 1, timeout=TIMEOUT_MS)
    window.close_recording()  # the live engine again: built from the form
    qtbot.waitUntil(lambda: window.builds.failed is None and window.latest_snapshot is not None, timeout=TIMEOUT_MS)


# -- 6. an export over the recording being written --------------------------------------------------------

def test_an_export_over_the_recording_in_progress_is_refused_and_the_recording_lives(window, qtbot, tmp_path,
                                                                                   monkeypatch, warned):
    running(window, qtbot)
    target = tmp_path / "run.png"  # any name: Record takes it
    assert window.start_recording(str(target))
    qtbot.waitUntil(lambda: (window.recording_steps or 0) > 3, timeout=TIMEOUT_MS)
    monkeypatch.setattr(window, "_ask_save_path", lambda *a: str(target))
    window.export_actions["block_map"].trigger()
    assert warned and warned[-1][0] == "Not saved" and "recording in progress" in warned[-1][1]
    assert "saved" not in window.statusBar().currentMessage()
    window.record_action.trigger()  # unchecked: the recording is finished
    qtbot.waitUntil(lambda: window.recording_steps is None, timeout=TIMEOUT_MS)
    qtbot.waitUntil(lambda: Recording.open(target, allow_truncated=True).warning is None, timeout=TIMEOUT_MS)
    with Recording.open(target) as recording:
        assert recording.num_steps > 3


# -- 7. an Apply while recording --------------------------------------------------------------------------

def test_an_apply_while_recording_says_the_recording_was_written_or_why_it_was_not(tmp_path):
    session = session_with_engine()
    config = session._config
    session.handle("record", str(tmp_path / "a.kvrec"))
    session.handle("step", None)
    session.take_frame()
    session.handle("apply", (config, False))
    frame = session.take_frame()
    assert frame.engine_info is not None and frame.recording_stopped
    assert "recording written to" in frame.status and "a.kvrec" in frame.status and not frame.error

    session.handle("record", str(tmp_path / "b.kvrec"))
    session.handle("step", None)
    session.take_frame()

    def disk_full(*args, **kwargs):
        raise RecordingError("b.kvrec: cannot write: No space left on device")

    session._recorder.close = disk_full
    session.handle("apply", (config, False))
    frame = session.take_frame()
    assert frame.engine_info is not None and frame.recording_stopped  # the window says it as the recording's
    assert "could not be finished" in frame.error and "No space left" in frame.error


# -- 8. a prompt of megabytes -----------------------------------------------------------------------------

class _TextEngine:
    no_text_reason = None


def test_a_prompt_past_the_cap_is_refused_in_the_box_before_it_is_sent(qtbot):
    box = PromptBox()
    qtbot.addWidget(box)
    box.show()
    sent = []
    box.prompt_submitted.connect(sent.append)
    state = WindowState()
    box.take(state.take(FrameDelta(engine_info=_TextEngine())))
    text = "word " * (1 << 18)  # 1.3 MB
    box.input.setPlainText(text)
    qtbot.keyClick(box.input, Qt.Key_Return)
    assert sent == [] and box.awaiting is None and box.send_button.isEnabled()
    assert f"at most {MAX_TEXT_CHARS:,}" in box.status_text() and f"{len(text):,} characters" in box.status_text()
    assert box.input.toPlainText() == text  # kept
    box.input.setPlainText("hello")
    qtbot.keyClick(box.input, Qt.Key_Return)
    assert sent == ["hello"]


def test_a_prompt_sent_while_an_apply_builds_is_taken_as_sent_when_the_new_engine_answers(qtbot):
    box = PromptBox()
    qtbot.addWidget(box)
    state = WindowState()
    box.take(state.take(FrameDelta(engine_info=_TextEngine())))
    box.input.setPlainText("What is the capital of France?")
    box.send()  # the engine's process is building the next Apply's engine: the prompt waits for it
    box.take(state.take(FrameDelta(engine_info=_TextEngine(), submitted_request_id=5)))  # its first frame
    assert box.typed[5] == "What is the capital of France?" and box.shown_request == 5
    assert box.input.toPlainText() == "" and box.awaiting is None  # sent: not left in the box to send twice


def test_the_engine_refuses_a_prompt_past_the_cap_before_tokenizing_it():
    session = session_with_engine()

    class Untouchable:
        def chat_prompt(self, messages):
            raise AssertionError("tokenized")

    session._chat = Untouchable()
    session.handle("submit_prompt", "x" * (MAX_TEXT_CHARS + 1))
    assert "at most 100,000" in session.take_frame().prompt_refused


# -- 9. a guess of -0 or of a number a float cannot hold ----------------------------------------------------

def test_a_guess_of_minus_zero_is_zero_and_1e_minus_400_is_refused(qtbot):
    panel, committed = guess_panel(qtbot, "benchmark-trap")
    type_guess(qtbot, panel, "-0")
    assert committed == [0.0] and math.copysign(1.0, committed[0]) == 1.0
    assert "-0" not in guess_verdict(load_scenario("benchmark-trap"), committed[0], 50.0)
    panel, committed = guess_panel(qtbot, "benchmark-trap")
    type_guess(qtbot, panel, "1e-400")  # not a guess of 0 locked in
    assert committed == [] and "more decimals" in panel.guess_notice.text()
