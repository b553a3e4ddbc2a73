"""Engine events as log lines a person reads."""

from __future__ import annotations

from kvscope.engine.events import Event, EventKind

EVENT_KINDS = [kind.value for kind in EventKind]


def _blocks(blocks) -> str:
    if len(blocks) <= 6:
        return ", ".join(map(str, blocks))
    return f"{', '.join(map(str, blocks[:5]))} ... ({len(blocks)} blocks)"


def event_line(ev: Event) -> tuple[str, str]:
    kind = ev.kind
    who = f"request #{ev.request_id}"
    if kind == EventKind.ARRIVED:
        text = f"{who} arrived with a {int(ev.value):,}-token prompt"
    elif kind == EventKind.ADMITTED:
        text = f"{who} admitted to the batch after {ev.value * 1000:,.1f} ms in the queue"
    elif kind == EventKind.ALLOCATED:
        text = f"{who} allocated block {_blocks(ev.blocks)}" if len(ev.blocks) == 1 else \
            f"{who} allocated blocks {_blocks(ev.blocks)}"
    elif kind == EventKind.PREFIX_HIT:
        text = f"{who} reused {int(ev.value):,} prompt tokens from the prefix cache (blocks {_blocks(ev.blocks)})"
    elif kind == EventKind.EVICTED:
        text = f"cached block {_blocks(ev.blocks)} (last held by {who}) evicted for a new block"
    elif kind == EventKind.PREEMPTED:
        text = f"{who} preempted: {len(ev.blocks):,} blocks given back, it will recompute"
    elif kind == EventKind.FINISHED:
        text = f"{who} finished, {ev.value:,.3f} s after arriving"
    elif kind == EventKind.REJECTED:
        text = f"{who} rejected: {ev.detail}"
    elif kind == EventKind.WINDOW_FREED:
        text = f"{who} freed {_blocks(ev.blocks)}: its sliding-window layers no longer attend to those tokens"
    elif kind == EventKind.OUT_OF_MEMORY:
        text = f"device out of memory during a step ({ev.detail}); preempting and retrying"
    else:
        text = f"{kind.value} {who}"
    return kind.value, f"{ev.time_s:10.3f} s  {text}"
