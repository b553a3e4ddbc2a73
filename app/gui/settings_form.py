"""The Settings dock: the run form and the model & hardware editor, kept in step.

The editor shows the presets selected in the form; any change builds the run's config again, so a
refused value is shown in its field, with the reason, and the memory preview follows every edit.
Edited presets are saved as (and deleted from) the user's presets here.

Each number field's range is the one the command line checks (engine/checks.py CEILINGS, the
workload's limits): what a box cannot hold the engine would refuse anyway, and what it holds is
refused, if at all, with the reason in the field, never by an overflow in the arithmetic.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QAbstractSpinBox, QApplication, QMainWindow, QMessageBox

from kvscope.app.gui.panels import add_dock, tabbed
from kvscope.app.gui.run_settings import (
    MODEL_EDIT_FIELDS,
    SettingsError,
    build_run_config,
    field_of,
    memory_preview,
    hardware_unused,
    memory_share_unused,
    prefix_caching_unused,
    seed_unused,
    weights_unused,
    trace_reason,
    values_from_model,
)
from kvscope.app.gui.window_state import values_from_engine_info
from kvscope.app.lab.models.config_json import load_hf_config
from kvscope.app.lab.preset_edits import save_edited_preset
from kvscope.app.lab.presets import (
    THIS_MACHINE,
    delete_user_preset,
    load_hardware,
    load_model,
    preset_names,
    user_preset_names,
    user_presets_root,
)
from kvscope.app.lab.said_paths import said_path
from kvscope.app.lab.workload import MAX_ARRIVAL_RATE, MAX_REQUEST_TOKENS, MAX_REQUESTS, MAX_SPEEDUP
from kvscope.engine.checks import MAX_BYTES, MAX_RATE, ceiling
from kvscope.engine.config import DEFAULT_HARDWARE, DEFAULT_MODEL, ConfigError
from kvscope.engine.units import GiB
from kvscope.widgets.kept_value_notice import typed_refusal
from kvscope.widgets.preset_editor import PresetEditor
from kvscope.widgets.settings_panel import SettingsPanel, show_unused


MiB = 1024**2
QT_INT_MAX = 2**31 - 1  # a QSpinBox holds an int32
BOUND_NOTE = "\nat most "
NOT_APPLIED = "not applied: "  # how the window says an Apply was refused (MainWindow.apply_settings)


def form_bounds() -> dict[str, float]:
    """The largest value of each number field of the run form, in the unit its box shows."""
    return {
        "max_model_len": ceiling("max_model_len"), "max_num_batched_tokens": ceiling("max_num_batched_tokens"),
        "max_num_seqs": ceiling("max_num_seqs"), "kv_cache_memory_bytes": MAX_BYTES / MiB,  # the box counts MiB
        "num_requests": MAX_REQUESTS, "arrival_rate_per_s": MAX_ARRIVAL_RATE, "trace_speedup": MAX_SPEEDUP,
        "prompt_median": MAX_REQUEST_TOKENS, "output_median": MAX_REQUEST_TOKENS,
    }


def editor_bounds(editor: PresetEditor) -> dict:
    """The model and hardware editor's boxes -> their largest value, in the unit each shows."""
    bounds = {box: ceiling(name) for name, box in editor.model_boxes.items()}
    bounds.update({editor.memory_gib: MAX_BYTES / GiB, editor.bandwidth: MAX_RATE / 1e9, editor.flops: MAX_RATE / 1e12,
                   editor.gpu_count: ceiling("gpu_count")})
    return bounds


def bound_boxes(settings: SettingsPanel, editor: PresetEditor) -> None:
    """Every number box's maximum from the bounds the command line checks (a box keeps its
    minimum: 0 reads "default" where a field has one); the bound is in its tooltip."""
    boxes = {settings.fields[name]: high for name, high in form_bounds().items()}
    boxes.update(editor_bounds(editor))
    for box, high in boxes.items():
        whole = not hasattr(box, "decimals")
        high = min(int(high), QT_INT_MAX) if whole else float(high)
        box.setMaximum(high)
        shown_high = f"{high:,}" if whole else f"{high:,.0f}" if high < 1e15 else f"{high:g}"
        tip = box.toolTip().split(BOUND_NOTE)[0]
        unit = box.property("count_unit")  # a count's suffix is singular at 1; the bound is plural
        box.setToolTip(f"{tip}{BOUND_NOTE}{shown_high}{f' {unit}s' if unit else box.suffix()}, as the command line checks")


# the editor's boxes a refusal may name: the bandwidth's went to the Run tab's Hardware, out of sight
EDITOR_FIELDS = (*MODEL_EDIT_FIELDS, "gpu_count", "memory_bytes", "memory_bandwidth_bytes_per_s")


def editor_field(message: str) -> str | None:
    """The model or hardware editor field a refusal names first, None if it names none."""
    named = [(message.find(name), name) for name in EDITOR_FIELDS if name in message]
    return min(named)[1] if named else None


def _sources(values: dict) -> tuple:
    """What the editor's fields are read from: the model preset, folder or config.json, and the hardware."""
    return values["model"], values.get("model_path"), values.get("config_path"), values["hardware"]


def _parts_changed(before: tuple | None, now: tuple) -> frozenset:
    """The editor's halves whose source the form changed: the model's (preset, folder, config.json),
    the hardware's; both when the editor showed none."""
    if before is None:
        return frozenset({"model", "hardware"})
    return frozenset(part for part, changed in (("model", before[:3] != now[:3]), ("hardware", before[3] != now[3]))
                     if changed)


class SettingsForm:
    """``dock`` holds the two forms; ``current_config()`` is the run they describe, with the seed
    of the window's toolbar (``window.seed``), or None while a value is refused."""

    def __init__(self, window: QMainWindow, settings: SettingsPanel, editor: PresetEditor):
        self.window, self.settings, self.editor = window, settings, editor
        self.dock = add_dock(window, "Settings", Qt.LeftDockWidgetArea,
                             tabbed((settings, "Run"), (editor, "Model && hardware")))
        self._editor_shows = None  # the model (preset, folder or config.json) and hardware the editor shows
        self._editor_unread: set[str] = set()  # "model", "hardware" it could not read: it shows the ones before
        self.seed_reason: str | None = None  # why the run the form describes reads no seed
        self.refusal: tuple | None = None  # (tab index, the refused field's box, the reason) while one is refused
        self._before_replay: tuple | None = None  # while a recording shows: what the editor showed before it
        bound_boxes(settings, editor)
        settings.trace_check = lambda path: trace_reason(path, settings.num_requests.value())
        settings.changed.connect(self.changed)
        settings.apply_requested.connect(lambda: window.apply_settings(play=True))
        editor.edited.connect(self.changed)
        editor.save_requested.connect(self.save_user_preset)
        editor.delete_requested.connect(self.delete_user_preset)

    def start(self, values: dict) -> None:
        self.settings.set_choices(preset_names("models"), preset_names("hardware"), preset_names("workloads"))
        self.settings.set_values(values)
        self.show_selected_presets()
        self._list_user_presets()

    def current_config(self):
        """The RunConfig of the two forms; None (each refused value shown in its field) if there is none."""
        if self._presets_gone():
            return None
        values = self.settings.values()
        self.settings.show_unused("gpu_memory_utilization", memory_share_unused(values, self.editor.hardware_fields()))
        self.settings.show_unused("enable_prefix_caching", prefix_caching_unused(values))
        self.settings.show_unused("hardware", hardware_unused(values))
        self.editor.show_hardware_unused(hardware_unused(values))
        show_unused(self.editor.weight_dtype, weights_unused(values))
        try:
            # a pool the engine would refuse to build (too many blocks) is refused there, in its field
            config = build_run_config(self.settings.values(), self.editor.model_fields(),
                                      self.editor.hardware_fields(), seed=self.window.seed.value())
        except SettingsError as exc:
            self.show_refused(exc.errors, exc.unread)
            return None
        except ConfigError as exc:
            field = field_of(str(exc))
            self.show_refused({field if field in self.settings.errors else "kv_cache_memory_bytes": str(exc)})
            return None
        self.show_refused({})
        self.seed_reason = seed_unused(config)
        self.window.show_run_controls_use()
        self.settings.show_preview(memory_preview(config))
        self.forget_refusal_said()
        return config

    def _presets_gone(self) -> bool:
        """A preset of the user's that the form holds, deleted on disk while the window ran (by a
        second kvscope, a file manager): the lists are read again and the form says what it holds
        now. Apply said "unknown model preset 'mine'" beside a list still offering mine, and Delete
        "'mine' is not one of your presets"."""
        values = self.settings.values()
        try:
            gone = [values[key] for key, kind in (("model", "models"), ("hardware", "hardware"),
                                                  ("workload", "workloads"))
                    if values[key] and values[key] not in preset_names(kind)]
        except (ConfigError, OSError):  # an unreadable folder: said when the lists are read
            return False
        if not gone:
            return False
        said = (f"your preset {', '.join(gone)} is no longer in {said_path(user_presets_root())} (deleted outside "
                "this window): the form holds another now, check it and Apply again")
        self._user_presets_changed(said)
        key = next(key for key in ("model", "hardware", "workload") if values[key] in gone)
        self.refusal = (0, self.settings.fields.get(key, self.settings.preview), said)  # Apply says it, here
        return True

    def forget_refusal_said(self) -> None:
        """An Apply's "not applied: ..." went on standing for its ten seconds after the field was
        mended, or the next Apply taken, hiding the new run's status; it goes once nothing is refused."""
        bar = self.window.statusBar()
        if bar.currentMessage().startswith(NOT_APPLIED):
            bar.clearMessage()

    def take_typed_value(self) -> str | None:
        """Apply pressed while the keyboard is still in a number box of the form, the editor or the
        seed takes the number typed there, as Enter would: a box keeps typed text as text until Enter
        or Tab, and Ctrl+Return applied the value it showed before (2048 typed, the default run).
        Text the box cannot take is not applied: the reason under its field (the seed's: the status
        bar only), returned; the typed text stays, to be mended."""
        box = QApplication.focusWidget()
        while box is not None and not isinstance(box, QAbstractSpinBox):
            box = box.parentWidget()
        seed = self.window.seed
        if box is None or not (box is seed or self.settings.isAncestorOf(box) or self.editor.isAncestorOf(box)):
            return None
        reason = typed_refusal(box)
        if reason is None:
            box.interpretText()  # its valueChanged checks the form again with the number
        elif self.editor.isAncestorOf(box):
            self.editor.show_notice(reason)
        elif box is not seed:
            self.settings.show_notice(next(key for key, field in self.settings.fields.items() if field is box), reason)
        return reason

    def show_refused(self, errors: dict[str, str], unread: frozenset = frozenset()) -> None:
        """Each reason in the field it is about: a model or hardware field edited on the second tab
        (0 KV heads, say) there, the rest in the run form; remembers the first for reveal_refusal.
        A model or hardware that could not be read (unread: a config.json with hidden_size NaN) is
        refused at its choice in the run form, where the file was picked: the editor's boxes still
        show the model before it, and none of them is the cause."""
        run_errors, editor_error = {}, None
        for key, message in errors.items():
            edited = editor_field(message) if key in ("model", "hardware") and key not in unread else None
            if edited and editor_error is None:
                editor_error = (edited, message)
            else:
                run_errors[key] = message
        self.settings.show_errors(run_errors)
        box = self.editor.show_error(*(editor_error or (None,)))
        if editor_error:
            self.settings.apply_button.setEnabled(False)
        first = next((key for key in self.settings.fields if key in run_errors), None)
        if first is not None:
            self.refusal = (0, self.settings.fields[first], run_errors[first])
        elif run_errors:  # a reason no field owns is shown with the memory math
            self.refusal = (0, self.settings.preview, next(iter(run_errors.values())))
        elif editor_error:
            self.refusal = (1, box, editor_error[1])
        else:
            self.refusal = None

    def reveal_refusal(self) -> str | None:
        """Show the user the refused field: its tab, scrolled into view, focused. Returns the reason
        (None when nothing is refused)."""
        if self.refusal is None:
            return None
        tab, box, message = self.refusal
        self.dock.show()
        self.dock.raise_()
        tabs = self.dock.widget()
        tabs.setCurrentIndex(tab)
        tabs.currentWidget().ensureWidgetVisible(box)
        box.setFocus(Qt.FocusReason.OtherFocusReason)
        return message

    def show_recorded(self, info) -> None:
        """The (disabled) forms show what a replayed recording ran with: the run form its settings,
        the editor its model's and hardware's fields as recorded. The presets of those names were
        read again instead: a config.json's model or another machine's preset, not here, left the
        live run's in the form, or were said to be "deleted outside this window" and replaced."""
        if self._before_replay is None:
            self._before_replay = (self._editor_shows, self._editor_state())
        # changed() checks nothing meanwhile
        self.settings.set_values(values_from_engine_info(info), as_recorded=True)
        try:
            model, hw = info.model, info.hardware
            self.editor.set_model(model.name, values_from_model(model))
            self.editor.set_hardware(hw.name, hw.memory_bytes, hw.memory_bandwidth_bytes_per_s, hw.flops_for("fp16"),
                                     hw.gpu_count)
        except (AttributeError, KeyError, TypeError, ValueError):  # a header this kvscope cannot rebuild
            pass
        self.settings.show_errors({})
        self.editor.show_error(None)

    def leave_recorded(self, values: dict) -> None:
        """Back to the live run: the form's values and the editor's fields (edits too) as they were."""
        shows, (model, hardware) = self._before_replay
        self._before_replay = None
        self.editor.set_model(*model)
        self.editor.set_hardware(*hardware)
        self._editor_shows = shows
        self.settings.set_values(values)

    def _editor_state(self) -> tuple:
        editor = self.editor
        fields = editor.hardware_fields()
        return ((editor.model_name.text(), editor.model_fields()),
                (editor.hardware_name.text(), fields["memory_bytes"], fields["memory_bandwidth_bytes_per_s"],
                 fields["flops_16bit"], fields["gpu_count"]))

    def changed(self) -> None:
        if self._before_replay is not None:  # a recording's settings: shown, not a run to check
            return
        values = self.settings.values()
        # The editor shows the selected presets' fields; a new selection (by hand or by a reset of the
        # form) replaces them, so stale edits never ride along under another preset's name -- only the
        # half chosen anew: other hardware picked replaced the model's edits too (KV heads 1 back to 8)
        if _sources(values) != self._editor_shows:
            self.show_selected_presets(_parts_changed(self._editor_shows, _sources(values)))
            return
        if self._editor_unread:  # read again: the same config.json, mended and picked again, is a new model
            self._fill_editor(values, self._editor_unread)
        self.current_config()

    def show_selected_presets(self, parts: frozenset = frozenset({"model", "hardware"})) -> None:
        """Fill the editor's parts ("model", "hardware") from what is selected in the form: a model
        folder or a config.json chosen in it, else the model preset. Else the editor would keep the
        previous preset's shape, and that shape would ride along as an "edit" of the folder's model."""
        values = self.settings.values()
        self._editor_shows = _sources(values)
        self._fill_editor(values, set(parts))
        self.current_config()

    def _fill_editor(self, values: dict, parts: set[str]) -> None:
        """Fill the editor's model and/or hardware (parts); what cannot be read keeps the editor's
        fields (the form says why) and is tried again at the next change -- only it, so edits to
        the other half are kept."""
        unread = set(self._editor_unread) - parts
        if "model" in parts:
            try:
                source = values.get("model_path") or values.get("config_path")
                model = load_hf_config(source) if source else load_model(values["model"])
                self.editor.set_model(model.name, values_from_model(model))
            except Exception:  # noqa: BLE001 - unreadable: the editor keeps its fields, the form says why
                unread.add("model")
        if "hardware" in parts:
            try:
                hw = load_hardware(values["hardware"])
                self.editor.set_hardware(hw.name, hw.memory_bytes, hw.memory_bandwidth_bytes_per_s,
                                         hw.flops_for("fp16"), hw.gpu_count)
            except Exception:  # noqa: BLE001
                unread.add("hardware")
        self._editor_unread = unread

    def save_user_preset(self, kind: str, name: str) -> None:
        if not name:  # Qt's strings drop what they cannot hold: "" may be what is left of what was typed
            QMessageBox.warning(self.window, "Preset not saved",
                                "the name is empty once the characters a file name cannot hold are removed (or "
                                "none was given); name it with letters, digits, '-', '_' and '.'")
            return
        if not self._may_replace(kind, name):
            self.window.statusBar().showMessage(f"not saved: your preset {name} is kept as it was", 5000)
            return
        values = self.settings.values()
        # the model the editor shows: an opened config.json or folder, else the preset chosen
        model_file = values.get("model_path") or values.get("config_path")
        base, edits = ((values["model"], self.editor.model_fields()) if kind == "models"
                       else (values["hardware"], self.editor.hardware_fields()))
        try:
            path = save_edited_preset(kind, name, base, edits, model_file if kind == "models" else None)
        except ConfigError as exc:
            QMessageBox.warning(self.window, "Preset not saved", str(exc))
            return
        self._user_presets_changed(f"saved {name} to {path}")

    def _may_replace(self, kind: str, name: str) -> bool:
        """A name the user already has is asked about: saved over without a word, the preset's own
        fields were gone."""
        try:
            taken = name in user_preset_names(kind)
        except (ConfigError, OSError):  # an unreadable folder is said when the save fails
            return True
        if not taken:
            return True
        what = "model" if kind == "models" else "hardware"
        answer = QMessageBox.question(
            self.window, "Replace preset?",
            f"You already have a {what} preset named {name}. Replace it with the fields shown in the editor?",
            QMessageBox.Yes | QMessageBox.No, QMessageBox.No)
        return answer == QMessageBox.Yes

    def delete_user_preset(self, kind: str, name: str) -> None:
        try:
            delete_user_preset(kind, name)
        except ConfigError as exc:
            if self._listed_but_gone(kind, name):  # deleted on disk meanwhile: the list is what was stale
                self._user_presets_changed(f"your preset {name} was already gone from {said_path(user_presets_root())} "
                                           "(deleted outside this window): taken off the list")
                return
            QMessageBox.warning(self.window, "Preset not deleted", str(exc))
            return
        self._user_presets_changed(f"deleted your preset {name}")

    @staticmethod
    def _listed_but_gone(kind: str, name: str) -> bool:
        try:
            return name not in user_preset_names(kind)
        except (ConfigError, OSError):
            return False

    def _user_presets_changed(self, message: str) -> None:
        backend = self.settings.values()["backend"]
        fallback = {"model": DEFAULT_MODEL, "hardware": THIS_MACHINE if backend == "real" else DEFAULT_HARDWARE}
        lost = self.settings.set_choices(preset_names("models"), preset_names("hardware"),
                                         preset_names("workloads"), fallback)
        self._list_user_presets()
        if lost:
            # the form held the deleted preset: it and the editor now show another, and say so,
            # where Apply would have run the deleted one's fields under another's name
            self.changed()
            for key, gone in lost.items():
                now = getattr(self.settings, key).currentText()
                notice = f"your preset {gone} was deleted: now {now}"
                self.settings.show_notice(key, notice)
                message = f"{message}; the form's {key} is now {now}"
        self.window.statusBar().showMessage(message, 5000)

    def _list_user_presets(self) -> None:
        try:
            names = ([("models", n) for n in user_preset_names("models")]
                     + [("hardware", n) for n in user_preset_names("hardware")])
        except (ConfigError, OSError) as exc:  # the folder made unreadable, or a file, while the window ran
            reason = getattr(exc, "strerror", None) or exc
            self.window.statusBar().showMessage(f"your presets cannot be listed: {reason}", 10000)
            names = []
        self.editor.set_user_presets(names)
