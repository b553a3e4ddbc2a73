"""Which engine events make a block map flash, under the names the block map knows them by:
blocks allocated, reused from the prefix cache, evicted, or given back by a preempted request.

The one selection for every source: the window derives a live run's or a replay's flashes from
the steps a frame carries; a comparison's process derives them here, so its frames carry block
ids instead of every configuration's steps."""

from __future__ import annotations

import numpy as np

from kvscope.engine.events import EventKind

FLASH_KINDS = {EventKind.ALLOCATED: "allocated", EventKind.EVICTED: "evicted", EventKind.PREFIX_HIT: "prefix_hit",
               EventKind.PREEMPTED: "preempted"}


def collect_flashes(step_results, into: dict | None = None) -> dict:
    """{flash kind: [block ids]} of the steps' events, added to `into` if given."""
    changed = {} if into is None else into
    for result in step_results:
        for event in result.events:
            if event.blocks and event.kind in FLASH_KINDS:
                changed.setdefault(FLASH_KINDS[event.kind], []).extend(event.blocks)
    return changed


def flash_arrays(changed: dict) -> dict:
    return {kind: np.asarray(blocks, dtype=np.int64) for kind, blocks in changed.items()}
