"""The KV block map: one cell per KV block, coloured by the request that owns it.

The whole pool is one ``uint8`` index image drawn by a pyqtgraph ``ImageItem`` through a fixed
256-entry lookup table with fixed levels (pyqtgraph's fast path: a zero-copy ``Indexed8`` QImage),
so a 500,000-block pool costs a few vectorised numpy passes per frame and no Python loop over
blocks. Two more index images with RGBA tables sit on top: one fades cells that changed this frame
(allocated, prefix hit, evicted, preempted), one dims every block but the selected request's.
A small pool's cells are square and as big as the panel allows (up to MAX_CELL_PX); a big pool's
are an overview of several blocks each. The view range is set only when the pool size or the
panel's shape changes; the user may zoom (wheel) and pan (drag) inside it.

The pieces, one file each: block_map_colors.py (what each index means, the lookup tables),
block_map_grid.py (the grid layout and the images, plain numpy), block_map_decorations.py
(outlines and ref counts on big cells), block_map_legend.py; this file is the view that joins
them to Qt: the image items, hover, click, selection and the status line.

It reads only :mod:`kvscope.engine.snapshot` (types and constants); it never holds or calls the
engine.
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
from kvscope.widgets.block_map_colors import LUT_SIZE, build_dim_lut, build_flash_lut, build_lut, luma
from kvscope.widgets.block_map_decorations import CellDecorations
from kvscope.widgets.block_map_grid import BlockGrid, overview_layout
from kvscope.widgets.block_map_legend import BlockMapLegend
from kvscope.widgets.elided_label import ElidedLabel
from kvscope.widgets.image_item import ImageItem
from kvscope.widgets.palette import DARK, Theme
from kvscope.widgets.throttle import Throttle

# A block map drawn finer than this is noise: a bigger pool is drawn with several blocks per cell
# (block_map_grid.overview_layout) until the wheel zooms in to DETAIL_CELL_PX per block.
MIN_CELL_PX = 6
DETAIL_CELL_PX = 3
# A small pool's cells grow to fill the panel, square, up to this size: a dozen blocks drawn as
# 200-pixel tiles would read as a bar chart, not as a pool.
MAX_CELL_PX = 40
# The legend's counts change with every frame of a busy pool: shown at most 4 times a second, as
# text is read (the newest counts always follow). Each change re-laid-out the whole window, ~1 ms.
LEGEND_INTERVAL_S = 0.25
BOTTOM_MARGIN_PX = 12  # under the status line: as much air as the next panel's legend has above it


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
        self._grid = BlockGrid()
        self._num_blocks = -1  # the pool size drawn; -1 before the first snapshot
        self._blocks_per_cell = 1  # > 1: a big pool's overview (cells of k blocks) unless zoomed in
        self._span = (0.0, 0.0)  # grid cells the whole view shows across and down (>= the grid)
        self._detail = True  # each block its own cell on screen (a small pool, or zoomed in far enough)
        self._selected = -1
        self._hover_block = -1
        self._tooltip_text = ""
        self._clock = time.monotonic  # replaced in tests
        self.last_update_ms = 0.0  # numpy + setImage time of the last update_snapshot

        # the plot: a bare ViewBox, y running top to bottom, no axes
        self._glw = pg.GraphicsLayoutWidget(parent=self)
        self._glw.ci.layout.setContentsMargins(0, 0, 0, 0)
        self._glw.setFrameShape(QtWidgets.QFrame.Shape.NoFrame)
        self._glw.setMinimumSize(80, 50)
        self._vb = self._glw.addViewBox(row=0, col=0, invertY=True, enableMenu=False)
        self._vb.setDefaultPadding(0.0)
        self._vb.disableAutoRange()
        self._image = ImageItem(axisOrder="row-major")
        self._dim = ImageItem(axisOrder="row-major")
        self._flash = ImageItem(axisOrder="row-major")
        self._decor = CellDecorations()
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
        self._vb.sigRangeChanged.connect(self._on_range_changed)

        # legend and status line
        self._legend = BlockMapLegend(self)
        self._status = ElidedLabel(self)
        self._status.setTextFormat(QtCore.Qt.TextFormat.PlainText)
        self._status.setMinimumWidth(10)
        self._status.setSizePolicy(QtWidgets.QSizePolicy.Policy.Ignored, QtWidgets.QSizePolicy.Policy.Preferred)
        self._status.setToolTip("Hover a block for its details; click it to select its request. "
                                "Wheel zooms, drag pans, double-click shows the whole pool again.")

        lay = QtWidgets.QVBoxLayout(self)
        # Room under the last line: the live page's splitter grip, 6 px below this edge, sat on it.
        lay.setContentsMargins(6, 6, 6, BOTTOM_MARGIN_PX)
        lay.setSpacing(4)
        lay.addWidget(self._glw, 1)
        lay.addWidget(self._legend)
        lay.addWidget(self._status)

        self._legend_refresh = Throttle(self, LEGEND_INTERVAL_S, self._refresh_legend_now)

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
        self._legend.setVisible(visible)
        self._status.setVisible(visible)

    def update_snapshot(self, snapshot: Snapshot, changed: dict | None = None) -> None:
        """Draw a snapshot; flash the blocks listed in ``changed`` (block id arrays by event)."""
        t0 = time.perf_counter()
        n = snapshot.num_blocks
        if n != self._num_blocks:
            self._set_grid(n)
        self._snapshot = snapshot
        if n:
            self._grid.draw(snapshot)
        self._show_cells()
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
        w, h = self._span
        self._vb.setRange(xRange=(0, w), yRange=(0, h), padding=0.0)

    def cell_px(self) -> float:
        """The side of a drawn cell on screen, in pixels, when the whole pool is shown."""
        if not self._num_blocks:
            return 0.0
        (x0, x1), (y0, y1) = self._vb.viewRange()
        return min(self._vb.width() / max(x1 - x0, 1e-9), self._vb.height() / max(y1 - y0, 1e-9))

    def selected_request(self) -> int:
        return self._selected

    def set_theme(self, theme: Theme) -> None:
        """Switch between palette.DARK and palette.LIGHT: background, lookup tables, legend."""
        self._theme = theme
        self._lut = build_lut(theme)
        self._flash_lut = build_flash_lut(theme)
        self._dim_lut = build_dim_lut(theme)
        # a shared cell's ref count is written in black on light cells, white on dark ones
        self._text_dark_lut = luma(self._lut) > 150
        self._glw.setBackground(QtGui.QColor(*theme.background))
        self._image.setLookupTable(self._lut)
        self._flash.setLookupTable(self._flash_lut)
        self._dim.setLookupTable(self._dim_lut)
        self._decor.set_theme(theme)
        pal = self.palette()
        for role in (QtGui.QPalette.ColorRole.Window, QtGui.QPalette.ColorRole.Base):
            pal.setColor(role, QtGui.QColor(*theme.background))
        for role in (QtGui.QPalette.ColorRole.WindowText, QtGui.QPalette.ColorRole.Text):
            pal.setColor(role, QtGui.QColor(*theme.foreground))
        self.setPalette(pal)
        self.setAutoFillBackground(True)
        self._legend.set_theme(theme)
        if self._snapshot is not None:
            self._update_shared()

    def theme(self) -> Theme:
        return self._theme

    def index_image(self) -> np.ndarray:
        """The current [rows, width] uint8 index image (row-major, LUT indices)."""
        return self._grid.index_image

    def lut(self) -> np.ndarray:
        """The current [256, 3] uint8 lookup table."""
        return self._lut

    def flash_image(self) -> np.ndarray:
        """The current [rows, width] uint8 flash overlay (0: nothing; see build_flash_lut)."""
        return self._grid.flash_image

    def flash_lut(self) -> np.ndarray:
        return self._flash_lut

    def dim_image(self) -> np.ndarray:
        """The current [rows, width] uint8 selection overlay (1: dimmed, not the selected request)."""
        return self._grid.dim_image

    def blocks_per_cell(self) -> int:
        """Blocks one drawn cell holds now: 1, or k in a big pool's overview (zoomed out)."""
        return 1 if self._detail else self._blocks_per_cell

    def shown_image(self) -> np.ndarray:
        """The index image on screen: index_image(), or the overview's [rows, width / k] cells."""
        return self._grid.aggregate(self.blocks_per_cell()) if self._num_blocks > 0 else self._grid.index_image

    def grid_shape(self) -> tuple[int, int]:
        """(rows, width) of the current grid."""
        return self._grid.rows, self._grid.width

    def cell_at(self, block_id: int) -> tuple[int, int]:
        """(row, col) of a block's cell in :meth:`index_image`."""
        return self._grid.cell_at(block_id)

    def block_at(self, row: int, col: int) -> int:
        """Block id at a cell, or -1 for padding / outside the grid."""
        return self._grid.block_at(row, col)

    def block_at_scene(self, scene_pos: QtCore.QPointF) -> int:
        """Block id under a point of the graphics scene, or -1."""
        if self._grid.width == 0 or not self._vb.sceneBoundingRect().contains(scene_pos):
            return -1
        p = self._vb.mapSceneToView(scene_pos)
        return self.block_at(int(math.floor(p.y())), int(math.floor(p.x())))

    def hover_text(self, block_id: int) -> str:
        """What hovering a block tells: id, state, owner(s), fill, prefix hash; in a big pool's
        overview, the range of blocks its cell holds and what they are."""
        snap = self._snapshot
        if snap is None or not (0 <= block_id < snap.num_blocks):
            return ""
        if self.blocks_per_cell() > 1:
            return self._cell_text(block_id)
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
        if snap.block_group is not None and state != BLOCK_FREE:
            group = int(snap.block_group[block_id])
            name = snap.group_names[group] if group < len(snap.group_names) else "?"
            lines.append(f"layer group: {group + 1} of {len(snap.group_names)} ({name})")
        return "\n".join(lines)

    def _cell_text(self, block_id: int) -> str:
        snap = self._snapshot
        first, last = self._grid.cell_range(block_id, self._blocks_per_cell)
        state = snap.block_state[first:last + 1]
        owner = snap.block_owner[first:last + 1]
        shared = (state == BLOCK_USED) & (snap.block_ref_cnt[first:last + 1] > 1)
        counts = [("used", int(np.count_nonzero(state == BLOCK_USED)) - int(shared.sum())),
                  ("shared", int(shared.sum())), ("cached", int(np.count_nonzero(state == BLOCK_CACHED))),
                  ("reserved", int(np.count_nonzero(state == BLOCK_RESERVED))),
                  ("free", int(np.count_nonzero(state == BLOCK_FREE)))]
        held = owner[(state != BLOCK_FREE) & (owner >= 0)]
        ids, per = np.unique(held, return_counts=True)
        top = ids[np.argsort(-per, kind="stable")][:4]
        lines = [f"blocks {first:,}-{last:,} ({last - first + 1} blocks in this cell; the wheel zooms in to "
                 "each block)", ", ".join(f"{n:,} {name}" for name, n in counts if n)]
        if len(ids):
            more = f" and {len(ids) - len(top)} more" if len(ids) > len(top) else ""
            lines.append(f"request{'s' if len(ids) > 1 else ''} {', '.join(str(int(r)) for r in top)}{more}")
        return "\n".join(lines)

    def _cell_owner(self, block_id: int) -> int:
        """The request holding most blocks of block_id's drawn cell (-1: none)."""
        snap = self._snapshot
        first, last = self._grid.cell_range(block_id, self._blocks_per_cell)
        state, owner = snap.block_state[first:last + 1], snap.block_owner[first:last + 1]
        held = owner[(state != BLOCK_FREE) & (owner >= 0)]
        if not len(held):
            return -1
        ids, per = np.unique(held, return_counts=True)
        return int(ids[np.argmax(per)])

    # --- internals: grid, flashes and selection ---------------------------------------------------
    def _layout(self, n: int) -> tuple[int, int, tuple[float, float]]:
        """(grid width, blocks per cell, cells the view spans across and down) for n blocks in
        the map's area now. One block per cell: square cells, at most MAX_CELL_PX, the grid at the
        top left and the view as many cells wide and high as the area holds. A big pool's overview
        spans its grid exactly (its cells are k blocks wide and one high: not square anyway)."""
        self.layout().activate()  # the map's area as laid out, also before the view is first shown
        size = self._glw.size()
        width_px, height_px = max(size.width(), 80), max(size.height(), 50)
        width, k = overview_layout(n, width_px, height_px, MIN_CELL_PX)
        rows = max(1, -(-n // width))
        if k > 1:
            return width, k, (float(width), float(rows))
        side = min(width_px / width, height_px / rows, MAX_CELL_PX)
        return width, k, (max(width, round(width_px / side, 3)), max(rows, round(height_px / side, 3)))

    def _set_grid(self, n: int) -> None:
        self._num_blocks = n
        width, self._blocks_per_cell, span = self._layout(n) if n else (0, 1, (1.0, 1.0))
        self._detail = self._blocks_per_cell == 1
        self._grid.resize(n, width or None)
        grid = self._grid
        self._span = (max(span[0], 1.0), max(span[1], 1.0))
        self._hover_block = -1
        for item, img in ((self._image, grid.index_image), (self._flash, grid.flash_image),
                          (self._dim, grid.dim_image)):
            item.setImage(img, autoLevels=False)
        self._flash.setVisible(False)
        self._flash_timer.stop()
        self._decor.set_grid(grid.rows, grid.width)
        w, h = self._span
        self._vb.setLimits(xMin=0, xMax=w, yMin=0, yMax=h, minXRange=min(4, w), minYRange=min(2, h))
        self.reset_view()

    def _show_cells(self) -> None:
        """Draw the index image, or the overview's cells stretched over the same grid coordinates."""
        cells = self.shown_image()
        self._image.setImage(cells, autoLevels=False)
        if cells.size:  # an empty pool has no cells to stretch
            self._image.setRect(QtCore.QRectF(0, 0, self._grid.width, self._grid.rows))

    def _show_overlay(self, item: pg.ImageItem) -> None:
        """The flash or selection overlay as the cells are drawn: per block, or reduced to the
        overview's cells (block_map_grid.BlockGrid.reduce_overlay)."""
        grid = self._grid
        image = grid.flash_image if item is self._flash else grid.dim_image
        k = self.blocks_per_cell()
        if k > 1 and self._num_blocks > 0:
            image = grid.flash_cells(k) if item is self._flash else grid.reduce_overlay(image, k, brightest=False)
        item.setImage(image, autoLevels=False)
        if image.size:
            item.setRect(QtCore.QRectF(0, 0, grid.width, grid.rows))

    def _on_range_changed(self, *_args) -> None:
        """Zoomed in until a block is DETAIL_CELL_PX wide: one cell per block; zoomed out: the overview."""
        if self._blocks_per_cell == 1:
            return
        (x0, x1), _ = self._vb.viewRange()
        detail = self._vb.width() / max(x1 - x0, 1e-9) >= DETAIL_CELL_PX
        if detail != self._detail:
            self._detail = detail
            self._hover_block = -1
            self._show_cells()
            self._show_overlay(self._flash)
            self._show_overlay(self._dim)

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt's name
        """A new size may need another layout (a big pool's overview follows the panel's shape)."""
        super().resizeEvent(event)
        if self._num_blocks <= 0:
            return
        width, k, span = self._layout(self._num_blocks)
        if (width, k) != (self._grid.width, self._blocks_per_cell):
            self._set_grid(self._num_blocks)
            if self._snapshot is not None:
                self.update_snapshot(self._snapshot)
        elif span != self._span:  # the same grid in a panel of another shape: cells stay square
            self._span = span
            self._vb.setLimits(xMin=0, xMax=span[0], yMin=0, yMax=span[1])
            self.reset_view()

    def _update_shared(self) -> None:
        snap = self._snapshot
        shared = self._grid.shared_mask
        if snap is None or not self._num_blocks or not shared.any():
            empty = np.zeros(0, dtype=np.int64)
            self._decor.set_shared(empty, empty, np.zeros(0, dtype=bool))
            return
        ids = np.flatnonzero(shared)
        refs = snap.block_ref_cnt[ids].astype(np.int64)
        text_dark = self._text_dark_lut[self._grid.index_of(ids)]
        self._decor.set_shared(ids, refs, text_dark)

    def _advance_flash(self, changed: dict | None, from_timer: bool = False) -> None:
        # a timer tick defers to frames that arrive anyway: they age the flashes
        min_interval_s = 0.8 * self._flash_timer.interval() / 1000.0 if from_timer else 0.0
        if not self._grid.advance_flashes(self._clock(), changed, min_interval_s):
            return
        flashing = bool(len(self._grid.flashing))
        self._show_overlay(self._flash)
        self._flash.setVisible(flashing)
        if flashing and not self._flash_timer.isActive():
            self._flash_timer.start()
        elif not flashing:
            self._flash_timer.stop()

    def _on_flash_timer(self) -> None:
        self._advance_flash(None, from_timer=True)

    def _rebuild_dim(self) -> None:
        snap = self._snapshot
        if self._selected < 0 or snap is None or not self._num_blocks:
            self._dim.setVisible(False)
            return
        self._grid.dim_all_but(snap, self._selected)
        self._show_overlay(self._dim)
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
        if snap is not None and 0 <= block_id < snap.num_blocks and self.blocks_per_cell() > 1:
            owner = self._cell_owner(block_id)  # a cell of the overview: the request holding most of it
        elif snap is not None and 0 <= block_id < snap.num_blocks and int(snap.block_state[block_id]) != BLOCK_FREE:
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
    # --- internals: legend and status ------------------------------------------------------------
    def block_counts(self) -> dict[str, int]:
        """Blocks of the snapshot shown, by the legend's kinds (used, shared, cached, reserved, free)."""
        if self._snapshot is None:
            return dict.fromkeys(self._grid.block_counts(), 0)
        return self._grid.block_counts()

    def legend_texts(self) -> dict[str, str]:
        """The legend's text per entry (used, shared, cached, reserved, free, flash), as of the
        newest snapshot (counts still to be shown are shown first)."""
        self._legend_refresh.flush()
        return self._legend.texts()

    def _refresh_legend(self) -> None:
        self._legend_refresh.request()

    def _refresh_legend_now(self) -> None:
        self._legend.set_counts(self.block_counts(), max(self._num_blocks, 0))

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
            if snap.block_group is not None:
                groups = ", ".join(f"{name} {n:,}" for name, n in snap.held_blocks_by_group().items())
                text = f"blocks in use by layer group: {groups}  ·  {text}"
        if self._selected >= 0:
            n_sel = 0
            if snap is not None and self._num_blocks:
                n_sel = self._grid.undimmed_count()
            text = f"request {self._selected} selected ({n_sel:,} block{'s' if n_sel != 1 else ''})  ·  " + text
        if self._status.full_text() != text:
            self._status.setText(text)
