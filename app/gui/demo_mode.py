"""Demo mode, for talks: fullscreen, large fonts, a high-contrast theme, the settings docks out of
the way; leaving it puts every one of those back as it was.

Qt widgets follow the application font, but pyqtgraph's scenes do not: tick labels, axis labels
and plot titles carry their own sizes (and some views fix an axis width for a given font). So
the mode also walks every pyqtgraph scene in the window and scales those, remembering the
originals on the items themselves (QGraphicsItem.setData), so that leaving restores them exactly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pyqtgraph as pg
from PySide6.QtCore import QEvent, QRect, Qt, QTimer
from PySide6.QtGui import QFont
from PySide6.QtWidgets import QApplication, QLabel, QMainWindow, QToolBar

from kvscope.widgets.live_plots import fit_title_row
from kvscope.widgets.palette import THEMES

DEMO_FONT_SCALE = 1.5  # a 9 pt desktop font becomes 13.5 pt (18 px): readable from the back of a room at 1280x720
DEMO_THEME = "contrast"
DEMO_HIDDEN_PLOTS = ("latency", "preemptions")  # the plots left out at large font sizes
DEMO_PLOTS_SHARE = 0.4  # of the window's width
# The live-run page's split, panel by panel, in demo mode. With an engine that answers text, the
# block map (its legend takes 150 px at demo sizes) and the streaming answer share the height and
# the batch timeline folds away (at 720 px a third panel is a sliver; its handle drags it back);
# without text the prompt box folds away. Panels not named share what is left.
DEMO_SPLIT_TEXT = {"block_map": 0.45, "timeline": 0.0, "prompt": 0.55}
DEMO_SPLIT_NO_TEXT = {"block_map": 0.5, "timeline": 0.5, "prompt": 0.0}
DEMO_ANSWER_POINTS = 20.0  # the answer's type: ~27 px tall, readable from the back of a room on a 1280x720 projector
QWIDGETSIZE_MAX = 16777215
FULLSCREEN_GRANTED_MS = 400  # a window manager has made the window fullscreen by then, if there is one

# QGraphicsItem.setData keys for what the item looked like before demo mode touched it
_BASE_WIDTH, _BASE_HEIGHT, _BASE_LABEL_SIZE, _BASE_TITLE_SIZE, _BASE_FONT = range(7301, 7306)
DEFAULT_POINT_SIZE = 9.0  # what pyqtgraph draws with when an item names no size


def _points(size: str | None, default: float) -> float:
    match = re.fullmatch(r"\s*([\d.]+)\s*pt\s*", size or "")
    return float(match.group(1)) if match else default


@dataclass
class _Saved:
    font: QFont
    theme: str
    window_state: object
    geometry: object
    menu_bar: bool = True
    split_sizes: list | None = None
    normal_rect: object = None
    hidden_actions: list | None = None


def _inside_screen(rect: QRect, window) -> QRect:
    """The rectangle, shrunk and moved as little as needed to lie on the window's screen."""
    screen = window.screen() or QApplication.primaryScreen()
    if screen is None:
        return rect
    room = screen.availableGeometry()
    width, height = min(rect.width(), room.width()), min(rect.height(), room.height())
    x = min(max(rect.x(), room.x()), room.x() + room.width() - width)
    y = min(max(rect.y(), room.y()), room.y() + room.height() - height)
    return QRect(x, y, width, height)


class GraphicsFontScaler:
    """Scales the text of every pyqtgraph scene under a widget by one factor (1.0 restores)."""

    def __init__(self, root):
        self.root = root
        self.scale = 1.0
        self._base_pt = QApplication.font().pointSizeF() or DEFAULT_POINT_SIZE

    def views(self) -> list:
        return self.root.findChildren(pg.GraphicsView)

    def apply(self, scale: float) -> None:
        self.scale = scale
        for view in self.views():
            for item in view.scene().items():
                self._scale_item(item)

    def _scale_item(self, item) -> None:
        if isinstance(item, pg.AxisItem):
            self._scale_axis(item)
        elif isinstance(item, pg.LabelItem):
            self._scale_label(item)
        elif isinstance(item, pg.TextItem):
            base = item.data(_BASE_FONT)
            if base is None:
                base = QFont(item.textItem.font())
                item.setData(_BASE_FONT, base)
            font = QFont(base)
            font.setPointSizeF((base.pointSizeF() if base.pointSizeF() > 0 else self._base_pt) * self.scale)
            item.setFont(font)

    def _scale_axis(self, axis: pg.AxisItem) -> None:
        s = self.scale
        if axis.data(_BASE_LABEL_SIZE) is None:
            axis.setData(_BASE_LABEL_SIZE, _points(axis.labelStyle.get("font-size"), self._base_pt))
            axis.setData(_BASE_WIDTH, axis.fixedWidth if axis.fixedWidth is not None else -1)
            axis.setData(_BASE_HEIGHT, axis.fixedHeight if axis.fixedHeight is not None else -1)
        if s == 1.0:
            axis.setTickFont(None)
            style = {k: v for k, v in axis.labelStyle.items() if k != "font-size"}
        else:
            font = QFont(QApplication.font())
            font.setPointSizeF(self._base_pt * s)
            axis.setTickFont(font)
            style = {**axis.labelStyle, "font-size": f"{axis.data(_BASE_LABEL_SIZE) * s:.1f}pt"}
        if axis.labelText or axis.labelUnits:
            axis.setLabel(axis.labelText, axis.labelUnits, axis.labelUnitPrefix, **style)
        else:
            axis.labelStyle = style
        width, height = axis.data(_BASE_WIDTH), axis.data(_BASE_HEIGHT)
        if width >= 0:  # a view fixed this width for its own font: widen it with the text
            axis.setWidth(round(width * s))
        if height >= 0:
            axis.setHeight(round(height * s))

    def _scale_label(self, label: pg.LabelItem) -> None:
        if label.data(_BASE_TITLE_SIZE) is None:
            label.setData(_BASE_TITLE_SIZE, _points(label.opts.get("size"), self._base_pt))
            self._guard_size(label)
        label.setText(label.text)

    def _guard_size(self, label: pg.LabelItem) -> None:
        """Views re-title their plots as data arrives, each time naming their own size: this
        label's setText keeps that size as the base and draws it scaled. (A wrapper on the
        instance, so no view needs a hook and no frame pays for a check.)"""
        original = label.setText
        scaler = self

        def set_text(text, **args):
            if "size" in args:
                label.setData(_BASE_TITLE_SIZE, _points(args["size"], scaler._base_pt))
            args["size"] = f"{label.data(_BASE_TITLE_SIZE) * scaler.scale:.1f}pt"
            original(text, **args)
            scaler._fit_title_row(label)

        label.setText = set_text

    def _fit_title_row(self, label: pg.LabelItem) -> None:
        # PlotItem.setTitle fixes the title row at 30 px, which cuts a scaled two-line title in half.
        fit_title_row(label)


class DemoMode:
    """Enter / leave demo mode on the main window: it offers ``set_theme(name)``, ``theme``,
    ``state.demo`` (the flag itself, so the status line reads it too), ``update_docks()`` (which
    hides ``hidden_docks()`` while active), ``arrange_docks()`` and the views this lays out at demo
    font sizes: ``plots`` in ``plots_dock`` and the live-run page's ``center_split``."""

    def __init__(self, window: QMainWindow, font_scale: float = DEMO_FONT_SCALE, theme: str = DEMO_THEME):
        self.window = window
        self.font_scale = font_scale
        self.theme = theme
        # The window's size while presenting: a projector's, given with --size to rehearse on a larger
        # screen or to take its screenshot. None: the whole screen.
        self.size: tuple[int, int] | None = None
        self.fonts = GraphicsFontScaler(window)
        self._saved: _Saved | None = None

    @property
    def active(self) -> bool:
        return self.window.state.demo

    def hidden_docks(self) -> list:
        """The docks demo mode hides: settings, the request / event lists and the request inspector
        (the plots stay; the prompt box shows the answer large)."""
        return [self.window.settings_dock, self.window.bottom_dock, self.window.inspector_dock]

    def engine_changed(self) -> None:
        """A new engine arrived while presenting: can it answer text? The split follows."""
        if self.active:
            self._arrange_split()

    def toggle(self) -> None:
        if self.active:
            self.leave()
        else:
            self.enter()

    def start(self, size: tuple[int, int] | None = None, theme: str | None = None) -> None:
        """Demo mode at `size` (None: fullscreen) in `theme` (None: high contrast), now and each time
        F11 enters it again: the size and theme a talk was started with are its projector's."""
        if theme is not None and theme not in THEMES:  # refused before the window is half in demo mode
            raise ValueError(f"theme {theme!r}: one of {', '.join(THEMES)}")
        if size is not None and (len(size) != 2 or min(size) < 1):
            raise ValueError(f"size {size!r}: a width and a height of at least 1 pixel")
        self.size = None if size is None else (int(size[0]), int(size[1]))
        self.theme = theme or DEMO_THEME
        self.enter()

    def _announce(self) -> None:
        w = self.window
        w.demo_action.setChecked(self.active)
        w.leave_demo_action.setEnabled(self.active)
        w.statusBar().showMessage("demo mode: Space play/pause, Right step, + / - speed, 1-9 scenario, R reset, "
                                  "Esc or F11 leaves" if self.active else "demo mode off", 6000)

    def enter(self) -> None:
        if self.active:
            return
        w, app = self.window, QApplication.instance()
        self._saved = _Saved(font=QFont(app.font()), theme=w.theme.name, window_state=w.windowState(),
                             geometry=w.saveGeometry(), menu_bar=w.menuBar().isVisible(),
                             split_sizes=w.center_split.sizes(), normal_rect=QRect(w.geometry()),
                             hidden_actions=self._hide_desk_controls())
        w.state.demo = True
        w.update_docks()
        w.menuBar().hide()  # every menu action keeps its key; the bar is only room taken
        font = QFont(self._saved.font)
        font.setPointSizeF((font.pointSizeF() if font.pointSizeF() > 0 else DEFAULT_POINT_SIZE) * self.font_scale)
        app.setFont(font)
        w.set_theme(self.theme)
        self.fonts.apply(self.font_scale)
        w.prompt.set_presenting(True, DEMO_ANSWER_POINTS)
        if self.size is not None:
            w.showNormal()
            w.resize(*self.size)
        else:
            w.showFullScreen()
            # Without a window manager (a bare X server, a kiosk) fullscreen is only a wish: the window
            # stays its size, and what it needs beyond it is cut off at the right edge.
            QTimer.singleShot(FULLSCREEN_GRANTED_MS, w, self._cover_the_screen)  # dropped with the window
        self._arrange(True)
        self._start_live_run()
        self._announce()

    def leave(self) -> None:
        if not self.active:
            return
        w, app, saved = self.window, QApplication.instance(), self._saved
        w.state.demo = False
        app.setFont(saved.font)
        self.fonts.apply(1.0)
        w.prompt.set_presenting(False)
        w.set_theme(saved.theme)
        if saved.window_state & Qt.WindowFullScreen:
            w.showFullScreen()
        elif saved.window_state & Qt.WindowMaximized:
            w.showMaximized()
        else:
            w.showNormal()
            w.restoreGeometry(saved.geometry)
        for action in saved.hidden_actions or []:
            action.setVisible(True)
        w.menuBar().setVisible(saved.menu_bar)
        w.update_docks()
        self._arrange(False)
        self._saved = None
        if not saved.window_state & (Qt.WindowFullScreen | Qt.WindowMaximized):
            rect = _inside_screen(saved.normal_rect, w)
            self._put_back(rect)
            # A window manager may still move or grow the frame as it leaves fullscreen (1551x776
            # on a 1280x720 screen): once it has, the rectangle is put back again.
            QTimer.singleShot(FULLSCREEN_GRANTED_MS, w, lambda: self._put_back(rect))
        self._announce()

    def _put_back(self, rect: QRect) -> None:
        """The window at exactly `rect`. The layouts first take the desk font: until they have, the
        window's minimum is still demo mode's (a scenario's page at demo sizes is wider than a 1280
        px screen), and Qt would grow the rectangle to it."""
        w = self.window
        if self.active or w.geometry() == rect:
            return
        QApplication.sendPostedEvents(None, QEvent.LayoutRequest)
        w.setGeometry(rect)

    def _cover_the_screen(self) -> None:
        w = self.window
        screen = w.screen() or QApplication.primaryScreen()
        if self.active and self.size is None and screen is not None and w.geometry() != screen.geometry():
            w.setGeometry(screen.geometry())

    def _start_live_run(self) -> None:
        """An audience sees the run move, not an empty page waiting for Play: a live run that has not
        taken a step starts playing (Space pauses it)."""
        w = self.window
        snapshot = getattr(w, "latest_snapshot", None)
        not_started = snapshot is None or snapshot.step == 0
        if (not w.compare_showing() and getattr(w, "replay_path", None) is None and not_started
                and w.play_action.text() == "Play"):
            w.play_pressed()

    def _hide_desk_controls(self) -> list:
        """Seed and Theme are desk controls (a talk keeps its seed and demo mode sets its theme): their
        toolbar entries leave while presenting. The actions that were visible, to show them again."""
        w = self.window
        hidden = []
        for bar in w.findChildren(QToolBar):
            for action in bar.actions():
                widget = bar.widgetForAction(action)
                seed = widget is w.seed or (isinstance(widget, QLabel) and widget.text().strip() == "Seed")
                if (seed or action is w.theme_action) and action.isVisible():
                    action.setVisible(False)
                    hidden.append(action)
        return hidden

    def _arrange(self, on: bool) -> None:
        """At demo font sizes five stacked plots leave each a sliver at 720 px: demo mode shows the
        three that carry the story (KV vs compute, requests, throughput), one time axis title under
        the last, and gives the plots 40 % of the width."""
        w = self.window
        plots = w.plots.plots
        shown = [name for name in plots if not (on and name in DEMO_HIDDEN_PLOTS)]
        for name, plot in plots.items():
            plot.setVisible(name in shown)
            # a hidden item keeps its row in a graphics layout unless it may shrink to nothing
            plot.setMaximumHeight(QWIDGETSIZE_MAX if name in shown else 0)
            plot.getAxis("bottom").showLabel(not on or name == shown[-1])
        if on:
            w.resizeDocks([w.plots_dock], [int(w.width() * DEMO_PLOTS_SHARE)], Qt.Horizontal)
            self._arrange_split()
        else:
            w.arrange_docks()
            if self._saved is not None and self._saved.split_sizes:
                w.center_split.setSizes(self._saved.split_sizes)

    def _arrange_split(self) -> None:
        w = self.window
        split = w.center_split
        names = {id(view): name for name, view in w.panels.views.items()}
        panels = [names.get(id(split.widget(i)), "") for i in range(split.count())]
        answers_text = getattr(w.engine_info, "no_text_reason", "no engine") is None
        shares = DEMO_SPLIT_TEXT if answers_text else DEMO_SPLIT_NO_TEXT
        unnamed = [p for p in panels if p not in shares]
        left = max(0.0, 1.0 - sum(shares.get(p, 0.0) for p in panels))
        total = sum(split.sizes())
        split.setSizes([int(total * (shares[p] if p in shares else left / len(unnamed))) for p in panels])
