"""The baseline paged attention replaced: one contiguous max_model_len reservation per request.

At admission a request takes a run of ceil(max_model_len / block_size) adjacent blocks (first
fit), whether it will use them or not. The slots it never fills are internal fragmentation, and
the gaps between reservations are external fragmentation: both visible in the block map and in
the `unused_slots` counter. There is no prefix sharing.
"""

from __future__ import annotations

import bisect

import numpy as np

from kvscope.engine.block_pool import NO_OWNER
from kvscope.engine.events import EventKind, EventSink
from kvscope.engine.request import Request


class ContiguousKVCacheManager:
    kind = "contiguous"
    enable_prefix_caching = False

    def __init__(self, num_blocks: int, block_size: int, max_model_len: int, sink: EventSink):
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.sink = sink
        self.blocks_per_request = -(-max_model_len // block_size)
        self.owner = np.full(num_blocks, NO_OWNER, dtype=np.int64)
        self.ref_cnt = np.zeros(num_blocks, dtype=np.int32)
        self.block_hash = np.zeros(num_blocks, dtype=np.uint64)
        # Free extents as parallel sorted lists of starts and lengths, coalesced on free.
        self._starts = [0]
        self._lengths = [num_blocks]
        self._free = num_blocks
        self.unused_slots = 0
        self.prefix_queried_tokens = 0
        self.prefix_hit_tokens = 0

    def blocks_for_tokens(self, num_tokens: int) -> int:
        return self.blocks_per_request

    @property
    def num_free_blocks(self) -> int:
        return self._free

    @property
    def usage(self) -> float:
        return 1.0 - self._free / self.num_blocks

    @property
    def num_cached_free_blocks(self) -> int:
        return 0

    def find_cached_prefix(self, req: Request) -> list[int]:
        return []

    def note_prefix_query(self, req: Request, cached_blocks) -> None:
        self.prefix_queried_tokens += req.num_tokens

    def register_full_blocks(self, req: Request) -> None:
        return

    def _take(self, n: int) -> int | None:
        for i, length in enumerate(self._lengths):
            if length >= n:
                start = self._starts[i]
                if length == n:
                    del self._starts[i], self._lengths[i]
                else:
                    self._starts[i] += n
                    self._lengths[i] -= n
                self._free -= n
                return start
        return None

    def _give_back(self, start: int, n: int) -> None:
        i = bisect.bisect_left(self._starts, start)
        self._starts.insert(i, start)
        self._lengths.insert(i, n)
        self._free += n
        if i + 1 < len(self._starts) and start + n == self._starts[i + 1]:  # merge with the next extent
            self._lengths[i] += self._lengths.pop(i + 1)
            self._starts.pop(i + 1)
        if i > 0 and self._starts[i - 1] + self._lengths[i - 1] == start:  # and with the previous
            self._lengths[i - 1] += self._lengths.pop(i)
            self._starts.pop(i)

    def allocate_slots(self, req: Request, num_new_tokens: int, cached_blocks=()) -> bool:
        if not req.block_ids:
            start = self._take(self.blocks_per_request)
            if start is None:
                return False
            req.block_ids = list(range(start, start + self.blocks_per_request))
            self.owner[start:start + self.blocks_per_request] = req.request_id
            self.ref_cnt[start:start + self.blocks_per_request] = 1
            self.sink.emit(EventKind.ALLOCATED, req.request_id, tuple(req.block_ids))
        unused = len(req.block_ids) * self.block_size - req.num_computed_tokens - num_new_tokens
        self.unused_slots += unused - req.unused_slots
        req.unused_slots = unused
        return True

    def positional_blocks(self, req: Request) -> list[int]:
        return req.block_ids

    def group_snapshot(self) -> dict:
        return {}

    def free(self, req: Request) -> list[int]:
        blocks = req.block_ids
        if blocks:
            start = blocks[0]
            self.owner[start:start + len(blocks)] = NO_OWNER
            self.ref_cnt[start:start + len(blocks)] = 0
            self._give_back(start, len(blocks))
        self.unused_slots -= req.unused_slots
        req.unused_slots = 0
        req.block_ids = []
        return blocks

    def block_arrays(self):
        return self.owner, self.ref_cnt, self.block_hash

    @property
    def largest_free_extent(self) -> int:
        return max(self._lengths, default=0)
