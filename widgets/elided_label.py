"""A one-line label that ends in "…" when its text is wider than the label, instead of being cut
mid-word at the edge (a narrow dock at 1280x720 cut the block map's status line that way)."""

from __future__ import annotations

from PySide6 import QtCore, QtWidgets


class ElidedLabel(QtWidgets.QLabel):
    def __init__(self, parent=None):
        super().__init__(parent)
        self._full_text = ""

    def setText(self, text: str) -> None:  # noqa: N802 - Qt's name
        self._full_text = text
        self._elide()

    def full_text(self) -> str:
        return self._full_text

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)
        self._elide()

    def _elide(self) -> None:
        shown = self.fontMetrics().elidedText(self._full_text, QtCore.Qt.TextElideMode.ElideRight, max(self.width(), 10))
        if shown != super().text():
            super().setText(shown)
