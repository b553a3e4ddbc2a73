"""The run's settings as a form: model, hardware, backend, engine arguments, workload.

The panel only collects values and shows what the app tells it: its lists of choices, the live
memory math and, next to a field, why a value is refused. Spin boxes carry their units; nothing
here knows the engine.
"""

from __future__ import annotations

from typing import Callable

from PySide6.QtCore import QEvent, QObject, QPointF, Qt, Signal
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import (
    QAbstractScrollArea,
    QAbstractSpinBox,
    QApplication,
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QLabel,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from kvscope.widgets.kept_value_notice import notice_kept_values
from kvscope.widgets.number_box import DecimalBox, NumberBox

DEFAULT_TEXT = "default"
# The fields whose choices the app gives (value, label) for; the engine's config lists them.
CHOICE_FIELDS = ("backend", "kv_cache_dtype", "block_size", "scheduling", "allocation")


def _spin(minimum: int, maximum: int, suffix: str, tooltip: str, special: str | None = None, step: int = 1) -> QSpinBox:
    box = NumberBox()
    box.setRange(minimum, maximum)
    box.setSuffix(suffix)
    box.setSingleStep(step)
    box.setToolTip(tooltip)
    box.setGroupSeparatorShown(True)
    if special:
        box.setSpecialValueText(special)  # shown at the minimum: "use the default"
    box.setKeyboardTracking(False)
    return box


def _dspin(minimum: float, maximum: float, decimals: int, suffix: str, tooltip: str, step: float,
           special: str | None = None) -> QDoubleSpinBox:
    box = DecimalBox()
    box.setRange(minimum, maximum)
    box.setDecimals(decimals)
    box.setSingleStep(step)
    box.setSuffix(suffix)
    box.setToolTip(tooltip)
    if special:
        box.setSpecialValueText(special)
    box.setKeyboardTracking(False)
    return box


def count_suffix(box: QSpinBox, unit: str) -> None:
    """"1 request" but "2 requests": the suffix follows the box's value (a value set with its
    signals blocked, as a form fills itself, needs refresh_count_suffixes)."""
    box.setProperty("count_unit", unit)
    box.valueChanged.connect(lambda _value: _show_count_unit(box))
    _show_count_unit(box)


def _show_count_unit(box: QSpinBox) -> None:
    unit = box.property("count_unit")
    box.setSuffix(f" {unit}" if box.value() == 1 else f" {unit}s")


def refresh_count_suffixes(container: QWidget) -> None:
    for box in container.findChildren(QSpinBox):
        if box.property("count_unit"):
            _show_count_unit(box)


class WheelScrollsPanel(QObject):
    """The mouse wheel over a choice or number box that has no focus scrolls the panel around it
    instead of changing the value: a user scrolling down a long form changed settings by accident.
    Clicked (or tabbed) into, a box takes the wheel as usual."""

    def eventFilter(self, watched, event) -> bool:  # noqa: N802 - Qt's name
        if event.type() != QEvent.Type.Wheel or watched.hasFocus():
            return False
        area = watched.parentWidget()
        while area is not None and not isinstance(area, QAbstractScrollArea):
            area = area.parentWidget()
        if area is not None:  # handed on explicitly: Qt passes only a spontaneous wheel to the parents
            viewport = area.viewport()
            position = QPointF(viewport.mapFromGlobal(event.globalPosition().toPoint()))
            QApplication.sendEvent(viewport, QWheelEvent(
                position, event.globalPosition(), event.pixelDelta(), event.angleDelta(), event.buttons(),
                event.modifiers(), event.phase(), event.inverted()))
        return True


def wheel_scrolls_panel(container: QWidget) -> None:
    """Install WheelScrollsPanel on every combo and spin box of container (once per container)."""
    guard = WheelScrollsPanel(container)
    for box in [*container.findChildren(QComboBox), *container.findChildren(QAbstractSpinBox)]:
        box.setFocusPolicy(Qt.FocusPolicy.StrongFocus)  # the wheel does not focus it either
        box.installEventFilter(guard)


def let_combos_shrink(container: QWidget, min_chars: int = 10) -> None:
    """Combo boxes as narrow as min_chars characters (their text elides; the list shows it all):
    sized to their longest item, the form was wider than a 360 px dock at 1280x720, clipped
    behind a horizontal scroll bar."""
    for combo in container.findChildren(QComboBox):
        combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        combo.setMinimumContentsLength(min_chars)


def show_unused(field: QWidget, reason: str | None) -> None:
    """Grey out field where the run never reads it (reason: why, in its tooltip); None undoes it."""
    usual = field.property("usual_tooltip")
    if usual is None:
        usual = field.toolTip()
        field.setProperty("usual_tooltip", usual)
    field.setEnabled(reason is None)
    field.setToolTip(usual if reason is None else f"{usual}\nnot used now: {reason}")


SHOWN_ONLY = Qt.ItemDataRole.UserRole + 1  # an item added to show a value the list does not offer


def _select_shown(combo: QComboBox, value, by_data: bool, add: bool) -> None:
    """Select value (an item's data, or its text); one the list does not offer is added (with `add`),
    marked, and selected: a recording replayed of a config.json's model, of another machine's preset
    or of `kvscope run --block-size 24` left the live run's model, workload or 16 tokens in the form
    that says what the recording ran with. The next set_values takes such items away again."""
    index = combo.findData(value) if by_data else combo.findText(value)
    if index < 0 and not add:
        return
    if index < 0:
        combo.addItem(_shown_label(combo, value) if by_data else value, value if by_data else None)
        index = combo.count() - 1
        combo.setItemData(index, True, SHOWN_ONLY)
        combo.setItemData(index, "not offered here: shown as given (a recording's setting)",
                          Qt.ItemDataRole.ToolTipRole)
    combo.setCurrentIndex(index)


def _shown_label(combo: QComboBox, value) -> str:
    """value labelled as the list labels its items ("24 tokens" beside "16 tokens"), else as it is."""
    suffixes = {combo.itemText(i).removeprefix(str(combo.itemData(i))) for i in range(combo.count())
                if combo.itemText(i).startswith(str(combo.itemData(i)))}
    return f"{value}{suffixes.pop()}" if len(suffixes) == 1 and combo.count() > 1 else str(value)


def _drop_shown_only(combo: QComboBox) -> None:
    for index in reversed(range(combo.count())):
        if combo.itemData(index, SHOWN_ONLY):
            combo.removeItem(index)


class SettingsPanel(QScrollArea):
    changed = Signal()  # any field edited: the app recomputes the memory math and validates
    apply_requested = Signal()

    def __init__(self, choices: dict[str, list[tuple]] | None = None, parent=None):
        """choices: for each of CHOICE_FIELDS, its (value, label) pairs in the order to offer them."""
        super().__init__(parent)
        self.setWidgetResizable(True)
        body = QWidget()
        self.setWidget(body)
        outer = QVBoxLayout(body)
        self.fields: dict[str, QWidget] = {}
        self.errors: dict[str, QLabel] = {}
        self.model_path: str | None = None
        self._backend_before_folder = None  # the backend before Open model folder switched it to real
        self.config_path: str | None = None
        self.trace_path: str | None = None
        # path -> why it cannot be replayed (None: it can); the app sets it, as the panel reads no file
        self.trace_check: Callable[[str], str | None] | None = None

        # model and hardware ---------------------------------------------------------------------
        box, form = self._group("Model and hardware", outer)
        self.backend = QComboBox()
        self.backend.setToolTip("real: a transformers model on this machine's GPU or CPU, over the paged KV pool;\n"
                                "simulated: the same scheduler and block manager priced by a roofline model")
        self._row(form, "backend", "Backend", self.backend)
        self.model = QComboBox()
        self.model.setToolTip("a model preset; on the real backend it runs with random weights of its shape")
        open_row = QVBoxLayout()
        self.open_dir = QPushButton("Open model folder...")
        self.open_dir.setToolTip("a local Hugging Face model directory (config.json + *.safetensors)")
        self.open_config = QPushButton("Open config.json...")
        self.open_config.setToolTip("any Hugging Face config.json: its shape, for the simulated backend")
        open_row.addWidget(self.open_dir)
        open_row.addWidget(self.open_config)
        self.source_label = QLabel()
        self.source_label.setWordWrap(True)
        self._row(form, "model", "Model", self.model)
        form.addRow("", self._wrap(open_row))
        form.addRow("", self.source_label)
        self.hardware = QComboBox()
        self.hardware.setToolTip("the device the simulated backend prices steps on; the real backend uses this machine")
        self._row(form, "hardware", "Hardware", self.hardware)

        # engine ----------------------------------------------------------------------------------
        box, form = self._group("Engine (vLLM's names)", outer)
        self.max_model_len = _spin(0, 1_048_576, " tokens", "max_model_len: longest prompt + output", DEFAULT_TEXT, 256)
        count_suffix(self.max_model_len, "token")
        self._row(form, "max_model_len", "Context length", self.max_model_len)
        self.kv_cache_dtype = QComboBox()
        self.kv_cache_dtype.setToolTip("kv_cache_dtype: precision of the stored K/V; auto = the model's 16-bit type")
        self._row(form, "kv_cache_dtype", "KV precision", self.kv_cache_dtype)
        self.block_size = QComboBox()
        self.block_size.setToolTip("block_size: token slots per KV block")
        self._row(form, "block_size", "Block size", self.block_size)
        self.gpu_memory_utilization = _dspin(0.05, 1.0, 2, "", "gpu_memory_utilization: share of device memory the engine may use\n"
                                             "(vLLM's default: 0.92 from vLLM 0.21, 0.9 before)", 0.05)
        self.gpu_memory_utilization.setProperty("share", True)  # "90%" typed is 0.90 (number_box._as_a_share)
        self._row(form, "gpu_memory_utilization", "Memory utilisation", self.gpu_memory_utilization)
        self.kv_budget = _dspin(0, 1_048_576, 0, " MiB", "kv_cache_memory_bytes: size the KV pool directly\n"
                                "(on a CPU the pool is always a budget; default 1 GiB there)", 64, DEFAULT_TEXT)
        self._row(form, "kv_cache_memory_bytes", "KV pool size", self.kv_budget)
        self.max_num_seqs = _spin(0, 65_536, " requests", "max_num_seqs: most requests in one batch\n"
                                  "default: vLLM's, 1,024 on GPUs of 70 GiB or more other than the A100, else 256",
                                  DEFAULT_TEXT)
        count_suffix(self.max_num_seqs, "request")
        self._row(form, "max_num_seqs", "Max running", self.max_num_seqs)
        self.max_num_batched_tokens = _spin(0, 1_048_576, " tokens", "max_num_batched_tokens: the token budget of one step",
                                            DEFAULT_TEXT, 256)
        count_suffix(self.max_num_batched_tokens, "token")
        self._row(form, "max_num_batched_tokens", "Token budget / step", self.max_num_batched_tokens)
        self.enable_prefix_caching = QCheckBox("prefix caching")
        self.enable_prefix_caching.setToolTip("enable_prefix_caching: reuse the KV blocks of identical prefixes")
        self.enable_chunked_prefill = QCheckBox("chunked prefill")
        self.enable_chunked_prefill.setToolTip("enable_chunked_prefill: split long prompts over steps, mixed with decodes")
        checks = QVBoxLayout()
        checks.addWidget(self.enable_prefix_caching)
        checks.addWidget(self.enable_chunked_prefill)
        form.addRow("", self._wrap(checks))
        self.fields["enable_prefix_caching"] = self.enable_prefix_caching
        self.fields["enable_chunked_prefill"] = self.enable_chunked_prefill
        self.scheduling = QComboBox()
        self.scheduling.setToolTip("continuous: refill the batch every step; static: a batch runs until its longest member ends")
        self._row(form, "scheduling", "Scheduling", self.scheduling)
        self.allocation = QComboBox()
        self.allocation.setToolTip("paged: blocks on demand; contiguous: reserve max_model_len slots per request")
        self._row(form, "allocation", "KV allocation", self.allocation)

        # workload --------------------------------------------------------------------------------
        box, form = self._group("Workload", outer)
        self.workload = QComboBox()
        self.workload.setToolTip("a workload preset, or a trace file")
        self._row(form, "workload", "Workload", self.workload)
        self.open_trace = QPushButton("Open trace CSV...")
        self.open_trace.setToolTip("TIMESTAMP, ContextTokens, GeneratedTokens (the Azure trace's columns)")
        self.trace_label = QLabel()
        self.trace_label.setWordWrap(True)
        form.addRow("", self.open_trace)
        form.addRow("", self.trace_label)
        self.num_requests = _spin(1, 10_000_000, " requests", "how many requests the workload sends")
        count_suffix(self.num_requests, "request")
        self._row(form, "num_requests", "Requests", self.num_requests)
        self.arrival_rate = _dspin(-1, 100_000, 2, " req/s", "Poisson arrival rate; 0 = all at once", 0.5, "preset's")
        self._row(form, "arrival_rate_per_s", "Arrival rate", self.arrival_rate)
        self.trace_speedup = _dspin(0.01, 1000, 2, "x", "replay a trace this many times faster", 0.5)
        self._row(form, "trace_speedup", "Trace speed-up", self.trace_speedup)
        self.prompt_median = _spin(0, 1_000_000, " tokens", "median prompt length (lognormal)", "preset's", 64)
        count_suffix(self.prompt_median, "token")
        self._row(form, "prompt_median", "Prompt length", self.prompt_median)
        self.output_median = _spin(0, 1_000_000, " tokens", "median output length (lognormal)", "preset's", 16)
        count_suffix(self.output_median, "token")
        self._row(form, "output_median", "Output length", self.output_median)
        self.shared_prefix = _dspin(-1, 100, 0, " %", "share of requests that start with a shared system prompt", 5, "preset's")
        self._row(form, "shared_prefix_fraction", "Shared prefix", self.shared_prefix)

        # preview and apply -----------------------------------------------------------------------
        box, form = self._group("Memory math", outer)
        self.preview = QLabel()
        self.preview.setWordWrap(True)
        self.preview.setTextInteractionFlags(Qt.TextSelectableByMouse)
        form.addRow(self.preview)
        self.apply_button = QPushButton("Apply (rebuild the engine)")
        self.apply_button.setToolTip("rebuild the engine with these settings and start the workload (Ctrl+Return)")
        self.apply_button.setDefault(True)
        outer.addWidget(self.apply_button)
        outer.addStretch(1)
        for key, pairs in (choices or {}).items():
            for value, label in pairs:
                self.fields[key].addItem(label, value)
        let_combos_shrink(body)
        wheel_scrolls_panel(body)

        for widget in self.fields.values():
            signal = getattr(widget, "valueChanged", None) or getattr(widget, "currentIndexChanged", None) \
                or getattr(widget, "toggled", None)
            signal.connect(self.changed)
        notice_kept_values([w for w in self.fields.values() if isinstance(w, QAbstractSpinBox)], self._show_kept_value,
                           self._kept_value_mended)
        self.apply_button.clicked.connect(self.apply_requested)
        self.open_dir.clicked.connect(self._choose_model_dir)
        self.open_config.clicked.connect(self._choose_config)
        self.open_trace.clicked.connect(self._choose_trace)
        self.model.activated.connect(self._preset_chosen)
        self.workload.activated.connect(self._workload_chosen)

    def _show_kept_value(self, box: QAbstractSpinBox, reason: str) -> None:
        """Under the box, until the form is next checked: why what was typed did not stay."""
        self.show_notice(next(key for key, widget in self.fields.items() if widget is box), reason)

    def _kept_value_mended(self, box: QAbstractSpinBox) -> None:
        """A refused "5;" mended to the 5 kept changes no value: the form checks itself again."""
        if not self.errors[next(key for key, widget in self.fields.items() if widget is box)].isHidden():
            self.changed.emit()

    def show_notice(self, key: str, text: str) -> None:
        """One line under field key until the form is next checked: why a choice did not stay."""
        label = self.errors[key]
        label.setText(text)
        label.show()

    # layout helpers -------------------------------------------------------------------------------
    def _group(self, title: str, outer: QVBoxLayout):
        box = QGroupBox(title)
        form = QFormLayout(box)
        form.setFieldGrowthPolicy(QFormLayout.AllNonFixedFieldsGrow)
        outer.addWidget(box)
        return box, form

    @staticmethod
    def _wrap(layout) -> QWidget:
        holder = QWidget()
        layout.setContentsMargins(0, 0, 0, 0)
        holder.setLayout(layout)
        return holder

    def _row(self, form: QFormLayout, key: str, label: str, widget: QWidget) -> None:
        self.fields[key] = widget
        error = QLabel()
        error.setWordWrap(True)
        error.setStyleSheet("color: #e05252;")
        error.hide()
        self.errors[key] = error
        column = QVBoxLayout()
        column.setSpacing(1)
        column.addWidget(widget)
        column.addWidget(error)
        form.addRow(label, self._wrap(column))

    # choices and values ---------------------------------------------------------------------------
    def set_choices(self, models: list[str], hardware: list[str], workloads: list[str],
                    fallback: dict[str, str] | None = None) -> dict[str, str]:
        """New lists, keeping each selection that is still offered, without emitting `changed`.
        Returns {field: the name} of each selection that is gone (a deleted preset): that field
        now holds fallback[field] where it is offered, else the first name, and the app must say so."""
        lost = {}
        for key, combo, names in (("model", self.model, models), ("hardware", self.hardware, hardware),
                                  ("workload", self.workload, workloads)):
            current = combo.currentText()
            combo.blockSignals(True)
            combo.clear()
            combo.addItems(names)
            if current in names:
                combo.setCurrentText(current)
            else:
                if current:
                    lost[key] = current
                instead = (fallback or {}).get(key)
                if instead in names:
                    combo.setCurrentText(instead)
            combo.blockSignals(False)
        return lost

    def values(self) -> dict:
        return {
            "backend": self.backend.currentData(),
            "model": self.model.currentText(),
            "model_path": self.model_path,
            "config_path": self.config_path,
            "hardware": self.hardware.currentText(),
            "max_model_len": self.max_model_len.value() or None,
            "kv_cache_dtype": self.kv_cache_dtype.currentData(),
            "block_size": self.block_size.currentData(),
            "gpu_memory_utilization": self.gpu_memory_utilization.value(),
            "kv_cache_memory_bytes": int(self.kv_budget.value() * 1024**2) or None,
            "max_num_seqs": self.max_num_seqs.value() or None,
            "max_num_batched_tokens": self.max_num_batched_tokens.value() or None,
            "enable_prefix_caching": self.enable_prefix_caching.isChecked(),
            "enable_chunked_prefill": self.enable_chunked_prefill.isChecked(),
            "scheduling": self.scheduling.currentData(),
            "allocation": self.allocation.currentData(),
            "workload": self.workload.currentText(),
            "trace_path": self.trace_path,
            "num_requests": self.num_requests.value(),
            # only the box's special minimum means the preset's rate: a typed -0.5 goes on, to be refused
            "arrival_rate_per_s": (None if self.arrival_rate.value() == self.arrival_rate.minimum()
                                   else self.arrival_rate.value()),
            "trace_speedup": self.trace_speedup.value(),
            "prompt_median": self.prompt_median.value() or None,
            "output_median": self.output_median.value() or None,
            "shared_prefix_fraction": None if self.shared_prefix.value() < 0 else self.shared_prefix.value() / 100,
        }

    def set_values(self, values: dict, as_recorded: bool = False) -> None:
        """Fill the form without emitting `changed` per field (one `changed` at the end). A choice not
        offered leaves the live form's as it was; `as_recorded` (a replay's settings) shows it marked."""
        widgets = list(self.fields.values())
        for w in widgets:
            w.blockSignals(True)
        try:
            v = values
            for combo in (*(self.fields[key] for key in CHOICE_FIELDS), self.model, self.hardware, self.workload):
                _drop_shown_only(combo)
            for key in CHOICE_FIELDS:
                if key in v and v[key] is not None:
                    _select_shown(self.fields[key], v[key], by_data=True, add=as_recorded)
            for key, combo in (("model", self.model), ("hardware", self.hardware), ("workload", self.workload)):
                if key in v and v[key] is not None:
                    _select_shown(combo, str(v[key]), by_data=False, add=as_recorded)
            if "max_model_len" in v:
                self.max_model_len.setValue(v["max_model_len"] or 0)
            if "gpu_memory_utilization" in v:
                self.gpu_memory_utilization.setValue(v["gpu_memory_utilization"])
            if "kv_cache_memory_bytes" in v:
                self.kv_budget.setValue((v["kv_cache_memory_bytes"] or 0) / 1024**2)
            if "max_num_seqs" in v:
                self.max_num_seqs.setValue(v["max_num_seqs"] or 0)
            if "max_num_batched_tokens" in v:
                self.max_num_batched_tokens.setValue(v["max_num_batched_tokens"] or 0)
            if "enable_prefix_caching" in v:
                self.enable_prefix_caching.setChecked(v["enable_prefix_caching"])
            if "enable_chunked_prefill" in v:
                self.enable_chunked_prefill.setChecked(v["enable_chunked_prefill"])
            if "num_requests" in v:
                self.num_requests.setValue(v["num_requests"])
            if "arrival_rate_per_s" in v:
                self.arrival_rate.setValue(-1 if v["arrival_rate_per_s"] is None else v["arrival_rate_per_s"])
            if "trace_speedup" in v:
                self.trace_speedup.setValue(v["trace_speedup"])
            if "prompt_median" in v:
                self.prompt_median.setValue(v["prompt_median"] or 0)
            if "output_median" in v:
                self.output_median.setValue(v["output_median"] or 0)
            if "shared_prefix_fraction" in v:
                f = v["shared_prefix_fraction"]
                self.shared_prefix.setValue(-1 if f is None else f * 100)
            for key in ("model_path", "config_path", "trace_path"):
                if key in v:
                    setattr(self, key, v[key])
        finally:
            for w in widgets:
                w.blockSignals(False)
        refresh_count_suffixes(self)
        self._update_source_labels()
        self.changed.emit()

    # feedback from the app ------------------------------------------------------------------------
    def show_preview(self, text: str) -> None:
        self.preview.setText(text)

    def show_unused(self, key: str, reason: str | None) -> None:
        """Grey out field key where the target never reads it (reason: why, in its tooltip); None undoes it."""
        show_unused(self.fields[key], reason)

    def show_errors(self, errors: dict[str, str]) -> None:
        """field -> reason; every other field is cleared. Apply is refused while any remain."""
        for key, label in self.errors.items():
            message = errors.get(key)
            label.setVisible(bool(message))
            label.setText(message or "")
            self.fields[key].setStyleSheet("border: 1px solid #e05252;" if message else "")
        unplaced = [m for k, m in errors.items() if k not in self.errors]
        if unplaced:
            self.preview.setText("<span style='color:#e05252'>" + "<br>".join(unplaced) + "</span>")
        self.apply_button.setEnabled(not errors)

    # file choosers --------------------------------------------------------------------------------
    def _choose_model_dir(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Open a Hugging Face model folder")
        if path:
            if self.model_path is None:  # a preset picked later goes back to it (_preset_chosen)
                self._backend_before_folder = self.backend.currentData()
            self.model_path, self.config_path = path, None
            self.backend.setCurrentIndex(self.backend.findData("real"))
            self._update_source_labels()
            self.changed.emit()

    def _choose_config(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open a config.json", filter="config (*.json)")
        if path:
            self.config_path, self.model_path = path, None
            self.backend.setCurrentIndex(self.backend.findData("simulated"))
            self._update_source_labels()
            self.changed.emit()

    def _choose_trace(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open a trace CSV", filter="CSV (*.csv);;all files (*)")
        if path:
            refused = self.trace_check(path) if self.trace_check is not None else None
            if refused:  # the workload chosen before stays; the reason is said where the file was picked
                kept = f"trace {self.trace_path}" if self.trace_path else f"workload {self.workload.currentText()}"
                self.show_notice("workload", f"{refused}\nkept {kept}")
                return
            self.trace_path = path
            self._update_source_labels()
            self.changed.emit()

    # A choice in the list is made after Qt's currentIndexChanged (emitted while the opened folder,
    # config.json or trace still counted): `changed` again, else the editor kept the file's model and
    # Apply ran the preset chosen edited to that shape -- or, the same name chosen again, the file's
    # refusal stayed under a form that no longer held it.
    def _preset_chosen(self, _index: int) -> None:
        # the real backend came with the folder: a preset picked instead of it runs where the run
        # did before (a broken folder left simulated presets on the real backend with random weights)
        if self.model_path is not None and self._backend_before_folder and self.backend.currentData() == "real":
            self.backend.setCurrentIndex(self.backend.findData(self._backend_before_folder))
        self._backend_before_folder = None
        self.model_path = self.config_path = None
        self._update_source_labels()
        self.changed.emit()

    def _workload_chosen(self, _index: int) -> None:
        self.trace_path = None
        self._update_source_labels()
        self.changed.emit()

    def _update_source_labels(self) -> None:
        if self.model_path:
            self.source_label.setText(f"model folder: {self.model_path}")
        elif self.config_path:
            self.source_label.setText(f"config.json: {self.config_path}")
        else:
            self.source_label.setText("")
        self.trace_label.setText(f"trace: {self.trace_path}" if self.trace_path else "")
