"""The batch timeline: for every engine step, the tokens each request in the batch ran (a prompt
chunk or a decode), and where requests joined the batch (refill), finished or were preempted.

One ``uint8`` index image drawn through a fixed lookup table (pyqtgraph's fast image path):
x is the engine step (newest at the right), y is a lane. The marks are three scatter items over
the image; a thin stacked bar plot above shows the tokens of each step. Which request holds which
lane, and the ring buffer of steps, are batch_lanes.py's (plain numpy); this file draws them.

The view receives plain data (``TimelineStep``); it never sees the engine.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QCursor, QPalette
from PySide6.QtWidgets import QLabel, QToolTip, QVBoxLayout, QWidget

from kvscope.widgets.batch_lanes import (
    DECODE,
    FINISHED,
    JOINED,
    MARK_KINDS,
    PREEMPTED,
    PREFILL_BIN_LABELS,
    PREFILL_SMALL,
    BatchLanes,
    TimelineStep,
)
from kvscope.widgets.fitting_axis import FittingAxis, color_axes
from kvscope.widgets.image_item import ImageItem
from kvscope.widgets.live_plots import RANGE_SLACK, sticky_range
from kvscope.widgets.palette import DARK, Theme, hex_color, request_color
from kvscope.widgets.throttle import Throttle

PREFILL_SHADES = (0.40, 0.60, 0.80, 1.0)  # per chunk-size bin: share of the prefill colour over the background
assert len(PREFILL_SHADES) == len(PREFILL_BIN_LABELS)
_MARK_SYMBOL = {JOINED: "t2", FINISHED: "o", PREEMPTED: "t"}  # right triangle, disc, down triangle
_MARK_GLYPH = {JOINED: "\u25b6", FINISHED: "\u25cf", PREEMPTED: "\u25bc"}
_MARK_X_OFFSET = {JOINED: 0.15, FINISHED: 0.85, PREEMPTED: 0.5}  # within the step's cell
_MARK_SIZE = 8
MIN_STEPS_SHOWN = 24
LANE_ROWS_STEP = 8  # the lanes shown are a multiple of this
SCROLL_DIVISIONS = 100
# The token bars are an image of this many rows (about the bar plot's height in pixels): two
# filled step curves cost ~1.5 ms a paint (pyqtgraph fills them in 50-point pieces), the image
# a fraction of it. Any step with tokens fills at least one row.
BAR_ROWS = 128
BAR_EMPTY, BAR_DECODE, BAR_PREFILL = 0, 1, 2
# The token bars' share of the plots' height, within these pixels: at a fixed 110 - 130 px the bars
# left the lanes a 5 px strip and cut the step axis's label in the 1280x720 window's ~160 px.
BAR_SHARE, BAR_MIN_PX, BAR_MAX_PX = 0.35, 44, 130


def token_bar_image(prefill: np.ndarray, decode: np.ndarray, top: float, rows: int = BAR_ROWS) -> np.ndarray:
    """[rows, steps] uint8, row 0 at zero tokens: decode tokens at the bottom, prompt tokens
    stacked on them, up to ``top`` tokens at the last row."""
    level = np.arange(rows)[:, None]
    total_rows = np.ceil((prefill + decode) * (rows / top))
    decode_rows = np.ceil(decode * (rows / top))
    image = np.where(level < total_rows, BAR_PREFILL, BAR_EMPTY).astype(np.uint8)
    image[level < decode_rows] = BAR_DECODE
    return image


def _blend(a, b, t: float) -> tuple:
    return tuple(int(round(x * (1.0 - t) + y * t)) for x, y in zip(a, b))


class _StepAxis(pg.AxisItem):
    """Bottom axis whose ticks (positions in the ring of steps) read as engine step numbers."""

    def __init__(self, to_step, **kw):
        super().__init__("bottom", **kw)
        self._to_step = to_step

    def tickStrings(self, values, scale, spacing):
        return [self._to_step(v) for v in values]


class BatchTimelineView(QWidget):
    """Per-step batch composition. ``add_steps`` every frame; ``request_selected`` on click."""

    request_selected = Signal(int)

    def __init__(self, parent: QWidget | None = None, capacity: int = 400, max_lanes: int = 256,
                 theme: Theme = DARK, refresh_interval_s: float = 0.0):
        """refresh_interval_s: the image, marks and ranges are redrawn at most this often (the
        newest steps always drawn, by a timer if need be); 0 redraws on every add_steps."""
        super().__init__(parent)
        self._lanes = BatchLanes(capacity, max_lanes)
        self._redraw = Throttle(self, refresh_interval_s, self._refresh)
        self.capacity = self._lanes.capacity
        self.max_lanes = self._lanes.max_lanes
        self._theme = theme
        self._selected = -1
        self.last_hover_text = ""
        self._build_ui()
        self.set_theme(theme)

    # ------------------------------------------------------------------ data in

    def add_steps(self, steps: list[TimelineStep]) -> None:
        """Append the steps since the last frame (oldest first); keeps the newest ``capacity``."""
        if steps:
            self._lanes.add_steps(steps)
            self._redraw.request()

    def clear(self) -> None:
        self._lanes.clear()
        self._refresh()

    # ------------------------------------------------------------------ queries (answered by batch_lanes.py)

    @property
    def lanes_in_use(self) -> int:
        return self._lanes.lanes_in_use

    @property
    def overflow_requests_total(self) -> int:
        """Distinct requests that ran without a lane since clear()."""
        return self._lanes.overflow_requests_total

    @property
    def first_seq(self) -> int:
        return self._lanes.first_seq

    def lane_of(self, request_id: int) -> int:
        return self._lanes.lane_of(request_id)

    def index_image(self) -> np.ndarray:
        return self._lanes.index_image()

    def steps_shown(self) -> np.ndarray:
        return self._lanes.steps_shown()

    def tokens_shown(self) -> tuple[np.ndarray, np.ndarray]:
        return self._lanes.tokens_shown()

    def marks(self, kind: str) -> list:
        return self._lanes.marks(kind)

    def request_at(self, x: float, y: float) -> int:
        return self._lanes.request_at(x, y)

    def hover_text_at(self, x: float, y: float) -> str:
        return self._lanes.hover_text_at(x, y)

    def bar_text_at(self, x: float) -> str:
        return self._lanes.bar_text_at(x)

    def token_bars(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(step edges, total tokens, decode tokens) of the bars drawn: x from edges[i] to edges[i + 1]."""
        return self._token_bars

    def overflow_text(self) -> str:
        """The overflow notice ('' when every request of the window has a lane)."""
        return self._overflow_label.text()

    # ------------------------------------------------------------------ UI

    def _build_ui(self) -> None:
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.setSpacing(2)
        self._legend = QLabel()
        self._legend.setTextFormat(Qt.TextFormat.RichText)
        self._legend.setWordWrap(True)
        layout.addWidget(self._legend)
        self._overflow_label = QLabel()
        self._overflow_label.setWordWrap(True)
        self._overflow_label.hide()
        layout.addWidget(self._overflow_label)

        self._view = pg.GraphicsLayoutWidget()
        self._view.ci.setContentsMargins(2, 2, 8, 2)
        self._view.ci.setSpacing(6)
        layout.addWidget(self._view, 1)

        self._bars = self._view.addPlot(row=0, col=0, axisItems={"left": FittingAxis("left", whole_numbers=True)})
        self._plot = self._view.addPlot(row=1, col=0, axisItems={"bottom": _StepAxis(self._lanes.step_label),
                                                                 "left": FittingAxis("left", whole_numbers=True)})
        self._view.ci.layout.setRowSpacing(0, 14)  # the bars' "0" and the first lane's "0" apart
        self._view.ci.layout.setRowStretchFactor(0, 1)
        self._view.ci.layout.setRowStretchFactor(1, 4)
        self._fit_bars_height()
        self._view.installEventFilter(self)
        self._bars.setXLink(self._plot)
        self._bars.hideAxis("bottom")
        self._bars.setLabel("left", "tokens")
        self._bars.getAxis("left").setWidth(62)
        self._plot.getAxis("left").setWidth(62)
        self._plot.setLabel("bottom", "engine step")
        # Labels on the two coarsest tick levels only: pyqtgraph measured the text of all ~40 finer
        # ticks on every scroll (~1 ms a frame) to find that they do not fit; their marks stay.
        self._plot.getAxis("bottom").setStyle(maxTextLevel=1)
        self._plot.setLabel("left", "lane")
        for p in (self._bars, self._plot):
            p.setMenuEnabled(False)
            p.setMouseEnabled(x=False, y=False)
            p.hideButtons()
            for side in ("left", "bottom", "top", "right"):  # steps, lanes, tokens: no SI prefix; with one the
                p.getAxis(side).enableAutoSIPrefix(False)  # axes (hidden ones too) re-set their labels each scroll
        self._plot.invertY(True)

        self._image = ImageItem(axisOrder="row-major")
        self._plot.addItem(self._image)
        self._highlight = ImageItem(axisOrder="row-major")
        self._highlight.setZValue(5)
        self._plot.addItem(self._highlight)
        self._lane_band = pg.LinearRegionItem(orientation="horizontal", movable=False)
        self._lane_band.setZValue(4)
        self._lane_band.hide()
        self._plot.addItem(self._lane_band)
        self._scatter = {}
        self._marks_shown: dict[str, tuple] = {}  # kind -> (sequence, lane) arrays given to its item
        for z, kind in enumerate(MARK_KINDS):
            sp = pg.ScatterPlotItem(symbol=_MARK_SYMBOL[kind], size=_MARK_SIZE, pxMode=True)
            sp.setZValue(10 + z)
            self._plot.addItem(sp)
            self._scatter[kind] = sp

        # Stacked token bars: prompt tokens on top of decode tokens (token_bar_image).
        self._bar_image = ImageItem(axisOrder="row-major")
        self._bars.addItem(self._bar_image)
        self._token_bars = (np.zeros(0), np.zeros(0), np.zeros(0))
        self._bar_range: tuple | None = None  # the token bars' shown height (live_plots.sticky_range)
        self._lanes_shown: int | None = None  # ... and the lanes', a multiple of LANE_ROWS_STEP

        scene = self._view.scene()
        scene.sigMouseMoved.connect(self._on_mouse_moved)
        scene.sigMouseClicked.connect(self._on_mouse_clicked)

    def eventFilter(self, watched, event) -> bool:  # noqa: N802
        if watched is self._view and event.type() == QEvent.Type.Resize:
            self._fit_bars_height()
        return super().eventFilter(watched, event)

    def _fit_bars_height(self) -> None:
        """The bars a share of the plots' height, the rest to the lanes and the step axis."""
        height = round(min(BAR_MAX_PX, max(BAR_MIN_PX, self._view.height() * BAR_SHARE)))
        self._bars.setMinimumHeight(height)
        self._bars.setMaximumHeight(height)

    def set_theme(self, theme: Theme) -> None:
        self._theme = theme
        bg, fg = theme.background, theme.foreground
        pal = self.palette()
        pal.setColor(QPalette.ColorRole.Window, QColor(*bg))
        pal.setColor(QPalette.ColorRole.WindowText, QColor(*fg))
        self.setPalette(pal)
        self.setAutoFillBackground(True)
        self._view.setBackground(bg)

        lut = np.zeros((256, 4), dtype=np.uint8)
        lut[:, :3] = bg
        lut[:, 3] = 255
        lut[DECODE, :3] = theme.decode
        for k, share in enumerate(PREFILL_SHADES):
            lut[PREFILL_SMALL + k, :3] = _blend(bg, theme.prefill, share)
        self._lut = lut
        self._image.setLookupTable(lut)

        for p in (self._bars, self._plot):
            color_axes(p, fg)
        bar_lut = np.zeros((3, 4), dtype=np.uint8)
        bar_lut[BAR_DECODE] = (*theme.decode, 255)
        bar_lut[BAR_PREFILL] = (*theme.prefill, 230)
        self._bar_lut = bar_lut

        outline = pg.mkPen(bg, width=1)
        self._scatter[JOINED].setPen(outline)
        self._scatter[JOINED].setBrush(pg.mkBrush(theme.good))
        self._scatter[FINISHED].setPen(outline)
        self._scatter[FINISHED].setBrush(pg.mkBrush(fg))
        self._scatter[PREEMPTED].setPen(outline)
        self._scatter[PREEMPTED].setBrush(pg.mkBrush(theme.warning))
        self._lane_band.setBrush(pg.mkBrush(*theme.accent, 45))
        for line in self._lane_band.lines:
            line.setPen(pg.mkPen(*theme.accent, 160))

        self._overflow_label.setStyleSheet(f"color: {hex_color(theme.warning)}; font-weight: bold;")
        self._legend.setText(self._legend_html())
        self._refresh()

    def _legend_html(self) -> str:
        t = self._theme
        sw = "<span style='color:{c}; font-size:13pt'>\u25a0</span>&nbsp;{txt}"
        mk = "<span style='color:{c}; font-size:11pt'>{g}</span>&nbsp;{txt}"

        # Non-breaking spaces inside an entry: the label may wrap between entries at a narrow width, never
        # inside one ("joined" on one line, "(refill)" on the next read as two entries).
        def nb(text: str) -> str:
            return text.replace(" ", "&nbsp;")

        shades = "".join(
            f"<span style='color:{hex_color(_blend(t.background, t.prefill, s))}; font-size:13pt'>\u25a0</span>"
            for s in PREFILL_SHADES)
        items = [
            sw.format(c=hex_color(t.decode), txt=nb("decode (1 token)")),
            f"{shades}&nbsp;" + nb(f"prefill chunk ({PREFILL_BIN_LABELS[0].replace('<', '&lt;')} \u2026 "
                                   f"{PREFILL_BIN_LABELS[-1]} tokens)"),
            mk.format(c=hex_color(t.good), g=_MARK_GLYPH[JOINED], txt=nb("joined (refill)")),
            mk.format(c=hex_color(t.foreground), g=_MARK_GLYPH[FINISHED], txt="finished"),
            mk.format(c=hex_color(t.warning), g=_MARK_GLYPH[PREEMPTED], txt="preempted"),
        ]
        return (f"<span style='color:{hex_color(t.foreground)}'>"
                + " &nbsp;&nbsp; ".join(items) + "</span>")

    # ------------------------------------------------------------------ drawing

    def _refresh(self) -> None:
        lanes = self._lanes
        n, cap = lanes.count, self.capacity
        first = lanes.first_seq
        if n == 0:
            self._image.clear()
            self._highlight.clear()
            self._lane_band.hide()
            for kind in MARK_KINDS:
                self._set_marks(kind, np.zeros(0), np.zeros(0))
            self._bar_image.clear()
            self._token_bars = (np.zeros(0), np.zeros(0), np.zeros(0))
            self._bar_range = self._lanes_shown = None
            self._overflow_label.hide()
            self._plot.setXRange(0, cap, padding=0)
            self._plot.setYRange(0, 8, padding=0)
            return
        img = lanes.index_image()
        rect = QRectF(first, 0, n, self.max_lanes)
        self._image.setImage(img, autoLevels=False, levels=(0, 255), lut=self._lut)
        self._image.setRect(rect)

        used = np.flatnonzero(img.any(axis=1))
        top = int(used[-1]) + 1 if used.size else 0
        for kind in MARK_KINDS:
            s, ln = lanes.mark_positions(kind)
            if ln.size:
                top = max(top, int(ln.max()) + 1)
            self._set_marks(kind, s, ln)
        # The lanes and the bars keep their height until the data leaves it: a height that moved
        # with every frame laid out both value axes again each time (~1 ms a frame at maximum speed).
        needed = -(-max(top, 1) // LANE_ROWS_STEP) * LANE_ROWS_STEP
        if self._lanes_shown is None or not needed <= self._lanes_shown < needed * RANGE_SLACK:
            self._lanes_shown = needed
        top = self._lanes_shown
        # The steps held use the whole width: a slow engine (the real backend makes ~5 steps a
        # second) filled 27 of 400 columns after a while, the rest blank. The range grows with
        # the steps up to the ring's capacity, from MIN_STEPS_SHOWN so that one step is no full-width bar.
        # The range moves in steps of 1/SCROLL_DIVISIONS of the ring (4 of 400 steps), the newest
        # step within that of the right edge: moved with every step, the step axis laid out its
        # labels again on every frame (~1 ms of it).
        chunk = max(1, cap // SCROLL_DIVISIONS)
        shown = min(cap, -(-max(n, MIN_STEPS_SHOWN) // chunk) * chunk)
        x0 = max(shown, -(-lanes.seq_end // chunk) * chunk) - shown
        self._plot.setXRange(x0, x0 + shown, padding=0)
        self._plot.setYRange(0, top, padding=0)

        edges = np.arange(first, lanes.seq_end + 1, dtype=np.float64)
        prefill, decode = lanes.tokens_shown()
        dec = decode.astype(np.float64)
        tot = dec + prefill
        self._token_bars = (edges, tot, dec)
        self._bar_range = sticky_range(self._bar_range, 0.0, max(1.0, float(tot.max())) * 1.05)
        bar_top = self._bar_range[1]
        self._bar_image.setImage(token_bar_image(prefill, dec, bar_top), autoLevels=False,
                                 levels=(0, len(self._bar_lut)), lut=self._bar_lut)  # index i -> lut[i]
        self._bar_image.setRect(QRectF(first, 0, n, bar_top))
        self._bars.setYRange(0, bar_top, padding=0)
        # pyqtgraph moves the items to a new range when it paints; moved during that paint they
        # asked for a second one (the lanes' area painted twice a frame, ~2 ms): move them now
        for plot in (self._bars, self._plot):
            plot.vb.updateMatrix()

        over = lanes.most_lanes_lacking()
        if over:
            self._overflow_label.setText(
                f"All {self.max_lanes} lanes taken: up to {over:,} requests per step not drawn "
                f"({lanes.overflow_requests_total:,} requests so far); the token bars count them.")
            self._overflow_label.show()
        else:
            self._overflow_label.setText("")
            self._overflow_label.hide()
        self._update_highlight(rect)

    def _set_marks(self, kind: str, seq: np.ndarray, lanes: np.ndarray) -> None:
        """One kind of mark, given again only when it changed: most frames add no mark, and three
        scatter items set and painted anyway were ~0.5 ms a frame. No marks: the item is hidden."""
        shown = self._marks_shown.get(kind)
        if shown is not None and np.array_equal(shown[0], seq) and np.array_equal(shown[1], lanes):
            return
        self._marks_shown[kind] = (seq, lanes)
        item = self._scatter[kind]
        item.setData(seq + _MARK_X_OFFSET[kind], lanes + 0.5)
        item.setVisible(bool(len(seq)))

    def _update_highlight(self, rect=None) -> None:
        sel = self._selected
        if sel < 0 or self._lanes.count == 0:
            self._highlight.clear()
            self._lane_band.hide()
            return
        mask = self._lanes.cells_of(sel)
        if not mask.any():
            self._highlight.clear()
        else:
            lut = np.zeros((2, 4), dtype=np.uint8)
            lut[1, :3] = request_color(sel)
            lut[1, 3] = 255
            self._highlight.setImage(mask.astype(np.uint8), autoLevels=False, levels=(0, 1), lut=lut)
            self._highlight.setRect(rect if rect is not None else
                                    QRectF(self._lanes.first_seq, 0, self._lanes.count, self.max_lanes))
        lane = self.lane_of(sel)
        if lane < 0 and mask.any():
            lane = int(np.flatnonzero(mask.any(axis=1))[-1])
        if lane >= 0:
            self._lane_band.setRegion((lane, lane + 1))
            self._lane_band.show()
        else:
            self._lane_band.hide()

    def select_request(self, request_id: int) -> None:
        """Highlight a request's cells and lane (no signal)."""
        self._selected = int(request_id)
        self._update_highlight()

    @property
    def selected_request(self) -> int:
        return self._selected

    # ------------------------------------------------------------------ mouse

    def _on_mouse_moved(self, scene_pos) -> None:
        text = ""
        if self._plot.vb.sceneBoundingRect().contains(scene_pos):
            p = self._plot.vb.mapSceneToView(scene_pos)
            text = self.hover_text_at(p.x(), p.y())
        elif self._bars.vb.sceneBoundingRect().contains(scene_pos):
            p = self._bars.vb.mapSceneToView(scene_pos)
            text = self.bar_text_at(p.x())
        self.last_hover_text = text
        if text:
            QToolTip.showText(QCursor.pos(), text, self._view)
        else:
            QToolTip.hideText()

    def _on_mouse_clicked(self, ev) -> None:
        if ev.button() != Qt.MouseButton.LeftButton:
            return
        pos = ev.scenePos()
        if not self._plot.vb.sceneBoundingRect().contains(pos):
            return
        p = self._plot.vb.mapSceneToView(pos)
        rid = self.request_at(p.x(), p.y())
        self.select_request(rid)
        self.request_selected.emit(rid)

    def timeline_viewport(self) -> QWidget:
        return self._view.viewport()

    def timeline_pos(self, x: float, y: float):
        """Viewport pixel position of a timeline view position (for tests and tools)."""
        return self._view.mapFromScene(self._plot.vb.mapViewToScene(QPointF(x, y)))
