"""The simulated runner: a roofline cost model of the hardware on a virtual clock.

A step costs max(FLOPs / peak FLOP/s, bytes / memory bandwidth) per device, plus tensor-parallel
all-reduces and a fixed per-step overhead. Bytes are the weights (read once per step, whatever
the batch size: why batching is nearly free) plus the KV cache every request reads and writes.
Token ids are synthetic, a deterministic function of request and position.
"""

from __future__ import annotations

from kvscope.engine.config import EngineArgs, HardwareSpec, ModelConfig
from kvscope.engine.memory_math import MemoryPlan, num_parameters
from kvscope.engine.scheduler import ScheduledBatch
from kvscope.engine.runners.base import NO_TOKEN, ExecuteResult

ALLREDUCE_LATENCY_S = 10e-6  # per collective, NVLink class


class SimulatedRunner:
    name = "simulated"

    def __init__(self, model: ModelConfig, hardware: HardwareSpec, plan: MemoryPlan, args: EngineArgs):
        tp = plan.tensor_parallel_size
        self.vocab_size = model.vocab_size
        embedding = model.vocab_size * model.hidden_size
        lm_head = embedding
        matmul_params = num_parameters(model) - embedding - (0 if model.tie_word_embeddings else lm_head)
        self.flops_per_token = 2.0 * matmul_params / tp
        self.flops_per_sample = 2.0 * lm_head / tp
        # QK^T and AV: 2 matmuls x 2 FLOPs per multiply-add, per query head and layer
        self.flops_per_attention_pair = 4.0 * model.num_hidden_layers * model.num_attention_heads * model.head_dim / tp
        self.peak_flops = hardware.flops_for(model.weight_dtype)
        self.bandwidth = hardware.memory_bandwidth_bytes_per_s
        self.weight_bytes = plan.weights_bytes / tp
        self.kv_bytes_per_token = plan.kv_bytes_per_token_per_device
        self.tp = tp
        # Megatron-style tensor parallelism: two all-reduces of the 16-bit hidden state per layer
        self.allreduces_per_step = 2 * model.num_hidden_layers
        self.allreduce_bytes_per_token = self.allreduces_per_step * model.hidden_size * 2
        self.link_bandwidth = hardware.interconnect_bandwidth_bytes_per_s or self.bandwidth
        self.overhead_s = args.step_overhead_s

    def cost(self, num_tokens: int, num_samples: int, attention_pairs: int, kv_read_tokens: int):
        """(duration, compute time, memory time) of one step, in seconds."""
        flops = (
            self.flops_per_token * num_tokens
            + self.flops_per_sample * num_samples
            + self.flops_per_attention_pair * attention_pairs
        )
        moved = self.weight_bytes + self.kv_bytes_per_token * (kv_read_tokens + num_tokens)
        compute = flops / self.peak_flops
        memory = moved / self.bandwidth
        duration = (compute if compute > memory else memory) + self.overhead_s
        if self.tp > 1:
            ring = 2 * (self.tp - 1) / self.tp
            duration += ring * self.allreduce_bytes_per_token * num_tokens / self.link_bandwidth
            duration += ALLREDUCE_LATENCY_S * self.allreduces_per_step
        return duration, compute, memory

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
        duration, compute, memory = self.cost(batch.num_tokens, num_samples, batch.attention_pairs, batch.kv_read_tokens)
        return ExecuteResult(duration, sampled, compute, memory)
