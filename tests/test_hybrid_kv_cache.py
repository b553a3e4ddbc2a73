"""Block tables per layer group: sliding windows free what they passed, linear state stays fixed,
prefix hits are served by every group, and the engine's concurrency matches the memory math."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from kvscope.app.lab.presets import load_hardware, load_model
from kvscope.engine import Engine, EngineArgs, EventKind
from kvscope.engine.events import EventSink
from kvscope.engine.hybrid_kv_cache_manager import NULL_BLOCK, HybridKVCacheManager, is_hybrid
from kvscope.engine.kv_cache_manager import PagedKVCacheManager
from kvscope.engine.request import Request

H100 = load_hardware("h100-80gb")
BS = 16


def manager(kinds, window=64, num_blocks=400, prefix=True, state_blocks=1):
    return HybridKVCacheManager(num_blocks, BS, prefix, EventSink(), kinds, window, state_blocks)


def run_tokens(mgr, req, total, chunk):
    """Schedule req's tokens chunk by chunk (prompt and output alike), as the scheduler would."""
    while req.num_computed_tokens < total:
        n = min(chunk, total - req.num_computed_tokens)
        while req.num_tokens < req.num_computed_tokens + n:
            req.token_ids.append(7)
        assert mgr.allocate_slots(req, n)
        req.num_computed_tokens += n
        mgr.register_full_blocks(req)


def held_in_group(mgr, req, group):
    return [b for b in mgr.tables[req.request_id][group] if b != NULL_BLOCK]


def test_a_sliding_group_holds_only_its_window_and_gives_the_rest_back():
    mgr = manager(("full_attention", "sliding_attention"), window=64)
    req = Request(0, list(range(100)), 1000, 0.0)
    run_tokens(mgr, req, 1000, chunk=1)
    full, sliding = held_in_group(mgr, req, 0), held_in_group(mgr, req, 1)
    assert len(full) == -(-1000 // BS)
    # the last 63 computed tokens span at most cdiv(63, 16) + 1 blocks, plus the one being written
    assert len(sliding) <= -(-63 // BS) + 2
    freed = [ev for ev in mgr.sink.drain() if ev.kind == EventKind.WINDOW_FREED]
    assert freed and sum(len(ev.blocks) for ev in freed) == -(-1000 // BS) - len(sliding)
    assert mgr.pool.num_used_blocks == len(full) + len(sliding)
    mgr.free(req)
    assert mgr.pool.num_used_blocks == 0 and mgr.unused_slots == 0


def test_a_linear_group_holds_the_same_state_blocks_at_any_length():
    mgr = manager(("full_attention", "linear_attention", "linear_attention"), state_blocks=2)
    req = Request(0, list(range(40)), 600, 0.0)
    run_tokens(mgr, req, 40, chunk=40)
    early = [len(held_in_group(mgr, req, g)) for g in (1, 2)]
    run_tokens(mgr, req, 640, chunk=1)
    assert early == [len(held_in_group(mgr, req, g)) for g in (1, 2)] == [2, 2]
    assert len(held_in_group(mgr, req, 0)) == 640 // BS
    assert mgr.blocks_for_tokens(640) == 640 // BS + 4


def test_a_prefix_hit_needs_the_window_cached_in_every_sliding_group():
    mgr = manager(("full_attention", "sliding_attention"), window=48)
    prompt = list(range(1000, 1200))
    first = Request(0, prompt, 10, 0.0)
    run_tokens(mgr, first, len(prompt), chunk=len(prompt))
    mgr.free(first)
    second = Request(1, prompt + [5, 6, 7], 10, 0.0)
    hit = mgr.find_cached_prefix(second)
    assert len(hit) == len(prompt) // BS  # every full block of the shared prompt
    full_table, sliding_table = hit.per_group
    assert NULL_BLOCK not in full_table
    window_blocks = -(-47 // BS)
    assert sliding_table[:-window_blocks] == [NULL_BLOCK] * (len(hit) - window_blocks)
    assert NULL_BLOCK not in sliding_table[-window_blocks:]
    assert mgr.allocate_slots(second, second.num_tokens - len(hit) * BS, hit)
    assert second.num_cached_prompt_tokens == len(hit) * BS

    # evict one block under the window: the hit must shrink to end before it
    evicted = sliding_table[-1]
    mgr.free(second)
    assert evicted in mgr.pool.free_queue
    mgr.pool.free_queue.move_to_end(evicted, last=False)
    mgr.pool.allocate(1, owner=99)
    third = Request(2, prompt + [9], 10, 0.0)
    assert len(mgr.find_cached_prefix(third)) < len(hit)


def test_a_model_with_linear_state_serves_no_prefix_hits():
    mgr = manager(("full_attention", "linear_attention"))
    prompt = list(range(300))
    first = Request(0, prompt, 10, 0.0)
    run_tokens(mgr, first, len(prompt), chunk=len(prompt))
    mgr.free(first)
    assert len(mgr.find_cached_prefix(Request(1, prompt + [1], 10, 0.0))) == 0


def test_a_failed_allocation_takes_nothing():
    mgr = manager(("full_attention", "sliding_attention"), num_blocks=6)
    req = Request(0, list(range(200)), 10, 0.0)
    assert not mgr.allocate_slots(req, 200)
    assert mgr.pool.num_used_blocks == 0 and req.block_ids == [] and req.request_id not in mgr.tables


@pytest.mark.parametrize("preset", ["gemma-3-27b", "gpt-oss-120b", "qwen3.6-27b-fp8"])
def test_the_engine_charges_every_group_and_fits_what_the_memory_math_says(preset):
    model = load_model(preset)
    if model.sliding_window:
        model = dataclasses.replace(model, sliding_window=128)
    length = 2048
    # a budget that admits every prompt at once: the pool alone decides how many run
    args = EngineArgs(max_model_len=length, kv_cache_memory_bytes=3 << 30, max_num_seqs=1024,
                      max_num_batched_tokens=400 * length, enable_prefix_caching=False)
    engine = Engine(model, H100, args)
    assert isinstance(engine.kv, HybridKVCacheManager) and is_hybrid(engine.plan)
    for i in range(400):  # each runs to max_model_len: the concurrency the plan quotes
        engine.add_request([i] * 8 + list(range(length - 8 - 1)), max_tokens=1, arrival_time=0.0)
    peak = 0
    while engine.has_unfinished_requests():
        peak = max(peak, engine.step().num_running)
    assert engine.kv.pool.num_used_blocks == 0
    # the plan quotes blocks over a whole request; prompts of length - 1 tokens need the same
    expected = engine.plan.max_concurrent_sequences
    assert expected >= 2
    assert int(expected) - 1 <= peak <= int(expected) + 1


def test_a_uniform_model_keeps_the_single_table_manager():
    engine = Engine(load_model("llama-3-8b"), H100, EngineArgs(kv_cache_memory_bytes=1 << 30))
    assert type(engine.kv) is PagedKVCacheManager


def test_the_snapshot_fills_blocks_by_the_full_attention_table():
    model = dataclasses.replace(load_model("gpt-oss-120b"), sliding_window=32)
    engine = Engine(model, H100, EngineArgs(max_model_len=1024, kv_cache_memory_bytes=1 << 30))
    engine.add_request(list(range(100)), max_tokens=200, arrival_time=0.0)
    for _ in range(60):
        engine.step()
    snap = engine.snapshot()
    req = engine.scheduler.running[0]
    full = engine.kv.positional_blocks(req)
    assert len(full) == -(-req.num_computed_tokens // engine.plan.block_size)
    assert snap.block_fill[full[-1]] == req.num_computed_tokens - (len(full) - 1) * engine.plan.block_size
    assert np.all(snap.block_state[req.block_ids] != 0)
    assert snap.requests["num_blocks"][0] == len(req.block_ids) > len(full)


def test_the_snapshot_says_which_layer_group_each_block_serves():
    model = dataclasses.replace(load_model("gemma-3-27b"), sliding_window=64)
    engine = Engine(model, H100, EngineArgs(max_model_len=2048, kv_cache_memory_bytes=2 << 30))
    engine.add_request(list(range(600)), max_tokens=50, arrival_time=0.0)
    for _ in range(10):
        engine.step()
    snap = engine.snapshot()
    by_group = snap.held_blocks_by_group()
    assert set(by_group) == {"full attention", "sliding window of 64 tokens"}
    assert sum(by_group.values()) == int(np.count_nonzero(snap.block_ref_cnt > 0))
    # six sliding groups, each holding its window only; one full group holding every block
    req = engine.scheduler.running[0]
    assert by_group["full attention"] == -(-req.num_computed_tokens // engine.plan.block_size)
    assert by_group["sliding window of 64 tokens"] <= 6 * (-(-63 // engine.plan.block_size) + 2)
