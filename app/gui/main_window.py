"""The explorer window: the engine runs in its own process; a frame timer hands its latest
snapshot and the steps since the last frame to the views, which only draw plain data."""

from __future__ import annotations

import time
from collections import deque
from pathlib import Path

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QAction, QColor, QKeySequence, QPalette
from PySide6.QtWidgets import (
    QApplication,
    QComboBox,
    QDockWidget,
    QFileDialog,
    QLabel,
    QMainWindow,
    QMessageBox,
    QSpinBox,
    QSplitter,
    QTabWidget,
    QToolBar,
    QVBoxLayout,
    QWidget,
)

from kvscope.engine.config import ConfigError
from kvscope.engine.events import EventKind
from kvscope.app.lab.presets import load_model, preset_names, user_preset_names
from kvscope.app.lab.scenarios import load_scenario, scenario_names
from kvscope.widgets.batch_timeline import BatchTimelineView, TimelineStep
from kvscope.widgets.block_map import BlockMapView
from kvscope.widgets.compare_plots import PLOTS as COMPARE_PLOTS
from kvscope.widgets.event_log import EventLog
from kvscope.widgets.live_plots import TITLES as PLOT_TITLES
from kvscope.widgets.live_plots import LivePlots
from kvscope.widgets.memory_bar import MemoryBudgetBar, Segment
from kvscope.widgets.palette import THEMES
from kvscope.widgets.preset_editor import PresetEditor
from kvscope.widgets.replay_scrubber import ReplayScrubber
from kvscope.widgets.requests_table import RequestsTable
from kvscope.widgets.settings_panel import SettingsPanel

from kvscope.app.gui.block_flashes import FLASH_KINDS
from kvscope.app.gui.demo_mode import DemoMode
from kvscope.app.host.engine_process import EngineProcess
from kvscope.app.host.session import FrameDelta, RunConfig
from kvscope.app.gui.event_text import EVENT_KINDS, event_line
from kvscope.app.gui.run_settings import SettingsError, build_run_config, memory_preview, values_from_model
from kvscope.app.gui.series import RunSeries
from kvscope.engine.units import format_percent
from kvscope.app.gui.view_export import (
    CSV_FORMAT,
    PLOT_FORMATS,
    PNG_FORMAT,
    ExportError,
    default_name,
    export_plot,
    export_widget_png,
    writable,
)

FRAME_INTERVAL_MS = 16  # at most ~60 frames a second
DEMO_HIDDEN_PLOTS = ("latency", "preemptions")  # demo mode: the plots left out at large font sizes
DEMO_PLOTS_SHARE = 0.4  # of the window's width
DEMO_BLOCK_MAP_SHARE = 0.5  # of the height the block map and the batch timeline share
QWIDGETSIZE_MAX = 16777215
SEEK_SETTLE_S = 0.5  # the scrubber waits this long at most for a seek to be taken before following again
TABLE_INTERVAL_S = 0.25  # a table of 1,000 rows is not worth redrawing 60 times a second
SPEEDS = [("0.1x", 0.1), ("0.25x", 0.25), ("0.5x", 0.5), ("1x", 1.0), ("2x", 2.0), ("5x", 5.0), ("10x", 10.0),
          ("30x", 30.0), ("100x", 100.0), ("max", 0.0)]


def apply_theme(app: QApplication, theme) -> None:
    app.setStyle("Fusion")
    palette = QPalette()
    bg, fg = QColor(*theme.background), QColor(*theme.foreground)
    base = bg.lighter(115) if theme.is_dark else QColor(255, 255, 255)
    for role, color in ((QPalette.Window, bg), (QPalette.WindowText, fg), (QPalette.Base, base),
                        (QPalette.AlternateBase, bg), (QPalette.Text, fg), (QPalette.Button, bg.lighter(110)),
                        (QPalette.ButtonText, fg), (QPalette.ToolTipBase, base), (QPalette.ToolTipText, fg),
                        (QPalette.Highlight, QColor(*theme.decode)), (QPalette.HighlightedText, QColor(255, 255, 255))):
        palette.setColor(role, color)
    palette.setColor(QPalette.Disabled, QPalette.Text, fg.darker(160) if theme.is_dark else fg.lighter(250))
    palette.setColor(QPalette.Disabled, QPalette.ButtonText, fg.darker(160) if theme.is_dark else fg.lighter(250))
    app.setPalette(palette)
    pg.setConfigOptions(background=theme.background, foreground=theme.foreground, antialias=False)




def timeline_and_flashes(results) -> tuple[list, dict]:
    """The batch timeline's steps and the blocks to flash, from the newest step results of a frame."""
    steps, changed = [], {}
    for r in results:
        joined, finished, preempted = [], [], []
        for ev in r.events:
            kind = ev.kind
            if kind == EventKind.ADMITTED:
                joined.append(ev.request_id)
            elif kind == EventKind.FINISHED:
                finished.append(ev.request_id)
            elif kind == EventKind.PREEMPTED:
                preempted.append(ev.request_id)
            if ev.blocks and kind in FLASH_KINDS:
                changed.setdefault(FLASH_KINDS[kind], []).extend(ev.blocks)
        steps.append(TimelineStep(r.step, r.start_time_s, r.duration_s, r.request_ids, r.num_new_tokens, r.is_prefill,
                                  joined, finished, preempted))
    return steps, {kind: np.asarray(blocks, dtype=np.int64) for kind, blocks in changed.items()}


def values_from_engine_info(info) -> dict:
    """The settings form's values for what an engine (here: a recorded one) ran with."""
    args, workload = info.args, info.workload
    values = {"backend": info.backend, "model": getattr(info.model, "name", None),
              "hardware": "this-machine" if info.backend == "real" else getattr(info.hardware, "name", None),
              "allocation": info.allocation}
    for key in ("kv_cache_dtype", "block_size", "gpu_memory_utilization", "max_model_len", "kv_cache_memory_bytes",
                "max_num_seqs", "max_num_batched_tokens", "enable_prefix_caching", "enable_chunked_prefill",
                "scheduling"):
        if hasattr(args, key):
            values[key] = getattr(args, key)
    if getattr(workload, "name", None):
        values["workload"] = workload.name
    if isinstance(getattr(workload, "num_requests", None), int):
        values["num_requests"] = workload.num_requests
    return values


class MainWindow(QMainWindow):
    def __init__(self, initial: dict, theme: str = "dark", autoplay: bool = True, replay: str | None = None,
                 scenario: str | None = None):
        super().__init__()
        self.setWindowTitle("kvscope")
        self.theme = THEMES[theme]
        self.worker = EngineProcess()
        self.worker.start()
        self.series = RunSeries()
        self.plan = None
        self.engine_info: dict | None = None
        self.config: RunConfig | None = None
        self.selected_request = -1
        self.last_table_update = 0.0
        self.frame_times_ms: deque[float] = deque(maxlen=600)
        self.frames_rendered = 0
        self.errors_shown: list[str] = []
        self.latest_summary: dict = {}
        self.latest_snapshot = None
        self.done = False
        self._build_views()
        self._build_actions()
        self.settings.set_choices(preset_names("models"), preset_names("hardware"), preset_names("workloads"))
        self.settings.set_values(initial)
        self._refresh_editor_from_settings()
        self._refresh_user_presets()
        self.scrubber = ReplayScrubber()
        self.scrubber.seek_requested.connect(self._seek)
        self.replay_bar = QToolBar("Replay")
        self.replay_bar.setObjectName("replay")
        self.replay_bar.setMovable(False)
        self.replay_bar.addWidget(self.scrubber)
        self.addToolBar(Qt.BottomToolBarArea, self.replay_bar)
        self.set_theme(theme)
        self.timer = QTimer(self)
        self.timer.setInterval(FRAME_INTERVAL_MS)
        self.timer.timeout.connect(self.on_frame)
        self.timer.start()
        self.live_worker = self.worker  # self.worker is the replay while a recording is open
        self.demo = DemoMode(self)
        self.replay_path: str | None = None
        self._values_before_replay: dict = {}
        self._seek_target: tuple | None = None  # (position, when asked) of a seek not yet taken
        self.replay_bar.hide()
        self.scrubber_timer = QTimer(self)
        self.scrubber_timer.setInterval(100)
        self.scrubber_timer.timeout.connect(self._follow_replay)
        self.current_scenario: str | None = None
        self._build_menus()
        if replay is not None:
            # A replay needs no model: the engine is not built, so a recording opens on any machine.
            self.open_recording(replay)
        elif scenario is None:
            self.apply_settings(play=autoplay)
        # else the live engine is built when the live run is first played: the scenario has the CPU
        if scenario is not None:
            self.open_scenario(scenario)

    # -- construction ---------------------------------------------------------------------------
    def _build_views(self) -> None:
        self.memory_bar = MemoryBudgetBar()
        self.block_map = BlockMapView()
        self.timeline = BatchTimelineView()
        self.plots = LivePlots()
        self.requests = RequestsTable()
        self.event_log = EventLog(kinds=EVENT_KINDS)
        self.settings = SettingsPanel()
        self.editor = PresetEditor()

        center = QWidget()
        layout = QVBoxLayout(center)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.memory_bar)
        split = self.center_split = QSplitter(Qt.Vertical)
        split.addWidget(self.block_map)
        split.addWidget(self.timeline)
        split.setStretchFactor(0, 3)
        split.setStretchFactor(1, 2)
        layout.addWidget(split, 1)
        # A second page, the comparison, appears when a scenario is opened (the bar hides until then).
        self.pages = QTabWidget()
        self.pages.setTabBarAutoHide(True)
        self.pages.setDocumentMode(True)
        self.pages.addTab(center, "Live run")
        self.pages.setTabToolTip(0, "the engine with the settings on the left")
        self.pages.currentChanged.connect(self._page_changed)
        self.setCentralWidget(self.pages)
        self.compare = None  # the CompareView, built on first use
        self._dock_prefs: dict | None = None  # the user's dock visibility while a mode hides docks
        self._dock_hiding: set = set()

        self.settings_dock = self._dock("Settings", Qt.LeftDockWidgetArea, self._tabs(
            (self.settings, "Run"), (self.editor, "Model && hardware")))
        self.plots_dock = self._dock("Live plots", Qt.RightDockWidgetArea, self.plots)
        self.bottom_dock = self._dock("Requests and events", Qt.BottomDockWidgetArea, self._tabs(
            (self.requests, "Requests"), (self.event_log, "Event log")))
        self.resizeDocks([self.settings_dock, self.plots_dock], [360, 520], Qt.Horizontal)
        self.resizeDocks([self.bottom_dock], [200], Qt.Vertical)

        self.status = QLabel()
        self.statusBar().addPermanentWidget(self.status, 1)

        self.settings.changed.connect(self.on_settings_changed)
        self.settings.apply_requested.connect(lambda: self.apply_settings(play=True))
        self.editor.edited.connect(self.on_settings_changed)
        self.editor.save_requested.connect(self.save_user_preset)
        self.editor.delete_requested.connect(self.delete_user_preset)
        self._editor_shows = (None, None)
        # the views take focus on a click, so the run shortcuts (space, arrows) reach the window
        for view in (self.block_map, self.timeline, self.memory_bar):
            view.setFocusPolicy(Qt.StrongFocus)
        for view in (self.block_map, self.timeline, self.requests):
            view.request_selected.connect(self.select_request)

    @staticmethod
    def _tabs(*pages) -> QTabWidget:
        tabs = QTabWidget()
        for widget, title in pages:
            tabs.addTab(widget, title)
        return tabs

    def _dock(self, title: str, area, widget) -> QDockWidget:
        dock = QDockWidget(title, self)
        dock.setObjectName(title)
        dock.setWidget(widget)
        dock.setFeatures(QDockWidget.DockWidgetMovable | QDockWidget.DockWidgetFloatable | QDockWidget.DockWidgetClosable)
        self.addDockWidget(area, dock)
        return dock

    def _action(self, text: str, shortcut, tip: str, slot, toolbar: QToolBar | None = None) -> QAction:
        action = QAction(text, self)
        keys = shortcut if isinstance(shortcut, list) else [shortcut]
        action.setShortcuts([QKeySequence(k) for k in keys])
        action.setToolTip(f"{tip} ({QKeySequence(keys[0]).toString()})")
        action.setStatusTip(tip)
        action.triggered.connect(slot)
        self.addAction(action)
        if toolbar is not None:
            toolbar.addAction(action)
        return action

    def _build_actions(self) -> None:
        bar = QToolBar("Run controls")
        bar.setObjectName("run controls")
        self.addToolBar(bar)
        self.play_action = self._action("Play", Qt.Key_Space, "play or pause the engine", self.play_pressed, bar)
        self.step_action = self._action("Step", [Qt.Key_Right, Qt.Key_S], "run exactly one engine step",
                                        self.step_pressed, bar)
        bar.addSeparator()
        bar.addWidget(QLabel(" Speed "))
        self.speed = QComboBox()
        for label, value in SPEEDS:
            self.speed.addItem(label, value)
        self.speed.setCurrentText("1x")
        self.speed.setToolTip("simulated backend: engine seconds per wall-clock second (+ / -); "
                              "the real backend runs at this machine's speed")
        self.speed.currentIndexChanged.connect(self._speed_changed)
        bar.addWidget(self.speed)
        self._action("Faster", [Qt.Key_Plus, Qt.Key_Equal], "run the simulated clock faster", lambda: self._nudge_speed(1))
        self._action("Slower", Qt.Key_Minus, "run the simulated clock slower", lambda: self._nudge_speed(-1))
        bar.addSeparator()
        bar.addWidget(QLabel(" Seed "))
        self.seed = QSpinBox()
        self.seed.setRange(0, 2**31 - 1)
        self.seed.setToolTip("random seed of the workload: the same seed replays the same run")
        bar.addWidget(self.seed)
        self.reset_action = self._action("Reset", Qt.Key_R, "rebuild the engine and restart the workload with this seed",
                                         self.reset_pressed, bar)
        self.apply_action = self._action("Apply", [QKeySequence("Ctrl+Return"), QKeySequence("Ctrl+Enter")],
                                         "apply the settings: rebuild the engine in place",
                                         lambda: self.apply_settings(play=True))
        bar.addSeparator()
        self.theme_action = self._action("Theme", QKeySequence("Ctrl+T"), "switch between the light and dark themes",
                                         self.toggle_theme, bar)
        self.quit_action = self._action("Quit", QKeySequence.Quit, "close kvscope", self.close)

    # -- recordings -----------------------------------------------------------------------------
    def ask_open_recording(self) -> bool:
        path, _ = QFileDialog.getOpenFileName(self, "Open a recording", "",
                                              "kvscope recordings (*.kvrec);;all files (*)")
        return bool(path) and self.open_recording(path)

    def open_recording(self, path) -> bool:
        """Replay a recorded run in place of the engine: no model, no GPU. A file that cannot be
        read leaves the window as it was, with a dialog giving the reader's reason."""
        from kvscope.app.lab.recording import RecordingError

        from kvscope.app.host.replay import ReplayWorker

        try:
            worker = ReplayWorker(path)
        except (RecordingError, OSError) as exc:
            QMessageBox.warning(self, "Cannot open the recording", f"{exc}\n\nThe window keeps what it showed.")
            return False
        if self.replay_path is not None:
            self.worker.stop()
        else:
            self.live_worker.pause()
            self._values_before_replay = self.settings.values()
        # the (disabled) form shows what the recording ran with, not the live settings
        self.settings.set_values(values_from_engine_info(worker.engine_info))
        self.worker = worker
        self.replay_path = str(path)
        self.done = False
        worker.set_speed(self.speed.currentData())
        worker.start()
        self.scrubber.set_recording(worker.num_steps, worker.recording.series()["time_s"])
        self._set_replay_mode(True)
        self.pages.setCurrentIndex(0)
        self.play_action.setText("Play")
        if worker.recording.warning:
            self.statusBar().showMessage(worker.recording.warning, 10000)
        return True

    def toggle_recording(self, checked: bool) -> None:
        if not checked:
            self.live_worker.stop_recording()
            return
        default = Path.home() / time.strftime("kvscope-%Y%m%d-%H%M%S.kvrec")
        path, _ = QFileDialog.getSaveFileName(self, "Record the run to", str(default),
                                              "kvscope recordings (*.kvrec)")
        if not path or not self.start_recording(path):
            self.record_action.setChecked(False)

    def start_recording(self, path) -> bool:
        """Record the live run from its current step; a path that cannot be written is refused here."""
        from kvscope.app.cli.options import check_output_path

        try:
            check_output_path("--record", str(path))
        except ConfigError as exc:
            QMessageBox.warning(self, "Cannot record there", str(exc).replace("--record ", ""))
            return False
        self.record_action.setChecked(True)
        self._recording_seen = False
        self.live_worker.start_recording(str(path))
        return True

    def close_recording(self) -> None:
        """Back to the live engine, rebuilt with the settings in the panel."""
        if self.replay_path is None:
            return
        self.worker.stop()
        self.worker = self.live_worker
        self.replay_path = None
        self._set_replay_mode(False)
        self.settings.set_values(self._values_before_replay)
        self.apply_settings(play=False)
        self.play_action.setText("Play")

    def _set_replay_mode(self, on: bool) -> None:
        why = ("a recording replays exactly as it was recorded: its settings cannot change. "
               "File > Back to the live engine (Ctrl+L) runs the engine again.")
        self.settings_dock.widget().setEnabled(not on)
        self.settings_dock.widget().setToolTip(why if on else "")
        self.seed.setEnabled(not on)
        self.seed.setToolTip(why if on else "random seed of the workload: the same seed replays the same run")
        self.apply_action.setEnabled(not on)
        self.reset_action.setToolTip("back to the start of the recording (R)" if on else
                                     "rebuild the engine and restart the workload with this seed (R)")
        self.live_action.setEnabled(on)
        self.record_action.setEnabled(not on)
        self.export_actions["perfetto"].setEnabled(on)
        self.replay_bar.setVisible(on)
        if on:
            self.scrubber_timer.start()
        else:
            self.scrubber_timer.stop()

    def _seek(self, position: int) -> None:
        if self.replay_path is None:
            return
        self.worker.seek(position)
        self.done = position >= self.scrubber.num_steps
        self._seek_target = (position, time.perf_counter())

    def _follow_replay(self) -> None:
        if self.replay_path is None:
            return
        position = self.worker.position
        if self._seek_target is not None:
            # until the replay thread has taken the seek, its position is the old one: the slider
            # would jump back for a moment
            target, asked = self._seek_target
            if position != target and time.perf_counter() - asked < SEEK_SETTLE_S:
                return
            self._seek_target = None
        self.scrubber.set_position(position)

    def toggle_replay(self) -> None:
        if self.play_action.text() == "Pause":
            self.worker.pause()
            self.play_action.setText("Play")
            return
        if self.done:  # at the end: play it again from the start
            self.worker.seek(0)
            self.done = False
        self.worker.play()
        self.play_action.setText("Pause")

    def ask_export_perfetto(self) -> bool:
        if self.replay_path is None:
            return False
        from kvscope.app.lab.perfetto import write_perfetto
        from kvscope.app.lab.recording import Recording, RecordingError

        path = self._ask_save_path("Save a Perfetto trace", default_name(Path(self.replay_path).stem, ".json"),
                                   "Chrome / Perfetto trace (*.json)")
        if path is None:
            return False

        def work(target):
            writable(target)
            try:
                # its own reader: the replay thread is reading the file through the other one
                with Recording.open(self.replay_path) as recording:
                    write_perfetto(recording, target)
            except (RecordingError, OSError, ValueError) as exc:
                raise ExportError(f"{target}: {exc}") from exc
            return f"{target} (open it at ui.perfetto.dev)"

        return self._report_export(work, path)

    def _stop_other_workers(self) -> None:
        """At close: the live engine while a recording is replayed, and a comparison's thread."""
        if self.worker is not self.live_worker:
            self.live_worker.stop()
        if self.compare is not None:
            self.compare.stop()

    # -- scenarios ------------------------------------------------------------------------------
    def _build_scenarios_menu(self) -> None:
        menu = self.menuBar().addMenu("&Scenarios")
        self.scenario_actions: list[QAction] = []
        names = scenario_names()
        for i, name in enumerate(names):
            try:
                title = load_scenario(name).title
            except ConfigError as exc:  # a broken file is listed, and opening it says why
                title = f"{name} (cannot be read: {exc})"
            key = [getattr(Qt, f"Key_{i + 1}")] if i < 9 else []
            action = QAction(f"&{i + 1}  {title}" if i < 9 else title, self)
            action.setShortcuts([QKeySequence(k) for k in key])
            action.setStatusTip(f"open the guided scenario {name}: a question, your guess, a comparison, the answer")
            action.triggered.connect(lambda _=False, n=name: self.open_scenario(n))
            self.addAction(action)  # its key works with the menu bar hidden (demo mode)
            menu.addAction(action)
            self.scenario_actions.append(action)
        if not names:
            menu.addAction("no scenarios found").setEnabled(False)
        self.scenario_names = names

    def open_scenario(self, name: str, requests: int | None = None) -> bool:
        """Show the scenario's question on the comparison page; its run waits for the guess."""
        try:
            scenario = load_scenario(name)
            spec = scenario.comparison_spec(requests=requests)
        except ConfigError as exc:
            QMessageBox.warning(self, "Cannot open the scenario", str(exc))
            return False
        answer = scenario.answer
        unit = answer.unit
        texts = {
            "title": f"{scenario.order}. {scenario.title}", "caption": scenario.caption,
            "question": scenario.question, "backend_text": self._backend_text(scenario),
            "unit": unit, "choices": list(answer.choices) or None,
            "minimum": 0.0, "maximum": 100.0 if unit == "%" else 1e6 if unit == "x" else 1e9,
            "decimals": 2 if unit in ("x", "GiB") else 1, "initial": 1.0 if unit == "x" else None,
        }
        from kvscope.app.lab.compare import Comparison

        self.open_comparison(lambda: Comparison(spec), scenario.title, scenario_texts=texts, scenario=scenario)
        self.current_scenario = name
        return True

    @staticmethod
    def _backend_text(scenario) -> str:
        models = ", ".join(dict.fromkeys(c.model for c in scenario.configs))
        if scenario.backend == "real":
            import torch

            return f"real backend ({models} on this {'GPU' if torch.cuda.is_available() else 'CPU'})"
        hardware = ", ".join(dict.fromkeys(c.hardware for c in scenario.configs))
        return f"simulated backend ({models} on {hardware})"

    # -- pages: the live run, a comparison --------------------------------------------------------
    def compare_showing(self) -> bool:
        return self.compare is not None and self.pages.currentWidget() is self.compare

    def _page_changed(self, _index: int) -> None:
        if self.compare is not None and not self.compare_showing() and self.compare.playing:
            self.compare.toggle_play()  # a comparison out of sight would only take the live run's CPU
        self.update_docks()
        self.status.setVisible(not self.compare_showing())  # the live run's numbers
        if self.compare_showing():
            self.play_action.setText("Pause" if self.compare.playing else "Play")
        else:
            self.play_action.setText("Play")

    def update_docks(self) -> None:
        """Docks hidden by a mode come back as the user had them: the comparison page hides all
        three (they belong to the live run), demo mode the settings and request lists."""
        docks = (self.settings_dock, self.plots_dock, self.bottom_dock)
        hiding = set(docks) if self.compare_showing() else set()
        if self.demo.active:
            hiding |= set(self.demo_docks())
        if self._dock_prefs is None:
            if not hiding:
                return
            # isHidden, not isVisible: before the window is first shown nothing is visible
            self._dock_prefs = {d: not d.isHidden() for d in docks}
        else:  # what the user showed or hid meanwhile, among the docks no mode was hiding
            for dock in docks:
                if dock not in self._dock_hiding:
                    self._dock_prefs[dock] = not dock.isHidden()
        for dock in docks:
            dock.setVisible(self._dock_prefs[dock] and dock not in hiding)
        self._dock_hiding = hiding
        if not hiding:
            self._dock_prefs = None

    def compare_view(self):
        """The comparison page, built on first use (it costs nothing until a comparison opens)."""
        if self.compare is None:
            from kvscope.app.gui.compare_window import CompareView

            self.compare = CompareView(theme=self.theme)
            self.compare.play_state_changed.connect(self._compare_play_state)
            self.compare.columns_rebuilt.connect(self._rescale_new_views)
            self.compare.status_changed.connect(lambda text: self.statusBar().showMessage(text, 8000))
            index = self.pages.addTab(self.compare, "Compare")
            self.pages.setTabToolTip(index, "configurations side by side on the identical workload")
            for key, action in self.export_actions.items():
                if key == "results" or key.startswith("compare:"):
                    action.setEnabled(True)
            self._rescale_new_views()
        return self.compare

    def _compare_play_state(self, playing: bool) -> None:
        if self.compare_showing():
            self.play_action.setText("Pause" if playing else "Play")

    def _rescale_new_views(self) -> None:
        if self.demo.active:
            self.demo.fonts.apply(self.demo.font_scale)

    def open_comparison(self, build, title: str, **kwargs) -> None:
        """Show the comparison page running build() -> engine.compare.Comparison (see CompareView)."""
        view = self.compare_view()
        self.live_worker.pause()  # two engines at once would halve both; the live run waits
        if self.replay_path is None:
            self.play_action.setText("Play")
        view.set_speed(self.speed.currentData())
        view.open_comparison(build, title, **kwargs)
        self.pages.setCurrentWidget(view)
        self.pages.setTabText(self.pages.indexOf(view), f"Compare: {title}")

    # -- menus, demo mode, export ----------------------------------------------------------------
    def _build_menus(self) -> None:
        bar = self.menuBar()
        file_menu = bar.addMenu("&File")
        self.open_recording_action = self._action(
            "Open recording...", QKeySequence.Open, "replay a recorded run (.kvrec): no model and no GPU needed",
            self.ask_open_recording)
        file_menu.addAction(self.open_recording_action)
        self.live_action = self._action("Back to the live engine", QKeySequence("Ctrl+L"),
                                        "close the recording and run the engine with the settings again",
                                        self.close_recording)
        self.live_action.setEnabled(False)
        file_menu.addAction(self.live_action)
        self.record_action = self._action(
            "Record the run...", QKeySequence("Ctrl+Shift+R"),
            "record the live run from now on to a .kvrec file, for File > Open recording or "
            "`kvscope gui --replay` (stops at the next Apply or Reset, or when unchecked)", self.toggle_recording)
        self.record_action.setCheckable(True)
        file_menu.addAction(self.record_action)
        self._recording_seen = False  # a frame has confirmed that the engine records
        self.recording_steps: int | None = None  # steps recorded so far, while recording
        export = file_menu.addMenu("&Export")
        self.export_actions: dict[str, QAction] = {}
        for name in self.plots.plots:
            title = PLOT_TITLES.get(name, name)
            action = export.addAction(f"Plot: {title} (PNG or SVG)...")
            action.setStatusTip(f"save the {title} plot as a PNG image or an SVG drawing")
            action.triggered.connect(lambda _=False, n=name: self.ask_export_plot(n))
            self.export_actions[f"plot:{name}"] = action
        export.addSeparator()
        for key, title in (("block_map", "Block map"), ("timeline", "Batch timeline")):
            action = export.addAction(f"{title} (PNG)...")
            action.setStatusTip(f"save the {title.lower()} as it is on screen, with its legend, as a PNG image")
            action.triggered.connect(lambda _=False, k=key: self.ask_export_view(k))
            self.export_actions[key] = action
        export.addSeparator()
        action = export.addAction("Recording as a Perfetto trace (JSON)...")
        action.setStatusTip("the replayed recording as a Chrome / Perfetto trace: steps, requests and events on "
                            "a timeline (ui.perfetto.dev)")
        action.triggered.connect(self.ask_export_perfetto)
        action.setEnabled(False)  # while a recording is open
        self.export_actions["perfetto"] = action
        for name, (title, _unit) in COMPARE_PLOTS.items():
            action = export.addAction(f"Comparison plot: {title} (PNG or SVG)...")
            action.setStatusTip(f"save the comparison's {title} plot, every configuration on it, as PNG or SVG")
            action.triggered.connect(lambda _=False, n=name: self.ask_export_compare_plot(n))
            action.setEnabled(False)  # until a comparison is open
            self.export_actions[f"compare:{name}"] = action
        action = export.addAction("Results table (CSV)...")
        action.setStatusTip("save the comparison's results table, ratios included, as CSV")
        action.triggered.connect(self.ask_export_results)
        action.setEnabled(False)  # until a comparison has results
        self.export_actions["results"] = action
        file_menu.addSeparator()
        file_menu.addAction(self.quit_action)

        view_menu = bar.addMenu("&View")
        self.demo_action = self._action("Demo mode", Qt.Key_F11, "for talks: fullscreen, large fonts, high contrast, "
                                        "settings hidden; F11 or Esc leaves", self.toggle_demo)
        self.demo_action.setCheckable(True)
        view_menu.addAction(self.demo_action)
        self.leave_demo_action = self._action("Leave demo mode", Qt.Key_Escape, "leave demo mode", self.leave_demo)
        self.leave_demo_action.setEnabled(False)  # Esc means nothing else to this window
        view_menu.addAction(self.theme_action)
        view_menu.addSeparator()
        for dock in (self.settings_dock, self.plots_dock, self.bottom_dock):
            view_menu.addAction(dock.toggleViewAction())
        self._build_scenarios_menu()

    def arrange_for_demo(self, on: bool) -> None:
        """At demo font sizes five stacked plots leave each a sliver at 720 px: demo mode shows the
        three that carry the story (KV vs compute, requests, throughput), one time axis title under
        the last, and gives the plots 40 % of the width."""
        shown = [name for name in self.plots.plots if not (on and name in DEMO_HIDDEN_PLOTS)]
        for name, plot in self.plots.plots.items():
            plot.setVisible(name in shown)
            # a hidden item keeps its row in a graphics layout unless it may shrink to nothing
            plot.setMaximumHeight(QWIDGETSIZE_MAX if name in shown else 0)
            plot.getAxis("bottom").showLabel(not on or name == shown[-1])
        if on:
            self.resizeDocks([self.plots_dock], [int(self.width() * DEMO_PLOTS_SHARE)], Qt.Horizontal)
            total = sum(self.center_split.sizes())
            self.center_split.setSizes([int(total * DEMO_BLOCK_MAP_SHARE), total - int(total * DEMO_BLOCK_MAP_SHARE)])
        else:
            self.arrange_docks()

    def demo_docks(self) -> list:
        """The docks demo mode hides: settings and the request / event lists (the plots stay)."""
        return [self.settings_dock, self.bottom_dock]

    def toggle_demo(self) -> None:
        self.demo.toggle()
        self._demo_changed()

    def leave_demo(self) -> None:
        self.demo.leave()
        self._demo_changed()

    def _demo_changed(self) -> None:
        self.demo_action.setChecked(self.demo.active)
        self.leave_demo_action.setEnabled(self.demo.active)
        self.statusBar().showMessage("demo mode: Space play/pause, Right step, + / - speed, 1-9 scenario, R reset, "
                                     "Esc or F11 leaves" if self.demo.active else "demo mode off", 6000)

    def _ask_save_path(self, title: str, default: str, formats: str) -> str | None:
        """The file dialog (tests replace this method)."""
        path, _ = QFileDialog.getSaveFileName(self, title, default, formats)
        return path or None

    def _report_export(self, work, path: str) -> bool:
        try:
            written = work(path)
        except ExportError as exc:
            QMessageBox.warning(self, "Not saved", str(exc))
            return False
        self.statusBar().showMessage(f"saved {written}", 5000)
        return True

    def ask_export_plot(self, name: str) -> bool:
        title = PLOT_TITLES.get(name, name)
        path = self._ask_save_path(f"Save the {title} plot", default_name(title, ".png"), PLOT_FORMATS)
        return path is not None and self._report_export(lambda p: export_plot(self.plots.plots[name], p), path)

    def ask_export_compare_plot(self, name: str) -> bool:
        if self.compare is None:
            return False
        title = COMPARE_PLOTS[name][0]
        path = self._ask_save_path(f"Save the comparison's {title} plot", default_name(f"comparison {title}", ".png"),
                                   PLOT_FORMATS)
        return path is not None and self._report_export(lambda p: export_plot(self.compare.plots.plots[name], p), path)

    def ask_export_results(self) -> bool:
        if self.compare is None or self.compare.results is None:
            QMessageBox.information(self, "No results yet", "Open a scenario or a comparison first: "
                                    "the table fills in as it runs.")
            return False
        path = self._ask_save_path("Save the results table", default_name("results", ".csv"), CSV_FORMAT)
        return path is not None and self._report_export(self.compare.export_table_csv, path)

    def ask_export_view(self, key: str) -> bool:
        widget, title = {"block_map": (self.block_map, "Block map"), "timeline": (self.timeline, "Batch timeline")}[key]
        path = self._ask_save_path(f"Save the {title.lower()}", default_name(title, ".png"), PNG_FORMAT)
        return path is not None and self._report_export(lambda p: export_widget_png(widget, p), path)

    # -- settings -------------------------------------------------------------------------------
    def _current_config(self) -> RunConfig | None:
        try:
            config = build_run_config(self.settings.values(), self.editor.model_fields(),
                                      self.editor.hardware_fields(), seed=self.seed.value())
        except SettingsError as exc:
            self.settings.show_errors(exc.errors)
            return None
        self.settings.show_errors({})
        self.settings.show_preview(memory_preview(config))
        return config

    def on_settings_changed(self) -> None:
        values = self.settings.values()
        # The editor shows the selected presets' fields; a new selection (by hand or by a reset of the
        # form) replaces them, so stale edits never ride along under another preset's name.
        if (values["model"], values["hardware"]) != self._editor_shows:
            self._refresh_editor_from_settings()
            return
        self._current_config()

    def _refresh_editor_from_settings(self, *_args) -> None:
        values = self.settings.values()
        self._editor_shows = (values["model"], values["hardware"])
        try:
            model = load_model(values["model"])
            self.editor.set_model(model.name, values_from_model(model))
        except Exception:  # noqa: BLE001 - a local folder or config: the editor keeps its fields
            pass
        try:
            from kvscope.app.lab.presets import load_hardware

            hw = load_hardware(values["hardware"])
            self.editor.set_hardware(hw.name, hw.memory_bytes, hw.memory_bandwidth_bytes_per_s, hw.flops_for("fp16"),
                                     hw.gpu_count)
        except Exception:  # noqa: BLE001
            pass
        self.on_settings_changed()

    def apply_settings(self, play: bool = True) -> bool:
        config = self._current_config()
        if config is None:
            self.statusBar().showMessage("not applied: a setting is refused (see the Settings panel)", 5000)
            return False
        self.config = config
        self.done = False
        self.worker.set_speed(self.speed.currentData())
        self.worker.apply(config, play=play)
        return True

    def save_user_preset(self, kind: str, name: str) -> None:
        from kvscope.app.lab.presets import load_hardware, save_user_preset

        values = self.settings.values()
        try:
            if kind == "models":
                base = load_model(values["model"])
                fields = {**{k: v for k, v in base.__dict__.items() if k != "name"}, **self.editor.model_fields()}
                fields["source"] = f"edited from {base.name} in kvscope"
                if fields["weight_dtype"] != base.weight_dtype:
                    fields["weights_bytes"] = None
            else:
                base = load_hardware(values["hardware"])
                edits = self.editor.hardware_fields()
                scale = edits.pop("flops_16bit") / base.flops_for("fp16")
                fields = {**{k: v for k, v in base.__dict__.items() if k != "name"}, **edits,
                          "peak_flops": {k: v * scale for k, v in base.peak_flops.items()},
                          "source": f"edited from {base.name} in kvscope"}
            path = save_user_preset(kind, name, fields)
        except ConfigError as exc:
            QMessageBox.warning(self, "Preset not saved", str(exc))
            return
        self.settings.set_choices(preset_names("models"), preset_names("hardware"), preset_names("workloads"))
        self._refresh_user_presets()
        self.statusBar().showMessage(f"saved {name} to {path}", 5000)

    def delete_user_preset(self, kind: str, name: str) -> None:
        from kvscope.app.lab.presets import delete_user_preset

        delete_user_preset(kind, name)
        self.settings.set_choices(preset_names("models"), preset_names("hardware"), preset_names("workloads"))
        self._refresh_user_presets()
        self.statusBar().showMessage(f"deleted your preset {name}", 5000)

    def _refresh_user_presets(self) -> None:
        self.editor.set_user_presets([("models", n) for n in user_preset_names("models")]
                                     + [("hardware", n) for n in user_preset_names("hardware")])

    # -- run controls ---------------------------------------------------------------------------
    # Space, Right, +/- and R act on what is on screen: the comparison when its page shows, the
    # recording while one is open, else the live engine.
    def play_pressed(self) -> None:
        if self.compare_showing():
            self.compare.toggle_play()
        elif self.replay_path is not None:
            self.toggle_replay()
        else:
            self.toggle_play()

    def step_pressed(self) -> None:
        if self.compare_showing():
            self.compare.step_once()
        else:
            self.step_once()

    def reset_pressed(self) -> None:
        if self.compare_showing():
            self.compare.restart()
        elif self.replay_path is not None:
            self.worker.pause()
            self.worker.seek(0)
            self.play_action.setText("Play")
        else:
            self.apply_settings(play=True)

    def _speed_changed(self, _index: int = 0) -> None:
        speed = self.speed.currentData()
        self.worker.set_speed(speed)
        if self.compare is not None:
            self.compare.set_speed(speed)

    def toggle_play(self) -> None:
        if self.play_action.text() == "Pause":
            self.worker.pause()
            self.play_action.setText("Play")
        else:
            if self.done or self.engine_info is None:
                self.apply_settings(play=True)
            else:
                self.worker.play()
            self.play_action.setText("Pause")

    def step_once(self) -> None:
        self.worker.step_once()
        self.play_action.setText("Play")

    def _nudge_speed(self, direction: int) -> None:
        index = min(max(self.speed.currentIndex() + direction, 0), self.speed.count() - 1)
        self.speed.setCurrentIndex(index)

    def toggle_theme(self) -> None:
        self.set_theme("light" if self.theme.is_dark else "dark")

    def set_theme(self, name: str) -> None:
        self.theme = THEMES[name]
        apply_theme(QApplication.instance(), self.theme)
        for view in (self.memory_bar, self.block_map, self.timeline, self.plots, self.scrubber):
            view.set_theme(self.theme)
        if self.compare is not None:
            self.compare.set_theme(self.theme)
        if self.plan is not None:
            self._update_memory_bar()

    def select_request(self, request_id: int) -> None:
        self.selected_request = request_id
        for view in (self.block_map, self.timeline, self.requests):
            view.select_request(request_id)
        if request_id >= 0:
            self.statusBar().showMessage(f"request #{request_id} selected", 3000)

    # -- frames ---------------------------------------------------------------------------------
    def on_frame(self) -> None:
        frame = self.worker.take_frame()
        # None: the engine has not answered the last request yet; an idle frame: a paused engine
        if frame is not None and not frame.idle:
            self.render_frame(frame)

    def render_frame(self, frame: FrameDelta) -> None:
        """Hand one frame's data to every view (the frame timer's work; benchmarks call it directly)."""
        started = time.perf_counter()
        if frame.engine_info is not None:
            self._new_engine(frame.engine_info)
        if frame.error:
            self._show_error(frame.error)
        changed = {}
        if frame.steps:
            timeline_steps, changed = timeline_and_flashes(frame.steps)
            self.timeline.add_steps(timeline_steps)
        if frame.points:
            self.series.add_points(frame.points)
        if frame.finished:
            self.series.add_finished(frame.finished)
        if frame.points or frame.finished:
            self.plots.set_series(self.series.arrays())
        if frame.events:
            self.event_log.add_lines([event_line(ev) for ev in frame.events])
        if frame.summary is not None:
            self.latest_summary = frame.summary
        if frame.snapshot is not None:
            self.latest_snapshot = frame.snapshot
            self.block_map.update_snapshot(frame.snapshot, changed or None)
            self._update_memory_bar()
            now = time.perf_counter()
            if now - self.last_table_update >= TABLE_INTERVAL_S:
                self.requests.set_requests(frame.snapshot.requests)
                self.last_table_update = now
        if frame.done:
            self.done = True
            self.play_action.setText("Play")
        elif frame.playing:
            self.play_action.setText("Pause")
        self.recording_steps = frame.recording_steps
        if frame.recording_steps is not None:
            self._recording_seen = True
        elif self._recording_seen and self.replay_path is None:  # ended: unchecked, Apply, Reset, workload done
            self._recording_seen = False
            self.record_action.setChecked(False)
        self._update_status(frame)
        self.frame_times_ms.append((time.perf_counter() - started) * 1000)
        self.frames_rendered += 1

    def _new_engine(self, info: dict) -> None:
        self.engine_info = info
        self.plan = info["plan"]
        self.series = RunSeries()
        self.timeline.clear()
        self.plots.clear()
        self.event_log.clear()
        self.latest_summary = {}
        backend = "real" if info["backend"] == "real" else "simulated"
        self.setWindowTitle(f"kvscope — {info['label']} — {info['workload'].name} ({backend})")

    def _update_memory_bar(self) -> None:
        plan, snap, theme = self.plan, self.latest_snapshot, self.theme
        if plan is None:
            return
        block_bytes = plan.block_bytes
        if snap is not None and snap.num_blocks == plan.num_blocks:
            counts = self.block_map.block_counts()  # counted as the map drew them: no second pass over the pool
            used = counts["used"] + counts["shared"] + counts["reserved"]
            cached = counts["cached"]
        else:
            used = cached = 0
        free = plan.num_blocks - used - cached
        segments = [
            Segment("weights", plan.weights_bytes, (120, 120, 140), plan.weights_source),
            Segment("KV in use", used * block_bytes, theme.decode, f"{used:,} blocks held by requests"),
            Segment("KV cached", cached * block_bytes, theme.good, f"{cached:,} free blocks holding reusable prefixes"),
            Segment("KV free", free * block_bytes, theme.free_block, f"{free:,} empty blocks"),
            Segment("reserve", plan.reserve_bytes, (150, 110, 160), "held back for activations and the runtime"),
        ]
        where = "this machine" if self.engine_info and self.engine_info["backend"] == "real" else plan.hardware
        self.memory_bar.set_segments(f"Memory budget: {plan.model} on {where}", segments)
        self.memory_bar.setToolTip(f"KV pool sized by {plan.kv_pool_source}")

    def _update_status(self, frame: FrameDelta) -> None:
        s = self.latest_summary
        snap = self.latest_snapshot
        parts = []
        if snap is not None:
            parts.append(f"engine clock {snap.time_s:,.2f} s")
            parts.append(f"step {snap.step:,}")
            parts.append(f"running {snap.num_running:,}")
            parts.append(f"waiting {snap.num_waiting:,}")
            parts.append(f"KV {format_percent(snap.kv_usage)}")
        if s:
            parts.append(f"completed {s.get('completed', 0):,}")
            parts.append(f"rejected {s.get('rejected', 0):,}")
            parts.append(f"preemptions {s.get('preemptions', 0):,}")
        recent = self.series.throughput()
        demo = self.demo.active  # large fonts: the line keeps what an audience reads
        if len(recent):
            parts.append(f"{recent[-1]:,.0f} output tokens/s" + ("" if demo else " (last second of engine time)"))
        if self.frame_times_ms and not demo:
            parts.append(f"frame {np.median(self.frame_times_ms):.1f} ms")
        if frame.recording_steps is not None:
            parts.append(f"\u25cf recording ({frame.recording_steps:,} steps)")
        if frame.status:
            self.statusBar().showMessage(frame.status, 4000)
        self.status.setText("   ".join(parts))

    def _show_error(self, error: str) -> None:
        self.errors_shown.append(error)
        first_line = error.strip().splitlines()[-1] if "Traceback" in error else error
        box = QMessageBox(QMessageBox.Warning, "The engine stopped",
                          f"{first_line}\n\nThe window keeps working: change a setting and apply, or reset.", parent=self)
        if "Traceback" in error:
            box.setDetailedText(error)
        box.setModal(False)
        box.open()
        self.play_action.setText("Play")

    def arrange_docks(self) -> None:
        """Below ~900 px of height the requests and events share the left dock with the settings,
        so the block map, timeline and plots keep the full height."""
        compact = self.height() < 900
        if compact:
            self.tabifyDockWidget(self.settings_dock, self.bottom_dock)
            self.settings_dock.raise_()
        width = self.width()
        side = 350 if width < 1500 else 400
        plots = 400 if width < 1500 else 520
        self.resizeDocks([self.settings_dock, self.plots_dock], [side, plots], Qt.Horizontal)
        if not compact:
            self.resizeDocks([self.bottom_dock], [220], Qt.Vertical)

    def closeEvent(self, event) -> None:  # noqa: N802
        self.timer.stop()
        self.worker.stop()
        self._stop_other_workers()
        super().closeEvent(event)
