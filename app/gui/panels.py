"""The window's panels, one registry line each: its title, where it goes, the widget that draws it
and how a frame updates it. MainWindow builds the live-run page and the docks from ``PANELS`` and
hands every frame to each panel's ``update``; adding a panel is one widget in widgets/ and one line
here (or a ``register`` call).

A view also joins what the window does to every view by having the method for it:
``set_theme(theme)`` (the theme switch), ``clear()`` (a new engine), ``select_request(id)`` with a
``request_selected`` signal (the request selected in any view). Views on the live-run page take
the keyboard focus on a click, so the run keys (Space, arrows) reach the window.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDockWidget, QMainWindow, QSplitter, QTabWidget, QVBoxLayout, QWidget

from kvscope.app.gui.event_text import EVENT_KINDS, event_line
from kvscope.app.gui.prompt_box import PromptBox, show_prompt_box
from kvscope.app.gui.request_inspector import RequestInspector, show_inspector
from kvscope.app.gui.window_state import FrameUpdate
from kvscope.widgets.batch_timeline import BatchTimelineView, TimelineStep
from kvscope.widgets.block_map import BlockMapView
from kvscope.widgets.event_log import EventLog
from kvscope.widgets.live_plots import STEP_CURVES_INTERVAL_S, LivePlots
from kvscope.widgets.memory_bar import MemoryBudgetBar, Segment
from kvscope.widgets.requests_table import RequestsTable

# Where a panel goes: the live-run page (above its split, or in the split), or a dock.
TOP, CENTER = "top", "center"
DOCK_AREAS = {"left": Qt.LeftDockWidgetArea, "right": Qt.RightDockWidgetArea, "bottom": Qt.BottomDockWidgetArea}
PLOTS_DOCK = "Live plots"
LISTS_DOCK = "Requests and events"
INSPECTOR_DOCK = "Request"
TABLE_INTERVAL_S = 0.25  # a table of 1,000 rows is not worth redrawing 60 times a second
# The timeline scrolls by 4 of its 400 steps: 30 redraws a second read as smooth as 60, at half the
# cost (its image, marks and ranges ~1 ms a frame, its paint ~1 ms more).
TIMELINE_INTERVAL_S = 1 / 30
CENTER_HANDLE_PX = 12  # the live page's splitter handles: room for the grip between two panels


@dataclass(frozen=True)
class Panel:
    name: str  # the window's attribute for its view (window.block_map)
    title: str  # its tab (or, alone in a dock, nothing: the dock's title) and its export title
    make: Callable[[], QWidget]
    update: Callable[[QWidget, FrameUpdate], None]
    place: str = CENTER  # TOP, CENTER, or a dock area: "left", "right", "bottom"
    dock: str = ""  # the dock's title; panels naming the same dock share it as tabs
    stretch: int = 1  # CENTER: its share of the split's height
    min_interval_s: float = 0.0  # updated at most this often
    export_png: bool = False  # File > Export offers it as a PNG of the view as it is on screen


def show_snapshot(view: BlockMapView, update: FrameUpdate) -> None:
    if update.frame.snapshot is not None:
        view.update_snapshot(update.frame.snapshot, update.flashes or None)


def show_steps(view: BatchTimelineView, update: FrameUpdate) -> None:
    if update.timeline_steps:
        view.add_steps([TimelineStep._make(fields) for fields in update.timeline_steps])


def show_memory_budget(view: MemoryBudgetBar, update: FrameUpdate) -> None:
    if update.frame.snapshot is None and not update.redraw:
        return
    block_map = update.views.get("block_map")  # counted as the map drew them: no second pass over the pool
    budget = update.state.memory_budget(block_map.block_counts() if block_map is not None else None)
    if budget is not None:
        title, tooltip, segments = budget
        view.set_segments(title, [Segment(*segment) for segment in segments])
        view.setToolTip(tooltip)


def show_series(view: LivePlots, update: FrameUpdate) -> None:
    if len(update.frame.points) or update.frame.finished or update.frame.first_tokens:
        view.set_series(update.state.series.arrays())


def show_requests(view: RequestsTable, update: FrameUpdate) -> None:
    if update.frame.snapshot is not None:
        view.show_requests(update.frame.snapshot.requests)


def show_events(view: EventLog, update: FrameUpdate) -> None:
    if update.frame.events:
        view.add_lines(list(update.frame.events), event_line)  # formatted only once the log is seen


# Updated in this order: the memory bar reads the block counts of the block map's new drawing.
PANELS: list[Panel] = [
    Panel("block_map", "Block map", BlockMapView, show_snapshot, stretch=3, export_png=True),
    Panel("timeline", "Batch timeline", lambda: BatchTimelineView(refresh_interval_s=TIMELINE_INTERVAL_S), show_steps,
          stretch=2, export_png=True),
    Panel("memory_bar", "Memory budget", MemoryBudgetBar, show_memory_budget, place=TOP),
    Panel("plots", "Live plots", lambda: LivePlots(step_interval_s=STEP_CURVES_INTERVAL_S), show_series,
          place="right", dock=PLOTS_DOCK),
    Panel("requests", "Requests", RequestsTable, show_requests, place="bottom", dock=LISTS_DOCK,
          min_interval_s=TABLE_INTERVAL_S),
    Panel("event_log", "Event log", lambda: EventLog(kinds=EVENT_KINDS), show_events, place="bottom", dock=LISTS_DOCK),
    Panel("prompt", "Prompt", PromptBox, show_prompt_box, stretch=2),
    Panel("inspector", "Request", RequestInspector, show_inspector, place="bottom", dock=INSPECTOR_DOCK),
]


def register(panel: Panel) -> Panel:
    """Add a panel to the windows built from now on."""
    PANELS.append(panel)
    return panel


def add_dock(window: QMainWindow, title: str, area, widget: QWidget) -> QDockWidget:
    dock = QDockWidget(title, window)
    dock.setObjectName(title)  # saveState / restoreState know a dock by it
    dock.setWidget(widget)
    dock.setFeatures(QDockWidget.DockWidgetMovable | QDockWidget.DockWidgetFloatable | QDockWidget.DockWidgetClosable)
    window.addDockWidget(area, dock)
    return dock


def tabbed(*pages: tuple[QWidget, str]) -> QTabWidget:
    tabs = QTabWidget()
    for widget, title in pages:
        tabs.addTab(widget, title)
    return tabs


class PanelSet:
    """The registered panels built into a window: ``page`` (the live run: TOP panels above a
    vertical split of the CENTER ones) for the window to place, and their docks, added to it."""

    def __init__(self, window: QMainWindow, panels: list[Panel]):
        self.panels = list(panels)
        self.views: dict[str, QWidget] = {}
        for panel in self.panels:
            if panel.name in self.views:
                raise ValueError(f"two panels are named {panel.name!r}")
            self.views[panel.name] = panel.make()
        self._last_update = dict.fromkeys(self.views, 0.0)

        self.page = QWidget()
        layout = QVBoxLayout(self.page)
        layout.setContentsMargins(4, 4, 4, 4)
        self.center_split = QSplitter(Qt.Vertical)
        # wider than the style's ~5 px: its grip is drawn at the handle's centre, which put it on the
        # last line of the panel above ("hover a block for details", the timeline's axis label)
        self.center_split.setHandleWidth(CENTER_HANDLE_PX)
        for panel in self.panels:
            view = self.views[panel.name]
            if panel.place == TOP:
                layout.addWidget(view)
            elif panel.place == CENTER:
                self.center_split.addWidget(view)
                self.center_split.setStretchFactor(self.center_split.count() - 1, panel.stretch)
            if panel.place in (TOP, CENTER):
                view.setFocusPolicy(Qt.StrongFocus)
        layout.addWidget(self.center_split, 1)

        self.docks: dict[str, QDockWidget] = {}
        for title in dict.fromkeys(p.dock for p in self.panels if p.place in DOCK_AREAS):
            members = [p for p in self.panels if p.place in DOCK_AREAS and p.dock == title]
            widget = (self.views[members[0].name] if len(members) == 1
                      else tabbed(*((self.views[p.name], p.title) for p in members)))
            self.docks[title] = add_dock(window, title, DOCK_AREAS[members[0].place], widget)

    def update(self, update: FrameUpdate) -> None:
        update.views = self.views
        now = time.perf_counter()
        for panel in self.panels:
            if panel.min_interval_s:
                if now - self._last_update[panel.name] < panel.min_interval_s:
                    continue
                self._last_update[panel.name] = now
            panel.update(self.views[panel.name], update)

    def panel(self, name: str) -> Panel:
        return next(panel for panel in self.panels if panel.name == name)

    def _having(self, method: str) -> list[QWidget]:
        return [view for view in self.views.values() if callable(getattr(view, method, None))]

    def clear(self) -> None:
        for view in self._having("clear"):
            view.clear()

    def set_theme(self, theme) -> None:
        for view in self._having("set_theme"):
            view.set_theme(theme)

    def select_request(self, request_id: int) -> None:
        for view in self._having("select_request"):
            view.select_request(request_id)

    def connect_selection(self, slot) -> None:
        for view in self._having("select_request"):
            if hasattr(view, "request_selected"):
                view.request_selected.connect(slot)

    def exported_as_png(self) -> list[Panel]:
        return [panel for panel in self.panels if panel.export_png]
