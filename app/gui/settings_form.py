"""The Settings dock: the run form and the model & hardware editor, kept in step.

The editor shows the presets selected in the form; any change builds the run's config again, so a
refused value is shown in its field, with the reason, and the memory preview follows every edit.
Edited presets are saved as (and deleted from) the user's presets here.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMainWindow, QMessageBox

from kvscope.app.gui.panels import add_dock, tabbed
from kvscope.app.gui.run_settings import SettingsError, build_run_config, memory_preview, values_from_model
from kvscope.app.lab.preset_edits import save_edited_preset
from kvscope.app.lab.presets import delete_user_preset, load_hardware, load_model, preset_names, user_preset_names
from kvscope.engine.config import ConfigError
from kvscope.widgets.preset_editor import PresetEditor
from kvscope.widgets.settings_panel import SettingsPanel


class SettingsForm:
    """``dock`` holds the two forms; ``current_config()`` is the run they describe, with the seed
    of the window's toolbar (``window.seed``), or None while a value is refused."""

    def __init__(self, window: QMainWindow, settings: SettingsPanel, editor: PresetEditor):
        self.window, self.settings, self.editor = window, settings, editor
        self.dock = add_dock(window, "Settings", Qt.LeftDockWidgetArea,
                             tabbed((settings, "Run"), (editor, "Model && hardware")))
        self._editor_shows = (None, None)  # the (model, hardware) presets the editor was filled from
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
        try:
            config = build_run_config(self.settings.values(), self.editor.model_fields(),
                                      self.editor.hardware_fields(), seed=self.window.seed.value())
        except SettingsError as exc:
            self.settings.show_errors(exc.errors)
            return None
        self.settings.show_errors({})
        self.settings.show_preview(memory_preview(config))
        return config

    def changed(self) -> None:
        values = self.settings.values()
        # The editor shows the selected presets' fields; a new selection (by hand or by a reset of the
        # form) replaces them, so stale edits never ride along under another preset's name.
        if (values["model"], values["hardware"]) != self._editor_shows:
            self.show_selected_presets()
            return
        self.current_config()

    def show_selected_presets(self) -> None:
        """Fill the editor from the model and hardware presets selected in the form."""
        values = self.settings.values()
        self._editor_shows = (values["model"], values["hardware"])
        try:
            model = load_model(values["model"])
            self.editor.set_model(model.name, values_from_model(model))
        except Exception:  # noqa: BLE001 - a local folder or config: the editor keeps its fields
            pass
        try:
            hw = load_hardware(values["hardware"])
            self.editor.set_hardware(hw.name, hw.memory_bytes, hw.memory_bandwidth_bytes_per_s, hw.flops_for("fp16"),
                                     hw.gpu_count)
        except Exception:  # noqa: BLE001
            pass
        self.changed()

    def save_user_preset(self, kind: str, name: str) -> None:
        values = self.settings.values()
        base, edits = ((values["model"], self.editor.model_fields()) if kind == "models"
                       else (values["hardware"], self.editor.hardware_fields()))
        try:
            path = save_edited_preset(kind, name, base, edits)
        except ConfigError as exc:
            QMessageBox.warning(self.window, "Preset not saved", str(exc))
            return
        self._user_presets_changed(f"saved {name} to {path}")

    def delete_user_preset(self, kind: str, name: str) -> None:
        try:
            delete_user_preset(kind, name)
        except ConfigError as exc:
            QMessageBox.warning(self.window, "Preset not deleted", str(exc))
            return
        self._user_presets_changed(f"deleted your preset {name}")

    def _user_presets_changed(self, message: str) -> None:
        self.settings.set_choices(preset_names("models"), preset_names("hardware"), preset_names("workloads"))
        self._list_user_presets()
        self.window.statusBar().showMessage(message, 5000)

    def _list_user_presets(self) -> None:
        self.editor.set_user_presets([("models", n) for n in user_preset_names("models")]
                                     + [("hardware", n) for n in user_preset_names("hardware")])
