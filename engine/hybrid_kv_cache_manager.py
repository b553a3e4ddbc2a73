"""Block tables per layer group, for models whose layers do not all cache the same way.

vLLM's hybrid allocator (kv_cache_coordinator / single_type_kv_cache_manager) gives a request one
block table in every layer group, all drawing on one shared pool (kv_layout.py sizes it):
- a full-attention group holds a block for every block_size tokens, as a uniform model does;
- a sliding-window group needs only the last window - 1 computed tokens: blocks wholly before
  them are freed as the window moves (their table slots point nowhere, vLLM's null block);
- a linear-attention (Mamba / Gated DeltaNet) group holds a fixed state, the same few blocks
  for the whole life of the request, however long it grows.
So a Gemma 3 request stops growing in five of its six layer groups after 1,024 tokens, and a
Qwen3.6 request's linear layers cost the same at 100 tokens as at 100,000.

Prefix caching: a hit must be served by every group. Full-attention groups need every block of
the prefix cached; a sliding group only the blocks under the window that ends at the hit. A
model with linear-attention state serves no prefix hits here: vLLM's "align" mode keeps a state
per block boundary to make them possible, which this manager does not model (a simplification,
said in the README).
"""

from __future__ import annotations

import numpy as np

from kvscope.engine.events import EventKind
from kvscope.engine.kv_cache_manager import PagedKVCacheManager
from kvscope.engine.request import Request

NULL_BLOCK = -1  # a table slot whose tokens left the sliding window
FULL, SLIDING, LINEAR = "full_attention", "sliding_attention", "linear_attention"
GROUP_KINDS = (FULL, SLIDING, LINEAR)
_GROUP_SALT = 0x9E3779B97F4A7C15  # the same tokens in another group are another cache entry


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class PrefixHit(list):
    """The leading blocks a request reuses: its length counts blocks of tokens (what the scheduler
    reads), per_group holds each group's table for them (NULL_BLOCK outside a window)."""

    def __init__(self, num_blocks: int, per_group: list[list[int]]):
        super().__init__(range(num_blocks))
        self.per_group = per_group

    def held_blocks(self) -> list[int]:
        return HybridKVCacheManager._held(self.per_group)


def is_hybrid(plan) -> bool:
    """Whether a memory plan's layout needs more than one uniform full-attention block table."""
    return any(kind != FULL for kind, _, _ in plan.layer_groups) or len(plan.layer_groups) > 1


class HybridKVCacheManager(PagedKVCacheManager):
    @classmethod
    def for_plan(cls, plan, sliding_window: int | None, enable_prefix_caching: bool, sink) -> "HybridKVCacheManager":
        kinds = tuple(kind for kind, _, _ in plan.layer_groups)
        state = next((blocks for kind, _, blocks in plan.layer_groups if kind == LINEAR), 1)
        return cls(plan.num_blocks, plan.block_size, enable_prefix_caching, sink, kinds, sliding_window, state)

    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool, sink,
                 group_kinds: tuple[str, ...], sliding_window: int | None, state_blocks: int = 1):
        super().__init__(num_blocks, block_size, enable_prefix_caching, sink)
        unknown = set(group_kinds) - set(GROUP_KINDS)
        if not group_kinds or unknown:
            raise ValueError(f"layer groups must be among {GROUP_KINDS}, got {group_kinds!r}")
        if SLIDING in group_kinds and not sliding_window:
            raise ValueError("a sliding-window layer group needs the window's length in tokens")
        self.group_kinds = tuple(group_kinds)
        self.sliding_window = sliding_window or 0
        self.state_blocks = state_blocks
        # the blocks a window keeps before the newest token: those of its window - 1 earlier tokens
        self.window_blocks = _cdiv(self.sliding_window - 1, block_size) if sliding_window else 0
        self.serves_prefix_hits = enable_prefix_caching and LINEAR not in self.group_kinds
        self.block_group = np.zeros(num_blocks, dtype=np.uint8)  # which group a block was last given to
        self.tables: dict[int, list[list[int]]] = {}
        self._registered: dict[int, int] = {}  # leading blocks of a request already in the cache

    # -- capacity -------------------------------------------------------------------------------
    def blocks_for_tokens(self, num_tokens: int) -> int:
        """The most blocks a request of num_tokens holds at once, over every group."""
        blocks = _cdiv(num_tokens, self.block_size)
        total = 0
        for kind in self.group_kinds:
            if kind == FULL:
                total += blocks
            elif kind == SLIDING:
                total += min(blocks, self.window_blocks + 1)
            else:
                total += self.state_blocks
        return total

    def positional_blocks(self, req: Request) -> list[int]:
        """The table whose i-th block holds tokens i x block_size onwards: the first full-attention
        group's, or none when every group forgets or compresses (the map then shows no fill)."""
        table = self.tables.get(req.request_id)
        if table is None:
            return []
        for kind, blocks in zip(self.group_kinds, table):
            if kind == FULL:
                return blocks
        return []

    def group_snapshot(self) -> dict:
        names = []
        for kind in self.group_kinds:
            if kind == SLIDING:
                names.append(f"sliding window of {self.sliding_window:,} tokens")
            else:
                names.append("full attention" if kind == FULL else "linear-attention state")
        return {"block_group": self.block_group.copy(), "group_names": tuple(names)}

    # -- prefix cache ---------------------------------------------------------------------------
    def _key(self, group: int, block_hash: int) -> int:
        return block_hash if group == 0 else (block_hash ^ (_GROUP_SALT * group)) & 0xFFFFFFFFFFFFFFFF or 1

    def _cached(self, group: int, position: int, hashes: list[int]) -> int | None:
        return self.pool.lookup(self._key(group, hashes[position]))

    def find_cached_prefix(self, req: Request) -> PrefixHit:
        if not self.serves_prefix_hits:
            return PrefixHit(0, [[] for _ in self.group_kinds])
        full_blocks = (req.num_tokens - 1) // self.block_size
        self._extend_hashes(req, full_blocks)
        hashes = req.block_hashes
        hit = full_blocks
        for g, kind in enumerate(self.group_kinds):
            if kind == FULL:
                n = 0
                while n < hit and self._cached(g, n, hashes) is not None:
                    n += 1
                hit = n
        while hit > 0 and not self._window_cached(hit, hashes):
            hit -= 1
        per_group = []
        for g, kind in enumerate(self.group_kinds):
            first = max(0, hit - self.window_blocks) if kind == SLIDING else 0
            per_group.append([NULL_BLOCK] * first + [self._cached(g, i, hashes) for i in range(first, hit)])
        return PrefixHit(hit, per_group)

    def _window_cached(self, hit: int, hashes: list[int]) -> bool:
        for g, kind in enumerate(self.group_kinds):
            if kind == SLIDING:
                for i in range(max(0, hit - self.window_blocks), hit):
                    if self._cached(g, i, hashes) is None:
                        return False
        return True

    # -- allocation -----------------------------------------------------------------------------
    def _skipped_positions(self, num_computed_tokens: int) -> int:
        """Leading blocks a sliding group no longer needs: wholly before the last window - 1 tokens."""
        return max(0, num_computed_tokens - self.sliding_window + 1) // self.block_size

    def _drop_out_of_window(self, req: Request, table: list[list[int]], num_computed_tokens: int) -> None:
        skipped = self._skipped_positions(num_computed_tokens)
        dropped = []
        for kind, blocks in zip(self.group_kinds, table):
            if kind != SLIDING:
                continue
            for i in range(min(skipped, len(blocks))):
                if blocks[i] != NULL_BLOCK:
                    dropped.append(blocks[i])
                    blocks[i] = NULL_BLOCK
        if dropped:
            self.pool.free(reversed(dropped))
            req.block_ids = self._held(table)
            self.sink.emit(EventKind.WINDOW_FREED, req.request_id, tuple(dropped))

    @staticmethod
    def _held(table: list[list[int]]) -> list[int]:
        return [b for blocks in table for b in blocks if b != NULL_BLOCK]

    def _new_blocks_needed(self, table: list[list[int]], num_tokens: int, num_computed_tokens: int) -> list[int]:
        blocks = _cdiv(num_tokens, self.block_size)
        skipped = self._skipped_positions(num_computed_tokens)
        needed = []
        for kind, held in zip(self.group_kinds, table):
            if kind == FULL:
                needed.append(max(0, blocks - len(held)))
            elif kind == SLIDING:
                needed.append(max(0, blocks - max(len(held), skipped)))
            else:
                needed.append(self.state_blocks - len(held))
        return needed

    def allocate_slots(self, req: Request, num_new_tokens: int, cached_blocks=()) -> bool:
        bs = self.block_size
        hit = cached_blocks if isinstance(cached_blocks, PrefixHit) else None
        computed = req.num_computed_tokens + len(cached_blocks) * bs
        table = self.tables.get(req.request_id)
        if table is None:  # admission: a hit's tables start out already inside their windows
            table = [list(blocks) for blocks in hit.per_group] if hit else [[] for _ in self.group_kinds]
        else:  # as vLLM does, blocks that left the window go back first, whether or not this fits
            self._drop_out_of_window(req, table, computed)
        needed = self._new_blocks_needed(table, computed + num_new_tokens, computed)
        pool = self.pool
        hit_blocks = hit.held_blocks() if hit else []
        available = pool.num_free_blocks - (pool.num_free_among(hit_blocks) if hit_blocks else 0)
        if sum(needed) > available:
            return False
        self.tables[req.request_id] = table
        if hit_blocks:
            pool.touch(hit_blocks, req.request_id)
            req.num_computed_tokens = computed
            self._registered[req.request_id] = len(cached_blocks)
            req.num_cached_prompt_tokens = computed
            self.sink.emit(EventKind.PREFIX_HIT, req.request_id, tuple(hit_blocks), float(computed))
        allocated = []
        for g, (kind, held, n) in enumerate(zip(self.group_kinds, table, needed)):
            if n <= 0:
                continue
            if kind == SLIDING and len(held) < self._skipped_positions(computed):
                held.extend([NULL_BLOCK] * (self._skipped_positions(computed) - len(held)))
            new = pool.allocate(n, req.request_id)
            self.block_group[new] = g
            held.extend(new)
            allocated.extend(new)
        if allocated:
            self.sink.emit(EventKind.ALLOCATED, req.request_id, tuple(allocated))
        req.block_ids = self._held(table)
        target = computed + num_new_tokens
        unused = sum(len(blocks) * bs - target for kind, blocks in zip(self.group_kinds, table) if kind != LINEAR)
        self.unused_slots += unused - req.unused_slots
        req.unused_slots = unused
        return True

    def register_full_blocks(self, req: Request) -> None:
        if not self.serves_prefix_hits:
            return
        full = req.num_computed_tokens // self.block_size
        done = self._registered.get(req.request_id, 0)
        if full <= done:
            return
        self._extend_hashes(req, full)
        table = self.tables[req.request_id]
        for g, (kind, blocks) in enumerate(zip(self.group_kinds, table)):
            for i in range(done, min(full, len(blocks))):
                if blocks[i] != NULL_BLOCK:
                    self.pool.cache_block(blocks[i], self._key(g, req.block_hashes[i]))
        self._registered[req.request_id] = full

    def free(self, req: Request) -> list[int]:
        self.tables.pop(req.request_id, None)
        self._registered.pop(req.request_id, None)
        return super().free(req)  # req.block_ids holds every group's live blocks
