"""How a device's memory splits into weights and KV cache, and how many sequences that admits.

    KV bytes per token = 2 (K and V) x layers x kv_heads x head_dim x bytes(kv_cache_dtype)
    KV pool            = memory x gpu_memory_utilization - weights - reserve   (per device)
    num_blocks         = KV pool // (block_size x KV bytes per token)          (per device)

With tensor parallelism every device holds all layers but 1/tp of the weights and of the KV
heads (vLLM replicates KV heads when there are fewer than devices), so a block id names the same
token slots on every device and each device stores its slice of them.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from kvscope.engine.config import (
    KV_CACHE_DTYPE_BYTES,
    WEIGHT_DTYPE_BYTES,
    ConfigError,
    HardwareSpec,
    ModelConfig,
    ResolvedArgs,
)
from kvscope.engine.units import GiB


def num_parameters(model: ModelConfig) -> int:
    """Parameter count of a Llama-family decoder (Llama, Mistral, Qwen2, Qwen3) from its config."""
    h, heads, kv, hd = model.hidden_size, model.num_attention_heads, model.num_key_value_heads, model.head_dim
    q_out, kv_out = heads * hd, kv * hd
    qkv_bias = model.attention_bias or model.model_type == "qwen2"
    o_bias = model.attention_bias and model.model_type != "qwen2"
    attention = h * q_out + 2 * h * kv_out + q_out * h
    if qkv_bias:
        attention += q_out + 2 * kv_out
    if o_bias:
        attention += h
    if model.qk_norm:
        attention += 2 * hd
    mlp = 3 * h * model.intermediate_size
    layer_norms = 2 * h
    per_layer = attention + mlp + layer_norms
    embeddings = model.vocab_size * h
    lm_head = 0 if model.tie_word_embeddings else model.vocab_size * h
    return embeddings + model.num_hidden_layers * per_layer + h + lm_head


def kv_bytes_per_token(model: ModelConfig, kv_cache_dtype: str, kv_heads: int | None = None) -> int:
    heads = model.num_key_value_heads if kv_heads is None else kv_heads
    return 2 * model.num_hidden_layers * heads * model.head_dim * KV_CACHE_DTYPE_BYTES[kv_cache_dtype]


def kv_heads_per_device(num_key_value_heads: int, tensor_parallel_size: int) -> int:
    return max(1, num_key_value_heads // tensor_parallel_size)


def weights_bytes(model: ModelConfig) -> tuple[int, str]:
    """Bytes of weights, and a few words on where the figure comes from."""
    if model.weights_bytes is not None:
        return model.weights_bytes, model.weights_source
    params = num_parameters(model)
    size = int(params * WEIGHT_DTYPE_BYTES[model.weight_dtype])
    return size, f"{params / 1e9:.2f} B parameters x {WEIGHT_DTYPE_BYTES[model.weight_dtype]:g} B ({model.weight_dtype})"


@dataclass(frozen=True)
class MemoryPlan:
    model: str
    hardware: str
    tensor_parallel_size: int
    memory_bytes: int  # all devices together
    gpu_memory_utilization: float
    weights_bytes: int
    weights_source: str
    reserve_bytes: int  # all devices together
    kv_cache_dtype: str
    kv_bytes_per_token: int  # whole model, all devices
    kv_bytes_per_token_per_device: int
    max_model_len: int
    kv_bytes_per_sequence: int
    block_size: int
    block_bytes: int  # one block on all devices together
    kv_pool_bytes: int  # all devices together; negative when the weights do not fit
    num_blocks: int
    max_concurrent_sequences: float
    kv_pool_source: str = ""

    @property
    def fits(self) -> bool:
        return self.num_blocks > 0

    @property
    def blocks_per_sequence(self) -> int:
        return math.ceil(self.max_model_len / self.block_size)

    def to_dict(self) -> dict:
        out = asdict(self)
        out["blocks_per_sequence"] = self.blocks_per_sequence
        return out


def plan_memory(model: ModelConfig, hardware: HardwareSpec, resolved: ResolvedArgs) -> MemoryPlan:
    args = resolved.args
    tp = resolved.tensor_parallel_size
    kv_dtype = resolved.kv_cache_dtype
    per_token = kv_bytes_per_token(model, kv_dtype)
    per_token_device = kv_bytes_per_token(model, kv_dtype, kv_heads_per_device(model.num_key_value_heads, tp))
    weights, weights_source = weights_bytes(model)
    usable_per_device = hardware.memory_bytes * args.gpu_memory_utilization
    if resolved.kv_cache_memory_bytes is not None:
        pool_per_device = resolved.kv_cache_memory_bytes
        pool_source = "kv_cache_memory_bytes (a set budget)"
    else:
        pool_per_device = int(usable_per_device - weights / tp - args.reserve_bytes)
        pool_source = "memory x gpu_memory_utilization - weights - reserve"
    block_bytes_device = args.block_size * per_token_device
    num_blocks = max(0, pool_per_device // block_bytes_device)
    if args.num_gpu_blocks_override is not None:
        num_blocks = args.num_gpu_blocks_override
    blocks_per_sequence = math.ceil(resolved.max_model_len / args.block_size)
    return MemoryPlan(
        model=model.name,
        hardware=hardware.name,
        tensor_parallel_size=tp,
        memory_bytes=hardware.memory_bytes * tp,
        gpu_memory_utilization=args.gpu_memory_utilization,
        weights_bytes=weights,
        weights_source=weights_source,
        reserve_bytes=args.reserve_bytes * tp,
        kv_cache_dtype=kv_dtype,
        kv_bytes_per_token=per_token,
        kv_bytes_per_token_per_device=per_token_device,
        max_model_len=resolved.max_model_len,
        kv_bytes_per_sequence=per_token * resolved.max_model_len,
        block_size=args.block_size,
        block_bytes=block_bytes_device * tp,
        kv_pool_bytes=pool_per_device * tp,
        num_blocks=int(num_blocks),
        max_concurrent_sequences=num_blocks / blocks_per_sequence,
        kv_pool_source=pool_source,
    )


def require_fit(plan: MemoryPlan) -> None:
    """Raise a ConfigError that says what does not fit, for callers that need a usable pool."""
    if plan.num_blocks > 0:
        return
    usable = plan.memory_bytes * plan.gpu_memory_utilization
    raise ConfigError(
        f"no room for a KV cache: {plan.model} weights take {plan.weights_bytes / GiB:.2f} GiB "
        f"(+ {plan.reserve_bytes / GiB:.2f} GiB reserve) of the {usable / GiB:.2f} GiB usable on "
        f"{plan.hardware} at gpu_memory_utilization {plan.gpu_memory_utilization:g}"
    )
