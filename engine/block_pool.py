"""The fixed pool of KV blocks: free queue in LRU order, reference counts, the prefix-cache map.

Like vLLM v1's BlockPool, a freed block that holds a full, hashed block of tokens stays in the
cache (and at the tail of the free queue) until a new block is needed and it is the least
recently used; only then is it evicted. Per-block state lives in numpy arrays so a snapshot of a
500k-block pool is a few array copies.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from kvscope.engine.events import EventKind, EventSink

NO_OWNER = -1


class BlockPool:
    def __init__(self, num_blocks: int, sink: EventSink):
        if num_blocks < 1:
            raise ValueError("a block pool needs at least one block")
        self.num_blocks = num_blocks
        self.sink = sink
        self.ref_cnt = np.zeros(num_blocks, dtype=np.int32)
        self.owner = np.full(num_blocks, NO_OWNER, dtype=np.int64)  # request that first filled it
        self.block_hash = np.zeros(num_blocks, dtype=np.uint64)  # 0: not in the prefix cache
        # Free blocks, least recently used first. Cached-but-free blocks are in here too.
        self.free_queue: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self.cached: dict[int, int] = {}  # chain hash -> block id
        self.num_cached_free = 0  # free blocks still holding a reusable prefix
        # Once set to a set: the blocks whose owner, ref_cnt or block_hash may have changed since
        # (kv_cache_manager.take_block_changes). A big pool's snapshots send only those.
        self.changed: set[int] | None = None

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_queue)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - len(self.free_queue)

    def lookup(self, block_hash: int) -> int | None:
        return self.cached.get(block_hash)

    def num_free_among(self, block_ids) -> int:
        ref = self.ref_cnt
        return sum(1 for b in block_ids if ref[b] == 0)

    def touch(self, block_ids, owner: int) -> None:
        """Take a reference on cached blocks (a prefix hit); free ones leave the free queue."""
        ref = self.ref_cnt
        if self.changed is not None:
            self.changed.update(block_ids := list(block_ids))
        for b in block_ids:
            if ref[b] == 0:
                del self.free_queue[b]
                self.num_cached_free -= 1
                self.owner[b] = owner
            ref[b] += 1

    def allocate(self, n: int, owner: int) -> list[int]:
        """n fresh blocks from the head of the free queue, evicting cached contents as needed."""
        if n > len(self.free_queue):
            raise RuntimeError(f"asked for {n} blocks with {len(self.free_queue)} free")
        blocks = []
        queue = self.free_queue
        for _ in range(n):
            b, _ = queue.popitem(last=False)
            h = int(self.block_hash[b])
            if h:
                del self.cached[h]
                self.block_hash[b] = 0
                self.num_cached_free -= 1
                self.sink.emit(EventKind.EVICTED, int(self.owner[b]), (b,))
            self.ref_cnt[b] = 1
            self.owner[b] = owner
            blocks.append(b)
        if self.changed is not None:
            self.changed.update(blocks)
        return blocks

    def free(self, block_ids) -> None:
        """Drop one reference from each block; unreferenced blocks join the tail of the free queue.

        Callers pass a request's blocks in reverse so its tail (least likely shared) is evicted first.
        """
        ref = self.ref_cnt
        if self.changed is not None:  # block_ids may be an iterator (reversed): listed once for both
            self.changed.update(block_ids := list(block_ids))
        for b in block_ids:
            ref[b] -= 1
            if ref[b] == 0:
                self.free_queue[b] = None
                if self.block_hash[b]:
                    self.num_cached_free += 1
                else:
                    self.owner[b] = NO_OWNER

    def cache_block(self, block_id: int, block_hash: int) -> None:
        """Enter a full block in the prefix cache (first writer wins for identical contents)."""
        if block_hash in self.cached or self.block_hash[block_id]:
            return
        self.cached[block_hash] = block_id
        self.block_hash[block_id] = block_hash
        if self.changed is not None:
            self.changed.add(block_id)
