"""The window against bad input, thirteenth round: a number typed with an exponent in a box that keeps
fewer decimals ("5e-1" in the KV pool's whole MiB was taken as 0.5 MiB and shown as "1 MiB"; "1e-9"
showed "0 MiB" and ran the default pool; "2.5e0" in the two-decimal memory box was refused as "not a
value this field takes (0.10 to ...)", "1e3" in the Requests box as not in 1 to 10,000,000); "2.555"
in a two-decimal box, or "0.5" in the seed, said to be out of a range it is in; a replayed recording
of a model, hardware or workload this window has no preset of (a config.json's model, another
machine's preset) or of block size 24: the (disabled) form that says what the recording ran with
showed the live run's, or called them presets "deleted outside this window" and replaced them. Each
is said where the user is, and nothing the user had is lost."""

from __future__ import annotations

import dataclasses
import json

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFileDialog, QMessageBox

from kvscope.app.lab.presets import load_hardware, load_model
from kvscope.app.lab.workload import generate_requests
from kvscope.engine.config import EngineArgs
from kvscope.engine.engine import Engine

from test_recording import record_run, small_workload

MiB = 1024**2


@pytest.fixture
def said(monkeypatch):
    out = []
    for kind in ("warning", "information", "critical"):
        monkeypatch.setattr(QMessageBox, kind, lambda parent, title, text, *a, **k: out.append((title, text)))
    return out


def enter(qtbot, box, text: str) -> None:
    """text typed over the box's own, then Enter."""
    box.setFocus()
    box.lineEdit().selectAll()
    qtbot.keyClicks(box.lineEdit(), text)
    qtbot.keyClick(box.lineEdit(), Qt.Key.Key_Return)


# -- 1. a number with an exponent, and one with more decimals than its box keeps -----------------------

@pytest.mark.parametrize("typed", ["5e-1", "1e-9", "2.5e0"])
def test_an_exponent_below_the_kv_pools_mib_is_refused_not_rounded_in_the_display_only(window, qtbot, typed):
    settings = window.settings
    box = settings.kv_budget
    enter(qtbot, box, "2048")
    assert settings.values()["kv_cache_memory_bytes"] == 2048 * MiB
    enter(qtbot, box, typed)
    # it ran 0.5 MiB shown as "1 MiB", or 1e-9 MiB shown as "0 MiB": int() of its bytes, 0, the default pool
    assert box.value() == 2048 and settings.values()["kv_cache_memory_bytes"] == 2048 * MiB
    notice = settings.errors["kv_cache_memory_bytes"]
    assert notice.isVisible()
    assert notice.text() == f"{typed} has more decimals than this field keeps (it goes in steps of 1 MiB): kept 2048 MiB"


def test_an_exponent_of_a_whole_number_of_mib_is_taken(window, qtbot):
    enter(qtbot, window.settings.kv_budget, "3e3")
    assert window.settings.values()["kv_cache_memory_bytes"] == 3000 * MiB
    assert window.settings.kv_budget.text() == "3000 MiB"


def test_an_exponent_the_memory_box_can_hold_is_taken_and_too_many_decimals_is_said_as_such(window, qtbot):
    editor = window.editor
    enter(qtbot, editor.memory_gib, "2.5e0")  # refused before: "not a value this field takes (0.10 to ...)"
    assert editor.memory_gib.value() == 2.5 and editor.hardware_fields()["memory_bytes"] == int(2.5 * 1024**3)
    enter(qtbot, editor.memory_gib, "2.555")
    assert editor.memory_gib.value() == 2.5
    # it said "'2.555' is not a value this field takes (0.10 to 1073741824.00 GiB)": 2.555 is in that range
    assert editor.model_error.text() == ("2.555 has more decimals than this field keeps (it goes in steps of "
                                         "0.01 GiB): kept 2.50 GiB")
    enter(qtbot, editor.memory_gib, "2.55")
    assert editor.memory_gib.value() == 2.55


def test_an_exponent_in_the_arrival_rate_is_judged_by_its_value(window, qtbot):
    settings = window.settings
    enter(qtbot, settings.arrival_rate, "4")
    enter(qtbot, settings.arrival_rate, "1e-9")  # taken as 1e-9 req/s shown as "0.00 req/s": a request a lifetime
    assert settings.values()["arrival_rate_per_s"] == 4
    assert "1e-9 has more decimals than this field keeps (it goes in steps of 0.01 req/s)" in \
        settings.errors["arrival_rate_per_s"].text()
    enter(qtbot, settings.arrival_rate, "2.5e1")
    assert settings.values()["arrival_rate_per_s"] == 25


def test_out_of_range_with_an_exponent_is_still_said_as_out_of_range(window, qtbot):
    settings = window.settings
    enter(qtbot, settings.gpu_memory_utilization, "1.5e0")
    assert settings.gpu_memory_utilization.value() == 0.92  # kept: vLLM 0.33's default
    assert settings.errors["gpu_memory_utilization"].text().startswith(
        "1.5e0 is above the largest value this field takes, 1.00")
    enter(qtbot, settings.gpu_memory_utilization, "8.5e-1")
    assert settings.values()["gpu_memory_utilization"] == 0.85


def test_an_exponent_of_a_whole_number_is_taken_in_a_box_of_whole_numbers(window, qtbot):
    enter(qtbot, window.settings.num_requests, "1e3")  # "'1e3' is not a value this field takes (1 to 10,000,000 ...)"
    assert window.settings.values()["num_requests"] == 1000
    enter(qtbot, window.settings.max_model_len, "4.096e3")
    assert window.settings.values()["max_model_len"] == 4096
    window.seed.lineEdit().selectAll()
    window.seed.lineEdit().insert("1.5e1")
    qtbot.keyClick(window.seed.lineEdit(), Qt.Key.Key_Return)
    assert window.seed.value() == 15


@pytest.mark.parametrize("typed", ["5e-1", "0.5", "2.5e0"])
def test_a_fraction_in_a_box_of_whole_numbers_is_said_to_be_one(window, qtbot, typed):
    enter(qtbot, window.seed, "7")
    window.seed.lineEdit().selectAll()
    window.seed.lineEdit().insert(typed)  # pasted: the seed takes each keystroke as it comes
    qtbot.keyClick(window.seed.lineEdit(), Qt.Key.Key_Return)  # "'0.5' is not a value this field takes (0 to 2147483647)": it is in that range
    assert window.seed.value() == 7
    assert window.statusBar().currentMessage() == f"seed: {typed} is not a whole number (0 to 2147483647): kept 7"


# -- 2. a recording of a model, hardware, workload or block size not offered here -----------------------

def record(path, model, hardware, block_size: int = 16) -> None:
    engine = Engine(model, hardware, EngineArgs(num_gpu_blocks_override=40, max_model_len=600, block_size=block_size,
                                                max_num_seqs=3))
    workload = small_workload()
    engine.add_workload(generate_requests(workload, model.vocab_size, seed=3))
    record_run(path, engine, run_info={"label": "elsewhere", "workload": workload, "seed": 3})


def test_a_recording_of_models_this_window_has_no_preset_of_is_shown_as_recorded_and_nothing_is_lost(
        window, qtbot, tmp_path, said):
    model = dataclasses.replace(load_model("llama-3-8b"), name="their-model", num_hidden_layers=7)
    hardware = dataclasses.replace(load_hardware("h100-80gb"), name="their-gpu")
    record(tmp_path / "theirs.kvrec", model, hardware, block_size=24)
    settings, editor = window.settings, window.editor
    enter(qtbot, editor.model_boxes["num_hidden_layers"], "40")  # an edit of the user's, to be kept
    before, counts = settings.values(), [settings.model.count(), settings.block_size.count()]
    assert window.open_recording(str(tmp_path / "theirs.kvrec"))
    shown = settings.values()
    # it showed llama-3-8b, h100-80gb, chat and 16 tokens; with a config dir of presets it said
    # "your preset their-model ... deleted outside this window" and put others in their place
    assert (shown["model"], shown["hardware"], shown["workload"], shown["block_size"]) == (
        "their-model", "their-gpu", "small", 24)
    assert settings.block_size.currentText() == "24 tokens" and shown["num_requests"] == 30
    assert editor.model_name.text() == "their-model" and editor.model_fields()["num_hidden_layers"] == 7
    assert not any(label.isVisible() for label in settings.errors.values()) and not editor.model_error.isVisible()
    assert "deleted" not in window.statusBar().currentMessage() and said == []
    window.close_recording()
    assert settings.values() == before and [settings.model.count(), settings.block_size.count()] == counts
    assert editor.model_fields()["num_hidden_layers"] == 40 and editor.model_name.text() == "llama-3-8b"


def test_a_recording_of_this_windows_presets_shows_them_from_the_lists(window, tmp_path):
    record(tmp_path / "ours.kvrec", load_model("llama-3-8b"), load_hardware("l4-24gb"))
    settings = window.settings
    counts = [settings.model.count(), settings.hardware.count(), settings.block_size.count()]
    assert window.open_recording(str(tmp_path / "ours.kvrec"))
    assert (settings.values()["hardware"], settings.values()["block_size"]) == ("l4-24gb", 16)
    assert [settings.model.count(), settings.hardware.count(), settings.block_size.count()] == counts
    assert window.editor.hardware_name.text() == "l4-24gb"
    window.close_recording()
    assert settings.values()["hardware"] == "h100-80gb"


def test_a_recording_opened_over_a_chosen_config_json_shows_the_recordings_model_not_the_file(
        window, tmp_path, monkeypatch):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048,
                                  "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32,
                                  "num_key_value_heads": 8, "vocab_size": 32000, "max_position_embeddings": 4096}))
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(config), ""))
    settings = window.settings
    settings.open_config.click()
    assert window.editor.model_fields()["num_hidden_layers"] == 16
    record(tmp_path / "run.kvrec", load_model("llama-3-8b"), load_hardware("h100-80gb"))
    assert window.open_recording(str(tmp_path / "run.kvrec"))
    # the label went on saying "config.json: ..." beside the recording's llama-3-8b
    assert settings.values()["config_path"] is None and settings.source_label.text() == ""
    assert window.editor.model_fields()["num_hidden_layers"] == 32
    window.close_recording()
    assert settings.values()["config_path"] == str(config) and str(config) in settings.source_label.text()
    assert window.editor.model_fields()["num_hidden_layers"] == 16
