"""A recorded run as a Chrome/Perfetto trace: the JSON trace-event format ui.perfetto.dev opens.

    process "engine"     one track of steps (complete "X" slices: batch size, prefill / decode
                         tokens, KV usage) and counters: KV cache usage, running / waiting requests
    process "requests"   one track (thread) per request: queued, prefill (one slice per chunk),
                         decode (one slice from its first decode step to its last), and instants
                         for prefix hits, preemptions, finishing and rejection

Timestamps are the engine clock in whole microseconds. A long run makes a large trace (about 300 bytes
per step and 150 per request and step it runs in), so at most max_requests requests get a track
(the first, by id) and at most max_steps steps are exported; the trace's otherData and the
returned TraceStats say what was left out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from kvscope.engine.events import EventKind

ENGINE_PID = 1
REQUESTS_PID = 2
STEPS_TID = 1
DEFAULT_MAX_REQUESTS = 2_000
DEFAULT_MAX_STEPS = 250_000


@dataclass(frozen=True)
class TraceStats:
    num_events: int
    steps_exported: int
    steps_left_out: int
    requests_exported: int
    requests_left_out: int


def _us(seconds: float) -> int:
    """Engine seconds as whole trace microseconds. Every boundary is rounded once, so a slice that
    ends where the next begins ends at exactly its timestamp; and integers reach nanoseconds
    exactly in every trace processor (older Perfetto truncated fractional microseconds, which made
    such neighbours overlap by a nanosecond and dropped one as misnested)."""
    return round(seconds * 1e6)


class _RequestTrack:
    __slots__ = ("queued_since", "decode_start", "decode_end", "decode_tokens", "chunks")

    def __init__(self):
        self.queued_since: float | None = None
        self.decode_start: float | None = None
        self.decode_end = 0.0
        self.decode_tokens = 0
        self.chunks = 0


class _TraceBuilder:
    def __init__(self, max_requests: int):
        self.events: list[dict] = []
        self.max_requests = max_requests
        self.tracks: dict[int, _RequestTrack] = {}
        # ids past the cap, each once: counted as highest id + 1 - cap, ids 0 and 2**40 were said as
        # "1,099,511,627,776 requests have no track"
        self.left_out: set[int] = set()
        self.tracked: set[int] = set()  # every id given a track (a finished one's track is closed and dropped)
        self.last_time = 0.0

    def slice(self, pid: int, tid: int, name: str, start: float, end: float, args: dict) -> None:
        ts = _us(start)
        self.events.append({"ph": "X", "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": _us(end) - ts,
                            "args": args})

    def instant(self, pid: int, tid: int, name: str, time_s: float, args: dict) -> None:
        self.events.append({"ph": "i", "s": "t", "name": name, "pid": pid, "tid": tid, "ts": _us(time_s), "args": args})

    def counter(self, name: str, time_s: float, args: dict) -> None:
        self.events.append({"ph": "C", "name": name, "pid": ENGINE_PID, "tid": STEPS_TID, "ts": _us(time_s),
                            "args": args})

    def track(self, rid: int) -> _RequestTrack | None:
        if rid < 0:
            return None
        if rid >= self.max_requests:
            self.left_out.add(rid)
            return None
        track = self.tracks.get(rid)
        if track is None:
            track = self.tracks[rid] = _RequestTrack()
            self.tracked.add(rid)
        return track

    def close_decode(self, rid: int, track: _RequestTrack) -> None:
        if track.decode_start is not None:
            self.slice(REQUESTS_PID, rid + 1, "decode", track.decode_start, track.decode_end,
                       {"tokens": track.decode_tokens})
            track.decode_start = None

    def close_queue(self, rid: int, track: _RequestTrack, until: float, note: str | None = None) -> None:
        if track.queued_since is not None:
            if until > track.queued_since or note:
                args = {"queue_time_ms": round((until - track.queued_since) * 1e3, 6)}
                if note:
                    args["note"] = note
                self.slice(REQUESTS_PID, rid + 1, "queued", track.queued_since, until, args)
            track.queued_since = None

    def add_step(self, result) -> None:
        start, end = result.start_time_s, result.start_time_s + result.duration_s
        self.last_time = max(self.last_time, end)
        ended: list = []
        for event in result.events:
            if event.kind == EventKind.FINISHED:
                ended.append(event)  # at the step's end, after its batch ran
            else:
                self._event(event)
        for rid, n, prefill in zip(result.request_ids, result.num_new_tokens, result.is_prefill):
            track = self.track(rid)
            if track is None:
                continue
            self.close_queue(rid, track, start)
            if prefill:
                self.close_decode(rid, track)
                track.chunks += 1
                self.slice(REQUESTS_PID, rid + 1, "prefill", start, end, {"tokens": n, "chunk": track.chunks})
            elif track.decode_start is None:
                track.decode_start, track.decode_end, track.decode_tokens = start, end, 1
            else:
                track.decode_end = end
                track.decode_tokens += 1
        for event in ended:
            self._event(event)
        self._engine_step(result, start, end)

    def _event(self, event) -> None:
        kind, rid = event.kind, event.request_id
        if kind == EventKind.OUT_OF_MEMORY:
            self.instant(ENGINE_PID, STEPS_TID, "out of memory", event.time_s, {"error": event.detail})
            return
        if kind not in (EventKind.ARRIVED, EventKind.REJECTED, EventKind.PREEMPTED, EventKind.PREFIX_HIT,
                        EventKind.FINISHED):
            return  # admissions show as the end of "queued"; allocations and evictions in the step's args
        track = self.track(rid)
        if track is None:
            return
        tid = rid + 1
        if kind == EventKind.ARRIVED:
            track.queued_since = event.time_s
        elif kind == EventKind.REJECTED:
            self.close_queue(rid, track, event.time_s)
            self.instant(REQUESTS_PID, tid, "rejected", event.time_s, {"reason": event.detail})
            del self.tracks[rid]
        elif kind == EventKind.PREEMPTED:
            self.close_decode(rid, track)
            self.instant(REQUESTS_PID, tid, "preempted", event.time_s, {"blocks_freed": len(event.blocks)})
            track.queued_since = event.time_s
        elif kind == EventKind.PREFIX_HIT:
            self.instant(REQUESTS_PID, tid, "prefix hit", event.time_s,
                         {"cached_tokens": int(event.value), "blocks": len(event.blocks)})
        else:  # FINISHED
            self.close_decode(rid, track)
            self.instant(REQUESTS_PID, tid, "finished", event.time_s, {"latency_ms": round(event.value * 1e3, 6)})
            del self.tracks[rid]

    def _engine_step(self, result, start: float, end: float) -> None:
        prefill_tokens = result.num_prefill_tokens
        decode_tokens = result.num_tokens - prefill_tokens
        if result.request_ids and result.duration_s > 0:
            name = "prefill + decode" if prefill_tokens and decode_tokens else ("prefill" if prefill_tokens else "decode")
            allocated = evicted = 0
            for event in result.events:
                if event.kind == EventKind.ALLOCATED:
                    allocated += len(event.blocks)
                elif event.kind == EventKind.EVICTED:
                    evicted += len(event.blocks)
            self.slice(ENGINE_PID, STEPS_TID, name, start, end, {
                "step": result.step, "batch_size": len(result.request_ids), "prefill_tokens": prefill_tokens,
                "decode_tokens": decode_tokens, "kv_usage_percent": round(result.kv_usage * 100, 3),
                "running": result.num_running, "waiting": result.num_waiting,
                "preemptions": result.num_preemptions, "blocks_allocated": allocated, "blocks_evicted": evicted,
                "compute_time_ms": round(result.compute_time_s * 1e3, 6),
                "memory_time_ms": round(result.memory_time_s * 1e3, 6),
            })
        self.counter("KV cache usage", start, {"percent": round(result.kv_usage * 100, 3)})
        self.counter("requests", start, {"running": result.num_running, "waiting": result.num_waiting})

    def finish(self) -> None:
        for rid, track in self.tracks.items():
            self.close_decode(rid, track)
            self.close_queue(rid, track, max(self.last_time, track.queued_since or 0.0),
                             note="still queued when the recording ended")


def perfetto_trace(recording, max_requests: int = DEFAULT_MAX_REQUESTS,
                   max_steps: int = DEFAULT_MAX_STEPS) -> tuple[dict, TraceStats]:
    """The trace as a JSON-ready dict, and what it holds."""
    builder = _TraceBuilder(max_requests)
    steps = min(recording.num_steps, max_steps)
    for i in range(steps):
        builder.add_step(recording.step(i))
    builder.finish()
    header = recording.header
    label = header.get("label", recording.path.name)
    shown = builder.tracked  # the ids the recording holds, not every number below the highest
    metadata = [
        {"ph": "M", "name": "process_name", "pid": ENGINE_PID, "tid": 0, "ts": 0, "args": {"name": f"engine: {label}"}},
        {"ph": "M", "name": "process_sort_index", "pid": ENGINE_PID, "tid": 0, "ts": 0, "args": {"sort_index": 0}},
        {"ph": "M", "name": "thread_name", "pid": ENGINE_PID, "tid": STEPS_TID, "ts": 0, "args": {"name": "steps"}},
        {"ph": "M", "name": "process_name", "pid": REQUESTS_PID, "tid": 0, "ts": 0, "args": {"name": "requests"}},
        {"ph": "M", "name": "process_sort_index", "pid": REQUESTS_PID, "tid": 0, "ts": 0, "args": {"sort_index": 1}},
    ]
    for rid in sorted(shown):
        metadata.append({"ph": "M", "name": "thread_name", "pid": REQUESTS_PID, "tid": rid + 1, "ts": 0,
                         "args": {"name": f"request {rid}"}})
        metadata.append({"ph": "M", "name": "thread_sort_index", "pid": REQUESTS_PID, "tid": rid + 1, "ts": 0,
                         "args": {"sort_index": rid}})
    stats = TraceStats(
        num_events=len(metadata) + len(builder.events),
        steps_exported=steps,
        steps_left_out=recording.num_steps - steps,
        requests_exported=len(shown),
        requests_left_out=len(builder.left_out),
    )
    left_out = []
    if stats.requests_left_out:
        left_out.append(f"{stats.requests_left_out:,} requests after the first {max_requests:,} have no track")
    if stats.steps_left_out:
        left_out.append(f"the last {stats.steps_left_out:,} of {recording.num_steps:,} steps are not exported")
    trace = {
        "traceEvents": metadata + builder.events,
        "displayTimeUnit": "ms",
        "otherData": {
            "source": f"kvscope {header.get('kvscope_version', '')} recording {recording.path.name}".strip(),
            "label": label,
            "backend": header.get("backend", ""),
            "clock": "engine clock, microseconds",
            "left_out": "; ".join(left_out) or "nothing",
        },
    }
    return trace, stats


def write_perfetto(recording, path, max_requests: int = DEFAULT_MAX_REQUESTS,
                   max_steps: int = DEFAULT_MAX_STEPS) -> TraceStats:
    """Write the trace as JSON to path; returns what it holds."""
    trace, stats = perfetto_trace(recording, max_requests, max_steps)
    events = trace.pop("traceEvents")
    with open(path, "w", encoding="utf-8") as out:
        # json.dump encodes in Python, item by item (4.3 of the 5.2 s a small recording's export took
        # 20 times); json.dumps uses the C encoder: events go through it a chunk at a time, so the text
        # held at once stays small however long the run
        out.write('{"traceEvents":[')
        for start in range(0, len(events), EVENTS_PER_WRITE):
            text = _json(events[start:start + EVENTS_PER_WRITE])
            out.write(("," if start else "") + text[1:-1])
        out.write("]" + ("," + _json(trace)[1:] if trace else "}"))
    return stats


EVENTS_PER_WRITE = 10_000


def _json(value) -> str:
    return json.dumps(value, separators=(",", ":"), allow_nan=False)  # NaN is not JSON: Perfetto rejects it
