"""A KV cache as one stacked bar of blocks: each segment a count of blocks, its share and a tooltip.

The attached server's memory bar: vLLM reports the share of blocks in use (a metric) and kvscope
counts the prefix-cached blocks (from events), in blocks, not bytes -- the bytes of a block are
known only when the model's shape is. The app computes the segments; this view only draws them.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QColor, QFont, QPainter, QPen
from PySide6.QtWidgets import QSizePolicy, QToolTip, QWidget

from kvscope.widgets.palette import DARK, Theme

BAR_TOP, BAR_HEIGHT = 24, 30


@dataclass(frozen=True)
class BlockSegment:
    label: str
    blocks: float
    color: tuple  # (r, g, b)
    tooltip: str = ""


class KvBlocksBar(QWidget):
    def __init__(self, parent=None, theme: Theme = DARK):
        super().__init__(parent)
        self.theme = theme
        self.title = "KV cache"
        self.segments: list[BlockSegment] = []
        self.setMinimumHeight(BAR_TOP + BAR_HEIGHT + 6)
        self.setSizePolicy(QSizePolicy.Expanding, QSizePolicy.Fixed)
        self.setMouseTracking(True)

    def sizeHint(self) -> QSize:
        return QSize(800, BAR_TOP + BAR_HEIGHT + 8)

    def set_theme(self, theme: Theme) -> None:
        self.theme = theme
        self.update()

    def set_segments(self, title: str, segments: list[BlockSegment]) -> None:
        self.title = title
        self.segments = [s for s in segments if s.blocks > 0]
        self.update()

    @property
    def total_blocks(self) -> float:
        return sum(s.blocks for s in self.segments)

    def segment_text(self, segment: BlockSegment) -> str:
        total = self.total_blocks or 1
        return f"{segment.label}: {segment.blocks:,.0f} blocks ({100 * segment.blocks / total:.1f} %)"

    def _segment_rects(self):
        width = max(10, self.width() - 16)
        total, x = self.total_blocks, 8.0
        for seg in self.segments:
            w = width * seg.blocks / total if total else 0
            yield seg, QRectF(x, BAR_TOP, w, BAR_HEIGHT)
            x += w

    def paintEvent(self, event) -> None:  # noqa: N802 - Qt's name
        painter = QPainter(self)
        theme = self.theme
        painter.fillRect(self.rect(), QColor(*theme.background))
        font = QFont(self.font())
        font.setBold(True)
        painter.setFont(font)
        painter.setPen(QColor(*theme.foreground))
        painter.drawText(QRectF(8, 2, self.width() - 16, 20), Qt.AlignLeft | Qt.AlignVCenter,
                         f"{self.title}: {self.total_blocks:,.0f} blocks")
        painter.setFont(self.font())
        metrics = painter.fontMetrics()
        for seg, rect in self._segment_rects():
            painter.fillRect(rect, QColor(*seg.color))
            painter.setPen(QPen(QColor(*theme.background), 1))
            painter.drawLine(rect.topRight(), rect.bottomRight())
            for text in (self.segment_text(seg), seg.label):
                if metrics.horizontalAdvance(text) + 8 <= rect.width():
                    r, g, b = seg.color
                    painter.setPen(QColor(20, 20, 20) if 0.299 * r + 0.587 * g + 0.114 * b > 150
                                   else QColor(245, 245, 245))
                    painter.drawText(rect.adjusted(4, 0, -4, 0), Qt.AlignLeft | Qt.AlignVCenter, text)
                    break
        painter.end()

    def segment_at(self, x: float) -> BlockSegment | None:
        return next((seg for seg, rect in self._segment_rects() if rect.left() <= x <= rect.right()), None)

    def mouseMoveEvent(self, event) -> None:  # noqa: N802
        seg = self.segment_at(event.position().x())
        if seg is None:
            QToolTip.hideText()
            return
        QToolTip.showText(event.globalPosition().toPoint(),
                          self.segment_text(seg) + (f"\n{seg.tooltip}" if seg.tooltip else ""), self)
