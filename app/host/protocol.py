"""The one protocol between the window and whatever runs an engine for it.

The window holds a SessionHost (process_host.py); the host runs one Session in a process of its
own and the two talk over a pipe. The window sends commands, (name, argument) pairs, and asks
for one frame at a time; the session answers with everything since the previous frame. A live
engine (session.py), a recording being replayed (replay.py) and a comparison of configurations
(comparison.py) and an attached vLLM server (attach_session.py) are sessions; a new source of
engine state is one more.

Commands (a session ignores those that mean nothing to it):
    apply (config, play)  build from config -- a RunConfig, a recording's path, a ComparisonSpec --
                          from the start, then play or stay paused
    play, pause, step     run, stop, or take exactly one step and stay paused
    speed seconds         engine seconds per wall second; 0 = as fast as it goes
    seek position         a replay: jump to the state after `position` steps
    record path           the live engine: record the run from now to a .kvrec file
    stop_recording        ... and finish that file
    fail message          make the engine's next step raise (the self-test checks errors arrive)
    submit_prompt text    the live engine: a typed prompt joins the run as a chat request (refused,
                          with the reason, when it does not fit or the engine cannot read text)
    frame                 the host's own: send the next frame (see SessionHost.take_frame)
    stop                  the host's own: close the session and end the process

Frames: a FrameDelta for one engine (live or replayed), a CompareFrame for a comparison, an
AttachFrame for an attached server; all carry their plot points as one POINT_DTYPE array
(points.py). encode_frame / decode_frame move a frame through the pipe with its numpy arrays as
raw buffers beside the pickle.
"""

from __future__ import annotations

import pickle
from abc import ABC, abstractmethod
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from kvscope.app.host.points import POINT_DTYPE

APPLY, PLAY, PAUSE, STEP, SPEED, SEEK = "apply", "play", "pause", "step", "speed", "seek"
RECORD, STOP_RECORDING, FAIL = "record", "stop_recording", "fail"
SUBMIT_PROMPT = "submit_prompt"
FRAME, STOP = "frame", "stop"  # handled by the host itself, never passed to a session
# Commands after which the window shows a new picture: a frame produced before one is stale.
NEW_PICTURE = (APPLY, SEEK)

STEPS_KEPT = 400  # steps a frame hands over for the timeline (it shows 400); older ones only count
EVENTS_KEPT = 300  # the newest events of a frame, for the log (a fast run shows its latest)


def no_points() -> np.ndarray:
    return np.zeros(0, dtype=POINT_DTYPE)


@dataclass
class Frame:
    """What every frame carries, whatever the session."""

    status: str = ""  # what the session is doing, for the status bar
    error: str | None = None  # an exception inside the session, with its traceback
    playing: bool = False
    done: bool = False  # the run is over
    build_cost_s: float = 0.0  # session-side seconds the previous frame cost a session running flat out
    generation: int = 0  # the host's count of apply / seek commands when the frame was made

    @property
    def idle(self) -> bool:
        """Nothing happened and nothing runs: what a paused session answers 60 times a second."""
        return not (self.playing or self.done or self.status or self.error)


@dataclass
class RequestText:
    """A text request's words, in a frame whenever they changed."""

    prompt: str | None  # the prompt as the model reads it: in the first frame that carries the request, then None
    output: str  # the answer so far, decoded
    finish_reason: str | None = None  # "stop": the model ended it; "length": max_tokens did; None while it runs
    typed: bool = False  # sent with submit_prompt, not by the workload


@dataclass
class FrameDelta(Frame):
    """One engine, live or replayed: its snapshot and what happened since the previous frame,
    bounded so a frame costs the same however fast the engine runs."""

    snapshot: object | None = None  # engine Snapshot, None if unchanged
    steps: deque = field(default_factory=lambda: deque(maxlen=STEPS_KEPT))  # newest StepResults
    events: deque = field(default_factory=lambda: deque(maxlen=EVENTS_KEPT))  # newest engine Events
    points: np.ndarray = field(default_factory=no_points)  # since the last frame (POINT_DTYPE)
    finished: list = field(default_factory=list)  # (finish_time_s, ttft_s, queue_time_s)
    # (first_token_time_s, ttft_s, queue_time_s) of each request whose first token came since the
    # previous frame: the latency plot shows a request when it has a TTFT, not when it ends
    first_tokens: list = field(default_factory=list)
    summary: dict | None = None
    engine_info: object | None = None  # EngineInfo, set when a new engine was built (or a replay sought)
    recording_steps: int | None = None  # steps recorded so far while a recording runs, else None
    position: int | None = None  # a replay: steps replayed, the snapshot being the state after them
    texts: dict = field(default_factory=dict)  # request id -> RequestText, for text requests that changed
    submitted_request_id: int | None = None  # the request a submit_prompt became
    prompt_refused: str | None = None  # ... or why it was refused

    @property
    def idle(self) -> bool:
        return super().idle and not (self.snapshot is not None or self.steps or self.events or len(self.points)
                                     or self.finished or self.first_tokens or self.summary is not None
                                     or self.engine_info is not None
                                     or self.recording_steps is not None or self.texts
                                     or self.submitted_request_id is not None or self.prompt_refused is not None)


@dataclass
class CompareFrame(Frame):
    """Two to four configurations on one clock; every list has one entry per configuration."""

    info: dict | None = None  # set when the comparison was (re)built: labels, backends, plans
    snapshots: list | None = None  # each configuration's newest Snapshot, None if unchanged
    points: list = field(default_factory=list)  # POINT_DTYPE arrays: one point per step since the last frame
    flashes: list = field(default_factory=list)  # {flash kind: block ids} since the last frame
    results: object | None = None  # lab.compare.ComparisonResult, the table so far (final once done)
    clock_s: float = 0.0  # the shared engine clock

    @property
    def idle(self) -> bool:
        return super().idle and not (self.info is not None or self.snapshots is not None or self.results is not None
                                     or any(len(p) for p in self.points))


@dataclass
class AttachFrame(Frame):
    """A live vLLM server (attach_session.py): its prefix cache as a snapshot of cells kvscope
    placed (vLLM publishes hashes, not block ids), its metrics as points, and log rows."""

    info: dict | None = None  # set once attached: the server, its endpoints, prediction, what is unavailable
    snapshot: object | None = None  # engine Snapshot of the prefix-cache map, None if unchanged
    cells: dict | None = None  # with a snapshot: per cell "chain", "depth", "age_s" arrays
    points: np.ndarray = field(default_factory=no_points)  # one per scrape since the last frame (POINT_DTYPE)
    observed: list = field(default_factory=list)  # the same scrapes' ObservedPoints (latency, hit rate)
    log_lines: list = field(default_factory=list)  # (kind, text) rows since the last frame
    counts: dict | None = None  # events, gaps, replays, restarts so far, with the newest frame that changed them
    prediction: list | None = None  # predicted beside observed latencies (PredictedFigure dicts), when recomputed
    recording_ticks: int | None = None  # ticks recorded so far while a recording runs, else None
    position: int | None = None  # a replay (attach_replay.py): ticks replayed

    @property
    def idle(self) -> bool:
        return super().idle and not (self.info is not None or self.snapshot is not None or len(self.points)
                                     or self.log_lines or self.counts is not None or self.prediction is not None
                                     or self.recording_ticks is not None)


class Session(ABC):
    """What a SessionHost runs in its process: plain single-threaded code, driven by one loop --
    commands in, advance() while playing, a frame when the window asks. Tests and benchmarks
    drive a session directly the same way."""

    frame_type: type = FrameDelta  # what take_frame returns; the host makes one to report a crash
    playing: bool = False  # the host calls advance() while this is true

    @abstractmethod
    def handle(self, command: str, arg) -> None:
        """One command of the protocol (see the module docstring); unknown ones are ignored.
        Errors the user should see go into the next frame, not out of here."""

    @abstractmethod
    def advance(self, budget_s: float) -> float:
        """Work for about budget_s of wall time (at least one step), or return the seconds to wait
        before there is work (a paced clock ahead of the wall clock): 0 means call again."""

    @abstractmethod
    def take_frame(self) -> Frame:
        """Everything since the previous frame."""

    @property
    def flat_out(self) -> bool:
        """Playing with nothing to wait for: each frame's cost is a step not taken. The host then
        tells the window what frames cost, and the window asks less often."""
        return False

    def frame_requested(self) -> None:
        """The window asked for a frame; it goes out as soon as frame_ready()."""

    def frame_ready(self) -> bool:
        """Whether the frame asked for can go now (a session may first gather what it shows)."""
        return True

    def close(self) -> None:
        """The process ends: finish what must not be lost (a recording in progress)."""


def encode_frame(frame: Frame) -> list:
    """The messages that carry a frame: a count and the pickle, then each array's memory as is
    (a 500,000-block snapshot is 11 MB: copying it into one pickle cost 12 ms)."""
    buffers = []
    head = pickle.dumps(frame, protocol=5, buffer_callback=buffers.append)
    return [len(buffers).to_bytes(4, "little") + head] + [b.raw() for b in buffers]


def decode_frame(first: bytes, receive_buffer) -> Frame:
    count = int.from_bytes(first[:4], "little")
    return pickle.loads(memoryview(first)[4:], buffers=[receive_buffer() for _ in range(count)])
