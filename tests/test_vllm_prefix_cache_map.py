"""The prefix cache map rebuilt from KV events: the live pressure run, placement into cells, chains,
ages, overflow when removals were missed, duplicates, clears and DP ranks."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import numpy as np
import pytest

from kvscope.app.lab.vllm.events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    EventBatch,
    UnknownEvent,
    decode_batch,
)
from kvscope.app.lab.vllm.prefix_cache_map import NO_CHAIN, PrefixCacheMap
from kvscope.engine.snapshot import BLOCK_CACHED, BLOCK_FREE

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "vllm"


def stored(hashes, parent=None, ts=0.0, rank=0, group=0, block_size=2):
    tokens = tuple(range(block_size * len(hashes)))
    return EventBatch(ts, (BlockStored(tuple(hashes), parent, tokens, block_size, "GPU", group),), rank)


def removed(hashes, ts=0.0, rank=0, group=0):
    return EventBatch(ts, (BlockRemoved(tuple(hashes), "GPU", group),), rank)


def test_the_live_pressure_run_leaves_ten_blocks_in_two_prefix_trees():
    cache = PrefixCacheMap(num_gpu_blocks=12)
    for line in (FIXTURES / "live_events_pressure_replayed.jsonl").read_text().splitlines():
        cache.apply(decode_batch(msgspec.msgpack.encode(json.loads(line)["batch"])))
    counts = cache.counts()
    assert (counts.stored, counts.removed, counts.cached_blocks, counts.placed_copies) == (24, 14, 10, 10)
    assert (counts.unplaced, counts.unknown_removals, counts.chains) == (0, 0, 2)
    assert cache.block_size == 32
    cached = cache.cell_state == BLOCK_CACHED
    assert int(cached.sum()) == 10 and set(cache.cell_chain[cached]) == {2, 3}
    assert (cache.cell_chain[~cached] == NO_CHAIN).all() and np.isnan(cache.cell_stored_ts[~cached]).all()
    # every cached block's parent is cached too, or it is a root: a chain never has a hole
    for key, block in cache.blocks.items():
        assert block.parent is None or (key[0], key[1], block.parent) in cache.blocks
        assert len(block.token_ids) == 32


def test_blocks_take_the_first_free_cells_and_carry_chain_depth_order_and_age():
    cache = PrefixCacheMap(num_gpu_blocks=6)
    cache.apply(stored([11, 12], ts=100.0))
    cache.apply(stored([13], parent=12, ts=101.0))
    cache.apply(stored([21], ts=102.0))
    assert list(cache.cell_state) == [BLOCK_CACHED] * 4 + [BLOCK_FREE] * 2
    assert list(cache.cell_chain[:4]) == [0, 0, 0, 1]
    assert list(cache.cell_depth[:4]) == [0, 1, 2, 0]
    assert list(cache.cell_order[:4]) == [0, 1, 2, 3]
    assert list(cache.cell_hash[:4]) == [11, 12, 13, 21]
    assert list(cache.cell_age_s(110.0)[:4]) == [10.0, 10.0, 9.0, 8.0]
    assert cache.block_at(2).token_ids == (0, 1) and cache.block_at(5) is None
    assert cache.chain_of((0, 0, 13)) == [(0, 0, 11), (0, 0, 12), (0, 0, 13)]
    cache.apply(removed([12]))
    assert cache.cell_state[1] == BLOCK_FREE and cache.counts().cached_blocks == 3
    cache.apply(stored([31]))
    assert cache.cell_hash[1] == 31  # the freed cell is reused first


def test_stores_past_the_last_cell_wait_unplaced_until_a_cell_frees():
    cache = PrefixCacheMap(num_gpu_blocks=2)
    cache.apply(stored([1, 2, 3]))  # a removal was missed: more blocks than cells
    assert cache.counts().unplaced == 1 and cache.counts().cached_blocks == 3
    cache.apply(removed([1]))
    assert cache.counts().unplaced == 0 and sorted(cache.cell_hash) == [2, 3]


def test_removals_of_unknown_hashes_and_unknown_events_are_counted():
    cache = PrefixCacheMap(num_gpu_blocks=4)
    cache.apply(removed([99]))
    cache.apply(EventBatch(0.0, (UnknownEvent("BlockPinned"),), 0))
    counts = cache.counts()
    assert (counts.unknown_removals, counts.unknown_events, counts.removed) == (1, 1, 0)


def test_a_hash_stored_twice_holds_two_cells_until_both_are_removed():
    cache = PrefixCacheMap(num_gpu_blocks=4)
    cache.apply(stored([5]))
    cache.apply(stored([5]))
    assert cache.counts().placed_copies == 2 and cache.counts().cached_blocks == 1
    cache.apply(removed([5]))
    assert cache.counts().placed_copies == 1 and cache.counts().cached_blocks == 1
    cache.apply(removed([5]))
    assert cache.counts().placed_copies == 0 and cache.counts().cached_blocks == 0


def test_groups_and_dp_ranks_are_separate_caches():
    cache = PrefixCacheMap(num_gpu_blocks=3)
    cache.apply(stored([7], group=0))
    cache.apply(stored([7], group=1))  # a hybrid model hashes each KV cache group apart
    cache.apply(stored([7], rank=2))
    assert cache.counts().cached_blocks == 3 and cache.num_cells == 6
    assert int((cache.cell_state[cache.segment_of(0)] == BLOCK_CACHED).sum()) == 2
    assert int((cache.cell_state[cache.segment_of(2)] == BLOCK_CACHED).sum()) == 1
    cache.apply(EventBatch(1.0, (AllBlocksCleared(),), 0))  # clears its own engine only
    assert cache.counts().cached_blocks == 1 and cache.counts().cleared == 1
    assert (cache.cell_state[cache.segment_of(0)] == BLOCK_FREE).all()
    cache.reset()
    assert cache.counts().cached_blocks == 0 and (cache.cell_state == BLOCK_FREE).all()


def test_a_pool_needs_a_positive_size():
    with pytest.raises(ValueError, match="num_gpu_blocks"):
        PrefixCacheMap(0)
