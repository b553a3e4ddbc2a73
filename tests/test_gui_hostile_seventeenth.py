"""The window against bad input, seventeenth round: an edit on the Model & hardware tab that leaves
no pool the engine builds -- a vocabulary of 9,999,999 (165 GiB of weights), a memory of 100,000 GiB
(46 million blocks), of 19 GiB (a pool short of one 8,192-token request) -- was refused on the Run
tab, at the memory share, the KV pool size or max_model_len left at default, with nothing said on the
tab being edited; other hardware picked on the Run tab threw away the model's edits (KV heads 1 back
to 8, without a word), another model the hardware's. "５０％" and "２０４８ＭｉＢ" (a CJK input method's
full-width forms) were refused as "in ％, not %", "in ＭｉＢ, not MiB", "٠٫٥" (the Arabic decimal
separator) as "in ٫5", a speed-up's "2×" as "in ×, not x", and a scenario guess of "５０％" as "not a
number". The event log's filter "request #12" (its placeholder's example) showed #120 to #129 too.
The Speed list took 0.1x or max where it paces nothing (the real backend, an attached server's page),
and the seed was taken on the Compare page, whose R restarts with the comparison's own seed.
"default" typed in a box whose notice offers it was dropped letter by letter as "not a number" (kept
without a word when pasted), and "-1" in the arrival rate became "preset's" where "-0.5" was refused.
Each is said where the user is, naming the cause, and a consistent neighbour is still taken."""

from __future__ import annotations

import pytest

from test_gui_hostile_fourteenth import choose, refused, taken
from test_gui_hostile_thirteenth import enter


def editor_says(window) -> str:
    label = window.editor.model_error
    return label.text() if not label.isHidden() else ""


def run_tab_says(window) -> dict:
    return {key: label.text() for key, label in window.settings.errors.items() if not label.isHidden() and label.text()}


# -- 1. an editor edit that leaves no pool is said at that edit -----------------------------------------

@pytest.mark.parametrize("box, typed, said", [
    ("vocab_size", "9999999", "the edited vocab_size 9,999,999: no room for a KV cache: llama-3-8b (edited) weights "
                              "take 165.59 GiB"),
    ("memory_gib", "100000", "memory_bytes 97.66 TiB (107,374.2 GB) per device: the KV pool would hold 47,0"),  # 46,0.. at 0.9
    ("memory_gib", "19", "memory_bytes 19.00 GiB (20.4 GB) per device: max_model_len 8,192 tokens needs 512 blocks but "
                         "the pool holds 446"),  # 252 at the 0.9 share
])
def test_an_editor_edit_that_leaves_no_pool_is_refused_at_the_edit(window, qtbot, box, typed, said):
    editor = window.editor
    field = editor.model_boxes.get(box) or getattr(editor, box)
    enter(qtbot, field, typed)  # said on the Run tab, under a field showing "default"
    assert editor_says(window).startswith(said), editor_says(window)
    assert run_tab_says(window) == {} and not taken(window)
    assert window.settings_form.reveal_refusal().startswith(said)
    assert window.settings_form.dock.widget().currentIndex() == 1  # the editor's tab, where the edit is


def test_a_model_edit_with_the_memory_edited_names_both(window, qtbot):
    editor = window.editor
    enter(qtbot, editor.memory_gib, "80")  # the preset's 79.19 GiB typed as 80: an edit, taken
    assert taken(window)
    enter(qtbot, editor.model_boxes["num_hidden_layers"], "170")  # 150 fits at vLLM 0.33's 0.92 share
    assert editor_says(window).startswith("the edited num_hidden_layers 170, with memory_bytes 80.00 GiB")


def test_a_pool_size_set_on_the_run_tab_is_still_refused_there(window, qtbot):
    enter(qtbot, window.editor.model_boxes["num_key_value_heads"], "4")  # an edit, not the cause
    enter(qtbot, window.settings.kv_budget, "256")  # half of one 8,192-token request
    assert "not one full-length request fits" in refused(window.settings, "max_model_len")
    assert editor_says(window) == ""


# -- 2. picking one half anew keeps the other half's edits ----------------------------------------------

def test_other_hardware_keeps_the_models_edits_and_takes_its_own_fields(window, qtbot):
    editor, settings = window.editor, window.settings
    enter(qtbot, editor.model_boxes["num_key_value_heads"], "1")
    enter(qtbot, editor.bandwidth, "1000")
    choose(settings, settings.hardware, "a100-80gb")  # KV heads went back to 8 without a word
    assert editor.model_fields()["num_key_value_heads"] == 1
    assert editor.hardware_fields()["memory_bandwidth_bytes_per_s"] == 2039e9  # a100's own: its edit is gone
    config = window.settings_form.current_config()
    assert config.model.num_key_value_heads == 1 and config.hardware.name == "a100-80gb"


def test_another_model_keeps_the_hardwares_edits_and_takes_its_own_shape(window, qtbot):
    editor, settings = window.editor, window.settings
    enter(qtbot, editor.model_boxes["num_key_value_heads"], "1")
    enter(qtbot, editor.memory_gib, "40")
    choose(settings, settings.model, "mistral-7b")
    assert editor.model_fields()["num_key_value_heads"] == 8  # mistral's own
    assert editor.memory_gib.value() == 40
    assert window.settings_form.current_config().hardware.memory_bytes == 40 * 1024**3


# -- 3. a number written in the full-width forms of a CJK input method, or with Arabic separators --------

@pytest.mark.parametrize("box, typed, value", [
    ("shared_prefix", "５０％", 0.5),  # "is in ％, not %"
    ("shared_prefix", "５０\u3000％", 0.5),
    ("kv_budget", "２０４８ＭｉＢ", 2048 * 1024**2),  # "is in ＭｉＢ, not MiB"
    ("gpu_memory_utilization", "٠٫٥", 0.5),  # "is in ٫5"
    ("arrival_rate", "٢٫٥", 2.5),
])
def test_full_width_and_arabic_forms_are_read_as_the_number_written(window, qtbot, box, typed, value):
    from test_gui_hostile_fifteenth import paste

    settings = window.settings
    assert paste(qtbot, getattr(settings, box), typed) == ""
    key = next(key for key, field in settings.fields.items() if field is getattr(settings, box))
    assert settings.values()[key] == pytest.approx(value)


def test_a_times_sign_is_the_speed_ups_x_and_another_unit_is_still_refused(window, qtbot):
    from test_gui_hostile_fifteenth import paste

    settings = window.settings
    choose(settings, settings.workload, "azure-conv")
    assert paste(qtbot, settings.trace_speedup, "2×") == ""  # "is in ×, not x"
    assert settings.values()["trace_speedup"] == 2
    said = paste(qtbot, settings.trace_speedup, "３ｍｓ")
    assert said.startswith("'３ｍｓ' is in ms, not x: type the number alone")


@pytest.mark.parametrize("typed, value", [("５０％", 50.0), ("50 ％", 50.0), ("2×", None)])
def test_a_scenario_guess_reads_full_width_forms_as_the_settings_do(qtbot, typed, value):
    from kvscope.widgets.scenario_panel import ScenarioPanel

    panel = ScenarioPanel()
    qtbot.addWidget(panel)
    panel.set_scenario("t", "", "how many?", "simulated", unit="%", minimum=0, maximum=100)
    got, why = panel.guess_number.read(typed)
    assert got == value and (why is None) == (value is not None), why  # "'５０％' is not a number"
    panel.set_scenario("t", "", "how much faster?", "simulated", unit="×", minimum=0, maximum=100)
    assert panel.guess_number.read("2×") == (2.0, None) and panel.guess_number.read("2 x") == (2.0, None)


# -- 4. the event log's filter: a number is the whole number --------------------------------------------

@pytest.mark.parametrize("typed, shown", [
    ("request #12", ["request #12 finished"]),  # #120 and #1200 too: the placeholder's own example
    ("#1", ["request #1 arrived"]),
    ("REQUEST #", ["request #1 arrived", "request #12 finished", "request #120 finished", "request #1200 arrived"]),
    ("12 fin", ["request #12 finished"]),
    ("2 fin", []),  # not request #12's "2"
])
def test_the_event_logs_filter_takes_a_number_as_the_whole_number(qtbot, typed, shown):
    from kvscope.widgets.event_log import EventLog

    log = EventLog(kinds=("arrived", "finished"))
    qtbot.addWidget(log)
    log.show()
    log.add_lines([("arrived", "request #1 arrived"), ("finished", "request #12 finished"),
                   ("finished", "request #120 finished"), ("arrived", "request #1200 arrived")])
    log.text_filter.setText(typed)
    assert log.shown_lines() == shown
    assert log.count.text().startswith(f"{len(shown) or 'none'} match the filter")


# -- 5. the Speed list where it paces nothing ---------------------------------------------------------

def test_the_speed_list_is_greyed_with_why_where_the_real_backend_runs(window, qtbot):
    from types import SimpleNamespace

    from PySide6.QtCore import Qt

    window.config = SimpleNamespace(backend="real")  # as an Apply on the real backend leaves it (no model loaded here)
    window._page_changed(0)
    before = window.speed.currentText()
    assert not window.speed.isEnabled()
    assert "not used now: the real backend runs at this machine's speed" in window.speed.toolTip()
    qtbot.keyClick(window, Qt.Key.Key_Plus)  # stepped the list to 2x, which paced nothing
    assert window.speed.currentText() == before
    assert window.statusBar().currentMessage().startswith("speed not changed: the real backend runs at")
    window.config = SimpleNamespace(backend="simulated")
    window._page_changed(0)
    qtbot.keyClick(window, Qt.Key.Key_Plus)
    assert window.speed.isEnabled() and window.speed.currentText() == "2x"


def test_the_speed_list_is_greyed_on_an_attached_servers_page(window, server):
    from kvscope.app.gui.attach_view import open_attached
    from kvscope.app.lab.vllm.attachment import AttachTarget

    url = server().url
    open_attached(window, AttachTarget(url=url))
    assert not window.speed.isEnabled() and "an attached server runs at its own pace" in window.speed.toolTip()
    window.pages.setCurrentWidget(window.panels.page)  # the live run, simulated: paced by it
    assert window.speed.isEnabled()


def test_the_seed_is_greyed_with_why_on_the_compare_page_and_back_on_the_live_run(window):
    window.compare_view()  # the page, no comparison run
    window.pages.setCurrentWidget(window.compare)  # a seed typed here, then R: the comparison's own seed ran
    assert not window.seed.isEnabled()
    assert "not used now: the comparison draws its workload with its own seed" in window.seed.toolTip()
    window.pages.setCurrentWidget(window.panels.page)
    assert window.seed.isEnabled() and "not used now" not in window.seed.toolTip()


# -- 6. a box's special value: typed as a word, and its number typed ------------------------------------

SPECIAL_WORDS = [
    ("kv_budget", "kv_cache_memory_bytes", "default"),  # pasted: the number kept without a word
    ("kv_budget", "kv_cache_memory_bytes", "Default MiB"),
    ("max_num_seqs", "max_num_seqs", "DEFAULT"),
    ("arrival_rate", "arrival_rate_per_s", "preset's"),
    ("shared_prefix", "shared_prefix_fraction", "presets"),
]


def test_a_boxs_special_value_typed_as_its_word_is_taken(window, qtbot):
    from test_gui_hostile_fifteenth import paste

    for box, key, typed in SPECIAL_WORDS:  # one window for all: each costs a second
        field = getattr(window.settings, box)
        field.setValue(5)
        assert paste(qtbot, field, typed) == "", typed
        assert field.text() == field.specialValueText() and window.settings.values()[key] is None, typed


def test_default_typed_letter_by_letter_is_taken_and_a_word_no_box_holds_is_still_refused(window, qtbot):
    settings = window.settings
    settings.kv_budget.setValue(5)
    enter(qtbot, settings.kv_budget, "default")  # each letter: "'t' is not a number; ..., or default"
    assert refused(settings, "kv_cache_memory_bytes") == "" and settings.values()["kv_cache_memory_bytes"] is None
    enter(qtbot, settings.num_requests, "default")  # a box with no special value
    assert refused(settings, "num_requests").startswith("'t' is not a number; this field takes 1 to 10,000,000")


NEGATIVE_UNDER_SPECIAL = [
    ("arrival_rate", "-1", "-1 is below the smallest value this field takes, 0.00 req/s: kept 5.00 req/s"),
    ("arrival_rate", "-0.5", "-0.5 is below the smallest value this field takes, 0.00 req/s: kept 5.00 req/s"),
    ("shared_prefix", "-1", "-1 is below the smallest value this field takes, 0 %: kept 5 %"),
]


def test_the_number_under_a_special_value_typed_is_refused_not_taken_as_it(window, qtbot):
    from test_gui_hostile_fifteenth import paste

    for box, typed, said in NEGATIVE_UNDER_SPECIAL:
        field = getattr(window.settings, box)
        field.setValue(5)
        assert paste(qtbot, field, typed) == said  # "-1" became "preset's" without a word
        assert field.value() == 5
        assert paste(qtbot, field, "0") == "" and field.value() == 0  # 0 is a rate, and a share
