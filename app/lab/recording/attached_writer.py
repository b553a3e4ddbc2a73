"""Record an attached vLLM server to a .kvrec file while kvscope follows it (format 1.1).

An engine run is recorded step by step; a server is recorded tick by tick: a tick is one poll of
the Attachment (app/lab/vllm/attachment.py) in which something arrived -- event batches and the
subscriber's notices (GAP, REPLAYED, RESTART, DECODE_ERROR) in the order they came, and a scrape
of /metrics (its ObservedPoint, or why it failed). What the replay shows is then rebuilt by the
same code that built it live, so the replayed map, log and counts are the live ones.

    HEADER        source "vllm-attach": the server, its cache configuration, how it was reached,
                  the model and hardware the prediction used
    ATTACH_START  the prefix-cache map when the recording began (kvscope's placement of blocks
                  into cells cannot be rebuilt from events that came before), and the counts
    ATTACH_TICKS  per chunk of ticks: batches (vLLM's msgpack, re-encoded as maps), notices,
                  scrapes, and the subscriber's counts after each tick
    INDEX         as for an engine run, its summary the headless report

Chunks go to the disk at least every second, so a recorder that is killed loses about a second.
"""

from __future__ import annotations

import dataclasses
import struct
import time
import zlib
from datetime import datetime, timezone
from pathlib import Path

import msgspec
import numpy as np

from kvscope.app.lab.recording.format import (
    ATTACH_START,
    ATTACH_TICKS,
    FILE_HEADER,
    FORMAT_MAJOR,
    FORMAT_MINOR,
    HEADER,
    INDEX,
    SIGNATURE,
    SOURCE_ATTACH,
    TRAILER,
    TRAILER_TAG,
    encode_payload,
    frame_record,
)
from kvscope.app.lab.recording.schema import MAX_NOTICE_TEXT
from kvscope.app.lab.recording.writer import _RecordWriter
from kvscope.app.lab.vllm.events import AllBlocksCleared, BlockRemoved, BlockStored, EventBatch
from kvscope.app.lab.vllm.prefix_cache_map import map_state
from kvscope.app.lab.vllm.subscriber import ReceivedBatch, SubscriberCounts

TICKS_PER_CHUNK = 512
CHUNK_WALL_S = 1.0
SUBSCRIBER_COUNTS = tuple(f.name for f in dataclasses.fields(SubscriberCounts))
ATTACH_COUNTS = ("blocks_stored", "blocks_removed", "scrapes", "scrape_failures", "metric_restarts")


def encode_batch(batch: EventBatch) -> bytes:
    """A decoded batch as vLLM's map encoding (0.24 on), which events.decode_batch reads back as it was."""
    events = []
    for event in batch.events:
        if isinstance(event, BlockStored):
            events.append({"type": "BlockStored", "block_hashes": list(event.block_hashes),
                           "parent_block_hash": event.parent_block_hash, "token_ids": list(event.token_ids),
                           "block_size": event.block_size or None, "medium": event.medium, "group_idx": event.group_idx,
                           "lora_name": event.lora_name})
        elif isinstance(event, BlockRemoved):
            events.append({"type": "BlockRemoved", "block_hashes": list(event.block_hashes), "medium": event.medium,
                           "group_idx": event.group_idx})
        elif isinstance(event, AllBlocksCleared):
            events.append({"type": "AllBlocksCleared"})
        else:  # UnknownEvent: its type name alone, read back as unknown again
            events.append({"type": event.type_name})
    return msgspec.msgpack.encode({"ts": batch.ts, "events": events, "data_parallel_rank": batch.data_parallel_rank})


def point_columns() -> tuple[str, ...]:
    from kvscope.app.lab.vllm.observed_point import ObservedPoint

    return tuple(f.name for f in dataclasses.fields(ObservedPoint))


def _plain(value):
    """A dataclass (a ModelConfig, a HardwareSpec) as the header's table; None stays None."""
    return dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value


class AttachRecorder:
    """Writes an attached server to a recording from now on: the Attachment calls record_tick()
    after each poll that brought something, and close() at the end."""

    def __init__(self, path, attachment):
        self.path = Path(path)
        self.num_ticks = 0
        self._closed = False
        self._started = time.monotonic()
        self._columns = point_columns()
        self._streams: dict = {}  # StreamKey -> its index in the header's stream table
        self._metric_restarts = attachment.counts.metric_restarts
        self._writer = _RecordWriter(self.path)
        with self._writer.opening():
            self._writer.append(None, FILE_HEADER.pack(SIGNATURE, FORMAT_MAJOR, FORMAT_MINOR))
            self._writer.append(HEADER, encode_payload(self._header(attachment), {}), False, 0, 0)
            blob, cells = map_state(attachment.prefix_map)
            counts = attachment.counts
            start = {"time_s": attachment._now - attachment._started, "events": dict(counts.events),
                     "counts": {name: getattr(counts, name) for name in ATTACH_COUNTS},
                     "subscriber": {name: getattr(attachment.subscriber.counts, name) for name in SUBSCRIBER_COUNTS}}
            arrays = {"map.state": np.frombuffer(blob, dtype=np.uint8), **{f"map.{k}": v for k, v in cells.items()}}
            self._writer.append(ATTACH_START, encode_payload(start, arrays), True, 0, 0)
        self._new_chunk()

    def _header(self, attachment) -> dict:
        from kvscope.app.lab.vllm.attachment import attach_info

        try:
            from importlib.metadata import version

            kvscope_version = version("kvscope")
        except Exception:  # noqa: BLE001 - a source checkout that was never installed
            kvscope_version = "unknown"
        server, target = attachment.server, attachment.target
        return {
            "format": "kvscope recording",
            "format_version": [FORMAT_MAJOR, FORMAT_MINOR],
            "source": SOURCE_ATTACH,
            "kvscope_version": kvscope_version,
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "label": f"vLLM {server.version} at {server.url}",
            "block_size": server.block_size,
            "num_blocks": server.num_gpu_blocks,
            "event_kinds": [],
            "attach": attach_info(attachment),
            "target": {"kv_events": target.kv_events, "kv_listen": target.kv_listen, "replay": target.replay,
                       "data_parallel_size": target.data_parallel_size, "topic": target.topic,
                       "timeout_s": target.timeout_s, "scrape_interval_s": target.scrape_interval_s},
            # the prediction's model and hardware, when it had them (absent otherwise: a header's tables are tables)
            **{key: _plain(value) for key, value in (("model", target.model), ("hardware", target.hardware))
               if value is not None},
        }

    def _new_chunk(self) -> None:
        self._chunk_first = self.num_ticks
        self._chunk_started = time.monotonic()
        self._times: list[float] = []
        self._tick_batches: list[int] = []
        self._tick_point: list[bool] = []
        self._tick_restart: list[bool] = []
        self._tick_counts: list[tuple] = []
        self._batch_seq: list[int] = []
        self._batch_stream: list[int] = []
        self._batch_replayed: list[bool] = []
        self._payloads: list[bytes] = []
        self._points: list[tuple] = []
        self._notices: list[list] = []
        self._failures: list[list] = []

    def record_tick(self, attachment, records, scraped) -> None:
        """One poll: the subscriber's records in the order they came, then the scrape (an
        ObservedPoint, a failure's message, or None)."""
        if self._closed:
            return
        tick = self.num_ticks - self._chunk_first
        batches = 0
        for record in records:
            stream = -1 if record.stream is None else self._streams.setdefault(record.stream, len(self._streams))
            if isinstance(record, ReceivedBatch):
                self._batch_seq.append(record.seq)
                self._batch_stream.append(stream)
                self._batch_replayed.append(record.replayed)
                self._payloads.append(encode_batch(record.batch))
                batches += 1
            else:
                self._notices.append([tick, batches, record.kind.value, stream, record.first_seq, record.last_seq,
                                      record.count, _kept(record.message)])
        has_point = scraped is not None and not isinstance(scraped, str)
        if isinstance(scraped, str):
            self._failures.append([tick, _kept(scraped)])
        elif has_point:
            self._points.append(tuple(float(getattr(scraped, name)) for name in self._columns))
        restarts = attachment.counts.metric_restarts
        self._tick_restart.append(restarts > self._metric_restarts)
        self._metric_restarts = restarts
        self._times.append(attachment._now - attachment._started)
        self._tick_batches.append(batches)
        self._tick_point.append(has_point)
        subscriber = attachment.subscriber.counts
        self._tick_counts.append(tuple(getattr(subscriber, name) for name in SUBSCRIBER_COUNTS))
        self.num_ticks += 1
        if tick + 1 >= TICKS_PER_CHUNK or time.monotonic() - self._chunk_started >= CHUNK_WALL_S:
            self._flush()

    def _flush(self) -> None:
        count = self.num_ticks - self._chunk_first
        if count == 0:
            return
        lengths = np.array([len(p) for p in self._payloads], dtype=np.int64)
        arrays = {
            "tick.time_s": np.array(self._times, dtype=np.float64),
            "tick.num_batches": np.array(self._tick_batches, dtype=np.int64),
            "tick.has_point": np.array(self._tick_point, dtype=np.bool_),
            "tick.metric_restart": np.array(self._tick_restart, dtype=np.bool_),
            "batch.seq": np.array(self._batch_seq, dtype=np.int64),
            "batch.stream": np.array(self._batch_stream, dtype=np.int64),
            "batch.replayed": np.array(self._batch_replayed, dtype=np.bool_),
            "batch.length": lengths,
            "batch.bytes": np.frombuffer(b"".join(self._payloads), dtype=np.uint8),
        }
        counts = np.array(self._tick_counts, dtype=np.int64).reshape(count, len(SUBSCRIBER_COUNTS))
        arrays.update({f"tick.{name}": counts[:, k] for k, name in enumerate(SUBSCRIBER_COUNTS)})
        points = np.array(self._points, dtype=np.float64).reshape(len(self._points), len(self._columns))
        arrays.update({f"point.{name}": points[:, k] for k, name in enumerate(self._columns)})
        streams = [[key.source, key.topic, key.data_parallel_rank] for key in self._streams]
        head = {"first_step": self._chunk_first, "num_steps": count, "streams": streams, "notices": self._notices,
                "failures": self._failures}
        self._writer.append(ATTACH_TICKS, encode_payload(head, arrays), True, self._chunk_first, count)
        self._new_chunk()

    @property
    def size(self) -> int:
        return self._writer.offset

    def close(self, summary: dict | None = None, note: str | None = None) -> int:
        """Write what is buffered, the index and the trailer; returns the file size in bytes."""
        if self._closed:
            return self._writer.offset
        self._closed = True
        try:
            self._flush()
            records = self._writer.finish()
        except BaseException:
            self._writer.abandon()
            raise
        head = {"num_steps": self.num_ticks, "summary": summary, "note": note,
                "closed": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "recording_wall_s": time.monotonic() - self._started}
        arrays = {f"record.{name}": np.array([r[k] for r in records], dtype=np.int64)
                  for k, name in enumerate(("type", "offset", "first", "count"))}
        index_offset = self._writer.offset
        index = frame_record(INDEX, encode_payload(head, arrays), compress=False)
        trailer_head = TRAILER.pack(index_offset, TRAILER_TAG, 0)[:16]
        self._writer.write_last(index + trailer_head + struct.pack("<I", zlib.crc32(trailer_head)))
        return self._writer.offset


def _kept(message: str) -> str:
    """A notice's or a failed scrape's message as recorded: the reader takes at most MAX_NOTICE_TEXT
    characters, and a longer one (a server's text quoted in it) made the whole recording unreadable."""
    return message if len(message) <= MAX_NOTICE_TEXT else message[:MAX_NOTICE_TEXT - 3] + "..."
