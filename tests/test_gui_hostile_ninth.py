"""The window against bad input, ninth round: a comparison whose one configuration cannot be built
(the error said why, not which); an Apply refused, then mended and applied (the refusal stayed on
the status line, over the new run's, for ten seconds). Each is said where the user is, naming what
it is about, and nothing said is left standing once it is no longer true."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication

from kvscope.app.host.comparison import ComparisonSession
from kvscope.app.host.protocol import APPLY
from kvscope.app.lab.compare import ComparisonSpec, ComparisonWorkload, Variant
from kvscope.app.lab.presets import load_workload
from kvscope.engine.config import ConfigError

from test_gui_hostile_fifth import select_typed


def spec_with(*variants) -> ComparisonSpec:
    workload = ComparisonWorkload(load_workload("chat").with_overrides(num_requests=4, arrival_rate_per_s=20.0))
    return ComparisonSpec(list(variants), workload)


def built(spec):
    session = ComparisonSession()
    session.handle(APPLY, (spec, False))
    return session.take_frame()


# -- 1. a comparison whose one configuration cannot be built ----------------------------------------

@pytest.mark.parametrize("label", ["8 GiB \u202eright", "<b>tiny</b>"])
def test_a_comparison_that_cannot_be_built_names_the_configuration_that_failed(label):
    frame = built(spec_with(Variant("fits"), Variant(label, memory_bytes=1)))
    assert "no room for a KV cache" in frame.error
    assert frame.error.startswith(f"configuration {label!r}: "), frame.error
    assert "\u202e" not in frame.error.splitlines()[0]  # escaped: the rest of the line is not reversed


def test_a_build_that_crashes_names_its_configuration_in_the_dialogs_line(monkeypatch):
    original = Variant.build_engine

    def build_engine(self):
        if self.label == "broken":
            raise RuntimeError("CUDA out of memory")
        return original(self)

    monkeypatch.setattr(Variant, "build_engine", build_engine)
    frame = built(spec_with(Variant("fits"), Variant("broken")))
    assert "Traceback" in frame.error  # the details keep it
    assert frame.error.strip().splitlines()[-1] == "configuration 'broken': RuntimeError: CUDA out of memory"
    assert frame.status == "could not build the comparison"


def test_a_failure_of_the_workload_names_no_configuration(monkeypatch):
    def requests(self, vocab):
        raise ConfigError("the trace holds no request")

    monkeypatch.setattr(ComparisonWorkload, "requests", requests)
    assert built(spec_with(Variant("a"), Variant("b"))).error == "the trace holds no request"


# -- 2. a refusal mended -------------------------------------------------------------------------------

def test_not_applied_leaves_the_status_line_once_an_apply_is_taken(window, qtbot):
    settings = window.settings
    settings.kv_budget.setValue(1)  # MiB: smaller than one block
    assert not window.apply_settings(play=False)
    assert window.statusBar().currentMessage().startswith("not applied")
    settings.kv_budget.setValue(2048)
    assert window.apply_settings(play=False)
    assert window.statusBar().currentMessage() == "", window.statusBar().currentMessage()
    assert window.status.isVisible() or not window.isVisible()


def test_not_applied_leaves_the_status_line_once_the_refused_field_is_mended(window, qtbot):
    settings = window.settings
    select_typed(qtbot, settings.max_model_len, "99999999999")  # past its range, not entered
    qtbot.keyClick(settings.max_model_len.lineEdit(), Qt.Key_Return, Qt.ControlModifier)
    assert window.statusBar().currentMessage().startswith("not applied")
    settings.kv_budget.setValue(1)
    settings.kv_budget.setValue(2048)  # the form is checked again and nothing is refused
    select_typed(qtbot, settings.max_model_len, "2048")
    qtbot.keyClick(settings.max_model_len.lineEdit(), Qt.Key_Return)
    assert not window.statusBar().currentMessage().startswith("not applied")
    assert window.apply_settings(play=False) and window.config.engine_args.max_model_len == 2048


def test_another_message_is_not_cleared_by_a_form_that_checks_out(window, qtbot):
    window.statusBar().showMessage("saved /tmp/x.csv", 5000)
    window.settings.kv_budget.setValue(2048)
    assert window.statusBar().currentMessage() == "saved /tmp/x.csv"


# -- 3. a paste Qt drops at once --------------------------------------------------------------------

def paste(qtbot, box, text: str) -> None:
    QGuiApplication.clipboard().setText(text)
    box.setFocus()
    box.lineEdit().selectAll()
    qtbot.keyClick(box, Qt.Key_V, Qt.ControlModifier)


@pytest.mark.parametrize("text, hidden", [("\u202e2048\u202c", "U+202C, U+202E"), ("20\u200b48", "U+200B"),
                                          ("\U0001F600", None)])
def test_a_paste_that_is_no_number_is_said_under_its_field_naming_invisible_characters(window, qtbot, text, hidden):
    settings = window.settings
    box, label = settings.max_model_len, settings.errors["max_model_len"]
    paste(qtbot, box, text)
    assert box.text() == box.specialValueText() and box.value() == box.minimum()  # nothing taken
    assert label.isVisible() and "is not a number" in label.text() and label.text().endswith("kept default")
    assert (f"invisible characters: {hidden}" in label.text()) if hidden else "invisible" not in label.text()
    assert "\u202e" not in label.text() and "\u200b" not in label.text()  # escaped, not hidden again


def test_a_letter_typed_in_the_seed_is_said_on_the_status_line(window, qtbot):
    seed = window.seed
    before = seed.value()
    seed.setFocus()
    seed.lineEdit().end(False)
    qtbot.keyClicks(seed, "k")
    assert seed.value() == before
    assert window.statusBar().currentMessage().startswith("seed: ") and "is not a number" in \
        window.statusBar().currentMessage()
