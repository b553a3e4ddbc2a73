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
    frame [whole_snapshot] the host's own: send the next frame (see SessionHost.take_frame); with
                          whole_snapshot, its snapshot whole (restart_snapshot_changes)
    stop                  the host's own: close the session and end the process

Frames: a FrameDelta for one engine (live or replayed), a CompareFrame for a comparison, an
AttachFrame for an attached server; all carry their plot points as one POINT_DTYPE array
(points.py). A FrameDelta carries its steps and events column-wise too (StepTable, EventTable).
encode_frame / decode_frame move a frame through the pipe with its numpy arrays as raw buffers
beside the pickle.
"""

from __future__ import annotations

import pickle
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from itertools import chain
from operator import attrgetter

import numpy as np

from kvscope.app.host.points import POINT_DTYPE
from kvscope.engine.events import Event, EventKind

APPLY, PLAY, PAUSE, STEP, SPEED, SEEK = "apply", "play", "pause", "step", "speed", "seek"
RECORD, STOP_RECORDING, FAIL = "record", "stop_recording", "fail"
SUBMIT_PROMPT = "submit_prompt"
FRAME, STOP = "frame", "stop"  # handled by the host itself, never passed to a session
WHOLE_SNAPSHOT = "whole_snapshot"  # a frame request's argument: the window lost track of the block arrays
# Commands after which the window shows a new picture: a frame produced before one is stale.
NEW_PICTURE = (APPLY, SEEK)

STEPS_KEPT = 400  # steps a frame hands over for the timeline (it shows 400); older ones only count
EVENTS_KEPT = 300  # the newest events of a frame, for the log (a fast run shows its latest)


def no_points() -> np.ndarray:
    return np.zeros(0, dtype=POINT_DTYPE)


# A frame of a fast run carries 400 steps and ~2,000 events. Pickled object by object they cost
# the engine ~2 - 2.5 ms a frame and the window ~2.3 ms to unpickle; as columns, built with a few
# C-level passes (map over attrgetter into np.fromiter), ~1 ms and ~0.1 ms.
EVENT_KINDS = tuple(EventKind)  # an event's kind column holds its index here
EVENT_KIND_CODES = {kind: code for code, kind in enumerate(EVENT_KINDS)}
EVENT_DTYPE = np.dtype([("kind", np.uint8), ("request_id", np.int64), ("time_s", np.float64),
                        ("value", np.float64), ("num_blocks", np.int64)])
STEP_DTYPE = np.dtype([("step", np.int64), ("start_time_s", np.float64), ("duration_s", np.float64),
                       ("batch_size", np.int64), ("num_events", np.int64)])
_events_of, _blocks_of, _detail_of = attrgetter("events"), attrgetter("blocks"), attrgetter("detail")
_kind_of, _request_id_of, _time_of, _value_of = (attrgetter(name) for name in ("kind", "request_id", "time_s", "value"))
_step_of, _start_of, _duration_of = (attrgetter(name) for name in ("step", "start_time_s", "duration_s"))
_request_ids_of, _new_tokens_of, _prefill_of = (attrgetter(name) for name in ("request_ids", "num_new_tokens",
                                                                               "is_prefill"))


def _frozen(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


class EventTable:
    """Engine events column-wise: one EVENT_DTYPE row per event, the block ids of all of them in
    one array (row i's are the next rows["num_blocks"][i]), and the few non-empty details by row.
    Iterating gives the engine's Event objects back, as the event log formats them."""

    __slots__ = ("rows", "blocks", "details")

    def __init__(self, rows: np.ndarray, blocks: np.ndarray, details: dict):
        self.rows, self.blocks, self.details = rows, blocks, details

    @classmethod
    def of(cls, events: list) -> EventTable:
        count = len(events)
        if not count:
            return NO_EVENTS
        rows = np.empty(count, dtype=EVENT_DTYPE)
        rows["kind"] = np.fromiter(map(EVENT_KIND_CODES.__getitem__, map(_kind_of, events)), np.uint8, count)
        rows["request_id"] = np.fromiter(map(_request_id_of, events), np.int64, count)
        rows["time_s"] = np.fromiter(map(_time_of, events), np.float64, count)
        rows["value"] = np.fromiter(map(_value_of, events), np.float64, count)
        blocks = list(map(_blocks_of, events))
        rows["num_blocks"] = np.fromiter(map(len, blocks), np.int64, count)
        block_ids = np.fromiter(chain.from_iterable(blocks), np.int64, int(rows["num_blocks"].sum()))
        details = {}
        if any(map(_detail_of, events)):  # only rejections and out-of-memory steps have one
            details = {row: event.detail for row, event in enumerate(events) if event.detail}
        return cls(rows, block_ids, details)

    def __len__(self) -> int:
        return len(self.rows)

    def __bool__(self) -> bool:
        return len(self.rows) > 0

    def __reduce__(self):
        if self is NO_EVENTS:  # by name: a paused session's 60 empty frames a second send no buffers
            return "NO_EVENTS"
        return EventTable, (self.rows, self.blocks, self.details)

    def block_offsets(self) -> np.ndarray:
        """Where each row's block ids start in `blocks`, and (last) where they end."""
        offsets = np.zeros(len(self.rows) + 1, dtype=np.int64)
        np.cumsum(self.rows["num_blocks"], out=offsets[1:])
        return offsets

    def newest(self, count: int) -> EventTable:
        """The last `count` rows."""
        if len(self.rows) <= count:
            return self
        first = len(self.rows) - count
        skipped_blocks = int(self.rows["num_blocks"][:first].sum())
        details = {row - first: text for row, text in self.details.items() if row >= first}
        return EventTable(self.rows[first:], self.blocks[skipped_blocks:], details)

    def __iter__(self):
        rows, details = self.rows, self.details
        blocks, offsets = self.blocks.tolist(), self.block_offsets().tolist()
        for row, (code, request_id, time_s, value) in enumerate(zip(
                rows["kind"].tolist(), rows["request_id"].tolist(), rows["time_s"].tolist(), rows["value"].tolist())):
            yield Event(EVENT_KINDS[code], request_id, time_s, tuple(blocks[offsets[row]:offsets[row + 1]]), value,
                        details.get(row, ""))


class StepTable:
    """Engine steps (StepResults) column-wise: one STEP_DTYPE row per step; the batches of all of
    them end to end (step i's are the next rows["batch_size"][i] entries of request_ids,
    num_new_tokens and is_prefill); their events, step after step, as one EventTable."""

    __slots__ = ("rows", "request_ids", "num_new_tokens", "is_prefill", "events")

    def __init__(self, rows: np.ndarray, request_ids: np.ndarray, num_new_tokens: np.ndarray, is_prefill: np.ndarray,
                 events: EventTable):
        self.rows, self.request_ids, self.events = rows, request_ids, events
        self.num_new_tokens, self.is_prefill = num_new_tokens, is_prefill

    @classmethod
    def of(cls, results) -> StepTable:
        results = list(results)
        count = len(results)
        if not count:
            return NO_STEPS
        rows = np.empty(count, dtype=STEP_DTYPE)
        rows["step"] = np.fromiter(map(_step_of, results), np.int64, count)
        rows["start_time_s"] = np.fromiter(map(_start_of, results), np.float64, count)
        rows["duration_s"] = np.fromiter(map(_duration_of, results), np.float64, count)
        batches = list(map(_request_ids_of, results))
        rows["batch_size"] = np.fromiter(map(len, batches), np.int64, count)
        entries = int(rows["batch_size"].sum())
        events = list(map(_events_of, results))
        rows["num_events"] = np.fromiter(map(len, events), np.int64, count)
        return cls(rows, np.fromiter(chain.from_iterable(batches), np.int64, entries),
                   np.fromiter(chain.from_iterable(map(_new_tokens_of, results)), np.int64, entries),
                   np.fromiter(chain.from_iterable(map(_prefill_of, results)), np.bool_, entries),
                   EventTable.of(list(chain.from_iterable(events))))

    def __len__(self) -> int:
        return len(self.rows)

    def __bool__(self) -> bool:
        return len(self.rows) > 0

    def __reduce__(self):
        if self is NO_STEPS:  # as NO_EVENTS
            return "NO_STEPS"
        return StepTable, (self.rows, self.request_ids, self.num_new_tokens, self.is_prefill, self.events)

    @property
    def numbers(self) -> list[int]:
        """The steps' numbers, oldest first."""
        return self.rows["step"].tolist()


NO_EVENTS = EventTable(_frozen(np.zeros(0, dtype=EVENT_DTYPE)), _frozen(np.zeros(0, dtype=np.int64)), {})
NO_STEPS = StepTable(_frozen(np.zeros(0, dtype=STEP_DTYPE)), _frozen(np.zeros(0, dtype=np.int64)),
                     _frozen(np.zeros(0, dtype=np.int64)), _frozen(np.zeros(0, dtype=np.bool_)), NO_EVENTS)


@dataclass
class Frame:
    """What every frame carries, whatever the session."""

    status: str = ""  # what the session is doing, for the status bar
    error: str | None = None  # an exception inside the session, with its traceback
    playing: bool = False
    done: bool = False  # the run is over
    build_cost_s: float = 0.0  # session-side seconds the previous frame cost a session running flat out
    core_share: float | None = None  # ... and the share of a core its process had since its previous frame
    generation: int = 0  # the host's count of apply / seek commands when the frame was made
    played_s: float = 0.0  # wall seconds the session has played, by the host's clock (Play read to Pause read)

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
    steps: StepTable = NO_STEPS  # the newest STEPS_KEPT steps since the last frame, their events with them
    events: EventTable = NO_EVENTS  # the newest EVENTS_KEPT of those steps' events, for the log
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
    # a recording this session made ended (finished, or stopped by a failed write): said even when
    # no frame showed it running -- a small disk can fill before the first frame after "record"
    recording_stopped: bool = False
    prompt_refused: str | None = None  # ... or why it was refused

    @property
    def idle(self) -> bool:
        return super().idle and not (self.snapshot is not None or self.steps or self.events or len(self.points)
                                     or self.finished or self.first_tokens or self.summary is not None
                                     or self.engine_info is not None
                                     or self.recording_steps is not None or self.texts
                                     or self.submitted_request_id is not None or self.prompt_refused is not None
                                     or self.recording_stopped)

    def carry_steps(self, results) -> None:
        """The frame's steps: the newest STEPS_KEPT of `results` (StepResults, oldest first), and
        the newest EVENTS_KEPT of their events for the log."""
        results = list(results)[-STEPS_KEPT:]
        self.steps = StepTable.of(results)
        self.events = self.steps.events.newest(EVENTS_KEPT)


@dataclass
class CompareFrame(Frame):
    """Two to four configurations on one clock; every list has one entry per configuration."""

    info: dict | None = None  # set when the comparison was (re)built: labels, backends, plans
    snapshots: list | None = None  # each configuration's newest Snapshot, None if unchanged
    points: list = field(default_factory=list)  # POINT_DTYPE arrays: one point per step since the last frame
    flashes: list = field(default_factory=list)  # {flash kind: block ids} since the last frame
    results: object | None = None  # lab.compare.ComparisonResult, the table so far (final once done)
    clock_s: float = 0.0  # the shared engine clock
    # Every configuration has run to its end; the quality cost may still be measuring (seconds on
    # the real backend), so an answer that does not need it can be revealed now.
    runs_finished: bool = False

    @property
    def idle(self) -> bool:
        return super().idle and not (self.info is not None or self.snapshots is not None or self.results is not None
                                     or self.runs_finished or any(len(p) for p in self.points))


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
    restart_hint = "Play, Apply or Reset (R) starts a new one."  # ... and says with it how to start again
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

    @property
    def core_bound(self) -> bool:
        """Flat out on exactly one core: the share of a core its process gets then says whether
        other processes take it from the session (see process_host.py). Not so for a real model,
        whose torch threads wait for each other, nor where this is not known."""
        return False

    def frame_requested(self) -> None:
        """The window asked for a frame; it goes out as soon as frame_ready()."""

    def frame_ready(self) -> bool:
        """Whether the frame asked for can go now (a session may first gather what it shows)."""
        return True

    def restart_snapshot_changes(self) -> None:
        """Called in the host's process, first and whenever the window lost track: from the next
        snapshot on (that one whole) a session may send its snapshots as the blocks that changed
        (session_blocks.py); the host's SnapshotRebuilder turns them back into Snapshots."""

    def close(self) -> None:
        """The process ends: finish what must not be lost (a recording in progress)."""


IN_BAND_BYTES = 64 * 1024  # arrays up to this size are copied into the pickle: one message fewer each


def _out_of_band(buffers: list):
    def keep(buffer: pickle.PickleBuffer) -> bool:
        """False: the array goes as a message of its own; True: into the pickle."""
        if buffer.raw().nbytes <= IN_BAND_BYTES:
            return True
        buffers.append(buffer)
        return False

    return keep


def encode_frame(frame: Frame) -> list:
    """The messages that carry a frame: a count and the pickle, then each big array's memory as
    is (a 500,000-block snapshot is 11 MB: copying it into one pickle cost 12 ms). Small arrays
    go inside the pickle: each message is a write, a read and a wake-up on both sides."""
    buffers = []
    head = pickle.dumps(frame, protocol=5, buffer_callback=_out_of_band(buffers))
    return [len(buffers).to_bytes(4, "little") + head] + [b.raw() for b in buffers]


def decode_frame(first: bytes, receive_buffer) -> Frame:
    count = int.from_bytes(first[:4], "little")
    return pickle.loads(memoryview(first)[4:], buffers=[receive_buffer() for _ in range(count)])
