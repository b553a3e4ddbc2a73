"""The KV cache of the real runner: per layer, K and V tensors shaped
[num_blocks, block_size, kv_heads, head_dim], indexed by exactly the block ids the block manager
hands out — the blocks the window draws.

It plugs into transformers as a Cache: each attention layer calls `update()` with the new keys
and values of the step, which are written into their slots. fp8 KV is stored as 8-bit with a
scale and converted back to the compute dtype when read.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

from kvscope.engine.config import KV_CACHE_DTYPE_ALIASES

# The torch dtype of each KV precision in engine/config.py (aliases resolve to their precision);
# fp8 lives in uint8 storage so that indexing works on every device (index kernels for float8 are
# not everywhere), viewed as float8 to convert.
STORAGE_DTYPES = {
    "fp32": torch.float32,
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
    "fp8_e4m3": torch.float8_e4m3fn,
    "fp8_e5m2": torch.float8_e5m2,
}
FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)


class PagedLayer(CacheLayerMixin):
    """One layer's paged K and V."""

    def __init__(self, cache: "PagedKVCache", num_blocks: int, block_size: int, kv_heads: int, head_dim: int,
                 kv_dtype: torch.dtype, device):
        super().__init__()
        self.cache = cache
        self.kv_dtype = kv_dtype
        self.is_fp8 = kv_dtype in FP8_DTYPES
        storage = torch.uint8 if self.is_fp8 else kv_dtype
        shape = (num_blocks, block_size, kv_heads, head_dim)
        self.keys = torch.zeros(shape, dtype=storage, device=device)
        self.values = torch.zeros(shape, dtype=storage, device=device)
        self.device = self.keys.device
        self.is_initialized = True
        # Per-tensor scales as vLLM uses without calibration; kept so a calibrated scale can be set.
        self.k_scale = 1.0
        self.v_scale = 1.0

    # transformers' layer contract -------------------------------------------------------------
    def lazy_initialization(self, key_states, value_states) -> None:
        return

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        """Write the step's new K/V ([1, kv_heads, T, head_dim]) into their slots."""
        slots = self.cache.step.slot_mapping
        self._write(self.keys, key_states, slots, self.k_scale)
        self._write(self.values, value_states, slots, self.v_scale)
        return key_states, value_states

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return query_length, 0

    def get_seq_length(self) -> int:
        return 0

    def get_max_length(self) -> int:
        return -1

    # storage ----------------------------------------------------------------------------------
    def _write(self, store: torch.Tensor, states: torch.Tensor, slots: torch.Tensor, scale: float) -> None:
        flat = store.view(-1, store.shape[2], store.shape[3])
        new = states[0].transpose(0, 1)  # [T, kv_heads, head_dim]
        if self.is_fp8:
            new = (new / scale).to(self.kv_dtype).view(torch.uint8)
        else:
            new = new.to(store.dtype)
        flat.index_copy_(0, slots, new)  # a plain copy, faster than an indexed assignment on CPU

    def _read(self, store: torch.Tensor, block_ids: torch.Tensor, dtype: torch.dtype, scale: float) -> torch.Tensor:
        # index_select copies about twice as fast as advanced indexing on CPU
        blocks = store.index_select(0, block_ids.reshape(-1)).view(*block_ids.shape, *store.shape[1:])
        if self.is_fp8:
            return blocks.view(self.kv_dtype).to(dtype) * scale
        return blocks.to(dtype)

    def read(self, block_ids: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V of the given blocks, in the compute dtype: [..., block_size, kv_heads, head_dim]."""
        return self._read(self.keys, block_ids, dtype, self.k_scale), self._read(self.values, block_ids, dtype, self.v_scale)


class PagedKVCache(Cache):
    def __init__(self, num_layers: int, num_blocks: int, block_size: int, kv_heads: int, head_dim: int,
                 kv_cache_dtype: str, device):
        self.step = None  # the StepMetadata of the forward in progress
        self.num_blocks = num_blocks
        self.block_size = block_size
        kv_dtype = STORAGE_DTYPES[KV_CACHE_DTYPE_ALIASES.get(kv_cache_dtype, kv_cache_dtype)]
        layers = [PagedLayer(self, num_blocks, block_size, kv_heads, head_dim, kv_dtype, device) for _ in range(num_layers)]
        super().__init__(layers=layers)

    @property
    def nbytes(self) -> int:
        return sum(layer.keys.nbytes + layer.values.nbytes for layer in self.layers)
