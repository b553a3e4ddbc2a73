"""The memory budget as one stacked bar: weights | KV in use | KV cached | KV free | reserve.

Each segment is labelled with its size in bytes and its share of the budget; the whole bar is
the memory the engine plans with. The app computes the segments; this view only draws them.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QColor, QFont, QPainter, QPen
from PySide6.QtWidgets import QSizePolicy, QToolTip, QWidget

from .palette import DARK, Theme


@dataclass(frozen=True)
class Segment:
    label: str
    nbytes: float
    color: tuple  # (r, g, b)
    tooltip: str = ""


def format_bytes(n: float) -> str:
    for unit, size in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f} B"


class MemoryBudgetBar(QWidget):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.theme: Theme = DARK
        self.title = "Memory budget"
        self.segments: list[Segment] = []
        self.setMinimumHeight(64)
        self.setSizePolicy(QSizePolicy.Expanding, QSizePolicy.Fixed)
        self.setMouseTracking(True)

    def sizeHint(self) -> QSize:
        return QSize(800, 72)

    def set_theme(self, theme: Theme) -> None:
        self.theme = theme
        self.update()

    def set_segments(self, title: str, segments: list[Segment]) -> None:
        self.title = title
        self.segments = [s for s in segments if s.nbytes > 0]
        self.update()

    @property
    def total_bytes(self) -> float:
        return sum(s.nbytes for s in self.segments)

    def segment_text(self, segment: Segment) -> str:
        total = self.total_bytes or 1
        return f"{segment.label}: {format_bytes(segment.nbytes)} ({100 * segment.nbytes / total:.1f} %)"

    def _bar_rect(self) -> QRectF:
        return QRectF(8, 24, max(10, self.width() - 16), self.height() - 30)

    def _segment_rects(self):
        rect = self._bar_rect()
        total = self.total_bytes
        x = rect.left()
        for seg in self.segments:
            width = rect.width() * seg.nbytes / total if total else 0
            yield seg, QRectF(x, rect.top(), width, rect.height())
            x += width

    def paintEvent(self, event) -> None:  # noqa: N802 - Qt's name
        painter = QPainter(self)
        painter.setRenderHint(QPainter.Antialiasing, False)
        theme = self.theme
        painter.fillRect(self.rect(), QColor(*theme.background))
        title_font = QFont(self.font())
        title_font.setBold(True)
        painter.setFont(title_font)
        painter.setPen(QColor(*theme.foreground))
        painter.drawText(QRectF(8, 2, self.width() - 16, 20), Qt.AlignLeft | Qt.AlignVCenter,
                         f"{self.title}: {format_bytes(self.total_bytes)}")
        painter.setFont(self.font())
        metrics = painter.fontMetrics()
        for seg, rect in self._segment_rects():
            painter.fillRect(rect, QColor(*seg.color))
            painter.setPen(QPen(QColor(*theme.background), 1))
            painter.drawLine(rect.topRight(), rect.bottomRight())
            text = self.segment_text(seg)
            if metrics.horizontalAdvance(text) + 8 > rect.width():
                text = seg.label
            if metrics.horizontalAdvance(text) + 8 <= rect.width():
                r, g, b = seg.color
                light = 0.299 * r + 0.587 * g + 0.114 * b > 150
                painter.setPen(QColor(20, 20, 20) if light else QColor(245, 245, 245))
                painter.drawText(rect.adjusted(4, 0, -4, 0), Qt.AlignLeft | Qt.AlignVCenter, text)
        painter.end()

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
        text = self.segment_text(seg) + (f"\n{seg.tooltip}" if seg.tooltip else "")
        QToolTip.showText(event.globalPosition().toPoint(), text, self)
