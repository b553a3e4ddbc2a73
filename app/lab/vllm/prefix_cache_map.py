"""A vLLM server's prefix cache, rebuilt from its KV events, laid out as cells a block map can draw.

What the events say: which full blocks entered the cache (a hash each, the hash of the block
before it, their tokens), which left it, when it was cleared. So the map holds every block the
cache holds, keyed by (DP rank, KV cache group, hash), with its parent, its tokens, when it was
stored and which chain (prefix tree) it belongs to.

What they cannot say, and this map therefore does not pretend to know:
- block ids. vLLM publishes hashes, never the slot a block occupies, so kvscope PLACES each stored
  block into one of the server's `num_gpu_blocks` cells itself (the first free cell of its DP
  rank's segment). A cell's position means nothing on the server; its count and its neighbours'
  chain do.
- whether a cached block is in use: vLLM keeps a request's blocks cached when it frees them and
  publishes nothing on a prefix hit, so every stored block is drawn as "cached" (BLOCK_CACHED).
- partial blocks, blocks still filling, which request holds what, batch membership.

Blocks stored while the map overflows (events were lost, so removals were missed) are kept but
unplaced, and counted.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import numpy as np

from kvscope.app.lab.vllm.events import (
    AllBlocksCleared,
    BlockHash,
    BlockRemoved,
    BlockStored,
    EventBatch,
    UnknownEvent,
    block_hash_u64,
)
from kvscope.engine.snapshot import BLOCK_CACHED, BLOCK_FREE

BlockKey = tuple[int, int, BlockHash]  # (DP rank, group_idx, hash)
NO_CHAIN = -1


@dataclass(slots=True)
class CachedBlock:
    parent: BlockHash | None
    token_ids: tuple[int, ...]
    data_parallel_rank: int
    group_idx: int
    order: int  # 0, 1, 2, ... in the order blocks were stored: the map's notion of age
    stored_ts: float  # the server's clock when its batch was published, seconds
    chain: int  # blocks reachable from the same root share it
    depth: int  # 0 for a root, parent's depth + 1
    cells: list[int] = field(default_factory=list)  # one per copy; vLLM may cache a hash twice


@dataclass(frozen=True)
class PrefixCacheCounts:
    cells: int
    cached_blocks: int  # distinct (rank, group, hash)
    placed_copies: int  # cells in use
    unplaced: int  # stored while every cell of its rank was taken
    chains: int
    stored: int  # hashes stored since the map began
    removed: int
    cleared: int  # AllBlocksCleared events
    unknown_removals: int  # removals of hashes the map never saw stored (it attached mid-run)
    unknown_events: int


class PrefixCacheMap:
    def __init__(self, num_gpu_blocks: int, block_size: int | None = None):
        if num_gpu_blocks <= 0:
            raise ValueError(f"num_gpu_blocks must be positive, got {num_gpu_blocks}")
        self.num_gpu_blocks = num_gpu_blocks
        self.block_size = block_size
        self.blocks: dict[BlockKey, CachedBlock] = {}
        self._segments: dict[int, int] = {}  # DP rank -> its first cell
        self._free: dict[int, list[int]] = {}  # DP rank -> heap of free cells
        self._unplaced: dict[int, list[BlockKey]] = {}
        self._cell_key: list[BlockKey | None] = []
        self.cell_state = np.zeros(0, np.uint8)  # BLOCK_FREE or BLOCK_CACHED
        self.cell_order = np.zeros(0, np.int64)  # store order, -1 for free
        self.cell_stored_ts = np.zeros(0, np.float64)  # NaN for free
        self.cell_chain = np.zeros(0, np.int32)  # NO_CHAIN for free
        self.cell_depth = np.zeros(0, np.int32)  # -1 for free
        self.cell_hash = np.zeros(0, np.uint64)  # low 64 bits, 0 for free
        self._next_order = 0
        self._next_chain = 0
        self._stored = self._removed = self._cleared = self._unknown_removals = self._unknown_events = 0
        self._segment(0)

    # -- events -------------------------------------------------------------------------------------

    def apply(self, batch: EventBatch) -> None:
        rank = batch.data_parallel_rank or 0
        for event in batch.events:
            if isinstance(event, BlockStored):
                self._store(rank, event, batch.ts)
            elif isinstance(event, BlockRemoved):
                for block_hash in event.block_hashes:
                    self._remove((rank, event.group_idx, block_hash))
            elif isinstance(event, AllBlocksCleared):
                self._cleared += 1
                self.reset(rank)
            elif isinstance(event, UnknownEvent):
                self._unknown_events += 1

    def reset(self, data_parallel_rank: int | None = None) -> None:
        """Forget one DP rank's blocks (its cache was cleared or its server restarted); None: all."""
        ranks = list(self._segments) if data_parallel_rank is None else [data_parallel_rank]
        for rank in ranks:
            if rank not in self._segments:
                continue
            for key in [key for key in self.blocks if key[0] == rank]:
                del self.blocks[key]
            start = self._segments[rank]
            cells = slice(start, start + self.num_gpu_blocks)
            self._clear_cells(cells)
            self._cell_key[cells] = [None] * self.num_gpu_blocks
            self._free[rank] = list(range(start, start + self.num_gpu_blocks))
            self._unplaced[rank] = []

    def _store(self, rank: int, event: BlockStored, ts: float) -> None:
        if self.block_size is None and event.block_size:
            self.block_size = event.block_size
        parent = event.parent_block_hash
        for index, block_hash in enumerate(event.block_hashes):
            key = (rank, event.group_idx, block_hash)
            parent_block = None if parent is None else self.blocks.get((rank, event.group_idx, parent))
            block = self.blocks.get(key)
            if block is None:
                chain, depth = (parent_block.chain, parent_block.depth + 1) if parent_block else (self._new_chain(), 0)
                block = self.blocks[key] = CachedBlock(parent, event.tokens_of(index), rank, event.group_idx,
                                                       self._next_order, ts, chain, depth)
            block.order, block.stored_ts = self._next_order, ts
            self._next_order += 1
            self._stored += 1
            self._place(key, block)
            parent = block_hash

    def _remove(self, key: BlockKey) -> None:
        block = self.blocks.get(key)
        if block is None:
            self._unknown_removals += 1
            return
        self._removed += 1
        if block.cells:
            cell = block.cells.pop()
            self._clear_cells(slice(cell, cell + 1))
            self._cell_key[cell] = None
            heapq.heappush(self._free[key[0]], cell)
            self._place_waiting(key[0])
        else:
            self._unplaced[key[0]].remove(key)
        if not block.cells and key not in self._unplaced[key[0]]:
            del self.blocks[key]

    # -- cells --------------------------------------------------------------------------------------

    def _segment(self, rank: int) -> int:
        if rank not in self._segments:
            start = len(self.cell_state)
            self._segments[rank] = start
            n = self.num_gpu_blocks
            self._free[rank] = list(range(start, start + n))
            self._unplaced[rank] = []
            self._cell_key.extend([None] * n)
            self.cell_state = np.concatenate([self.cell_state, np.full(n, BLOCK_FREE, np.uint8)])
            self.cell_order = np.concatenate([self.cell_order, np.full(n, -1, np.int64)])
            self.cell_stored_ts = np.concatenate([self.cell_stored_ts, np.full(n, np.nan)])
            self.cell_chain = np.concatenate([self.cell_chain, np.full(n, NO_CHAIN, np.int32)])
            self.cell_depth = np.concatenate([self.cell_depth, np.full(n, -1, np.int32)])
            self.cell_hash = np.concatenate([self.cell_hash, np.zeros(n, np.uint64)])
        return self._segments[rank]

    def _place(self, key: BlockKey, block: CachedBlock) -> None:
        self._segment(key[0])
        free = self._free[key[0]]
        if not free:
            self._unplaced[key[0]].append(key)
            return
        cell = heapq.heappop(free)
        block.cells.append(cell)
        self._cell_key[cell] = key
        self.cell_state[cell] = BLOCK_CACHED
        self.cell_order[cell] = block.order
        self.cell_stored_ts[cell] = block.stored_ts
        self.cell_chain[cell] = block.chain
        self.cell_depth[cell] = block.depth
        self.cell_hash[cell] = block_hash_u64(key[2])

    def _place_waiting(self, rank: int) -> None:
        waiting = self._unplaced[rank]
        while waiting and self._free[rank]:
            key = waiting.pop(0)
            self._place(key, self.blocks[key])

    def _clear_cells(self, cells: slice) -> None:
        self.cell_state[cells] = BLOCK_FREE
        self.cell_order[cells] = -1
        self.cell_stored_ts[cells] = np.nan
        self.cell_chain[cells] = NO_CHAIN
        self.cell_depth[cells] = -1
        self.cell_hash[cells] = 0

    def _new_chain(self) -> int:
        self._next_chain += 1
        return self._next_chain - 1

    # -- reading ------------------------------------------------------------------------------------

    @property
    def num_cells(self) -> int:
        return len(self.cell_state)

    def segment_of(self, data_parallel_rank: int) -> slice:
        """The cells of one DP engine (each has its own num_gpu_blocks)."""
        start = self._segments[data_parallel_rank]
        return slice(start, start + self.num_gpu_blocks)

    def block_at(self, cell: int) -> CachedBlock | None:
        key = self._cell_key[cell]
        return None if key is None else self.blocks[key]

    def cell_age_s(self, now_ts: float) -> np.ndarray:
        """Seconds since each cell's block was stored, by the server's clock; NaN for free cells."""
        return now_ts - self.cell_stored_ts

    def chain_of(self, key: BlockKey) -> list[BlockKey]:
        """The block and its ancestors the map holds, root first."""
        chain = []
        while key in self.blocks and len(chain) <= len(self.blocks):  # the bound: a hash cycle ends too
            chain.append(key)
            parent = self.blocks[key].parent
            if parent is None:
                break
            key = (key[0], key[1], parent)
        return chain[::-1]

    def counts(self) -> PrefixCacheCounts:
        placed = int(np.count_nonzero(self.cell_state == BLOCK_CACHED))
        unplaced = sum(len(keys) for keys in self._unplaced.values())
        chains = len({block.chain for block in self.blocks.values()})
        return PrefixCacheCounts(self.num_cells, len(self.blocks), placed, unplaced, chains, self._stored,
                                 self._removed, self._cleared, self._unknown_removals, self._unknown_events)
