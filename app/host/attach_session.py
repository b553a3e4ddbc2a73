"""An attached vLLM server as a session (protocol.py), run by the same SessionHost process as the
live engine, a replay and a comparison.

apply(AttachTarget) reaches the server and subscribes to its KV events (an Attachment,
app/lab/vllm/attachment.py); while playing, the session reads whatever the publishers sent and
scrapes /metrics about once a second. Each frame (AttachFrame) carries the prefix-cache map as an
engine Snapshot -- one cell per block of the server's pool, the stored blocks in cells kvscope
chose, the chain id as the owner so a chain has one colour -- with each cell's chain, depth and
age; the scrapes since the previous frame as plot points; and the new log rows. Pause stops
reading (the publishers' batches wait in the socket); a failure to attach is the frame's error.
record PATH writes what arrives from then on to a .kvrec (app/lab/recording/attached_writer.py)
until stop_recording, a new apply or the end; attach_replay.py replays one.
"""

from __future__ import annotations

import numpy as np

from kvscope.app.lab.vllm.attachment import Attachment, AttachTarget, attach_info
from kvscope.app.lab.vllm.observed_point import ObservedPoint
from kvscope.engine.config import ConfigError
from kvscope.engine.snapshot import BLOCK_CACHED, REQUEST_DTYPE, Snapshot

from kvscope.app.host.points import SeriesPoint, point_array
from kvscope.app.host.protocol import APPLY, PAUSE, PLAY, RECORD, STEP, STOP_RECORDING, AttachFrame, Session
from kvscope.engine.units import format_bytes

IDLE_WAIT_S = 0.02  # nothing arrived: the host waits on its pipe this long before reading again


def map_snapshot(attachment: Attachment, point: ObservedPoint | None) -> tuple[Snapshot, dict]:
    """The prefix-cache map as a Snapshot the block map draws, and per-cell chain, depth and age."""
    cache = attachment.prefix_map
    cached = cache.cell_state == BLOCK_CACHED
    owner = np.where(cached, cache.cell_chain, -1).astype(np.int64)
    fill = np.where(cached, cache.block_size or 0, 0).astype(np.uint16)
    usage = 0.0 if point is None or np.isnan(point.kv_usage) else point.kv_usage
    running = 0 if point is None or np.isnan(point.num_running) else int(point.num_running)
    waiting = 0 if point is None or np.isnan(point.num_waiting) else int(point.num_waiting)
    snapshot = Snapshot(time_s=attachment.elapsed_s, step=attachment.subscriber.counts.batches,
                        block_size=cache.block_size or 0, block_owner=owner, block_state=cache.cell_state.copy(),
                        block_ref_cnt=np.zeros(cache.num_cells, np.int32), block_fill=fill,
                        block_hash=cache.cell_hash.copy(), requests=np.zeros(0, REQUEST_DTYPE), kv_usage=usage,
                        num_running=running, num_waiting=waiting)
    newest_ts = max((b.stored_ts for b in cache.blocks.values()), default=np.nan)
    cells = {"chain": cache.cell_chain.copy(), "depth": cache.cell_depth.copy(), "chain_cut": cache.chain_cut(),
             # no usage served (a series renamed by a newer vLLM, a value out of range): the snapshot's
             # 0 is no figure of the server's, and the page must not draw it as blocks in use
             "kv_usage_served": None if point is None else not np.isnan(point.kv_usage),  # None: not scraped yet
             "age_s": cache.cell_age_s(newest_ts), "segments": {rank: (cache.segment_of(rank).start, cache.segment_of(rank).stop)
                          for rank in cache.ranks}}
    return snapshot, cells


def series_point(point: ObservedPoint) -> SeriesPoint:
    """A scrape as a plot point of the live plots: compute utilisation is not published (NaN)."""
    return SeriesPoint(point.time_s, point.kv_usage, 0 if np.isnan(point.num_running) else int(point.num_running),
                       0 if np.isnan(point.num_waiting) else int(point.num_waiting),
                       0 if np.isnan(point.generation_tokens) else int(point.generation_tokens), float("nan"),
                       0 if np.isnan(point.preemptions) else int(point.preemptions))


# the status of a frame whose error is the recording's: the page still follows the server, and the
# window unchecks File > Record (attach_view.py)
RECORDING_REFUSED = "the recording did not start or could not be finished"


class AttachSession(Session):
    frame_type = AttachFrame
    # the attached page's Play and Apply act on the live engine: its Reset (R) attaches again (attach_view.py)
    restart_hint = "Reset (R) on this page attaches again."

    def __init__(self):
        self.attachment: Attachment | None = None
        self.playing = False
        self._pending = AttachFrame()
        self._points_sent = 0
        self._counts_sent: dict | None = None
        self._ticks_sent: int | None = None

    def handle(self, command: str, arg) -> None:
        if command == RECORD:
            self._start_recording(arg)
        elif command == STOP_RECORDING:
            self._stop_recording()
        elif command == APPLY:
            target, play = arg
            self._attach(target)
            self.playing = play and self.attachment is not None
        elif command == PLAY and self.attachment is not None:
            self.playing = True
        elif command == PAUSE:
            self.playing = False
        elif command == STEP and self.attachment is not None:
            self.playing = False
            self._follow()

    def _attach(self, target: AttachTarget) -> None:
        self.close()
        self._pending = AttachFrame()
        self._points_sent = 0
        try:
            self.attachment = Attachment(target).open()
        except ConfigError as exc:
            self.attachment = None
            self._pending.error = str(exc)
            self._pending.status = "not attached"
            return
        self._pending.info = attach_info(self.attachment)
        self._pending.status = f"attached to vLLM {self.attachment.server.version} at {self.attachment.server.url}"
        self.attachment.map_changed = True

    def _start_recording(self, path: str) -> None:
        if self.attachment is None:
            if self._pending.status == "not attached":  # the attach's refusal, this frame's: "Nothing to record" hid it
                return
            self._pending.error = "Nothing to record: not attached to a server."
            self._pending.status = RECORDING_REFUSED
            return
        try:
            self.attachment.start_recording(path)
        except (OSError, ConfigError) as exc:  # RecordingError is a ConfigError
            self._pending.error = f"Cannot record to {path}: {exc}"
            self._pending.status = RECORDING_REFUSED
            return
        self._pending.status = f"recording the server to {path}"

    def _stop_recording(self, note: str | None = None) -> None:
        if self.attachment is None or self.attachment.recorder is None:
            return
        try:
            recorder = self.attachment.stop_recording(note)
        except (OSError, ConfigError) as exc:
            self._pending.error = f"The recording could not be finished: {exc}"
            self._pending.status = RECORDING_REFUSED
            return
        self._pending.status = (f"recording written to {recorder.path} ({format_bytes(recorder.size)}, "
                                f"{recorder.num_ticks:,} ticks); open it with File > Open recording")

    def _follow(self) -> int:
        return self.attachment.poll(0)

    def advance(self, budget_s: float) -> float:
        if self.attachment is None:
            self.playing = False
            return IDLE_WAIT_S
        return 0.0 if self._follow() else IDLE_WAIT_S

    def take_frame(self) -> AttachFrame:
        frame, self._pending = self._pending, AttachFrame()
        frame.playing = self.playing
        attachment = self.attachment
        if attachment is None:
            return frame
        new_points = attachment.points[self._points_sent:]
        self._points_sent = len(attachment.points)
        if new_points:
            frame.observed = list(new_points)
            frame.points = point_array([series_point(p) for p in new_points])
            frame.prediction = [figure.as_dict() for figure in attachment.latency_prediction()]
        if attachment.map_changed or new_points:
            attachment.map_changed = False
            frame.snapshot, frame.cells = map_snapshot(attachment, attachment.points[-1] if attachment.points else None)
        frame.log_lines = attachment.take_new_rows()
        counts = self.counts()
        if counts != self._counts_sent:
            frame.counts = self._counts_sent = counts
        ticks = attachment.recorder.num_ticks if attachment.recorder is not None else None
        if ticks != self._ticks_sent:
            frame.recording_ticks = self._ticks_sent = ticks
        reason = attachment.no_events_reason
        if reason and attachment.elapsed_s > attachment.target.timeout_s and not frame.status:
            frame.status = reason
        return frame

    def counts(self) -> dict:
        subscriber, attachment = self.attachment.subscriber.counts, self.attachment
        map_counts = attachment.prefix_map.counts()
        return {"batches": subscriber.batches, "replayed": subscriber.replayed, "gaps": subscriber.gaps,
                "lost": subscriber.missed, "restarts": subscriber.restarts, "decode_errors": subscriber.decode_errors,
                "events": dict(attachment.counts.events), "cached_blocks": map_counts.cached_blocks,
                "placed": map_counts.placed_copies, "unplaced": map_counts.unplaced, "chains": map_counts.chains,
                "scrapes": attachment.counts.scrapes, "scrape_failures": attachment.counts.scrape_failures}

    def close(self) -> None:
        if self.attachment is not None:
            self._stop_recording("the session closed")
            self.attachment.close()
            self.attachment = None
