"""The engine's inputs as plain, validated data: a model, a hardware target, engine arguments.

Field names follow Hugging Face ``config.json`` (models) and vLLM's engine arguments, so what a
user knows from either transfers unchanged. This is the one home of every default and every list
of choices: the command-line flags are generated from EngineArgs, the window's settings form is
filled from these lists, and adding a KV precision means adding it here (and its storage type in
runners/paged_cache.py), nowhere else.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from kvscope.engine.units import GiB

# -- the lists of choices --------------------------------------------------------------------------

# Bytes per element of the KV cache. "fp8" is vLLM's alias of fp8_e4m3 (the same storage).
KV_CACHE_DTYPE_BYTES = {
    "fp32": 4,
    "fp16": 2,
    "bf16": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
}
KV_CACHE_DTYPE_ALIASES = {"fp8": "fp8_e4m3"}
# What kv_cache_dtype accepts; "auto" keeps the model's own 16-bit (or wider) type.
KV_CACHE_DTYPES = ("auto", *KV_CACHE_DTYPE_BYTES)
# Each stored precision once, aliases left out: what `kvscope verify` checks one by one.
KV_CACHE_PRECISIONS = tuple(d for d in KV_CACHE_DTYPE_BYTES if d not in KV_CACHE_DTYPE_ALIASES)
# Bytes per weight. int4/nf4 pack two weights per byte.
WEIGHT_DTYPE_BYTES = {
    "fp32": 4.0,
    "fp16": 2.0,
    "bf16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4": 0.5,
    "nf4": 0.5,
}
# The floating-point types a real model computes in; "auto" KV follows the model's among them.
COMPUTE_DTYPES = ("fp32", "fp16", "bf16")
QUANTIZATIONS = ("int8", "nf4")  # bitsandbytes weight quantisation, real backend only
# simulated: a roofline cost model of a hardware preset; real: a transformers model on this machine
BACKENDS = ("simulated", "real")
DEFAULT_BACKEND = "simulated"  # needs no model download and no accelerator
SCHEDULINGS = ("continuous", "static")
ALLOCATIONS = ("paged", "contiguous")
# Block sizes offered as choices; the engine takes any whole number of tokens.
BLOCK_SIZES = (1, 8, 16, 32, 64, 128)
# A layer's kind as config.json's layer_types names it: a KV cache of every token, of the last
# sliding_window tokens, or a fixed state per request (Gated DeltaNet / Mamba).
LAYER_TYPES = ("full_attention", "sliding_attention", "linear_attention")
# How the KV pool is sized. vllm: as vLLM does (its reserve for activations, non-torch and
# CUDA-graph memory; its layer groups); lesson: the seeds' formula (memory x utilization - weights,
# every layer a full KV cache), the simplification the worked examples use.
ACCOUNTINGS = ("vllm", "lesson")
# The vLLM release whose accounting is modelled when none is named: the newest one read (0.33).
DEFAULT_VLLM_VERSION = "0.33"
# vLLM's default --gpu-memory-utilization: 0.9, and 0.92 from 0.21, where it began holding back its
# estimate of CUDA-graph memory and raised the share with it (vLLM PR 38284) so the KV cache stayed as big.
CUDA_GRAPHS_PROFILED_FROM = (0, 21)
GPU_MEMORY_UTILIZATION_DEFAULTS = {(0, 1): 0.9, CUDA_GRAPHS_PROFILED_FROM: 0.92}
OLDEST_VLLM_VERSION = "0.1"  # its first release (June 2023) already sized KV as memory x utilization - peak
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

# -- defaults that are not a single field's ---------------------------------------------------------

# The presets a run describes when none is named: a common model on a 24 GB card for the
# simulated backend -- the workstation this tool is for, and where the lesson shows: chat traffic
# fills Llama 3 8B's ~5.6 GiB pool on an L4 8 s into the run, while on an H100 it peaks at 7 % of
# 53 GiB and the default run showed no wall; on the real one a trained model small enough to run on any CPU (SmolLM2-135M-
# Instruct, whose answers can be read). tiny-llama (random weights) is for tests and what-ifs.
DEFAULT_MODEL = "llama-3-8b"
DEFAULT_HARDWARE = "l4-24gb"
DEFAULT_REAL_MODEL = "smollm2-135m-instruct"
RANDOM_WEIGHTS_MODEL = "tiny-llama"
# On a CPU the KV pool is a budget, not "all the memory": RAM is shared with everything else.
DEFAULT_CPU_KV_CACHE_BYTES = 1 * GiB
# The token budget of one step when none is given (with chunked prefill; without it a whole
# prompt must fit, so the budget is at least max_model_len).
DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192
SMALL_GPU_MAX_NUM_BATCHED_TOKENS = 2048  # vLLM's, under 70 GiB and on the A100
# Requests running at once when none is given: vLLM's API-server defaults, by the same rule.
LARGE_GPU_MAX_NUM_SEQS = 1024
DEFAULT_MAX_NUM_SEQS = 256


# ConfigError lives with the checks (engine/checks.py) that raise it most; it is imported from here.
from kvscope.engine.checks import ConfigError, ceiling, real_number, shown, whole_number  # noqa: E402
from kvscope.engine.cost_model import check_calibration  # noqa: E402


def normalize_dtype(name: str, allowed: dict, what: str) -> str:
    key = _DTYPE_ALIASES.get(str(name).lower(), str(name).lower())
    if key not in allowed:
        raise ConfigError(f"unknown {what} {name!r}; choose one of: {', '.join(allowed)}")
    return key


def _positive_int(owner: str, name: str, value) -> int:
    """A whole number from 1 to the field's ceiling (engine/checks.py CEILINGS)."""
    return whole_number(value, f"{owner}: {name}", 1, ceiling(name))


def _positive_float(owner: str, name: str, value) -> float:
    return real_number(value, f"{owner}: {name}", 0.0, ceiling(name, 1e21), low_open=True)


MIN_DEVICE_RATE = 1e6  # bytes/s or FLOP/s: a thousand times below the slowest device that serves a model


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
    # vLLM's derived max_model_len where config.json's rope_scaling stretches the positions
    # (app/lab/models/config_json.py); None: max_position_embeddings.
    max_model_len_limit: int | None = None
    # False where nothing gave the positions (a config.json without them, a shape given by flags):
    # max_position_embeddings is then a default, and vLLM accepts any max_model_len.
    max_position_embeddings_given: bool = True
    tie_word_embeddings: bool = False
    attention_bias: bool = False  # Qwen2 puts a bias on q/k/v
    qk_norm: bool = False  # Qwen3 normalises q and k per head
    gated_mlp: bool = True  # False: an up and a down projection (GPT-2, OPT, Falcon, ...), not three
    model_type: str = "llama"
    weight_dtype: str = "bf16"
    # When the checkpoint's real size is known (hybrid or quantised layouts the dense formula
    # does not describe), it wins over the derived count; the source must say where it is from.
    weights_bytes: int | None = None
    weights_source: str = "checkpoint size given by the preset"  # where weights_bytes comes from
    # Today's attention layouts, as config.json names them. layer_types: one of LAYER_TYPES per
    # layer, () meaning every layer is full attention.
    layer_types: tuple = ()
    sliding_window: int | None = None  # tokens a sliding_attention layer attends to
    # A linear_attention (Gated DeltaNet / Mamba) layer keeps a fixed state per request instead of
    # a KV cache: its bytes, whole model (split over tensor-parallel devices like the heads).
    linear_state_bytes: int | None = None
    # Multi-head latent attention (DeepSeek V2/V3): per token and layer the cache holds one
    # latent of kv_lora_rank plus a rope part of qk_rope_head_dim, shared by all heads. head_dim
    # is then the query/key head (qk_nope_head_dim + qk_rope_head_dim); v_head_dim the value's.
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    q_lora_rank: int | None = None
    v_head_dim: int | None = None
    # Mixture of experts: every MoE layer holds num_experts MLPs of moe_intermediate_size (plus
    # shared experts of shared_expert_intermediate_size in all); a token runs num_experts_per_tok.
    # The first num_dense_layers layers keep a dense MLP of intermediate_size.
    num_experts: int | None = None
    num_experts_per_tok: int | None = None
    moe_intermediate_size: int | None = None
    shared_expert_intermediate_size: int = 0
    num_dense_layers: int = 0
    source: str = ""
    description: str = ""

    def __post_init__(self):
        owner = f"model {self.name!r}"
        for name in ("num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim", "hidden_size",
                     "intermediate_size", "vocab_size", "max_position_embeddings"):
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
        for name in ("max_model_len_limit", "sliding_window", "linear_state_bytes", "kv_lora_rank",
                     "qk_rope_head_dim", "q_lora_rank", "v_head_dim", "num_experts", "num_experts_per_tok",
                     "moe_intermediate_size"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, _positive_int(owner, name, getattr(self, name)))
        for name in ("shared_expert_intermediate_size", "num_dense_layers"):
            if getattr(self, name):
                object.__setattr__(self, name, _positive_int(owner, name, getattr(self, name)))
        if self.max_model_len_limit is not None and self.max_model_len_limit < self.max_position_embeddings:
            raise ConfigError(f"{owner}: max_model_len_limit ({self.max_model_len_limit:,}) is less than "
                              f"max_position_embeddings ({self.max_position_embeddings:,}); it is the positions "
                              "rope_scaling stretches them to, never fewer: leave it out, or lower "
                              "max_position_embeddings")
        object.__setattr__(self, "layer_types", _check_layer_layout(self, owner))
        _check_latent_and_experts(self, owner)

    @property
    def longest_context(self) -> int:
        """The longest max_model_len vLLM starts this model with, and its default."""
        return self.max_model_len_limit or self.max_position_embeddings

    def replace(self, **changes) -> "ModelConfig":
        return dataclasses.replace(self, **changes)

    def count_layers(self, layer_type: str) -> int:
        if not self.layer_types:
            return self.num_hidden_layers if layer_type == "full_attention" else 0
        return self.layer_types.count(layer_type)

    @property
    def uses_mla(self) -> bool:
        return self.kv_lora_rank is not None


def _check_layer_layout(model: ModelConfig, owner: str) -> tuple:
    """layer_types as a tuple, each entry known, one per layer, with the fields its types need."""
    types = model.layer_types
    if isinstance(types, str) or not isinstance(types, (list, tuple)):
        raise ConfigError(f"{owner}: layer_types must be a list with one of {', '.join(LAYER_TYPES)} per layer, "
                          f"got {types!r}")
    types = tuple(types)
    if types and len(types) != model.num_hidden_layers:
        raise ConfigError(f"{owner}: layer_types lists {len(types)} layers but num_hidden_layers is "
                          f"{model.num_hidden_layers}; give one of {', '.join(LAYER_TYPES)} per layer")
    unknown = next(((i, t) for i, t in enumerate(types) if t not in LAYER_TYPES), None)
    if unknown:
        raise ConfigError(f"{owner}: layer_types[{unknown[0]}] is {unknown[1]!r}; each layer is one of "
                          f"{', '.join(LAYER_TYPES)}")
    for layer_type, field, need in (("sliding_attention", "sliding_window", "a whole number of tokens"),
                                    ("linear_attention", "linear_state_bytes", "the bytes of its state per request")):
        count = types.count(layer_type)
        if count and getattr(model, field) is None:
            raise ConfigError(f"{owner}: {field} is missing: layer_types has {count} {layer_type} layers, "
                              f"each needs {need}")
        if not count and getattr(model, field) is not None:
            raise ConfigError(f"{owner}: {field} is set but no layer is {layer_type}; list them in layer_types "
                              f"or leave {field} out")
    if types and types.count("linear_attention") == len(types):
        raise ConfigError(f"{owner}: layer_types has no attention layer; kvscope models a KV cache beside "
                          "linear_attention layers, not without one")
    return types


def _check_latent_and_experts(model: ModelConfig, owner: str) -> None:
    if (model.kv_lora_rank is None) != (model.qk_rope_head_dim is None):
        given, missing = (("kv_lora_rank", "qk_rope_head_dim") if model.kv_lora_rank is not None
                          else ("qk_rope_head_dim", "kv_lora_rank"))
        raise ConfigError(f"{owner}: {given} is set without {missing}; multi-head latent attention caches "
                          "both (the latent and its rope part) per token")
    latent_only = [f for f in ("q_lora_rank", "v_head_dim") if getattr(model, f) is not None]
    if latent_only and not model.uses_mla:  # read by the latent layout only: ignored without a word
        one = len(latent_only) == 1
        raise ConfigError(f"{owner}: {' and '.join(latent_only)} describe{'s' * one} multi-head latent attention, "
                          "but kv_lora_rank is not set; set kv_lora_rank and qk_rope_head_dim, or leave "
                          f"{'it' if one else 'them'} out")
    if model.uses_mla and model.qk_rope_head_dim >= model.head_dim:
        raise ConfigError(f"{owner}: qk_rope_head_dim ({model.qk_rope_head_dim}) must be less than head_dim "
                          f"({model.head_dim}), which holds qk_nope_head_dim + qk_rope_head_dim")
    moe = ("num_experts", "num_experts_per_tok", "moe_intermediate_size")
    given = [f for f in moe if getattr(model, f) is not None]
    if given and len(given) < len(moe):
        raise ConfigError(f"{owner}: a mixture of experts needs {', '.join(moe)}; "
                          f"missing {', '.join(f for f in moe if f not in given)}")
    if given and model.num_experts_per_tok > model.num_experts:
        raise ConfigError(f"{owner}: num_experts_per_tok ({model.num_experts_per_tok}) is more than num_experts "
                          f"({model.num_experts})")
    if (model.num_dense_layers or model.shared_expert_intermediate_size) and not given:
        raise ConfigError(f"{owner}: num_dense_layers and shared_expert_intermediate_size describe a mixture of "
                          "experts; set num_experts, num_experts_per_tok and moe_intermediate_size too")
    if model.num_dense_layers > model.num_hidden_layers:
        raise ConfigError(f"{owner}: num_dense_layers ({model.num_dense_layers}) is more than num_hidden_layers "
                          f"({model.num_hidden_layers})")


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
    # How achieved speed relates to the peaks above, and where that is known from: a table of
    # engine/cost_model.py's UNCALIBRATED fields (None or missing fields: the datasheet peaks).
    calibration: dict | None = None
    # memory_bytes was set (with_memory), not detected: on a CPU the KV pool then comes out of it
    # as on a GPU (memory x utilization - weights - reserve) instead of the default CPU budget.
    memory_is_budget: bool = False

    def __post_init__(self):
        owner = f"hardware {self.name!r}"
        object.__setattr__(self, "calibration", check_calibration(self.calibration, owner))
        object.__setattr__(self, "memory_bytes", _positive_int(owner, "memory_bytes", self.memory_bytes))
        object.__setattr__(
            self,
            "memory_bandwidth_bytes_per_s",
            real_number(self.memory_bandwidth_bytes_per_s, f"{owner}: memory_bandwidth_bytes_per_s", MIN_DEVICE_RATE,
                        1e21),
        )
        object.__setattr__(self, "gpu_count", _positive_int(owner, "gpu_count", self.gpu_count))
        if not isinstance(self.peak_flops, dict) or not self.peak_flops:
            raise ConfigError(f"{owner}: peak_flops needs a table of at least one dtype = FLOP/s, "
                              f"like {{ bf16 = 989e12 }}, got {self.peak_flops!r:.60}")
        link = real_number(self.interconnect_bandwidth_bytes_per_s, f"{owner}: interconnect_bandwidth_bytes_per_s",
                           0.0, 1e21)
        if 0 < link < MIN_DEVICE_RATE:  # 1e-300 put each all-reduce at 1e300 s: a summary of NaN and inf
            raise ConfigError(f"{owner}: interconnect_bandwidth_bytes_per_s must be 0 (none given: the memory "
                              f"bandwidth stands in) or at least {MIN_DEVICE_RATE:,.0f}, got {shown(link)}")
        object.__setattr__(self, "interconnect_bandwidth_bytes_per_s", link)
        if self.kind not in ("gpu", "cpu"):
            raise ConfigError(f"{owner}: kind must be 'gpu' or 'cpu', got {self.kind!r:.60}")
        flops = {}
        for dtype, value in self.peak_flops.items():
            key = normalize_dtype(dtype, WEIGHT_DTYPE_BYTES, "peak_flops dtype")
            flops[key] = real_number(value, f"{owner}: peak_flops.{dtype}", MIN_DEVICE_RATE, 1e21)
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
        return self.replace(memory_bytes=int(memory_bytes), memory_is_budget=True,
                            description=f"{self.description}, memory set to {memory_bytes / 1024**3:.2f} GiB")


def _arg(default, help: str = "", *, flags: str | None = "engine", default_text: str | None = None,
         choices: tuple = (), unit: str = ""):
    """An EngineArgs field and what its command-line flag is made from: `help`; `flags`, the group
    of flags it appears in (None: no flag); `default_text`, how the default reads where the value
    alone would not say it ("" for nothing); `choices`, the only values it takes; `unit` ("bytes":
    given as a number such as 80e9, kept whole)."""
    return dataclasses.field(default=default, metadata={
        "help": help, "flags": flags, "default_text": default_text, "choices": choices, "unit": unit})


@dataclass(frozen=True)
class EngineArgs:
    """Engine arguments, spelled as vLLM spells them. None means "derive a sensible default"."""

    # Not a fixed choice on the command line: config.json spellings (float16) are accepted, and the
    # engine names the choices when a value fits none.
    kv_cache_dtype: str = _arg("auto", f"KV precision: auto (the model's), {', '.join(KV_CACHE_DTYPE_BYTES)}",
                               default_text="")
    gpu_memory_utilization: float | None = _arg(None, "share of device memory to use",
                                                default_text="default: vLLM's, 0.92 from vLLM 0.21, 0.9 before")
    max_model_len: int | None = _arg(None, "longest prompt + output, tokens", default_text="default: the model's")
    block_size: int = _arg(16, "tokens per KV block")
    tensor_parallel_size: int | None = _arg(None, "devices the model is split over",
                                            default_text="default: all the hardware has")
    accounting: str = _arg("vllm", "how the KV pool is sized: vllm (what vLLM subtracts and its layer groups) or "
                           "lesson (memory x utilization - weights, every layer a full KV cache)", choices=ACCOUNTINGS)
    vllm_version: str = _arg(DEFAULT_VLLM_VERSION, "the vLLM release whose accounting is modelled (before 0.8: V0)")
    reserve_bytes: int = _arg(0, "memory held back per device beyond what the accounting subtracts", unit="bytes")
    # Size the KV pool directly (per device) instead of from memory x utilization, as vLLM's
    # --kv-cache-memory-bytes does. On a CPU target this is the budget the user sets.
    kv_cache_memory_bytes: int | None = _arg(
        None, "size the KV pool directly, bytes per device", unit="bytes",
        default_text=f"default on a CPU: {DEFAULT_CPU_KV_CACHE_BYTES / GiB:g} GiB")
    max_num_seqs: int | None = _arg(None, "most requests running at once", flags="scheduler",
                                    default_text=f"vLLM's: {LARGE_GPU_MAX_NUM_SEQS:,} on GPUs of 70 GiB or more "
                                                 f"other than the A100, else {DEFAULT_MAX_NUM_SEQS}")
    max_num_batched_tokens: int | None = _arg(None, "token budget per step", flags="scheduler",
                                              default_text=f"default: vLLM's on a GPU, {SMALL_GPU_MAX_NUM_BATCHED_TOKENS} "
                                                           "under 70 GiB and on the A100, else "
                                                           f"{DEFAULT_MAX_NUM_BATCHED_TOKENS}; "
                                                           f"{DEFAULT_MAX_NUM_BATCHED_TOKENS} on a CPU")
    enable_prefix_caching: bool = _arg(True, "reuse KV blocks of identical prefixes", flags="scheduler")
    enable_chunked_prefill: bool = _arg(True, "split long prompts over steps, mixed with decodes", flags="scheduler")
    scheduling: str = _arg("continuous", "continuous (iteration-level) or static batching", flags="scheduler",
                           choices=SCHEDULINGS)
    allocation: str = _arg("paged", "paged blocks on demand, or a contiguous max_model_len reservation",
                           flags="scheduler", choices=ALLOCATIONS)
    enforce_eager: bool = _arg(False, "capture no CUDA graphs: vLLM's accounting then holds no memory for them, "
                               "and the real backend on CUDA runs every decode step eagerly")
    seed: int = _arg(0, flags=None)  # the run's flag (--seed) also seeds its workload
    # Fixed cost of one engine step on the device (launches, sampling, host work); None: the
    # hardware's calibration says (engine/cost_model.py).
    step_overhead_s: float | None = _arg(None, flags=None)
    num_gpu_blocks_override: int | None = _arg(None, flags=None)

    def __post_init__(self):
        owner = "engine"
        object.__setattr__(self, "block_size", _positive_int(owner, "block_size", self.block_size))
        for name in ("max_model_len", "max_num_seqs", "max_num_batched_tokens", "tensor_parallel_size", "num_gpu_blocks_override",
                     "kv_cache_memory_bytes"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, _positive_int(owner, name, getattr(self, name)))
        if self.gpu_memory_utilization is not None:
            utilization = _positive_float(owner, "gpu_memory_utilization", self.gpu_memory_utilization)
            if utilization > 1:
                raise ConfigError(f"gpu_memory_utilization must be in (0, 1], got {shown(utilization)}")
            object.__setattr__(self, "gpu_memory_utilization", utilization)
        object.__setattr__(self, "reserve_bytes", whole_number(self.reserve_bytes, "reserve_bytes", 0, ceiling("")))
        if self.reserve_bytes and self.kv_cache_memory_bytes is not None:
            raise ConfigError("reserve_bytes holds memory back from what the accounting leaves to the KV cache, and "
                              "kv_cache_memory_bytes sizes that cache itself: give one of them")
        if parse_vllm_version(self.vllm_version) > parse_vllm_version(DEFAULT_VLLM_VERSION):
            raise ConfigError(f"vllm_version {self.vllm_version}: kvscope models vLLM's memory accounting up to "
                              f"{DEFAULT_VLLM_VERSION}, not a newer release; give {DEFAULT_VLLM_VERSION} or older")
        if self.kv_cache_dtype != "auto":
            object.__setattr__(
                self, "kv_cache_dtype",
                normalize_dtype(self.kv_cache_dtype, dict.fromkeys(KV_CACHE_DTYPES), "kv_cache_dtype"))
        for field in dataclasses.fields(self):
            choices, value = field.metadata["choices"], getattr(self, field.name)
            if choices and value not in choices:
                raise ConfigError(f"{field.name} must be {' or '.join(map(repr, choices))}, got {value!r}")
        if self.step_overhead_s is not None:
            real_number(self.step_overhead_s, "step_overhead_s", 0.0, 3600.0)

    def replace(self, **changes) -> "EngineArgs":
        return dataclasses.replace(self, **changes)


def parse_vllm_version(version: str) -> tuple[int, int]:
    """(major, minor) of a vLLM release such as "0.19", "0.19.1", "0.10.1.1", "0.6.4.post1" or "v0.10" (as
    vLLM's tags are written); one older than vLLM's first release (0.0) is refused with the range."""
    form = re.fullmatch(r"[vV]?([0-9]{1,4})\.([0-9]{1,4})(?:\.[0-9]{1,4}){0,2}(?:\.?(?:post|rc|dev|a|b)[0-9]{0,4})*"
                        r"(?:\+[0-9A-Za-z.]{1,64})?", str(version).strip())  # [0-9]: "²" is a digit to isdigit()
    if form is None:
        raise ConfigError(f"vllm_version must look like 0.19 or 0.6.4, got {version!r}")
    parsed = int(form[1]), int(form[2])
    if parsed < (0, 1):
        raise ConfigError(f"vllm_version {version}: no vLLM release is older than {OLDEST_VLLM_VERSION}, its first; "
                          f"kvscope models vLLM's memory accounting from {OLDEST_VLLM_VERSION} to {DEFAULT_VLLM_VERSION}")
    return parsed


def default_gpu_memory_utilization(vllm_version: str) -> float:
    """The share of device memory vLLM uses when none is given, in that release."""
    version = parse_vllm_version(vllm_version)
    return GPU_MEMORY_UTILIZATION_DEFAULTS[max(v for v in GPU_MEMORY_UTILIZATION_DEFAULTS if v <= version)]


def as_served(model: ModelConfig, hardware: HardwareSpec) -> ModelConfig:
    """The model as vLLM's --dtype auto serves it: a float32 checkpoint computes (and caches K/V) in
    16 bits on a GPU, bf16 where the device has it, else fp16; on a CPU it stays float32."""
    if model.weight_dtype != "fp32" or hardware.kind != "gpu" or model.weights_bytes is not None:
        return model
    return model.replace(weight_dtype="bf16" if "bf16" in hardware.peak_flops else "fp16")


def resolve_kv_cache_dtype(kv_cache_dtype: str, model: ModelConfig) -> str:
    """vLLM's "auto": the KV cache takes the model's activation dtype (16-bit for quantised weights)."""
    if kv_cache_dtype != "auto":
        return kv_cache_dtype
    return model.weight_dtype if model.weight_dtype in COMPUTE_DTYPES else "bf16"


@dataclass(frozen=True)
class ResolvedArgs:
    """EngineArgs with every default filled in against one model and hardware."""

    args: EngineArgs
    kv_cache_dtype: str
    max_model_len: int
    max_num_batched_tokens: int
    tensor_parallel_size: int
    kv_cache_memory_bytes: int | None = None  # per device; None: memory x utilization - weights - reserve
    max_num_seqs: int = DEFAULT_MAX_NUM_SEQS
    gpu_memory_utilization: float = GPU_MEMORY_UTILIZATION_DEFAULTS[CUDA_GRAPHS_PROFILED_FROM]


def _large_gpu(hardware: HardwareSpec) -> bool:
    return hardware.kind == "gpu" and hardware.memory_bytes >= 70 * GiB and "a100" not in hardware.name.lower()


def default_max_num_batched_tokens(hardware: HardwareSpec) -> int:
    """vLLM's API-server default (engine/arg_utils.py, 0.9 - 0.33): 8,192 tokens a step on GPUs of
    70 GiB or more other than the A100, 2,048 on the others. kvscope keeps 8,192 on a CPU."""
    if hardware.kind == "cpu" or _large_gpu(hardware):
        return DEFAULT_MAX_NUM_BATCHED_TOKENS
    return SMALL_GPU_MAX_NUM_BATCHED_TOKENS


def default_max_num_seqs(hardware: HardwareSpec) -> int:
    """vLLM's API-server default by the same rule: 1,024 requests on the large GPUs, 256 elsewhere.
    It sizes the sampler's rows in vLLM's memory profile as well as the batch."""
    return LARGE_GPU_MAX_NUM_SEQS if _large_gpu(hardware) else DEFAULT_MAX_NUM_SEQS


def resolve_engine_args(args: EngineArgs, model: ModelConfig, hardware: HardwareSpec) -> ResolvedArgs:
    model = as_served(model, hardware)
    max_model_len = args.max_model_len or model.longest_context
    if model.max_position_embeddings_given and max_model_len > model.longest_context:
        positions = "max_position_embeddings" + " x its rope_scaling" * bool(model.max_model_len_limit)
        raise ConfigError(f"max_model_len {max_model_len:,} tokens is longer than the {model.longest_context:,} "
                          f"positions of {model.name} ({positions}): vLLM refuses to start with it, and the model "
                          f"was not trained past them; give at most {model.longest_context:,}")
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
    if model.num_attention_heads % tp:  # vLLM's check too: each device takes a whole share of the query heads
        raise ConfigError(
            f"tensor_parallel_size {tp} cannot split num_attention_heads {model.num_attention_heads} evenly over "
            "the devices"
        )
    if args.max_num_batched_tokens is not None:
        budget = args.max_num_batched_tokens
        if not args.enable_chunked_prefill and budget < max_model_len:
            raise ConfigError(
                f"max_num_batched_tokens ({budget}) is smaller than max_model_len ({max_model_len}); "
                "without chunked prefill a whole prompt must fit in one step's token budget"
            )
    else:
        default = default_max_num_batched_tokens(hardware)
        budget = default if args.enable_chunked_prefill else max(default, max_model_len)
    max_num_seqs = args.max_num_seqs or default_max_num_seqs(hardware)
    if budget < max_num_seqs:  # vLLM's check: each running request needs a token of every step's budget
        raise ConfigError(f"max_num_batched_tokens ({budget:,}) is smaller than max_num_seqs ({max_num_seqs:,}), "
                          f"which vLLM refuses; give max_num_batched_tokens of at least {max_num_seqs:,} or a "
                          "smaller max_num_seqs")
    kv_budget = args.kv_cache_memory_bytes
    if kv_budget is None and hardware.kind == "cpu" and not hardware.memory_is_budget:
        kv_budget = DEFAULT_CPU_KV_CACHE_BYTES
    return ResolvedArgs(
        args=args,
        kv_cache_dtype=resolve_kv_cache_dtype(args.kv_cache_dtype, model),
        max_model_len=max_model_len,
        max_num_batched_tokens=budget,
        tensor_parallel_size=tp,
        kv_cache_memory_bytes=kv_budget,
        max_num_seqs=max_num_seqs,
        gpu_memory_utilization=args.gpu_memory_utilization or default_gpu_memory_utilization(args.vllm_version),
    )

