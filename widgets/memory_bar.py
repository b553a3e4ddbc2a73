"""The memory budget as one stacked bar: weights | KV in use | KV cached | KV free | reserve.

Each segment is labelled with its size in bytes and its share of the budget (a segment too narrow
for that gives them in a row under the bar, wrapped onto a second row where one is too short); the
whole bar is the memory the engine plans with. The app computes the segments; this view only draws them.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QColor, QFont, QFontMetricsF, QPainter, QPen
from PySide6.QtWidgets import QSizePolicy, QToolTip, QWidget

from kvscope.engine.units import format_bytes, format_bytes_short
from kvscope.widgets.palette import DARK, Theme
from kvscope.widgets.throttle import Throttle


BAR_HEIGHT = 36
CROWDED_ROW_Y = 24 + BAR_HEIGHT + 2  # the row of the segments too narrow to carry their sizes
CROWDED_ROW_HEIGHT = 20


@dataclass(frozen=True)
class Segment:
    label: str
    nbytes: float
    color: tuple  # (r, g, b)
    tooltip: str = ""


# Repainted at most 20 times a second (the newest segments always follow): in a busy run its
# numbers change with every frame, and a repaint was ~0.5 ms of each; the bar grows as smoothly.
REPAINT_INTERVAL_S = 0.05


class MemoryBudgetBar(QWidget):
    def __init__(self, parent=None):
        super().__init__(parent)
        self._repaint = Throttle(self, REPAINT_INTERVAL_S, self._refit_and_update)
        self.theme: Theme = DARK
        self.title = "Memory budget"
        self.segments: list[Segment] = []
        self._crowded_rows = 1
        self._crowded_key: tuple = ()
        self.setMinimumHeight(CROWDED_ROW_Y + CROWDED_ROW_HEIGHT)
        self.setSizePolicy(QSizePolicy.Expanding, QSizePolicy.Fixed)
        # paintEvent fills every pixel: without this Qt painted the page, the tab widget and the
        # main window under the bar first, at each of its repaints
        self.setAttribute(Qt.WA_OpaquePaintEvent)
        self.setMouseTracking(True)

    def sizeHint(self) -> QSize:
        return QSize(800, CROWDED_ROW_Y + CROWDED_ROW_HEIGHT * self._crowded_rows + 2)

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)
        self._fit_crowded_rows()

    def _fit_crowded_rows(self) -> None:
        """Grows (or shrinks) the widget by whole rows so that every crowded segment's entry is shown
        whole; only when the number of rows changes, so a busy run does not re-lay out the window."""
        crowded = self.crowded_segments()
        key = (self.width(), tuple(seg.label for seg in crowded))
        if key == self._crowded_key:  # rows depend only on these (each entry has a fixed slot)
            return
        self._crowded_key = key
        entries = self._crowded_layout(crowded)
        rows = 1 + max((row for _seg, _x, row, _text in entries), default=0)
        if rows != self._crowded_rows:
            self._crowded_rows = rows
            self.setMinimumHeight(CROWDED_ROW_Y + CROWDED_ROW_HEIGHT * rows)
            self.updateGeometry()

    def set_theme(self, theme: Theme) -> None:
        self.theme = theme
        self.update()

    def set_segments(self, title: str, segments: list[Segment]) -> None:
        self.title = title
        self.segments = [s for s in segments if s.nbytes > 0]
        self._repaint.request()

    def _refit_and_update(self) -> None:
        # measured with the repaint, not on every frame: the labels' widths cost ~0.2 ms a frame
        self._fit_crowded_rows()
        self.update()

    def title_text(self) -> str:
        """The title and the budget's size; before an engine has planned its memory there is no
        budget to give (a "0 B" there read as an engine with no memory at all)."""
        if not self.segments:
            return f"{self.title}: none yet (no engine has planned its memory)"
        return f"{self.title}: {format_bytes(self.total_bytes)}"

    @property
    def total_bytes(self) -> float:
        return sum(s.nbytes for s in self.segments)

    def segment_text(self, segment: Segment) -> str:
        """A segment's label, in the bar or in the row under it: its size to three digits, and its share."""
        total = self.total_bytes or 1
        return f"{segment.label}: {format_bytes_short(segment.nbytes)} ({100 * segment.nbytes / total:.1f} %)"

    def tooltip_text(self, segment: Segment) -> str:
        """The exact size, where the label rounds it to three digits."""
        total = self.total_bytes or 1
        text = f"{segment.label}: {format_bytes(segment.nbytes)}, {100 * segment.nbytes / total:.1f} % of the budget"
        return text + (f"\n{segment.tooltip}" if segment.tooltip else "")

    def _bar_rect(self) -> QRectF:
        return QRectF(8, 24, max(10, self.width() - 16), BAR_HEIGHT)

    def _segment_rects(self):
        rect = self._bar_rect()
        total = self.total_bytes
        x = rect.left()
        for seg in self.segments:
            width = rect.width() * seg.nbytes / total if total else 0
            yield seg, QRectF(x, rect.top(), width, rect.height())
            x += width

    def crowded_segments(self) -> list[Segment]:
        """Segments too narrow for their bytes and percent: those are given in the row under the bar."""
        metrics = self.fontMetrics()
        return [seg for seg, rect in self._segment_rects()
                if metrics.horizontalAdvance(self.segment_text(seg)) + 8 > rect.width()]

    def paintEvent(self, event) -> None:  # noqa: N802 - Qt's name
        painter = QPainter(self)
        painter.setRenderHint(QPainter.Antialiasing, False)
        theme = self.theme
        painter.fillRect(self.rect(), QColor(*theme.background))
        title_font = QFont(self.font())
        title_font.setBold(True)
        painter.setFont(title_font)
        painter.setPen(QColor(*theme.foreground))
        painter.drawText(QRectF(8, 2, self.width() - 16, 20), Qt.AlignLeft | Qt.AlignVCenter, self.title_text())
        painter.setFont(self.font())
        metrics = painter.fontMetrics()
        crowded = self.crowded_segments()
        for seg, rect in self._segment_rects():
            painter.fillRect(rect, QColor(*seg.color))
            painter.setPen(QPen(QColor(*theme.background), 1))
            painter.drawLine(rect.topRight(), rect.bottomRight())
            text = seg.label if seg in crowded else self.segment_text(seg)
            if metrics.horizontalAdvance(text) + 8 <= rect.width():
                r, g, b = seg.color
                light = 0.299 * r + 0.587 * g + 0.114 * b > 150
                painter.setPen(QColor(20, 20, 20) if light else QColor(245, 245, 245))
                painter.drawText(rect.adjusted(4, 0, -4, 0), Qt.AlignLeft | Qt.AlignVCenter, text)
        self._paint_crowded(painter, crowded)
        painter.end()

    def _crowded_font(self) -> QFont:
        font = QFont(self.font())
        font.setPointSizeF(font.pointSizeF() * 0.9)
        return font

    def _crowded_layout(self, crowded: list[Segment]) -> list[tuple[Segment, float, int, str]]:
        """(segment, x, row, text) of each crowded segment's entry under the bar. Each entry takes the room
        of its widest value ("8888 MiB (88.8 %)"), so that entries do not shift as the numbers change and
        the row count changes only when the set of crowded segments does; an entry that does not fit the
        rest of a row starts the next one. Only an entry wider than the whole bar is elided."""
        metrics = QFontMetricsF(self._crowded_font())
        left, right = 8.0, self.width() - 8.0
        entries, x, row = [], left, 0
        for seg in crowded:
            text = self.segment_text(seg)
            slot = 12 + max(metrics.horizontalAdvance(text),
                            metrics.horizontalAdvance(f"{seg.label}: 8888 MiB (88.8 %)"))
            if x > left and x + slot > right:
                x, row = left, row + 1
            if x + slot > right:
                text = metrics.elidedText(text, Qt.ElideRight, max(0.0, right - x - 12))
            entries.append((seg, x, row, text))
            x += slot + 14
        return entries

    def _paint_crowded(self, painter: QPainter, crowded: list[Segment]) -> None:
        """The crowded segments' sizes in rows under the bar, each behind a swatch of its colour, in a
        slightly smaller font (the exact size is in the tooltip)."""
        painter.save()
        painter.setFont(self._crowded_font())
        painter.setPen(QColor(*self.theme.foreground))
        for seg, x, row, text in self._crowded_layout(crowded):
            y = CROWDED_ROW_Y + CROWDED_ROW_HEIGHT * row
            painter.fillRect(QRectF(x, y + 5, 9, 9), QColor(*seg.color))
            painter.drawText(QRectF(x + 12, y, self.width() - x - 20, CROWDED_ROW_HEIGHT),
                             Qt.AlignLeft | Qt.AlignVCenter, text)
        painter.restore()

    def segment_at(self, x: float) -> Segment | None:
        for seg, rect in self._segment_rects():
            if rect.left() <= x <= rect.right():
                return seg
        return None

    def mouseMoveEvent(self, event) -> None:  # noqa: N802
        seg = self.segment_at(event.position().x())
        if seg is None:
            QToolTip.hideText()
            return
        QToolTip.showText(event.globalPosition().toPoint(), self.tooltip_text(seg), self)
