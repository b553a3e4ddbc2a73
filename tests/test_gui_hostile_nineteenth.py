"""The window against bad input, nineteenth round: the first key of a number, and numbers grouped by
points. A point or a comma typed first was dropped (no digit yet: no number to keep) and the digits
after it taken, the line that said so gone with the Enter: ".5" typed for half a request ran 5
requests, ",5" (0.5 as much of Europe writes it) an arrival rate of 5 req/s, ".5" in the seed 5 (and
the seed took each key as typed: "4k2" over 7 left it 4, its refusal saying "kept 4"). The unit typed
key by key, as the box shows it, was refused: "7 requests" as "'7s' is not a number", "4 devices" too.
"2.000" typed for 2,000 requests (thousands grouped by points, as German, Italian or Spanish write
them) ran 2, "8.000" a max_model_len of 8 tokens; "1.024" was "not a whole number", "1.000.000" "not
a number". A refused "8x" in the Model & hardware editor, mended to the 8 it kept, left its refusal
standing under a box showing 8 (no value changed, so the form was not checked again). The event log's
filter "1.5 s" found none of the "1.500 s" lines the log writes (every line starts with its time),
"12 ms" none of "12.0 ms in the queue", and "request #１２" (a CJK input method's full-width digits)
none. File > Export offered "Comparison plot:  (PNG or SVG)..." (a blank name) for every comparison, asked
for a path ("comparison .png") and only then said the plot was not shown; the output tokens' plot
likewise where a scenario's question takes its place. A scenario's guess of "1 000" or "1'000" sequences
was "not a number" (1,000 in every box of the Settings), "1 sequence" too where "2 sequences" was
taken. Each is said where the user is, and a
consistent neighbour is still taken."""

from __future__ import annotations

import pytest
from PySide6.QtWidgets import QMessageBox

from test_gui_hostile_eighteenth import key_of, typed
from test_gui_hostile_fifteenth import paste
from test_gui_hostile_fourteenth import refused, taken
from test_gui_hostile_thirteenth import enter


def test_a_point_or_a_comma_first_and_thousands_grouped_by_points_are_refused_not_read_as_another_number(window, qtbot):
    """(One window for both: the window is most of a test's time.)"""
    settings = window.settings
    rate = key_of(settings, settings.arrival_rate)
    for box, text, said in [
        ("num_requests", ".5", ".5 is below the smallest value this field takes, 1 request: kept 2,000 requests"),
        ("num_requests", "-.5", "-.5 is below the smallest value this field takes, 1 request: kept 2,000 requests"),
        ("num_requests", ".", "'.' is not a value this field takes (1 to 10,000,000 requests): kept 2,000 requests"),
        ("arrival_rate", ",5", ",5: ',' only separates thousands here (1,024); a decimal is written with '.': "
                               "kept preset's"),
    ]:
        field = getattr(settings, box)
        key = key_of(settings, field)
        before = settings.values()[key]
        held = typed(qtbot, field, text)  # was 5 requests, 5 req/s: the first key dropped
        assert held.startswith(text) and settings.values()[key] == before, (text, held)
        assert refused(settings, key) == said, refused(settings, key)
    window.seed.setValue(7)
    typed(qtbot, window.seed, ".5")  # was 5
    assert window.seed.value() == 7
    assert window.statusBar().currentMessage().startswith("seed: .5 is not a whole number (0 to 2147483647): kept 7")
    # a rate written with its point first is still a rate; a sign first is still kept as before
    assert typed(qtbot, settings.arrival_rate, ".5").startswith(".5") and settings.values()[rate] == 0.5
    assert refused(settings, rate) == "" and taken(window)
    typed(qtbot, settings.num_requests, "-5")
    assert refused(settings, "num_requests").startswith("-5 is below the smallest value this field takes, 1 request")
    # a word typed in a box without a special value is still dropped letter by letter (17th round)
    enter(qtbot, settings.num_requests, "default")
    assert refused(settings, "num_requests").startswith("'t' is not a number")
    enter(qtbot, settings.num_requests, "2000")
    thousands_grouped_by_points_in_a_box_of_whole_numbers_are_refused_with_why(window, qtbot)
    the_unit_typed_key_by_key_is_the_unit(window, qtbot)


def the_unit_typed_key_by_key_is_the_unit(window, qtbot) -> None:
    """"7 requests" typed (the box showing "5 requests") was "'7s' is not a number": at "7 request" the
    box wrote "7 requests" with the cursor after the 7, where the "s" went."""
    settings, editor = window.settings, window.editor
    for box, text, key, value in [(settings.num_requests, "7 requests", "num_requests", 7),
                                  (settings.num_requests, "1 request", "num_requests", 1),
                                  (settings.num_requests, "3requests", "num_requests", 3),
                                  (settings.max_model_len, "4096 tokens", "max_model_len", 4096),
                                  (settings.kv_budget, "2048 MiB", "kv_cache_memory_bytes", 2048 * 2**20)]:
        typed(qtbot, box, text)
        assert settings.values()[key] == value and refused(settings, key) == "", (text, refused(settings, key))
    typed(qtbot, settings.num_requests, "7 req")  # stopped short of the unit: refused, said as a unit
    assert refused(settings, "num_requests").startswith("'7 req' is in req, not requests: type the number alone")
    assert settings.values()["num_requests"] == 3
    typed(qtbot, editor.gpu_count, "4 devices")  # the box showing "1 device"
    assert editor.gpu_count.value() == 4 and editor.model_error.isHidden()


GROUPED_BY_POINTS = [("num_requests", "2.000", "2,000 requests"),  # ran 2 requests
                     ("max_model_len", "8.000", "default"),  # 8 tokens
                     ("max_model_len", "1.024", "default"),  # "not a whole number"
                     ("num_requests", "1.000.000", "2,000 requests")]  # "not a number"


def thousands_grouped_by_points_in_a_box_of_whole_numbers_are_refused_with_why(window, qtbot) -> None:
    settings = window.settings
    for box, text, kept in GROUPED_BY_POINTS:
        field = getattr(settings, box)
        key = key_of(settings, field)
        before = settings.values()[key]
        assert typed(qtbot, field, text).startswith(text)
        assert settings.values()[key] == before, text
        assert refused(settings, key) == (f"{text}: '.' is a decimal point here, not a thousands separator (1,000 or "
                                          f"1000), and this field takes whole numbers: kept {kept}"), refused(settings, key)
    said = paste(qtbot, settings.num_requests, "２.０００")  # full-width, pasted
    assert said.startswith("2.000: '.' is a decimal point here") and settings.values()["num_requests"] == 2000
    typed(qtbot, window.seed, "1.000")
    assert window.statusBar().currentMessage() == ("seed: 1.000: '.' is a decimal point here, not a thousands "
                                                   "separator (1,000 or 1000), and this field takes whole numbers: kept 7")
    assert window.seed.value() == 7  # took each key as it came: 1, and "kept 1"
    typed(qtbot, window.seed, "4k2")
    assert window.seed.value() == 7 and window.statusBar().currentMessage().endswith(": kept 7")  # "kept 4"
    typed(qtbot, window.seed, "42")
    assert window.seed.value() == 42
    # neighbours: "1.0" is still 1 (15th round), a point in a box of decimals is a decimal point
    assert paste(qtbot, settings.num_requests, "1.0") == "" and settings.values()["num_requests"] == 1
    rate = key_of(settings, settings.arrival_rate)
    assert paste(qtbot, settings.arrival_rate, "1.000") == "" and settings.values()[rate] == 1.0
    assert paste(qtbot, settings.num_requests, "2,000") == "" and settings.values()["num_requests"] == 2000


def test_a_refusal_mended_to_the_value_it_kept_goes_and_export_offers_the_plots_a_comparison_shows(window, qtbot,
                                                                                                   monkeypatch):
    """(One window for both: the window is most of a test's time.)"""
    editor = window.editor
    box = editor.model_boxes["num_key_value_heads"]
    enter(qtbot, box, "8x")
    assert not editor.model_error.isHidden() and editor.model_error.text().startswith("'8x' is not a number")
    enter(qtbot, box, "8")  # the 8 it kept: the refusal stood under a box showing 8
    assert editor.model_error.isHidden() and box.value() == 8 and taken(window)
    enter(qtbot, box, "0")  # a refusal the form makes is said again, not cleared
    assert editor.model_error.text() != "" and not editor.model_error.isHidden()
    enter(qtbot, box, "8")
    settings = window.settings
    enter(qtbot, settings.num_requests, "5;")
    assert refused(settings, "num_requests").startswith("'5;' is in ;")
    enter(qtbot, settings.num_requests, "2000")
    assert refused(settings, "num_requests") == "" and taken(window)
    # a dropped key's line is not cleared by the Enter after it (the text in the box is the old one)
    paste(qtbot, settings.num_requests, "-nan")
    assert refused(settings, "num_requests").startswith("'-nan' is not a number")
    the_comparisons_export_entries_name_the_plots_it_shows(window, monkeypatch)


def the_comparisons_export_entries_name_the_plots_it_shows(window, monkeypatch) -> None:
    said, asked = [], []
    monkeypatch.setattr(QMessageBox, "warning", lambda parent, title, text, *a, **k: said.append(text))
    monkeypatch.setattr(window, "_ask_save_path", lambda *a: asked.append(a))
    plots = window.compare_view().plots
    exports, actions = window.exports, window.export_actions
    exports._show_compare_entries()  # as the menu opens
    entry = actions["compare:asked"]  # "Comparison plot:  (PNG or SVG)...", enabled
    assert entry.text() == "Comparison plot: Scenario's question (PNG or SVG)..." and not entry.isEnabled()
    assert not exports.ask_compare_plot("asked") and asked == []  # a path "comparison .png" was asked first
    assert said == ["this comparison has no 'Scenario's question' plot on screen; it shows: KV cache usage; "
                    "Running requests (batch size); Output tokens generated"]
    plots.set_asked_plot("longest pause between tokens", "ms")
    exports._show_compare_entries()
    assert entry.text() == "Comparison plot: longest pause between tokens (PNG or SVG)..." and entry.isEnabled()
    assert not actions["compare:output_tokens"].isEnabled()  # its place taken by the asked plot
    assert not exports.ask_compare_plot("output_tokens") and asked == []
    assert actions["compare:kv_usage"].isEnabled()


@pytest.mark.parametrize("typed_filter, shown", [
    ("1.5 s", [0]),  # "     1.500 s  request #12 finished": none
    ("1.50 s", [0]),
    ("1.5", [0]),
    ("1.55", [1]),  # not 1.5's line
    ("12 ms", [2]),  # "after 12.0 ms in the queue": none
    ("12.0 ms", [2]),
    ("request #１２ ", [0]),  # full-width digits: none
    ("#12", [0]),  # still not #120
    ("2 s", []),  # not the end of 1.5's "500 s"
])
def test_the_event_logs_filter_finds_a_time_as_the_log_writes_it(qtbot, typed_filter, shown):
    from kvscope.widgets.event_log import EventLog

    log = EventLog(kinds=("admitted", "finished"))
    qtbot.addWidget(log)
    log.show()
    lines = [("finished", "     1.500 s  request #12 finished, 0.250 s after arriving"),
             ("finished", "     1.550 s  request #120 finished, 0.300 s after arriving"),
             ("admitted", "     2.250 s  request #7 admitted to the batch after 12.0 ms in the queue")]
    log.add_lines(lines)
    log.text_filter.setText(typed_filter)
    assert log.shown_lines() == [lines[i][1] for i in shown]


@pytest.mark.parametrize("typed, value, why", [
    ("1 000", 1000.0, None),  # "'1 000' is not a number": 1,000 in every box of the Settings
    ("1'000", 1000.0, None),
    ("1_000", 1000.0, None),
    ("1 sequence", 1.0, None),  # "not a number", where "2 sequences" was taken
    ("2,000", 2000.0, None),
    ("1 00", None, "'1 00' is not a number"),
])
def test_a_scenario_guess_reads_thousands_and_units_as_the_settings_do(qtbot, typed, value, why):
    from test_gui_hostile_fourth import guess_panel

    panel, _committed = guess_panel(qtbot, "cache-ceiling")  # a count of sequences
    got, said = panel.guess_number.read(typed)
    assert got == value and (said or "").startswith(why or ""), said
    panel.set_scenario("t", "", "how many?", "simulated", unit="requests", minimum=0, maximum=5000, decimals=0)
    assert panel.guess_number.read("2.000") == (None, "2.000: '.' is a decimal point here, not a thousands separator "
                                                      "(1,000 or 1000), and this guess is a whole number from 0 "
                                                      "requests to 5000 requests")  # the guess 2
