"""A one-line QLabel for text that changes with every frame (the status line's engine clock and
counters): shown at most ``interval_s`` apart, the newest text always following. Each new text
re-laid-out the status bar (~0.35 ms of a 60 Hz frame, paint included); a person reads it at 10 Hz."""

from __future__ import annotations

from PySide6.QtWidgets import QLabel

from kvscope.widgets.throttle import Throttle


class ThrottledLabel(QLabel):
    def __init__(self, interval_s: float = 0.1, parent=None):
        super().__init__(parent)
        self._pending: str | None = None  # the newest text, not on show yet
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
        """The newest text given (on show within interval_s)."""
        return self._pending if self._pending is not None else super().text()

    def _show_pending(self) -> None:
        if self._pending is not None:
            text, self._pending = self._pending, None
            super().setText(text)
