"""The settings dock against bad input, fourth round: preset names that could be saved but never
loaded, "Save model as..." after opening a config.json, deleting the preset the form is on, a KV
budget below one block, a bad trace CSV picked, and a config.json with a bad field. Each is refused
where the user chose it, with the reason, and what the form held before stays."""

import json
import os
import threading
import time

import pytest
from PySide6.QtWidgets import QFileDialog, QInputDialog, QMessageBox

from kvscope.app.cli.gui import initial_values
from kvscope.app.gui.main_window import MainWindow
from kvscope.app.lab.presets import user_preset_names, user_presets_root

TINY_LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 64, "intermediate_size": 128,
              "vocab_size": 512, "max_position_embeddings": 512, "sliding_window": 128,
              "layer_types": ["sliding_attention", "full_attention"]}
TRACE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
ROW = "2023-11-16 18:15:00.0,10,10\n"


@pytest.fixture
def window(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("KVSCOPE_CONFIG_DIR", str(tmp_path / "config"))

    class Args:
        backend, model, hardware, workload, model_path = "simulated", "llama-3-8b", "h100-80gb", "chat", None

    win = MainWindow({**initial_values(Args()), "num_requests": 50}, autoplay=False)
    qtbot.addWidget(win)
    win.resize(1280, 720)
    win.show()
    qtbot.waitExposed(win)
    yield win
    win.close()


@pytest.fixture
def warnings(monkeypatch):
    said = []
    monkeypatch.setattr(QMessageBox, "warning", lambda parent, title, text, *a, **k: said.append(text))
    return said


def save_as(window, monkeypatch, kind: str, name: str) -> None:
    """Save model as... / Save hardware as..., the name typed into the dialog."""
    monkeypatch.setattr(QInputDialog, "getText", lambda *a, **k: (name, True))
    (window.editor.save_model if kind == "models" else window.editor.save_hardware).click()


def pick(monkeypatch, button, path) -> None:
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(path), ""))
    button.click()


# 1. a name loading refuses is not saved ---------------------------------------------------------------


@pytest.mark.parametrize("kind", ["models", "hardware"])
@pytest.mark.parametrize("name", [".", "..", "...", ".hidden"])
def test_a_preset_name_that_could_never_be_loaded_is_refused_when_saving(window, monkeypatch, warnings, kind, name):
    save_as(window, monkeypatch, kind, name)
    assert len(warnings) == 1 and "does not start with '.'" in warnings[0] and repr(name) in warnings[0]
    assert user_preset_names(kind) == []
    assert not (user_presets_root() / kind).exists() or os.listdir(user_presets_root() / kind) == []
    assert window.settings.model.findText(name) < 0 and window.editor.user_presets.count() == 0


def test_a_name_of_characters_qt_cannot_hold_is_refused_with_what_was_typed(window, monkeypatch, warnings):
    save_as(window, monkeypatch, "models", "\ud800")  # a lone surrogate: a Qt string drops it
    assert len(warnings) == 1 and "got ''" not in warnings[0] and "'\\ud800'" in warnings[0]
    # what a real dialog hands back once Qt has dropped it: nothing, said as such, not ignored
    save_as(window, monkeypatch, "models", "")
    assert len(warnings) == 2 and "empty once the characters a file name cannot hold are removed" in warnings[1]
    assert user_preset_names("models") == []


def test_a_name_too_long_for_a_file_is_refused_before_the_file_system_does(window, monkeypatch, warnings):
    save_as(window, monkeypatch, "models", "x" * 240)
    assert len(warnings) == 1 and "at most 200 bytes" in warnings[0]
    save_as(window, monkeypatch, "models", "a" * 10_000)
    assert len(warnings[1]) < 200  # the name is not quoted in full
    assert user_preset_names("models") == []


# 2. "Save model as..." after opening a config.json saves that model ------------------------------------


def test_save_model_as_after_opening_a_config_json_saves_its_own_fields_and_names_the_file(
        window, monkeypatch, warnings, tmp_path):
    from kvscope.app.lab.presets import load_model

    config = tmp_path / "tiny" / "config.json"
    config.parent.mkdir()
    config.write_text(json.dumps(TINY_LLAMA))
    pick(monkeypatch, window.settings.open_config, config)
    assert window.editor.model_boxes["hidden_size"].value() == 64
    window.editor.model_boxes["num_key_value_heads"].setValue(4)  # an edit rides along
    save_as(window, monkeypatch, "models", "mine")
    assert warnings == []
    saved = load_model("mine")
    assert saved.num_key_value_heads == 4 and saved.hidden_size == 64
    assert saved.max_position_embeddings == 512 and saved.sliding_window == 128
    assert saved.layer_types == ("sliding_attention", "full_attention")
    assert str(config) in saved.source and "llama-3-8b" not in saved.source


# 3. deleting the preset the form is on ------------------------------------------------------------------


def test_deleting_the_selected_preset_refills_the_form_and_says_so(window, monkeypatch, warnings, qtbot):
    settings, editor = window.settings, window.editor
    settings.set_values({"model": "llama-2-7b"})
    editor.model_boxes["num_key_value_heads"].setValue(8)
    save_as(window, monkeypatch, "models", "mine")
    settings.model.setCurrentIndex(settings.model.findText("mine"))
    assert window.settings_form.current_config().model.name == "mine"
    editor.user_presets.setCurrentIndex(editor.user_presets.findText("mine (model)"))
    editor.delete_button.click()
    assert settings.model.currentText() == "llama-3-8b"  # the default, not the list's first
    assert editor.model_name.text() == "llama-3-8b"
    assert editor.model_fields()["num_key_value_heads"] == 8 and editor.model_fields()["num_hidden_layers"] == 32
    assert "your preset mine was deleted: now llama-3-8b" in settings.errors["model"].text()
    assert "the form's model is now llama-3-8b" in window.statusBar().currentMessage()
    assert "llama-3-8b" in settings.preview.text()
    config = window.settings_form.current_config()
    assert config.model.name == "llama-3-8b" and config.model.num_hidden_layers == 32  # not a mix of two


def test_deleting_a_preset_the_form_is_not_on_changes_nothing_in_it(window, monkeypatch, warnings):
    settings, editor = window.settings, window.editor
    save_as(window, monkeypatch, "models", "other")
    before = settings.values()
    editor.user_presets.setCurrentIndex(editor.user_presets.findText("other (model)"))
    editor.delete_button.click()
    assert settings.values() == before and settings.errors["model"].isHidden()


# 4. a KV budget below one block -----------------------------------------------------------------------


def test_a_kv_budget_below_one_block_is_refused_at_the_kv_pool_size_with_the_engines_reason(window):
    settings = window.settings
    settings.kv_budget.setValue(1)  # MiB; one llama-3-8b block of 16 tokens is 2 MiB
    label = settings.errors["kv_cache_memory_bytes"]
    assert "smaller than one block" in label.text() and "give at least 2,097,152 bytes" in label.text()
    assert settings.errors["gpu_memory_utilization"].isHidden()
    assert "the weights" not in label.text() and not settings.apply_button.isEnabled()
    settings.kv_budget.setValue(2048)  # 1,024 blocks: a full-length request's 512 fit
    assert label.isHidden() and settings.apply_button.isEnabled()


# 5. a trace CSV is read when it is picked ----------------------------------------------------------------


def _traces(folder):
    folder.mkdir()
    files = {
        "empty.csv": b"",
        "binary.csv": bytes(range(256)) * 8,
        "utf16.csv": (TRACE_HEADER + ROW).encode("utf-16"),
        "negative.csv": (TRACE_HEADER + "2023-11-16 18:15:00.0,-5,10\n").encode(),
        "nan.csv": (TRACE_HEADER + "2023-11-16 18:15:00.0,nan,10\n").encode(),
        "backwards.csv": (TRACE_HEADER + "2023-11-16 18:15:05.0,10,10\n" + ROW).encode(),
    }
    for name, data in files.items():
        (folder / name).write_bytes(data)
    (folder / "folder.csv").mkdir()
    return [folder / name for name in [*files, "folder.csv", "missing.csv"]]


@pytest.mark.parametrize("index", range(8))
def test_a_bad_trace_is_refused_when_picked_and_the_workload_before_stays(window, monkeypatch, tmp_path, index):
    path = _traces(tmp_path / "traces")[index]
    settings = window.settings
    pick(monkeypatch, settings.open_trace, path)
    label = settings.errors["workload"]
    assert label.isVisible() and f"trace {path}" in label.text() and "kept workload chat" in label.text()
    assert settings.trace_path is None and settings.trace_label.text() == ""
    config = window.settings_form.current_config()
    assert config is not None and config.workload.trace_path is None  # Apply runs what was chosen before


def test_a_bad_trace_keeps_the_good_trace_picked_before(window, monkeypatch, tmp_path):
    good, bad = tmp_path / "good.csv", tmp_path / "bad.csv"
    good.write_text(TRACE_HEADER + ROW * 3)
    bad.write_text(TRACE_HEADER + "2023-11-16 18:15:00.0,0,10\n")
    window.settings.num_requests.setValue(3)  # more than its rows is refused at Requests (fourteenth pass)
    pick(monkeypatch, window.settings.open_trace, good)
    assert window.settings.trace_path == str(good) and window.settings_form.current_config() is not None
    pick(monkeypatch, window.settings.open_trace, bad)
    assert window.settings.trace_path == str(good)
    assert f"kept trace {good}" in window.settings.errors["workload"].text()


def test_a_fifo_picked_as_a_trace_is_refused_without_waiting_for_a_writer(window, monkeypatch, tmp_path):
    fifo = tmp_path / "trace.csv"
    os.mkfifo(fifo)

    def unblock():  # were the pick to open the FIFO and wait, this lets it end (and the test fail, not hang)
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass

    timer = threading.Timer(5.0, unblock)
    timer.start()
    try:
        started = time.monotonic()
        pick(monkeypatch, window.settings.open_trace, fifo)
        assert time.monotonic() - started < 4.0
    finally:
        timer.cancel()
    assert "not a regular file" in window.settings.errors["workload"].text()
    assert window.settings.trace_path is None


def test_asking_for_more_rows_than_a_picked_trace_has_good_is_refused_under_workload(window, monkeypatch, tmp_path):
    trace = tmp_path / "trace.csv"
    trace.write_text(TRACE_HEADER + ROW * 5 + "2023-11-16 18:15:00.0,0,10\n")
    settings = window.settings
    settings.num_requests.setValue(5)
    pick(monkeypatch, settings.open_trace, trace)  # its first 5 rows replay
    assert settings.trace_path == str(trace) and settings.apply_button.isEnabled()
    settings.num_requests.setValue(6)  # the 6th row has 0 prompt tokens: the engine build would fail
    assert "line 7: token counts must be at least 1" in settings.errors["workload"].text()
    assert not settings.apply_button.isEnabled()


# 6. a config.json with a bad field is refused where it was picked ----------------------------------------


@pytest.mark.parametrize("field, value, said", [
    ("hidden_size", float("nan"), "hidden_size must be a whole number"),
    ("num_hidden_layers", True, "num_hidden_layers must be a whole number"),
    ("num_attention_heads", -4, "num_attention_heads must be 0 or more"),
])
def test_a_config_json_with_a_bad_field_is_refused_at_the_model_naming_the_file(
        window, monkeypatch, tmp_path, field, value, said):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**TINY_LLAMA, field: value}))
    editor, settings = window.editor, window.settings
    settings.kv_budget.setValue(64)  # MiB: the tiny model's pool on an H100 would be too many blocks
    pick(monkeypatch, settings.open_config, config)
    label = settings.errors["model"]
    assert label.isVisible() and str(config) in label.text() and said in label.text()
    # not beside an editor box that still shows llama-3-8b's value, which is not the cause
    assert editor.model_error.isHidden() and all(not box.styleSheet() for box in editor.model_boxes.values())
    assert not settings.apply_button.isEnabled()
    assert window.settings_form.reveal_refusal() == label.text()
    assert window.settings_form.dock.widget().currentIndex() == 0  # the Run tab, where config.json was picked
    # mended on disk and picked again, it is read again: its own fields, not llama-3-8b's beside it
    config.write_text(json.dumps(TINY_LLAMA))
    pick(monkeypatch, settings.open_config, config)
    assert label.isHidden() and editor.model_boxes["hidden_size"].value() == 64
    assert window.settings_form.current_config().model.num_hidden_layers == 2


# 6. a preset the real backend would build at random, too large for this machine --------------------------


def test_a_real_backend_preset_whose_random_weights_pass_this_machines_memory_is_refused_at_the_model(window):
    """Before: the form took llama-3-70b on the real backend and said only that its KV pool was small; the
    263 GiB of fp32 weights failed once Play built it."""
    settings, form = window.settings, window.settings_form
    settings.set_values({**settings.values(), "backend": "real", "hardware": "this-machine", "model": "llama-3-70b",
                         "kv_cache_memory_bytes": 64 * 2**20, "max_model_len": 256})
    assert form.current_config() is None
    said = settings.errors["model"].text()
    assert "llama-3-70b needs about 262.8 GiB for its weights as fp32, but this machine has" in said
    assert "pick a smaller model" in said
    settings.set_values({**settings.values(), "model": "tiny-llama"})
    assert form.current_config() is not None and settings.errors["model"].isHidden()
