"""The comparison page around a scenario's guess: frames that arrive late in the order a slow
machine gives them never undo the committed guess's run, the plots have the room before the
guess (demo mode at 1280x720), and the revealed answer's row shows its whole name."""

from __future__ import annotations

import dataclasses

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QFontMetrics

import kvscope.app.gui.main_window as main_window_module
from kvscope.app.cli.gui import initial_values
from kvscope.app.gui.compare_window import METRIC_ROWS, CompareView
from kvscope.app.gui.demo_mode import DemoMode
from kvscope.app.gui.main_window import MainWindow
from kvscope.app.gui.scenario_texts import scenario_texts
from kvscope.app.host.comparison import ComparisonSession
from kvscope.app.host.process_host import SessionHost
from kvscope.app.host.protocol import FRAME, CompareFrame, encode_frame
from kvscope.app.lab.scenarios import load_scenario

MIN_PLOT_PX = 150  # a plot's data area readable from the back of a room at 1280x720


class _Pipe:
    """The host's end of the pipe: commands recorded, frames the test queues read back encoded,
    as the comparisons' process would send them."""

    def __init__(self):
        self.sent: list = []
        self.messages: list = []

    def send(self, message) -> None:
        self.sent.append(message)

    def poll(self) -> bool:
        return bool(self.messages)

    def recv_bytes(self) -> bytes:
        return self.messages.pop(0)


class FakeHost(SessionHost):
    """The real SessionHost (its handling of frames and commands) over a pipe the test drives:
    the frames the test queues arrive one per take_frame, in the order the test chooses."""

    def __init__(self):
        super().__init__(ComparisonSession, name="comparison")
        self._process = type("Running", (), {"is_alive": lambda self: True, "pid": 1})()
        self._conn = _Pipe()
        self.frames = _Frames(self)

    @property
    def commands(self) -> list[str]:
        return [command for command, _ in self._conn.sent if command != FRAME]

    @property
    def frames_asked(self) -> int:
        return sum(command == FRAME for command, _ in self._conn.sent)

    def take_frame(self):
        self.ask_now()
        return super().take_frame()


class _Frames(list):
    """Frames appended here cross the fake pipe as the process would make and encode them: stamped
    with the apply and seek commands it has read (all that were sent)."""

    def __init__(self, host: FakeHost):
        super().__init__()
        self._host = host

    def append(self, frame) -> None:
        frame.generation = self._host._generation
        self._host._conn.messages.extend(bytes(m) for m in encode_frame(frame))

    def __bool__(self) -> bool:
        return bool(self._host._conn.messages)


def info_frame(scenario, playing: bool) -> CompareFrame:
    labels = scenario.labels
    n = len(labels)
    info = {"labels": labels, "backends": ["real"] * n, "plans": [None] * n, "num_requests": 4,
            "models": ["tiny"] * n, "hardware": ["cpu"] * n, "workload": {"name": "chat", "seed": 0}}
    return CompareFrame(info=info, playing=playing, status="ready")


def test_a_frame_made_before_the_guess_reached_the_comparison_does_not_stop_its_run(qtbot):
    """The order a real model gives: the guess is committed while the new comparison still loads its
    model; its first frame, made before the session read Play, says "paused" and comes after the
    commit. The page kept that word: the run looked stopped and Space sent Pause, then Play."""
    view = CompareView()
    qtbot.addWidget(view)
    view.resize(1280, 600)
    view.show()
    host = view.host = FakeHost()
    scenario = load_scenario("fp8-kv-real")
    view.open_comparison(object(), scenario.title, scenario_texts=scenario_texts(scenario), scenario=scenario)
    assert view.awaiting_guess() and not view.playing

    qtbot.waitUntil(lambda: host.frames_asked > 0, timeout=5000)  # the page asked for its first frame
    view.panel.commit()  # Enter in the guess box, or Space, before the first frame came
    assert host.commands[-1] == "play" and view.playing

    host.frames.append(info_frame(scenario, playing=False))  # made before the session read Play
    qtbot.waitUntil(lambda: len(view.columns) == len(scenario.labels) and not host.frames, timeout=5000)
    assert view.playing, "a frame older than the Play said the run is paused"
    assert view.panel.committed_guess is not None and not view.panel.commit_button.isEnabled()

    view.toggle_play()  # Space now pauses the running comparison: the guess stays locked, nothing restarts
    assert host.commands[-1] == "pause" and not view.playing
    assert view.panel.committed_guess is not None
    asked = host.frames_asked
    host.frames.append(CompareFrame(playing=False))  # asked before the Pause, made after: paused
    qtbot.waitUntil(lambda: not host.frames and host.frames_asked > asked, timeout=5000)
    assert not view.playing
    host.frames.append(CompareFrame(playing=True))  # asked after it: a session playing again is believed
    qtbot.waitUntil(lambda: view.playing and not host.frames, timeout=5000)


def test_a_frame_asked_before_the_newest_play_or_pause_says_what_that_command_left():
    """The host's rule, which the window's Play/Pause label and the comparison page both read: a frame
    asked for before the newest Play, Pause or Step may be made before the session read it, so its
    `playing` is what that command left; a frame asked after it is believed."""
    host = FakeHost()
    host.take_frame()  # asks for a frame
    host.play()
    host.frames.append(CompareFrame(playing=False))  # made before the session read Play
    assert host.take_frame().playing is True
    host.frames.append(CompareFrame(playing=False))  # asked after Play: the session stopped by itself
    assert host.take_frame().playing is False
    host.pause()
    host.frames.append(CompareFrame(playing=True))  # asked before Pause
    assert host.take_frame().playing is False
    host.frames.append(CompareFrame(playing=True, done=True))  # a run that ended says so whatever was sent
    assert host.take_frame().done


class Args:
    backend, model, hardware, workload, model_path = "simulated", None, "h100-80gb", "chat", None


@pytest.fixture
def demo_window(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("KVSCOPE_CONFIG_DIR", str(tmp_path / "config"))
    # a 1280x720 screen (the offscreen one is 800x800): demo mode's window covers the screen it is on
    # (tested in test_demo_mode.py); here it is given a 1280x720 screen's size instead
    monkeypatch.setattr(DemoMode, "_cover_the_screen", lambda self: None)
    win = MainWindow(initial_values(Args()), autoplay=False, scenario="cache-ceiling")
    qtbot.addWidget(win)
    win.show()
    qtbot.waitExposed(win)
    win.toggle_demo()
    win.setWindowState(Qt.WindowNoState)  # offscreen, fullscreen is the 800x800 screen
    win.setGeometry(0, 0, 1280, 720)
    qtbot.waitUntil(lambda: win.width() == 1280 and win.height() == 720, timeout=5000)
    win.speed.setCurrentText("max")
    yield win
    win.demo.leave()  # the application font is global
    win.close()


def small(name: str):
    scenario = load_scenario(name)
    workload = scenario.workload.replace(spec=scenario.workload.spec.with_overrides(num_requests=scenario.min_requests))
    return dataclasses.replace(scenario, workload=workload, min_requests=1)


def plot_heights(view) -> list[float]:
    return [plot.getViewBox().height() for plot in view.plots.plots.values() if plot.isVisible()]


def test_demo_mode_at_1280x720_gives_the_plots_the_room_before_the_guess(demo_window, qtbot, monkeypatch):
    scenario = small("chunked-prefill")
    monkeypatch.setattr(main_window_module, "load_scenario", lambda _name: scenario)
    assert demo_window.open_scenario("chunked-prefill")
    view = demo_window.compare
    qtbot.waitUntil(lambda: len(view.columns) == len(scenario.configs) and all(c.veiled for c in view.columns),
                    timeout=30000)
    qtbot.waitUntil(lambda: min(plot_heights(view)) >= MIN_PLOT_PX, timeout=5000)
    assert not view.block_legend.isVisible()  # no block map shows before the guess: its legend neither
    index = demo_window.pages.indexOf(view)  # a long title is cut at its end, whole in the tooltip
    assert demo_window.pages.tabText(index) == "Compare: Chunked prefill: a long prompt stalls\u2026"
    assert demo_window.pages.tabToolTip(index) == scenario.title and len(scenario.title) > 40

    demo_window.play_pressed()  # the guess is locked: the block maps and their legend take their room
    qtbot.waitUntil(lambda: view.revealed is not None or bool(view.errors_shown), timeout=60000)
    assert not view.errors_shown
    assert view.block_legend.isVisible() and view.bottom_tabs.tabBar().isVisible()
    row_name = {key: name for key, name, *_ in METRIC_ROWS}[scenario.reveal_from.name]
    table = view.table
    row = [table.item(r, 0).text().startswith(row_name) for r in range(table.rowCount())].index(True)
    item = table.item(row, 0)
    assert item.font().bold()
    needed = QFontMetrics(item.font()).horizontalAdvance(item.text())
    assert table.columnWidth(0) >= needed, f"the answer's row name is elided: {table.columnWidth(0)} < {needed} px"
