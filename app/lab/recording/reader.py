"""Read a .kvrec file back exactly as it was recorded: steps, events and any step's snapshot.

`kvscope gui --replay`, `kvscope export` and the replay host open one through Recording.open.
A seek loads the nearest keyframe and applies the deltas after it; a file whose writer was
killed has no index: it is read up to its last complete record, with a warning.
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

import numpy as np

from kvscope.app.lab.recording.format import (
    BLOCK_DTYPES,
    BLOCK_FIELDS,
    DELTAS,
    FINISHED_COLUMNS,
    KEYFRAME,
    RECORD_NAMES,
    STEP_COLUMNS,
    STEPS,
    RecordingError,
    decode_payload,
)
from kvscope.app.lab.recording.records import RecordEntry, is_attached, open_records
from kvscope.app.lab.recording.schema import check_keyframe, check_record, delta_limits
from kvscope.engine.events import Event, EventKind
from kvscope.engine.snapshot import REQUEST_DTYPE, Snapshot


def _offsets(counts: np.ndarray) -> np.ndarray:
    out = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=out[1:])
    return out


# a Python tuple of REQUEST_DTYPE's 11 fields, and the int and float objects in it
ROW_OBJECT_BYTES = 56 + 8 * len(REQUEST_DTYPE.names) + 32 * len(REQUEST_DTYPE.names)


def _held_bytes(payload: bytes, arrays: dict) -> int:
    """What a decoded record keeps alive: its inflated payload (which the arrays stored as they were
    view), the arrays restored or derived from it, and the request rows made Python tuples."""
    held = len(payload)
    for name, values in arrays.items():
        if isinstance(values, np.ndarray):
            held += values.nbytes if values.flags.owndata else 0
        else:
            held += len(values) * (8 + ROW_OBJECT_BYTES)
    return held


class Recording:
    """A recording opened for reading. Steps are numbered 0 .. num_steps - 1 in the order they were
    recorded (StepResult.step is kept as the engine set it: a step the device ran out of memory in
    repeats the next step's number). snapshot_at(i) is the engine's snapshot right after step i.
    Its caches make it a one-thread object: a replay session owns the one it opens."""

    CACHED_CHUNKS = 16
    # ... and at most this many bytes of them, decoded: a normal chunk holds a few MB, but a record
    # may inflate to MAX_RECORD_BYTES, and 16 of those held 8 GB. The two records last used (a
    # chunk's steps and deltas, which a seek reads in turn) are kept even when larger: dropping
    # either would decode both again at every step read from them.
    CACHED_BYTES = 256 * 1024**2
    ALWAYS_CACHED = 2

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
                raise RecordingError(f"{path.name} holds events of kind {name!r:.40}, unknown to this kvscope: "
                                     "open it with the kvscope that wrote it") from None
        self._event_kinds = kinds
        self.block_size = header["block_size"]
        self.num_blocks = header["num_blocks"]
        self._decoded: OrderedDict = OrderedDict()  # record offset -> (head, arrays, bytes held)
        self._decoded_bytes = 0
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
        opened = open_records(path, allow_truncated)
        if is_attached(opened.header):
            opened.handle.close()
            raise RecordingError(f"{name} is a recording of an attached vLLM server, not of an engine run: "
                                 "`kvscope gui --replay` replays it, `kvscope export --csv` writes its metric series")
        warning = opened.warning
        try:
            recording = cls(path, opened.reader, opened.header, opened.entries, opened.index_head, warning,
                            opened.size)
            if verify:
                recording.verify()
            recording.initial_snapshot()  # a file without a readable start is refused when opened, not later
        except BaseException:
            opened.handle.close()
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
        """Check every record's checksum and the structure of every keyframe and chunk of steps
        (recording/schema.py); raises RecordingError naming the first that fails."""
        last = {}  # the previous chunk's last step number and start time: each chunk checks only its own order
        for entry in self._entries:
            payload = self._handle.payload(entry)
            if entry.type not in (STEPS, DELTAS, KEYFRAME):
                continue
            what = self._record_name(entry)
            head, arrays = decode_payload(payload, what, max_counts=self._limits(entry))
            if entry.type == KEYFRAME:
                check_keyframe(head, arrays, self.num_blocks, what)
            else:
                check_record(entry.type, head, arrays, entry.count, self.num_blocks, len(self._event_kinds), what)
            if entry.type == STEPS and entry.count:
                self._check_after_previous_chunk(arrays, last, what)

    @staticmethod
    def _check_after_previous_chunk(arrays: dict, last: dict, what: str) -> None:
        """A chunk's first step after the one before it: a later chunk whose clock restarted (or whose step
        numbers did) was exported and replayed as it came, a timeline folded over itself."""
        for name in ("step.step", "step.start_time_s"):
            values = arrays[name]
            if name in last and values[0] < last[name]:
                raise RecordingError(f"{what}: {name} goes backwards from the chunk before it ({last[name]!s:.24} "
                                     f"then {values[0]!s:.24}); a recording's steps are in order: the file is corrupt")
            last[name] = values[-1]

    def _record_name(self, entry: RecordEntry) -> str:
        return (f"{self.path.name}: record {entry.number} (the {RECORD_NAMES.get(entry.type, 'unknown')} record at "
                f"byte {entry.offset:,})")

    # -- steps -------------------------------------------------------------------------------------
    def _chunk_of(self, i: int) -> int:
        if not 0 <= i < self.num_steps:
            raise IndexError(f"step {i} is outside the recording's steps 0 .. {self.num_steps - 1}")
        return int(np.searchsorted(self._chunk_first, i, side="right")) - 1

    def _limits(self, entry: RecordEntry) -> dict | None:
        return delta_limits(entry.count, self.num_blocks) if entry.type == DELTAS else None

    def _decoded_record(self, entry: RecordEntry):
        key = entry.offset
        cached = self._decoded.get(key)
        if cached is not None:
            self._decoded.move_to_end(key)
            return cached[:2]
        what = self._record_name(entry)
        payload = self._handle.payload(entry)
        head, arrays = decode_payload(payload, what, max_counts=self._limits(entry))
        check_record(entry.type, head, arrays, entry.count, self.num_blocks, len(self._event_kinds), what)
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
        self._keep_decoded(key, head, arrays, _held_bytes(payload, arrays))
        return head, arrays

    def _keep_decoded(self, key: int, head: dict, arrays: dict, size: int) -> None:
        """Cache a decoded record, dropping the least recently used beyond CACHED_CHUNKS records
        or CACHED_BYTES bytes (never the ALWAYS_CACHED last used)."""
        self._decoded[key] = (head, arrays, size)
        self._decoded_bytes += size
        while len(self._decoded) > self.ALWAYS_CACHED and (len(self._decoded) > self.CACHED_CHUNKS
                                                           or self._decoded_bytes > self.CACHED_BYTES):
            self._decoded_bytes -= self._decoded.popitem(last=False)[1][2]

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
        try:
            table = np.array(list(cursor["table"].values()), dtype=REQUEST_DTYPE) if cursor["table"] else \
                np.zeros(0, dtype=REQUEST_DTYPE)
        except (OverflowError, ValueError, TypeError):  # counts the deltas added up past what a request holds
            raise RecordingError(f"{self.path.name}: the request table after step {position - 1:,} holds values no "
                                 "request can: the file is corrupt") from None
        s = cursor["scalars"]
        return Snapshot(time_s=s[0], step=s[1], block_size=self.block_size, block_owner=b["owner"].copy(),
                        block_state=b["state"].copy(), block_ref_cnt=b["ref_cnt"].copy(),
                        block_fill=b["fill"].copy(), block_hash=b["hash"].copy(), requests=table,
                        kv_usage=s[2], num_running=s[3], num_waiting=s[4])

    def _load_keyframe(self, position: int) -> dict:
        entry = self._keyframes[int(np.searchsorted(self._keyframe_positions, position))][1]
        what = f"{self.path.name}: record {entry.number} (the keyframe record at byte {entry.offset:,})"
        head, a = decode_payload(self._handle.payload(entry), what)
        scalars = check_keyframe(head, a, self.num_blocks, what)
        blocks = {}
        for field in BLOCK_FIELDS:
            blocks[field] = a[field].astype(BLOCK_DTYPES[field])  # a writable copy
        rows = np.zeros(len(a["request.request_id"]), dtype=REQUEST_DTYPE)
        for name in REQUEST_DTYPE.names:
            if f"request.{name}" in a:
                rows[name] = a[f"request.{name}"]
        table = {int(row[0]): row for row in rows.tolist()}
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



def steps_held(path) -> int:
    """How many steps a recording, finished or cut off, replays: 0 for one that cannot be read as
    one (a process killed before it wrote the first keyframe leaves a header alone)."""
    try:
        with Recording.open(path, verify=False, allow_truncated=True) as recording:
            return recording.num_steps
    except (RecordingError, OSError, ValueError):
        return 0
