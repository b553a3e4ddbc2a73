"""The explorer window: the engine runs in its own process; a frame timer hands its latest
snapshot and the steps since the last frame to the views, which only draw plain data."""

from __future__ import annotations

import time
from collections import deque

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QAction, QColor, QKeySequence, QPalette
from PySide6.QtWidgets import (
    QApplication,
    QComboBox,
    QDockWidget,
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

from kvscope.engine.events import EventKind
from kvscope.engine.presets import load_model, preset_names, user_preset_names
from kvscope.widgets.batch_timeline import BatchTimelineView, TimelineStep
from kvscope.widgets.block_map import BlockMapView
from kvscope.widgets.event_log import EventLog
from kvscope.widgets.live_plots import LivePlots
from kvscope.widgets.memory_bar import MemoryBudgetBar, Segment
from kvscope.widgets.palette import THEMES
from kvscope.widgets.preset_editor import PresetEditor
from kvscope.widgets.requests_table import RequestsTable
from kvscope.widgets.settings_panel import SettingsPanel

from .engine_process import EngineProcess
from .engine_worker import FrameDelta, RunConfig
from .event_text import EVENT_KINDS, event_line
from .run_settings import SettingsError, build_run_config, memory_preview, values_from_model
from .series import RunSeries
from .units import format_percent

FRAME_INTERVAL_MS = 16  # at most ~60 frames a second
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


_FLASH_KINDS = {EventKind.ALLOCATED: "allocated", EventKind.EVICTED: "evicted", EventKind.PREFIX_HIT: "prefix_hit",
                EventKind.PREEMPTED: "preempted"}


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
            if ev.blocks and kind in _FLASH_KINDS:
                changed.setdefault(_FLASH_KINDS[kind], []).extend(ev.blocks)
        steps.append(TimelineStep(r.step, r.start_time_s, r.duration_s, r.request_ids, r.num_new_tokens, r.is_prefill,
                                  joined, finished, preempted))
    return steps, {kind: np.asarray(blocks, dtype=np.int64) for kind, blocks in changed.items()}


class MainWindow(QMainWindow):
    def __init__(self, initial: dict, theme: str = "dark", autoplay: bool = True):
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
        self.set_theme(theme)
        self.timer = QTimer(self)
        self.timer.setInterval(FRAME_INTERVAL_MS)
        self.timer.timeout.connect(self.on_frame)
        self.timer.start()
        self.apply_settings(play=autoplay)

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
        split = QSplitter(Qt.Vertical)
        split.addWidget(self.block_map)
        split.addWidget(self.timeline)
        split.setStretchFactor(0, 3)
        split.setStretchFactor(1, 2)
        layout.addWidget(split, 1)
        self.setCentralWidget(center)

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
        self.play_action = self._action("Play", Qt.Key_Space, "play or pause the engine", self.toggle_play, bar)
        self._action("Step", [Qt.Key_Right, Qt.Key_S], "run exactly one engine step", self.step_once, bar)
        bar.addSeparator()
        bar.addWidget(QLabel(" Speed "))
        self.speed = QComboBox()
        for label, value in SPEEDS:
            self.speed.addItem(label, value)
        self.speed.setCurrentText("1x")
        self.speed.setToolTip("simulated backend: engine seconds per wall-clock second (+ / -); "
                              "the real backend runs at this machine's speed")
        self.speed.currentIndexChanged.connect(lambda _: self.worker.set_speed(self.speed.currentData()))
        bar.addWidget(self.speed)
        self._action("Faster", [Qt.Key_Plus, Qt.Key_Equal], "run the simulated clock faster", lambda: self._nudge_speed(1))
        self._action("Slower", Qt.Key_Minus, "run the simulated clock slower", lambda: self._nudge_speed(-1))
        bar.addSeparator()
        bar.addWidget(QLabel(" Seed "))
        self.seed = QSpinBox()
        self.seed.setRange(0, 2**31 - 1)
        self.seed.setToolTip("random seed of the workload: the same seed replays the same run")
        bar.addWidget(self.seed)
        self._action("Reset", Qt.Key_R, "rebuild the engine and restart the workload with this seed",
                     lambda: self.apply_settings(play=True), bar)
        self._action("Apply", [QKeySequence("Ctrl+Return"), QKeySequence("Ctrl+Enter")],
                     "apply the settings: rebuild the engine in place", lambda: self.apply_settings(play=True))
        bar.addSeparator()
        self._action("Theme", QKeySequence("Ctrl+T"), "switch between the light and dark themes", self.toggle_theme, bar)
        self._action("Quit", QKeySequence.Quit, "close kvscope", self.close)

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
            from kvscope.engine.presets import load_hardware

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
        from kvscope.engine.config import ConfigError
        from kvscope.engine.presets import load_hardware, save_user_preset

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
        from kvscope.engine.presets import delete_user_preset

        delete_user_preset(kind, name)
        self.settings.set_choices(preset_names("models"), preset_names("hardware"), preset_names("workloads"))
        self._refresh_user_presets()
        self.statusBar().showMessage(f"deleted your preset {name}", 5000)

    def _refresh_user_presets(self) -> None:
        self.editor.set_user_presets([("models", n) for n in user_preset_names("models")]
                                     + [("hardware", n) for n in user_preset_names("hardware")])

    # -- run controls ---------------------------------------------------------------------------
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
        for view in (self.memory_bar, self.block_map, self.timeline, self.plots):
            view.set_theme(self.theme)
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
        if frame is not None:  # None: the engine has not answered the last frame request yet
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
            used = snap.count(2) + snap.count(3)
            cached = snap.count(1)
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
        if len(recent):
            parts.append(f"{recent[-1]:,.0f} output tokens/s (last second of engine time)")
        if self.frame_times_ms:
            parts.append(f"frame {np.median(self.frame_times_ms):.1f} ms")
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
        super().closeEvent(event)
