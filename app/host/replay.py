"""A recorded run as the window's engine source: EngineProcess's API, a recording instead of an engine.

ReplayWorker reads a recording (`kvscope run --record`) on a thread of its own and hands the GUI
the same FrameDeltas the engine process does: the snapshot as it was after the newest step replayed, and
the steps, events, plot points and finished requests since the previous frame. No model, no GPU.

Playing paces the recorded engine clock at `speed` x real time, as the engine session paces the
simulated clock; speed 0 replays as fast as frames allow: each frame gets one timeline's worth of
new steps (STEPS_KEPT), so nothing is dropped. seek(position) jumps anywhere, backwards too: the
next frame carries engine_info again, so the window clears its views, and then the history up to
there (the plot points, thinned; the newest steps and events; every request finished by then).

A position counts steps replayed: 0 shows the pool before the first step, num_steps the end.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import traceback
from types import SimpleNamespace

import numpy as np

from kvscope.engine.config import EngineArgs, HardwareSpec, ModelConfig, ResolvedArgs
from kvscope.engine.events import EventKind
from kvscope.engine.memory_math import MemoryPlan
from kvscope.engine.metrics import percentile
from kvscope.app.lab.recording import Recording
from kvscope.app.lab.workload import LengthDist, WorkloadSpec

from kvscope.app.host.session import (
    EVENTS_KEPT,
    SERIES_INTERVAL_S,
    STEPS_KEPT,
    SUMMARY_INTERVAL_S,
    EngineInfo,
    FrameDelta,
    SeriesPoint,
)
from kvscope.app.host.command_thread import CommandThread
from kvscope.app.host.pacing import MAX_WAIT_S, Pacing

HISTORY_POINTS = 2_000  # plot points a seek sends for the history before it: the plots' resolution
SNAPSHOT_INTERVAL_S = 1 / 60  # a new snapshot at most this often: the window draws at most 60 a second


def _known_fields(cls, values: dict) -> dict:
    """The fields cls has: a recording written by a newer kvscope may carry more."""
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in (values or {}).items() if k in names}


def engine_info_from_header(header: dict, label_suffix: str = "") -> EngineInfo:
    """What the engine reports to the window once built, rebuilt from a recording's header: the
    model, hardware, engine arguments, memory plan and workload as the engine had them."""
    try:
        model = ModelConfig(**_known_fields(ModelConfig, header.get("model")))
        hardware = HardwareSpec(**_known_fields(HardwareSpec, header.get("hardware")))
        engine_args = EngineArgs(**_known_fields(EngineArgs, header.get("engine_args")))
        resolved = ResolvedArgs(args=engine_args, **_known_fields(ResolvedArgs, header.get("resolved")))
        plan = MemoryPlan(**_known_fields(MemoryPlan, header.get("plan")))
    except Exception:  # noqa: BLE001 - a header this kvscope cannot rebuild: the fields the window reads
        plan = SimpleNamespace(**header.get("plan", {}))
        model = SimpleNamespace(**header.get("model", {}))
        hardware = SimpleNamespace(**header.get("hardware", {}))
        engine_args = SimpleNamespace(**header.get("engine_args", {}))
        resolved = SimpleNamespace(**header.get("resolved", {}))
    raw = dict(header.get("workload") or {})
    try:
        for key in ("prompt_tokens", "output_tokens"):
            if isinstance(raw.get(key), dict):
                raw[key] = LengthDist(**_known_fields(LengthDist, raw[key]))
        workload = WorkloadSpec(**_known_fields(WorkloadSpec, raw)) if "name" in raw else WorkloadSpec(name="unknown")
    except Exception:  # noqa: BLE001
        workload = SimpleNamespace(name=str(raw.get("name", "unknown")))
    values = {"label": f"{header.get('label', 'recording')}{label_suffix}", "plan": plan, "resolved": resolved,
              "backend": header.get("backend", "simulated"), "args": engine_args, "model": model,
              "hardware": hardware, "workload": workload, "allocation": header.get("allocation", "paged")}
    return EngineInfo(**_known_fields(EngineInfo, values))


class ReplayWorker(CommandThread):
    def __init__(self, path, allow_truncated: bool = True):
        """Opens the recording now: a missing or corrupt file raises RecordingError here, before
        any window shows. A truncated one replays up to its last complete record."""
        super().__init__("kvscope-replay")
        self.recording = Recording.open(path, allow_truncated=allow_truncated)
        recording = self.recording
        self.num_steps = recording.num_steps
        self.position = 0  # steps replayed; the snapshot shown is the state after them
        self.speed = 1.0  # recorded engine seconds per wall second; 0 = as fast as frames allow
        self.engine_info = engine_info_from_header(recording.header, " (replay)")
        series = recording.series()
        self._end_times = series["time_s"]
        self._series = series
        self._cum_output = np.concatenate([[0], np.cumsum(series["output_tokens"])])
        self._cum_preemptions = np.concatenate([[0], np.cumsum(series["preemptions"])])
        self._finished = recording.finished_requests()
        self._rejected_steps = recording.events_of_kind(EventKind.REJECTED)["step"]
        self._lock = threading.Lock()
        self._want_snapshot = True
        self._snapshot_position = -1
        self._last_snapshot = 0.0
        self._last_summary = 0.0
        self._last_point = 0.0
        self._since_point = [0, 0.0, 0.0, 0]  # output tokens, compute time, step time, preemptions
        self._steps_since_frame = 0
        self._pacing = Pacing()
        self._pending = self._history_frame(0)
        if recording.warning:
            self._pending.status = recording.warning

    # -- commands, from the GUI thread ----------------------------------------------------------
    def start(self) -> None:
        self._start_thread()

    def apply(self, config=None, play: bool = True) -> None:
        """A replay has no settings to apply: it restarts from the beginning."""
        self.seek(0)
        (self.play if play else self.pause)()

    def seek(self, position: int) -> None:
        """Jump to the state after `position` steps (0 .. num_steps)."""
        self._commands.put(("seek", int(position)))

    def stop(self, timeout: float = 5.0) -> None:
        self._stop_thread(timeout)
        self.recording.close()

    def take_frame(self) -> FrameDelta:
        """Everything since the last call; also asks for a fresh snapshot for the next frame."""
        with self._lock:
            frame, self._pending = self._pending, FrameDelta()
            frame.playing = self._playing
            self._want_snapshot = True
            self._steps_since_frame = 0
        return frame

    # -- the replay thread ------------------------------------------------------------------------
    def _run(self, command: str | None, arg) -> None:
        try:
            super()._run(command, arg)
        except Exception:  # noqa: BLE001 - a record that fails its checksum mid-file: shown, the window lives
            self._playing = False
            self._publish(error=traceback.format_exc(), status="the replay stopped: the recording is damaged")

    def _idle(self) -> None:
        self._maybe_snapshot()

    def _handle(self, command: str, arg) -> None:
        if command == "play":
            self._playing = self.position < self.num_steps
            self._pacing.restart()
        elif command == "pause":
            self._playing = False
        elif command == "step":
            self._playing = False
            if self.position < self.num_steps:
                self._replay_step()
            self._maybe_snapshot(force=True)
        elif command == "speed":
            self.speed = arg
            self._pacing.restart()
        elif command == "seek":
            position = min(max(arg, 0), self.num_steps)
            frame = self._history_frame(position)
            self.position = position
            self._pacing.restart()
            self._since_point = [0, 0.0, 0.0, 0]
            with self._lock:
                self._pending = frame
                self._want_snapshot = False
                self._snapshot_position = position

    def _publish(self, **fields) -> None:
        with self._lock:
            for key, value in fields.items():
                setattr(self._pending, key, value)

    def _advance(self) -> None:
        if self.position >= self.num_steps:
            self._finish()
            return
        if self.speed > 0:
            clock = float(self._end_times[self.position - 1]) if self.position else 0.0
            target = self._pacing.target(clock, self.speed, time.perf_counter())
            due = int(np.searchsorted(self._end_times, target, side="right"))
            if due <= self.position:
                ahead = float(self._end_times[self.position]) - target
                time.sleep(min(ahead / self.speed, MAX_WAIT_S))
                self._maybe_snapshot()
                return
            for _ in range(min(due - self.position, STEPS_KEPT)):
                self._replay_step()
        else:
            with self._lock:
                room = STEPS_KEPT - self._steps_since_frame
            if room <= 0:  # the frame has a timeline's worth: wait for the window to take it
                time.sleep(0.002)
                self._maybe_snapshot()
                return
            for _ in range(min(room, self.num_steps - self.position)):
                self._replay_step()
        self._maybe_snapshot()
        if self.position >= self.num_steps:
            self._finish()

    def _replay_step(self) -> None:
        i = self.position
        result = self.recording.step(i)
        acc = self._since_point
        acc[0] += result.num_output_tokens
        acc[1] += result.compute_time_s
        acc[2] += result.duration_s
        acc[3] += result.num_preemptions
        now = time.perf_counter()
        point = None
        if now - self._last_point >= SERIES_INTERVAL_S or i == self.num_steps - 1:
            point = SeriesPoint(result.start_time_s + result.duration_s, result.kv_usage, result.num_running,
                                result.num_waiting, acc[0], acc[1] / acc[2] if acc[2] > 0 else 0.0, acc[3])
            self._since_point = [0, 0.0, 0.0, 0]
            self._last_point = now
        finished = self._finished_between(i, i + 1)
        with self._lock:
            frame = self._pending
            frame.steps.append(result)
            frame.events.extend(result.events)
            if point is not None:
                frame.points.append(point)
            if finished:
                frame.finished.extend(finished)
            self.position = i + 1
            self._steps_since_frame += 1

    def _finished_between(self, start: int, stop: int) -> list:
        f = self._finished
        lo, hi = np.searchsorted(f["step"], [start, stop], side="left")
        return list(zip(f["finish_time_s"][lo:hi].tolist(), f["ttft_s"][lo:hi].tolist(),
                        f["queue_time_s"][lo:hi].tolist()))

    def _finish(self) -> None:
        self._playing = False
        with self._lock:
            self._pending.done = True
            self._pending.summary = self._summary(self.num_steps)
            self._pending.status = "replay complete"
        self._maybe_snapshot(force=True)

    def _snapshot(self, position: int):
        return self.recording.initial_snapshot() if position == 0 else self.recording.snapshot_at(position - 1)

    def _maybe_snapshot(self, force: bool = False) -> None:
        now = time.perf_counter()
        with self._lock:
            wanted = self._want_snapshot
        position = self.position
        if not force and (not wanted or position == self._snapshot_position
                          or now - self._last_snapshot < SNAPSHOT_INTERVAL_S):
            return
        snapshot = self._snapshot(position)
        self._last_snapshot = now
        self._snapshot_position = position
        summary = None
        if force or now - self._last_summary >= SUMMARY_INTERVAL_S:
            summary = self._summary(position)
            self._last_summary = now
        with self._lock:
            self._pending.snapshot = snapshot
            if summary is not None:
                self._pending.summary = summary
            self._want_snapshot = False

    def _summary(self, position: int) -> dict:
        """The final summary at the end of a closed recording; before it, what the steps so far give."""
        if position >= self.num_steps and self.recording.summary:
            return self.recording.summary
        f = self._finished
        done = int(np.searchsorted(f["step"], position, side="left"))
        ttft, queue_time = f["ttft_s"][:done], f["queue_time_s"][:done]

        return {
            "completed": done,
            "rejected": int(np.searchsorted(self._rejected_steps, position, side="left")),
            "preemptions": int(self._cum_preemptions[position]),
            "steps": position,
            "output_tokens": int(self._cum_output[position]),
            "duration_s": float(self._end_times[position - 1]) if position else 0.0,
            "ttft_p50_s": percentile(ttft, 50), "ttft_p99_s": percentile(ttft, 99),
            "queue_time_p50_s": percentile(queue_time, 50), "queue_time_p99_s": percentile(queue_time, 99),
            "peak_kv_usage": float(self._series["kv_usage"][:position].max()) if position else 0.0,
        }

    def _history_frame(self, position: int) -> FrameDelta:
        """A frame that rebuilds the window at `position`: engine_info (the window clears its views),
        the snapshot, the newest steps and events before it, the plot history and finished requests."""
        frame = FrameDelta(engine_info=self.engine_info, snapshot=self._snapshot(position),
                           summary=self._summary(position), done=position >= self.num_steps,
                           status=f"replay of {self.recording.path.name}: step {position:,} of {self.num_steps:,}"
                                  + ("  ·  Play (Space) replays it, Step (Right) one step; drag the scrubber below"
                                     if position == 0 else ""))
        first = max(0, position - STEPS_KEPT)
        frame.steps.extend(self.recording.steps(first, position))
        events = []
        for result in reversed(frame.steps):  # the newest EVENTS_KEPT, taken from the newest steps back
            events[:0] = result.events
            if len(events) >= EVENTS_KEPT:
                break
        frame.events.extend(events)
        frame.points.extend(self._history_points(position))
        frame.finished.extend(self._finished_between(0, position))
        return frame

    def _history_points(self, position: int) -> list:
        """SeriesPoints for steps 0 .. position - 1, at most HISTORY_POINTS of them: each covers a run
        of steps and, as a live point does, sums what happened since the previous one."""
        if position == 0:
            return []
        s = self._series
        edges = np.unique(np.linspace(0, position, min(position, HISTORY_POINTS) + 1).astype(np.int64))
        ends = edges[1:] - 1
        starts = edges[:-1]
        output = np.add.reduceat(s["output_tokens"][:position], starts)
        compute = np.add.reduceat(s["compute_time_s"][:position], starts)
        duration = np.add.reduceat(s["duration_s"][:position], starts)
        preemptions = np.add.reduceat(s["preemptions"][:position], starts)
        utilization = np.divide(compute, duration, out=np.zeros_like(compute), where=duration > 0)
        return [SeriesPoint(float(t), float(kv), int(r), int(w), int(o), float(u), int(p)) for t, kv, r, w, o, u, p in
                zip(s["time_s"][ends], s["kv_usage"][ends], s["num_running"][ends], s["num_waiting"][ends],
                    output, utilization, preemptions)]
