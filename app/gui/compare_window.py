"""The comparison page: 2 to 4 configurations on the identical workload, side by side on one clock.

Each configuration has a column: a header with its live numbers and its block map. Below, the
plots put every configuration on the same axes, and the results table gives each key metric with
its ratio to the first configuration. A guided scenario adds its strip on top: the question, the
guess committed before the run, and the measured answer revealed when the run is over.

The engines run in a process of their own (a ComparisonSession behind a SessionHost, as every
engine the window shows); a frame timer here takes the latest frame and hands plain snapshots and
arrays to the views.
"""

from __future__ import annotations

import traceback
from pathlib import Path

import numpy as np
from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QGridLayout,
    QLabel,
    QSplitter,
    QStackedWidget,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from kvscope.widgets.compare_plots import ComparePlots, configuration_colors
from kvscope.widgets.palette import DARK, Theme
from kvscope.widgets.results_table import ResultRow, ResultsTable
from kvscope.widgets.scenario_panel import ScenarioPanel
from kvscope.widgets.shown_label import shown_label

from kvscope.app.host.comparison import ComparisonSession
from kvscope.app.host.points import POINT_FIELDS
from kvscope.app.host.process_host import SessionHost
from kvscope.app.lab.compare import QUALITY_FIELDS
from kvscope.engine.config import ConfigError
from kvscope.app.gui.compare_layout import (  # noqa: F401 - the shares: tests
    LEGEND_CLEARANCE_PX, REVEALED_COLUMNS_SHARE, CompareLayout)
from kvscope.app.gui.compare_metrics import (  # noqa: F401 - METRIC_ROWS: tests
    METRIC_ROWS, asked_plot, asked_values, building_text, result_rows)
from kvscope.app.gui.config_column import ConfigColumn, block_legend_html
from kvscope.app.gui.error_box import ErrorBox
from kvscope.app.gui.scenario_verdict import guess_verdict
from kvscope.app.gui.view_export import export_csv

FRAME_INTERVAL_MS = 33  # four block maps at 30 frames a second read as smooth
# ... except while a real model runs: its torch threads hold both cores, and every frame the page
# draws (and the session builds) is taken from them. A real model steps a few times a second per
# configuration, so 5 frames a second show every change the eye can follow. Paused or stepped by
# hand, frames come at FRAME_INTERVAL_MS: a step shows at once and keys are never kept waiting.
REAL_PLAYING_FRAME_INTERVAL_MS = 200


class _Columns:
    """A configuration's plot points, grown in place (appends amortised), and the output tokens
    generated since the start at each (summed as points arrive, not over the run every frame)."""

    def __init__(self):
        self.data = np.zeros((1024, len(POINT_FIELDS) + 1))
        self.size = 0

    def extend(self, points: np.ndarray) -> None:
        """points: a frame's POINT_DTYPE array (host/points.py)."""
        need = self.size + len(points)
        if need > len(self.data):
            grown = np.zeros((max(need, 2 * len(self.data)), self.data.shape[1]))
            grown[: self.size] = self.data[: self.size]
            self.data = grown
        for i, name in enumerate(POINT_FIELDS):
            self.data[self.size:need, i] = points[name]
        before = self.data[self.size - 1, -1] if self.size else 0.0
        self.data[self.size:need, -1] = before + np.cumsum(points["output_tokens"])
        self.size = need

    def column(self, name: str) -> np.ndarray:
        return self.data[: self.size, POINT_FIELDS.index(name)]

    def output_tokens_so_far(self) -> np.ndarray:
        return self.data[: self.size, -1]


class CompareView(CompareLayout, QWidget):
    """Open a comparison with ``open_comparison(spec, ...)``; Space / Right / R reach it through
    ``toggle_play``, ``step_once`` and ``restart``."""

    finished = Signal()  # every configuration finished and the final table is shown
    play_state_changed = Signal(bool)
    columns_rebuilt = Signal()  # new block maps: a window in demo mode scales their text
    status_changed = Signal(str)  # what the comparison is doing, for the window's status bar

    def __init__(self, parent=None, theme: Theme = DARK):
        super().__init__(parent)
        self._theme = theme
        self.host: SessionHost | None = None  # the comparisons' process, from the first one opened on
        self.scenario = None
        self.info: dict | None = None
        self.results = None  # the latest ComparisonResult
        self.done = False
        self.revealed: tuple | None = None  # (answer text, verdict text) once revealed
        self._reveal_shown = False  # the results laid out once the runs ended (a plain comparison too)
        self.errors_shown: list[str] = []
        self.error_box = ErrorBox(self)
        self.status_text = ""
        self.series: list[_Columns] = []
        self.finished_counts: list[int] = []
        self.latest_snapshots: list = []
        # per configuration, its fullest moment so far: (KV usage, waiting), snapshot, clock, finished
        self.decisive: list = []
        self.asked = None  # the AskedPlot of the open scenario's answer, where it has one
        self.asked_series: list = []  # per configuration, (clocks, values) of that answer measured so far
        self.speed = 1.0
        self._playing = False
        self._real_backend = False  # a configuration of the open comparison runs a real model

        self.panel = ScenarioPanel(theme=theme)
        self.panel.guess_committed.connect(self._guess_committed)
        self.panel.hide()
        self.title = QLabel()
        self.title.setTextFormat(Qt.PlainText)
        self.title.setWordWrap(True)  # one line of a long title made the page, and the window, as wide
        self.block_legend = QLabel(block_legend_html(theme))
        self.block_legend.setTextFormat(Qt.RichText)
        self.block_legend.setWordWrap(True)
        self.block_legend.setToolTip("used: holds tokens of a running request; shared: referenced by several "
                                     "requests (a common prefix); cached: free but holding a reusable prefix; "
                                     "reserved: held by a request, no token written yet; free: empty")
        self.columns_box = QWidget()
        columns_layout = QVBoxLayout(self.columns_box)
        columns_layout.setContentsMargins(0, 0, 0, LEGEND_CLEARANCE_PX)  # the splitter's grip sat on the legend
        columns_layout.setSpacing(2)
        grid_box = QWidget()
        self.columns_grid = QGridLayout(grid_box)
        self.columns_grid.setContentsMargins(0, 0, 0, 0)
        self.columns_grid.setSpacing(6)
        columns_layout.addWidget(grid_box, 1)
        self.building_note = QLabel()  # until the comparison's process has built them: building_text
        self.building_note.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.building_note.setWordWrap(True)
        self.building_note.hide()
        columns_layout.addWidget(self.building_note)
        columns_layout.addWidget(self.block_legend)
        self.columns: list[ConfigColumn] = []
        self.plots = ComparePlots(theme=theme)
        self.table = ResultsTable(theme=theme)
        self.table.setToolTip("each configuration's results; the ratio columns divide by the first configuration")

        # Wide windows show the plots and the table side by side; narrow ones (a 1280x720
        # projector) give each the full width in tabs, and the reveal turns to the table.
        self.bottom_split = QSplitter(Qt.Horizontal)
        self.bottom_tabs = QTabWidget()
        self.bottom_tabs.setDocumentMode(True)
        self._wide: bool | None = None
        self._sized = False
        self._table_fitted = False
        self.bottom = QStackedWidget()
        self.bottom.setContentsMargins(0, LEGEND_CLEARANCE_PX // 2, 0, 0)  # the plots' legend, under the grip
        self.bottom.addWidget(self.bottom_tabs)
        self.bottom.addWidget(self.bottom_split)
        self.split = QSplitter(Qt.Vertical)
        self.split.addWidget(self.columns_box)
        self.split.addWidget(self.bottom)
        self.split.setStretchFactor(0, 3)
        self.split.setStretchFactor(1, 2)
        self.split.setChildrenCollapsible(False)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.setSpacing(4)
        layout.addWidget(self.panel)
        layout.addWidget(self.title)
        layout.addWidget(self.split, 1)
        self._arrange(wide=False)

        self.timer = QTimer(self)
        self.timer.setInterval(FRAME_INTERVAL_MS)
        self.timer.timeout.connect(self.on_frame)
        # The page takes the focus when a comparison opens, so a presenter's keys (Space, digits)
        # reach the window instead of the guess box; a click in the box types a guess.
        self.setFocusPolicy(Qt.StrongFocus)

    # -- opening -----------------------------------------------------------------------------------
    def open_comparison(self, spec, title: str, scenario_texts: dict | None = None, scenario=None,
                        play: bool = False) -> None:
        """spec: a lab.compare.ComparisonSpec, built into engines in the comparisons' process (one
        for every comparison this view opens: a real model loaded once serves the next ones too).
        scenario_texts, if given, are the ScenarioPanel's set_scenario arguments; a scenario's run
        waits for the guess."""
        self.scenario = scenario
        self.info, self.results, self.done, self.revealed = None, None, False, None
        self._reveal_shown = False
        self._real_backend = False  # until its first frame says which backends it runs
        self._title = shown_label(title, 120) if scenario_texts is None else ""
        self._title_detail = ""
        self.title.setText(self._title)  # a scenario's strip has its title
        if scenario_texts is not None:
            self.panel.set_scenario(**scenario_texts)
            self.panel.show()
        else:
            self.panel.hide()
        self._show_veiled_parts()
        self.table.set_results([], [])
        if not self._wide:
            self.bottom_tabs.setCurrentWidget(self.plots)  # the last reveal turned to the table
        self.plots.clear()  # the last reveal's moment line and axis ranges stood on the next question
        self.plots.set_configurations([])
        self.asked = asked_plot(scenario.reveal_from) if scenario is not None else None
        self.plots.set_asked_plot(*(self.asked.title, self.asked.unit, self.asked.tip) if self.asked else (None,))
        self._set_columns([])
        self.status_text = "building the configurations ..."
        self.status_changed.emit(self.status_text)
        self.building_note.setText(building_text(spec))
        self.building_note.show()
        if self.host is None:
            self.host = SessionHost(ComparisonSession, name="comparison")
        self.host.set_speed(self.speed)
        self.host.apply(spec, play=play and scenario is None)
        self._set_playing(False)
        self.timer.start()
        self.setFocus()

    def _set_columns(self, labels: list[str], details: list[str] | None = None) -> None:
        while self.columns:
            column = self.columns.pop()
            self.columns_grid.removeWidget(column)
            self.columns_grid.setColumnStretch(len(self.columns), 0)
            column.deleteLater()
        colors = configuration_colors(self._theme)
        # One row, even of four: a 2 x 2 grid halves every block map's height, and height is what
        # a 16:9 screen lacks. What all configurations share is said once, in the title.
        shared = details is not None and len(set(details)) == 1
        for i, label in enumerate(labels):
            column = ConfigColumn()
            column.block_map.set_theme(self._theme)
            column.set_config(label, "" if shared or not details else details[i], colors[i % len(colors)])
            self.columns_grid.addWidget(column, 0, i)
            self.columns_grid.setColumnStretch(i, 1)
            self.columns.append(column)
        self.series = [_Columns() for _ in labels]
        self.finished_counts = [0] * len(labels)
        self.latest_snapshots = [None] * len(labels)
        self.decisive = [None] * len(labels)
        self.asked_series = [([], []) for _ in labels]

    # -- controls ------------------------------------------------------------------------------------
    @property
    def playing(self) -> bool:
        return self._playing

    def _set_playing(self, playing: bool) -> None:
        interval = REAL_PLAYING_FRAME_INTERVAL_MS if playing and self._real_backend else FRAME_INTERVAL_MS
        if self.timer.interval() != interval:
            self.timer.setInterval(interval)
        if playing != self._playing:
            self._playing = playing
            self.play_state_changed.emit(playing)

    def toggle_play(self) -> None:
        if self.host is None:
            return
        if self.scenario is not None and self.panel.committed_guess is None:
            self.panel.commit()  # Space before a guess commits the guess on screen, then runs
            return
        if self.done:
            self.restart(play=True)
        elif self._playing:
            self.host.pause()
            self._set_playing(False)
        else:
            self._send_play()

    def step_once(self) -> None:
        if self.host is None or self.done:
            return
        if self.scenario is not None and self.panel.committed_guess is None:
            if not self.panel.commit():  # a typed guess the box cannot take: it says why, nothing runs
                return
            self.host.pause()  # the guess is locked; the audience steps through by hand
        self.host.step_once()
        self._set_playing(False)

    def restart(self, play: bool = False) -> None:
        """The same comparison from the start (a scenario asks for a fresh guess)."""
        if self.host is None:
            return
        self.done, self.results, self.revealed = False, None, None
        self._reveal_shown = False
        if self.scenario is not None:
            self.panel.reset()
            self._veil_changed()
            play = False
        self.table.set_results([], [])
        self.plots.clear()
        self.series = [_Columns() for _ in self.columns]
        self.finished_counts = [0] * len(self.columns)
        self.decisive = [None] * len(self.columns)
        self.asked_series = [([], []) for _ in self.columns]
        self.host.restart(play=play)
        self._set_playing(play)

    def set_speed(self, speed: float) -> None:
        self.speed = speed
        if self.host is not None:
            self.host.set_speed(speed)

    def _guess_committed(self, _guess) -> None:
        self._veil_changed()
        if self.host is not None and not self.done:
            self._send_play()

    def _send_play(self) -> None:
        self.host.play()
        self._set_playing(True)

    def stop(self) -> None:
        """Ends the comparisons' process (the window closes)."""
        self.timer.stop()
        if self.host is not None:
            self.host.stop()
            self.host = None
        self._set_playing(False)

    # -- frames ------------------------------------------------------------------------------------
    def on_frame(self) -> None:
        frame = self.host.take_frame() if self.host is not None else None
        # None: the comparison has not answered the last request yet; an idle frame: it is paused
        if frame is not None and not frame.idle:
            self.render_frame(frame)

    def render_frame(self, frame) -> None:
        if frame.info is not None or frame.error:
            self.building_note.hide()  # built, or it never will be: the error says why
        if frame.info is not None:
            self._new_comparison(frame.info)
        if frame.error:
            self._show_error(frame.error)
        for i, points in enumerate(frame.points):
            if i < len(self.series) and len(points):  # a configuration with no new step keeps its curves
                s = self.series[i]
                s.extend(points)
                self.plots.set_series(i, s.column("time_s"), s.column("kv_usage"), s.column("num_running"),
                                      s.output_tokens_so_far())
        veiled = self.awaiting_guess()
        if frame.results is not None:
            self.results = frame.results
            self.finished_counts = [c.metrics.get("completed", 0) for c in frame.results.configurations]
            if not veiled:  # a memory-math answer is in the results before any step: shown after the guess
                self.table.set_results(frame.results.labels, result_rows(frame.results))
                if not self._table_fitted:
                    self._fit_table()
                self._extend_asked(frame.results, frame.clock_s)
        if frame.snapshots is not None and not self.revealed:  # the reveal holds its moment
            total = self.info["num_requests"] if self.info else 0
            self._show_title(frame.clock_s)
            for i, snap in enumerate(frame.snapshots):
                if i >= len(self.columns) or snap is None:
                    continue
                self.latest_snapshots[i] = snap
                self._keep_if_decisive(i, snap, frame.clock_s)
                flashes = frame.flashes[i] if i < len(frame.flashes) else None
                self.columns[i].set_veiled(veiled)
                self.columns[i].block_map.update_snapshot(snap, flashes or None)
                self.columns[i].set_numbers(snap, self.finished_counts[i], total)
        if frame.status:
            self.status_text = frame.status
            self.status_changed.emit(frame.status)
        if (frame.runs_finished and not self._reveal_shown and not frame.error and frame.results is not None
                and not self._answer_needs_quality()):
            self._reveal()  # the quality cost, measured next, takes seconds the answer does not need
        if frame.done:
            self.done = True
            self._set_playing(False)
            if not self._reveal_shown:
                self._reveal()
            else:  # the final table came after the reveal; a splitter the user moved meanwhile stays
                self._emphasize_answer_row()
            self.finished.emit()
        elif not frame.error:  # the host corrects a frame made before the newest Play or Pause
            self._set_playing(frame.playing)

    def _extend_asked(self, results, clock_s: float) -> None:
        if not self.asked or self.scenario is None:
            return
        for i, value in enumerate(asked_values(self.scenario.reveal_from, self.asked, results)):
            if i < len(self.asked_series) and value is not None:
                times, values = self.asked_series[i]
                rose = not values or value > max(values)
                if self.asked.computed and not times:
                    times.append(0.0)  # the same from the first step: the run's whole span, not from this update on
                    values.append(value)
                times.append(clock_s)
                values.append(value)
                self.plots.set_asked_series(i, times, values)
                snap = self.latest_snapshots[i] if i < len(self.latest_snapshots) else None
                if self.asked.moment and rose and snap is not None:  # its decisive moment: when it last grew
                    self.decisive[i] = ((value,), snap, clock_s, self.finished_counts[i])

    def awaiting_guess(self) -> bool:
        """A scenario before its guess: nothing that could give the answer away is shown."""
        return self.scenario is not None and self.panel.committed_guess is None

    def _keep_if_decisive(self, i: int, snap, clock_s: float) -> None:
        """The decisive moment of a run is when its pool is fullest and the most requests wait for
        it: kept, so the reveal can show it after the run has drained."""
        # a measured peak of its own decides the moment (_extend_asked); until it grows, the start
        if self.asked and self.asked.moment:
            if i < len(self.decisive) and self.decisive[i] is None:
                self.decisive[i] = ((), snap, clock_s, self.finished_counts[i])
            return
        key = (round(snap.kv_usage, 3), snap.num_waiting)
        if i < len(self.decisive) and (self.decisive[i] is None or key > self.decisive[i][0]):
            self.decisive[i] = (key, snap, clock_s, self.finished_counts[i])

    def show_decisive_moment(self) -> float | None:
        """Every block map and its numbers at its configuration's fullest moment, and a line on the
        plots at the answer's configuration's; that moment's clock (None before any frame)."""
        total = self.info["num_requests"] if self.info else 0
        for column, kept in zip(self.columns, self.decisive):
            if kept is not None:
                _, snap, clock_s, finished = kept
                column.set_veiled(False)
                column.block_map.update_snapshot(snap)
                moment = self.asked.moment if self.asked and self.asked.moment else "fullest frame drawn"
                column.set_numbers(snap, finished, total, moment_s=clock_s, moment=moment)
        labels = [c.label for c in self.columns]
        reveal = self.scenario.reveal_from if self.scenario is not None else None
        named = (reveal.config or reveal.numerator) if reveal is not None else ""
        index = labels.index(named) if named in labels else 0
        kept = self.decisive[index] if index < len(self.decisive) else None
        if kept is None:
            return None
        what = f"{self.asked.title.lower()} last grew" if self.asked and self.asked.moment else "its KV pool was fullest"
        self.plots.mark_moment(kept[2], f"{labels[index]}: {what} at {kept[2]:,.2f} s; the block maps above "
                                        "show each configuration at that moment of its own run")
        return kept[2]

    def _new_comparison(self, info: dict) -> None:
        self.info = info
        self._real_backend = "real" in info["backends"]
        labels = info["labels"]
        details = []
        for backend, model, hardware in zip(info["backends"], info["models"], info["hardware"]):
            where = "this machine" if backend == "real" else hardware
            details.append(f"{model} on {where} ({backend})")
        self._set_columns(labels, details)
        # the table's rows from the start, every value "not measured yet"
        self.table.set_results(labels, [ResultRow(name, unit, (None,) * len(labels), better, decimals, tip)
                                        for _, name, unit, _, better, decimals, tip in METRIC_ROWS])
        self._table_fitted = False
        # a scenario's strip already names the backend, model and hardware
        common = f"{details[0]} \u00b7 " if len(set(details)) == 1 and self.scenario is None else ""
        workload = info.get("workload") or {}
        source = f"trace {shown_label(Path(workload['trace']).name)}" if workload.get("trace") else f"seed {workload.get('seed', 0)}"
        self._title_detail = (f"{common}the same {info['num_requests']:,} requests ({workload.get('name', 'workload')}, "
                              f"{source}) for each configuration")
        self._show_title(0.0)
        self.plots.set_configurations(labels)
        self.columns_rebuilt.emit()
        QTimer.singleShot(0, self._fit_splitters)  # new columns' text: the last reveal's split was too low

    def _show_title(self, clock_s: float) -> None:
        head = f"{self._title}: " if self._title else ""
        self.title.setText(f"{head}{self._title_detail} \u00b7 shared engine clock {clock_s:,.2f} s")

    def _reveal(self) -> None:
        self._reveal_shown = True
        self.show_results_table()
        if not self._wide:
            height = sum(self.split.sizes())
            columns = self._columns_height(height, REVEALED_COLUMNS_SHARE)
            self.split.setSizes([columns, height - columns])
        if self.scenario is None or self.results is None:
            return
        try:
            value, answer = self.scenario.reveal(self.results)
            guess = self.panel.committed_guess
            verdict = guess_verdict(self.scenario, guess, value) if guess is not None else "no guess was committed"
        except ConfigError as error:  # the run answered nothing (say every request was rejected): the table shows why
            self._show_error(str(error))
            return
        except Exception:  # noqa: BLE001 - a scenario's own bug must not take the window down
            self._show_error(traceback.format_exc())
            return
        self.revealed = (answer, verdict)
        self.panel.show_reveal(answer, verdict, self.scenario.claim, source=self.scenario.reveal_from.describe())
        self.show_decisive_moment()
        self._emphasize_answer_row()

    def _answer_needs_quality(self) -> bool:
        return self.scenario is not None and self.scenario.reveal_from.name in QUALITY_FIELDS

    def _emphasize_answer_row(self) -> None:
        if self.scenario is None:
            return
        row_name = {key: name for key, name, *_ in METRIC_ROWS}.get(self.scenario.reveal_from.name)
        if row_name:
            self.table.emphasize_row(row_name)

    def _show_error(self, error: str) -> None:
        self.errors_shown.append(error)
        self.error_box.show("The comparison stopped", error, "The window keeps working: press R to run it again, "
                            "or open another scenario.")
        self._set_playing(False)

    # -- theme and export ----------------------------------------------------------------------------
    def set_theme(self, theme: Theme) -> None:
        self._theme = theme
        self.panel.set_theme(theme)
        self.block_legend.setText(block_legend_html(theme))
        self.plots.set_theme(theme)
        self.table.set_theme(theme)
        colors = configuration_colors(theme)
        for i, column in enumerate(self.columns):
            column.block_map.set_theme(theme)
            column.set_config(column.label, column.detail, colors[i % len(colors)])

    def export_table_csv(self, path):
        return export_csv(self.table.header(for_csv=True), self.table.csv_rows(), path)
