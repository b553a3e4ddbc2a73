"""The block map's legend: a swatch and a count per kind of block (used, shared, cached, reserved,
free) and the flash colours, each entry explained in its tooltip; entries wrap in a narrow panel."""

from __future__ import annotations

import numpy as np
from PySide6 import QtCore, QtGui, QtWidgets

from kvscope.widgets.block_map_colors import FLASH_EVENTS, flash_colors, luma, state_colors
from kvscope.widgets.flow_layout import FlowLayout
from kvscope.widgets.palette import Theme

KINDS = ("used", "shared", "cached", "reserved", "free")
_TIPS = {
    "used": "In use (1 ref): holds tokens of one running request (ref count 1). Colour = that request.\n"
            "The KV usage the status bar shows is this and 'shared' together.",
    "shared": "Shared prefix: a block in use, referenced by more than one running request "
              "(ref count > 1), e.g. a common system prompt. Brighter (dark theme) or deeper "
              "(light theme) than 'in use (1 ref)'; outlined, with its ref count written on it, "
              "when cells are big enough. Counted apart from 'in use (1 ref)'.",
    "cached": "Cached: free, but still holds a prefix a new request may reuse (prefix cache). "
              "Dimmed colour of the request that filled it; evicted (LRU) when the pool needs room.",
    "reserved": "Reserved: held by a request but holding no token yet, e.g. the tail of a "
                "contiguous reservation. Pale tint of the owner's colour: memory held, not used.",
    "free": "Free: holds nothing reusable; available to any request.",
    "flash": "Flashes fade over 0.5 s on blocks that changed since the last frame: "
             "allocated / prefix-cache hit / evicted / freed by a preemption (in swatch order).",
}
_SHARE_TIP = "\nThe percentage: this kind's share of the pool's blocks."
# Short: at 1280x720 "shared (ref count > 1)" and "cached (reusable prefix)" put the five kinds on
# five lines, more than the map's own height (the tooltips say what each kind is).
_LABELS = {"used": "in use (1 ref)", "cached": "cached prefix", "shared": "shared (refs > 1)"}


def _qcolor(rgb) -> QtGui.QColor:
    r, g, b = (int(v) for v in rgb[:3])
    return QtGui.QColor(r, g, b)


def _fmt_count(n: int, total: int) -> str:
    pct = 100.0 * n / total if total else 0.0
    # "of the pool" is in each entry's tooltip: at 1280x720 the longer text put every entry on a
    # line of its own, and the legend took more height than the map (the memory bar gives % of
    # device memory)
    return f"{n:,} block{'' if n == 1 else 's'} ({pct:.1f} %)"


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


class BlockMapLegend(QtWidgets.QWidget):
    """One entry per kind of block, then the flash swatches; ``entries`` by key."""

    def __init__(self, parent=None):
        super().__init__(parent)
        flow = FlowLayout(self)
        self.entries: dict[str, _LegendEntry] = {}
        for key in (*KINDS, "flash"):
            entry = _LegendEntry(key, _TIPS[key] + ("" if key == "flash" else _SHARE_TIP), self)
            self.entries[key] = entry
            flow.addWidget(entry)
        self.entries["flash"].set_text("flash: alloc / hit / evict / preempt")

    def set_counts(self, counts: dict[str, int], num_blocks: int) -> None:
        """Blocks of each kind, as counts and shares of the pool."""
        for key, count in counts.items():
            self.entries[key].set_text(f"{_LABELS.get(key, key)} {_fmt_count(count, num_blocks)}")

    def texts(self) -> dict[str, str]:
        """The text per entry (used, shared, cached, reserved, free, flash)."""
        return {k: e.text.text() for k, e in self.entries.items()}

    def set_theme(self, theme: Theme) -> None:
        """Repaint the swatches in the theme's colours (three request colours per variant)."""
        c = state_colors(theme)
        size, gap = 11, 2
        dpr = max(1.0, self.devicePixelRatioF())
        fg = _qcolor(theme.foreground)

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
                    p.setPen(QtGui.QColor(0, 0, 0) if luma(np.asarray(col)) > 150 else QtGui.QColor(255, 255, 255))
                    p.drawText(QtCore.QRectF(i * (size + gap), 0, size, size),
                               QtCore.Qt.AlignmentFlag.AlignCenter, text)
            p.end()
            return pm

        picks = [0, 1, 2]
        self.entries["used"].swatch.setPixmap(swatch([c["used"][i] for i in picks]))
        self.entries["shared"].swatch.setPixmap(swatch([c["shared"][i] for i in picks], outline=True, text="2"))
        self.entries["cached"].swatch.setPixmap(swatch([c["cached"][i] for i in picks]))
        self.entries["reserved"].swatch.setPixmap(swatch([c["reserved"][i] for i in picks]))
        self.entries["free"].swatch.setPixmap(swatch([c["free"]]))
        fc = flash_colors(theme)
        self.entries["flash"].swatch.setPixmap(swatch([fc[k] for k in FLASH_EVENTS]))
