"""What happened in a step, as plain data: a list of events per step, never a callback per event."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class EventKind(str, enum.Enum):
    ARRIVED = "arrived"
    ADMITTED = "admitted"  # value: queue time in seconds
    ALLOCATED = "allocated"  # blocks: newly allocated block ids
    PREFIX_HIT = "prefix_hit"  # blocks: cached blocks reused; value: tokens not recomputed
    EVICTED = "evicted"  # blocks: the cached block dropped to make room; request_id: its last owner
    PREEMPTED = "preempted"  # blocks: the blocks it gave back
    FINISHED = "finished"  # value: end-to-end latency in seconds
    REJECTED = "rejected"  # detail: why
    OUT_OF_MEMORY = "out_of_memory"  # the device ran out of memory mid-step; detail: the error
    WINDOW_FREED = "window_freed"  # blocks: a sliding-window layer group's blocks its window has passed


@dataclass(slots=True)
class Event:
    kind: EventKind
    request_id: int
    time_s: float
    blocks: tuple = ()
    value: float = 0.0
    detail: str = ""

    def __reduce__(self):  # as StepResult's: a frame carries hundreds of events
        return Event, (self.kind, self.request_id, self.time_s, self.blocks, self.value, self.detail)


class EventSink:
    """Collects one step's events; the engine sets `now` (the virtual clock) before each step."""

    __slots__ = ("events", "now")

    def __init__(self):
        self.events: list[Event] = []
        self.now = 0.0

    def emit(self, kind: EventKind, request_id: int, blocks: tuple = (), value: float = 0.0, detail: str = ""):
        self.events.append(Event(kind, request_id, self.now, blocks, value, detail))

    def drain(self) -> list[Event]:
        events, self.events = self.events, []
        return events
