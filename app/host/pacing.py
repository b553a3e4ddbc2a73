"""Pacing a clock (simulated, recorded or compared) to a multiple of real time.

From the moment pacing (re)starts -- play, a new speed, a seek, a rebuild -- the clock should
read where it started plus speed x the wall time since; what runs ahead waits.
"""

from __future__ import annotations

MAX_WAIT_S = 0.01  # a paced loop ahead of the wall clock waits at most this long at a time


class Pacing:
    def __init__(self):
        self._origin: tuple[float, float] | None = None  # (wall time, clock) when pacing began

    def restart(self) -> None:
        """The next target() starts from the clock and wall time it is given."""
        self._origin = None

    def target(self, clock: float, speed: float, now: float) -> float:
        """Where the clock should be at wall time now (perf_counter seconds)."""
        if self._origin is None:
            self._origin = (now, clock)
        wall0, clock0 = self._origin
        return clock0 + speed * (now - wall0)
