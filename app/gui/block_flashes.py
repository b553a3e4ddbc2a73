"""Which engine events make the block map flash, under the names the block map knows them by:
blocks allocated, reused from the prefix cache, evicted, or given back by a preempted request."""

from kvscope.engine.events import EventKind

FLASH_KINDS = {EventKind.ALLOCATED: "allocated", EventKind.EVICTED: "evicted", EventKind.PREFIX_HIT: "prefix_hit",
               EventKind.PREEMPTED: "preempted"}
