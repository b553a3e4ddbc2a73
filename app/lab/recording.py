"""Record a run to one file and read it back exactly as it happened: no model, no GPU.

`kvscope run --record` writes a recording, `kvscope gui --replay` and `kvscope export` read it.
docs/recording-format.md is the specification; this module is its reference implementation.

    file    = signature (10 bytes), u16 major, u16 minor, record..., [trailer]
    record  = frame (20 bytes: b"KR", type, flags, payload length, payload CRC32, frame CRC32)
              + payload
    payload = u32 head length, a JSON head, then the 1-D arrays the head names (raw little-endian)

A run is a HEADER record (the configuration), a KEYFRAME (a whole snapshot), then per chunk of
steps a STEPS record (batches, events, metrics) and a DELTAS record (what changed in the block
map and the request table at each step), a KEYFRAME now and then, and at close an INDEX record
plus a trailer that points at it, so a reader seeks without scanning. A file whose writer was
killed has no index: it is read up to its last complete record, with a warning.

Recording must cost about what the step costs, and a simulated step takes 15-50 microseconds:
diffing whole snapshots (five arrays of up to 500,000 blocks) every step would cost a hundred
times that. So a step notes only the blocks it could have changed: owner, ref count and hash of
the blocks its events name, of the requests that finished and of the blocks it filled up (the
prefix cache hashes those); state and fill of the blocks its batch wrote into, which follow from
the tokens computed. The diff against the previous state runs vectorised once per chunk. A
keyframe is the engine's own snapshot; at each one the recorder checks that its deltas arrived at
exactly that state and counts the blocks that did not (`delta_mismatches` in the index: 0).
"""

from __future__ import annotations

import dataclasses
import json
import operator
import queue
import struct
import threading
import time
import zlib
from collections import OrderedDict
from datetime import datetime, timezone
from itertools import chain
from pathlib import Path

import numpy as np

from kvscope.engine.config import ConfigError
from kvscope.engine.events import Event, EventKind
from kvscope.engine.request import RequestStatus
from kvscope.engine.snapshot import BLOCK_CACHED, BLOCK_FREE, BLOCK_RESERVED, BLOCK_USED, REQUEST_DTYPE, Snapshot

FORMAT_MAJOR = 1
FORMAT_MINOR = 0
SIGNATURE = b"\x89KVREC\r\n\x1a\n"  # PNG-style: a text-mode transfer or a 7-bit channel breaks it visibly
FILE_HEADER = struct.Struct("<10sHH")
FRAME_HEAD = struct.Struct("<2sBBQI")  # marker, type, flags, payload length, payload CRC32
FRAME = struct.Struct("<2sBBQII")  # ... + CRC32 of the 16 bytes before it
FRAME_MARKER = b"KR"
TRAILER = struct.Struct("<Q8sI")  # byte offset of the INDEX record, tag, CRC32 of the 16 bytes before it
TRAILER_TAG = b"KVRINDEX"
FLAG_ZLIB = 1

HEADER, KEYFRAME, STEPS, DELTAS, INDEX = 1, 2, 3, 4, 5
RECORD_NAMES = {HEADER: "header", KEYFRAME: "keyframe", STEPS: "steps", DELTAS: "deltas", INDEX: "index"}

CHUNK_STEPS = 2048  # steps per STEPS/DELTAS pair: the least a seek decodes
CHUNK_WALL_S = 1.0  # ... or fewer, so a killed recorder loses at most about a second of the run
COMPRESS_LEVEL = 1  # zlib: higher levels cost several times the time for a few percent of size
# Keyframes by default: the next one once the deltas since the last outweigh it (uncompressed), so
# keyframes take at most about half the file and a seek decodes at most about two keyframes' worth
# of bytes; never closer than MIN_KEYFRAME_STEPS steps, never further apart than MAX_KEYFRAME_STEPS.
MIN_KEYFRAME_STEPS = CHUNK_STEPS
MAX_KEYFRAME_STEPS = 4 * CHUNK_STEPS

BLOCK_FIELDS = ("owner", "state", "ref_cnt", "fill", "hash")
_BLOCK_DTYPES = {"owner": np.int64, "state": np.uint8, "ref_cnt": np.int32, "fill": np.uint16, "hash": np.uint64}
STEP_COLUMNS = (  # StepResult's scalar fields, in the order the recorder stores them
    ("step", np.int64), ("start_time_s", np.float64), ("duration_s", np.float64), ("num_running", np.int64),
    ("num_waiting", np.int64), ("kv_usage", np.float64), ("num_tokens", np.int64), ("num_prefill_tokens", np.int64),
    ("compute_time_s", np.float64), ("memory_time_s", np.float64), ("unused_slots", np.int64),
    ("num_preemptions", np.int64), ("num_output_tokens", np.int64),
)
SNAPSHOT_COLUMNS = (("time_s", np.float64), ("step", np.int64), ("kv_usage", np.float64),
                    ("num_running", np.int64), ("num_waiting", np.int64))
EVENT_COLUMNS = (("kind", np.int64), ("request_id", np.int64), ("time_s", np.float64), ("value", np.float64),
                 ("num_blocks", np.int64))
FINISHED_COLUMNS = (("step", np.int64), ("request_id", np.int64), ("finish_time_s", np.float64),
                    ("ttft_s", np.float64), ("queue_time_s", np.float64))
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


class RecordingError(ConfigError):
    """A recording that cannot be written or read; the message names the file and what is wrong."""


# -- payloads: a JSON head and named 1-D arrays ------------------------------------------------------


NARROW_MIN_SIZE = 64  # below this, finding the range costs more than the bytes it saves


def _narrowed(values: np.ndarray) -> np.ndarray:
    """The smallest integer dtype that holds every value (request ids fit in int32, ref counts in uint8)."""
    if values.dtype.kind not in "iu" or values.size < NARROW_MIN_SIZE or values.dtype.itemsize == 1:
        return values
    low, high = int(values.min()), int(values.max())
    for candidate in (np.uint8, np.int8, np.uint16, np.int16, np.uint32, np.int32):
        info = np.iinfo(candidate)
        if np.dtype(candidate).itemsize < values.dtype.itemsize and info.min <= low and high <= info.max:
            return values.astype(candidate)
    return values


def encode_payload(head: dict, arrays: dict, delta=()) -> bytes:
    """The JSON head (with an "arrays" map added) and the arrays' bytes. Arrays named in delta are
    stored as differences from their predecessor (integers only: exact, and runs compress)."""
    specs, parts, offset = {}, [], 0
    for name, values in arrays.items():
        values = np.ascontiguousarray(values)
        if values.ndim != 1 or values.dtype.kind not in "biuf":
            raise ValueError(f"array {name}: a recording holds 1-D numeric arrays, got {values.dtype} {values.shape}")
        spec = {}
        stored = values
        if name in delta and values.dtype.kind in "iu" and values.size:
            stored = np.diff(values.astype(np.int64), prepend=np.int64(0))
            spec["delta"] = True
        stored = _narrowed(stored)
        stored = stored.astype(stored.dtype.newbyteorder("<"), copy=False)
        spec.update(dtype=stored.dtype.str, count=int(stored.size), offset=offset)
        if stored.dtype != values.dtype:
            spec["as"] = values.dtype.newbyteorder("<").str  # the dtype the reader restores
        specs[name] = spec
        raw = stored.tobytes()
        parts.append(raw)
        pad = -len(raw) % 8
        if pad:
            parts.append(bytes(pad))
        offset += len(raw) + pad
    text = json.dumps({**head, "arrays": specs}, separators=(",", ":"), default=str).encode("utf-8")
    return struct.pack("<I", len(text)) + text + b"".join(parts)


def decode_payload(payload: bytes, where: str) -> tuple[dict, dict]:
    """(head, arrays); arrays come back in the dtypes the writer had (views of the payload when
    stored as they were)."""
    try:
        (head_len,) = struct.unpack_from("<I", payload, 0)
        head = json.loads(payload[4:4 + head_len].decode("utf-8"))
        base = 4 + head_len
        arrays = {}
        for name, spec in head.get("arrays", {}).items():
            dtype = np.dtype(spec["dtype"])
            if dtype.kind not in "biuf":
                raise ValueError(f"array {name} has dtype {dtype}")
            count, offset = int(spec["count"]), int(spec["offset"])
            if count < 0 or offset < 0 or base + offset + count * dtype.itemsize > len(payload):
                raise ValueError(f"array {name} runs past the end of the record")
            values = np.frombuffer(payload, dtype=dtype, count=count, offset=base + offset)
            if spec.get("delta"):
                values = np.cumsum(values, dtype=np.int64)
            if "as" in spec:
                values = values.astype(np.dtype(spec["as"]))
            arrays[name] = values
    except (struct.error, UnicodeDecodeError, ValueError, TypeError, KeyError, IndexError) as exc:
        raise RecordingError(f"{where} is malformed ({exc}): the file is corrupt") from None
    return head, arrays


def _frame(record_type: int, payload: bytes, compress: bool) -> bytes:
    flags = 0
    if compress:
        payload = zlib.compress(payload, COMPRESS_LEVEL)
        flags |= FLAG_ZLIB
    head = FRAME_HEAD.pack(FRAME_MARKER, record_type, flags, len(payload), zlib.crc32(payload))
    return head + struct.pack("<I", zlib.crc32(head)) + payload


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


def _offsets(counts: np.ndarray) -> np.ndarray:
    out = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=out[1:])
    return out


# -- writing -----------------------------------------------------------------------------------------


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
        self._writer.append(None, FILE_HEADER.pack(SIGNATURE, FORMAT_MAJOR, FORMAT_MINOR))
        self._write_record(HEADER, encode_payload(self._header(run_info or {}), {}), compress=False, first=0, count=0)
        # Blocks each request holds, rebuilt from the events: a finished request's list is gone
        # from the engine by the time its step returns, and its blocks are what the step freed.
        self._block_lists = {r.request_id: list(r.block_ids) for r in engine.requests.values() if r.block_ids}
        self._finished_seen = len(engine.metrics.ttft)
        self._mirror: dict[str, np.ndarray] = {}
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
            index, owner, ref_cnt, block_hash = (np.zeros(0, _BLOCK_DTYPES[f]) for f in ("owner", "owner", "ref_cnt", "hash"))
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
        self._mirror = {field: np.array(values, dtype=_BLOCK_DTYPES[field]) for field, values in arrays.items()}
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

    def close(self, summary: dict | None = None, note: str | None = None) -> int:
        """Write what is buffered, the index and the trailer; returns the file size in bytes.
        note says why a run ended early (an interruption, an engine error), for the reader."""
        if self._closed:
            return self._writer.offset
        self._closed = True
        self._flush_chunk()
        records = self._writer.finish()
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
        index = _frame(INDEX, encode_payload(head, arrays), compress=False)
        trailer_head = TRAILER.pack(index_offset, TRAILER_TAG, 0)[:16]
        self._writer.write_last(index + trailer_head + struct.pack("<I", zlib.crc32(trailer_head)))
        return self._writer.offset


class _RecordWriter:
    """Appends records to the file in order. Compressing and writing run on a thread of their own
    (zlib and write() release the interpreter lock), so the engine's thread only encodes."""

    QUEUED = 4  # records in flight at most: memory stays bounded if the disk is slow

    def __init__(self, path: Path):
        self.path = path
        try:
            self._file = open(path, "wb", buffering=0)  # unbuffered: each record is one write() call
        except OSError as exc:
            raise RecordingError(f"cannot write the recording {path}: {exc.strerror or exc}") from None
        self.offset = 0
        self.records: list[tuple[int, int, int, int]] = []  # (type, offset, first, count), in file order
        self._error: OSError | None = None
        self._queue: queue.Queue = queue.Queue(maxsize=self.QUEUED)
        self._thread = threading.Thread(target=self._run, name="kvscope-recorder", daemon=True)
        self._thread.start()

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
                    framed = _frame(record_type, payload, compress)
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

    def write_last(self, data: bytes) -> None:
        """After finish(): the index and trailer, then close the file."""
        try:
            self._write(data)
            self._file.close()
        except OSError as exc:
            raise RecordingError(f"cannot write the recording {self.path}: {exc.strerror or exc}") from None


# -- reading -----------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _RecordEntry:
    number: int  # 0-based position in the file, as error messages count records
    type: int
    offset: int
    first: int  # first step (STEPS, DELTAS) or position (KEYFRAME)
    count: int  # steps in a STEPS or DELTAS record


class Recording:
    """A recording opened for reading. Steps are numbered 0 .. num_steps - 1 in the order they were
    recorded (StepResult.step is kept as the engine set it: a step the device ran out of memory in
    repeats the next step's number). snapshot_at(i) is the engine's snapshot right after step i.
    Its caches make it a one-thread object: the replay thread owns the one a ReplayWorker opens."""

    CACHED_CHUNKS = 16

    def __init__(self, path: Path, reader, header: dict, entries: list, index_head: dict | None,
                 warning: str | None, file_size: int):
        self.path = path
        self._handle = reader
        self.header = header
        self.file_size = file_size
        self.warning = warning  # set when the file was not closed: it holds the steps up to its end
        self.closed = index_head is not None
        self.summary = index_head.get("summary") if index_head else None
        self.note = index_head.get("note") if index_head else None
        self.delta_mismatches = index_head.get("delta_mismatches", 0) if index_head else 0
        self._entries = entries
        steps = [e for e in entries if e.type == STEPS]
        deltas = {e.first: e for e in entries if e.type == DELTAS}
        # A chunk counts only when both its records are whole (a cut file may end between them).
        self._chunks = [(s, deltas[s.first]) for s in steps if s.first in deltas and deltas[s.first].count == s.count]
        expected = 0
        for s, _ in self._chunks:
            if s.first != expected or s.count < 1:
                raise RecordingError(f"{path.name}: record {s.number} holds steps from {s.first:,}, expected "
                                     f"{expected:,}: the file is corrupt")
            expected += s.count
        self._chunk_first = np.array([s.first for s, _ in self._chunks], dtype=np.int64)
        self.num_steps = sum(s.count for s, _ in self._chunks)
        self._keyframes = sorted((e.first, e) for e in entries if e.type == KEYFRAME and e.first <= self.num_steps)
        if not self._keyframes or self._keyframes[0][0] != 0:
            raise RecordingError(f"{path.name} holds no snapshot of the pool's start (its first keyframe): "
                                 "it is incomplete or corrupt")
        self._keyframe_positions = np.array([p for p, _ in self._keyframes], dtype=np.int64)
        kinds = []
        for name in header.get("event_kinds", []):
            try:
                kinds.append(EventKind(name))
            except ValueError:
                raise RecordingError(f"{path.name} holds events of kind {name!r}, unknown to this kvscope: "
                                     "open it with the kvscope that wrote it") from None
        self._event_kinds = kinds
        self.block_size = int(header["block_size"])
        self.num_blocks = int(header["num_blocks"])
        self._decoded: OrderedDict = OrderedDict()
        self._cursor: dict | None = None
        self._series: dict | None = None

    # -- opening -----------------------------------------------------------------------------------
    @classmethod
    def open(cls, path, verify: bool = True, allow_truncated: bool = False) -> "Recording":
        """Open a recording. verify checks every record's checksum now (reading the whole file once)
        rather than when a record is first used. A file cut mid-record is an error unless
        allow_truncated, which reads it up to its last complete record (with a warning)."""
        path = Path(path)
        name = path.name
        if path.is_dir():
            raise RecordingError(f"{path} is a folder, not a recording")
        try:
            handle = open(path, "rb")
        except FileNotFoundError:
            raise RecordingError(f"{path}: no such file") from None
        except OSError as exc:
            raise RecordingError(f"cannot read {path}: {exc.strerror or exc}") from None
        try:
            size = handle.seek(0, 2)
            handle.seek(0)
            start = handle.read(FILE_HEADER.size)
            if len(start) < len(SIGNATURE) or not start.startswith(SIGNATURE):
                if SIGNATURE.startswith(start):
                    raise RecordingError(f"{name} is truncated: it ends at byte {size:,}, inside the file signature")
                raise RecordingError(f"{name} is not a kvscope recording (it does not start with the .kvrec signature)")
            if len(start) < FILE_HEADER.size:
                raise RecordingError(f"{name} is truncated: it ends at byte {size:,}, inside the file header")
            _, major, minor = FILE_HEADER.unpack(start)
            if major > FORMAT_MAJOR:
                raise RecordingError(
                    f"{name} uses recording format {major}.{minor}, newer than this kvscope reads "
                    f"({FORMAT_MAJOR}.x): open it with a newer kvscope")
            reader = _RecordReader(handle, name, size)
            entries, index_head = reader.index_from_trailer()
            warning = None
            if entries is None:
                entries, index_head, warning = reader.scan(allow_truncated)  # checks every checksum on the way
            elif verify:
                reader.verify(entries)
            if not entries or entries[0].type != HEADER:
                raise RecordingError(f"{name}: its first record is not a header: the file is corrupt")
            header, _ = decode_payload(reader.payload(entries[0]), f"{name}: record 0 (the header)")
            version = header.get("format_version", [major, minor])
            if not isinstance(version, list) or not version or int(version[0]) > FORMAT_MAJOR:
                raise RecordingError(f"{name} uses recording format {version}, newer than this kvscope reads "
                                     f"({FORMAT_MAJOR}.x): open it with a newer kvscope")
            for key in ("block_size", "num_blocks"):
                if not isinstance(header.get(key), int) or header[key] < 1:
                    raise RecordingError(f"{name}: the header's {key} is missing or invalid: the file is corrupt")
            recording = cls(path, reader, header, entries, index_head, warning, size)
        except BaseException:
            handle.close()
            raise
        if warning is not None:
            held = (f"step {recording.num_steps - 1:,}" if recording.num_steps else "no step")
            recording.warning = warning.format(last=held)
        return recording

    def close(self) -> None:
        self._handle.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def verify(self) -> None:
        """Check every record's checksum; raises RecordingError naming the first that fails."""
        self._handle.verify(self._entries)

    # -- steps -------------------------------------------------------------------------------------
    def _chunk_of(self, i: int) -> int:
        if not 0 <= i < self.num_steps:
            raise IndexError(f"step {i} is outside the recording's steps 0 .. {self.num_steps - 1}")
        return int(np.searchsorted(self._chunk_first, i, side="right")) - 1

    def _decoded_record(self, entry: _RecordEntry):
        key = entry.offset
        cached = self._decoded.get(key)
        if cached is not None:
            self._decoded.move_to_end(key)
            return cached
        what = f"{self.path.name}: record {entry.number} (the {RECORD_NAMES.get(entry.type, 'unknown')} record at byte {entry.offset:,})"
        head, arrays = decode_payload(self._handle.payload(entry), what)
        if entry.type == STEPS:
            arrays["batch.offsets"] = _offsets(arrays["step.batch_size"])
            arrays["event.offsets"] = _offsets(arrays["step.num_events"])
            arrays["event.block_offsets"] = _offsets(arrays["event.num_blocks"])
        elif entry.type == DELTAS:
            for field in BLOCK_FIELDS:
                arrays[f"{field}.offsets"] = _offsets(arrays[f"{field}.counts"])
            arrays["upsert.offsets"] = _offsets(arrays["upsert.counts"])
            rows = list(zip(*(arrays[f"upsert.{name}"].tolist() for name in REQUEST_DTYPE.names)))
            in_order = [None] * len(rows)
            for position, row in zip(arrays["upsert.order"].tolist(), rows):
                in_order[position] = row
            arrays["upsert.rows"] = in_order
            arrays["removed.offsets"] = _offsets(arrays["removed.counts"])
        self._decoded[key] = (head, arrays)
        if len(self._decoded) > self.CACHED_CHUNKS:
            self._decoded.popitem(last=False)
        return head, arrays

    def step(self, i: int):
        """Step i as the engine returned it: a StepResult with its events."""
        from kvscope.engine.engine import StepResult

        chunk = self._chunk_of(i)
        steps_entry, _ = self._chunks[chunk]
        head, a = self._decoded_record(steps_entry)
        j = i - steps_entry.first
        b0, b1 = a["batch.offsets"][j], a["batch.offsets"][j + 1]
        e0, e1 = a["event.offsets"][j], a["event.offsets"][j + 1]
        return StepResult(
            int(a["step.step"][j]), float(a["step.start_time_s"][j]), float(a["step.duration_s"][j]),
            a["batch.request_id"][b0:b1].tolist(), a["batch.num_new_tokens"][b0:b1].tolist(),
            a["batch.is_prefill"][b0:b1].tolist(), self._events(head, a, e0, e1),
            int(a["step.num_running"][j]), int(a["step.num_waiting"][j]), float(a["step.kv_usage"][j]),
            int(a["step.num_tokens"][j]), int(a["step.num_prefill_tokens"][j]), float(a["step.compute_time_s"][j]),
            float(a["step.memory_time_s"][j]), int(a["step.unused_slots"][j]), int(a["step.num_preemptions"][j]),
            int(a["step.num_output_tokens"][j]),
        )

    def steps(self, start: int, stop: int) -> list:
        """Steps start .. stop - 1."""
        return [self.step(i) for i in range(max(start, 0), min(stop, self.num_steps))]

    def _events(self, head: dict, a: dict, e0: int, e1: int) -> list:
        kinds, details = self._event_kinds, head.get("event_details", {})
        block_offsets, blocks = a["event.block_offsets"], a["event.blocks"]
        out = []
        for k in range(e0, e1):
            out.append(Event(kinds[a["event.kind"][k]], int(a["event.request_id"][k]), float(a["event.time_s"][k]),
                             tuple(blocks[block_offsets[k]:block_offsets[k + 1]].tolist()),
                             float(a["event.value"][k]), details.get(str(k), "")))
        return out

    def events_between(self, start: int, stop: int) -> list:
        """The events of steps start .. stop - 1, in order."""
        start, stop = max(start, 0), min(stop, self.num_steps)
        out = []
        i = start
        while i < stop:
            entry, _ = self._chunks[self._chunk_of(i)]
            head, a = self._decoded_record(entry)
            j0, j1 = i - entry.first, min(stop, entry.first + entry.count) - entry.first
            out += self._events(head, a, a["event.offsets"][j0], a["event.offsets"][j1])
            i = entry.first + j1
        return out

    # -- snapshots ---------------------------------------------------------------------------------
    def initial_snapshot(self) -> Snapshot:
        """The engine's snapshot before the first recorded step."""
        return self._snapshot_at_position(0)

    def snapshot_at(self, i: int) -> Snapshot:
        """The engine's snapshot right after step i: the nearest keyframe, then the deltas up to i."""
        self._chunk_of(i)
        return self._snapshot_at_position(i + 1)

    def _snapshot_at_position(self, position: int) -> Snapshot:
        cursor = self._cursor
        keyframe = int(self._keyframe_positions[np.searchsorted(self._keyframe_positions, position, side="right") - 1])
        if cursor is None or cursor["position"] > position or cursor["position"] < keyframe:
            cursor = self._cursor = self._load_keyframe(keyframe)
        if cursor["position"] < position:
            self._apply_deltas(cursor, cursor["position"], position)
        b = cursor["blocks"]
        table = np.array(list(cursor["table"].values()), dtype=REQUEST_DTYPE) if cursor["table"] else \
            np.zeros(0, dtype=REQUEST_DTYPE)
        s = cursor["scalars"]
        return Snapshot(time_s=s[0], step=s[1], block_size=self.block_size, block_owner=b["owner"].copy(),
                        block_state=b["state"].copy(), block_ref_cnt=b["ref_cnt"].copy(),
                        block_fill=b["fill"].copy(), block_hash=b["hash"].copy(), requests=table,
                        kv_usage=s[2], num_running=s[3], num_waiting=s[4])

    def _load_keyframe(self, position: int) -> dict:
        entry = self._keyframes[int(np.searchsorted(self._keyframe_positions, position))][1]
        what = f"{self.path.name}: record {entry.number} (the keyframe record at byte {entry.offset:,})"
        head, a = decode_payload(self._handle.payload(entry), what)
        blocks = {}
        for field in BLOCK_FIELDS:
            values = a.get(field)
            if values is None or len(values) != self.num_blocks:
                raise RecordingError(f"{what} has no {field} array for {self.num_blocks:,} blocks: the file is corrupt")
            blocks[field] = values.astype(_BLOCK_DTYPES[field])  # a writable copy
        rows = np.zeros(len(a["request.request_id"]), dtype=REQUEST_DTYPE)
        for name in REQUEST_DTYPE.names:
            if f"request.{name}" in a:
                rows[name] = a[f"request.{name}"]
        table = {int(row[0]): row for row in rows.tolist()}
        scalars = (float(head["time_s"]), int(head["step"]), float(head["kv_usage"]), int(head["num_running"]),
                   int(head["num_waiting"]))
        return {"position": position, "blocks": blocks, "table": table, "scalars": scalars}

    def _apply_deltas(self, cursor: dict, start: int, stop: int) -> None:
        """Advance the cursor from position start to stop: apply the deltas of steps start .. stop - 1."""
        pending = {field: ([], []) for field in BLOCK_FIELDS}
        table = cursor["table"]
        i = start
        while i < stop:
            steps_entry, entry = self._chunks[self._chunk_of(i)]
            _, a = self._decoded_record(entry)
            _, s = self._decoded_record(steps_entry)
            j0, j1 = i - entry.first, min(stop, entry.first + entry.count) - entry.first
            for field in BLOCK_FIELDS:
                offsets = a[f"{field}.offsets"]
                lo, hi = offsets[j0], offsets[j1]
                if hi > lo:
                    pending[field][0].append(a[f"{field}.index"][lo:hi])
                    pending[field][1].append(a[f"{field}.value"][lo:hi])
            upsert_offsets, removed_offsets = a["upsert.offsets"], a["removed.offsets"]
            removed, rows = a["removed.request_id"], a["upsert.rows"]
            batch_offsets, batch_ids = s["batch.offsets"], s["batch.request_id"]
            entry_computed, entry_tokens = a["entry.num_computed_tokens"], a["entry.num_tokens"]
            for j in range(j0, j1):
                b0, b1 = batch_offsets[j], batch_offsets[j + 1]
                if b1 > b0:
                    end = float(s["step.start_time_s"][j] + s["step.duration_s"][j])  # as the engine adds them
                    for rid, computed, tokens in zip(batch_ids[b0:b1].tolist(), entry_computed[b0:b1].tolist(),
                                                     entry_tokens[b0:b1].tolist()):
                        row = table.get(rid)
                        if computed < 0 or row is None:
                            continue
                        outputs = tokens - row[2]
                        ttft = row[10]
                        if ttft != ttft and outputs > 0:  # NaN until the first token, sampled at the step's end
                            ttft = end - row[9]
                        table[rid] = (*row[:3], outputs, row[4], computed, *row[6:10], ttft)
                for row in rows[upsert_offsets[j]:upsert_offsets[j + 1]]:
                    table[row[0]] = row
                for rid in removed[removed_offsets[j]:removed_offsets[j + 1]].tolist():
                    table.pop(rid, None)
            last = j1 - 1
            cursor["scalars"] = (float(a["snapshot.time_s"][last]), int(a["snapshot.step"][last]),
                                 float(a["snapshot.kv_usage"][last]), int(a["snapshot.num_running"][last]),
                                 int(a["snapshot.num_waiting"][last]))
            i = entry.first + j1
        for field, (indices, values) in pending.items():
            if not indices:
                continue
            index, value = np.concatenate(indices), np.concatenate(values)
            if len(indices) > 1:  # a block changed at several steps: the last value wins
                index, value = index[::-1], value[::-1]
                index, first = np.unique(index, return_index=True)
                value = value[first]
            cursor["blocks"][field][index] = value
        cursor["position"] = stop

    # -- whole-run views ---------------------------------------------------------------------------
    def _all(self, prefix: str, which: int = 0) -> dict:
        parts: dict[str, list] = {}
        for pair in self._chunks:
            _, a = self._decoded_record(pair[which])
            for name, values in a.items():
                if name.startswith(prefix) and not name.endswith("offsets"):
                    parts.setdefault(name[len(prefix):], []).append(values)
        return {name: np.concatenate(values) for name, values in parts.items()}

    def series(self) -> dict:
        """Per-step arrays: time_s (end of the step on the engine clock), duration_s, kv_usage (share
        of blocks held during the step), num_running, num_waiting, output_tokens, compute_utilization
        (compute-bound floor / step time), preemptions, and step (StepResult.step), start_time_s,
        batch_size, num_tokens, num_prefill_tokens, unused_slots, compute_time_s, memory_time_s."""
        if self._series is None:
            s = self._all("step.")
            if not s:
                s = {name: np.zeros(0, dtype) for name, dtype in (*STEP_COLUMNS, ("batch_size", np.int64))}
            duration = s["duration_s"]
            with np.errstate(divide="ignore", invalid="ignore"):
                utilization = np.where(duration > 0, s["compute_time_s"] / np.where(duration > 0, duration, 1), 0.0)
            self._series = {
                "step": s["step"], "start_time_s": s["start_time_s"], "time_s": s["start_time_s"] + duration,
                "duration_s": duration, "kv_usage": s["kv_usage"], "num_running": s["num_running"],
                "num_waiting": s["num_waiting"], "output_tokens": s["num_output_tokens"],
                "compute_utilization": utilization, "preemptions": s["num_preemptions"],
                "batch_size": s["batch_size"], "num_tokens": s["num_tokens"],
                "num_prefill_tokens": s["num_prefill_tokens"], "unused_slots": s["unused_slots"],
                "compute_time_s": s["compute_time_s"], "memory_time_s": s["memory_time_s"],
            }
        return self._series

    def finished_requests(self) -> dict:
        """Finished requests in finishing order: step (recording index), request_id, finish_time_s,
        ttft_s, queue_time_s."""
        f = self._all("finished.")
        return f or {name: np.zeros(0, dtype) for name, dtype in FINISHED_COLUMNS}

    def event_counts(self) -> dict:
        """How many events of each kind the run had, by EventKind value."""
        kinds = self._all("event.").get("kind", np.zeros(0, dtype=np.int64))
        counts = np.bincount(kinds, minlength=len(self._event_kinds))
        return {kind.value: int(n) for kind, n in zip(self._event_kinds, counts)}

    def events_of_kind(self, kind: EventKind) -> dict:
        """Every event of one kind as arrays: step (recording index), request_id, time_s, value."""
        events = self._all("event.")
        if not events:
            return {name: np.zeros(0, dtype) for name, dtype in
                    (("step", np.int64), ("request_id", np.int64), ("time_s", np.float64), ("value", np.float64))}
        step_of = np.repeat(np.arange(self.num_steps), self._all("step.")["num_events"])
        picked = events["kind"] == self._event_kinds.index(kind) if kind in self._event_kinds else \
            np.zeros(len(step_of), dtype=bool)
        return {"step": step_of[picked], "request_id": events["request_id"][picked],
                "time_s": events["time_s"][picked], "value": events["value"][picked]}

    @property
    def duration_s(self) -> float:
        """Engine clock from 0 to the end of the last step."""
        t = self.series()["time_s"]
        return float(t.max()) if len(t) else 0.0


class _RecordReader:
    """Frames and checksums: finds the records of a file and reads their payloads."""

    def __init__(self, handle, name: str, size: int):
        self.handle = handle
        self.name = name
        self.size = size
        self._lock = threading.Lock()  # one file position: a seek and its read go together

    def close(self) -> None:
        self.handle.close()

    def _read(self, offset: int, n: int) -> bytes:
        with self._lock:
            self.handle.seek(offset)
            return self.handle.read(n)

    def _frame_at(self, number: int, offset: int, kind: str = "") -> tuple[int, int, int, int]:
        """(type, flags, payload length, payload CRC) of the frame at offset, or a RecordingError."""
        raw = self._read(offset, FRAME.size)
        if len(raw) < FRAME.size:
            raise _Truncated(number, offset, FRAME.size)
        marker, record_type, flags, length, crc, frame_crc = FRAME.unpack(raw)
        if marker != FRAME_MARKER or zlib.crc32(raw[:16]) != frame_crc:
            raise RecordingError(f"{self.name}: record {number}{kind} at byte {offset:,} has a damaged frame "
                                 "(its marker or frame checksum is wrong): the file is corrupt")
        return record_type, flags, length, crc

    def payload(self, entry: _RecordEntry, label: str | None = None) -> bytes:
        """The record's payload, checksum verified and decompressed."""
        try:
            record_type, flags, length, crc = self._frame_at(entry.number, entry.offset)
        except _Truncated:
            raise RecordingError(f"{self.name} is truncated: record {entry.number} at byte {entry.offset:,} "
                                 f"lies past the end of the file at byte {self.size:,}") from None
        what = label or (f"record {entry.number} (a {RECORD_NAMES.get(record_type, f'type-{record_type}')} record "
                         f"at byte {entry.offset:,})")
        data = self._read(entry.offset + FRAME.size, length)
        if len(data) < length:
            raise RecordingError(f"{self.name} is truncated: {what} ends past the end of the file at byte {self.size:,}")
        if zlib.crc32(data) != crc:
            raise RecordingError(f"{self.name}: {what} fails its checksum: the file is corrupt")
        if flags & FLAG_ZLIB:
            try:
                data = zlib.decompress(data)
            except zlib.error as exc:
                raise RecordingError(f"{self.name}: {what} cannot be decompressed ({exc}): the file is corrupt") from None
        return data

    def verify(self, entries) -> None:
        for entry in entries:
            self.payload(entry)

    def index_from_trailer(self):
        """(entries, index head) from the INDEX record the trailer points at; (None, None) when the
        file has no valid trailer (its writer never closed it)."""
        if self.size < FILE_HEADER.size + TRAILER.size:
            return None, None
        raw = self._read(self.size - TRAILER.size, TRAILER.size)
        index_offset, tag, crc = TRAILER.unpack(raw)
        if tag != TRAILER_TAG or zlib.crc32(raw[:16]) != crc or not FILE_HEADER.size <= index_offset < self.size:
            return None, None
        probe = _RecordEntry(-1, INDEX, index_offset, 0, 0)
        label = f"the index record (at byte {index_offset:,})"
        try:
            record_type = self._frame_at(-1, index_offset)[0]
        except (_Truncated, RecordingError):
            raise RecordingError(f"{self.name}: {label} has a damaged frame: the file is corrupt") from None
        if record_type != INDEX:
            raise RecordingError(f"{self.name}: the trailer points at byte {index_offset:,}, which holds no index "
                                 "record: the file is corrupt")
        head, a = decode_payload(self.payload(probe, label), f"{self.name}: {label}")
        columns = [a.get(f"record.{name}") for name in ("type", "offset", "first", "count")]
        if any(c is None for c in columns) or len({len(c) for c in columns}) != 1:
            raise RecordingError(f"{self.name}: {label} is malformed: the file is corrupt")
        entries = [_RecordEntry(n, t, o, f, c) for n, (t, o, f, c) in enumerate(zip(*(c.tolist() for c in columns)))]
        for entry in entries:
            if not FILE_HEADER.size <= entry.offset < index_offset:
                raise RecordingError(f"{self.name}: the index points at byte {entry.offset:,}, outside the records: "
                                     "the file is corrupt")
        return entries, head

    def scan(self, allow_truncated: bool):
        """Walk the records from the start (a file with no index: its writer did not close it)."""
        entries: list[_RecordEntry] = []
        offset, number = FILE_HEADER.size, 0
        complete_steps = 0  # steps whose STEPS and DELTAS records are both whole
        pending_steps: dict[int, int] = {}
        while offset < self.size:
            try:
                record_type, flags, length, _ = self._frame_at(number, offset)
                if offset + FRAME.size + length > self.size:
                    raise _Truncated(number, offset, FRAME.size + length)
            except _Truncated as cut:
                message = (f"{self.name} is truncated: "
                           + (f"the last complete step is {complete_steps - 1:,}" if complete_steps
                              else "it holds no complete step")
                           + f"; it ends mid-record at byte {self.size:,} (record {cut.number} starts at byte "
                             f"{cut.offset:,} and needs {cut.needed:,} bytes)")
                if number == 0 or not allow_truncated:
                    raise RecordingError(message) from None
                return entries, None, message
            entry = _RecordEntry(number, record_type, offset, 0, 0)
            if record_type in (STEPS, DELTAS, KEYFRAME, INDEX):
                head, _ = decode_payload(self.payload(entry), f"{self.name}: record {number}")
                if record_type == KEYFRAME:
                    entry = dataclasses.replace(entry, first=int(head.get("position", -1)))
                elif record_type in (STEPS, DELTAS):
                    entry = dataclasses.replace(entry, first=int(head["first_step"]), count=int(head["num_steps"]))
                    seen = pending_steps.pop(entry.first, None)
                    if seen is None:
                        pending_steps[entry.first] = entry.count
                    else:
                        complete_steps = max(complete_steps, entry.first + entry.count)
                elif record_type == INDEX:
                    return entries, head, None  # whole, but its trailer was damaged: the index is enough
            else:
                self.payload(entry)  # checks the checksum of the header and of types a newer minor added
            entries.append(entry)
            offset += FRAME.size + length
            number += 1
        if not entries:
            raise RecordingError(f"{self.name} is truncated: it ends at byte {self.size:,}, before its header record")
        return entries, None, (f"{self.name} was not closed (the process recording it stopped before writing its "
                               "index): it is read up to its last complete record, which holds {last}")


class _Truncated(Exception):
    def __init__(self, number: int, offset: int, needed: int):
        super().__init__(number, offset, needed)
        self.number, self.offset, self.needed = number, offset, needed
