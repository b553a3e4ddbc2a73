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
unplaced, and counted: at most a pool's worth of them per engine (MIN_WAITING for a small pool),
the oldest forgotten past that (a publisher storing a million made-up hashes held 400 MB, and each
removal then scanned them all).
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Union

import msgspec
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
CELL_ARRAYS = ("cell_state", "cell_order", "cell_stored_ts", "cell_chain", "cell_depth", "cell_hash")
MIN_WAITING = 4096  # unplaced copies an engine keeps however small its pool: a few MB
_COUNTERS = ("_stored", "_removed", "_cleared", "_unknown_removals", "_unknown_events", "_next_order", "_next_chain")


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
        # DP rank -> the keys waiting for a free cell, oldest first, with how many copies of each wait
        self._unplaced: dict[int, OrderedDict[BlockKey, int]] = {}
        self._num_waiting: dict[int, int] = {}  # DP rank -> copies waiting, all keys together
        self.forgotten = 0  # waiting copies dropped past the bound (not recorded: a live count)
        self._cell_key: list[BlockKey | None] = []
        self.cell_state = np.zeros(0, np.uint8)  # BLOCK_FREE or BLOCK_CACHED
        self.cell_order = np.zeros(0, np.int64)  # store order, -1 for free
        self.cell_stored_ts = np.zeros(0, np.float64)  # NaN for free
        self.cell_chain = np.zeros(0, np.int32)  # NO_CHAIN for free
        self.cell_depth = np.zeros(0, np.int32)  # -1 for free
        self.cell_hash = np.zeros(0, np.uint64)  # low 64 bits, 0 for free
        self._next_order = 0
        self._next_chain = 0
        # chains whose first block names a parent the map never held (stored before kvscope attached,
        # in a lost batch, or evicted): their depths count from what was seen, not from a prompt's start
        self.cut_chains: set[int] = set()
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
            self._unplaced[rank], self._num_waiting[rank] = OrderedDict(), 0

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
                if parent_block is None and parent is not None:
                    self._cut(chain)
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
            self._take_waiting(key)
        if not block.cells and key not in self._unplaced[key[0]]:
            del self.blocks[key]

    # -- cells --------------------------------------------------------------------------------------

    def _segment(self, rank: int) -> int:
        if rank not in self._segments:
            start = len(self.cell_state)
            self._segments[rank] = start
            n = self.num_gpu_blocks
            self._free[rank] = list(range(start, start + n))
            self._unplaced[rank], self._num_waiting[rank] = OrderedDict(), 0
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
            self._wait(key)
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
            key = next(iter(waiting))
            self._take_waiting(key)
            self._place(key, self.blocks[key])

    def _wait(self, key: BlockKey) -> None:
        """One more copy of key waits for a free cell; past a pool's worth (at least MIN_WAITING) of
        waiting copies on its engine, the oldest waiting key is forgotten (a block with no cell is
        dropped from the map)."""
        rank = key[0]
        waiting = self._unplaced[rank]
        waiting[key] = waiting.get(key, 0) + 1
        self._num_waiting[rank] += 1
        while self._num_waiting[rank] > max(self.num_gpu_blocks, MIN_WAITING):
            oldest, copies = waiting.popitem(last=False)
            self._num_waiting[rank] -= copies
            self.forgotten += copies
            if not self.blocks[oldest].cells:
                del self.blocks[oldest]

    def _take_waiting(self, key: BlockKey) -> None:
        """One waiting copy of key leaves the queue (placed, or removed before it was)."""
        waiting = self._unplaced[key[0]]
        if waiting[key] > 1:
            waiting[key] -= 1
        else:
            del waiting[key]
        self._num_waiting[key[0]] -= 1

    def _clear_cells(self, cells: slice) -> None:
        self.cell_state[cells] = BLOCK_FREE
        self.cell_order[cells] = -1
        self.cell_stored_ts[cells] = np.nan
        self.cell_chain[cells] = NO_CHAIN
        self.cell_depth[cells] = -1
        self.cell_hash[cells] = 0

    def _cut(self, chain: int) -> None:
        self.cut_chains.add(chain)
        if len(self.cut_chains) > 2 * len(self.blocks) + 1024:  # a publisher of orphans only: keep the held ones
            self.cut_chains &= {block.chain for block in self.blocks.values()}

    def chain_cut(self) -> np.ndarray:
        """Per cell: whether its chain begins after a block the map never held."""
        if not self.cut_chains:
            return np.zeros(self.num_cells, bool)
        return np.isin(self.cell_chain, np.fromiter(self.cut_chains, np.int64, len(self.cut_chains)))

    def _new_chain(self) -> int:
        self._next_chain += 1
        return self._next_chain - 1

    # -- reading ------------------------------------------------------------------------------------

    @property
    def num_cells(self) -> int:
        return len(self.cell_state)

    @property
    def num_unplaced(self) -> int:
        """Blocks stored while their engine's num_gpu_blocks cells were all taken: more than the
        server's pool holds, so the events are not consistent with it."""
        return sum(self._num_waiting.values())

    @property
    def ranks(self) -> list[int]:
        """The DP ranks that have cells, in the order their segments were laid out."""
        return list(self._segments)

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
        unplaced = self.num_unplaced
        chains = len({block.chain for block in self.blocks.values()})
        return PrefixCacheCounts(self.num_cells, len(self.blocks), placed, unplaced, chains, self._stored,
                                 self._removed, self._cleared, self._unknown_removals, self._unknown_events)


# -- the map as data: what a recording of an attached server starts from ------------------------------
# Plain msgpack of the blocks (a hash is an int or bytes, as vLLM sent it) and the cell arrays as
# they are: the cells are kvscope's placement, which no replay of events could rebuild once the
# events before a recording started are gone.

_Hash = Union[int, bytes]


class _BlockState(msgspec.Struct, array_like=True):
    rank: int
    group: int
    hash: _Hash
    parent: Union[_Hash, None]
    tokens: list[int]
    order: int
    stored_ts: float
    chain: int
    depth: int
    cells: list[int]


class _MapState(msgspec.Struct, array_like=True):
    num_gpu_blocks: int
    block_size: Union[int, None]
    segments: list[tuple[int, int]]  # (DP rank, first cell), in layout order
    blocks: list[_BlockState]
    unplaced: list[tuple[int, int, _Hash]]  # keys waiting for a free cell, in order
    counters: list[int]  # _COUNTERS


_STATE_DECODER = msgspec.msgpack.Decoder(_MapState)


def map_state(cache: PrefixCacheMap) -> tuple[bytes, dict]:
    """The map as (msgpack of its blocks, its cell arrays)."""
    blocks = [_BlockState(key[0], key[1], key[2], b.parent, list(b.token_ids), b.order, b.stored_ts, b.chain, b.depth,
                          list(b.cells)) for key, b in cache.blocks.items()]
    unplaced = [key for keys in cache._unplaced.values() for key, copies in keys.items() for _ in range(copies)]
    state = _MapState(cache.num_gpu_blocks, cache.block_size, list(cache._segments.items()), blocks, unplaced,
                      [getattr(cache, name) for name in _COUNTERS])
    return msgspec.msgpack.encode(state), {name: getattr(cache, name) for name in CELL_ARRAYS}


def restore_map(blob: bytes, arrays: dict, max_cells: int) -> PrefixCacheMap:
    """The map map_state() saved. Anything inconsistent -- a cell outside the pool, a segment out of
    place, arrays of the wrong length -- is a ValueError naming what."""
    try:
        state = _STATE_DECODER.decode(blob)
    except msgspec.DecodeError as exc:
        raise ValueError(f"the prefix-cache map cannot be read: {exc}") from None
    n = state.num_gpu_blocks
    if not 0 < n or n * max(len(state.segments), 1) > max_cells:
        raise ValueError(f"the prefix-cache map has {n} blocks per engine in {len(state.segments)} segments")
    cache = PrefixCacheMap(n, state.block_size)
    if [start for _, start in state.segments] != [k * n for k in range(len(state.segments))] or \
            not state.segments or state.segments[0][0] != 0 or len({r for r, _ in state.segments}) != len(state.segments):
        raise ValueError("the prefix-cache map's engine segments are out of place")
    for rank, _ in state.segments[1:]:
        cache._segment(rank)
    cells = cache.num_cells
    for name in CELL_ARRAYS:
        values = arrays.get(name)
        if values is None or len(values) != cells:
            raise ValueError(f"the prefix-cache map's {name} does not have one entry per cell ({cells:,})")
        setattr(cache, name, np.array(values, dtype=getattr(cache, name).dtype))
    used: set[int] = set()
    for b in state.blocks:
        key = (b.rank, b.group, b.hash)
        segment = cache._segments.get(b.rank)
        if segment is None or key in cache.blocks or any(
                not segment <= c < segment + n or c in used for c in b.cells):
            raise ValueError("the prefix-cache map places a block outside its engine's cells, or twice")
        used.update(b.cells)
        cache.blocks[key] = CachedBlock(b.parent, tuple(b.tokens), b.rank, b.group, b.order, b.stored_ts, b.chain,
                                        b.depth, list(b.cells))
        for c in b.cells:
            cache._cell_key[c] = key
        if b.depth == 0 and b.parent is not None:  # a chain's first block, after a parent never held
            cache.cut_chains.add(b.chain)
    state_of_cells = np.full(cells, BLOCK_FREE, np.uint8)
    state_of_cells[list(used)] = BLOCK_CACHED
    if not np.array_equal(state_of_cells, cache.cell_state):
        raise ValueError("the prefix-cache map's cell states disagree with its blocks")
    for rank, start in state.segments:
        cache._free[rank] = [c for c in range(start, start + n) if c not in used]  # ascending: a valid heap
        cache._unplaced[rank], cache._num_waiting[rank] = OrderedDict(), 0
    for key in state.unplaced:  # as recorded, none forgotten: a recording kept before the bound holds more
        key = tuple(key)
        if key not in cache.blocks or key[0] not in cache._unplaced:
            raise ValueError("the prefix-cache map has an unplaced block it does not hold")
        cache._unplaced[key[0]][key] = cache._unplaced[key[0]].get(key, 0) + 1
        cache._num_waiting[key[0]] += 1
    if len(state.counters) != len(_COUNTERS) or any(v < 0 for v in state.counters):
        raise ValueError("the prefix-cache map's counters are not 7 counts")
    for name, value in zip(_COUNTERS, state.counters):
        setattr(cache, name, value)
    return cache
