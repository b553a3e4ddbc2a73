"""A one-line QLabel for text that changes with every frame (the status line's engine clock and
counters): shown at most ``interval_s`` apart, the newest text always following. Each new text
re-laid-out the status bar (~0.35 ms of a 60 Hz frame, paint included); a person reads it at 10 Hz.
Wider than the window (1280x720), the text ends in "..." and the tooltip holds all of it: it was cut
mid-word at the window's edge ("simulated times: datasheet peaks, uncalibra")."""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtWidgets import QLabel

from kvscope.widgets.throttle import Throttle


class ThrottledLabel(QLabel):
    def __init__(self, interval_s: float = 0.1, parent=None):
        super().__init__(parent)
        self._pending: str | None = None  # the newest text, not on show yet
        self._full = ""  # the text on show, before eliding
        self._throttle = Throttle(self, interval_s, self._show_pending)
        # Opaque (it fills its background): a new text repainted the status bar and the main
        # window behind the label too, 10 times a second.
        self.setAutoFillBackground(True)

    def setText(self, text: str) -> None:  # noqa: N802 - Qt's name
        if text == self.text():
            return
        self._pending = text
        self._throttle.request()

    def text(self) -> str:
        """The newest text given (on show within interval_s), whole."""
        return self._pending if self._pending is not None else self._full

    def minimumSizeHint(self) -> QSize:  # noqa: N802 - Qt's name
        return QSize(0, super().minimumSizeHint().height())  # it elides rather than widen the window

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)
        self._show(self._full)

    def _show_pending(self) -> None:
        if self._pending is not None:
            text, self._pending = self._pending, None
            self._show(text)

    def _show(self, text: str) -> None:
        self._full = text
        shown = self.fontMetrics().elidedText(text, Qt.TextElideMode.ElideRight, max(self.width(), 10))
        super().setText(shown)
        tip = text if shown != text else ""
        if tip != self.toolTip():
            self.setToolTip(tip)
