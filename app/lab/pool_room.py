"""A KV pool set in bytes that the device cannot hold beside the weights and what vLLM holds back:
the pool is set whatever the device holds (vLLM then fails to allocate it). `math` and `run` refuse
it at --kv-cache-memory-bytes, the window at its KV pool size field, in these words."""

from __future__ import annotations

from kvscope.engine.units import format_bytes


def pool_past_memory(plan) -> tuple[str, int] | None:
    """(why, the most bytes a pool may take) when the plan's pool does not fit on its device, else None."""
    room = plan.memory_bytes - plan.weights_bytes - plan.held_back_bytes
    if plan.kv_pool_bytes <= room:
        return None
    held = f" and {format_bytes(plan.held_back_bytes)} held back" if plan.held_back_bytes else ""
    return (f"beside {format_bytes(plan.weights_bytes)} of {plan.model} weights{held} it is more than the "
            f"{format_bytes(plan.memory_bytes)} of {plan.hardware}", room)
