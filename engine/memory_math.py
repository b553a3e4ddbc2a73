"""How a device's memory splits into weights, what the server holds back, and the KV cache; how
many sequences that admits.

Two accountings (EngineArgs.accounting):
- "lesson", the seeds' formula: KV pool = memory x gpu_memory_utilization - weights, every layer
  a full KV cache of 2 x kv_heads x head_dim x bytes per token;
- "vllm", what vLLM allocates: the same memory (CUDA-visible, as torch.cuda.mem_get_info reports
  it) minus the weights, the activation peak of its profiling forward pass, non-torch memory
  (CUDA context, NCCL and all-reduce buffers) and, from 0.21, its estimate of CUDA-graph
  memory; the rest is laid out in vLLM's layer groups (kv_layout.py).
An explicit reserve_bytes is held back on top of either. With tensor parallelism every device
holds all layers but 1/tp of the weights and of the KV heads.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from kvscope.engine.config import (CUDA_GRAPHS_PROFILED_FROM, KV_CACHE_DTYPE_BYTES, WEIGHT_DTYPE_BYTES, ConfigError,
                                   HardwareSpec, ModelConfig, ResolvedArgs, as_served, parse_vllm_version)
from kvscope.engine.kv_layout import KVLayout, kv_bytes_per_token_of, lesson_layout, tokens_in_flight, vllm_layout
from kvscope.engine.checks import MAX_NUM_BLOCKS
from kvscope.engine.units import GiB, MiB, format_bytes, format_parameters

def _attention_parameters(model: ModelConfig) -> int:
    h, heads, kv, hd = model.hidden_size, model.num_attention_heads, model.num_key_value_heads, model.head_dim
    if model.uses_mla:  # q (optionally through a low-rank latent), the kv latent and its up-projection, o
        v = model.v_head_dim or hd - model.qk_rope_head_dim
        q_lora = model.q_lora_rank
        q = h * q_lora + q_lora + q_lora * heads * hd if q_lora else h * heads * hd
        kv_latent = h * (model.kv_lora_rank + model.qk_rope_head_dim) + model.kv_lora_rank
        kv_up = model.kv_lora_rank * heads * (hd - model.qk_rope_head_dim + v)
        return q + kv_latent + kv_up + heads * v * h
    q_out, kv_out = heads * hd, kv * hd
    params = h * q_out + 2 * h * kv_out + q_out * h
    if model.attention_bias or model.model_type == "qwen2":  # Qwen2 biases q/k/v
        params += q_out + 2 * kv_out
    if model.attention_bias and model.model_type != "qwen2":
        params += h
    if model.qk_norm:
        params += 2 * hd
    return params


def mlp_matrices(model: ModelConfig) -> int:
    return 3 if model.gated_mlp else 2


def num_parameters(model: ModelConfig, active: bool = False) -> int:
    """Parameter count from the config: Llama-family attention (or multi-head latent attention), a
    gated MLP (gate, up, down; up and down where gated_mlp is False), or experts (active=True: only
    the num_experts_per_tok a token runs). A linear-attention layer is counted like an attention
    layer: within about 10 % of a Gated DeltaNet's projections, a few per cent of the whole model."""
    h = model.hidden_size
    dense_mlp = mlp_matrices(model) * h * model.intermediate_size
    if model.num_experts:
        experts = model.num_experts_per_tok if active else model.num_experts
        moe_mlp = experts * 3 * h * model.moe_intermediate_size + 3 * h * model.shared_expert_intermediate_size \
            + h * model.num_experts  # the router
        mlps = model.num_dense_layers * dense_mlp + (model.num_hidden_layers - model.num_dense_layers) * moe_mlp
    else:
        mlps = model.num_hidden_layers * dense_mlp
    per_layer_rest = _attention_parameters(model) + 2 * h  # two norms
    embeddings = model.vocab_size * h
    lm_head = 0 if model.tie_word_embeddings else model.vocab_size * h
    return embeddings + model.num_hidden_layers * per_layer_rest + mlps + h + lm_head


def kv_bytes_per_token(model: ModelConfig, kv_cache_dtype: str, kv_heads: int | None = None) -> int:
    """The lesson's formula: 2 (K and V) x layers x kv_heads x head_dim x bytes."""
    heads = model.num_key_value_heads if kv_heads is None else kv_heads
    return 2 * model.num_hidden_layers * heads * model.head_dim * KV_CACHE_DTYPE_BYTES[kv_cache_dtype]


def weights_bytes(model: ModelConfig) -> tuple[int, str]:
    """Bytes of weights, and a few words on where the figure comes from. Quantised checkpoints
    keep the embeddings and the LM head in 16 bits (vLLM quantises the linear layers only)."""
    if model.weights_bytes is not None:
        return model.weights_bytes, model.weights_source
    params = num_parameters(model)
    size = WEIGHT_DTYPE_BYTES[model.weight_dtype]
    if size < 2:
        embeddings = model.vocab_size * model.hidden_size * (1 if model.tie_word_embeddings else 2)
        total = int((params - embeddings) * size + embeddings * 2)
        return total, f"{format_parameters(params)} parameters, {model.weight_dtype} ({size:g} B) but 16-bit embeddings"
    return int(params * size), f"{format_parameters(params)} parameters x {size:g} B ({model.weight_dtype})"


# bitsandbytes on load (BitsAndBytesConfig's defaults): only the decoder's linear layers shrink,
# int8 with an fp32 scale per output row, nf4 with an fp32 absmax per 64 weights and a 16-value
# fp32 code per layer; embeddings, norms, biases and the LM head stay in the dtype loaded.
BNB_NF4_BLOCK = 64


def bitsandbytes_weights_bytes(model: ModelConfig, quantization: str, dtype: str) -> int:
    """The weights of a dense Llama-family model once bitsandbytes has quantised them to int8 or
    nf4 on load. On a CPU with AVX512-BF16 it keeps nf4 absmax in bf16: 2 bytes per 64 weights less."""
    h, i = model.hidden_size, model.intermediate_size
    q, kv = model.num_attention_heads * model.head_dim, model.num_key_value_heads * model.head_dim
    linears = [(q, h), (kv, h), (kv, h), (h, q), (h, i)] + [(i, h)] * (mlp_matrices(model) - 1)
    per_layer = sum(o * n + 4 * o if quantization == "int8" else
                    (o * n + 1) // 2 + 4 * math.ceil(o * n / BNB_NF4_BLOCK) + 64 for o, n in linears)
    rest = num_parameters(model) - model.num_hidden_layers * sum(o * n for o, n in linears)
    return int(rest * WEIGHT_DTYPE_BYTES[dtype] + model.num_hidden_layers * per_layer)


# -- what vLLM holds back besides the weights -------------------------------------------------------
#
# The activation peak is the larger of two passes vLLM profiles (gpu_model_runner.profile_run):
# - a forward over max_num_batched_tokens tokens, whose peak is one MLP's: gate/up (2 x I) and
#   its product (I), split over tp devices, beside about four hidden-sized tensors;
# - the sampler over min(max_num_seqs, tokens) rows of logits: 14.5 bytes per logit (a 16-bit
#   copy and three fp32 ones: logits, probabilities, sorted top-p/top-k) beside 1.25 hidden-sized
#   tensors of every token and 32 MiB.
# Mixture-of-experts layers add the fused-MoE workspace, which persists past the forward:
# tokens x experts per token x (max(2 I / tp, hidden) + I / tp) activations.
# The sampler constants are a least-squares fit to the twelve sampler-bound vLLM 0.19 logs of
# llm-d-planner PR 205 (H100, 8,192 tokens, 1,024 sequences, vocabularies 49K - 256K, hidden
# 2K - 8K: Llama 3.1 8B/70B, Qwen2.5 7B/72B, Qwen3 8B, Gemma 2 2B/9B/27B, Gemma 7B, Phi-4, Phi-2,
# Granite 3.1 2B; residuals under 0.01 GiB). The forward term is counted, not fitted; it matches
# CodeLlama 7B and Granite 8B there (0.75 / 0.84 GiB against 0.77 / 0.85 logged) and a V0 log on
# an RTX 3090 (Qwen2.5 7B, 8,192 tokens: 1.09 GiB both).
SAMPLER_BYTES_PER_LOGIT = 14.5
SAMPLER_HIDDEN_COPIES = 1.25
SAMPLER_FIXED_BYTES = 32 * MiB
# Non-torch memory grown during profiling (CUDA context, cuBLAS workspaces, NCCL): 0.24 - 0.27
# GiB at TP 1 in the same logs; with TP >= 2 over NVLink the custom all-reduce and NCCL buffers
# bring it to 2.06 - 2.21 GiB per GPU. Over PCIe (GeForce, L4) there is no custom all-reduce.
NON_TORCH_BYTES = int(0.25 * GiB)
NON_TORCH_BYTES_NVLINK_TP = int(2.1 * GiB)
NVLINK_BYTES_PER_S = 300e9
# From 0.21 (CUDA_GRAPHS_PROFILED_FROM) vLLM subtracts its estimate of CUDA-graph memory (51 capture
# sizes, piecewise and full): a least-squares line through its 30 "Estimated CUDA graph memory" figures in the 0.19
# logs above (0.52 - 1.92 GiB; typical error 0.2 GiB).
CUDA_GRAPH_BASE_BYTES = int(0.40 * GiB)
CUDA_GRAPH_BYTES_PER_LAYER = int(0.0158 * GiB)
V1_FROM = (0, 8)  # the V1 engine (its profiler and hybrid allocator) is the default from 0.8
KV_SIZE_IS_CONCURRENCY_FROM = (0, 20)  # "GPU KV cache size" = concurrency x max_model_len (0.24, 0.33)
MAMBA_ALIGN_FROM = (0, 24)  # prefix caching on a hybrid model keeps two state blocks per request


def activation_peak_bytes(model: ModelConfig, tensor_parallel_size: int, tokens: int, num_seqs: int) -> int:
    """The profiled activation peak on one device (see the comment above)."""
    tp, h = tensor_parallel_size, model.hidden_size
    act = 4 if model.weight_dtype == "fp32" else 2
    mlp = model.intermediate_size if (not model.num_experts or model.num_dense_layers) \
        else model.shared_expert_intermediate_size
    forward = tokens * (mlp_matrices(model) * mlp / tp + 4 * h) * act  # ungated: up and its activation
    sampler = SAMPLER_BYTES_PER_LOGIT * min(num_seqs, tokens) * model.vocab_size \
        + SAMPLER_HIDDEN_COPIES * tokens * h * act + SAMPLER_FIXED_BYTES
    workspace = 0
    if model.num_experts:
        expert = model.moe_intermediate_size / tp
        workspace = tokens * model.num_experts_per_tok * (max(2 * expert, h) + expert) * act
    return int(max(forward, sampler) + workspace)


def non_torch_bytes(hardware: HardwareSpec, tensor_parallel_size: int) -> int:
    if tensor_parallel_size > 1 and hardware.interconnect_bandwidth_bytes_per_s >= NVLINK_BYTES_PER_S:
        return NON_TORCH_BYTES_NVLINK_TP
    return NON_TORCH_BYTES


def cuda_graph_bytes(model: ModelConfig) -> int:
    return CUDA_GRAPH_BASE_BYTES + CUDA_GRAPH_BYTES_PER_LAYER * model.num_hidden_layers


def profiled_tokens(resolved: ResolvedArgs, version: tuple[int, int]) -> int:
    """The tokens vLLM's profiling forward runs: the step budget. V0 (before 0.8) left chunked
    prefill off up to 32K contexts, so its budget, unless set, was a whole max_model_len prompt."""
    if version < V1_FROM and resolved.args.max_num_batched_tokens is None:
        return max(resolved.max_model_len, 2048) if resolved.max_model_len <= 32768 else 2048
    return resolved.max_num_batched_tokens


@dataclass(frozen=True)
class MemoryPlan:
    model: str
    hardware: str
    tensor_parallel_size: int
    memory_bytes: int  # all devices together
    gpu_memory_utilization: float
    weights_bytes: int
    weights_source: str
    held_back_bytes: int  # all devices together: everything held back besides weights and KV
    kv_cache_dtype: str
    kv_bytes_per_token: int  # whole model, every layer that caches per token
    kv_bytes_per_token_per_device: int
    max_model_len: int
    kv_bytes_per_sequence: int  # what one max_model_len request holds, all devices
    block_size: int
    block_bytes: int  # one block id on all devices together
    kv_pool_bytes: int  # all devices together; negative when the weights do not fit
    num_blocks: int
    max_concurrent_sequences: float
    kv_pool_source: str = ""
    # the parts of held_back_bytes (all devices together) and what the activation was profiled with
    accounting: str = "lesson"
    vllm_version: str = ""
    activation_bytes: int = 0
    non_torch_bytes: int = 0
    cudagraph_bytes: int = 0
    extra_reserve_bytes: int = 0  # EngineArgs.reserve_bytes
    profiled_tokens: int = 0
    profiled_seqs: int = 0
    blocks_per_sequence: int = 0  # over every layer group, at max_model_len
    kv_cache_size_tokens: int = 0  # vLLM's "GPU KV cache size: N tokens" line, by version
    layer_groups: tuple = ()  # (kind, layers, blocks per request) of each group
    padding_layers: int = 0
    # the lesson's formula on the same inputs, beside what vLLM allocates
    lesson_kv_pool_bytes: int = 0
    lesson_num_blocks: int = 0
    lesson_max_concurrent_sequences: float = 0.0

    def __post_init__(self):
        if not self.blocks_per_sequence:  # a plan recorded before layer groups
            object.__setattr__(self, "blocks_per_sequence", math.ceil(self.max_model_len / self.block_size))

    @property
    def fits(self) -> bool:
        return self.num_blocks > 0

    @property
    def is_set_budget(self) -> bool:
        """The pool is kv_cache_memory_bytes, not what is left of the memory: nothing is subtracted."""
        return self.kv_pool_source.startswith("kv_cache_memory_bytes")

    def to_dict(self) -> dict:
        """Plain JSON-ready values (lists, not tuples), so a plan read back from a file compares equal."""
        out = asdict(self)
        out["layer_groups"] = [list(group) for group in self.layer_groups]
        return out


def _size_line(layout: KVLayout, num_blocks: int, concurrency: float, max_model_len: int,
               version: tuple[int, int], lesson: bool) -> int:
    if lesson or version < V1_FROM:
        return num_blocks * layout.block_size  # V0's "# GPU blocks" x block_size
    if version < KV_SIZE_IS_CONCURRENCY_FROM:
        return num_blocks // len(layout.groups) * layout.block_size
    return int(concurrency * max_model_len)


def _layout(model: ModelConfig, resolved: ResolvedArgs, version: tuple[int, int], lesson: bool) -> KVLayout:
    args, tp = resolved.args, resolved.tensor_parallel_size
    if lesson:
        return lesson_layout(model, resolved.kv_cache_dtype, tp, args.block_size, resolved.max_model_len)
    return vllm_layout(model, resolved.kv_cache_dtype, tp, args.block_size, resolved.max_model_len,
                       tokens_in_flight(resolved.max_num_batched_tokens, version),
                       mamba_align=args.enable_prefix_caching and version >= MAMBA_ALIGN_FROM,
                       hybrid_allocator=version >= V1_FROM)


def plan_memory(model: ModelConfig, hardware: HardwareSpec, resolved: ResolvedArgs) -> MemoryPlan:
    served = as_served(model, hardware)
    args = resolved.args
    tp = resolved.tensor_parallel_size
    kv_dtype = resolved.kv_cache_dtype
    lesson = args.accounting == "lesson"
    version = parse_vllm_version(args.vllm_version)
    weights, weights_source = weights_bytes(served)
    if served is not model:
        weights_source += f"; the float32 checkpoint served in {served.weight_dtype}, as vLLM's --dtype auto does"
    model = served
    usable_per_device = hardware.memory_bytes * resolved.gpu_memory_utilization
    tokens = profiled_tokens(resolved, version)
    activation = non_torch = graphs = 0
    if resolved.kv_cache_memory_bytes is not None:
        pool_per_device = lesson_pool = resolved.kv_cache_memory_bytes
        pool_source = "kv_cache_memory_bytes (a set budget)"
    else:
        lesson_pool = int(usable_per_device - weights / tp - args.reserve_bytes)
        if lesson:
            pool_source = "memory x gpu_memory_utilization - weights - reserve (the memory-math lesson's formula)"
        else:
            activation = activation_peak_bytes(model, tp, tokens, resolved.max_num_seqs)
            on_cuda = hardware.kind == "gpu"  # a CPU target has no CUDA context (non-torch) and captures no graphs
            non_torch = non_torch_bytes(hardware, tp) if on_cuda else 0
            # --enforce-eager captures no CUDA graphs: vLLM then holds nothing back for them
            graphs = (cuda_graph_bytes(model) if on_cuda and version >= CUDA_GRAPHS_PROFILED_FROM
                      and not args.enforce_eager else 0)
            pool_source = (f"memory x gpu_memory_utilization - weights - activation peak{' - non-torch' * on_cuda}"
                           f"{' - CUDA graphs' if graphs else ''} - reserve (vLLM {args.vllm_version})")
        pool_per_device = lesson_pool - activation - non_torch - graphs
    layout = _layout(model, resolved, version, lesson)
    num_blocks = max(0, pool_per_device // layout.block_bytes)
    if args.num_gpu_blocks_override is not None:
        num_blocks = args.num_gpu_blocks_override
    concurrency = num_blocks / layout.blocks_per_request
    teaching = lesson_layout(model, kv_dtype, tp, args.block_size, resolved.max_model_len)
    lesson_blocks = max(0, lesson_pool // teaching.block_bytes)
    per_token = kv_bytes_per_token_of(model, kv_dtype, 1, lesson)
    per_sequence = (per_token * resolved.max_model_len if lesson
                    else layout.blocks_per_request * layout.block_bytes * tp)
    return MemoryPlan(
        model=model.name,
        hardware=hardware.name,
        tensor_parallel_size=tp,
        memory_bytes=hardware.memory_bytes * tp,
        gpu_memory_utilization=resolved.gpu_memory_utilization,
        weights_bytes=weights,
        weights_source=weights_source,
        held_back_bytes=(activation + non_torch + graphs + args.reserve_bytes) * tp,
        kv_cache_dtype=kv_dtype,
        kv_bytes_per_token=per_token,
        kv_bytes_per_token_per_device=kv_bytes_per_token_of(model, kv_dtype, tp, lesson),
        max_model_len=resolved.max_model_len,
        kv_bytes_per_sequence=per_sequence,
        block_size=layout.block_size,
        block_bytes=layout.block_bytes * tp,
        kv_pool_bytes=pool_per_device * tp,
        num_blocks=int(num_blocks),
        max_concurrent_sequences=concurrency,
        kv_pool_source=pool_source,
        accounting=args.accounting,
        vllm_version="" if lesson else args.vllm_version,
        activation_bytes=activation * tp,
        non_torch_bytes=non_torch * tp,
        cudagraph_bytes=graphs * tp,
        extra_reserve_bytes=args.reserve_bytes * tp,
        profiled_tokens=0 if lesson else tokens,
        profiled_seqs=0 if lesson else min(resolved.max_num_seqs, tokens),
        blocks_per_sequence=layout.blocks_per_request,
        kv_cache_size_tokens=_size_line(layout, int(num_blocks), concurrency, resolved.max_model_len, version, lesson),
        layer_groups=tuple((g.kind, g.layers, g.blocks_per_request) for g in layout.groups),
        padding_layers=layout.padding_layers,
        lesson_kv_pool_bytes=lesson_pool * tp,
        lesson_num_blocks=int(lesson_blocks),
        lesson_max_concurrent_sequences=lesson_blocks / teaching.blocks_per_request,
    )


def require_fit(plan: MemoryPlan) -> None:
    """Raise a ConfigError that says what does not fit, for callers that need a usable pool."""
    if plan.num_blocks > MAX_NUM_BLOCKS:
        raise ConfigError(
            f"the KV pool would hold {plan.num_blocks:,} blocks, more than the {MAX_NUM_BLOCKS:,} kvscope runs "
            f"(each costs the engine memory): give a smaller memory or kv_cache_memory_bytes, or a larger "
            f"block_size than {plan.block_size}")
    if plan.num_blocks <= 0:
        raise ConfigError(no_room_reason(plan))


def full_length_reason(plan: MemoryPlan) -> str | None:
    """Why vLLM would not start with this plan although blocks fit: one request of max_model_len
    needs more blocks than the pool holds (vLLM checks this at start-up and names the longest
    max_model_len that would fit). None: it fits, or no block does (no_room_reason says why)."""
    if plan.num_blocks <= 0 or plan.num_blocks >= plan.blocks_per_sequence:
        return None
    longest = ""
    if plan.layer_groups and all(kind == "full_attention" for kind, _, _ in plan.layer_groups):
        tokens = plan.num_blocks // len(plan.layer_groups) * plan.block_size
        longest = f"; the longest max_model_len that fits is {tokens:,} tokens"
    return (f"max_model_len {plan.max_model_len:,} tokens needs {plan.blocks_per_sequence:,} blocks but the pool holds "
            f"{plan.num_blocks:,}: not one full-length request fits, and vLLM would refuse to start{longest}")


def no_room_reason(plan: MemoryPlan) -> str:
    """Why a pool has no block, naming what took the memory: the budget, the profiled step or the weights."""
    if plan.is_set_budget:  # the weights are not the cause
        return (f"no room for a KV cache: the budget kv_cache_memory_bytes ({format_bytes(plan.kv_pool_bytes)}) is "
                f"smaller than one block of {plan.model} ({format_bytes(plan.block_bytes)}: {plan.block_size} tokens); "
                f"give at least {plan.block_bytes:,} bytes")
    if plan.kv_pool_bytes > 0:  # memory is left for KV, but not one block's worth: the block is the cause
        return (f"no room for one KV block: a block of {plan.block_size:,} tokens of {plan.model} is "
                f"{format_bytes(plan.block_bytes)}, more than the {format_bytes(plan.kv_pool_bytes)} KV pool: "
                f"give a smaller block_size")
    usable = plan.memory_bytes * plan.gpu_memory_utilization
    where = f"of the {usable / GiB:.2f} GiB usable on {plan.hardware} at gpu_memory_utilization {plan.gpu_memory_utilization:g}"
    parts = (("activation peak", plan.activation_bytes), ("non-torch memory", plan.non_torch_bytes),
             ("CUDA graphs", plan.cudagraph_bytes), ("reserve_bytes", plan.extra_reserve_bytes))
    if plan.activation_bytes > plan.weights_bytes:  # the cause is the profiled step, not the model
        rest = plan.held_back_bytes - plan.activation_bytes
        names = ", ".join(name for name, size in parts[1:] if size)
        return (
            f"no room for a KV cache: vLLM's activation peak for a step of {plan.profiled_tokens:,} tokens "
            f"(max_num_batched_tokens) takes {plan.activation_bytes / GiB:,.2f} GiB, with the weights "
            f"{plan.weights_bytes / GiB:,.2f} GiB" + (f" and {rest / GiB:,.2f} GiB more held back ({names})" if rest else "")
            + f", {where}: give a smaller max_num_batched_tokens")
    names = ", ".join(name for name, size in parts if size)
    held = f" (+ {plan.held_back_bytes / GiB:,.2f} GiB held back: {names})" if plan.held_back_bytes else ""
    return f"no room for a KV cache: {plan.model} weights take {plan.weights_bytes / GiB:,.2f} GiB{held} {where}"
