"""A one-line QLabel for text that changes with every frame (the status line's engine clock and
counters): shown at most ``interval_s`` apart, the newest text always following. Each new text
re-laid-out the status bar (~0.35 ms of a 60 Hz frame, paint included); a person reads it at 10 Hz."""

from __future__ import annotations

import time

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QLabel


class ThrottledLabel(QLabel):
    def __init__(self, interval_s: float = 0.1, parent=None):
        super().__init__(parent)
        self.interval_s = interval_s
        self._shown_at = -float("inf")  # perf_counter() the text on show was set
        self._pending: str | None = None  # the newest text, not on show yet
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.timeout.connect(self._show_pending)
        # Opaque (it fills its background): a new text repainted the status bar and the main
        # window behind the label too, 10 times a second.
        self.setAutoFillBackground(True)

    def setText(self, text: str) -> None:  # noqa: N802 - Qt's name
        if text == self.text():
            return
        wait_s = self._shown_at + self.interval_s - time.perf_counter()
        if wait_s <= 0:
            self._show(text)
            return
        self._pending = text
        if not self._timer.isActive():
            self._timer.start(int(wait_s * 1000) + 1)

    def text(self) -> str:
        """The newest text given (on show within interval_s)."""
        return self._pending if self._pending is not None else super().text()

    def _show_pending(self) -> None:
        if self._pending is not None:
            self._show(self._pending)

    def _show(self, text: str) -> None:
        self._pending = None
        self._timer.stop()
        self._shown_at = time.perf_counter()
        super().setText(text)
