"""The engine's inputs as plain, validated data: a model, a hardware target, engine arguments.

Field names follow Hugging Face ``config.json`` (models) and vLLM's engine arguments, so what a
user knows from either transfers unchanged.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

# Bytes per element. fp8 is the vLLM alias for fp8_e4m3; int4/nf4 pack two weights per byte.
KV_CACHE_DTYPE_BYTES = {
    "fp32": 4,
    "fp16": 2,
    "bf16": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
}
WEIGHT_DTYPE_BYTES = {
    "fp32": 4.0,
    "fp16": 2.0,
    "bf16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4": 0.5,
    "nf4": 0.5,
}
# Spellings found in config.json's torch_dtype / dtype.
_DTYPE_ALIASES = {
    "float32": "fp32",
    "float": "fp32",
    "float16": "fp16",
    "half": "fp16",
    "bfloat16": "bf16",
    "float8_e4m3fn": "fp8",
    "float8": "fp8",
}


# On a CPU the KV pool is a budget, not "all the memory": RAM is shared with everything else.
DEFAULT_CPU_KV_CACHE_BYTES = 1024**3


class ConfigError(ValueError):
    """Input a user gave that cannot work; the message says which field and why."""


def normalize_dtype(name: str, allowed: dict, what: str) -> str:
    key = _DTYPE_ALIASES.get(str(name).lower(), str(name).lower())
    if key not in allowed:
        raise ConfigError(f"unknown {what} {name!r}; choose one of: {', '.join(allowed)}")
    return key


def _positive_int(owner: str, name: str, value) -> int:
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or (isinstance(value, float) and not math.isfinite(value)) or value != int(value)):
        raise ConfigError(f"{owner}: {name} must be a whole number, got {value!r}")
    if value <= 0:
        raise ConfigError(f"{owner}: {name} must be greater than 0, got {value}")
    return int(value)


def _positive_float(owner: str, name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{owner}: {name} must be a number, got {value!r}")
    if value <= 0:
        raise ConfigError(f"{owner}: {name} must be greater than 0, got {value}")
    return float(value)


@dataclass(frozen=True)
class ModelConfig:
    """A decoder-only transformer, described with Hugging Face config.json field names."""

    name: str
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    hidden_size: int
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int = 4096
    tie_word_embeddings: bool = False
    attention_bias: bool = False  # Qwen2 puts a bias on q/k/v
    qk_norm: bool = False  # Qwen3 normalises q and k per head
    model_type: str = "llama"
    weight_dtype: str = "bf16"
    # When the checkpoint's real size is known (hybrid or quantised layouts the dense formula
    # does not describe), it wins over the derived count; the source must say where it is from.
    weights_bytes: int | None = None
    weights_source: str = "checkpoint size given by the preset"  # where weights_bytes comes from
    source: str = ""
    description: str = ""

    def __post_init__(self):
        owner = f"model {self.name!r}"
        for name in (
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "head_dim",
            "hidden_size",
            "intermediate_size",
            "vocab_size",
            "max_position_embeddings",
        ):
            object.__setattr__(self, name, _positive_int(owner, name, getattr(self, name)))
        if self.num_attention_heads % self.num_key_value_heads:
            raise ConfigError(
                f"{owner}: num_key_value_heads ({self.num_key_value_heads}) must divide "
                f"num_attention_heads ({self.num_attention_heads})"
            )
        object.__setattr__(
            self, "weight_dtype", normalize_dtype(self.weight_dtype, WEIGHT_DTYPE_BYTES, "weight dtype")
        )
        if self.weights_bytes is not None:
            object.__setattr__(self, "weights_bytes", _positive_int(owner, "weights_bytes", self.weights_bytes))

    def replace(self, **changes) -> "ModelConfig":
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class HardwareSpec:
    """One accelerator (or a node of identical ones), as its datasheet gives it.

    memory_bytes and the rates are per device; gpu_count devices are joined by an interconnect.
    """

    name: str
    memory_bytes: int
    memory_bandwidth_bytes_per_s: float
    peak_flops: dict  # dtype -> dense FLOP/s per device
    gpu_count: int = 1
    interconnect_bandwidth_bytes_per_s: float = 0.0
    kind: str = "gpu"  # gpu | cpu
    source: str = ""
    description: str = ""

    def __post_init__(self):
        owner = f"hardware {self.name!r}"
        object.__setattr__(self, "memory_bytes", _positive_int(owner, "memory_bytes", self.memory_bytes))
        object.__setattr__(
            self,
            "memory_bandwidth_bytes_per_s",
            _positive_float(owner, "memory_bandwidth_bytes_per_s", self.memory_bandwidth_bytes_per_s),
        )
        object.__setattr__(self, "gpu_count", _positive_int(owner, "gpu_count", self.gpu_count))
        if not self.peak_flops:
            raise ConfigError(f"{owner}: peak_flops needs at least one dtype")
        flops = {}
        for dtype, value in self.peak_flops.items():
            key = normalize_dtype(dtype, WEIGHT_DTYPE_BYTES, "peak_flops dtype")
            flops[key] = _positive_float(owner, f"peak_flops.{dtype}", value)
        object.__setattr__(self, "peak_flops", flops)

    def flops_for(self, dtype: str) -> float:
        """Peak dense FLOP/s for math in `dtype`; narrower types fall back to the next wider one."""
        for candidate in {
            "int4": ("int8", "fp8", "fp16", "bf16"),
            "nf4": ("fp16", "bf16"),  # bitsandbytes dequantises to 16-bit for the matmul
            "int8": ("int8", "fp8", "fp16", "bf16"),
            "fp8": ("fp8", "fp16", "bf16"),
            "fp16": ("fp16", "bf16"),
            "bf16": ("bf16", "fp16"),
            "fp32": ("fp32",),
        }.get(dtype, (dtype,)):
            if candidate in self.peak_flops:
                return self.peak_flops[candidate]
        return max(self.peak_flops.values())

    def replace(self, **changes) -> "HardwareSpec":
        return dataclasses.replace(self, **changes)

    def with_memory(self, memory_bytes: int) -> "HardwareSpec":
        """This hardware with another amount of memory per device, saying so in its description."""
        return self.replace(memory_bytes=int(memory_bytes),
                            description=f"{self.description}, memory set to {memory_bytes / 1024**3:.2f} GiB")


@dataclass(frozen=True)
class EngineArgs:
    """Engine arguments, spelled as vLLM spells them. None means "derive a sensible default"."""

    block_size: int = 16
    gpu_memory_utilization: float = 0.9
    max_model_len: int | None = None
    max_num_seqs: int = 256
    max_num_batched_tokens: int | None = None
    kv_cache_dtype: str = "auto"
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    tensor_parallel_size: int | None = None
    reserve_bytes: int = 0
    scheduling: str = "continuous"  # continuous | static
    allocation: str = "paged"  # paged | contiguous
    seed: int = 0
    # Fixed cost of one engine step on the device (launches, sampling, host work).
    step_overhead_s: float = 0.0005
    num_gpu_blocks_override: int | None = None
    # Size the KV pool directly (per device) instead of from memory x utilization, as vLLM's
    # --kv-cache-memory-bytes does. On a CPU target this is the budget the user sets.
    kv_cache_memory_bytes: int | None = None

    def __post_init__(self):
        owner = "engine"
        for name in ("block_size", "max_num_seqs"):
            object.__setattr__(self, name, _positive_int(owner, name, getattr(self, name)))
        for name in ("max_model_len", "max_num_batched_tokens", "tensor_parallel_size", "num_gpu_blocks_override",
                     "kv_cache_memory_bytes"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, _positive_int(owner, name, getattr(self, name)))
        utilization = _positive_float(owner, "gpu_memory_utilization", self.gpu_memory_utilization)
        if utilization > 1:
            raise ConfigError(f"gpu_memory_utilization must be in (0, 1], got {utilization}")
        object.__setattr__(self, "gpu_memory_utilization", utilization)
        if self.reserve_bytes < 0:
            raise ConfigError(f"reserve_bytes must be 0 or more, got {self.reserve_bytes}")
        if self.kv_cache_dtype != "auto":
            object.__setattr__(
                self, "kv_cache_dtype", normalize_dtype(self.kv_cache_dtype, KV_CACHE_DTYPE_BYTES, "kv_cache_dtype")
            )
        if self.scheduling not in ("continuous", "static"):
            raise ConfigError(f"scheduling must be 'continuous' or 'static', got {self.scheduling!r}")
        if self.allocation not in ("paged", "contiguous"):
            raise ConfigError(f"allocation must be 'paged' or 'contiguous', got {self.allocation!r}")
        if self.step_overhead_s < 0:
            raise ConfigError(f"step_overhead_s must be 0 or more, got {self.step_overhead_s}")

    def replace(self, **changes) -> "EngineArgs":
        return dataclasses.replace(self, **changes)


def resolve_kv_cache_dtype(kv_cache_dtype: str, model: ModelConfig) -> str:
    """vLLM's "auto": the KV cache takes the model's activation dtype (16-bit for quantised weights)."""
    if kv_cache_dtype != "auto":
        return kv_cache_dtype
    return model.weight_dtype if model.weight_dtype in ("fp32", "fp16", "bf16") else "bf16"


@dataclass(frozen=True)
class ResolvedArgs:
    """EngineArgs with every default filled in against one model and hardware."""

    args: EngineArgs
    kv_cache_dtype: str
    max_model_len: int
    max_num_batched_tokens: int
    tensor_parallel_size: int
    kv_cache_memory_bytes: int | None = None  # per device; None: memory x utilization - weights - reserve


def resolve_engine_args(args: EngineArgs, model: ModelConfig, hardware: HardwareSpec) -> ResolvedArgs:
    max_model_len = args.max_model_len or model.max_position_embeddings
    tp = args.tensor_parallel_size or hardware.gpu_count
    if tp > hardware.gpu_count:
        raise ConfigError(
            f"tensor_parallel_size {tp} needs {tp} devices but hardware {hardware.name!r} has {hardware.gpu_count}"
        )
    kv_heads = model.num_key_value_heads
    if (kv_heads >= tp and kv_heads % tp) or (kv_heads < tp and tp % kv_heads):
        raise ConfigError(
            f"tensor_parallel_size {tp} cannot split num_key_value_heads {kv_heads} evenly over the devices"
        )
    if args.max_num_batched_tokens is not None:
        budget = args.max_num_batched_tokens
        if not args.enable_chunked_prefill and budget < max_model_len:
            raise ConfigError(
                f"max_num_batched_tokens ({budget}) is smaller than max_model_len ({max_model_len}); "
                "without chunked prefill a whole prompt must fit in one step's token budget"
            )
    else:
        budget = 8192 if args.enable_chunked_prefill else max(8192, max_model_len)
    kv_budget = args.kv_cache_memory_bytes
    if kv_budget is None and hardware.kind == "cpu":
        kv_budget = DEFAULT_CPU_KV_CACHE_BYTES
    return ResolvedArgs(
        args=args,
        kv_cache_dtype=resolve_kv_cache_dtype(args.kv_cache_dtype, model),
        max_model_len=max_model_len,
        max_num_batched_tokens=budget,
        tensor_parallel_size=tp,
        kv_cache_memory_bytes=kv_budget,
    )


def build_config(cls, data: dict, label: str):
    """cls(**data), its errors starting with `label` (which file or preset said it)."""
    try:
        return cls(**data)
    except ConfigError as exc:
        message = str(exc)
        # the dataclass names itself ("model 'x': ..."); the label already says which file
        message = message.split(": ", 1)[1] if message.startswith(("model ", "hardware ")) else message
        raise ConfigError(f"{label}: {message}") from None
    except TypeError as exc:  # a required field is missing
        raise ConfigError(f"{label}: {exc}") from None
