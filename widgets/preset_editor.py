"""Edit the chosen model's and hardware's fields — "what if this model had 8 KV heads?" — and
save them as the user's own presets. The app validates, applies and stores; this view collects."""

from __future__ import annotations

import unicodedata

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from kvscope.widgets.kept_value_notice import notice_kept_values
from kvscope.widgets.number_box import DecimalBox, NumberBox
from kvscope.widgets.settings_panel import (
    count_suffix,
    let_combos_shrink,
    refresh_count_suffixes,
    show_unused,
    wheel_scrolls_panel,
)

MODEL_FIELDS = [  # (key, label, tooltip)
    ("num_hidden_layers", "Layers", "num_hidden_layers"),
    ("num_attention_heads", "Attention heads", "num_attention_heads: query heads"),
    ("num_key_value_heads", "KV heads", "num_key_value_heads: fewer than the attention heads is GQA; 1 is MQA"),
    ("head_dim", "Head dim", "head_dim: numbers per head in each K and V"),
    ("hidden_size", "Hidden size", "hidden_size"),
    ("intermediate_size", "MLP size", "intermediate_size"),
    ("vocab_size", "Vocabulary", "vocab_size"),
]


def _int_box(tooltip: str, suffix: str = "") -> QSpinBox:
    box = NumberBox()
    # 0 can be typed: the engine refuses it with the reason, shown here, where a minimum of 1
    # changed the typed 0 back to 1 without a word
    box.setRange(0, 10_000_000)
    box.setToolTip(tooltip)
    box.setSuffix(suffix)
    box.setGroupSeparatorShown(True)
    box.setKeyboardTracking(False)
    return box


def _float_box(tooltip: str, suffix: str, maximum: float, decimals: int = 1) -> QDoubleSpinBox:
    box = DecimalBox()
    box.setDecimals(decimals)
    # the least it shows, not 0: Qt rounds the range to the decimals, and the bandwidth's whole GB/s
    # took 0.1 as 0 -- a 0 GB/s then refused on the Run tab, in bytes/s, out of the user's sight
    box.setRange(max(0.1, 10.0 ** -decimals), maximum)
    box.setSuffix(suffix)
    box.setToolTip(tooltip)
    box.setKeyboardTracking(False)
    return box


class PresetEditor(QScrollArea):
    edited = Signal()  # any field changed: the app re-plans (and, on apply, rebuilds)
    # kind ("models" | "hardware"), name: an object, so the name arrives as typed -- a str signal
    # would drop what Qt's strings cannot hold (a lone surrogate) and save under another name
    save_requested = Signal(str, object)
    delete_requested = Signal(str, str)

    def __init__(self, weight_dtypes: tuple[str, ...] = (), parent=None):
        """weight_dtypes: the weight precisions to offer (the app reads them from the engine's config)."""
        super().__init__(parent)
        self.setWidgetResizable(True)
        body = QWidget()
        self.setWidget(body)
        outer = QVBoxLayout(body)
        self.model_boxes: dict[str, QSpinBox] = {}
        self._exact_hardware: dict[str, tuple] = {}  # field -> (the value its box shows, the exact value)

        model_group = QGroupBox("Model")
        form = QFormLayout(model_group)
        self.model_name = QLabel()
        form.addRow("Editing", self.model_name)
        for key, label, tooltip in MODEL_FIELDS:
            box = _int_box(tooltip)
            self.model_boxes[key] = box
            form.addRow(label, box)
        self.weight_dtype = QComboBox()
        self.weight_dtype.addItems(weight_dtypes)
        self.weight_dtype.setToolTip("weight precision or quantisation: sets the weights' share of memory")
        form.addRow("Weights", self.weight_dtype)
        self.model_note = QLabel("On the real backend an edited shape runs with random weights.")
        self.model_note.setWordWrap(True)
        form.addRow(self.model_note)
        self.model_error = QLabel()
        self.model_error.setWordWrap(True)
        self.model_error.setStyleSheet("color: #e05252;")
        self.model_error.hide()
        form.addRow(self.model_error)
        outer.addWidget(model_group)

        hardware_group = QGroupBox("Hardware")
        form = QFormLayout(hardware_group)
        self.hardware_name = QLabel()
        form.addRow("Editing", self.hardware_name)
        self.memory_gib = _float_box("memory per device", " GiB", 100_000, 2)
        self.bandwidth = _float_box("memory bandwidth per device", " GB/s", 1_000_000, 0)
        self.flops = _float_box("peak dense FLOP/s per device, 16-bit", " TFLOP/s", 100_000, 1)
        self.gpu_count = _int_box("devices, joined for tensor parallelism")
        self.gpu_count.setRange(0, 1024)  # 0 is refused with the reason, as a model field's 0 is
        count_suffix(self.gpu_count, "device")
        form.addRow("Memory", self.memory_gib)
        form.addRow("Bandwidth", self.bandwidth)
        form.addRow("Peak FLOP/s (16-bit)", self.flops)
        form.addRow("Devices", self.gpu_count)
        outer.addWidget(hardware_group)

        buttons = QGroupBox("Your presets")
        row = QVBoxLayout(buttons)
        line = QHBoxLayout()
        self.save_model = QPushButton("Save model as...")
        self.save_hardware = QPushButton("Save hardware as...")
        line.addWidget(self.save_model)
        line.addWidget(self.save_hardware)
        row.addLayout(line)
        line = QHBoxLayout()
        self.user_presets = QComboBox()
        self.user_presets.setToolTip("presets you saved (kept in your config directory)")
        self.delete_button = QPushButton("Delete")
        line.addWidget(self.user_presets, 1)
        line.addWidget(self.delete_button)
        row.addLayout(line)
        outer.addWidget(buttons)
        outer.addStretch(1)
        let_combos_shrink(body)
        wheel_scrolls_panel(body)

        for box in [*self.model_boxes.values(), self.memory_gib, self.bandwidth, self.flops, self.gpu_count]:
            box.valueChanged.connect(self.edited)
        # once: installed at every set_hardware (each preset chosen), the boxes gathered a filter per choice
        # a refused "8x" mended to the 8 kept changes no value: its notice stood under a box showing 8
        notice_kept_values([*self.model_boxes.values(), self.memory_gib, self.bandwidth, self.flops, self.gpu_count],
                           self._show_kept_value, self._kept_value_mended)
        self.weight_dtype.currentIndexChanged.connect(self.edited)
        self.save_model.clicked.connect(lambda: self._ask_name("models"))
        self.save_hardware.clicked.connect(lambda: self._ask_name("hardware"))
        self.delete_button.clicked.connect(self._delete)

    def set_model(self, name: str, fields: dict) -> None:
        self.model_name.setText(name)
        for key, box in self.model_boxes.items():
            box.blockSignals(True)
            box.setValue(int(fields[key]))
            box.blockSignals(False)
        self.weight_dtype.blockSignals(True)
        self.weight_dtype.setCurrentText(fields.get("weight_dtype", "bf16"))
        self.weight_dtype.blockSignals(False)

    def set_hardware(self, name: str, memory_bytes: float, bandwidth_bytes_per_s: float, flops_16bit: float,
                     gpu_count: int) -> None:
        self.hardware_name.setText(name)
        # The boxes show rounded values (79.6 GiB for 79.65); until the user changes one, the exact
        # preset value is what they stand for -- else every preset would count as "edited".
        values = {"memory_bytes": memory_bytes, "memory_bandwidth_bytes_per_s": bandwidth_bytes_per_s,
                  "flops_16bit": flops_16bit, "gpu_count": gpu_count}
        self._exact_hardware = {}
        for key, (box, scale) in self._hardware_boxes().items():
            box.blockSignals(True)
            box.setValue(values[key] / scale)
            box.blockSignals(False)
            self._exact_hardware[key] = (box.value(), values[key])
        refresh_count_suffixes(self)

    def show_hardware_unused(self, reason: str | None) -> None:
        """Grey out the hardware's boxes while the run never reads them (reason: why); None undoes it."""
        for box, _scale in self._hardware_boxes().values():
            show_unused(box, reason)

    def _show_kept_value(self, _box, reason: str) -> None:
        self.show_notice(reason)

    def _kept_value_mended(self, _box) -> None:
        if not self.model_error.isHidden():  # the form checks itself again: the notice goes, or a refusal stays
            self.edited.emit()

    def show_notice(self, reason: str) -> None:
        """Under the model's fields, where a refused value's reason goes too."""
        self.model_error.setText(reason)
        self.model_error.show()

    def _hardware_boxes(self) -> dict:
        """field -> (its box, the box's unit in the field's unit)"""
        return {"memory_bytes": (self.memory_gib, 1024**3), "memory_bandwidth_bytes_per_s": (self.bandwidth, 1e9),
                "flops_16bit": (self.flops, 1e12), "gpu_count": (self.gpu_count, 1)}

    def show_error(self, field: str | None, message: str = "") -> QWidget | None:
        """Mark the box of field (a model or hardware field name) refused, with message under the
        model's fields; None clears. Returns the marked box."""
        boxes = {**self.model_boxes, "weight_dtype": self.weight_dtype,
                 **{key: box for key, (box, _) in self._hardware_boxes().items()}}
        for key, box in boxes.items():
            box.setStyleSheet("border: 1px solid #e05252;" if key == field else "")
        self.model_error.setText(message if field in boxes else "")
        self.model_error.setVisible(field in boxes)
        return boxes.get(field)

    def set_user_presets(self, names: list[tuple[str, str]]) -> None:
        """(kind, name) pairs."""
        self.user_presets.clear()
        for kind, name in names:
            self.user_presets.addItem(f"{name} ({'model' if kind == 'models' else 'hardware'})", (kind, name))
        self.delete_button.setEnabled(bool(names))

    def model_fields(self) -> dict:
        fields = {key: box.value() for key, box in self.model_boxes.items()}
        fields["weight_dtype"] = self.weight_dtype.currentText()
        return fields

    def hardware_fields(self) -> dict:
        fields = {}
        for key, (box, scale) in self._hardware_boxes().items():
            shown, exact = self._exact_hardware.get(key, (None, None))
            fields[key] = exact if box.value() == shown else box.value() * scale
        fields["memory_bytes"] = int(fields["memory_bytes"])
        return fields

    def _ask_name(self, kind: str) -> None:
        current = self.model_name.text() if kind == "models" else self.hardware_name.text()
        name, ok = QInputDialog.getText(self, "Save preset", "Name (letters, digits, - _ ., not starting with .):",
                                        text=f"{current}-edited")
        if ok:  # an empty name is refused by the app with the reason, not ignored without a word
            # composed: an input method that types "é" as e + U+0301 (a combining accent) was refused
            # as "a preset name uses letters, ... got 'é'", a letter to the eye
            self.save_requested.emit(kind, unicodedata.normalize("NFC", name.strip()))

    def _delete(self) -> None:
        data = self.user_presets.currentData()
        if data:
            self.delete_requested.emit(*data)
