"""What every runner gives the engine for one scheduled batch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from kvscope.engine.scheduler import ScheduledBatch

NO_TOKEN = -1  # a prompt chunk that did not reach the end of what is known samples nothing


@dataclass(slots=True)
class ExecuteResult:
    duration_s: float  # step time: virtual for the simulated runner, measured for the real one
    sampled_token_ids: list  # one per batch entry, NO_TOKEN where the entry samples nothing
    compute_time_s: float = 0.0  # FLOPs / peak FLOP/s: the compute-bound floor of this step
    memory_time_s: float = 0.0  # bytes moved / bandwidth: the memory-bound floor of this step


class Runner(Protocol):
    name: str

    def execute(self, batch: ScheduledBatch) -> ExecuteResult: ...


class StepOutOfMemory(RuntimeError):
    """The device ran out of memory during a step. The engine preempts and retries; it never crashes."""
