"""A comparison, run off the GUI thread.

A plain Python thread builds the engine.compare.Comparison (loading a real model takes seconds)
and steps its engines in lockstep while playing, pacing the shared simulated clock to a multiple
of real time. The GUI's frame timer calls take_frame() at its own rate and gets one CompareFrame:
each configuration's newest snapshot, its plot points and the blocks to flash since the last
frame, and the results table so far. The engines never wait for the GUI.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from kvscope.engine.config import ConfigError

from kvscope.app.gui.block_flashes import FLASH_KINDS
from kvscope.app.host.command_thread import CommandThread
from kvscope.app.host.pacing import MAX_WAIT_S, Pacing

SNAPSHOT_INTERVAL_S = 1 / 30  # four block maps at 30 frames a second read as smooth
RESULTS_INTERVAL_S = 0.5  # the table so far: percentiles over every finished request
SLICE_S = 0.02  # the longest the thread steps before it looks at its commands again
GIL_SWITCH_INTERVAL_S = 0.0005  # the GUI shares the interpreter with this thread (see start())

# a plot point per step: engine clock at the step's end, KV usage (0..1), running, waiting,
# output tokens of the step, preemptions of the step
POINT_FIELDS = ("time_s", "kv_usage", "num_running", "num_waiting", "output_tokens", "preemptions")


@dataclass
class CompareFrame:
    info: dict | None = None  # set when the comparison was (re)built: labels, backends, plans
    snapshots: list | None = None  # per configuration, its newest Snapshot
    points: list = field(default_factory=list)  # per configuration, [n, 6] float64 (POINT_FIELDS)
    flashes: list = field(default_factory=list)  # per configuration, {flash kind: block ids}
    results: object | None = None  # engine.compare.ComparisonResult, the table so far
    clock_s: float = 0.0  # the shared clock
    status: str = ""
    error: str | None = None
    playing: bool = False
    done: bool = False  # every configuration finished; results is the final table


class CompareWorker(CommandThread):
    """Same commands as the live engine's EngineProcess: play, pause, step_once, set_speed, stop, take_frame;
    plus restart (build the comparison again from the factory)."""

    def __init__(self, build: Callable[[], object]):
        super().__init__("kvscope-compare")
        self._build_comparison = build  # called in the thread: returns an engine.compare.Comparison
        self._lock = threading.Lock()
        self.comparison = None
        self.speed = 1.0  # simulated seconds per wall second; 0 = as fast as it goes
        self._paced = True  # False when a configuration runs on the real backend: it runs at this machine's pace
        self._pacing = Pacing()
        self._pending = self._empty_frame(0)
        self._want_snapshot = True
        self._last_snapshot = 0.0
        self._last_results = 0.0
        self._finished_published = False
        self._old_switch_interval: float | None = None
        self._torch_threads: int | None = None  # torch's thread count before a real comparison

    # -- commands, from the GUI thread ----------------------------------------------------------
    def start(self, play: bool = False) -> None:
        # A CPU-bound thread holds the interpreter lock for the switch interval at a time; at the
        # default 5 ms each of a frame's hundreds of Qt calls waits that long to get it back.
        self._old_switch_interval = sys.getswitchinterval()
        sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
        self._commands.put(("build", play))
        self._start_thread()

    def restart(self, play: bool = False) -> None:
        self._commands.put(("build", play))

    def stop(self, timeout: float = 5.0) -> None:
        self._stop_thread(timeout)
        if self._old_switch_interval is not None:
            sys.setswitchinterval(self._old_switch_interval)
            self._old_switch_interval = None
        if self._torch_threads is not None:
            import torch

            torch.set_num_threads(self._torch_threads)
            self._torch_threads = None

    @property
    def playing(self) -> bool:
        return self._playing

    def take_frame(self) -> CompareFrame:
        with self._lock:
            frame = self._pending
            self._pending = self._empty_frame(len(frame.points))
            frame.playing = self._playing
            self._want_snapshot = True
        frame.points = [np.asarray(p, dtype=np.float64).reshape(-1, len(POINT_FIELDS)) for p in frame.points]
        frame.flashes = [{k: np.asarray(v, dtype=np.int64) for k, v in f.items()} for f in frame.flashes]
        return frame

    # -- the comparison's thread ----------------------------------------------------------------
    @staticmethod
    def _empty_frame(n: int) -> CompareFrame:
        return CompareFrame(points=[[] for _ in range(n)], flashes=[{} for _ in range(n)])

    def _handle(self, command: str, arg) -> None:
        comparison = self.comparison
        if command == "build":
            self._build(play=arg)
        elif command == "play" and comparison is not None and not comparison.done:
            self._playing = True
            self._pacing.restart()
        elif command == "pause":
            self._playing = False
        elif command == "step" and comparison is not None and not comparison.done:
            self._playing = False
            self._guarded(lambda: self._record(comparison.step()))
            self._after_steps(force_snapshot=True)
        elif command == "speed":
            self.speed = arg
            self._pacing.restart()

    def _build(self, play: bool) -> None:
        self.comparison = None
        self._playing = False
        with self._lock:
            self._pending = self._empty_frame(0)
            self._pending.status = "building the configurations ..."
        try:
            comparison = self._build_comparison()
        except ConfigError as exc:
            self._publish_error(str(exc), "could not build the comparison")
            return
        except Exception:  # noqa: BLE001 - shown to the user; the window keeps working
            self._publish_error(traceback.format_exc(), "could not build the comparison")
            return
        self.comparison = comparison
        engines = comparison.engines
        self._paced = all(e.runner.name == "simulated" for e in engines)
        if not self._paced:
            self._leave_a_core_to_the_window()
        self._pacing.restart()
        self._finished_published = False
        info = {"labels": list(comparison.labels), "backends": [e.runner.name for e in engines],
                "plans": [e.plan for e in engines], "num_requests": len(comparison.requests),
                "models": [e.model.name for e in engines], "hardware": [e.hardware.name for e in engines],
                "workload": comparison.spec.workload.describe()}
        n = len(engines)
        with self._lock:
            self._pending = self._empty_frame(n)
            self._pending.info = info
            self._pending.snapshots = comparison.snapshots()
            self._pending.status = f"ready: {n} configurations, {len(comparison.requests):,} requests each"
            self._want_snapshot = False
        self._playing = play

    def _leave_a_core_to_the_window(self) -> None:
        """torch's intra-op threads wait for each other at every op; when the window's thread takes
        one of their cores to draw, each op waits for a thread that is not running (measured: a
        comparison on the tiny model ran 6x slower in the window on 2 cores). One fewer thread
        than cores leaves the window its own."""
        import torch

        if self._torch_threads is None:
            self._torch_threads = torch.get_num_threads()
        torch.set_num_threads(max(1, min(self._torch_threads, (os.cpu_count() or 2) - 1)))

    def _publish_error(self, error: str, status: str) -> None:
        with self._lock:
            self._pending.error = error
            self._pending.status = status

    def _guarded(self, work) -> bool:
        try:
            work()
        except Exception:  # noqa: BLE001 - the comparison stops; the GUI shows why and stays usable
            self._playing = False
            self._publish_error(traceback.format_exc(), "the comparison stopped with an error")
            return False
        return True

    def _advance(self) -> None:
        comparison = self.comparison
        if comparison is None or comparison.done:
            self._playing = False
            return
        now = time.perf_counter()
        deadline = now + SLICE_S
        if self._paced and self.speed > 0:
            target = self._pacing.target(comparison.clock, self.speed, now)
            if comparison.clock >= target:
                time.sleep(min((comparison.clock - target) / self.speed, MAX_WAIT_S))
                self._after_steps()
                return

            def work():
                while not comparison.done and comparison.clock < target and time.perf_counter() < deadline:
                    self._record(comparison.step())
        else:
            def work():
                while not comparison.done and time.perf_counter() < deadline:
                    self._record(comparison.step())
        if self._guarded(work):
            self._after_steps()

    def _record(self, by_label: dict) -> None:
        """Plot points and flashed blocks of the steps just taken, in configuration order."""
        labels = self.comparison.labels
        points, flashes = [], []
        for label in labels:
            rows, changed = [], {}
            for r in by_label.get(label, ()):
                rows.append((r.start_time_s + r.duration_s, r.kv_usage, r.num_running, r.num_waiting,
                             r.num_output_tokens, r.num_preemptions))
                for ev in r.events:
                    if ev.blocks and ev.kind in FLASH_KINDS:
                        changed.setdefault(FLASH_KINDS[ev.kind], []).extend(ev.blocks)
            points.append(rows)
            flashes.append(changed)
        with self._lock:
            frame = self._pending
            if len(frame.points) != len(labels):
                frame.points, frame.flashes = [[] for _ in labels], [{} for _ in labels]
            for i in range(len(labels)):
                frame.points[i].extend(points[i])
                for kind, blocks in flashes[i].items():
                    frame.flashes[i].setdefault(kind, []).extend(blocks)

    def _after_steps(self, force_snapshot: bool = False) -> None:
        comparison = self.comparison
        now = time.perf_counter()
        done = comparison.done
        with self._lock:
            wanted = self._want_snapshot
        if force_snapshot or done or (wanted and now - self._last_snapshot >= SNAPSHOT_INTERVAL_S):
            snapshots = comparison.snapshots()
            self._last_snapshot = now
            with self._lock:
                self._pending.snapshots = snapshots
                self._pending.clock_s = comparison.clock
                self._want_snapshot = False
        if done and not self._finished_published:
            self._playing = False
            self._finished_published = True
            with self._lock:
                self._pending.status = "measuring the KV quality cost ..."
            results = None

            def final():
                nonlocal results
                results = comparison.results(measure_quality=True)
            if not self._guarded(final):
                return
            with self._lock:
                self._pending.results = results
                self._pending.done = True
                self._pending.clock_s = comparison.clock
                self._pending.status = "comparison complete"
        elif force_snapshot or now - self._last_results >= RESULTS_INTERVAL_S:
            self._last_results = now
            results = comparison.results(measure_quality=False)
            with self._lock:
                self._pending.results = results
                self._pending.clock_s = comparison.clock
