"""The explorer window: the engine runs in its own process; a frame timer takes its latest frame,
folds it into the WindowState (window_state.py) and hands it to every registered panel
(panels.py), which only draw plain data.

This file builds the window and routes: the run keys to the engine shown (the live run, a
recording, a comparison), the pages and which docks they show. The toolbar and menus are built in
menus.py, File > Export works in export_menu.py, the Settings dock in settings_form.py, a replayed
recording in replay_controls.py."""

from __future__ import annotations

import time

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QApplication, QFileDialog, QMainWindow, QMessageBox, QTabWidget, QToolBar

from kvscope.engine.config import ConfigError
from kvscope.app.lab.scenarios import load_scenario
from kvscope.widgets.preset_editor import PresetEditor
from kvscope.widgets.replay_scrubber import ReplayScrubber
from kvscope.widgets.settings_panel import SettingsPanel, show_unused
from kvscope.widgets.shown_label import shown_label
from kvscope.widgets.throttled_label import ThrottledLabel

from kvscope.app.gui import menus, panels, recording_control
from kvscope.app.gui.app_theme import apply_theme
from kvscope.app.gui.build_failure import BuildWatch
from kvscope.app.gui.demo_mode import DemoMode
from kvscope.app.gui.error_box import ErrorBox
from kvscope.app.gui.replay_controls import ReplayControls
from kvscope.app.gui.run_settings import settings_choices, weight_dtype_choices
from kvscope.app.gui.scenario_texts import scenario_texts
from kvscope.app.gui.settings_form import NOT_APPLIED, SettingsForm
from kvscope.app.gui.window_state import WindowState, starting_text, window_title
from kvscope.app.host.process_host import SessionHost
from kvscope.app.host.session import EngineSession, FrameDelta

FRAME_INTERVAL_MS = 16  # at most ~60 frames a second
HIDDEN_FRAME_INTERVAL_MS = 250  # another page shows: 60 a second woke both processes, taking a comparison's cores
# The live page's heights, by panel: at 1280x720 the block map gets a third (a small pool's square cells
# then fill it), the timeline keeps room for its bars and lanes, the prompt box its input and some answer.
DESK_SPLIT = {"block_map": 0.32, "timeline": 0.45, "prompt": 0.23}


def _read_through_state(name: str) -> property:
    """A window attribute kept in its WindowState (tests, benchmarks and the self-test read them here)."""
    return property(lambda self: getattr(self.state, name), lambda self, value: setattr(self.state, name, value))


class MainWindow(ReplayControls, QMainWindow):
    """Builds the window (the registered panels, the settings dock, toolbars, menus) and routes:
    user actions to the engine host, each frame into the WindowState and on to every panel."""

    config = _read_through_state("config")
    engine_info = _read_through_state("engine_info")
    series = _read_through_state("series")
    latest_snapshot = _read_through_state("latest_snapshot")
    latest_summary = _read_through_state("latest_summary")
    done = _read_through_state("done")
    errors_shown = _read_through_state("errors_shown")
    recording_steps = _read_through_state("recording_steps")
    selected_request = _read_through_state("selected_request")
    frames_rendered = _read_through_state("frames_rendered")
    plan = property(lambda self: self.state.plan)
    theme = property(lambda self: self.state.theme)

    def __init__(self, initial: dict, theme: str = "dark", autoplay: bool = True, replay: str | None = None,
                 scenario: str | None = None, attach=None):
        super().__init__()
        self.setWindowTitle("kvscope")
        self.state = WindowState(theme)
        self.worker = SessionHost(EngineSession, name="engine")
        self.worker.start()
        self._build_views()
        menus.build_run_controls(self)
        self.settings_form.start(initial)
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
        self.error_box = ErrorBox(self)
        self.replay_path: str | None = None
        self._values_before_replay: dict = {}
        self._seek_target: tuple | None = None  # (position, when asked) of a seek not yet taken
        self.replay_bar.hide()
        self.scrubber_timer = QTimer(self)
        self.scrubber_timer.setInterval(100)
        self.scrubber_timer.timeout.connect(self._follow_replay)
        self.current_scenario: str | None = None
        menus.build_menus(self)
        if replay is not None:
            # A replay needs no model: the engine is not built, so a recording opens on any machine.
            self.open_recording(replay)
        elif scenario is None and attach is None:
            self.apply_settings(play=autoplay)
        # else the live engine is built when the live run is first played: the scenario has the CPU
        if scenario is not None:
            self.open_scenario(scenario)
        if attach is not None:
            from kvscope.app.gui.attach_view import open_attached

            open_attached(self, attach)

    # -- construction ---------------------------------------------------------------------------
    def _build_views(self) -> None:
        self.settings = SettingsPanel(settings_choices())
        self.editor = PresetEditor(weight_dtype_choices())
        self.panels = panels.PanelSet(self, panels.PANELS)
        for name, view in self.panels.views.items():
            if hasattr(self, name):
                raise ValueError(f"a panel may not be named {name!r}: the window has that attribute")
            setattr(self, name, view)  # window.block_map, window.plots, ...
        self.center_split = self.panels.center_split
        # A second page, the comparison, appears when a scenario is opened (the bar hides until then).
        self.pages = QTabWidget()
        self.pages.setTabBarAutoHide(True)
        self.pages.setDocumentMode(True)
        self.pages.addTab(self.panels.page, "Live run")
        self.pages.setTabToolTip(0, "the engine with the settings on the left")
        self.pages.currentChanged.connect(self._page_changed)
        self.setCentralWidget(self.pages)
        self.compare = None  # the CompareView, built on first use
        self.attached = None  # the page of an attached vLLM server (attach_view.py)
        self._dock_prefs: dict | None = None  # the user's dock visibility while a mode hides docks
        self._dock_hiding: set = set()

        self.settings_form = SettingsForm(self, self.settings, self.editor)
        self.settings_dock = self.settings_form.dock
        self.plots_dock = self.panels.docks[panels.PLOTS_DOCK]
        self.bottom_dock = self.panels.docks[panels.LISTS_DOCK]
        self.resizeDocks([self.settings_dock, self.plots_dock], [360, 520], Qt.Horizontal)
        self.resizeDocks([self.bottom_dock], [200], Qt.Vertical)

        self.status = ThrottledLabel()  # 10 times a second at most: see widgets/throttled_label.py
        self.statusBar().addWidget(self.status, 1)  # not permanent: Qt hides it while a message shows
        self.panels.connect_selection(self.select_request)
        self.prompt.prompt_submitted.connect(self.submit_prompt)
        self.prompt.usable_changed.connect(self._prompt_usable_changed)
        self.inspector_dock = self.panels.docks[panels.INSPECTOR_DOCK]
        self.builds = BuildWatch(self)  # a failed Apply: what the live page, Play and Step say

    def docks(self) -> list:
        return [self.settings_dock, *self.panels.docks.values()]

    # -- recordings -----------------------------------------------------------------------------
    def toggle_recording(self, checked: bool) -> None:
        recording_control.toggle(self, checked)

    def start_recording(self, path) -> bool:
        """Record the live run from its current step; refused here, with the reason, when there is no
        run, or the path cannot be written or is a file the run reads (recording_control.py)."""
        return recording_control.start(self, path)

    def _stop_other_workers(self) -> None:
        """At close: the live engine while a recording is replayed, and a comparison's thread."""
        if self.worker is not self.live_worker:
            self.live_worker.stop()
        if self.compare is not None:
            self.compare.stop()
        if self.attached is not None:
            self.attached.stop()

    # -- scenarios ------------------------------------------------------------------------------
    def open_scenario(self, name: str, requests: int | None = None) -> bool:
        """Show the scenario's question on the comparison page; its run waits for the guess."""
        try:
            scenario = load_scenario(name)
            spec = scenario.comparison_spec(requests=requests)
        except ConfigError as exc:
            QMessageBox.warning(self, "Cannot open the scenario", str(exc))
            return False
        self.open_comparison(spec, scenario.title, scenario_texts=scenario_texts(scenario),
                             scenario=scenario)
        self.current_scenario = name
        if scenario.backend == "simulated" and self.speed.currentData() != 0:  # "max" stays max
            # the scenario's own pace, so that its reveal comes within about 20 s
            self.speed.setCurrentIndex(max(self.speed.findData(scenario.playback_speed), 0))
        return True

    # -- pages: the live run, a comparison --------------------------------------------------------
    def compare_showing(self) -> bool:
        return self.compare is not None and self.pages.currentWidget() is self.compare

    def _page_changed(self, _index: int) -> None:
        if self.compare is not None and not self.compare_showing() and self.compare.playing:
            self.compare.toggle_play()  # a comparison out of sight would only take the live run's CPU
        self.update_docks()
        self.show_run_controls_use()
        live_page = self.pages.currentWidget() is self.panels.page
        self.timer.setInterval(FRAME_INTERVAL_MS if live_page else HIDDEN_FRAME_INTERVAL_MS)
        self.status.setVisible(not self.compare_showing())  # the live run's numbers
        if self.compare_showing():
            self.play_action.setText("Pause" if self.compare.playing else "Play")
        else:
            self.play_action.setText("Play")

    def update_docks(self) -> None:
        """Docks hidden by a mode come back as the user had them: the comparison page hides all
        three (they belong to the live run), demo mode the settings and request lists."""
        docks = self.docks()
        hiding = set(docks) if self.compare_showing() else set()
        if self.attached is not None and self.pages.currentWidget() is self.attached:
            hiding = set(self.attached.hidden_docks(self))
        if self.demo.active:
            hiding |= set(self.demo.hidden_docks())
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
            # work in progress ("building the configurations ...") stays until the next status replaces it
            self.compare.status_changed.connect(
                lambda text: self.statusBar().showMessage(text, 0 if text.endswith("...") else 8000))
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

    def open_comparison(self, spec, title: str, **kwargs) -> None:
        """Show the comparison page running spec, a lab.compare.ComparisonSpec (see CompareView)."""
        view = self.compare_view()
        self.live_worker.pause()  # two engines at once would halve both; the live run waits
        if self.replay_path is None:
            self.play_action.setText("Play")
        view.set_speed(self.speed.currentData())
        view.open_comparison(spec, title, **kwargs)
        self.pages.setCurrentWidget(view)
        # cut at the end: "a...ryone's next token (59 characters)" read as noise on a talk's screen
        whole, index = shown_label(title, 300), self.pages.indexOf(view)
        cut = whole[:whole.rfind(" ", 20, 40)] if whole.rfind(" ", 20, 40) > 0 else whole[:39]
        self.pages.setTabText(index, f"Compare: {whole if len(whole) <= 40 else cut.rstrip() + chr(0x2026)}")
        self.pages.setTabToolTip(index, whole)

    # -- demo mode, exports ----------------------------------------------------------------------
    def toggle_demo(self) -> None:
        self.demo.toggle()

    def start_demo(self, size: tuple[int, int] | None = None, theme: str | None = None) -> None:
        """`kvscope gui --demo --size 1280x720 --theme dark`: demo mode at that size in that theme."""
        self.demo.start(size, theme)

    def leave_demo(self) -> None:
        self.demo.leave()

    def _ask_save_path(self, title: str, default: str, formats: str) -> str | None:
        """The file dialog of every export (tests replace this method)."""
        path, _ = QFileDialog.getSaveFileName(self, title, default, formats)
        return path or None

    # -- settings -------------------------------------------------------------------------------
    def apply_settings(self, play: bool = True) -> bool:
        typed = self.settings_form.take_typed_value()  # a number typed in a box and not yet entered
        config = None if typed else self.settings_form.current_config()
        if config is None:  # the refused field is brought into view and focused, its reason said here
            reason = typed or self.settings_form.reveal_refusal() or "a setting is refused (see the Settings panel)"
            self.statusBar().showMessage(f"{NOT_APPLIED}{reason}", 10000)
            return False
        self.config = config
        self.show_run_controls_use()
        self.done = False
        self.worker.set_speed(self.speed.currentData())
        self.worker.apply(config, play=play)
        self.builds.applied()
        if self.engine_info is None:
            self.status.setText(starting_text(config))  # until its first frame (see starting_text)
        return True

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
        elif self.builds.refused("play"):
            return
        elif self.done or self.engine_info is None:
            if self.apply_settings(play=True):  # refused settings: their field says why, and nothing plays
                self.play_action.setText("Pause")
        else:
            self.worker.play()
            self.play_action.setText("Pause")

    def step_once(self) -> None:
        if self.builds.refused("step"):
            return
        self.worker.step_once()
        self.play_action.setText("Play")

    def speed_unused(self) -> str | None:
        """Why the Speed list paces nothing on the page shown (None: it paces the run there). On the
        real backend, or an attached server's page, 0.1x or max was taken without a word."""
        page = self.pages.currentWidget()
        if self.attached is not None and page is self.attached:  # its recording is paced by it
            return None if self.attached.recording is not None else "an attached server runs at its own pace"
        replaying = getattr(self, "replay_path", None) is not None  # (read while the window is built too)
        if page is self.panels.page and not replaying and getattr(self.config, "backend", "") == "real":
            return ("the real backend runs at this machine's speed; Speed paces the simulated backend, "
                    "a recording and a comparison")
        return None

    def seed_unused_here(self) -> str | None:
        """Why the toolbar's seed is not the run of the page shown: R on the Compare page restarted
        the comparison with its own seed, the one typed taken without a word."""
        page = self.pages.currentWidget()
        if self.compare is not None and page is self.compare:
            return "the comparison draws its workload with its own seed (said on its page); this seed is the live run's"
        if self.attached is not None and page is self.attached:
            return "an attached server runs the requests its clients send"
        return None

    def show_run_controls_use(self) -> None:
        """Grey the Speed list and the seed where they change nothing (their tooltips say why)."""
        show_unused(self.speed, self.speed_unused())
        if getattr(self, "replay_path", None) is None:  # a replay greys the seed for its own reason
            show_unused(self.seed, self.seed_unused_here() or self.settings_form.seed_reason)

    def _nudge_speed(self, direction: int) -> None:
        unused = self.speed_unused()
        if unused is not None:  # + and - stepped the greyed list
            self.statusBar().showMessage(f"speed not changed: {unused}", 10000)
            return
        index = min(max(self.speed.currentIndex() + direction, 0), self.speed.count() - 1)
        self.speed.setCurrentIndex(index)

    def toggle_theme(self) -> None:
        self.set_theme("light" if self.theme.is_dark else "dark")

    def set_theme(self, name: str) -> None:
        self.state.theme_name = name
        apply_theme(QApplication.instance(), self.theme)
        self.panels.set_theme(self.theme)
        self.scrubber.set_theme(self.theme)
        self.builds.set_theme(self.theme)
        if self.compare is not None:
            self.compare.set_theme(self.theme)
        if self.attached is not None:
            self.attached.set_theme(self.theme)
        self.panels.update(self.state.nothing_new())  # colours a view was given as data (the memory bar's)

    def select_request(self, request_id: int) -> None:
        self.state.selected_request = request_id
        self.panels.select_request(request_id)
        if request_id >= 0:
            self.statusBar().showMessage(f"request #{request_id} selected", 3000)
            if self.inspector_dock.toggleViewAction().isChecked():  # open, perhaps behind another tab
                self.inspector_dock.raise_()

    def submit_prompt(self, text: str) -> None:
        """The prompt box's Send: the text joins the live run; a frame says as which request, or why not."""
        self.live_worker.submit_prompt(text)

    # -- frames ---------------------------------------------------------------------------------
    def on_frame(self) -> None:
        frame = self.worker.take_frame()
        # None: the engine has not answered the last request yet; an idle frame: a paused engine
        if frame is not None and not frame.idle:
            self.render_frame(frame)

    def render_frame(self, frame: FrameDelta) -> None:
        """Fold one frame into the state and hand it to every panel (the frame timer's work;
        benchmarks call it directly)."""
        started = time.perf_counter()
        recording_was_seen = self.state.recording_seen  # take() forgets it when the recording stopped
        steps_recorded = self.state.recording_steps
        update = self.state.take(frame, replaying=self.replay_path is not None)
        if update.new_engine:
            self.panels.clear()
            self.setWindowTitle(window_title(frame.engine_info))
            self.demo.engine_changed()
        live = self.replay_path is None
        failed_build = live and self.builds.take(frame, update)  # said there, with the previous run marked
        if frame.error and not failed_build and not (live and recording_control.show_failure(self, frame, recording_was_seen)):
            self._show_error(frame.error, recording_control.kept_note(self, update, steps_recorded))
        self.panels.update(update)
        if frame.done or failed_build:
            self.play_action.setText("Play")
        elif frame.playing:
            self.play_action.setText("Pause")
        if update.recording_ended:
            self.record_action.setChecked(False)
        if frame.status:
            self.statusBar().showMessage(frame.status, 4000)
        self.status.setText(self.builds.status_line(self.state.status_text()))
        self.state.frame_drawn(time.perf_counter() - started)

    def _show_error(self, error: str, recording_note: str = "") -> None:
        if self.replay_path is not None:
            self.error_box.show("The replay stopped", error, "The window keeps working: open another recording, "
                                "or File > Back to the live engine (Ctrl+L).")
        else:
            self.error_box.show("The engine stopped", error, f"{recording_note}The window keeps working: change a "
                                "setting and apply, or reset.")
        self.play_action.setText("Play")

    def arrange_docks(self) -> None:
        """Below ~900 px of height the requests and events share the left dock with the settings,
        so the block map, timeline and plots keep the full height."""
        compact = self.height() < 900
        if compact:
            self.tabifyDockWidget(self.settings_dock, self.bottom_dock)
            self.tabifyDockWidget(self.bottom_dock, self.inspector_dock)
            self.settings_dock.raise_()
        width = self.width()
        side = 350 if width < 1500 else 400
        plots = 400 if width < 1500 else 520
        self.resizeDocks([self.settings_dock, self.plots_dock], [side, plots], Qt.Horizontal)
        if not compact:
            self.resizeDocks([self.bottom_dock], [220], Qt.Vertical)
        self._share_center_split()

    def _prompt_usable_changed(self, _usable: bool) -> None:
        """The prompt box's height limit changed with the engine: the split is shared again (demo
        mode's by its own shares, which it laid out before the box's limit was lifted)."""
        if self.demo.active:
            self.demo.engine_changed()
        else:
            self._share_center_split()

    def _share_center_split(self) -> None:
        """The live page's split by DESK_SPLIT: left to the widgets' size hints, the batch
        timeline took twice the block map's height at 1280x720 and a small pool's map was a band.
        A prompt box that is off (no engine that reads text) keeps only its input and the reason;
        the height it does not need goes to the other panels in their shares."""
        split = self.center_split
        self.layout().activate()  # the docks may just have been resized: the split as it will be shown
        self.panels.page.layout().activate()
        names = {id(view): name for name, view in self.panels.views.items()}
        panel_names = [names.get(id(split.widget(i)), "") for i in range(split.count())]
        unnamed = [name for name in panel_names if name not in DESK_SPLIT]
        left = max(0.0, 1.0 - sum(DESK_SPLIT.get(name, 0.0) for name in panel_names))
        total = split.height() - split.handleWidth() * (split.count() - 1)
        if total <= 0:  # not laid out yet (a window not shown): the sizes it was given
            total = sum(split.sizes())
        sizes = [total * DESK_SPLIT[name] if name in DESK_SPLIT else total * left / len(unnamed)
                 for name in panel_names]
        prompt = self.panels.views.get("prompt")
        if "prompt" in panel_names and prompt.no_text_reason is not None:
            at = panel_names.index("prompt")
            needed = min(sizes[at], prompt.compact_height(split.width()))
            spare = sizes[at] - needed
            others = sum(size for i, size in enumerate(sizes) if i != at)
            if others > 0:
                sizes = [needed if i == at else size + spare * size / others for i, size in enumerate(sizes)]
        split.setSizes([int(size) for size in sizes])

    def closeEvent(self, event) -> None:  # noqa: N802
        self.timer.stop()
        self.worker.stop()
        self._stop_other_workers()
        super().closeEvent(event)
