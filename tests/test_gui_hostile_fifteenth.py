"""The window against bad input, fifteenth round: numbers pasted or typed as people write them, and
the keys of a focused field. "1.0" or "2." in a box of whole numbers was refused as "not a value this
field takes (1 to 1,024 tokens)", a range 1 is in (the whole-MiB KV pool took "2." and refused
"1.0"); a full-width "１２" (a CJK input method) or an Arabic-Indic "٣" likewise, and the minus sign
"−5" of a web page as no number; "50%", "2048MiB", "5 token" (the unit written as the user writes
it) as "not a number", and "2 GiB" in the MiB box too, not as a unit the box does not count in;
"1e400" as "not a value this field takes" with its range; the arrival rate's range said as "-0.99
to ... req/s", a negative rate it refuses; "1 requests". The editor's bandwidth box (whole GB/s,
its least 0.1 rounded to 0) took 0 GB/s, refused on the Run tab in bytes/s, out of sight. And Space
on a focused check box started the engine (the box left unticked), a letter typed in a choice list
stepped it. Each is taken as meant or refused where the user is, with the right reason, and a
consistent neighbour is still taken or still refused."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication

from test_gui_hostile_thirteenth import enter

MiB = 1024**2


def paste(qtbot, box, text: str) -> str:
    """text put in the box as a paste puts it (through the box's validator), then Enter; returns the
    line under the field (the run form's or the editor's) just after Enter."""
    box.setFocus()
    box.lineEdit().selectAll()
    box.lineEdit().insert(text)
    qtbot.keyClick(box.lineEdit(), Qt.Key.Key_Return)
    window = box.window()
    label = window.editor.model_error if window.editor.isAncestorOf(box) else next(
        window.settings.errors[key] for key, field in window.settings.fields.items() if field is box)
    return label.text() if label.isVisible() else ""


# -- 1. a whole number written with a point --------------------------------------------------------------

@pytest.mark.parametrize("typed, value", [("1.0", 1), ("2.", 2), ("3.00", 3)])
def test_a_whole_number_with_a_point_is_taken_in_a_box_of_whole_numbers(window, qtbot, typed, value):
    settings = window.settings
    said = paste(qtbot, settings.num_requests, typed)  # "not a value this field takes (1 to 10,000,000 requests)"
    assert said == "" and settings.num_requests.value() == value
    assert window.settings_form.current_config().workload.num_requests == value


def test_a_number_with_a_fraction_is_still_refused_in_a_box_of_whole_numbers(window, qtbot):
    settings = window.settings
    said = paste(qtbot, settings.num_requests, "1.5")
    assert said == "1.5 is not a whole number (1 to 10,000,000 requests): kept 2,000 requests"
    assert settings.num_requests.value() == 2000


def test_the_kv_pool_takes_1_0_as_it_takes_2_point(window, qtbot):
    box = window.settings.kv_budget
    paste(qtbot, box, "2048.0")  # refused as "not a value this field takes", where "2048." was taken
    assert window.settings.values()["kv_cache_memory_bytes"] == 2048 * MiB
    said = paste(qtbot, box, "2048.5")
    assert said == "2048.5 has more decimals than this field keeps (it goes in steps of 1 MiB): kept 2048 MiB"


def test_a_whole_number_with_a_point_is_taken_in_the_editor_and_the_seed(window, qtbot):
    heads = window.editor.model_boxes["num_key_value_heads"]
    window.settings_form.dock.widget().setCurrentIndex(1)
    assert paste(qtbot, heads, "4.0") == "" and heads.value() == 4
    window.seed.setFocus()
    window.seed.lineEdit().selectAll()
    window.seed.lineEdit().insert("7.0")
    qtbot.keyClick(window.seed.lineEdit(), Qt.Key.Key_Return)
    assert window.seed.value() == 7 and not window.statusBar().currentMessage().startswith("seed: ")


# -- 2. digits of other scripts, and the minus sign --------------------------------------------------------

@pytest.mark.parametrize("typed, value", [("１２", 12), ("٣", 3), ("１,０２４", 1024)])
def test_digits_of_other_scripts_are_read_as_the_command_line_reads_them(window, qtbot, typed, value):
    settings = window.settings
    said = paste(qtbot, settings.num_requests, typed)  # "'１２' is not a value this field takes (1 to ...)"
    assert said == "" and settings.num_requests.value() == value


def test_a_full_width_decimal_is_judged_by_its_value(window, qtbot):
    box = window.settings.gpu_memory_utilization
    assert paste(qtbot, box, "０.５") == "" and box.value() == 0.5  # "not a value this field takes (0.05 to 1.00)"
    assert paste(qtbot, box, "１.５") == "1.5 is above the largest value this field takes, 1.00: kept 0.50"


def test_the_minus_sign_of_a_web_page_is_a_minus(window, qtbot):
    settings = window.settings
    said = paste(qtbot, settings.num_requests, "\u22125")  # "'−5' is not a number"
    assert said == "-5 is below the smallest value this field takes, 1 request: kept 2,000 requests"
    assert settings.num_requests.value() == 2000


# -- 3. the unit written as the user writes it, or another unit ---------------------------------------------

@pytest.mark.parametrize("box, typed, value", [
    ("shared_prefix", "50%", 50), ("kv_budget", "2048MiB", 2048), ("max_model_len", "4096 token", 4096),
    ("max_model_len", "4096TOKENS", 4096), ("trace_speedup", "1X", 1)])
def test_the_boxes_own_unit_typed_without_its_space_is_taken(window, qtbot, box, typed, value):
    field = getattr(window.settings, box)
    assert paste(qtbot, field, typed) == "" and field.value() == value  # "'50%' is not a number"


def test_a_count_written_in_the_singular_is_taken(window, qtbot):
    settings = window.settings
    settings.num_requests.setValue(1)  # the box now says "1 request"
    assert paste(qtbot, settings.num_requests, "5 requests") == "" and settings.num_requests.value() == 5
    assert paste(qtbot, settings.num_requests, "1 request") == "" and settings.num_requests.value() == 1


@pytest.mark.parametrize("box, typed, said", [
    ("kv_budget", "2 GiB", "'2 GiB' is in GiB, not MiB: type the number alone; this field takes 1 to "),
    ("num_requests", "50%", "'50%' is in %, not requests: type the number alone; this field takes 1 to 10,000,000"),
    # "90%" is the share 0.90 since the eighteenth pass (test_gui_hostile_eighteenth.py); another unit is refused
    ("gpu_memory_utilization", "90 GiB", "'90 GiB' is in GiB: type the number alone; this field takes 0.05 to 1.00"),
])
def test_another_unit_is_refused_as_that_unit_not_as_no_number(window, qtbot, box, typed, said):
    field = getattr(window.settings, box)
    before = field.value()
    assert paste(qtbot, field, typed).startswith(said)  # "'2 GiB' is not a number"
    assert field.value() == before


def test_a_letter_after_a_number_is_still_no_number(window, qtbot):
    said = paste(qtbot, window.settings.num_requests, "5k")
    assert said.startswith("'5k' is not a number; this field takes 1 to 10,000,000 requests")


# -- 4. what the refusals say -------------------------------------------------------------------------------

def test_a_number_past_a_float_is_above_the_largest_value(window, qtbot):
    settings = window.settings
    enter(qtbot, settings.num_requests, "1e400")  # "'1e400' is not a value this field takes (1 to 10,000,000 ...)"
    assert settings.errors["num_requests"].text() == (
        "1e400 is above the largest value this field takes, 10,000,000 requests: kept 2,000 requests")
    enter(qtbot, settings.num_requests, "1e3")
    assert settings.num_requests.value() == 1000


def test_the_arrival_rates_range_starts_at_0_and_a_negative_rate_is_still_refused(window, qtbot):
    settings = window.settings
    said = paste(qtbot, settings.arrival_rate, "1e-5")
    assert "-0.99" not in said  # "-0.99 to 1000000000.00 req/s, or preset's": a negative rate is refused
    assert said == "1e-5 has more decimals than this field keeps (it goes in steps of 0.01 req/s): kept preset's"
    paste(qtbot, settings.arrival_rate, "1e400")
    said = settings.errors["arrival_rate_per_s"].text()
    dropped = paste(qtbot, settings.arrival_rate, "fast")
    assert "this field takes 0.00 to " in dropped and dropped.endswith("req/s, or preset's: kept preset's")
    settings.arrival_rate.setValue(-0.5)
    assert "must be 0 (all at once) or more, got -0.5" in settings.errors["arrival_rate_per_s"].text()


def test_the_least_count_is_said_in_the_singular(window, qtbot):
    said = paste(qtbot, window.settings.num_requests, "0")
    assert said == "0 is below the smallest value this field takes, 1 request: kept 2,000 requests"  # "1 requests"


# -- 5. the editor's bandwidth --------------------------------------------------------------------------------

def test_a_bandwidth_of_0_is_refused_in_the_editor_and_1_gb_s_taken(window, qtbot):
    editor, settings = window.editor, window.settings
    window.settings_form.dock.widget().setCurrentIndex(1)
    said = paste(qtbot, editor.bandwidth, "0")  # taken; refused on the Run tab: "must be at least 1,000,000"
    assert said == "0 is below the smallest value this field takes, 1 GB/s: kept 3350 GB/s"
    assert editor.bandwidth.value() == 3350 and window.settings_form.current_config() is not None
    assert not settings.errors["hardware"].text()
    assert paste(qtbot, editor.bandwidth, "1") == ""
    assert window.settings_form.current_config().hardware.memory_bandwidth_bytes_per_s == 1e9


# -- 6. the keys of a focused field ---------------------------------------------------------------------------

def focus(qtbot, widget) -> None:
    widget.setFocus()
    qtbot.waitUntil(lambda: QApplication.focusWidget() is widget)


def test_space_on_a_focused_check_box_ticks_it_and_plays_nothing(window, qtbot):
    box = window.settings.enable_chunked_prefill
    before = box.isChecked()
    focus(qtbot, box)
    qtbot.keyClick(box, Qt.Key.Key_Space)  # started the engine; the box stayed as it was
    assert box.isChecked() != before and window.play_action.text() == "Play" and window.engine_info is None


def test_a_letter_in_a_focused_choice_list_chooses_and_steps_nothing(window, qtbot):
    workload = window.settings.workload
    focus(qtbot, workload)
    qtbot.keyClick(workload, Qt.Key.Key_S)  # stepped the engine; the list stayed at chat
    assert workload.currentText().startswith("s") and window.engine_info is None


def test_the_run_keys_still_work_outside_the_form_and_ctrl_return_inside_it(window, qtbot):
    focus(qtbot, window.settings.workload)
    qtbot.keyClick(window.settings.workload, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(lambda: window.engine_info is not None, timeout=30000)  # Apply, as before
    before = window.play_action.text()
    window.settings.workload.clearFocus()
    qtbot.keyClick(window, Qt.Key.Key_Space)  # Play or Pause, away from the form's fields
    assert window.play_action.text() != before


def test_a_digit_in_the_focused_speed_list_chooses_a_speed_and_opens_no_scenario(window, qtbot):
    focus(qtbot, window.speed)
    qtbot.keyClick(window.speed, Qt.Key.Key_2)  # opened scenario 2 (the comparison page)
    assert window.speed.currentText() == "2x" and window.compare is None and window.current_scenario is None


# -- 7. the arrows of a box whose special value sits below 0 -----------------------------------------------

def test_the_up_arrow_from_the_presets_arrival_rate_goes_to_0_not_to_a_refused_negative_rate(window, qtbot):
    settings = window.settings
    box = settings.arrival_rate
    focus(qtbot, box)
    qtbot.keyClick(box, Qt.Key.Key_Up)  # -0.5 req/s, refused: "must be 0 (all at once) or more"
    assert box.value() == 0 and window.settings_form.current_config().workload.arrival_rate_per_s == 0
    qtbot.keyClick(box, Qt.Key.Key_Up)
    assert box.value() == 0.5 and window.settings_form.current_config() is not None
    qtbot.keyClick(box, Qt.Key.Key_Down)
    qtbot.keyClick(box, Qt.Key.Key_Down)  # from 0 down: back to the preset's rate
    assert box.text() == "preset's" and settings.values()["arrival_rate_per_s"] is None


def test_the_up_arrow_from_the_presets_shared_prefix_goes_to_0_then_in_its_steps(window, qtbot):
    box = window.settings.shared_prefix
    focus(qtbot, box)
    qtbot.keyClick(box, Qt.Key.Key_Up)  # 4 %: the special -1 plus the step of 5
    assert box.value() == 0
    qtbot.keyClick(box, Qt.Key.Key_Up)
    assert box.value() == 5 and window.settings.values()["shared_prefix_fraction"] == 0.05


# -- 8. Apply where the live run is not shown -------------------------------------------------------------

def test_ctrl_return_on_the_comparison_page_builds_no_live_engine_out_of_sight(window, qtbot):
    window.open_scenario(window.scenario_names[0])
    qtbot.waitUntil(window.compare_showing)
    assert not window.settings_dock.isVisible()
    applied = window.config
    window.apply_action.trigger()  # built and played the live engine behind the comparison
    assert window.config is applied and not window.live_worker._commanded_playing
    assert window.statusBar().currentMessage().startswith("nothing applied: Apply (Ctrl+Return) rebuilds the live run")
    window.pages.setCurrentIndex(0)  # on the live page it applies, as before
    window.apply_action.trigger()
    assert window.config is not applied and window.live_worker._commanded_playing


# -- 9. a device count far past the heads -----------------------------------------------------------------

def test_65536_devices_are_refused_without_trying_every_count_below(window, qtbot, monkeypatch):
    from kvscope.app.gui import run_settings

    calls = []
    resolve = run_settings.resolve_engine_args
    monkeypatch.setattr(run_settings, "resolve_engine_args", lambda *a: calls.append(1) or resolve(*a))
    window.settings_form.dock.widget().setCurrentIndex(1)
    said = paste(qtbot, window.editor.gpu_count, "65536")  # 65,535 counts tried: ~3 s frozen at each check
    assert said.startswith("gpu_count 65536 (Devices): the run splits llama-3-8b over every device")
    assert said.endswith("give 32 (the most that splits them), or other hardware")
    assert len(calls) < 100
    assert paste(qtbot, window.editor.gpu_count, "32") == "" and window.settings_form.current_config() is not None


def test_plus_on_the_focused_speed_list_still_runs_faster(window, qtbot):
    focus(qtbot, window.speed)
    qtbot.keyClick(window.speed, Qt.Key.Key_Plus)  # Faster: no item begins with "+"
    assert window.speed.currentText() == "2x"


def test_record_on_the_comparison_page_is_refused_not_the_hidden_live_run_recorded(window, qtbot, monkeypatch):
    from PySide6.QtWidgets import QFileDialog, QMessageBox

    said, asked = [], []
    monkeypatch.setattr(QMessageBox, "warning", lambda parent, title, text, *a, **k: said.append((title, text)))
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: asked.append(a) or ("", ""))
    qtbot.waitUntil(lambda: window.engine_info is not None, timeout=30000)
    window.open_scenario(window.scenario_names[0])
    qtbot.waitUntil(window.compare_showing)
    window.record_action.trigger()  # asked for a file and recorded the paused live run behind the comparison
    assert said == [("Recording did not start", "a comparison is not recorded: File > Record records the engine "
                     "of the Live run page, or an attached server's page; go to that page to record it")]
    assert not asked and not window.record_action.isChecked()
    window.pages.setCurrentIndex(0)
    window.record_action.trigger()  # on the live page the file is asked for, as before
    assert len(asked) == 1 and not window.record_action.isChecked()


def test_an_export_of_a_live_view_off_screen_is_refused_and_saved_on_screen(window, qtbot, tmp_path, monkeypatch):
    from PySide6.QtWidgets import QMessageBox

    said = []
    monkeypatch.setattr(QMessageBox, "warning", lambda parent, title, text, *a, **k: said.append((title, text)))
    target = tmp_path / "map.png"
    window._ask_save_path = lambda *a: str(target)
    qtbot.waitUntil(lambda: window.engine_info is not None, timeout=30000)
    window.open_scenario(window.scenario_names[0])
    qtbot.waitUntil(window.compare_showing)
    # saved the live block map and KV plot, hidden behind the comparison, "as it is on screen"
    assert not window.exports.ask_view("block_map") and not window.exports.ask_plot("kv")
    assert said[0] == ("Not saved", "the block map is not on screen: it is the Live run page's and shows there "
                       "(View opens its dock if it is closed); the comparison's plots are under Export > "
                       "Comparison plot")
    assert said[1][1].startswith("the KV cache vs compute plot is not on screen") and not target.exists()
    window.pages.setCurrentIndex(0)
    qtbot.waitUntil(window.block_map.isVisible)
    assert window.exports.ask_view("block_map") and target.exists()
