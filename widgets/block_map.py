"""The KV block map: one cell per KV block, coloured by the request that owns it.

The whole pool is one ``uint8`` index image drawn by a pyqtgraph ``ImageItem`` through a fixed
256-entry lookup table with fixed levels (pyqtgraph's fast path: a zero-copy ``Indexed8`` QImage),
so a 500,000-block pool costs a few vectorised numpy passes per frame and no Python loop over
blocks. Two more index images with RGBA tables sit on top: one fades cells that changed this frame
(allocated, prefix hit, evicted, preempted), one dims every block but the selected request's.

Layout: block ``b`` sits at ``(row, col) = divmod(b, width)``, rows top to bottom, with
``width = clamp(round(sqrt(2 * num_blocks)), 8, 1024)``: the grid is about twice as wide as it is
tall, so in a landscape panel (about 2:1) the cells come out roughly square and the map fills the
panel. The last row is padded with the 'no block' index (drawn in the background colour). The view
range is set only when the pool size changes; the user may zoom (wheel) and pan (drag) inside it.

Lookup table (:data:`LUT_SIZE` = 256 entries, rebuilt only by :meth:`BlockMapView.set_theme`)::

    0            free block                     theme.free_block
    1   .. 48    used, ref count 1              REQUEST_COLORS[i]
    49  .. 96    cached (free, reusable prefix) REQUEST_COLORS[i] dimmed toward the background
    97  .. 144   reserved (held, no token yet)  REQUEST_COLORS[i] pale tint
    145 .. 192   shared (used, ref count > 1)   REQUEST_COLORS[i] brighter (dark) / deeper (light)
    193 .. 255   no block (grid padding)        theme.background

where ``i = request_color_index(owner)`` so a request has the same colour in every panel. Shared
cells are also outlined, and carry their ref count as text, once cells are big enough on screen.

This module reads only :mod:`kvscope.engine.snapshot` (types and constants); it never holds or
calls the engine.
"""

from __future__ import annotations

import math
import time

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtGui, QtWidgets

from kvscope.engine.snapshot import (
    BLOCK_CACHED,
    BLOCK_FREE,
    BLOCK_RESERVED,
    BLOCK_USED,
    Snapshot,
)
from kvscope.widgets.elided_label import ElidedLabel
from kvscope.widgets.palette import DARK, NUM_REQUEST_COLORS, REQUEST_COLORS, Theme, request_color_index

# --- lookup-table layout -------------------------------------------------------------------------
LUT_SIZE = 256
LUT_FREE = 0
LUT_USED = 1
LUT_CACHED = LUT_USED + NUM_REQUEST_COLORS
LUT_RESERVED = LUT_CACHED + NUM_REQUEST_COLORS
LUT_SHARED = LUT_RESERVED + NUM_REQUEST_COLORS
LUT_NO_BLOCK = LUT_SHARED + NUM_REQUEST_COLORS  # grid padding and unknown states
assert LUT_NO_BLOCK < LUT_SIZE

# Kinds of cell: the block states, plus 'shared' (used with ref count > 1) and 'unknown'.
KIND_FREE, KIND_CACHED, KIND_USED, KIND_RESERVED = BLOCK_FREE, BLOCK_CACHED, BLOCK_USED, BLOCK_RESERVED
KIND_SHARED = 4
_LEGEND_KINDS = {"used": KIND_USED, "shared": KIND_SHARED, "cached": KIND_CACHED, "reserved": KIND_RESERVED,
                 "free": KIND_FREE}
KIND_UNKNOWN = 5
_NUM_KINDS = 8  # row stride of the (colour, kind) -> LUT index table
_MAX_COLOR_TABLE = 1 << 24  # request ids below this get their colour by table lookup

# (kind, colour index) -> LUT index, flattened as colour * _NUM_KINDS + kind.
_INDEX_TABLE = np.full((NUM_REQUEST_COLORS, _NUM_KINDS), LUT_NO_BLOCK, dtype=np.uint8)
_INDEX_TABLE[:, KIND_FREE] = LUT_FREE
_INDEX_TABLE[:, KIND_USED] = LUT_USED + np.arange(NUM_REQUEST_COLORS)
_INDEX_TABLE[:, KIND_CACHED] = LUT_CACHED + np.arange(NUM_REQUEST_COLORS)
_INDEX_TABLE[:, KIND_RESERVED] = LUT_RESERVED + np.arange(NUM_REQUEST_COLORS)
_INDEX_TABLE[:, KIND_SHARED] = LUT_SHARED + np.arange(NUM_REQUEST_COLORS)
_INDEX_TABLE = _INDEX_TABLE.reshape(-1)

# --- flashes -------------------------------------------------------------------------------------
FLASH_SECONDS = 0.5  # a changed cell fades out linearly over this long
_FLASH_MIN_STEP_S = 1.0 / 120.0  # each update ages flashes by at least this (bounded frame count)
_FLASH_LEVELS = 64  # overlay index = event code * 64 + level (level 0: transparent)
_FLASH_MAX_ALPHA = 235
# Change kinds in the order they are written: a later one wins when a block has several.
FLASH_EVENTS = ("allocated", "prefix_hit", "evicted", "preempted")
_FLASH_EVENT_LABELS = {
    "allocated": "allocated", "prefix_hit": "prefix-cache hit", "evicted": "evicted from the prefix cache",
    "preempted": "freed by a preemption",
}
_DIM_ALPHA = 175  # how strongly the blocks of unselected requests are dimmed

# --- layout --------------------------------------------------------------------------------------
MIN_GRID_WIDTH = 8
MAX_GRID_WIDTH = 1024
_GRID_ASPECT = 2.0  # columns / rows the grid aims for


def grid_width(num_blocks: int) -> int:
    """Cells per row: clamp(round(sqrt(2 * num_blocks)), 8, 1024), a grid about 2:1 wide."""
    return int(min(MAX_GRID_WIDTH, max(MIN_GRID_WIDTH, round(math.sqrt(_GRID_ASPECT * max(num_blocks, 0))))))


def grid_shape(num_blocks: int) -> tuple[int, int]:
    """(rows, width) of the grid that holds num_blocks cells (at least one row)."""
    width = grid_width(num_blocks)
    return max(1, -(-num_blocks // width)), width


# --- colours -------------------------------------------------------------------------------------
def _mix(a, b, t: float) -> np.ndarray:
    return np.asarray(a, dtype=np.float64) * (1.0 - t) + np.asarray(b, dtype=np.float64) * t


def _luma(rgb: np.ndarray) -> np.ndarray:
    rgb = np.asarray(rgb, dtype=np.float64)
    return rgb[..., 0] * 0.299 + rgb[..., 1] * 0.587 + rgb[..., 2] * 0.114


def state_colors(theme: Theme) -> dict[str, np.ndarray]:
    """[48, 3] uint8 colours per request colour for each variant, and the fixed colours."""
    base = REQUEST_COLORS.astype(np.float64)
    grey = _luma(base)[:, None]
    bg = np.asarray(theme.background, dtype=np.float64)
    if theme.is_dark:
        cached = _mix(_mix(base, grey, 0.35), bg, 0.58)  # dimmed: sinks toward the background
        reserved = _mix(base, (255, 255, 255), 0.62)  # pale tint: claimed, still empty
        shared = _mix(base, (255, 255, 255), 0.30)  # brighter
    else:
        cached = _mix(_mix(base, grey, 0.70), bg, 0.40)  # greyed out toward the background
        reserved = _mix(base, (255, 255, 255), 0.58)  # pale tint
        shared = _mix(base, (0, 0, 0), 0.35)  # deeper
    out = {"used": base, "cached": cached, "reserved": reserved, "shared": shared}
    out = {k: np.clip(np.rint(v), 0, 255).astype(np.uint8) for k, v in out.items()}
    out["free"] = np.asarray(theme.free_block, dtype=np.uint8)
    out["no_block"] = np.asarray(theme.background, dtype=np.uint8)
    return out


def build_lut(theme: Theme) -> np.ndarray:
    """The [256, 3] uint8 lookup table of the index image (layout in the module docstring)."""
    c = state_colors(theme)
    lut = np.empty((LUT_SIZE, 3), dtype=np.uint8)
    lut[:] = c["no_block"]
    lut[LUT_FREE] = c["free"]
    lut[LUT_USED:LUT_USED + NUM_REQUEST_COLORS] = c["used"]
    lut[LUT_CACHED:LUT_CACHED + NUM_REQUEST_COLORS] = c["cached"]
    lut[LUT_RESERVED:LUT_RESERVED + NUM_REQUEST_COLORS] = c["reserved"]
    lut[LUT_SHARED:LUT_SHARED + NUM_REQUEST_COLORS] = c["shared"]
    return lut


def _flash_colors(theme: Theme) -> dict[str, tuple]:
    return {"allocated": theme.flash, "prefix_hit": theme.good, "evicted": theme.accent,
            "preempted": theme.warning}


def build_flash_lut(theme: Theme) -> np.ndarray:
    """[256, 4] RGBA table of the flash overlay: code * 64 + level, alpha rising with level."""
    lut = np.zeros((LUT_SIZE, 4), dtype=np.uint8)
    levels = np.arange(_FLASH_LEVELS)
    alpha = np.rint(_FLASH_MAX_ALPHA * levels / (_FLASH_LEVELS - 1)).astype(np.uint8)
    for code, name in enumerate(FLASH_EVENTS):
        rows = slice(code * _FLASH_LEVELS, (code + 1) * _FLASH_LEVELS)
        lut[rows, :3] = _flash_colors(theme)[name]
        lut[rows, 3] = alpha
    return lut


def build_dim_lut(theme: Theme) -> np.ndarray:
    """[256, 4] RGBA table of the selection overlay: 0 clear, 1 dimmed toward the background."""
    lut = np.zeros((LUT_SIZE, 4), dtype=np.uint8)
    lut[1, :3] = theme.background
    lut[1, 3] = _DIM_ALPHA
    return lut


def _qcolor(rgb, alpha: int = 255) -> QtGui.QColor:
    r, g, b = (int(v) for v in rgb[:3])
    return QtGui.QColor(r, g, b, alpha)


def _fmt_count(n: int, total: int) -> str:
    pct = 100.0 * n / total if total else 0.0
    return f"{n:,} blocks ({pct:.1f} % of the pool)"  # the memory bar gives % of device memory


# --- small helpers widgets -----------------------------------------------------------------------
class _FlowLayout(QtWidgets.QLayout):
    """Lays items left to right and wraps them to a new line when the width runs out."""

    def __init__(self, parent=None, spacing: int = 14, line_spacing: int = 3):
        super().__init__(parent)
        self._items: list[QtWidgets.QLayoutItem] = []
        self._hspace = spacing
        self._vspace = line_spacing
        self.setContentsMargins(0, 0, 0, 0)

    def addItem(self, item):  # noqa: N802 (Qt API)
        self._items.append(item)

    def count(self):
        return len(self._items)

    def itemAt(self, index):  # noqa: N802
        return self._items[index] if 0 <= index < len(self._items) else None

    def takeAt(self, index):  # noqa: N802
        return self._items.pop(index) if 0 <= index < len(self._items) else None

    def expandingDirections(self):  # noqa: N802
        return QtCore.Qt.Orientation(0)

    def hasHeightForWidth(self):  # noqa: N802
        return True

    def heightForWidth(self, width):  # noqa: N802
        return self._layout(QtCore.QRect(0, 0, width, 0), apply=False)

    def setGeometry(self, rect):  # noqa: N802
        super().setGeometry(rect)
        self._layout(rect, apply=True)

    def sizeHint(self):  # noqa: N802
        return self.minimumSize()

    def minimumSize(self):  # noqa: N802
        size = QtCore.QSize()
        for item in self._items:
            size = size.expandedTo(item.minimumSize())
        m = self.contentsMargins()
        return size + QtCore.QSize(m.left() + m.right(), m.top() + m.bottom())

    def _layout(self, rect: QtCore.QRect, apply: bool) -> int:
        m = self.contentsMargins()
        eff = rect.adjusted(m.left(), m.top(), -m.right(), -m.bottom())
        x, y, line_h = eff.x(), eff.y(), 0
        for item in self._items:
            hint = item.sizeHint()
            if x > eff.x() and x + hint.width() > eff.right() + 1:
                x, y, line_h = eff.x(), y + line_h + self._vspace, 0
            if apply:
                item.setGeometry(QtCore.QRect(QtCore.QPoint(x, y), hint))
            x += hint.width() + self._hspace
            line_h = max(line_h, hint.height())
        return y + line_h - rect.y() + m.bottom()


class _LegendEntry(QtWidgets.QWidget):
    """A colour swatch and a line of text; the tooltip explains the state."""

    def __init__(self, key: str, tooltip: str, parent=None):
        super().__init__(parent)
        self.key = key
        self.swatch = QtWidgets.QLabel(self)
        self.text = QtWidgets.QLabel(self)
        self.text.setTextFormat(QtCore.Qt.TextFormat.PlainText)
        lay = QtWidgets.QHBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(5)
        lay.addWidget(self.swatch)
        lay.addWidget(self.text)
        self.setToolTip(tooltip)

    def set_text(self, text: str) -> None:
        if self.text.text() != text:
            self.text.setText(text)
            self.updateGeometry()


class _CellDecorations(pg.GraphicsObject):
    """Painted over the image only when cells are big on screen: gaps between cells, an outline
    around shared blocks, and each shared block's ref count as text. Work is bounded by what is
    visible, so it costs nothing for large pools (cells under a few pixels)."""

    MIN_OUTLINE_PX = 4.0
    MIN_GAP_PX = 8.0
    MIN_TEXT_PX = 13.0
    MAX_OUTLINES = 6000
    MAX_LABELS = 3000

    def __init__(self):
        super().__init__()
        self._rows = 0
        self._width = 0
        self._shared_ids = np.zeros(0, dtype=np.int64)
        self._shared_refs = np.zeros(0, dtype=np.int64)
        self._shared_text_dark = np.zeros(0, dtype=bool)
        self._gap_color = QtGui.QColor(0, 0, 0)
        self._outline_color = QtGui.QColor(255, 255, 255)
        self.last_label_count = 0  # for tests: how many ref counts the last paint drew
        self.last_outline_count = 0

    def set_grid(self, rows: int, width: int) -> None:
        self.prepareGeometryChange()
        self._rows, self._width = rows, width
        self.update()

    def set_theme(self, theme: Theme) -> None:
        self._gap_color = _qcolor(theme.background)
        self._outline_color = _qcolor(theme.foreground)
        self.update()

    def set_shared(self, ids: np.ndarray, refs: np.ndarray, text_dark: np.ndarray) -> None:
        self._shared_ids, self._shared_refs, self._shared_text_dark = ids, refs, text_dark
        self.update()

    def boundingRect(self):  # noqa: N802
        return QtCore.QRectF(0, 0, self._width, self._rows)

    def paint(self, painter, option, widget=None):
        self.last_label_count = self.last_outline_count = 0
        if not self._width:
            return
        tr = painter.transform()
        if tr.isRotating():
            return
        cw, ch = abs(tr.m11()), abs(tr.m22())
        if min(cw, ch) < self.MIN_OUTLINE_PX:
            return
        vb = self.getViewBox()
        view = vb.viewRect() if vb is not None else self.boundingRect()
        c0 = max(0, int(math.floor(view.left())))
        c1 = min(self._width, int(math.ceil(view.right())))
        r0 = max(0, int(math.floor(min(view.top(), view.bottom()))))
        r1 = min(self._rows, int(math.ceil(max(view.top(), view.bottom()))))
        if c0 >= c1 or r0 >= r1:
            return
        painter.save()
        painter.setRenderHint(QtGui.QPainter.RenderHint.Antialiasing, False)
        if min(cw, ch) >= self.MIN_GAP_PX:
            pen = QtGui.QPen(self._gap_color)
            pen.setCosmetic(True)
            pen.setWidthF(1.0 if min(cw, ch) < 20 else 2.0)
            painter.setPen(pen)
            lines = [QtCore.QLineF(c, r0, c, r1) for c in range(c0, c1 + 1)]
            lines += [QtCore.QLineF(c0, r, c1, r) for r in range(r0, r1 + 1)]
            painter.drawLines(lines)

        ids = self._shared_ids
        if len(ids):
            rows, cols = np.divmod(ids, self._width)
            vis = (rows >= r0) & (rows < r1) & (cols >= c0) & (cols < c1)
            if np.count_nonzero(vis) <= self.MAX_OUTLINES:
                rows, cols = rows[vis], cols[vis]
                refs = self._shared_refs[vis]
                dark = self._shared_text_dark[vis]
                # device rectangles of the cells (the view has no rotation or shear)
                x0 = tr.m11() * cols + tr.dx()
                y0 = tr.m22() * rows + tr.dy()
                x1 = x0 + tr.m11()
                y1 = y0 + tr.m22()
                left, right = np.minimum(x0, x1), np.maximum(x0, x1)
                top, bottom = np.minimum(y0, y1), np.maximum(y0, y1)
                painter.resetTransform()
                inset = 1.0 if min(cw, ch) >= 8 else 0.5
                pen = QtGui.QPen(self._outline_color)
                pen.setWidthF(1.5 if min(cw, ch) >= 8 else 1.0)
                painter.setPen(pen)
                painter.setBrush(QtCore.Qt.BrushStyle.NoBrush)
                rects = [
                    QtCore.QRectF(l + inset, t + inset, r - l - 2 * inset, b - t - 2 * inset)
                    for l, t, r, b in zip(left.tolist(), top.tolist(), right.tolist(), bottom.tolist())
                ]
                painter.drawRects(rects)
                self.last_outline_count = len(rects)
                if min(cw, ch) >= self.MIN_TEXT_PX and len(rects) <= self.MAX_LABELS:
                    font = QtGui.QFont(painter.font())
                    font.setPixelSize(int(max(8, min(ch * 0.55, cw * 0.45, 15))))
                    font.setBold(True)
                    painter.setFont(font)
                    black, white = QtGui.QColor(0, 0, 0), QtGui.QColor(255, 255, 255)
                    center = QtCore.Qt.AlignmentFlag.AlignCenter
                    for rect, ref, is_dark in zip(rects, refs.tolist(), dark.tolist()):
                        painter.setPen(black if is_dark else white)
                        painter.drawText(rect, center, str(ref))
                    self.last_label_count = len(rects)
        painter.restore()


# --- the view ------------------------------------------------------------------------------------
class BlockMapView(QtWidgets.QWidget):
    """One cell per KV block, coloured by owning request and block state.

    Feed it with :meth:`update_snapshot` on the frame timer. Clicking a block emits
    :attr:`request_selected` with its owner (-1 for a free block) and highlights that request;
    :meth:`select_request` highlights without emitting, so two views can follow each other
    without a feedback loop.
    """

    request_selected = QtCore.Signal(int)

    def __init__(self, parent: QtWidgets.QWidget | None = None, theme: Theme = DARK):
        super().__init__(parent)
        self._theme = theme
        self._snapshot: Snapshot | None = None
        self._num_blocks = -1
        self._rows, self._width = 0, 0
        self._selected = -1
        self._hover_block = -1
        self._tooltip_text = ""
        self._clock = time.monotonic  # replaced in tests
        self._last_flash_t: float | None = None
        self._color_table = (request_color_index(np.arange(4096)) * _NUM_KINDS).astype(np.int32)
        self.last_update_ms = 0.0  # numpy + setImage time of the last update_snapshot
        self._alloc_buffers(0)

        # the plot: a bare ViewBox, y running top to bottom, no axes
        self._glw = pg.GraphicsLayoutWidget(parent=self)
        self._glw.ci.layout.setContentsMargins(0, 0, 0, 0)
        self._glw.setFrameShape(QtWidgets.QFrame.Shape.NoFrame)
        self._glw.setMinimumSize(80, 50)
        self._vb = self._glw.addViewBox(row=0, col=0, invertY=True, enableMenu=False)
        self._vb.setDefaultPadding(0.0)
        self._vb.disableAutoRange()
        self._image = pg.ImageItem(axisOrder="row-major")
        self._dim = pg.ImageItem(axisOrder="row-major")
        self._flash = pg.ImageItem(axisOrder="row-major")
        self._decor = _CellDecorations()
        for z, item in enumerate((self._image, self._dim, self._flash, self._decor)):
            item.setZValue(z)
            self._vb.addItem(item)
        for item in (self._image, self._dim, self._flash):
            item.setLevels((0, LUT_SIZE))  # index i -> lut[i] exactly
        self._dim.setVisible(False)
        self._flash.setVisible(False)

        scene = self._glw.scene()
        scene.sigMouseMoved.connect(self._on_mouse_moved)
        scene.sigMouseClicked.connect(self._on_mouse_clicked)
        self._glw.installEventFilter(self)
        self._glw.setMouseTracking(True)

        # legend and status line
        self._legend: dict[str, _LegendEntry] = {}
        legend_box = QtWidgets.QWidget(self)
        flow = _FlowLayout(legend_box)
        tips = {
            "used": "Used: holds tokens of one running request (ref count 1). Colour = that request.",
            "shared": "Shared prefix: a used block referenced by more than one running request "
                      "(ref count > 1), e.g. a common system prompt. Brighter (dark theme) or deeper "
                      "(light theme) than 'used'; outlined, with its ref count written on it, when "
                      "cells are big enough. Counted apart from 'used'.",
            "cached": "Cached: free, but still holds a prefix a new request may reuse (prefix cache). "
                      "Dimmed colour of the request that filled it; evicted (LRU) when the pool needs room.",
            "reserved": "Reserved: held by a request but holding no token yet, e.g. the tail of a "
                        "contiguous reservation. Pale tint of the owner's colour: memory held, not used.",
            "free": "Free: holds nothing reusable; available to any request.",
            "flash": "Flashes fade over 0.5 s on blocks that changed since the last frame: "
                     "allocated / prefix-cache hit / evicted / freed by a preemption (in swatch order).",
        }
        for key in ("used", "shared", "cached", "reserved", "free", "flash"):
            entry = _LegendEntry(key, tips[key], legend_box)
            self._legend[key] = entry
            flow.addWidget(entry)
        self._legend["flash"].set_text("flash: alloc / hit / evict / preempt")
        self._status = ElidedLabel(self)
        self._status.setTextFormat(QtCore.Qt.TextFormat.PlainText)
        self._status.setMinimumWidth(10)
        self._status.setSizePolicy(QtWidgets.QSizePolicy.Policy.Ignored, QtWidgets.QSizePolicy.Policy.Preferred)
        self._status.setToolTip("Hover a block for its details; click it to select its request. "
                                "Wheel zooms, drag pans, double-click shows the whole pool again.")

        lay = QtWidgets.QVBoxLayout(self)
        lay.setContentsMargins(6, 6, 6, 4)
        lay.setSpacing(4)
        lay.addWidget(self._glw, 1)
        lay.addWidget(legend_box)
        lay.addWidget(self._status)
        self._legend_box = legend_box

        self._flash_timer = QtCore.QTimer(self)
        self._flash_timer.setInterval(40)
        self._flash_timer.timeout.connect(self._on_flash_timer)

        self.set_theme(theme)
        self._set_grid(0)
        self._refresh_legend()
        self._refresh_status()

    # --- public API ------------------------------------------------------------------------------
    def set_legend_visible(self, visible: bool) -> None:
        """Show or hide the legend and the status line under the map (a page of several maps
        shows one legend for all; hovering a block still gives its details)."""
        self._legend_box.setVisible(visible)
        self._status.setVisible(visible)

    def update_snapshot(self, snapshot: Snapshot, changed: dict | None = None) -> None:
        """Draw a snapshot; flash the blocks listed in ``changed`` (block id arrays by event)."""
        t0 = time.perf_counter()
        n = snapshot.num_blocks
        if n != self._num_blocks:
            self._set_grid(n)
        self._snapshot = snapshot
        if n:
            self._compute_index(snapshot)
        self._image.setImage(self._img, autoLevels=False)
        self._advance_flash(changed)
        if self._selected >= 0:
            self._rebuild_dim()
        self._update_shared()
        self.last_update_ms = (time.perf_counter() - t0) * 1e3
        self._refresh_legend()
        self._refresh_status()

    def select_request(self, request_id: int) -> None:
        """Highlight the blocks of ``request_id`` (dim every other block); -1 clears. Never emits."""
        request_id = int(request_id)
        if request_id < 0:
            request_id = -1
        if request_id == self._selected:
            return
        self._selected = request_id
        self._rebuild_dim()
        self._refresh_status()

    def reset_view(self) -> None:
        """Show the whole pool again (after the user zoomed with the wheel or panned)."""
        w, h = max(self._width, 1), max(self._rows, 1)
        self._vb.setRange(xRange=(0, w), yRange=(0, h), padding=0.0)

    def selected_request(self) -> int:
        return self._selected

    def set_theme(self, theme: Theme) -> None:
        """Switch between palette.DARK and palette.LIGHT: background, lookup tables, legend."""
        self._theme = theme
        self._lut = build_lut(theme)
        self._flash_lut = build_flash_lut(theme)
        self._dim_lut = build_dim_lut(theme)
        # a shared cell's ref count is written in black on light cells, white on dark ones
        self._text_dark_lut = _luma(self._lut) > 150
        self._glw.setBackground(_qcolor(theme.background))
        self._image.setLookupTable(self._lut)
        self._flash.setLookupTable(self._flash_lut)
        self._dim.setLookupTable(self._dim_lut)
        self._decor.set_theme(theme)
        pal = self.palette()
        for role in (QtGui.QPalette.ColorRole.Window, QtGui.QPalette.ColorRole.Base):
            pal.setColor(role, _qcolor(theme.background))
        for role in (QtGui.QPalette.ColorRole.WindowText, QtGui.QPalette.ColorRole.Text):
            pal.setColor(role, _qcolor(theme.foreground))
        self.setPalette(pal)
        self.setAutoFillBackground(True)
        self._paint_swatches()
        if self._snapshot is not None:
            self._update_shared()

    def theme(self) -> Theme:
        return self._theme

    def index_image(self) -> np.ndarray:
        """The current [rows, width] uint8 index image (row-major, LUT indices)."""
        return self._img

    def lut(self) -> np.ndarray:
        """The current [256, 3] uint8 lookup table."""
        return self._lut

    def flash_image(self) -> np.ndarray:
        """The current [rows, width] uint8 flash overlay (0: nothing; see build_flash_lut)."""
        return self._flash_img

    def flash_lut(self) -> np.ndarray:
        return self._flash_lut

    def dim_image(self) -> np.ndarray:
        """The current [rows, width] uint8 selection overlay (1: dimmed, not the selected request)."""
        return self._dim_img

    def grid_shape(self) -> tuple[int, int]:
        """(rows, width) of the current grid."""
        return self._rows, self._width

    def cell_at(self, block_id: int) -> tuple[int, int]:
        """(row, col) of a block's cell in :meth:`index_image`."""
        row, col = divmod(int(block_id), self._width)
        return row, col

    def block_at(self, row: int, col: int) -> int:
        """Block id at a cell, or -1 for padding / outside the grid."""
        if not (0 <= col < self._width and 0 <= row < self._rows):
            return -1
        block = row * self._width + col
        return block if block < max(self._num_blocks, 0) else -1

    def block_at_scene(self, scene_pos: QtCore.QPointF) -> int:
        """Block id under a point of the graphics scene, or -1."""
        if self._width == 0 or not self._vb.sceneBoundingRect().contains(scene_pos):
            return -1
        p = self._vb.mapSceneToView(scene_pos)
        return self.block_at(int(math.floor(p.y())), int(math.floor(p.x())))

    def hover_text(self, block_id: int) -> str:
        """What hovering a block tells: id, state, owner(s), fill, prefix hash."""
        snap = self._snapshot
        if snap is None or not (0 <= block_id < snap.num_blocks):
            return ""
        state = int(snap.block_state[block_id])
        owner = int(snap.block_owner[block_id])
        ref = int(snap.block_ref_cnt[block_id])
        fill = int(snap.block_fill[block_id])
        h = int(snap.block_hash[block_id])
        row, col = self.cell_at(block_id)
        lines = [f"block {block_id:,} (row {row}, col {col})"]
        if state == BLOCK_USED and ref > 1:
            lines.append(f"state: shared prefix, ref count {ref}")
            lines.append(f"owner: shared by {ref} requests, first filled by request {owner}")
        elif state == BLOCK_USED:
            lines.append("state: used")
            lines.append(f"owner: request {owner}")
        elif state == BLOCK_CACHED:
            lines.append("state: cached (free, reusable prefix)")
            lines.append(f"owner: none now; filled by request {owner}" if owner >= 0 else "owner: none")
        elif state == BLOCK_RESERVED:
            lines.append("state: reserved (held, no token yet)")
            lines.append(f"owner: request {owner}")
        elif state == BLOCK_FREE:
            lines.append("state: free")
            lines.append("owner: none")
        else:
            lines.append(f"state: unknown ({state})")
            lines.append(f"owner: request {owner}" if owner >= 0 else "owner: none")
        if state != BLOCK_FREE and owner >= 0 and len(snap.requests):
            match = np.flatnonzero(snap.requests["request_id"] == owner)
            if len(match):
                nb = int(snap.requests["num_blocks"][match[0]])
                lines[-1] += f" (holds {nb:,} block{'s' if nb != 1 else ''})"
        lines.append(f"fill: {fill} / {snap.block_size} tokens")
        lines.append(f"prefix hash: 0x{h:016x}" if h else "prefix hash: none")
        return "\n".join(lines)

    # --- internals: buffers and index image ------------------------------------------------------
    def _alloc_buffers(self, n: int) -> None:
        rows, width = grid_shape(n) if n else (0, 0)
        self._rows, self._width = rows, width
        self._img = np.full((rows, width), LUT_NO_BLOCK, dtype=np.uint8)
        self._img_flat = self._img.reshape(-1)
        self._flash_img = np.zeros((rows, width), dtype=np.uint8)
        self._flash_flat = self._flash_img.reshape(-1)
        self._dim_img = np.zeros((rows, width), dtype=np.uint8)
        self._dim_flat = self._dim_img.reshape(-1)
        self._kind = np.zeros(n, dtype=np.uint8)
        self._shared_mask = np.zeros(n, dtype=bool)
        self._tmp_mask = np.zeros(n, dtype=bool)
        self._color = np.zeros(n, dtype=np.int32)
        self._color64 = np.zeros(0, dtype=np.int64)
        self._flash_level = np.zeros(n, dtype=np.float32)
        self._flash_code = np.zeros(n, dtype=np.uint8)
        self._flash_ids = np.zeros(0, dtype=np.int64)
        self._counts = np.zeros(_NUM_KINDS, dtype=np.int64)

    def _set_grid(self, n: int) -> None:
        self._num_blocks = n
        self._alloc_buffers(n)
        self._hover_block = -1
        for item, img in ((self._image, self._img), (self._flash, self._flash_img), (self._dim, self._dim_img)):
            item.setImage(img, autoLevels=False)
        self._flash.setVisible(False)
        self._flash_timer.stop()
        self._decor.set_grid(self._rows, self._width)
        w, h = max(self._width, 1), max(self._rows, 1)
        self._vb.setLimits(xMin=0, xMax=w, yMin=0, yMax=h, minXRange=min(4, w), minYRange=min(2, h))
        self.reset_view()

    def _compute_index(self, snap: Snapshot) -> None:
        """Index image from the snapshot: a handful of vectorised passes into preallocated buffers."""
        n = self._num_blocks
        kind, shared, tmp, col = self._kind, self._shared_mask, self._tmp_mask, self._color
        # kind: the state (5 for anything unknown), 4 for shared = used (2) with ref count > 1
        np.minimum(snap.block_state, KIND_UNKNOWN, out=kind)
        np.greater(snap.block_ref_cnt, 1, out=shared)
        np.equal(snap.block_state, BLOCK_USED, out=tmp)
        np.logical_and(shared, tmp, out=shared)
        np.add(kind, shared.view(np.uint8), out=kind)
        np.add(kind, shared.view(np.uint8), out=kind)
        # colour * 8: request_color_index(owner) = max(owner, 0) mod 48, by table lookup (mode
        # 'clip' sends ids < 0 to entry 0, like the max); a modulo pass is 4x slower
        owner = snap.block_owner
        top = int(owner.max())
        if top < _MAX_COLOR_TABLE:
            if top >= len(self._color_table):
                size = max(top + 1, 2 * len(self._color_table))
                self._color_table = (request_color_index(np.arange(size)) * _NUM_KINDS).astype(np.int32)
            np.take(self._color_table, owner, out=col, mode="clip")
        else:
            if len(self._color64) != n:
                self._color64 = np.zeros(n, dtype=np.int64)
            np.maximum(owner, 0, out=self._color64)
            np.remainder(self._color64, NUM_REQUEST_COLORS, out=self._color64)
            np.multiply(self._color64, _NUM_KINDS, out=col, casting="unsafe")
        # LUT index = table[colour * 8 + kind]
        np.add(col, kind, out=col)
        np.take(_INDEX_TABLE, col, out=self._img_flat[:n], mode="clip")
        for k in range(KIND_UNKNOWN + 1):
            np.equal(kind, k, out=tmp)
            self._counts[k] = np.count_nonzero(tmp)

    def _update_shared(self) -> None:
        snap = self._snapshot
        if snap is None or not self._num_blocks or not self._shared_mask.any():
            empty = np.zeros(0, dtype=np.int64)
            self._decor.set_shared(empty, empty, np.zeros(0, dtype=bool))
            return
        ids = np.flatnonzero(self._shared_mask)
        refs = snap.block_ref_cnt[ids].astype(np.int64)
        text_dark = self._text_dark_lut[self._img_flat[ids]]
        self._decor.set_shared(ids, refs, text_dark)

    # --- internals: flashes and selection --------------------------------------------------------
    def _advance_flash(self, changed: dict | None, from_timer: bool = False) -> None:
        now = self._clock()
        n = self._num_blocks
        ids = self._flash_ids
        level = self._flash_level
        dead = np.zeros(0, dtype=np.int64)
        if len(ids):
            last = self._last_flash_t if self._last_flash_t is not None else now
            dt = now - last
            if from_timer and dt < 0.8 * self._flash_timer.interval() / 1000.0:
                return  # frames are arriving; they age the flashes
            dt = max(dt, _FLASH_MIN_STEP_S)
            level[ids] -= np.float32(dt / FLASH_SECONDS)
            alive = level[ids] > 0.0
            dead = ids[~alive]
            ids = ids[alive]
            level[dead] = 0.0
        self._last_flash_t = now
        new = []
        if changed and n > 0:
            for code, name in enumerate(FLASH_EVENTS):
                blocks = changed.get(name)
                if blocks is None:
                    continue
                blocks = np.asarray(blocks, dtype=np.int64).reshape(-1)
                blocks = blocks[(blocks >= 0) & (blocks < n)]
                if len(blocks):
                    level[blocks] = 1.0
                    self._flash_code[blocks] = code
                    new.append(blocks)
        if new:
            ids = np.union1d(ids, np.concatenate(new))
        self._flash_ids = ids
        if not len(ids) and not len(dead):
            return
        self._flash_flat[dead] = 0
        if len(ids):
            lv = np.ceil(level[ids] * (_FLASH_LEVELS - 1)).astype(np.uint8)
            self._flash_flat[ids] = self._flash_code[ids] * _FLASH_LEVELS + lv
        self._flash.setImage(self._flash_img, autoLevels=False)
        self._flash.setVisible(bool(len(ids)))
        if len(ids) and not self._flash_timer.isActive():
            self._flash_timer.start()
        elif not len(ids):
            self._flash_timer.stop()

    def _on_flash_timer(self) -> None:
        self._advance_flash(None, from_timer=True)

    def _rebuild_dim(self) -> None:
        snap = self._snapshot
        if self._selected < 0 or snap is None or not self._num_blocks:
            self._dim.setVisible(False)
            return
        np.not_equal(snap.block_owner, self._selected, out=self._tmp_mask)
        self._dim_flat[:self._num_blocks] = self._tmp_mask
        self._dim.setImage(self._dim_img, autoLevels=False)
        self._dim.setVisible(True)

    # --- internals: mouse ------------------------------------------------------------------------
    def _on_mouse_moved(self, scene_pos) -> None:
        block = self.block_at_scene(scene_pos)
        if block == self._hover_block:
            return
        self._hover_block = block
        self._refresh_status()
        if block < 0:
            QtWidgets.QToolTip.hideText()
            self._tooltip_text = ""
            return
        self._show_tooltip(scene_pos)

    def _show_tooltip(self, scene_pos) -> None:
        text = self.hover_text(self._hover_block)
        self._tooltip_text = text
        global_pos = self._glw.mapToGlobal(self._glw.mapFromScene(scene_pos))
        QtWidgets.QToolTip.showText(global_pos + QtCore.QPoint(12, 12), text, self._glw)

    def _on_mouse_clicked(self, ev) -> None:
        if ev.button() != QtCore.Qt.MouseButton.LeftButton:
            return
        if not self._vb.sceneBoundingRect().contains(ev.scenePos()):
            return
        if ev.double():  # double-click: back to the whole pool
            self.reset_view()
            ev.accept()
            return
        self._emit_for_block(self.block_at_scene(ev.scenePos()))
        ev.accept()

    def _emit_for_block(self, block_id: int) -> int:
        """What a click on block_id does: select its owner (free or no block: -1) and emit it."""
        snap = self._snapshot
        owner = -1
        if snap is not None and 0 <= block_id < snap.num_blocks and int(snap.block_state[block_id]) != BLOCK_FREE:
            owner = max(int(snap.block_owner[block_id]), -1)
        self.select_request(owner)
        self.request_selected.emit(owner)
        return owner

    def eventFilter(self, obj, event):  # noqa: N802
        if obj is self._glw and event.type() == QtCore.QEvent.Type.Leave:
            if self._hover_block >= 0:
                self._hover_block = -1
                self._tooltip_text = ""
                QtWidgets.QToolTip.hideText()
                self._refresh_status()
        return super().eventFilter(obj, event)

    # --- internals: legend and status ------------------------------------------------------------
    def _paint_swatches(self) -> None:
        c = state_colors(self._theme)
        size, gap = 11, 2
        dpr = max(1.0, self.devicePixelRatioF())
        fg = _qcolor(self._theme.foreground)

        def swatch(colors, outline=False, text=None):
            w = len(colors) * size + (len(colors) - 1) * gap
            pm = QtGui.QPixmap(int(w * dpr), int(size * dpr))
            pm.setDevicePixelRatio(dpr)
            pm.fill(QtCore.Qt.GlobalColor.transparent)
            p = QtGui.QPainter(pm)
            for i, col in enumerate(colors):
                p.fillRect(QtCore.QRectF(i * (size + gap), 0, size, size), _qcolor(col))
            if outline:
                pen = QtGui.QPen(fg)
                pen.setWidthF(1.0)
                p.setPen(pen)
                for i in range(len(colors)):
                    p.drawRect(QtCore.QRectF(i * (size + gap) + 0.5, 0.5, size - 1, size - 1))
            if text:
                font = QtGui.QFont(p.font())
                font.setPixelSize(8)
                font.setBold(True)
                p.setFont(font)
                for i, col in enumerate(colors):
                    p.setPen(QtGui.QColor(0, 0, 0) if _luma(np.asarray(col)) > 150 else QtGui.QColor(255, 255, 255))
                    p.drawText(QtCore.QRectF(i * (size + gap), 0, size, size),
                               QtCore.Qt.AlignmentFlag.AlignCenter, text)
            p.end()
            return pm

        picks = [0, 1, 2]
        self._legend["used"].swatch.setPixmap(swatch([c["used"][i] for i in picks]))
        self._legend["shared"].swatch.setPixmap(swatch([c["shared"][i] for i in picks], outline=True, text="2"))
        self._legend["cached"].swatch.setPixmap(swatch([c["cached"][i] for i in picks]))
        self._legend["reserved"].swatch.setPixmap(swatch([c["reserved"][i] for i in picks]))
        self._legend["free"].swatch.setPixmap(swatch([c["free"]]))
        fc = _flash_colors(self._theme)
        self._legend["flash"].swatch.setPixmap(swatch([fc[k] for k in FLASH_EVENTS]))

    def block_counts(self) -> dict[str, int]:
        """Blocks of the snapshot shown, by the legend's kinds (used, shared, cached, reserved, free)."""
        counts = self._counts if self._snapshot is not None else np.zeros(_NUM_KINDS, dtype=np.int64)
        return {key: int(counts[kind]) for key, kind in _LEGEND_KINDS.items()}

    def legend_texts(self) -> dict[str, str]:
        """The legend's text per entry (used, shared, cached, reserved, free, flash)."""
        return {k: e.text.text() for k, e in self._legend.items()}

    def _refresh_legend(self) -> None:
        n = max(self._num_blocks, 0)
        for key, count in self.block_counts().items():
            label = "cached (reusable prefix)" if key == "cached" else ("shared (ref count > 1)" if key == "shared" else key)
            self._legend[key].set_text(f"{label} {_fmt_count(count, n)}")

    def status_text(self) -> str:
        return self._status.full_text()

    def _refresh_status(self) -> None:
        snap = self._snapshot
        if self._hover_block >= 0 and snap is not None:
            text = self.hover_text(self._hover_block).replace("\n", "  ·  ")
            if self._tooltip_text and QtWidgets.QToolTip.isVisible():
                tip = self.hover_text(self._hover_block)
                if tip != self._tooltip_text:
                    self._tooltip_text = tip
                    QtWidgets.QToolTip.showText(QtGui.QCursor.pos() + QtCore.QPoint(12, 12), tip, self._glw)
        elif snap is None:
            text = "no snapshot yet"
        else:
            n = snap.num_blocks
            text = (f"{n:,} blocks × {snap.block_size} tokens = {n * snap.block_size:,} tokens of KV cache"
                    "  ·  hover a block for details, click it to select its request")
        if self._selected >= 0:
            n_sel = 0
            if snap is not None and self._num_blocks:
                n_sel = int(np.count_nonzero(self._dim_flat[:self._num_blocks] == 0))
            text = f"request {self._selected} selected ({n_sel:,} block{'s' if n_sel != 1 else ''})  ·  " + text
        if self._status.full_text() != text:
            self._status.setText(text)
