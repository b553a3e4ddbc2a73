"""The window against bad input, eighteenth round: digits typed with something no number holds.
Qt dropped the key that spoilt the number and went on with the next ones, and the line that said the
key was dropped went with the Enter that took the rest: "5k" typed for 5,000 ran 5 requests, "0x10"
10, "5-3" 53, "1.2.3" an arrival rate of 1.23 req/s, "1 000" (thousands grouped by a space) a
max_model_len of 1 token. Thousands grouped as French, Swiss or Python write them ("1 000", "1'024",
"1_000": the command line's int() takes it) were refused or cut; "0x10" was said to be "in x10", "1/2"
"in /2", as if a unit; and "NaN" in a box of decimals "has more decimals than this field keeps". Now
such text stays in the box as typed, is said at once and refused on Enter with the value kept, a
grouping of thousands is read as the number written, and "NaN" is not a number. The event log's
filter "1024-token" found none of the "1,024-token prompt" lines the log writes, "request #1,200"
(written as the window writes numbers) not request #1200. "90%" in the memory utilisation (a
share written 0.05 to 1.00) was "in %: type the number alone", and 90 then above 1.00. A preset
name typed with a combining accent (e + U+0301, as some input methods type "é") was refused as
"a preset name uses letters, ... got 'é'", a letter to the eye. (One window per test, each test many
cases: the window is most of a test's time.)"""

from __future__ import annotations

from PySide6.QtCore import Qt

from test_gui_hostile_fifteenth import paste
from test_gui_hostile_fourteenth import refused


def typed(qtbot, box, text: str) -> str:
    """text typed key by key over the box's own (what the box holds before Enter), then Enter."""
    box.setFocus()
    box.lineEdit().selectAll()
    qtbot.keyClicks(box.lineEdit(), text)
    held = box.lineEdit().text()
    qtbot.keyClick(box.lineEdit(), Qt.Key.Key_Return)
    return held


def key_of(settings, box) -> str:
    return next(key for key, field in settings.fields.items() if field is box)


SPOILT = [
    ("num_requests", "5k"),  # ran 5 requests
    ("num_requests", "0x10"),  # 10
    ("num_requests", "5-3"),  # 53
    ("num_requests", "0b11"),  # 11
    ("max_model_len", "1 00"),  # 1 token
    ("arrival_rate", "1.2.3"),  # 1.23 req/s
]


def test_digits_spoilt_by_a_key_stay_as_typed_are_said_and_refused_with_the_value_kept(window, qtbot):
    settings = window.settings
    for box, text in SPOILT:
        field = getattr(settings, box)
        key = key_of(settings, field)
        before = settings.values()[key]
        held = typed(qtbot, field, text)
        assert held.startswith(text), (text, held)  # in the box as typed, not with the spoiling key dropped
        assert settings.values()[key] == before, text
        said = refused(settings, key)
        assert said.startswith(f"{text!r} is not a number; this field takes ") and ": kept " in said, said
    # said as it is typed, and taken once mended
    field = settings.num_requests
    field.setFocus()
    field.lineEdit().selectAll()
    qtbot.keyClicks(field.lineEdit(), "5k")
    assert refused(settings, "num_requests").startswith("'5k' is not a number; this field takes 1 to 10,000,000")
    qtbot.keyClick(field.lineEdit(), Qt.Key.Key_Backspace)
    qtbot.keyClick(field.lineEdit(), Qt.Key.Key_Return)
    assert settings.values()["num_requests"] == 5
    # Apply (Ctrl+Return) with the text still in the box applies nothing, and says why
    field.setFocus()
    field.lineEdit().selectAll()
    qtbot.keyClicks(field.lineEdit(), "3k")
    assert not window.apply_settings(play=False)
    assert field.lineEdit().text().startswith("3k") and settings.values()["num_requests"] == 5
    assert "'3k' is not a number" in window.statusBar().currentMessage()


def test_a_spoilt_number_in_the_seed_and_the_editor_is_said_where_each_says_things(window, qtbot, monkeypatch):
    seed = window.seed
    seed.setValue(7)
    typed(qtbot, seed, "4k2")  # was 42 (the seed takes each key as it comes: 4, then the refusal)
    assert seed.value() != 42
    assert window.statusBar().currentMessage().startswith("seed: '4k2' is not a number")
    editor = window.editor
    box = editor.model_boxes["num_key_value_heads"]
    before = box.value()
    typed(qtbot, box, "4x")  # was 4 KV heads
    assert box.value() == before and editor.model_error.text().startswith("'4x' is not a number")
    paste(qtbot, editor.memory_gib, "NaN")  # "has more decimals than this field keeps"
    assert editor.model_error.text().startswith("'NaN' is not a number; this field takes 0.10 to ")
    # a name with a combining accent is saved as the name the eye reads
    from PySide6.QtWidgets import QInputDialog, QMessageBox

    from kvscope.app.lab.presets import user_preset_names

    said = []
    monkeypatch.setattr(QMessageBox, "warning", lambda parent, title, text, *a, **k: said.append((title, text)))
    monkeypatch.setattr(QInputDialog, "getText", lambda *a, **k: ("cafe\u0301-gpu ", True))
    editor.save_hardware.click()
    assert said == [] and user_preset_names("hardware") == ["caf\u00e9-gpu"]


def test_thousands_grouped_as_other_places_write_them_are_the_number_written(window, qtbot):
    settings = window.settings
    for box, text, value in [("num_requests", "1 000", 1000),  # typed: was 1
                             ("max_model_len", "1_000", 1000),  # Python's int(), so the command line, takes it
                             ("max_model_len", "1'024", 1024),  # Swiss
                             ("num_requests", "1 000 000", 1_000_000)]:
        field = getattr(settings, box)
        typed(qtbot, field, text)
        assert settings.values()[key_of(settings, field)] == value, text
        assert field.text().startswith(f"{value:,}"), text
    for text in ["1\u202f024", "1\u00a0024", "１　０２４"]:  # French, no-break, full-width (pasted)
        settings.max_model_len.setValue(5)
        assert paste(qtbot, settings.max_model_len, text) == "" and settings.values()["max_model_len"] == 1024, text
    for text in ["1 00", "12 34", "1_0000", "1 000.5"]:  # not in threes, or a fraction of a request
        said = paste(qtbot, settings.num_requests, text)
        assert said.startswith(f"{text!r} is not a number") or "not a whole number" in said, said
        assert settings.values()["num_requests"] == 1_000_000


def test_what_the_refusals_say(window, qtbot):
    settings = window.settings
    share = settings.gpu_memory_utilization  # a percentage in the box of a share is that share
    for text, value in [("90%", 0.9), ("85 %", 0.85), ("５０％", 0.5), ("100%", 1.0)]:
        assert paste(qtbot, share, text) == "" and settings.values()["gpu_memory_utilization"] == value, text
    assert paste(qtbot, share, "150%").startswith("1.50 is above the largest value this field takes, 1.00: kept 1.00")
    assert paste(qtbot, share, "1%").startswith("0.01 is below the smallest value this field takes, 0.05")
    share.setValue(0.9)
    for text in ["0x10", "1/2", "2^10"]:  # "is in x10, not requests", "is in /2"
        said = paste(qtbot, settings.num_requests, text)
        assert said.startswith(f"{text!r} is not a number; this field takes 1 to 10,000,000 requests"), said
    said = paste(qtbot, settings.kv_budget, "2 GiB")  # a unit is still said as one
    assert said.startswith("'2 GiB' is in GiB, not MiB: type the number alone"), said
    for box, kept in [("gpu_memory_utilization", "0.05 to 1.00: kept 0.90"),
                      ("arrival_rate", "req/s, or preset's: kept preset's")]:
        for text in ["NaN", "nan", "-nan"]:  # "NaN has more decimals than this field keeps"
            said = paste(qtbot, getattr(settings, box), text)
            assert said.startswith(f"{text!r} is not a number; this field takes ") and said.endswith(kept), said


def test_the_event_logs_filter_finds_a_number_with_or_without_its_thousands_commas(qtbot):
    from kvscope.widgets.event_log import EventLog

    log = EventLog(kinds=("arrived", "finished"))
    qtbot.addWidget(log)
    log.show()
    log.add_lines([("arrived", "request #1200 arrived with a 1,024-token prompt"),
                   ("arrived", "request #7 arrived with a 11,024-token prompt"),
                   ("finished", "request #12 finished")])
    for typed, shown in [("1024-token", [0]), ("1,024-TOKEN", [0]), ("request #1,200", [0]), ("#1200", [0]),
                         ("024-token", []),  # the end of 1,024 is not the number 24 or 024
                         ("request #12", [2]), ("11024", [1])]:
        log.text_filter.setText(typed)
        assert log.shown_lines() == [log.lines[i][1] for i in shown], typed
