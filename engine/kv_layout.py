"""How the KV pool is laid out over a model's layers: pages, layer groups and the blocks one request needs.

vLLM V1's hybrid allocator (kv_cache_utils / kv_cache_planning, read in 0.19 and 0.33):
- a page is one block of one layer: block_size x bytes per token of that layer (per device);
- layers are bucketed by kind (full attention, sliding window, linear-attention state); every
  group holds group_size layers: the smallest bucket's count, or the largest's when it is under
  1.5x the smallest; buckets that do not fill their last group are padded;
- group_size tensors of num_blocks pages each are shared by one layer of every group, so a block
  id costs page x group_size bytes and num_blocks = available // (page x group_size);
- a request holds blocks in every group: cdiv(tokens, block_size) in a full-attention group, at
  most cdiv(min(window - 1 + tokens in flight, max_model_len), block_size) + 1 in a sliding one,
  one state page in a linear-attention one (two with prefix caching: the "align" mode);
- beside linear-attention state the attention block grows until its page holds that state
  (kernel alignment 16 tokens), and the state page is padded to the attention page.
A uniform model is the special case of one group of every layer. "The lesson's" layout is the
seeds' formula: every layer a full KV cache of num_key_value_heads x head_dim.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvscope.engine.config import KV_CACHE_DTYPE_BYTES, ModelConfig

# The smallest block FlashAttention's kernels take: vLLM aligns the enlarged attention block to it.
KERNEL_BLOCK_ALIGNMENT = 16


@dataclass(frozen=True)
class LayerGroup:
    """Layers of one kind sharing a block table; blocks_per_request at max_model_len."""

    kind: str  # full_attention | sliding_attention | linear_attention
    layers: int  # real layers (the padding layers of a last group not counted)
    blocks_per_request: int


@dataclass(frozen=True)
class KVLayout:
    block_size: int  # tokens per block
    page_bytes: int  # one block of one layer, per device
    group_size: int  # layers per group, padding included
    groups: tuple[LayerGroup, ...]
    padding_layers: int = 0

    @property
    def block_bytes(self) -> int:
        """What one block id costs on one device: a page in each of the group_size shared tensors."""
        return self.page_bytes * self.group_size

    @property
    def blocks_per_request(self) -> int:
        return sum(g.blocks_per_request for g in self.groups)


def kv_heads_per_device(num_key_value_heads: int, tensor_parallel_size: int) -> int:
    """KV heads one device stores; vLLM replicates them when there are fewer than devices."""
    return max(1, num_key_value_heads // tensor_parallel_size)


def attention_bytes_per_token(model: ModelConfig, kv_cache_dtype: str, tensor_parallel_size: int,
                              lesson: bool = False) -> int:
    """One attention layer's K and V of one token on one device. Multi-head latent attention
    stores one latent (kv_lora_rank + qk_rope_head_dim) for all heads, not split over devices;
    the lesson's formula knows only 2 x kv_heads x head_dim."""
    size = KV_CACHE_DTYPE_BYTES[kv_cache_dtype]
    if model.uses_mla and not lesson:
        return (model.kv_lora_rank + model.qk_rope_head_dim) * size
    return 2 * kv_heads_per_device(model.num_key_value_heads, tensor_parallel_size) * model.head_dim * size


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def lesson_layout(model: ModelConfig, kv_cache_dtype: str, tp: int, block_size: int, max_model_len: int) -> KVLayout:
    page = block_size * attention_bytes_per_token(model, kv_cache_dtype, tp, lesson=True)
    layers = model.num_hidden_layers
    return KVLayout(block_size, page, layers, (LayerGroup("full_attention", layers, _cdiv(max_model_len, block_size)),))


def vllm_layout(model: ModelConfig, kv_cache_dtype: str, tp: int, block_size: int, max_model_len: int,
                tokens_in_flight: int, mamba_align: bool, hybrid_allocator: bool = True) -> KVLayout:
    """vLLM's layout. hybrid_allocator False is V0: sliding-window layers sized as full attention,
    linear-attention state kept outside the KV pool."""
    per_token = attention_bytes_per_token(model, kv_cache_dtype, tp)
    counts = {kind: model.count_layers(kind) for kind in ("full_attention", "sliding_attention", "linear_attention")}
    if not hybrid_allocator:
        counts = {"full_attention": counts["full_attention"] + counts["sliding_attention"]}
    counts = {kind: n for kind, n in counts.items() if n}
    if "linear_attention" in counts:
        state = model.linear_state_bytes // tp
        align = max(KERNEL_BLOCK_ALIGNMENT, block_size)
        block_size = max(block_size, align * _cdiv(state, align * per_token))
    smallest, largest = min(counts.values()), max(counts.values())
    group_size = largest if largest < 1.5 * smallest else smallest

    def blocks(kind: str) -> int:
        if kind == "full_attention":
            return _cdiv(max_model_len, block_size)
        if kind == "sliding_attention":
            return _cdiv(min(model.sliding_window - 1 + tokens_in_flight, max_model_len), block_size) + 1
        return 2 if mamba_align else 1

    groups, padding = [], 0
    for kind, n in counts.items():
        num_groups = _cdiv(n, group_size)
        padding += num_groups * group_size - n
        for i in range(num_groups):
            groups.append(LayerGroup(kind, min(group_size, n - i * group_size), blocks(kind)))
    return KVLayout(block_size, block_size * per_token, group_size, tuple(groups), padding)


def kv_bytes_per_token_of(model: ModelConfig, kv_cache_dtype: str, tp: int, lesson: bool) -> int:
    """Bytes one more token of context adds on one device, over every layer that caches per token
    (full and sliding attention; a sliding layer stops growing at its window)."""
    layers = model.num_hidden_layers if lesson else (model.count_layers("full_attention")
                                                     + model.count_layers("sliding_attention"))
    return layers * attention_bytes_per_token(model, kv_cache_dtype, tp, lesson)


def tokens_in_flight(max_num_batched_tokens: int, version: tuple[int, int]) -> int:
    """Tokens scheduled but not yet settled, that a sliding window keeps blocks for: one step's
    budget through 0.19 (its logs fit window - 1 + budget); two from 0.33, whose async scheduling
    keeps two batches in flight (vllm/config/vllm.py max_in_flight_tokens)."""
    return max_num_batched_tokens * (2 if version >= (0, 33) else 1)
