"""At most one call of an action per interval, the newest state always drawn: what a person reads
at a few hertz (the status line, the memory bar, the legend's counts, the plots' step curves, the
timeline) need not be redrawn on every one of 60 frames a second."""

from __future__ import annotations

import time
from typing import Callable

from PySide6.QtCore import QObject, QTimer


class Throttle:
    def __init__(self, parent: QObject, interval_s: float, action: Callable[[], None]):
        self.interval_s = interval_s
        self._action = action
        self._ran_at = -float("inf")  # perf_counter() of the last run
        self._timer = QTimer(parent)
        self._timer.setSingleShot(True)
        self._timer.timeout.connect(self.run_now)

    @property
    def pending(self) -> bool:
        return self._timer.isActive()

    def request(self) -> None:
        """The action now if its last run is interval_s old, else once it is (one run for any
        number of requests meanwhile)."""
        wait_s = self._ran_at + self.interval_s - time.perf_counter()
        if wait_s <= 0:
            self.run_now()
        elif not self._timer.isActive():
            self._timer.start(int(wait_s * 1000) + 1)

    def run_now(self) -> None:
        self._timer.stop()
        self._ran_at = time.perf_counter()
        self._action()

    def flush(self) -> None:
        """A requested run now (a reader wants the newest), else nothing."""
        if self._timer.isActive():
            self.run_now()

    def cancel(self) -> None:
        """Nothing pending, and the next request runs at once."""
        self._timer.stop()
        self._ran_at = -float("inf")
