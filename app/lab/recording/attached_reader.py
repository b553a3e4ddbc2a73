"""Read a recording of an attached vLLM server (attached_writer.py) back, tick by tick.

The whole file is read and checked when it opens (recording/schema.py; an hour of a busy server
is tens of MB): every record's checksum, every table's lengths, every batch decoded again by the
KV event decoder, the prefix-cache map it starts from. Anything wrong is one RecordingError
naming the file and the record. A replay (app/host/attach_replay.py) then feeds the ticks to an
Attachment as the subscriber and the scrapes once fed the live one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from kvscope.app.lab.recording.attached_writer import ATTACH_COUNTS, SUBSCRIBER_COUNTS, point_columns
from kvscope.app.lab.recording.format import ATTACH_START, ATTACH_TICKS, RECORD_NAMES, RecordingError, decode_payload
from kvscope.app.lab.recording.records import RecordEntry, is_attached, open_records
from kvscope.app.lab.recording.schema import check_attach_header, check_attach_start, check_ticks
from kvscope.app.lab.vllm.events import KvEventDecodeError, decode_batch
from kvscope.app.lab.vllm.prefix_cache_map import CELL_ARRAYS, PrefixCacheMap, restore_map
from kvscope.app.lab.vllm.subscriber import NoticeKind, ReceivedBatch, StreamKey, StreamNotice, SubscriberCounts
from kvscope.engine.checks import MAX_NUM_BLOCKS

MAX_CELLS = MAX_NUM_BLOCKS  # every DP engine's cells together


@dataclass(frozen=True)
class Tick:
    """One poll of the attachment as it was recorded."""

    time_s: float  # seconds since kvscope attached
    records: list  # ReceivedBatch and StreamNotice, in the order they came
    point: object | None  # the scrape's ObservedPoint
    scrape_failure: str | None  # ... or why it failed
    metric_restart: bool  # the scrape found the server's metrics started again
    subscriber: SubscriberCounts  # the subscriber's counts after the tick


@dataclass(frozen=True)
class AttachStart:
    time_s: float
    events: dict  # events by type name before the recording began
    counts: dict  # ATTACH_COUNTS
    subscriber: SubscriberCounts


class AttachedRecording:
    def __init__(self, path: Path, header: dict, start: AttachStart, map_blob: bytes, map_cells: dict,
                 ticks: list[Tick], index_head: dict | None, warning: str | None, file_size: int):
        self.path = path
        self.header = header
        self.info = header["attach"]
        self.start = start
        self.ticks = ticks
        self.num_steps = len(ticks)
        self.end_times = np.array([t.time_s for t in ticks], dtype=np.float64)
        self.summary = index_head.get("summary") if index_head else None
        self.note = index_head.get("note") if index_head else None
        self.warning = warning
        self.file_size = file_size
        self._map_blob, self._map_cells = map_blob, map_cells

    def initial_map(self) -> PrefixCacheMap:
        """A fresh copy of the prefix-cache map as it was when the recording began."""
        return restore_map(self._map_blob, self._map_cells, MAX_CELLS)

    @property
    def duration_s(self) -> float:
        return float(self.end_times[-1] - self.start.time_s) if self.num_steps else 0.0

    def points(self) -> list:
        return [tick.point for tick in self.ticks if tick.point is not None]

    @property
    def num_batches(self) -> int:
        return sum(isinstance(r, ReceivedBatch) for tick in self.ticks for r in tick.records)

    def event_counts(self) -> dict:
        """The recorded batches' events, by type name."""
        counts: dict[str, int] = {}
        for tick in self.ticks:
            for record in tick.records:
                if isinstance(record, ReceivedBatch):
                    for event in record.batch.events:
                        name = type(event).__name__
                        counts[name] = counts.get(name, 0) + 1
        return counts

    def series(self) -> dict:
        """One array per ObservedPoint field, one entry per scrape, and the token rates (tokens/s)."""
        points = self.points()
        columns = {name: np.array([getattr(p, name) for p in points], dtype=np.float64) for name in point_columns()}
        with np.errstate(divide="ignore", invalid="ignore"):
            interval = np.where(columns["interval_s"] > 0, columns["interval_s"], np.nan)
            columns["prompt_tokens_per_s"] = columns["prompt_tokens"] / interval
            columns["generation_tokens_per_s"] = columns["generation_tokens"] / interval
        return columns

    def close(self) -> None:
        """Nothing stays open: the file was read whole."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    # -- opening -----------------------------------------------------------------------------------
    @classmethod
    def open(cls, path, allow_truncated: bool = False) -> "AttachedRecording":
        path = Path(path)
        name = path.name
        opened = open_records(path, allow_truncated)
        try:
            if not is_attached(opened.header):
                raise RecordingError(f"{name} is a recording of an engine run, not of an attached vLLM server")
            header = check_attach_header(opened.header, name)
            reader = opened.reader
            starts = [e for e in opened.entries if e.type == ATTACH_START]
            if not starts:
                raise RecordingError(f"{name} holds no prefix-cache map to start from (its attach start record): "
                                     "it is incomplete or corrupt")
            what = _record_name(name, starts[0])
            head, arrays = decode_payload(reader.payload(starts[0]), what)
            check_attach_start(head, arrays, ATTACH_COUNTS, SUBSCRIBER_COUNTS, what)
            blob = arrays["map.state"].tobytes()
            cells = {name_: arrays.get(f"map.{name_}") for name_ in CELL_ARRAYS}
            try:
                restore_map(blob, cells, MAX_CELLS)
            except (ValueError, TypeError, OverflowError) as exc:
                raise RecordingError(f"{what}: {exc}: the file is corrupt") from None
            start = AttachStart(float(head["time_s"]), dict(head["events"]),
                                {k: int(head["counts"][k]) for k in ATTACH_COUNTS},
                                SubscriberCounts(**{k: int(head["subscriber"][k]) for k in SUBSCRIBER_COUNTS}))
            ticks = []
            for entry in (e for e in opened.entries if e.type == ATTACH_TICKS):
                ticks += _read_ticks(reader, entry, name, len(ticks))
        finally:
            opened.handle.close()
        warning = opened.warning
        if warning is not None:
            warning = warning.format(last=f"tick {len(ticks) - 1:,}" if ticks else "no tick")
        return cls(path, header, start, blob, cells, ticks, opened.index_head, warning, opened.size)


def _record_name(name: str, entry: RecordEntry) -> str:
    return f"{name}: record {entry.number} (the {RECORD_NAMES.get(entry.type, 'unknown')} record at byte {entry.offset:,})"


def _read_ticks(reader, entry: RecordEntry, name: str, expected_first: int) -> list[Tick]:
    from kvscope.app.lab.vllm.observed_point import ObservedPoint

    what = _record_name(name, entry)
    head, a = decode_payload(reader.payload(entry), what)
    columns = point_columns()
    num_ticks = head.get("num_steps")
    if not isinstance(num_ticks, int) or isinstance(num_ticks, bool) or not 0 < num_ticks <= len(a.get("tick.time_s", ())):
        raise RecordingError(f"{what}: num_steps must be the number of its ticks: the file is corrupt")
    if head.get("first_step") != expected_first:
        raise RecordingError(f"{what} holds ticks from {head.get('first_step')!r:.20}, expected {expected_first:,}: "
                             "the file is corrupt")
    check_ticks(head, a, num_ticks, columns, SUBSCRIBER_COUNTS, what)
    streams = [StreamKey(source, topic, rank) for source, topic, rank in head["streams"]]
    ends = np.cumsum(a["batch.length"])
    raw = a["batch.bytes"].tobytes()
    batches = []
    for k, (seq, stream, replayed) in enumerate(zip(a["batch.seq"].tolist(), a["batch.stream"].tolist(),
                                                     a["batch.replayed"].tolist())):
        try:
            batch = decode_batch(raw[int(ends[k - 1]) if k else 0:int(ends[k])], recorded=True)
        except KvEventDecodeError as exc:
            raise RecordingError(f"{what}: batch {k} cannot be decoded ({exc}): the file is corrupt") from None
        batches.append(ReceivedBatch(streams[stream], int(seq), batch, bool(replayed)))
    notices: dict[int, list] = {}
    for tick, before, kind, stream, first_seq, last_seq, count, message in head["notices"]:
        try:
            kind = NoticeKind(kind)
        except ValueError:
            raise RecordingError(f"{what}: a notice of kind {kind!r:.40}, unknown to this kvscope: "
                                 "the file is corrupt") from None
        notice = StreamNotice(kind, None if stream < 0 else streams[stream], first_seq, last_seq, count, message)
        notices.setdefault(tick, []).append((before, notice))
    failures = dict((tick, message) for tick, message in head["failures"])
    int_columns = {f.name for f in fields(ObservedPoint) if f.type in ("int", int)}
    point_rows = list(zip(*(a[f"point.{c}"].tolist() for c in columns)))
    ticks, batch_at, point_at = [], 0, 0
    counts = list(zip(*(a[f"tick.{n}"].tolist() for n in SUBSCRIBER_COUNTS)))
    for t in range(num_ticks):
        records, pending = [], notices.get(t, [])
        n = int(a["tick.num_batches"][t])
        for b in range(n + 1):
            records += [notice for before, notice in pending if before == b]
            if b < n:
                records.append(batches[batch_at + b])
        batch_at += n
        point = None
        if a["tick.has_point"][t]:
            row = point_rows[point_at]
            if any(not math.isfinite(v) for c, v in zip(columns, row) if c in int_columns):
                raise RecordingError(f"{what}: scrape {point_at} holds a count that is not a number: the file is corrupt")
            point = ObservedPoint(**{c: int(v) if c in int_columns else v for c, v in zip(columns, row)})
            point_at += 1
        ticks.append(Tick(float(a["tick.time_s"][t]), records, point, failures.get(t), bool(a["tick.metric_restart"][t]),
                          SubscriberCounts(*counts[t])))
    return ticks
