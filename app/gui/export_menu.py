"""File > Export: every live plot as PNG or SVG, the panels registered for it as PNG, the replayed
recording as a Perfetto trace, and the comparison's plots and results table. Each asks for a path
with the window's file dialog and says in a dialog why a file could not be written."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtGui import QAction
from PySide6.QtWidgets import QMenu, QMessageBox

from kvscope.app.gui.export_files import ExportError, default_name, export_perfetto, files_read, writable
from kvscope.app.gui.view_export import CSV_FORMAT, PLOT_FORMATS, PNG_FORMAT, export_plot, export_widget_png
from kvscope.app.lab.said_paths import said_path
from kvscope.widgets.compare_plots import PLOTS as COMPARE_PLOTS
from kvscope.widgets.live_plots import TITLES as PLOT_TITLES


class ExportMenu:
    """The Export menu's actions (``actions``, by key: "plot:<name>", a panel's name, "perfetto",
    "compare:<name>", "results") and what each does. The Perfetto trace is enabled while a
    recording is open, the comparison's entries once a comparison is. No export may overwrite a
    file the window reads (``inputs``)."""

    def __init__(self, window, menu: QMenu):
        self.window = window
        self.actions: dict[str, QAction] = {}
        for name in window.plots.plots:
            title = PLOT_TITLES.get(name, name)
            self._add(menu, f"plot:{name}", f"Plot: {title} (PNG or SVG)...",
                      f"save the {title} plot as a PNG image or an SVG drawing", lambda n=name: self.ask_plot(n))
        menu.addSeparator()
        for panel in window.panels.exported_as_png():
            self._add(menu, panel.name, f"{panel.title} (PNG)...",
                      f"save the {panel.title.lower()} as it is on screen, with its legend, as a PNG image",
                      lambda k=panel.name: self.ask_view(k))
        menu.addSeparator()
        self._add(menu, "perfetto", "Recording as a Perfetto trace (JSON)...",
                  "the replayed recording as a Chrome / Perfetto trace: steps, requests and events on a timeline "
                  "(ui.perfetto.dev)", self.ask_perfetto, enabled=False)
        for name in COMPARE_PLOTS:
            title = compare_plot_title(name)
            self._add(menu, f"compare:{name}", f"Comparison plot: {title} (PNG or SVG)...",
                      f"save the comparison's {title} plot, every configuration on it, as PNG or SVG",
                      lambda n=name: self.ask_compare_plot(n), enabled=False)
        menu.aboutToShow.connect(self._show_compare_entries)
        self._add(menu, "results", "Results table (CSV)...",
                  "save the comparison's results table, ratios included, as CSV", self.ask_results, enabled=False)

    def _show_compare_entries(self) -> None:
        """The comparison's entries name the plots it shows: the fourth plot (the quantity a scenario
        asks about) was "Comparison plot:  (PNG or SVG)...", blank, offered for every comparison, and
        asked for a path ("comparison .png") to say then that the plot was not shown; the output
        tokens' plot likewise where the asked one takes its place."""
        compare = self.window.compare
        if compare is None:
            return
        for name in COMPARE_PLOTS:
            title = compare_plot_title(name, compare.plots.asked_title)
            action = self.actions[f"compare:{name}"]
            action.setText(f"Comparison plot: {title} (PNG or SVG)...")
            action.setEnabled(compare.plots.plots[name].isVisible())

    def _add(self, menu: QMenu, key: str, text: str, tip: str, slot, enabled: bool = True) -> None:
        action = menu.addAction(text)
        action.setStatusTip(tip)
        action.triggered.connect(lambda _=False: slot())
        action.setEnabled(enabled)
        self.actions[key] = action

    def inputs(self) -> dict:
        """The files the window reads ({what: path}): the open recording, the trace, a config.json, a
        model folder's files; those the form has selected and those the running engine was built from
        (the form may have moved on to others since the last Apply)."""
        window = self.window
        settings, config = window.settings, window.config
        # the file File > Record is writing (an export over it, named .png, replaced it: the run's
        # recording was gone, "saved" said), and an attached server's recording on its replay page
        attached = getattr(window.attached, "recording", None)
        return files_read(
            {"recording": window.replay_path, "trace": settings.trace_path, "config.json": settings.config_path,
             "running trace": getattr(getattr(config, "workload", None), "trace_path", None),
             "recording in progress": window.state.recording_path if window.record_action.isChecked() else None,
             "server's recording": str(attached.path) if attached is not None else None},
            {"model folder": settings.model_path, "running model folder": getattr(config, "model_path", None)})

    def _save(self, title: str, default: str, formats: str, work) -> bool:
        """Ask for a path (the window's dialog, which tests replace), write it, report the outcome."""
        path = self.window._ask_save_path(title, default, formats)
        if path is None:
            return False
        try:
            written = work(path)
        except ExportError as exc:
            QMessageBox.warning(self.window, "Not saved", str(exc))
            return False
        # a name with a newline or a right-to-left override in it, said raw, broke or reversed the line
        shown = said_path(written) if isinstance(written, Path) else written
        self.window.statusBar().showMessage(f"saved {shown}", 5000)
        return True

    def _off_screen(self, view, title: str) -> bool:
        """Whether the live run's view is off screen, said in a dialog: on the comparison's page (or with
        its dock closed) the live block map, timeline or plot was saved as the user could not see it,
        where the menu says "as it is on screen" -- the comparison's own plots have their entries."""
        if view.isVisible():
            return False
        QMessageBox.warning(self.window, "Not saved", f"the {title} is not on screen: it is the Live run page's "
                            "and shows there (View opens its dock if it is closed); the comparison's plots are under "
                            "Export > Comparison plot")
        return True

    def ask_plot(self, name: str) -> bool:
        title = PLOT_TITLES.get(name, name)
        plot = self.window.plots.plots[name]
        if self._off_screen(self.window.plots, f"{title} plot"):
            return False
        return self._save(f"Save the {title} plot", default_name(title, ".png"), PLOT_FORMATS,
                          lambda path: export_plot(plot, path, self.inputs()))

    def ask_view(self, key: str) -> bool:
        panels = self.window.panels
        widget, title = panels.views[key], panels.panel(key).title
        if self._off_screen(widget, title.lower()):
            return False
        return self._save(f"Save the {title.lower()}", default_name(title, ".png"), PNG_FORMAT,
                          lambda path: export_widget_png(widget, path, self.inputs()))

    def ask_perfetto(self) -> bool:
        recording = self.window.replay_path
        if recording is None:
            return False
        return self._save("Save a Perfetto trace", default_name(Path(recording).stem, ".json"),
                          "Chrome / Perfetto trace (*.json)",
                          lambda path: export_perfetto(recording, path, self.inputs()))

    def ask_compare_plot(self, name: str) -> bool:
        compare = self.window.compare
        if compare is None:
            return False
        title = compare_plot_title(name, compare.plots.asked_title)
        if not compare.plots.plots[name].isVisible():  # said before a path is asked for, not after
            shown = "; ".join(compare_plot_title(key, compare.plots.asked_title)
                              for key, plot in compare.plots.plots.items() if plot.isVisible())
            QMessageBox.warning(self.window, "Not saved", f"this comparison has no '{title}' plot on screen; "
                                f"it shows: {shown}")
            return False
        return self._save(f"Save the comparison's {title} plot", default_name(f"comparison {title}", ".png"),
                          PLOT_FORMATS, lambda path: export_plot(compare.plots.plots[name], path, self.inputs()))

    def ask_results(self) -> bool:
        compare = self.window.compare
        if compare is None or compare.results is None:
            QMessageBox.information(self.window, "No results yet", "Open a scenario or a comparison first: "
                                    "the table fills in as it runs.")
            return False
        def save_table(path):
            writable(path, self.inputs())
            return compare.export_table_csv(path)  # written whole (view_export.export_csv)

        return self._save("Save the results table", default_name("results", ".csv"), CSV_FORMAT, save_table)


def compare_plot_title(name: str, asked_title: str = "") -> str:
    """A comparison plot's name in the menu and its dialogs; the fourth is titled by the scenario."""
    if name == "asked":
        return asked_title or "Scenario's question"
    return COMPARE_PLOTS[name][0]
