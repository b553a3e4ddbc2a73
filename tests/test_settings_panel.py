"""The settings dock: the wheel scrolls the form instead of changing what it passes over; a refused
value is refused with its reason, and Apply with one shows it where the user is; counts read
"1 device", not "1 devices"."""

import pytest
from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import QApplication

from kvscope.app.cli.gui import initial_values
from kvscope.app.gui.main_window import MainWindow
from kvscope.app.gui.run_settings import settings_choices
from kvscope.widgets.preset_editor import PresetEditor
from kvscope.widgets.settings_panel import SettingsPanel


def wheel_down(widget, notches: int = 3) -> None:
    """A real wheel event over the middle of widget, as the mouse sends it (Qt routes it up the parents)."""
    centre = QPointF(widget.rect().center())
    event = QWheelEvent(centre, QPointF(widget.mapToGlobal(centre.toPoint())), QPoint(0, 0),
                        QPoint(0, -120 * notches), Qt.NoButton, Qt.NoModifier, Qt.ScrollUpdate, False)
    QApplication.sendEvent(widget, event)


@pytest.fixture
def panel(qtbot):
    panel = SettingsPanel(settings_choices())
    panel.set_choices(["llama-2-7b", "llama-3-8b", "qwen2.5-7b"], ["h100-80gb", "a100-80gb"], ["chat", "azure-conv"])
    qtbot.addWidget(panel)
    panel.resize(360, 300)  # far shorter than the form: it scrolls
    panel.show()
    qtbot.waitExposed(panel)
    return panel


def test_the_wheel_over_an_unfocused_combo_or_spin_box_scrolls_the_panel_and_changes_nothing(panel):
    scroll = panel.verticalScrollBar()
    assert scroll.maximum() > 0
    panel.apply_button.setFocus()  # the first box takes the focus when the panel shows
    values = panel.values()
    for box in (panel.backend, panel.hardware, panel.block_size, panel.max_num_seqs, panel.gpu_memory_utilization):
        assert not box.hasFocus()
        before = scroll.value()
        wheel_down(box)
        assert panel.values() == values, box
        assert scroll.value() > before or scroll.value() == scroll.maximum(), box
        scroll.setValue(0)


def test_a_focused_box_still_takes_the_wheel(panel, qtbot):
    panel.max_num_seqs.setValue(8)
    panel.max_num_seqs.setFocus()
    qtbot.waitUntil(panel.max_num_seqs.hasFocus)
    wheel_down(panel.max_num_seqs, notches=1)
    assert panel.max_num_seqs.value() == 7


def test_counts_are_singular_at_one(qtbot):
    panel = SettingsPanel(settings_choices())
    editor = PresetEditor(("bf16",))
    qtbot.addWidget(panel)
    qtbot.addWidget(editor)
    editor.gpu_count.setValue(1)
    assert editor.gpu_count.text() == "1 device"
    editor.gpu_count.setValue(8)
    assert editor.gpu_count.text() == "8 devices"
    panel.max_num_seqs.setValue(1)
    panel.num_requests.setValue(1)
    assert (panel.max_num_seqs.text(), panel.num_requests.text()) == ("1 request", "1 request")
    panel.num_requests.setValue(2000)
    assert panel.num_requests.text() == "2,000 requests"
    panel.set_values({"max_num_seqs": 16, "num_requests": 720})  # filled with its signals blocked
    assert (panel.max_num_seqs.text(), panel.num_requests.text()) == ("16 requests", "720 requests")
    editor.set_hardware("h100", 80 * 1024**3, 3.35e12, 989e12, 1)
    assert editor.gpu_count.text() == "1 device"
    editor.set_hardware("8x h100", 80 * 1024**3, 3.35e12, 989e12, 8)
    assert editor.gpu_count.text() == "8 devices"


@pytest.fixture
def window(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("KVSCOPE_CONFIG_DIR", str(tmp_path / "config"))

    class Args:
        backend, model, hardware, workload, model_path = "simulated", "llama-2-7b", "h100-80gb", "chat", None

    win = MainWindow({**initial_values(Args()), "num_requests": 50}, autoplay=False)
    qtbot.addWidget(win)
    win.resize(1280, 720)
    win.show()
    qtbot.waitExposed(win)
    win.activateWindow()
    yield win
    win.close()


def test_zero_kv_heads_is_refused_with_its_reason_not_clamped(window):
    box = window.editor.model_boxes["num_key_value_heads"]
    box.setValue(0)
    assert box.value() == 0  # what was typed stays, to be refused
    assert "num_key_value_heads must be greater than 0" in window.editor.model_error.text()
    assert window.editor.model_error.isVisibleTo(window.editor)
    assert not window.settings.apply_button.isEnabled()
    box.setValue(8)
    assert window.editor.model_error.isHidden() and window.settings.apply_button.isEnabled()
    window.editor.gpu_count.setValue(0)
    assert "gpu_count must be greater than 0" in window.editor.model_error.text()
    assert not window.settings.apply_button.isEnabled()


def test_ctrl_return_with_a_refused_editor_value_shows_the_reason_where_the_user_is(window, qtbot):
    tabs = window.settings_form.dock.widget()
    tabs.setCurrentIndex(1)  # Model & hardware
    box = window.editor.model_boxes["num_key_value_heads"]
    box.setValue(0)
    qtbot.keyClick(window, Qt.Key_Return, Qt.ControlModifier)
    assert tabs.currentIndex() == 1
    qtbot.waitUntil(box.hasFocus)
    assert "num_key_value_heads must be greater than 0" in window.statusBar().currentMessage()
    # the message has the bar: the engine's status line steps aside while it shows (it once
    # stretched over the whole bar, and Qt drew the message in no room at all)
    assert window.status.isHidden()
    window.statusBar().clearMessage()
    assert window.status.isVisible()


def test_apply_with_a_refused_run_field_switches_to_its_tab_and_focuses_it(window, qtbot):
    tabs = window.settings_form.dock.widget()
    window.settings.set_values({"enable_chunked_prefill": False, "max_num_batched_tokens": 512, "max_model_len": 4096})
    tabs.setCurrentIndex(1)
    qtbot.keyClick(window, Qt.Key_Return, Qt.ControlModifier)
    assert tabs.currentIndex() == 0
    qtbot.waitUntil(window.settings.max_num_batched_tokens.hasFocus)
    assert "max_num_batched_tokens" in window.statusBar().currentMessage()


def _type_and_enter(qtbot, box, text: str) -> None:
    box.setFocus()
    box.lineEdit().selectAll()
    qtbot.keyClicks(box, text)
    qtbot.keyClick(box, Qt.Key_Return)


def test_a_typed_value_the_box_puts_back_says_why_under_its_field(window, qtbot):
    """Qt puts back the previous value of a box given text below its smallest value; the form
    says so instead of leaving the user to wonder why 0 became 0.92 again."""
    tabs = window.settings_form.dock.widget()
    box, label = window.settings.gpu_memory_utilization, window.settings.errors["gpu_memory_utilization"]
    _type_and_enter(qtbot, box, "0")
    assert box.value() == pytest.approx(0.92)
    assert label.isVisibleTo(window.settings)
    assert "0 is below the smallest value this field takes, 0.05: kept 0.92" in label.text()
    tabs.setCurrentIndex(1)
    memory = window.editor.memory_gib
    before = memory.value()
    _type_and_enter(qtbot, memory, "0")
    assert memory.value() == before
    assert "below the smallest value this field takes, 0.10 GiB: kept" in window.editor.model_error.text()
    assert window.editor.model_error.isVisibleTo(window.editor)


def test_a_negative_arrival_rate_is_refused_not_taken_for_the_presets(window, qtbot):
    box, label = window.settings.arrival_rate, window.settings.errors["arrival_rate_per_s"]
    box.setValue(-0.5)
    assert "arrival_rate_per_s must be 0 (all at once) or more, got -0.5" in label.text()
    assert not window.settings.apply_button.isEnabled()
    box.setValue(box.minimum())  # the box's own "preset's"
    assert label.isHidden() and window.settings.apply_button.isEnabled()


def test_a_context_length_no_request_of_the_workload_fits_is_refused_in_its_field(window):
    window.settings.max_model_len.setValue(8)  # the chat preset's shortest request: 2 prompt + 7 output tokens
    label = window.settings.errors["max_model_len"]
    assert "every request of this workload is longer (the shortest asks for 9 tokens" in label.text()
    assert "max_model_len 8 tokens" in label.text()
    assert not window.settings.apply_button.isEnabled()
    window.settings.max_model_len.setValue(4096)
    assert label.isHidden() and window.settings.apply_button.isEnabled()


def test_memory_too_small_for_the_weights_is_refused_at_the_memory_field(window, qtbot):
    tabs = window.settings_form.dock.widget()
    tabs.setCurrentIndex(1)
    window.editor.memory_gib.setValue(1.0)  # llama-2-7b's 12.6 GiB of weights do not fit
    assert "memory_bytes 1.00 GiB (1.1 GB) per device: no room for a KV cache" in window.editor.model_error.text()
    assert "border" in window.editor.memory_gib.styleSheet()
    assert window.settings.errors["gpu_memory_utilization"].isHidden()
    assert not window.settings.apply_button.isEnabled()


def test_memory_utilisation_is_greyed_with_its_reason_on_a_cpu_target_whose_pool_is_a_set_budget(window):
    """vLLM's CPU backend sizes the KV pool by a set budget: the share of the memory is read nowhere."""
    field = window.settings.gpu_memory_utilization
    assert field.isEnabled()
    window.settings.set_values({"hardware": "this-machine"})
    window.settings_form.changed()
    assert not field.isEnabled()
    assert "not used now: on a CPU the KV pool is a set budget" in field.toolTip()
    window.settings.set_values({"hardware": "h100-80gb"})
    window.settings_form.changed()
    assert field.isEnabled() and "not used now" not in field.toolTip()
    assert field.toolTip().startswith("gpu_memory_utilization: share of device memory")


def test_typing_a_cpu_targets_memory_makes_its_pool_a_share_of_it_as_memory_gib_does(window):
    window.settings.set_values({"hardware": "this-machine", "max_model_len": 2048})
    window.settings_form.changed()
    assert not window.settings.gpu_memory_utilization.isEnabled()
    window.editor.memory_gib.setValue(64.0)
    config = window.settings_form.current_config()
    assert config is not None and config.hardware.memory_is_budget
    assert window.settings.gpu_memory_utilization.isEnabled()
    assert "x gpu_memory_utilization" in window.settings.preview.text()
