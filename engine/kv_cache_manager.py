"""Per-request block tables over the BlockPool: allocation on demand and prefix caching.

A request's blocks are allocated as its tokens are scheduled, never reserved up front. Every full
block is identified by a chain hash (parent block's hash + this block's token ids), so two
requests that start with the same tokens map those blocks to the same hashes, and the second
reuses the first's blocks instead of recomputing them.
"""

from __future__ import annotations

import hashlib
from array import array

from kvscope.engine.block_pool import BlockPool
from kvscope.engine.events import EventKind, EventSink
from kvscope.engine.request import Request


def chain_hash(parent: int, token_ids) -> int:
    """Deterministic across processes (unlike hash()), never 0 (0 marks an unhashed block)."""
    digest = hashlib.blake2b(parent.to_bytes(8, "little") + array("q", token_ids).tobytes(), digest_size=8)
    return int.from_bytes(digest.digest(), "little") or 1


class PagedKVCacheManager:
    kind = "paged"

    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool, sink: EventSink):
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.sink = sink
        self.pool = BlockPool(num_blocks, sink)
        self.num_blocks = num_blocks
        self.unused_slots = 0  # allocated slots not holding a token yet, over all requests
        self.prefix_queried_tokens = 0
        self.prefix_hit_tokens = 0

    # -- capacity -------------------------------------------------------------------------------
    def blocks_for_tokens(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    @property
    def num_free_blocks(self) -> int:
        return self.pool.num_free_blocks

    def positional_blocks(self, req: Request) -> list[int]:
        """The table whose i-th block holds tokens i x block_size onwards."""
        return req.block_ids

    @property
    def usage(self) -> float:
        """Share of blocks held by requests (cached-but-free blocks count as free: they are reclaimable)."""
        return self.pool.num_used_blocks / self.num_blocks

    # -- prefix cache ---------------------------------------------------------------------------
    def _extend_hashes(self, req: Request, num_full_blocks: int) -> None:
        hashes, tokens, bs = req.block_hashes, req.token_ids, self.block_size
        parent = hashes[-1] if hashes else 0
        for i in range(len(hashes), num_full_blocks):
            parent = chain_hash(parent, tokens[i * bs:(i + 1) * bs])
            hashes.append(parent)

    def find_cached_prefix(self, req: Request) -> list[int]:
        """Cached blocks that hold this request's leading tokens, longest match first to miss.

        At least one token is always left to compute, so the step has something to sample from.
        """
        if not self.enable_prefix_caching:
            return []
        full_blocks = (req.num_tokens - 1) // self.block_size
        self._extend_hashes(req, full_blocks)
        hits = []
        lookup = self.pool.lookup
        for h in req.block_hashes[:full_blocks]:
            b = lookup(h)
            if b is None:
                break
            hits.append(b)
        return hits

    # -- allocation -----------------------------------------------------------------------------
    def allocate_slots(self, req: Request, num_new_tokens: int, cached_blocks=()) -> bool:
        """Give the next num_new_tokens of req a slot each; False (and nothing changed) if the pool is short."""
        bs = self.block_size
        computed = req.num_computed_tokens + len(cached_blocks) * bs
        needed = (computed + num_new_tokens + bs - 1) // bs - len(req.block_ids) - len(cached_blocks)
        pool = self.pool
        if needed > 0 or cached_blocks:
            available = pool.num_free_blocks - (pool.num_free_among(cached_blocks) if cached_blocks else 0)
            if needed > available:
                return False
        if cached_blocks:
            pool.touch(cached_blocks, req.request_id)
            req.block_ids.extend(cached_blocks)
            req.num_computed_tokens = computed
            req.num_registered_blocks = len(cached_blocks)
            req.num_cached_prompt_tokens = computed
            self.sink.emit(EventKind.PREFIX_HIT, req.request_id, tuple(cached_blocks), float(computed))
        if needed > 0:
            new = pool.allocate(needed, req.request_id)
            req.block_ids.extend(new)
            self.sink.emit(EventKind.ALLOCATED, req.request_id, tuple(new))
        unused = len(req.block_ids) * bs - computed - num_new_tokens
        self.unused_slots += unused - req.unused_slots
        req.unused_slots = unused
        return True

    def note_prefix_query(self, req: Request, cached_blocks) -> None:
        self.prefix_queried_tokens += req.num_tokens
        self.prefix_hit_tokens += len(cached_blocks) * self.block_size

    def register_full_blocks(self, req: Request) -> None:
        """After a step: enter the request's newly completed blocks in the prefix cache."""
        if not self.enable_prefix_caching:
            return
        full = req.num_computed_tokens // self.block_size
        if full <= req.num_registered_blocks:
            return
        self._extend_hashes(req, full)
        for i in range(req.num_registered_blocks, full):
            self.pool.cache_block(req.block_ids[i], req.block_hashes[i])
        req.num_registered_blocks = full

    def free(self, req: Request) -> list[int]:
        blocks = req.block_ids
        self.pool.free(reversed(blocks))
        self.unused_slots -= req.unused_slots
        req.unused_slots = 0
        req.block_ids = []
        req.num_registered_blocks = 0
        return blocks

    # -- snapshot -------------------------------------------------------------------------------
    def block_arrays(self):
        """(owner, ref_cnt, block_hash) views; the caller copies what it keeps."""
        return self.pool.owner, self.pool.ref_cnt, self.pool.block_hash

    def track_block_changes(self) -> None:
        self.pool.changed = set()

    def take_block_changes(self) -> set[int] | None:
        """The blocks whose block_arrays() entries may have changed since the last call (None: not tracked)."""
        changed = self.pool.changed
        self.pool.changed = None if changed is None else set()
        return changed

    def group_snapshot(self) -> dict:
        """The snapshot's layer-group fields: none for one uniform table."""
        return {}

    @property
    def num_cached_free_blocks(self) -> int:
        return self.pool.num_cached_free
