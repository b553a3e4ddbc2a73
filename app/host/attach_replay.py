"""A recording of an attached vLLM server as a session (protocol.py): the same AttachFrames the live
AttachSession made, from the file.

The recording holds what each poll of the live attachment brought (attached_reader.Tick): the
batches and notices in the order they came, the scrape. Replaying feeds them, tick by tick, to an
Attachment that has no sockets -- the map, the log rows and the counts come from the same code as
they did live -- and AttachSession.take_frame turns it into frames. Playing paces the recorded
clock at `speed` x real time (0: as fast as frames are taken); seek(position) jumps to the state
after `position` ticks: forward it applies the ticks between, backward it starts again from the
map the recording began with (a tick costs microseconds: an hour of a busy server is a second).
After a seek the frame carries info again, and the view starts over from the history it is sent.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter

from kvscope.app.lab.recording.attached_reader import AttachedRecording
from kvscope.app.lab.vllm.attachment import AttachCounts, Attachment, AttachTarget
from kvscope.app.lab.vllm.prediction import LatencyModel, PredictedFigure
from kvscope.app.lab.vllm.server import ServerInfo
from kvscope.engine.config import ConfigError, HardwareSpec, ModelConfig

from kvscope.app.host.attach_session import AttachSession
from kvscope.app.host.pacing import MAX_WAIT_S, Pacing
from kvscope.app.host.protocol import APPLY, PAUSE, PLAY, SEEK, SPEED, STEP, AttachFrame

TICKS_PER_FRAME = 2_000  # at speed 0: a frame's worth of ticks, so a fast replay still draws
MAX_DATA_PARALLEL = 256  # what `kvscope attach --data-parallel-size` takes


class RecordedSubscriber:
    """What an Attachment reads of its subscriber, as the recording has it."""

    def __init__(self, sources: list, counts):
        self.sources = list(sources)
        self.streams: list = []
        self.counts = counts

    def close(self) -> None:
        pass


def _known(cls, values) -> dict:
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in (values or {}).items() if k in names}


def replayed_attachment(recording: AttachedRecording) -> Attachment:
    """An Attachment in the state the recording began with, fed by replay_tick()."""
    header, info = recording.header, recording.info
    try:
        model = ModelConfig(**_known(ModelConfig, header.get("model"))) if header.get("model") else None
    except (ConfigError, TypeError, ValueError):
        model = None  # the latency rows then say why there is no prediction
    try:
        hardware = HardwareSpec(**_known(HardwareSpec, header.get("hardware"))) if header.get("hardware") else None
    except (ConfigError, TypeError, ValueError):
        hardware = None
    target_info = header["target"]
    kv_events, kv_listen = target_info.get("kv_events"), target_info.get("kv_listen")
    size = target_info.get("data_parallel_size")
    # the engines followed live: a recorded batch of another rank is skipped, never given cells
    size = size if isinstance(size, int) and not isinstance(size, bool) and 1 <= size <= MAX_DATA_PARALLEL else 1
    target = AttachTarget(info["url"], kv_events=kv_events if isinstance(kv_events, str) else None,
                          kv_listen=None if isinstance(kv_events, str) else str(kv_listen or "recorded"),
                          replay=info.get("replay"), data_parallel_size=size, model=model, hardware=hardware)
    clock = _RecordedClock(recording.start.time_s)
    attachment = Attachment(target, clock=clock)
    attachment.clock = clock
    attachment.server = ServerInfo(info["url"], info["version"], info["num_gpu_blocks"], info["block_size"],
                                   dict(info["cache_config"]), tuple(info["model_names"]),
                                   tuple(info["engines"]) or ("0",))
    attachment.prefix_map = recording.initial_map()
    attachment.subscriber = RecordedSubscriber(info["sources"], dataclasses.replace(recording.start.subscriber))
    attachment.prediction = [PredictedFigure(row["name"], row["unit"], row.get("predicted"), row.get("observed"),
                                             row["note"], str(row.get("calibration", "")))
                             for row in info["prediction"]]
    attachment.latency = LatencyModel.for_server(attachment.server, model, hardware)
    attachment.counts = AttachCounts(events=Counter(recording.start.events), **recording.start.counts)
    attachment._started = 0.0
    attachment._now = recording.start.time_s
    return attachment


class _RecordedClock:
    """The attachment's clock in a replay: the recorded time of the tick being replayed."""

    def __init__(self, now: float):
        self.now = now

    def __call__(self) -> float:
        return self.now


def replay_tick(attachment: Attachment, tick) -> None:
    """One recorded poll, applied as the live attachment applied it."""
    attachment.clock.now = attachment._now = tick.time_s
    attachment.follow(tick.records)
    if tick.scrape_failure is not None:
        attachment.scrape_failed(tick.scrape_failure)
    if tick.point is not None:
        attachment.add_point(tick.point, tick.metric_restart)
    attachment.subscriber.counts = dataclasses.replace(tick.subscriber)


class AttachReplaySession(AttachSession):
    """apply(path) opens a recording of an attached server (checked when it opened) at its start."""

    restart_hint = "Reset (R) on this page opens the recording again."

    def __init__(self):
        super().__init__()
        self.recording: AttachedRecording | None = None
        self.position = 0
        self.speed = 1.0
        self._pacing = Pacing()
        self._done_sent = False

    def handle(self, command: str, arg) -> None:
        if command == APPLY:
            path, play = arg
            self._open(path)
            self.playing = play and self.recording is not None and self.recording.num_steps > 0
        elif self.recording is None:
            return
        elif command == PLAY:
            self.playing = self.position < self.recording.num_steps
            self._pacing.restart()
        elif command == PAUSE:
            self.playing = False
        elif command == STEP:
            self.playing = False
            if self.position < self.recording.num_steps:
                self._replay(1)
        elif command == SPEED:
            self.speed = float(arg)
            self._pacing.restart()
        elif command == SEEK:
            self._seek(int(arg))

    def _open(self, path) -> None:
        self.recording = None
        try:
            recording = AttachedRecording.open(path, allow_truncated=True)
        except ConfigError as exc:  # RecordingError: checked in the window's process already; changed since
            self._pending = AttachFrame(error=f"Cannot replay {path}: {exc}", status="the replay could not start")
            return
        self.recording = recording
        self._seek(0)
        if recording.warning:
            self._pending.status = recording.warning

    def _seek(self, position: int) -> None:
        position = min(max(position, 0), self.recording.num_steps)
        if self.attachment is None or position < self.position:
            self.attachment = replayed_attachment(self.recording)
            self.position = 0
        self._pending = AttachFrame(info=self._info())
        self._points_sent = 0
        self._counts_sent = None
        self.attachment.log_rows.clear()
        self._replay(position - self.position)
        self.attachment.new_rows = len(self.attachment.log_rows)  # the history up to here, for the new view
        self.attachment.map_changed = True
        self._pacing.restart()
        self._pending.status = (f"replay of {self.recording.path.name}: tick {position:,} of "
                                f"{self.recording.num_steps:,}")

    def _info(self) -> dict:
        info = dict(self.recording.info)
        info["recording"] = self.recording.path.name
        return info

    def _replay(self, count: int) -> None:
        ticks = self.recording.ticks
        for tick in ticks[self.position:self.position + count]:
            replay_tick(self.attachment, tick)
        self.position = min(self.position + max(count, 0), len(ticks))

    def advance(self, budget_s: float = 0.0) -> float:
        recording = self.recording
        if recording is None or self.position >= recording.num_steps:
            self.playing = False
            return MAX_WAIT_S
        if self.speed <= 0:
            self._replay(TICKS_PER_FRAME)
            return 0.0
        ends = recording.end_times
        clock = float(ends[self.position - 1]) if self.position else recording.start.time_s
        target = self._pacing.target(clock, self.speed, time.perf_counter())
        due = int(ends.searchsorted(target, side="right"))
        if due <= self.position:
            return min((float(ends[self.position]) - target) / self.speed, MAX_WAIT_S)
        self._replay(due - self.position)
        return 0.0

    def take_frame(self) -> AttachFrame:
        frame = super().take_frame()
        if self.recording is not None:
            frame.position = self.position
            if self.position >= self.recording.num_steps and not self._done_sent:
                self.playing = frame.playing = False
                frame.done = self._done_sent = True
                frame.status = frame.status or "replay complete"
            elif self.position < self.recording.num_steps:
                self._done_sent = False
        return frame

    def close(self) -> None:
        self.attachment = None  # no sockets, no recorder: nothing to finish
