"""The simulated runner: the hardware's step cost model (engine/cost_model.py) on a virtual clock.

A step costs the slower of its FLOPs and its bytes at the rates the hardware achieves (its
calibration: datasheet peaks unless fitted), plus an overhead that grows with the batch, plus
tensor-parallel all-reduces. Bytes are the weights (read once per step, whatever the batch size:
why batching is nearly free) plus the KV cache every request reads and writes. Token ids are
synthetic, a deterministic function of request and position.
"""

from __future__ import annotations

from kvscope.engine.config import EngineArgs, HardwareSpec, ModelConfig
from kvscope.engine.cost_model import StepCostModel
from kvscope.engine.memory_math import MemoryPlan
from kvscope.engine.scheduler import ScheduledBatch
from kvscope.engine.runners.base import NO_TOKEN, ExecuteResult


class SimulatedRunner:
    name = "simulated"

    def __init__(self, model: ModelConfig, hardware: HardwareSpec, plan: MemoryPlan, args: EngineArgs):
        self.vocab_size = model.vocab_size
        self.cost_model = StepCostModel(model, hardware, plan, overhead_s=args.step_overhead_s)

    def cost(self, num_tokens: int, num_samples: int, attention_pairs: int, kv_read_tokens: int,
             num_seqs: int | None = None):
        """(duration, compute floor, memory floor) of one step, in seconds."""
        return self.cost_model.cost(num_tokens, num_samples, attention_pairs, kv_read_tokens, num_seqs)

    def execute(self, batch: ScheduledBatch) -> ExecuteResult:
        vocab = self.vocab_size
        sampled = []
        for req, n in zip(batch.requests, batch.num_new_tokens):
            position = req.num_computed_tokens + n
            if position == len(req.token_ids):
                sampled.append((req.request_id * 7919 + position * 104729) % vocab)
            else:
                sampled.append(NO_TOKEN)
        num_samples = len(sampled) - sampled.count(NO_TOKEN)
        duration, compute, memory = self.cost_model.cost(batch.num_tokens, num_samples, batch.attention_pairs,
                                                         batch.kv_read_tokens, len(sampled))
        return ExecuteResult(duration, sampled, compute, memory)
