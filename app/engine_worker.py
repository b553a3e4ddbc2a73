"""The engine, run off the GUI thread.

A plain Python thread owns the Engine: it builds it (loading a real model can take seconds),
steps it while playing — pacing the simulated clock to a multiple of real time — and collects
what happened since the GUI last looked. The GUI's frame timer calls take_frame() at its own
rate and gets one FrameDelta: the latest snapshot (taken here, where the engine lives) and the
steps, events and finished-request metrics since the previous frame. The engine never waits for
the GUI; what the GUI had no time to draw is dropped or summarised.
"""

from __future__ import annotations

import queue
import threading
import time
import traceback
from collections import deque
from dataclasses import dataclass, field
from typing import NamedTuple

from kvscope.engine import Engine, EngineArgs
from kvscope.engine.config import ConfigError, HardwareSpec, ModelConfig
from kvscope.engine.workload import WorkloadSpec, generate_requests

STEPS_KEPT = 400  # steps a frame hands over for the timeline (it shows 400); older ones only count
EVENTS_KEPT = 300  # the newest events of a frame, for the log (a fast run shows its latest)
SERIES_INTERVAL_S = 0.002  # at most one plot point per 2 ms of wall time: fast runs are thinned here
SNAPSHOT_INTERVAL_S = 1 / 60
SUMMARY_INTERVAL_S = 0.5  # percentiles over every finished request: not worth 60 times a second


@dataclass(frozen=True)
class RunConfig:
    """Everything that defines a run; applying a new one rebuilds the engine in place."""

    backend: str  # simulated | real
    model: ModelConfig
    hardware: HardwareSpec
    engine_args: EngineArgs
    workload: WorkloadSpec
    seed: int = 0
    model_path: str | None = None  # real backend: a local model directory instead of the preset's shape


class SeriesPoint(NamedTuple):
    """One point of the live plots: the state after a step, and what happened since the last point."""

    time_s: float  # engine clock at the end of the step
    kv_usage: float
    num_running: int
    num_waiting: int
    output_tokens: int  # since the previous point
    compute_utilization: float  # compute-bound time / step time, since the previous point
    preemptions: int  # since the previous point


@dataclass
class FrameDelta:
    snapshot: object | None = None  # engine Snapshot, None if unchanged
    steps: deque = field(default_factory=lambda: deque(maxlen=STEPS_KEPT))  # newest StepResults
    events: deque = field(default_factory=lambda: deque(maxlen=EVENTS_KEPT))  # newest engine Events
    points: list = field(default_factory=list)  # SeriesPoints since the last frame
    finished: list = field(default_factory=list)  # (finish_time_s, ttft_s, queue_time_s)
    summary: dict | None = None
    status: str = ""
    error: str | None = None  # an exception inside the engine, with its traceback
    engine_info: dict | None = None  # set when a new engine was built
    playing: bool = False
    done: bool = False


class EngineWorker:
    def __init__(self):
        self._commands: queue.Queue = queue.Queue()
        self._lock = threading.Lock()
        self._pending = FrameDelta()
        self._thread: threading.Thread | None = None
        self.engine: Engine | None = None
        self.speed = 1.0  # simulated seconds per wall second; 0 = as fast as possible
        self._playing = False
        self._want_snapshot = True
        self._last_snapshot = 0.0
        self._last_summary = 0.0
        self._last_point = 0.0
        self._since_point = [0, 0.0, 0.0, 0]  # output tokens, compute time, step time, preemptions
        self._pace_origin: tuple[float, float] | None = None  # (wall, engine clock) when pacing began
        self._finished_seen = 0

    # -- commands, from the GUI thread ----------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="kvscope-engine", daemon=True)
        self._thread.start()

    def apply(self, config: RunConfig, play: bool = True) -> None:
        self._commands.put(("apply", (config, play)))

    def play(self) -> None:
        self._commands.put(("play", None))

    def pause(self) -> None:
        self._commands.put(("pause", None))

    def step_once(self) -> None:
        self._commands.put(("step", None))

    def set_speed(self, speed: float) -> None:
        self._commands.put(("speed", speed))

    def stop(self, timeout: float = 5.0) -> None:
        self._commands.put(("stop", None))
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def take_frame(self) -> FrameDelta:
        """Everything since the last call; also asks for a fresh snapshot for the next frame."""
        with self._lock:
            frame, self._pending = self._pending, FrameDelta()
            frame.playing = self._playing
            self._want_snapshot = True
        return frame

    # -- the engine thread ----------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            if self._playing and self.engine is not None and self._commands.empty():
                self._advance()  # the hot path: no exception per step from an empty queue
                continue
            try:
                command, arg = self._commands.get(timeout=0.05) if not self._playing else self._commands.get_nowait()
            except queue.Empty:
                command = None
            if command == "stop":
                return
            if command is not None:
                self._handle(command, arg)
                continue
            if self._playing and self.engine is not None:
                self._advance()

    def _handle(self, command: str, arg) -> None:
        if command == "apply":
            config, play = arg
            self._build(config)
            self._playing = play and self.engine is not None
            self._pace_origin = None
        elif command == "play" and self.engine is not None:
            self._playing = True
            self._pace_origin = None
        elif command == "pause":
            self._playing = False
        elif command == "step" and self.engine is not None:
            self._playing = False
            self._run_one_step(force_snapshot=True)
        elif command == "speed":
            self.speed = arg
            self._pace_origin = None

    def _publish(self, **fields) -> None:
        with self._lock:
            for key, value in fields.items():
                setattr(self._pending, key, value)

    def _build(self, config: RunConfig) -> None:
        self.engine = None
        self._finished_seen = 0
        self._since_point = [0, 0.0, 0.0, 0]
        self._publish(status=f"building the {config.backend} engine ...")
        try:
            if config.backend == "real":
                from kvscope.engine.runners.real import create_real_engine, load_for_real_backend

                loaded = load_for_real_backend(model_path=config.model_path, architecture=None if config.model_path
                                               else config.model)
                engine = create_real_engine(loaded, config.engine_args)
                label = loaded.label
            else:
                engine = Engine(config.model, config.hardware, config.engine_args)
                label = f"{config.model.name} (simulated on {config.hardware.name})"
            engine.add_workload(generate_requests(config.workload, engine.model.vocab_size, seed=config.seed))
        except ConfigError as exc:
            self._publish(error=str(exc), status="could not build the engine")
            return
        except Exception:  # noqa: BLE001 - shown to the user; the window keeps working
            self._publish(error=traceback.format_exc(), status="could not build the engine")
            return
        self.engine = engine
        info = {"label": label, "plan": engine.plan, "resolved": engine.resolved, "backend": engine.runner.name,
                "model": engine.model, "hardware": engine.hardware, "workload": config.workload}
        with self._lock:
            self._pending = FrameDelta(engine_info=info, snapshot=engine.snapshot(), status=f"ready: {label}")
            self._want_snapshot = False

    def _advance(self) -> None:
        engine = self.engine
        if self.speed > 0 and engine.runner.name == "simulated":
            now = time.perf_counter()
            if self._pace_origin is None:
                self._pace_origin = (now, engine.clock)
            wall0, clock0 = self._pace_origin
            ahead = (engine.clock - clock0) - self.speed * (now - wall0)
            if ahead > 0:
                time.sleep(min(ahead / self.speed, 0.01))
                self._maybe_snapshot()
                return
        self._run_one_step()

    def _run_one_step(self, force_snapshot: bool = False) -> None:
        engine = self.engine
        try:
            result = engine.step()
        except Exception:  # noqa: BLE001 - the engine stops; the GUI shows the error and stays usable
            self._playing = False
            self._publish(error=traceback.format_exc(), status="the engine stopped with an error")
            return
        if result is None:
            self._playing = False
            with self._lock:
                self._pending.done = True
                self._pending.summary = engine.summary()
                self._pending.status = "workload complete"
            self._maybe_snapshot(force=True)
            return
        self._record(result)
        self._maybe_snapshot(force=force_snapshot)

    def _record(self, result) -> None:
        """Constant work per step, however fast steps come: the GUI gets the newest steps and
        events, and plot points thinned to one per SERIES_INTERVAL_S of wall time."""
        acc = self._since_point
        acc[0] += result.num_output_tokens
        acc[1] += result.compute_time_s
        acc[2] += result.duration_s
        acc[3] += result.num_preemptions
        now = time.perf_counter()
        point = None
        if now - self._last_point >= SERIES_INTERVAL_S:
            point = SeriesPoint(result.start_time_s + result.duration_s, result.kv_usage, result.num_running,
                                result.num_waiting, acc[0], acc[1] / acc[2] if acc[2] > 0 else 0.0, acc[3])
            self._since_point = [0, 0.0, 0.0, 0]
            self._last_point = now
        metrics = self.engine.metrics
        new_finished = None
        if len(metrics.ttft) > self._finished_seen:
            seen = self._finished_seen
            new_finished = list(zip(metrics.finish_times[seen:], metrics.ttft[seen:], metrics.queue_time[seen:]))
            self._finished_seen = len(metrics.ttft)
        with self._lock:
            frame = self._pending
            frame.steps.append(result)
            frame.events.extend(result.events)
            if point is not None:
                frame.points.append(point)
            if new_finished:
                frame.finished.extend(new_finished)

    def _maybe_snapshot(self, force: bool = False) -> None:
        now = time.perf_counter()
        with self._lock:
            wanted = self._want_snapshot
        if not force and (not wanted or now - self._last_snapshot < SNAPSHOT_INTERVAL_S):
            return
        snapshot = self.engine.snapshot()
        self._last_snapshot = now
        summary = None
        if force or now - self._last_summary >= SUMMARY_INTERVAL_S:
            summary = self.engine.summary()
            self._last_summary = now
        with self._lock:
            self._pending.snapshot = snapshot
            if summary is not None:
                self._pending.summary = summary
            self._want_snapshot = False

