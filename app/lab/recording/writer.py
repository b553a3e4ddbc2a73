"""Record a run to a .kvrec file, step by step, while the engine runs (format.py has the framing).

`kvscope run --record` and the window's live run write one through RunRecorder.

A run is a HEADER record (the configuration), a KEYFRAME (a whole snapshot), then per chunk of
steps a STEPS record (batches, events, metrics) and a DELTAS record (what changed in the block
map and the request table at each step), a KEYFRAME now and then, and at close an INDEX record
plus a trailer that points at it, so a reader seeks without scanning.

Recording must cost about what the step costs, and a simulated step takes 15-50 microseconds:
diffing whole snapshots (five arrays of up to 500,000 blocks) every step would cost a hundred
times that. So a step notes only the blocks it could have changed: owner, ref count and hash of
the blocks its events name, of the requests that finished and of the blocks it filled up (the
prefix cache hashes those); state and fill of the blocks its batch wrote into, which follow from
the tokens computed. The diff against the previous state runs vectorised once per chunk. A
keyframe is the engine's own snapshot; at each one the recorder checks that its deltas arrived at
exactly that state and counts the blocks that did not (`delta_mismatches` in the index: 0).

A new file is written in place, so a recorder that is killed leaves every whole record readable.
An existing file is replaced only by a complete recording: the new one is written beside it and
renamed over it at close, so a run that fails leaves the old recording as it was.
"""

from __future__ import annotations

import contextlib
import dataclasses
import operator
import queue
import struct
import threading
import time
import zlib
from datetime import datetime, timezone
from itertools import chain
from pathlib import Path

import numpy as np

from kvscope.app.lab.output_path import commit_partial, partial_path, replaces_in_place
from kvscope.app.lab.recording.format import (
    BLOCK_DTYPES,
    DELTAS,
    EVENT_COLUMNS,
    FILE_HEADER,
    FINISHED_COLUMNS,
    FORMAT_MAJOR,
    FORMAT_MINOR,
    HEADER,
    INDEX,
    KEYFRAME,
    SIGNATURE,
    SNAPSHOT_COLUMNS,
    STEP_COLUMNS,
    STEPS,
    TRAILER,
    TRAILER_TAG,
    RecordingError,
    encode_payload,
    frame_record,
)
from kvscope.engine.events import EventKind
from kvscope.engine.request import RequestStatus
from kvscope.engine.snapshot import BLOCK_CACHED, BLOCK_FREE, BLOCK_RESERVED, BLOCK_USED, REQUEST_DTYPE, Snapshot

CHUNK_STEPS = 2048  # steps per STEPS/DELTAS pair: the least a seek decodes
CHUNK_WALL_S = 1.0  # ... or fewer, so a killed recorder loses at most about a second of the run
# Keyframes by default: the next one once the deltas since the last outweigh it (uncompressed), so
# keyframes take at most about half the file and a seek decodes at most about two keyframes' worth
# of bytes; never closer than MIN_KEYFRAME_STEPS steps, never further apart than MAX_KEYFRAME_STEPS.
MIN_KEYFRAME_STEPS = CHUNK_STEPS
MAX_KEYFRAME_STEPS = 4 * CHUNK_STEPS

_STEP_ROW = operator.attrgetter(*(name for name, _ in STEP_COLUMNS))
_REQUEST_ROW = operator.attrgetter(
    "request_id", "status", "num_prompt_tokens", "num_output_tokens", "max_tokens", "num_computed_tokens",
    "num_cached_prompt_tokens", "num_preemptions", "arrival_time", "first_token_time",
)  # + the number of blocks: the request table's columns, as the engine holds them
_UPSERT_COLUMNS = tuple((name, np.float64) for name in (
    "request_id", "status", "num_prompt_tokens", "num_output_tokens", "max_tokens", "num_computed_tokens",
    "num_cached_prompt_tokens", "num_preemptions", "arrival_time_s", "first_token_time", "num_blocks"))
_UPSERT_DELTA_ENCODED = ("request_id", "status", "num_prompt_tokens", "num_output_tokens", "max_tokens",
                         "num_computed_tokens", "num_cached_prompt_tokens", "num_blocks", "num_preemptions")
_ALLOCATED, _PREFIX_HIT = EventKind.ALLOCATED, EventKind.PREFIX_HIT  # module constants: the per-step path
_PREEMPTED, _FINISHED = EventKind.PREEMPTED, EventKind.FINISHED  # compares identities, not enum lookups
_RUNNING = RequestStatus.RUNNING


def _json_ready(value):
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return value


def _columns(rows: list, columns) -> dict:
    """Row tuples of numbers (None for NaN) -> one array per named column. One conversion through
    float64 is far cheaper than one per column, and exact for the integers a run holds (< 2**53)."""
    if not rows:
        return {name: np.zeros(0, dtype) for name, dtype in columns}
    table = np.array(rows, dtype=np.float64)
    return {name: table[:, k].astype(dtype) for k, (name, dtype) in enumerate(columns)}


class RunRecorder:
    """Writes one engine run to a recording. Attach it before the first step, call record_step with
    every StepResult engine.step() returns, and close() at the end (also after an interruption:
    the file then holds every step recorded so far)."""

    def __init__(self, engine, path, run_info: dict | None = None, keyframe_interval: int | None = None):
        """keyframe_interval: a keyframe every so many steps; None spaces them by size (see
        MIN_KEYFRAME_STEPS). run_info: what the engine does not know — the workload, the label, the
        seed — stored in the header as given (dataclasses as dicts)."""
        self.engine = engine
        self.path = Path(path)
        self.block_size = engine.kv.block_size
        self.num_blocks = engine.kv.num_blocks
        if keyframe_interval is not None and keyframe_interval < 1:
            raise ValueError("keyframe_interval must be at least 1 step")
        self.keyframe_interval = keyframe_interval
        self._last_keyframe = (0, 0)  # (position, bytes) of the newest keyframe
        self._delta_bytes = 0  # DELTAS bytes written since it
        self._writer = _RecordWriter(self.path)
        self.num_steps = 0
        self.delta_mismatches = 0
        self._closed = False
        self._kind_codes = {kind.value: code for code, kind in enumerate(EventKind)}  # str keys hash fast
        self._started = time.monotonic()
        # to the end: a SIGTERM during the first keyframe left the file beside the recording it replaces
        with self._writer.opening():
            self._writer.append(None, FILE_HEADER.pack(SIGNATURE, FORMAT_MAJOR, FORMAT_MINOR))
            self._write_record(HEADER, encode_payload(self._header(run_info or {}), {}), compress=False, first=0,
                               count=0)
            # Blocks each request holds, rebuilt from the events: a finished request's list is gone
            # from the engine by the time its step returns, and its blocks are what the step freed.
            self._block_lists = {r.request_id: list(r.block_ids) for r in engine.requests.values() if r.block_ids}
            self._finished_seen = len(engine.metrics.ttft)
            self._mirror: dict[str, np.ndarray] = {}
            self._mid_step = False  # inside record_step: an interruption there leaves the chunk's lists uneven
            self._new_chunk()
            self._keyframe(engine.snapshot())

    def _header(self, run_info: dict) -> dict:
        engine = self.engine
        resolved = engine.resolved
        info = {key: _json_ready(value) for key, value in run_info.items()}
        try:
            from importlib.metadata import version

            kvscope_version = version("kvscope")
        except Exception:  # noqa: BLE001 - a source checkout that was never installed
            kvscope_version = "unknown"
        return {
            "format": "kvscope recording",
            "format_version": [FORMAT_MAJOR, FORMAT_MINOR],
            "kvscope_version": kvscope_version,
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "label": info.pop("label", f"{engine.model.name} ({engine.runner.name} on {engine.hardware.name})"),
            "backend": engine.runner.name,
            "model": dataclasses.asdict(engine.model),
            "hardware": dataclasses.asdict(engine.hardware),
            "engine_args": dataclasses.asdict(engine.args),
            "resolved": {f.name: getattr(resolved, f.name) for f in dataclasses.fields(resolved) if f.name != "args"},
            "plan": engine.plan.to_dict(),
            "workload": info.pop("workload", None),
            "run": info,
            "block_size": self.block_size,
            "num_blocks": self.num_blocks,
            "allocation": getattr(engine.kv, "kind", "paged"),
            "keyframe_interval": self.keyframe_interval or "by size",
            "event_kinds": [kind.value for kind in EventKind],
        }

    # -- the per-step path: plain Python, one numpy gather ------------------------------------------
    def _new_chunk(self) -> None:
        self._chunk_first = self.num_steps
        self._chunk_started = time.monotonic()
        self._results: list = []  # the chunk's StepResults, turned into columns when it is written
        self._snapshot_rows: list[tuple] = []
        self._finished_rows: list[tuple] = []
        self._gathered: list[tuple] = []  # per step with candidates: (block ids, owner, ref_cnt, hash) after it
        self._num_candidates = 0
        self._written: list[int] = []  # blocks a batch wrote tokens into: owner, ref_cnt and hash unchanged
        self._partial_blocks: list[int] = []  # a batch request's last written block ...
        self._partial_fill: list[int] = []  # ... and the tokens in it
        self._reserved: list[int] = []  # held blocks no token has reached yet
        self._upserts: list[tuple] = []  # whole request-table rows, of the requests events name
        self._entry_computed: list[int] = []  # per batch entry: the request's computed tokens after the step ...
        self._entry_tokens: list[int] = []  # ... and its token count (prompt + output); -1: see the rows
        self._removed: list[int] = []  # request ids that left the table
        self._marks: list[int] = []  # per step: the six counts above after it, flat

    def record_step(self, result) -> None:
        """Record one StepResult, right after engine.step() returned it (None is ignored). The
        recorder keeps the result until its chunk is written: do not modify it."""
        if result is None:
            return
        if self._closed:
            raise RecordingError(f"{self.path.name}: the recording is closed")
        engine = self.engine
        requests = engine.requests
        bs = self.block_size
        self._mid_step = True
        self._results.append(result)

        candidates: list[int] = []  # blocks whose owner, ref_cnt or hash this step may have changed
        affected: dict[int, None] = {}  # requests its events name, in event order (arrivals first)
        allocated: list[int] = []
        finished: list[int] = []
        if result.events:
            lists = self._block_lists
            for event in result.events:
                kind, rid, blocks = event.kind, event.request_id, event.blocks
                if blocks:
                    candidates += blocks
                if kind is _ALLOCATED or kind is _PREFIX_HIT:
                    held = lists.get(rid)
                    if held is None:
                        lists[rid] = list(blocks)
                    else:
                        held += blocks
                    if kind is _ALLOCATED:
                        allocated.append(rid)
                elif kind is _PREEMPTED:
                    lists.pop(rid, None)
                elif kind is _FINISHED:
                    candidates += lists.pop(rid, ())
                    finished.append(rid)
                if rid >= 0:
                    affected[rid] = None

        # A batch entry changes its request's row only in computed and output tokens (and TTFT with
        # the first token) unless an event names the request: two integers, not a row.
        upserts, partial_blocks, partial_fill = self._upserts, self._partial_blocks, self._partial_fill
        entry_computed, entry_tokens, written = self._entry_computed, self._entry_tokens, self._written
        for rid, n in zip(result.request_ids, result.num_new_tokens):
            req = requests.get(rid)
            if req is None or req.status is not _RUNNING:
                entry_computed.append(-1)  # finished (its blocks are candidates already) or unexpected:
                entry_tokens.append(-1)
                if req is not None and rid not in affected:
                    upserts.append(_REQUEST_ROW(req) + (len(req.block_ids),))  # ... then a whole row
                continue
            blocks = req.block_ids
            computed = req.num_computed_tokens
            filled = (computed + bs - 1) // bs
            first = (computed - n) // bs
            written += blocks[first:filled]
            if computed // bs > first:  # blocks this step filled up: the prefix cache may have hashed them
                candidates += blocks[first:computed // bs]
            partial_blocks.append(blocks[filled - 1])
            partial_fill.append(computed - (filled - 1) * bs)
            entry_computed.append(computed)
            entry_tokens.append(len(req.token_ids))
        for rid in allocated:
            req = requests.get(rid)
            if req is not None and req.status is _RUNNING:
                blocks = req.block_ids
                filled = (req.num_computed_tokens + bs - 1) // bs
                if filled < len(blocks):  # a contiguous reservation, or a step the device never ran
                    tail = blocks[filled:]
                    candidates += tail
                    self._reserved += tail
        for rid in affected:
            req = requests.get(rid)
            if req is not None:
                upserts.append(_REQUEST_ROW(req) + (len(req.block_ids),))
        if finished:
            self._removed += finished

        if candidates:
            owner, ref_cnt, block_hash = engine.kv.block_arrays()
            index = np.array(candidates, dtype=np.int64)
            self._gathered.append((index, owner[index], ref_cnt[index], block_hash[index]))
            self._num_candidates += len(candidates)
        self._marks += (self._num_candidates, len(written), len(partial_blocks), len(self._reserved), len(upserts),
                        len(self._removed))

        metrics = engine.metrics
        if len(metrics.ttft) > self._finished_seen:
            seen = self._finished_seen
            ids = finished + [-1] * (len(metrics.ttft) - seen - len(finished))
            for j, rid in zip(range(seen, len(metrics.ttft)), ids):
                self._finished_rows.append((self.num_steps, rid, metrics.finish_times[j], metrics.ttft[j],
                                            metrics.queue_time[j]))
            self._finished_seen = len(metrics.ttft)

        scheduler = engine.scheduler
        self._snapshot_rows.append((engine.clock, engine.step_count, engine.kv.usage, len(scheduler.running),
                                    len(scheduler.waiting)))
        self.num_steps += 1
        self._mid_step = False
        in_chunk = self.num_steps - self._chunk_first
        if (in_chunk >= CHUNK_STEPS or (self.keyframe_interval and self.num_steps % self.keyframe_interval == 0)
                or time.monotonic() - self._chunk_started >= CHUNK_WALL_S):
            self._flush_chunk()
            if self._keyframe_due():
                self._keyframe(engine.snapshot())

    def _keyframe_due(self) -> bool:
        position, size = self._last_keyframe
        since = self.num_steps - position
        if self.keyframe_interval:
            return since >= self.keyframe_interval
        return since >= MAX_KEYFRAME_STEPS or (since >= MIN_KEYFRAME_STEPS and self._delta_bytes >= size)

    # -- once per chunk: vectorised ----------------------------------------------------------------
    def _flush_chunk(self) -> None:
        first, count = self._chunk_first, self.num_steps - self._chunk_first
        if count == 0:
            return
        results = self._results
        arrays = {f"step.{k}": v for k, v in _columns(list(map(_STEP_ROW, results)), STEP_COLUMNS).items()}
        events = [event for r in results for event in r.events]
        codes = self._kind_codes
        event_rows = [(codes[e.kind._value_], e.request_id, e.time_s, e.value, len(e.blocks)) for e in events]
        arrays.update({f"event.{k}": v for k, v in _columns(event_rows, EVENT_COLUMNS).items()})
        arrays.update({
            "step.batch_size": np.array([len(r.request_ids) for r in results], dtype=np.int64),
            "step.num_events": np.array([len(r.events) for r in results], dtype=np.int64),
            "batch.request_id": np.fromiter(chain.from_iterable(r.request_ids for r in results), dtype=np.int64),
            "batch.num_new_tokens": np.fromiter(chain.from_iterable(r.num_new_tokens for r in results),
                                                dtype=np.int64),
            "batch.is_prefill": np.fromiter(chain.from_iterable(r.is_prefill for r in results), dtype=np.bool_),
            "event.blocks": np.fromiter(chain.from_iterable(e.blocks for e in events), dtype=np.int64),
        })
        arrays.update({f"finished.{k}": v for k, v in _columns(self._finished_rows, FINISHED_COLUMNS).items()})
        details = {str(k): e.detail for k, e in enumerate(events) if e.detail}
        head = {"first_step": first, "num_steps": count, "event_details": details}
        self._write_record(STEPS, encode_payload(head, arrays, delta=("step.step",)), compress=True, first=first,
                           count=count)

        marks = np.zeros((count + 1, 6), dtype=np.int64)
        marks[1:] = np.array(self._marks, dtype=np.int64).reshape(count, 6)
        counts = np.diff(marks, axis=0)
        deltas = self._block_deltas(count, *counts[:, :4].T)
        deltas.update({f"snapshot.{k}": v for k, v in _columns(self._snapshot_rows, SNAPSHOT_COLUMNS).items()})
        deltas.update(self._table_deltas(counts[:, 4]))
        deltas["entry.num_computed_tokens"] = np.array(self._entry_computed, dtype=np.int64)
        deltas["entry.num_tokens"] = np.array(self._entry_tokens, dtype=np.int64)
        deltas["removed.request_id"] = np.array(self._removed, dtype=np.int64)
        deltas["removed.counts"] = counts[:, 5]
        head = {"first_step": first, "num_steps": count}
        delta_encoded = ("snapshot.step", "upsert.order", *(f"upsert.{n}" for n in _UPSERT_DELTA_ENCODED))
        self._delta_bytes += self._write_record(DELTAS, encode_payload(head, deltas, delta=delta_encoded),
                                                compress=True, first=first, count=count)
        self._new_chunk()

    def _block_deltas(self, num_steps: int, gathered_counts, written_counts, partial_counts, reserved_counts) -> dict:
        """Per field, the blocks whose value changed at each step of the chunk."""
        out: dict = {}
        steps = np.arange(num_steps, dtype=np.int64)
        if self._gathered:
            index, owner, ref_cnt, block_hash = (np.concatenate(parts) for parts in zip(*self._gathered))
        else:
            index, owner, ref_cnt, block_hash = (np.zeros(0, BLOCK_DTYPES[f]) for f in ("owner", "owner", "ref_cnt", "hash"))
        step_of = np.repeat(steps, gathered_counts)
        self._changes(out, num_steps, step_of, index, {"owner": owner, "ref_cnt": ref_cnt, "hash": block_hash})

        # State and fill by Engine.snapshot()'s rules: of the gathered blocks from their ref_cnt and
        # hash; a block a batch wrote into is held by a running request, so in use and full ...
        written = np.array(self._written, dtype=np.int64)
        state = np.concatenate([
            np.where(ref_cnt > 0, BLOCK_USED, np.where(block_hash != 0, BLOCK_CACHED, BLOCK_FREE)).astype(np.uint8),
            np.full(len(written), BLOCK_USED, dtype=np.uint8)])
        fill = np.where(state != BLOCK_FREE, self.block_size, 0).astype(np.uint16)
        index = np.concatenate([index, written])
        step_of = np.concatenate([step_of, np.repeat(steps, written_counts)])
        unique_key, first = np.unique(step_of * self.num_blocks + index, return_index=True)
        index, step_of, state, fill = index[first], step_of[first], state[first], fill[first]
        # ... except a request's last written block, filled in part, and the blocks past it it holds.
        if self._partial_blocks:
            at = np.repeat(steps, partial_counts) * self.num_blocks + self._partial_blocks
            fill[np.searchsorted(unique_key, at)] = self._partial_fill
        if self._reserved:
            at = np.searchsorted(unique_key, np.repeat(steps, reserved_counts) * self.num_blocks + self._reserved)
            state[at] = BLOCK_RESERVED
            fill[at] = 0
        self._changes(out, num_steps, step_of, index, {"state": state, "fill": fill})
        return out

    def _changes(self, out: dict, num_steps: int, step_of, index, values: dict) -> None:
        """Of the candidates (step, block, value per field), the values that differ from the block's
        value before: per field, counts per step, block ids and new values. Updates the mirror."""
        by_block = np.lexsort((step_of, index))  # each block's candidates in step order
        block_sorted = index[by_block]
        group_start = np.ones(len(index), dtype=bool)
        group_start[1:] = block_sorted[1:] != block_sorted[:-1]
        group_end = np.ones(len(index), dtype=bool)
        group_end[:-1] = group_start[1:]
        for field, field_values in values.items():
            mirror = self._mirror[field]
            sorted_values = field_values[by_block]
            previous = np.empty_like(sorted_values)
            previous[1:] = sorted_values[:-1]
            previous[group_start] = mirror[block_sorted[group_start]]
            changed = np.empty(len(index), dtype=bool)
            changed[by_block] = sorted_values != previous
            picked = np.flatnonzero(changed)  # in step order
            out[f"{field}.counts"] = np.bincount(step_of[picked], minlength=num_steps)
            out[f"{field}.index"] = index[picked]
            out[f"{field}.value"] = field_values[picked]
            mirror[block_sorted[group_end]] = sorted_values[group_end]

    def _table_deltas(self, upsert_counts) -> dict:
        """The chunk's changed request-table rows, grouped by request (each request's rows then
        differ by a token or two, which delta encoding turns into runs zlib all but removes);
        upsert.order puts them back in the order they were recorded."""
        rows = _columns(self._upserts, _UPSERT_COLUMNS)
        rows["ttft_s"] = rows.pop("first_token_time") - rows["arrival_time_s"]  # NaN until the first token
        order = np.lexsort((np.arange(len(self._upserts)), rows["request_id"]))
        out = {f"upsert.{name}": rows[name][order].astype(REQUEST_DTYPE[name]) for name in REQUEST_DTYPE.names}
        out["upsert.order"] = order.astype(np.int64)
        out["upsert.counts"] = upsert_counts
        return out

    def _keyframe(self, snapshot: Snapshot) -> None:
        arrays = {
            "owner": snapshot.block_owner, "state": snapshot.block_state, "ref_cnt": snapshot.block_ref_cnt,
            "fill": snapshot.block_fill, "hash": snapshot.block_hash,
        }
        if self._mirror:  # the deltas since the last keyframe must arrive at exactly this state
            differ = np.zeros(self.num_blocks, dtype=bool)
            for field, values in arrays.items():
                differ |= self._mirror[field] != values
            self.delta_mismatches += int(np.count_nonzero(differ))
        self._mirror = {field: np.array(values, dtype=BLOCK_DTYPES[field]) for field, values in arrays.items()}
        arrays.update({f"request.{name}": snapshot.requests[name] for name in REQUEST_DTYPE.names})
        head = {"position": self.num_steps, "time_s": snapshot.time_s, "step": snapshot.step,
                "kv_usage": snapshot.kv_usage, "num_running": snapshot.num_running,
                "num_waiting": snapshot.num_waiting, "block_size": snapshot.block_size}
        size = self._write_record(KEYFRAME, encode_payload(head, arrays), compress=True, first=self.num_steps, count=0)
        self._last_keyframe = (self.num_steps, size)
        self._delta_bytes = 0

    # -- the file ----------------------------------------------------------------------------------
    def _write_record(self, record_type: int, payload: bytes, compress: bool, first: int, count: int) -> int:
        """Queue one record for writing; returns its uncompressed size in bytes."""
        self._writer.append(record_type, payload, compress, first, count)
        return len(payload)

    @property
    def replaced(self) -> bool:
        """Whether the recording is at self.path: always once closed, unless it failed over an existing file."""
        return self._writer.committed

    def abandon(self) -> None:
        """After a write failed (a full disk): end the writer thread and close the file, left
        unfinished (no index: readers say so); nothing more is written."""
        if not self._closed:
            self._closed = True
            self._writer.abandon()

    def close(self, summary: dict | None = None, note: str | None = None, failed: bool = False) -> int:
        """Write what is buffered, the index and the trailer; returns the file size in bytes.
        note says why a run ended early (an interruption, an engine error), for the reader. failed:
        the run did not complete; an existing file at the path is then left as it was (the partial
        recording is removed), a new one keeps the steps recorded so far."""
        if self._closed:
            return self._writer.offset
        self._closed = True
        if self._mid_step:  # Ctrl+C or SIGTERM inside record_step: the chunk's steps end where it was flushed
            self.num_steps = self._chunk_first
            self._new_chunk()
        try:
            self._flush_chunk()
            records = self._writer.finish()
        except BaseException:
            self._writer.abandon()
            raise
        head = {
            "num_steps": self.num_steps,
            "summary": summary,
            "note": note,
            "closed": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "recording_wall_s": time.monotonic() - self._started,
            "delta_mismatches": self.delta_mismatches,
        }
        arrays = {
            "record.type": np.array([r[0] for r in records], dtype=np.int64),
            "record.offset": np.array([r[1] for r in records], dtype=np.int64),
            "record.first": np.array([r[2] for r in records], dtype=np.int64),
            "record.count": np.array([r[3] for r in records], dtype=np.int64),
        }
        index_offset = self._writer.offset
        index = frame_record(INDEX, encode_payload(head, arrays), compress=False)
        trailer_head = TRAILER.pack(index_offset, TRAILER_TAG, 0)[:16]
        self._writer.write_last(index + trailer_head + struct.pack("<I", zlib.crc32(trailer_head)), keep=not failed)
        return self._writer.offset


class _RecordWriter:
    """Appends records to the file in order. Compressing and writing run on a thread of their own
    (zlib and write() release the interpreter lock), so the engine's thread only encodes."""

    QUEUED = 4  # records in flight at most: memory stays bounded if the disk is slow

    def __init__(self, path: Path):
        self.path = path
        self.committed = False
        try:  # an existing file is replaced when the new one is complete; a new one is written in place
            self._partial = partial_path(path) if path.exists() and replaces_in_place(path) else None
            self._file = open(self._partial or path, "wb", buffering=0)  # unbuffered: a record is one write()
        except OSError as exc:
            raise RecordingError(f"cannot write the recording {path}: {exc.strerror or exc}") from None
        self.offset = 0
        self.records: list[tuple[int, int, int, int]] = []  # (type, offset, first, count), in file order
        self._error: OSError | None = None
        self._queue: queue.Queue = queue.Queue(maxsize=self.QUEUED)
        self._thread = threading.Thread(target=self._run, name="kvscope-recorder", daemon=True)
        self._thread.start()

    @contextlib.contextmanager
    def opening(self):
        """Around a recorder's first records: a failure there (a disk already full) abandons the
        writer before it goes up, since no recorder exists yet to close it, and a file written
        beside an existing one would be left behind."""
        try:
            yield
        except BaseException:
            self.abandon()
            raise

    def append(self, record_type: int | None, payload: bytes, compress: bool = False, first: int = 0,
               count: int = 0) -> None:
        """Queue a record (record_type None: raw bytes, the file header)."""
        self._raise_failure()
        self._queue.put((record_type, payload, compress, first, count))

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            if self._error is not None:
                continue  # drain: the failure is reported to the engine's thread
            record_type, payload, compress, first, count = item
            try:
                if record_type is None:
                    self._write(payload)
                else:
                    framed = frame_record(record_type, payload, compress)
                    self.records.append((record_type, self.offset, first, count))
                    self._write(framed)
            except OSError as exc:
                self._error = exc

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[self._file.write(view):]
        self.offset += len(data)

    def _raise_failure(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise RecordingError(f"cannot write the recording {self.path}: {error.strerror or error}")

    def finish(self) -> list:
        """Wait for every queued record to be written; returns the records written."""
        self._queue.put(None)
        self._thread.join()
        self._raise_failure()
        return self.records

    def write_last(self, data: bytes, keep: bool = True) -> None:
        """After finish(): the index and trailer, then close the file and, when it was written
        beside an existing one, rename it over that (keep) or remove it (not keep)."""
        try:
            self._write(data)
            self._file.close()
            if self._partial is None:
                self.committed = True
            elif keep:
                commit_partial(self._partial, self.path)
                self.committed = True
            else:
                self._partial.unlink()
        except OSError as exc:
            self.abandon()
            raise RecordingError(f"cannot write the recording {self.path}: {exc.strerror or exc}") from None

    def abandon(self) -> None:
        """Stop writing; a file written beside an existing one is removed (the existing one stays)."""
        self._queue.put(None)
        self._thread.join(timeout=5)
        try:
            self._file.close()
            if self._partial is not None and self._partial.exists():
                self._partial.unlink()
        except OSError:
            pass
