"""A recorded run as a session (protocol.py): a recording in place of an engine.

ReplaySession reads a recording (`kvscope run --record`) and hands the window the same FrameDeltas
the live engine does: the snapshot as it was after the newest step replayed, and the steps, events,
plot points, first tokens and finished requests since the previous frame. No model, no GPU. It runs in a
process of its own like every session; read_replay_info() is what the window reads of the file
first, to refuse a damaged one before any view changes.

Playing paces the recorded engine clock at `speed` x real time, as the live session paces the
simulated clock; speed 0 replays as fast as frames allow: each frame gets one timeline's worth of
new steps (STEPS_KEPT), so nothing is dropped. seek(position) jumps anywhere, backwards too: the
next frame carries engine_info again, so the window clears its views, and then the history up to
there (the plot points, thinned; the newest steps and events; every request finished by then).

A position counts steps replayed: 0 shows the pool before the first step, num_steps the end.
"""

from __future__ import annotations

import dataclasses
import sys
import time
import traceback
from collections import deque
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

from kvscope.engine.config import DEFAULT_BACKEND, ConfigError, EngineArgs, HardwareSpec, ModelConfig, ResolvedArgs
from kvscope.engine.events import EventKind
from kvscope.engine.memory_math import MemoryPlan
from kvscope.engine.metrics import percentile
from kvscope.app.lab.recording import Recording
from kvscope.app.lab.workload import LengthDist, WorkloadSpec

from kvscope.app.host.pacing import MAX_WAIT_S, Pacing
from kvscope.app.host.points import POINT_DTYPE, point_array, step_point
from kvscope.app.host.protocol import (
    APPLY,
    PAUSE,
    PLAY,
    SEEK,
    SPEED,
    STEP,
    STEPS_KEPT,
    FrameDelta,
    Session,
)
from kvscope.app.host.session import SERIES_INTERVAL_S, SUMMARY_INTERVAL_S, EngineInfo

HISTORY_POINTS = 2_000  # plot points a seek sends for the history before it: the plots' resolution
FULL_WAIT_S = 0.002  # at speed 0, with a timeline's worth of steps unsent, wait this long for the frame


def first_token_rows(recording: Recording, end_times: np.ndarray) -> dict:
    """Each recorded request's first token, as the live session sent it (session.py): arrays step
    (the recorded step that made it), first_token_time_s, ttft_s, queue_time_s, in step order. The
    recording keeps a TTFT and queue time per finished request and the admission (first scheduled)
    time per request; a request still running at the end has its TTFT in the last snapshot."""
    finished = recording.finished_requests()
    admitted = recording.events_of_kind(EventKind.ADMITTED)
    arrival = dict(zip(admitted["request_id"].tolist(), (admitted["time_s"] - admitted["value"]).tolist()))
    queue = dict(zip(admitted["request_id"].tolist(), admitted["value"].tolist()))
    initial = recording.initial_snapshot().requests  # admitted before the recording started
    for rid, arrived in zip(initial["request_id"].tolist(), initial["arrival_time_s"].tolist()):
        arrival.setdefault(rid, arrived)
    times, ttfts, queues = [], [], []
    for rid, finish, ttft, queued in zip(finished["request_id"].tolist(), finished["finish_time_s"].tolist(),
                                         finished["ttft_s"].tolist(), finished["queue_time_s"].tolist()):
        arrived = arrival.get(rid)  # unknown only for a row the recorder could not name (id -1)
        times.append(arrived + ttft if arrived is not None else finish)
        ttfts.append(ttft)
        queues.append(queued)
    done = set(finished["request_id"].tolist())
    if recording.num_steps and any(rid not in done for rid in queue):
        running = recording.snapshot_at(recording.num_steps - 1).requests
        for rid, arrived, ttft in zip(running["request_id"].tolist(), running["arrival_time_s"].tolist(),
                                      running["ttft_s"].tolist()):
            if ttft == ttft and rid in queue:  # a first token, and a queue time this recording saw
                times.append(arrived + ttft)
                ttfts.append(ttft)
                queues.append(queue[rid])
    first_token_time = np.asarray(times, dtype=np.float64)
    # A first token comes at its step's end; arrival + TTFT may miss that sum by a rounding error.
    step = np.minimum(np.searchsorted(end_times, first_token_time - 1e-9, side="left"), max(len(end_times) - 1, 0))
    order = np.argsort(step, kind="stable")
    return {"step": step[order], "first_token_time_s": first_token_time[order],
            "ttft_s": np.asarray(ttfts, dtype=np.float64)[order],
            "queue_time_s": np.asarray(queues, dtype=np.float64)[order]}


def _known_fields(cls, values: dict) -> dict:
    """The fields cls has: a recording written by a newer kvscope may carry more."""
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in (values or {}).items() if k in names}


def _renamed_plan_fields(plan: dict | None) -> dict:
    """A plan as recorded, with the name this kvscope gives its total held back: recordings before
    2026-11-29 called it reserve_bytes, the name of the flag that is only one part of it."""
    plan = dict(plan or {})
    if "reserve_bytes" in plan and "held_back_bytes" not in plan:
        plan["held_back_bytes"] = plan.pop("reserve_bytes")
    return plan


def engine_info_from_header(header: dict, label_suffix: str = "") -> EngineInfo:
    """What the engine reports to the window once built, rebuilt from a recording's header: the
    model, hardware, engine arguments, memory plan and workload as the engine had them."""
    try:
        model = ModelConfig(**_known_fields(ModelConfig, header.get("model")))
        hardware = HardwareSpec(**_known_fields(HardwareSpec, header.get("hardware")))
        engine_args = EngineArgs(**_known_fields(EngineArgs, header.get("engine_args")))
        resolved = ResolvedArgs(args=engine_args, **_known_fields(ResolvedArgs, header.get("resolved")))
        plan = MemoryPlan(**_known_fields(MemoryPlan, _renamed_plan_fields(header.get("plan"))))
    except Exception:  # noqa: BLE001 - a header this kvscope cannot rebuild: the fields the window reads
        plan = SimpleNamespace(**_renamed_plan_fields(header.get("plan")))
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
              "backend": header.get("backend", DEFAULT_BACKEND), "args": engine_args, "model": model,
              "hardware": hardware, "workload": workload, "allocation": header.get("allocation", "paged")}
    return EngineInfo(**_known_fields(EngineInfo, values))




@dataclass(frozen=True)
class ReplayInfo:
    """What the window reads of a recording before replaying it (in the window's process)."""

    path: str
    num_steps: int
    end_times: np.ndarray  # engine clock at the end of each step, for the scrubber
    engine_info: EngineInfo
    warning: str | None  # set when the file was cut short: it replays up to its last whole record
    opening_position: int = 0  # where the window opens it: opening_position() of its steps
    steps_before: int = 0  # engine steps taken before the recording started (a run recorded mid-way)


def opening_position(kv_usage) -> int:
    """Where a replay opens: after the first step at the run's highest KV usage -- the wall, if the
    run hit it -- with the plots drawn up to there (at its first step the pool was all but empty,
    and so was a scripted screenshot of it); R goes back to the start. The end if no step ever
    held a block."""
    usage = np.asarray(kv_usage)
    if not len(usage) or usage.max() <= 0:
        return len(usage)
    return int(np.argmax(usage)) + 1


def read_replay_info(path, allow_truncated: bool = True) -> ReplayInfo:
    """Reads and checks the whole file: a missing or corrupt one raises RecordingError here, before
    any view changes. A truncated one replays up to its last complete record."""
    with Recording.open(path, allow_truncated=allow_truncated) as recording:
        series = recording.series()
        return ReplayInfo(str(path), recording.num_steps, series["time_s"],
                          engine_info_from_header(recording.header, " (replay)"), recording.warning,
                          opening_position(series["kv_usage"]),
                          int(series["step"][0]) if len(series["step"]) else 0)


class ReplaySession(Session):
    """apply(path) opens a recording (checked already: read_replay_info) at its first step."""

    def __init__(self):
        self.recording: Recording | None = None
        self.engine_info: EngineInfo | None = None
        self.num_steps = 0
        self.position = 0  # steps replayed; the snapshot shown is the state after them
        self.speed = 1.0  # recorded engine seconds per wall second; 0 = as fast as frames allow
        self.playing = False
        self._pending = FrameDelta()
        self._steps: deque = deque(maxlen=STEPS_KEPT)  # StepResults for the next frame (after a seek: before it too)
        self._points: list = []  # SeriesPoints since the last frame
        self._pacing = Pacing()

    # -- commands ---------------------------------------------------------------------------------
    def handle(self, command: str, arg) -> None:
        try:
            self._handle(command, arg)
        except Exception:  # noqa: BLE001 - a record that fails its checksum mid-file: shown, the window lives
            self._failed()

    def _handle(self, command: str, arg) -> None:
        if command == APPLY:
            path, play = arg
            self._open(path)
            self.playing = play and self.recording is not None and self.num_steps > 0
            self._pacing.restart()
        elif self.recording is None:
            return
        elif command == PLAY:
            self.playing = self.position < self.num_steps
            self._pacing.restart()
        elif command == PAUSE:
            self.playing = False
        elif command == STEP:
            self.playing = False
            if self.position < self.num_steps:
                self._replay_step()
            self._force_summary = True
        elif command == SPEED:
            self.speed = arg
            self._pacing.restart()
        elif command == SEEK:
            self._seek(arg)

    def _open(self, path) -> None:
        if self.recording is not None:
            self.recording.close()
            self.recording = None
        try:
            # read_replay_info checked every record in the window's process just now
            recording = Recording.open(path, verify=False, allow_truncated=True)
        except Exception as exc:  # noqa: BLE001 - gone or changed since: said in the next frame
            self._pending = FrameDelta(error=f"Cannot replay {path}: {exc}", status="the replay could not start")
            self._steps.clear()
            return
        self.recording = recording
        self.num_steps = recording.num_steps
        self.engine_info = engine_info_from_header(recording.header, " (replay)")
        series = recording.series()
        self._end_times = series["time_s"]
        self._series = series
        self._cum_output = np.concatenate([[0], np.cumsum(series["output_tokens"])])
        self._cum_preemptions = np.concatenate([[0], np.cumsum(series["preemptions"])])
        self._finished = recording.finished_requests()
        self._first_tokens = first_token_rows(recording, self._end_times)
        self._rejected_steps = recording.events_of_kind(EventKind.REJECTED)["step"]
        self._opening = opening_position(series["kv_usage"])
        self._seek(0)
        if recording.warning:
            self._pending.status = recording.warning

    def _seek(self, position: int) -> None:
        position = min(max(int(position), 0), self.num_steps)
        self._pending = self._history_frame(position)
        self._steps = deque(self.recording.steps(max(0, position - STEPS_KEPT), position), maxlen=STEPS_KEPT)
        self._points = []
        self.position = position
        self._snapshot_position = position
        self._pacing.restart()
        self._since_point = [0, 0.0, 0.0, 0]  # output tokens, compute time, step time, preemptions
        self._steps_since_frame = 0
        self._last_point = 0.0
        self._last_summary = time.perf_counter()
        self._force_summary = False

    def _failed(self) -> None:
        self.playing = False
        self._pending.error = _error_text()
        self._pending.status = "the replay stopped: the recording is damaged"

    # -- running ----------------------------------------------------------------------------------
    def advance(self, budget_s: float = 0.0) -> float:
        try:
            return self._advance()
        except Exception:  # noqa: BLE001 - as in handle()
            self._failed()
            return 0.0

    def _advance(self) -> float:
        if self.position >= self.num_steps:
            self._finish()
            return 0.0
        if self.speed > 0:
            clock = float(self._end_times[self.position - 1]) if self.position else 0.0
            target = self._pacing.target(clock, self.speed, time.perf_counter())
            due = int(np.searchsorted(self._end_times, target, side="right"))
            if due <= self.position:
                return min((float(self._end_times[self.position]) - target) / self.speed, MAX_WAIT_S)
            count = min(due - self.position, STEPS_KEPT)
        else:
            count = min(STEPS_KEPT - self._steps_since_frame, self.num_steps - self.position)
            if count <= 0:  # the frame has a timeline's worth: wait for the window to take it
                return FULL_WAIT_S
        for _ in range(count):
            self._replay_step()
        if self.position >= self.num_steps:
            self._finish()
        return 0.0

    def _replay_step(self) -> None:
        i = self.position
        result = self.recording.step(i)
        acc = self._since_point
        acc[0] += result.num_output_tokens
        acc[1] += result.compute_time_s
        acc[2] += result.duration_s
        acc[3] += result.num_preemptions
        now = time.perf_counter()
        if now - self._last_point >= SERIES_INTERVAL_S or i == self.num_steps - 1:
            self._points.append(step_point(result, *acc))
            self._since_point = [0, 0.0, 0.0, 0]
            self._last_point = now
        frame = self._pending
        self._steps.append(result)
        frame.finished.extend(self._finished_between(i, i + 1))
        frame.first_tokens.extend(self._first_tokens_between(i, i + 1))
        self.position = i + 1
        self._steps_since_frame += 1

    def _finish(self) -> None:
        self.playing = False
        self._pending.done = True
        self._pending.status = "replay complete"
        self._force_summary = True

    # -- frames -----------------------------------------------------------------------------------
    def take_frame(self) -> FrameDelta:
        """Everything since the last call, with the snapshot at the position reached if it moved."""
        frame, self._pending = self._pending, FrameDelta()
        if self._steps:
            frame.carry_steps(self._steps)
            self._steps = deque(maxlen=STEPS_KEPT)
        frame.playing = self.playing
        frame.position = self.position if self.recording is not None else None
        if len(self._points):
            frame.points = np.concatenate([frame.points, point_array(self._points)])
            self._points = []
        self._steps_since_frame = 0
        if self.recording is None:
            return frame
        try:
            now = time.perf_counter()
            if frame.snapshot is None and self.position != self._snapshot_position:
                frame.snapshot = self._snapshot(self.position)
                self._snapshot_position = self.position
            if frame.summary is None and (self._force_summary or now - self._last_summary >= SUMMARY_INTERVAL_S):
                frame.summary = self._summary(self.position)
                self._last_summary = now
                self._force_summary = False
        except Exception:  # noqa: BLE001 - as in handle()
            # said once: the same position is not read again on every frame that follows
            self._snapshot_position = self.position
            self._force_summary = False
            self.playing = False
            frame.playing = False
            frame.error = _error_text()
            frame.status = "the replay stopped: the recording is damaged"
        return frame

    def _finished_between(self, start: int, stop: int) -> list:
        f = self._finished
        lo, hi = np.searchsorted(f["step"], [start, stop], side="left")
        return list(zip(f["finish_time_s"][lo:hi].tolist(), f["ttft_s"][lo:hi].tolist(),
                        f["queue_time_s"][lo:hi].tolist()))

    def _first_tokens_between(self, start: int, stop: int) -> list:
        f = self._first_tokens
        lo, hi = np.searchsorted(f["step"], [start, stop], side="left")
        return list(zip(f["first_token_time_s"][lo:hi].tolist(), f["ttft_s"][lo:hi].tolist(),
                        f["queue_time_s"][lo:hi].tolist()))

    def _snapshot(self, position: int):
        return self.recording.initial_snapshot() if position == 0 else self.recording.snapshot_at(position - 1)

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
        the snapshot, the plot history and finished requests (the newest steps before it, and their
        events, are kept in _steps by _seek, as steps replayed are)."""
        frame = FrameDelta(engine_info=self.engine_info, snapshot=self._snapshot(position),
                           summary=self._summary(position), done=position >= self.num_steps,
                           status=f"replay of {self.recording.path.name}: step {position:,} of {self.num_steps:,}"
                                  + ("  ·  Play (Space) replays it, Step (Right) one step; drag the scrubber below"
                                     if position in (0, self._opening) and position < self.num_steps else ""))
        frame.points = self._history_points(position)
        frame.finished.extend(self._finished_between(0, position))
        frame.first_tokens.extend(self._first_tokens_between(0, position))
        return frame

    def _history_points(self, position: int) -> np.ndarray:
        """Points for steps 0 .. position - 1, at most HISTORY_POINTS of them: each covers a run of
        steps and, as a live point does, sums what happened since the previous one."""
        if position == 0:
            return point_array()
        s = self._series
        edges = np.unique(np.linspace(0, position, min(position, HISTORY_POINTS) + 1).astype(np.int64))
        ends = edges[1:] - 1
        starts = edges[:-1]
        output = np.add.reduceat(s["output_tokens"][:position], starts)
        compute = np.add.reduceat(s["compute_time_s"][:position], starts)
        duration = np.add.reduceat(s["duration_s"][:position], starts)
        preemptions = np.add.reduceat(s["preemptions"][:position], starts)
        utilization = np.divide(compute, duration, out=np.zeros_like(compute), where=duration > 0)
        points = np.zeros(len(ends), dtype=POINT_DTYPE)
        for name, column in (("time_s", s["time_s"][ends]), ("kv_usage", s["kv_usage"][ends]),
                             ("num_running", s["num_running"][ends]), ("num_waiting", s["num_waiting"][ends]),
                             ("output_tokens", output), ("compute_utilization", utilization),
                             ("preemptions", preemptions)):
            points[name] = column
        return points


def _error_text() -> str:
    """The exception being handled, for the window: a recording's own error is one sentence that
    names the file and what is wrong; anything else is a bug, shown with its traceback."""
    error = sys.exc_info()[1]
    return str(error) if isinstance(error, ConfigError) else traceback.format_exc()
