"""What the block map paints over its image when cells are big on screen: the gaps between cells,
an outline around each shared block, and each shared block's ref count as text.

Work is bounded by what is visible, so it costs nothing for large pools (cells under a few
pixels), where the lookup table's 'shared' variant alone marks shared blocks.
"""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtGui

from kvscope.widgets.palette import Theme


class CellDecorations(pg.GraphicsObject):
    """A graphics item in the grid's coordinates (one unit per cell), above the block map's images.
    Below MIN_OUTLINE_PX pixels per cell it paints nothing."""

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
        self._gap_color = QtGui.QColor(*theme.background)
        self._outline_color = QtGui.QColor(*theme.foreground)
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
