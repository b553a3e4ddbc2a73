"""A comparison as a session (protocol.py): two to four configurations stepped on one clock.

apply(ComparisonSpec) builds the lab.compare.Comparison (loading a real model takes seconds) in
the session's own process -- never the window's: a real model's forwards in the window's process
held its interpreter lock, and its torch threads its cores. While playing the engines step in
lockstep, the shared clock paced to a multiple of real time (simulated configurations) or as
fast as they go (any real one). Each frame carries each configuration's newest snapshot, its plot
points (one per step) and the blocks to flash since the previous frame, and the results table so
far; the final one, with the KV quality cost measured, once every configuration has finished.
"""

from __future__ import annotations

import time
import traceback

from kvscope.engine.config import ConfigError
from kvscope.app.lab.compare import Comparison, configuration_said

from kvscope.app.host.block_flashes import collect_flashes, flash_arrays
from kvscope.app.host.pacing import MAX_WAIT_S, Pacing
from kvscope.app.host.points import point_array, step_point
from kvscope.app.host.protocol import APPLY, PAUSE, PLAY, SPEED, STEP, CompareFrame, Session

RESULTS_INTERVAL_S = 0.5  # the table so far: percentiles over every finished request
RUNS_FINISHED_WAIT_S = 0.02  # how often a finished comparison looks whether the window took that news
class ComparisonSession(Session):
    frame_type = CompareFrame

    def __init__(self):
        self.comparison: Comparison | None = None
        self.speed = 1.0  # simulated seconds per wall second; 0 = as fast as it goes
        self.playing = False
        self._paced = True  # False when a configuration runs on the real backend: it runs at this machine's pace
        self._pacing = Pacing()
        self._pending = CompareFrame()
        self._points: list = []  # per configuration, the SeriesPoints since the last frame
        self._flashes: list = []  # per configuration, {flash kind: [block ids]} since the last frame
        self._stepped = False  # the engines moved since the last frame's snapshots
        self._results_stale = False  # ... and since the last table
        self._last_results = 0.0
        self._results_due = False  # a single step shows its table at once
        self._finishing = False  # done: the next advance() measures the KV quality cost

    # -- commands ---------------------------------------------------------------------------------
    def handle(self, command: str, arg) -> None:
        comparison = self.comparison
        if command == APPLY:
            spec, play = arg
            self._build(spec)
            self.playing = play and self.comparison is not None
        elif command == PLAY and comparison is not None and not comparison.done:
            self.playing = True
            self._pacing.restart()
        elif command == PAUSE and not self._finishing:  # the final table is on its way: it comes anyway
            self.playing = False
        elif command == STEP and comparison is not None and not comparison.done:
            self.playing = False
            if self._guarded(lambda: self._record(comparison.step(catch_up=True))):
                self._results_due = True
                if comparison.done:
                    self._finish()
        elif command == SPEED:
            self.speed = arg
            self._pacing.restart()

    def _build(self, spec) -> None:
        self.comparison = None
        self.playing = False
        self._pending = CompareFrame(status="building the configurations ...")
        try:
            comparison = Comparison(spec)
        except ConfigError as exc:  # naming its configuration (Comparison's), where one failed
            self._fail(str(exc), "could not build the comparison")
            return
        except Exception as exc:  # noqa: BLE001 - shown to the user; the window keeps working
            error = traceback.format_exc()
            label = getattr(exc, "configuration_label", None)
            if label is not None:  # the dialog shows a traceback's last line: that one names it
                error += f"{configuration_said(label)}: {error.strip().splitlines()[-1]}\n"
            self._fail(error, "could not build the comparison")
            return
        self.comparison = comparison
        engines = comparison.engines
        self._paced = all(e.runner.name == "simulated" for e in engines)
        # torch keeps every core here (the live session leaves one to the window): the comparison
        # page draws ~2 frames a second of ~3 - 6 ms now, and with both threads the comparison
        # stepped 1.20x headless's time instead of 1.80x, the frame p90 7.9 ms (bench compare)
        self._pacing.restart()
        self._finishing = False
        n = len(engines)
        self._points = [[] for _ in range(n)]
        self._flashes = [{} for _ in range(n)]
        self._stepped = True
        self._results_due = False
        self._last_results = time.perf_counter()
        info = {"labels": list(comparison.labels), "backends": [e.runner.name for e in engines],
                "plans": [e.plan for e in engines], "num_requests": len(comparison.requests),
                "models": [e.model.name for e in engines], "hardware": [e.hardware.name for e in engines],
                "workload": comparison.spec.workload.describe()}
        self._pending = CompareFrame(info=info, status=f"ready: {n} configurations, "
                                                       f"{len(comparison.requests):,} requests each")

    def _fail(self, error: str, status: str) -> None:
        self.playing = False
        self._pending.error = error
        self._pending.status = status

    def _guarded(self, work) -> bool:
        try:
            work()
        except Exception:  # noqa: BLE001 - the comparison stops; the window shows why and stays usable
            self._fail(traceback.format_exc(), "the comparison stopped with an error")
            return False
        return True

    # -- running ----------------------------------------------------------------------------------
    @property
    def flat_out(self) -> bool:
        return self.playing and not (self._paced and self.speed > 0)

    def advance(self, budget_s: float = 0.0) -> float:
        comparison = self.comparison
        if comparison is None:
            self.playing = False
            return 0.0
        if self._finishing:
            if self._pending.runs_finished:
                # the frame saying every run ended goes out first: a reveal that does not need the
                # quality cost comes now, not after the seconds of measuring it
                return RUNS_FINISHED_WAIT_S
            self._finish_with_quality()
            return 0.0
        now = time.perf_counter()
        deadline = now + budget_s
        if self._paced and self.speed > 0:
            target = self._pacing.target(comparison.clock, self.speed, now)
            if comparison.clock >= target:
                return min((comparison.clock - target) / self.speed, MAX_WAIT_S)

            def work():
                while not comparison.done and comparison.clock < target and time.perf_counter() < deadline:
                    self._record(comparison.step())
        else:
            def work():
                while not comparison.done and time.perf_counter() < deadline:
                    self._record(comparison.step())
        if self._guarded(work) and comparison.done:
            self._finish()
        return 0.0

    def _record(self, by_label: dict) -> None:
        """Plot points and flashed blocks of the steps just taken, in configuration order."""
        self._stepped = self._results_stale = True
        for i, label in enumerate(self.comparison.labels):
            results = by_label.get(label, ())
            if results:
                self._points[i].extend(step_point(r, r.num_output_tokens, r.compute_time_s, r.duration_s,
                                                  r.num_preemptions) for r in results)
                collect_flashes(results, self._flashes[i])

    def _finish(self) -> None:
        """Every configuration has finished: the next frame says the quality cost is being measured
        (seconds on the real backend), the advance() after it measures and sends the final table."""
        self._finishing = True
        self.playing = True
        self._pending.status = "measuring the KV quality cost ..."
        self._pending.runs_finished = True

        def table_so_far():
            self._pending.results = self.comparison.results(measure_quality=False)
        if self._guarded(table_so_far):
            self._results_stale = False
        else:  # the error is in the frame; nothing is left to finish, and Play or R must still answer
            self._finishing = False

    def _finish_with_quality(self) -> None:
        comparison = self.comparison
        self.playing = False
        self._finishing = False
        results = None

        def final():
            nonlocal results
            results = comparison.results(measure_quality=True)
        if self._guarded(final):
            self._results_stale = False
            self._pending.results = results
            self._pending.done = True
            self._pending.status = "comparison complete"

    # -- frames -----------------------------------------------------------------------------------
    def take_frame(self) -> CompareFrame:
        frame, self._pending = self._pending, CompareFrame()
        frame.playing = self.playing and not self._finishing
        comparison = self.comparison
        if comparison is None:
            return frame
        frame.points = [point_array(p) for p in self._points]
        frame.flashes = [flash_arrays(f) for f in self._flashes]
        self._points = [[] for _ in self._points]
        self._flashes = [{} for _ in self._flashes]
        if self._stepped or frame.info is not None:
            frame.snapshots = comparison.snapshots()
            self._stepped = False
        frame.clock_s = comparison.clock
        now = time.perf_counter()
        if (frame.results is None and self._results_stale
                and (self._results_due or now - self._last_results >= RESULTS_INTERVAL_S)):
            self._last_results = now
            self._results_due = self._results_stale = False
            try:
                frame.results = comparison.results(measure_quality=False)
            except Exception:  # noqa: BLE001 - as in _guarded
                self.playing = False
                frame.error, frame.status = traceback.format_exc(), "the comparison stopped with an error"
        return frame
