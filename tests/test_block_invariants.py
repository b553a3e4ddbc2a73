"""Property tests for the KV block bookkeeping: the pool, both KV cache managers, and the engine.

Random operation sequences (hypothesis) drive the managers directly and the whole engine, and
after EVERY operation the block accounting is checked against what the request tables say:

  1. free + in use + cached = total. Paged: in use = blocks with ref_cnt > 0; cached = free blocks
     that still hold a hash (pool.num_cached_free must equal that count); free-and-empty = the rest;
     the free queue holds exactly the blocks with ref_cnt == 0.
  2. ref_cnt[b] == number of live requests whose block table contains b (with multiplicity).
  3. A block in two live requests' tables is shared through the prefix cache: it has a nonzero
     hash and pool.cached maps that hash back to it.
  4. Once every request is done: every ref_cnt is 0, the whole pool is free, unused_slots == 0.
  5. pool.cached (hash -> block) and pool.block_hash (block -> hash) agree both ways.

On top of these, the manager-level machines keep a shadow copy of the tokens each block holds, so
a prefix hit on a block whose contents differ from the request's tokens (a stale or wrong cache
entry), or a write into a block another request still reads, is caught directly rather than
through the hash bookkeeping alone.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from kvscope.engine import Engine, EngineArgs, EventKind
from kvscope.engine.block_pool import NO_OWNER
from kvscope.engine.contiguous_allocator import ContiguousKVCacheManager
from kvscope.engine.events import EventSink
from kvscope.engine.kv_cache_manager import PagedKVCacheManager, chain_hash
from kvscope.app.lab.presets import load_hardware, load_model
from kvscope.engine.request import Request, RequestStatus
from kvscope.engine.runners.simulated import SimulatedRunner
from kvscope.engine.snapshot import BLOCK_CACHED, BLOCK_FREE, BLOCK_RESERVED, BLOCK_USED

from kvscope.engine.runners.base import StepOutOfMemory  # the real runner raises it; tests inject it

MODEL = load_model("llama-3-8b")
H100 = load_hardware("h100-80gb")

# A few shared prompt prefixes from disjoint token ranges; random tails and generated tokens come
# from a tiny alphabet, so identical blocks (and so prefix-cache hits) are common.
PREFIXES = [tuple(range(1000 + 100 * i, 1000 + 100 * i + 40)) for i in range(3)]
TAIL_TOKEN = st.integers(0, 3)


# ---------------------------------------------------------------------------------------------
# Invariant checkers, shared by the manager-level machines and the engine-level tests
# ---------------------------------------------------------------------------------------------

def _table_counts(num_blocks: int, reqs) -> np.ndarray:
    ids = [b for r in reqs for b in r.block_ids]
    return np.bincount(np.asarray(ids, dtype=np.int64), minlength=num_blocks)


def check_paged(mgr: PagedKVCacheManager, reqs, *, stable: bool = True) -> None:
    """Invariants 1, 2, 3 and 5 for the paged manager, given the live requests (those holding blocks).

    stable: every live request has computed all the tokens it was given slots for, so its table
    holds exactly ceil(computed / block_size) blocks and its unused slots are the tail of the last one.
    """
    pool = mgr.pool
    n = pool.num_blocks
    ref = pool.ref_cnt
    hashes = pool.block_hash
    bs = mgr.block_size
    assert (ref >= 0).all(), f"negative ref counts at {np.flatnonzero(ref < 0).tolist()}"

    # 1. free + in use + cached = total, with the pool's counters equal to what the arrays say.
    unreferenced = ref == 0
    in_use = int(np.count_nonzero(~unreferenced))
    cached_free = int(np.count_nonzero(unreferenced & (hashes != 0)))
    free_empty = int(np.count_nonzero(unreferenced & (hashes == 0)))
    assert pool.num_cached_free == cached_free, (pool.num_cached_free, cached_free)
    assert len(pool.free_queue) == int(np.count_nonzero(unreferenced))
    assert set(pool.free_queue) == set(np.flatnonzero(unreferenced).tolist())
    assert pool.num_used_blocks == in_use
    assert (pool.num_free_blocks - pool.num_cached_free) + pool.num_used_blocks + pool.num_cached_free == n
    assert free_empty + in_use + cached_free == n
    assert mgr.num_cached_free_blocks == cached_free
    # a free block with nothing cached in it belongs to no one; a held block to someone
    assert (pool.owner[unreferenced & (hashes == 0)] == NO_OWNER).all()
    assert (pool.owner[~unreferenced] != NO_OWNER).all()

    # 2. ref counts equal block-table references (with multiplicity), and no table repeats a block.
    for r in reqs:
        assert len(set(r.block_ids)) == len(r.block_ids), f"request {r.request_id} holds a block twice: {r.block_ids}"
    counts = _table_counts(n, reqs)
    assert np.array_equal(counts, ref), (
        f"ref_cnt disagrees with block tables at {np.flatnonzero(counts != ref).tolist()}: "
        f"ref={ref[counts != ref].tolist()} tables={counts[counts != ref].tolist()}"
    )

    # 3. a block in two tables is a prefix-cache block.
    for b in np.flatnonzero(counts > 1).tolist():
        h = int(hashes[b])
        assert h != 0, f"block {b} is shared by {counts[b]} requests but holds no hash"
        assert pool.cached.get(h) == b, f"block {b} is shared but pool.cached[{h}] = {pool.cached.get(h)}"

    # 5. cached and block_hash agree both ways.
    for h, b in pool.cached.items():
        assert h != 0
        assert int(hashes[b]) == h, f"pool.cached[{h}] = {b} but block_hash[{b}] = {int(hashes[b])}"
    hashed = np.flatnonzero(hashes != 0).tolist()
    assert len(hashed) == len(pool.cached)
    for b in hashed:
        assert pool.cached.get(int(hashes[b])) == b

    # Prefix-cache content: a hashed block in a request's table holds that request's tokens, i.e.
    # carries the chain hash of the request's own tokens at that position.
    if mgr.enable_prefix_caching:
        for r in reqs:
            parent = 0
            for i, b in enumerate(r.block_ids):
                full = (i + 1) * bs <= len(r.token_ids)
                if full:
                    parent = chain_hash(parent, r.token_ids[i * bs:(i + 1) * bs])
                h = int(hashes[b])
                if h:
                    assert full and (i + 1) * bs <= r.num_computed_tokens, (
                        f"request {r.request_id} block {i} (id {b}) is cached before it is full"
                    )
                    assert h == parent, f"request {r.request_id} block {i} (id {b}) holds another prefix"

    # Fragmentation accounting: the manager's total is the sum of the requests' unused slots.
    assert mgr.unused_slots == sum(r.unused_slots for r in reqs)
    for r in reqs:
        assert r.unused_slots >= 0
        assert len(r.block_ids) * bs >= r.num_computed_tokens
        assert len(r.block_ids) <= -(-r.num_tokens // bs), f"request {r.request_id} holds blocks past its tokens"
    if stable:
        for r in reqs:
            assert len(r.block_ids) == -(-r.num_computed_tokens // bs), (
                f"request {r.request_id}: {len(r.block_ids)} blocks for {r.num_computed_tokens} computed tokens"
            )
            assert r.unused_slots == len(r.block_ids) * bs - r.num_computed_tokens


def check_contiguous(mgr: ContiguousKVCacheManager, reqs, *, stable: bool = True) -> None:
    """Invariants 1 (no cached blocks), 2 and reservations: contiguous, disjoint, and the free
    extents are exactly the unreserved blocks, sorted and fully coalesced."""
    n = mgr.num_blocks
    ref = mgr.ref_cnt
    bs = mgr.block_size
    assert ((ref == 0) | (ref == 1)).all(), "a contiguous block is referenced more than once"
    assert not mgr.block_hash.any(), "the contiguous manager cached a block"
    assert mgr.num_cached_free_blocks == 0
    in_use = int(np.count_nonzero(ref))
    assert mgr.num_free_blocks + in_use + 0 == n, (mgr.num_free_blocks, in_use, n)

    counts = _table_counts(n, reqs)
    assert np.array_equal(counts, ref), f"ref_cnt disagrees with reservations at {np.flatnonzero(counts != ref).tolist()}"
    assert (counts <= 1).all(), f"reservations overlap at {np.flatnonzero(counts > 1).tolist()}"
    for r in reqs:
        blocks = r.block_ids
        assert len(blocks) == mgr.blocks_per_request
        assert blocks == list(range(blocks[0], blocks[0] + len(blocks))), f"request {r.request_id} is not contiguous"
        assert (mgr.owner[blocks] == r.request_id).all()
    assert (mgr.owner[ref == 0] == NO_OWNER).all()

    starts, lengths = mgr._starts, mgr._lengths
    assert starts == sorted(starts)
    assert all(length > 0 for length in lengths)
    assert sum(lengths) == mgr.num_free_blocks
    covered = np.zeros(n, dtype=np.int64)
    for s, length in zip(starts, lengths):
        covered[s:s + length] += 1
    assert np.array_equal(covered, (ref == 0).astype(np.int64)), "free extents are not exactly the unreserved blocks"
    for (s0, l0), (s1, _) in zip(zip(starts, lengths), zip(starts[1:], lengths[1:])):
        assert s0 + l0 < s1, f"free extents [{s0},{s0 + l0}) and [{s1},...) touch but were not merged"
    assert mgr.largest_free_extent == max(lengths, default=0)

    assert mgr.unused_slots == sum(r.unused_slots for r in reqs)
    if stable:
        for r in reqs:
            assert r.unused_slots == len(r.block_ids) * bs - r.num_computed_tokens


def check_manager(mgr, reqs, *, stable: bool = True) -> None:
    if isinstance(mgr, PagedKVCacheManager):
        check_paged(mgr, reqs, stable=stable)
    else:
        check_contiguous(mgr, reqs, stable=stable)


def check_snapshot(engine, *, stable: bool = True) -> None:
    """Invariant 1 as the block map shows it: every block is in exactly one state, the state counts
    equal the manager's counters, and (stable: every held slot was computed) each block's fill is
    what the block tables say it holds."""
    snap = engine.snapshot()
    kv = engine.kv
    bs = kv.block_size
    n = kv.num_blocks
    used, cached = snap.count(BLOCK_USED), snap.count(BLOCK_CACHED)
    free, reserved = snap.count(BLOCK_FREE), snap.count(BLOCK_RESERVED)
    assert used + cached + free + reserved == snap.num_blocks == n
    assert free + cached == kv.num_free_blocks
    assert cached == kv.num_cached_free_blocks
    assert used + reserved == n - kv.num_free_blocks
    assert np.array_equal(snap.block_ref_cnt, kv.block_arrays()[1])
    assert snap.kv_usage == kv.usage
    if not stable:
        return
    expect_fill = np.where(snap.block_state == BLOCK_CACHED, bs, 0)
    for r in engine.scheduler.running:
        for i, b in enumerate(r.block_ids):
            expect_fill[b] = max(expect_fill[b], min(bs, max(0, r.num_computed_tokens - i * bs)))
    assert np.array_equal(snap.block_fill, expect_fill), (
        f"fill disagrees at {np.flatnonzero(snap.block_fill != expect_fill).tolist()}"
    )
    if kv.kind == "contiguous":
        assert cached == 0
    # reserved = held but empty: a contiguous reservation's tail, or blocks of a step that never ran
    assert np.array_equal(snap.block_state == BLOCK_RESERVED, (snap.block_ref_cnt > 0) & (expect_fill == 0))
    table = {int(row["request_id"]): row for row in snap.requests}
    assert set(table) == set(engine.requests)
    for rid, row in table.items():
        r = engine.requests[rid]
        assert row["num_blocks"] == len(r.block_ids)
        assert row["num_computed_tokens"] == r.num_computed_tokens
        assert row["num_output_tokens"] == r.num_output_tokens


def check_all_released(mgr) -> None:
    """Invariant 4: nothing is held once every request is done."""
    n = mgr.num_blocks
    if isinstance(mgr, PagedKVCacheManager):
        pool = mgr.pool
        assert not pool.ref_cnt.any(), f"blocks still referenced: {np.flatnonzero(pool.ref_cnt).tolist()}"
        assert len(pool.free_queue) == n
        assert pool.num_used_blocks == 0
        assert pool.num_cached_free == int(np.count_nonzero(pool.block_hash))
    else:
        assert not mgr.ref_cnt.any()
        assert mgr.num_free_blocks == n
        assert (mgr._starts, mgr._lengths) == ([0], [n]), "free extents did not coalesce back into one"
    assert mgr.num_free_blocks == n
    assert mgr.usage == 0.0
    assert mgr.unused_slots == 0


# ---------------------------------------------------------------------------------------------
# (a) Manager-level state machines
# ---------------------------------------------------------------------------------------------

class _ManagerMachine(RuleBasedStateMachine):
    """Admit / grow / preempt-and-readmit / free requests against one manager, the way the
    scheduler and the engine drive it, checking every invariant after each operation.

    A shadow map block -> tokens records what each block holds, written only where the manager says
    a request's tokens go; it checks that a prefix hit serves exactly the request's tokens and that
    no request ever writes into a block someone else also references.
    """

    def __init__(self):
        super().__init__()
        self.mgr = None
        self.live: dict[int, Request] = {}
        self.next_id = 0
        self.content: dict[int, list] = {}
        self.healthy = True
        self.max_len = 10**9

    # -- helpers --------------------------------------------------------------------------------
    def fingerprint(self, req):
        """Everything allocate_slots may touch, to check that a refusal changes nothing."""
        raise NotImplementedError

    def _write(self, req: Request, start: int, n: int) -> None:
        """The model writes tokens [start, start + n) into the request's blocks."""
        bs = self.mgr.block_size
        ref = self.mgr.block_arrays()[1]
        for pos in range(start, start + n):
            b = req.block_ids[pos // bs]
            assert ref[b] == 1, f"request {req.request_id} writes position {pos} into block {b} shared {ref[b]} ways"
            self.content[b][pos % bs] = req.token_ids[pos]

    def _allocate(self, req: Request, n: int, cached=()) -> bool:
        """allocate_slots, then (on success) check new blocks and compute the n tokens."""
        mgr = self.mgr
        bs = mgr.block_size
        before = self.fingerprint(req)
        held = len(req.block_ids)
        ok = mgr.allocate_slots(req, n, cached)
        event(f"{mgr.kind}: allocate_slots {'granted' if ok else 'refused'}" + (" with a prefix hit" if cached else ""))
        if not ok:
            assert self.fingerprint(req) == before, "a failed allocate_slots changed state"
            return False
        ref, hashes = mgr.block_arrays()[1], mgr.block_arrays()[2]
        if cached:
            assert req.block_ids[held:held + len(cached)] == list(cached)
            for i, b in enumerate(cached):
                expect = req.token_ids[i * bs:(i + 1) * bs]
                assert self.content[b] == expect, (
                    f"prefix hit on block {b} serves {self.content[b]} for tokens {expect}"
                )
                assert int(hashes[b]) == req.block_hashes[i]
        for b in req.block_ids[held + len(cached):]:
            assert ref[b] == 1 and hashes[b] == 0, f"fresh block {b} has ref {ref[b]}, hash {hashes[b]}"
            self.content[b] = [None] * bs
        assert len(req.block_ids) * bs >= req.num_computed_tokens + n, "not enough slots for the tokens"
        start = req.num_computed_tokens
        self._write(req, start, n)
        req.num_computed_tokens += n
        mgr.register_full_blocks(req)
        return True

    def _admit(self, req: Request, chunk: int) -> bool:
        mgr = self.mgr
        cached = mgr.find_cached_prefix(req)
        assert len(cached) * mgr.block_size < req.num_tokens, "a prefix hit left nothing to compute"
        n = min(req.num_tokens - len(cached) * mgr.block_size, chunk)
        return self._allocate(req, n, cached)

    def _pick(self, idx: int) -> Request:
        keys = sorted(self.live)
        return self.live[keys[idx % len(keys)]]

    def _free(self, req: Request) -> None:
        blocks = list(req.block_ids)
        returned = self.mgr.free(req)
        assert list(returned) == blocks
        assert req.block_ids == [] and req.unused_slots == 0
        del self.live[req.request_id]

    # -- rules ----------------------------------------------------------------------------------
    @rule(
        prefix=st.integers(0, len(PREFIXES)),  # len(PREFIXES): no shared prefix
        prefix_len=st.integers(0, 24),
        tail=st.lists(TAIL_TOKEN, max_size=10),
        chunk=st.sampled_from([1, 3, 1000, 1000]),
    )
    def admit(self, prefix, prefix_len, tail, chunk):
        """A new request arrives and is admitted with its cached prefix (or not, if the pool is short)."""
        self.healthy = False
        head = list(PREFIXES[prefix][:prefix_len]) if prefix < len(PREFIXES) else []
        prompt = (head + tail)[: self.max_len]
        if not prompt:
            prompt = [0]
        req = Request(self.next_id, prompt, max_tokens=8, arrival_time=0.0)
        self.next_id += 1
        self.live[req.request_id] = req
        if not self._admit(req, chunk):
            del self.live[req.request_id]
        self.healthy = True

    @precondition(lambda self: self.live)
    @rule(idx=st.integers(0, 1000), token=TAIL_TOKEN, chunk=st.sampled_from([1, 2, 1000]))
    def advance(self, idx, token, chunk):
        """A running request computes its next prompt chunk, or decodes one more token."""
        self.healthy = False
        req = self._pick(idx)
        remaining = req.num_tokens - req.num_computed_tokens
        if remaining > 0:
            self._allocate(req, min(remaining, chunk))
        elif req.num_tokens < self.max_len:
            req.token_ids.append(token)
            if not self._allocate(req, 1):
                req.token_ids.pop()
        self.healthy = True

    @precondition(lambda self: self.live)
    @rule(idx=st.integers(0, 1000), chunk=st.sampled_from([2, 1000]))
    def preempt(self, idx, chunk):
        """The scheduler's preemption: give back every block, forget progress, readmit (recompute)."""
        self.healthy = False
        req = self._pick(idx)
        self._free(req)
        req.num_computed_tokens = 0
        check_manager(self.mgr, self.live.values())
        self.live[req.request_id] = req
        if not self._admit(req, chunk):
            del self.live[req.request_id]
        self.healthy = True

    @precondition(lambda self: self.live)
    @rule(idx=st.integers(0, 1000))
    def finish(self, idx):
        """A request finishes and gives its blocks back."""
        self.healthy = False
        self._free(self._pick(idx))
        self.healthy = True

    @rule()
    def finish_all(self):
        """Everything finishes: invariant 4."""
        self.healthy = False
        for req in list(self.live.values()):
            self._free(req)
        check_all_released(self.mgr)
        self.healthy = True

    # -- invariants -----------------------------------------------------------------------------
    @invariant()
    def blocks_consistent(self):
        if self.mgr is None:
            return
        self.healthy = False
        check_manager(self.mgr, list(self.live.values()))
        # Every computed token is where the block table says it is.
        bs = self.mgr.block_size
        for r in self.live.values():
            for pos in range(r.num_computed_tokens):
                assert self.content[r.block_ids[pos // bs]][pos % bs] == r.token_ids[pos], (
                    f"request {r.request_id} lost token {pos}"
                )
        self.healthy = True

    def teardown(self):
        # Only when no earlier step failed: an error here would hide the original one.
        if self.mgr is not None and self.healthy:
            for req in list(self.live.values()):
                self._free(req)
            check_all_released(self.mgr)


class PagedManagerMachine(_ManagerMachine):
    @initialize(num_blocks=st.integers(1, 24), block_size=st.sampled_from([1, 2, 4]), caching=st.booleans())
    def setup(self, num_blocks, block_size, caching):
        self.mgr = PagedKVCacheManager(num_blocks, block_size, caching, EventSink())

    def fingerprint(self, req):
        pool = self.mgr.pool
        return (
            pool.ref_cnt.tobytes(), pool.block_hash.tobytes(), pool.owner.tobytes(), list(pool.free_queue),
            dict(pool.cached), pool.num_cached_free, self.mgr.unused_slots,
            list(req.block_ids), req.num_computed_tokens, req.num_registered_blocks, req.unused_slots,
        )

    @invariant()
    def cached_blocks_are_full(self):
        """A block in the prefix cache holds a whole block of computed tokens."""
        if self.mgr is None:
            return
        for b in self.mgr.pool.cached.values():
            assert None not in self.content[b], f"cached block {b} is only partly filled: {self.content[b]}"


class ContiguousManagerMachine(_ManagerMachine):
    @initialize(num_blocks=st.integers(1, 24), block_size=st.sampled_from([1, 2, 4]), max_model_len=st.integers(1, 24))
    def setup(self, num_blocks, block_size, max_model_len):
        self.mgr = ContiguousKVCacheManager(num_blocks, block_size, max_model_len, EventSink())
        self.max_len = max_model_len

    def fingerprint(self, req):
        m = self.mgr
        return (
            m.ref_cnt.tobytes(), m.owner.tobytes(), list(m._starts), list(m._lengths), m._free, m.unused_slots,
            list(req.block_ids), req.num_computed_tokens, req.unused_slots,
        )


_MACHINE_SETTINGS = settings(
    max_examples=250, stateful_step_count=50, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

TestPagedManagerInvariants = PagedManagerMachine.TestCase
TestPagedManagerInvariants.settings = _MACHINE_SETTINGS
TestContiguousManagerInvariants = ContiguousManagerMachine.TestCase
TestContiguousManagerInvariants.settings = settings(_MACHINE_SETTINGS, max_examples=150)


def test_prefix_sharing_and_eviction_paths_are_reachable():
    """The machine's interesting paths exist: a second request shares the first one's full blocks
    (ref_cnt 2, invariant 3), they stay cached after both finish, and are evicted (hash and map
    entry dropped together, invariant 5) when fresh blocks are needed."""
    mgr = PagedKVCacheManager(4, 2, True, EventSink())
    a = Request(0, [1, 2, 3, 4, 5], 4, 0.0)
    assert mgr.allocate_slots(a, 5, mgr.find_cached_prefix(a))
    a.num_computed_tokens = 5
    mgr.register_full_blocks(a)
    b = Request(1, [1, 2, 3, 4, 9], 4, 0.0)
    hits = mgr.find_cached_prefix(b)
    assert hits == a.block_ids[:2]
    assert mgr.allocate_slots(b, 1, hits)
    b.num_computed_tokens += 1
    mgr.register_full_blocks(b)
    assert mgr.pool.ref_cnt[hits].tolist() == [2, 2]
    check_paged(mgr, [a, b])
    mgr.free(a)
    mgr.free(b)
    check_paged(mgr, [])
    assert mgr.pool.num_cached_free == 2
    check_all_released(mgr)
    c = Request(2, [7, 7, 7, 7, 7, 7, 7], 1, 0.0)
    assert mgr.find_cached_prefix(c) == []
    assert mgr.allocate_slots(c, 7)
    c.num_computed_tokens = 7
    mgr.register_full_blocks(c)
    check_paged(mgr, [c])
    assert mgr.pool.lookup(a.block_hashes[0]) is None, "the LRU prefix was not evicted"


# ---------------------------------------------------------------------------------------------
# (b) Engine-level
# ---------------------------------------------------------------------------------------------

@st.composite
def engine_scenarios(draw):
    block_size = draw(st.sampled_from([4, 16]))
    max_model_len = draw(st.sampled_from([32, 48, 64]))
    chunked = draw(st.booleans())
    if chunked:
        budget = draw(st.integers(4, 2 * max_model_len))
    else:
        budget = draw(st.integers(max_model_len, 2 * max_model_len))
    per_seq = -(-max_model_len // block_size)
    # From a pool one block short of a full-length request (the longest get rejected) to one that
    # holds a few: small enough that growing requests run it dry (preemption) in many examples.
    num_blocks = draw(st.integers(max(2, per_seq - 1), 3 * per_seq + 4))
    args = EngineArgs(
        num_gpu_blocks_override=num_blocks,
        block_size=block_size,
        max_model_len=max_model_len,
        max_num_seqs=draw(st.integers(1, min(12, budget))),  # vLLM refuses a budget below max_num_seqs
        max_num_batched_tokens=budget,
        enable_prefix_caching=draw(st.booleans()),
        enable_chunked_prefill=chunked,
        allocation=draw(st.sampled_from(["paged", "paged", "contiguous"])),
        scheduling=draw(st.sampled_from(["continuous", "static"])),
    )
    requests = []
    for _ in range(draw(st.integers(3, 16))):
        p = draw(st.integers(0, len(PREFIXES)))
        prefix_len = draw(st.sampled_from([0, 6, 20, 40]))
        head = list(PREFIXES[p][:prefix_len]) if p < len(PREFIXES) else []
        tail = draw(st.lists(st.integers(0, 50), max_size=12))
        prompt = (head + tail)[: max_model_len - 1] or [7]
        room = max_model_len - len(prompt)
        if draw(st.integers(0, 24)) == 0:  # now and then one asks for too much and is rejected
            max_tokens = room + draw(st.integers(1, 8))
        else:
            max_tokens = draw(st.integers(1, room))
        # step times are a few ms: these put arrivals in the same step and several steps apart
        arrival = draw(st.sampled_from([0.0, 0.0, 0.005, 0.02, 0.05]))
        requests.append((prompt, max_tokens, arrival))
    return args, requests


def run_engine_checked(args: EngineArgs, requests, on_step=None, runner_factory=None):
    """Run the engine to completion, checking invariants 1-3 (and the engine's own rules) after
    every step and invariant 4 plus exact completion at the end. Returns the engine.
    """
    if runner_factory is None:
        engine = Engine(MODEL, H100, args)
    else:
        engine = Engine(MODEL, H100, args, runner_factory=runner_factory)
    kv = engine.kv
    outputs: dict[int, int] = {}
    original_on_finish = engine.metrics.on_finish

    def record_finish(req):  # the engine clears token_ids right after this call
        assert req.request_id not in outputs, f"request {req.request_id} finished twice"
        outputs[req.request_id] = req.num_output_tokens
        original_on_finish(req)

    engine.metrics.on_finish = record_finish

    max_tokens = {}
    expect_rejected = set()
    for prompt, mt, arrival in requests:
        rid = engine.add_request(prompt, mt, arrival)
        max_tokens[rid] = mt
        total = len(prompt) + mt
        needed = kv.blocks_for_tokens(total - 1)
        if total > args.max_model_len or needed > kv.num_blocks:
            expect_rejected.add(rid)

    finished_events, rejected_events = [], []
    preempted_events = 0
    # After a step that failed with out-of-memory, a request may hold slots it was scheduled for
    # but never computed; it is "unstable" until its next computed step.
    unstable: set[int] = set()
    budget = engine.resolved.max_num_batched_tokens
    max_steps = 20 * sum(len(p) + mt for p, mt, _ in requests) + 100
    steps = 0
    while True:
        result = engine.step()
        if result is None:
            break
        steps += 1
        assert steps <= max_steps, f"no completion after {max_steps} steps"
        finished_events += [e.request_id for e in result.events if e.kind == EventKind.FINISHED]
        rejected_events += [e.request_id for e in result.events if e.kind == EventKind.REJECTED]
        step_preemptions = sum(e.kind == EventKind.PREEMPTED for e in result.events)
        preempted_events += step_preemptions
        oom = any(e.kind.value == "out_of_memory" for e in result.events)
        assert result.num_preemptions == step_preemptions, (
            f"step {result.step} reports {result.num_preemptions} preemptions "
            f"but preempted {step_preemptions} requests"
        )

        sched = engine.scheduler
        running = sched.running
        if oom:
            unstable |= {r.request_id for r in running}
        else:
            unstable -= set(result.request_ids)
        check_manager(kv, running, stable=False)
        bs = kv.block_size
        for r in running:
            if r.request_id not in unstable:
                # every slot it holds was computed (paged: blocks are taken only as tokens need them)
                assert r.unused_slots == len(r.block_ids) * bs - r.num_computed_tokens
                if kv.kind == "paged":
                    assert len(r.block_ids) == -(-r.num_computed_tokens // bs)
        check_snapshot(engine)
        assert result.num_tokens == sum(result.num_new_tokens) <= budget
        assert len(running) <= args.max_num_seqs
        running_ids = {r.request_id for r in running}
        waiting_ids = {r.request_id for r in sched.waiting}
        assert len(running_ids) == len(running) and not running_ids & waiting_ids
        assert running_ids | waiting_ids == set(engine.requests)
        for r in running:
            assert r.status == RequestStatus.RUNNING
            assert r.num_output_tokens < r.max_tokens
        for r in sched.waiting:
            assert r.status == RequestStatus.WAITING
            assert r.block_ids == [] and r.num_computed_tokens == 0 and r.unused_slots == 0
            assert r.num_output_tokens < r.max_tokens
        if sched.static:
            assert running_ids <= sched.static_members, "a request joined a static batch mid-flight"
        assert preempted_events == sched.num_preemptions
        if not oom:
            assert engine.metrics.preemptions == sched.num_preemptions
        if on_step is not None:
            on_step(engine)

    # Invariant 4 and exact completion.
    assert not engine.has_unfinished_requests()
    assert engine.scheduler.running == [] and not engine.scheduler.waiting and not engine.requests
    check_all_released(kv)
    accepted = set(max_tokens) - expect_rejected
    assert sorted(rejected_events) == sorted(expect_rejected)
    assert sorted(finished_events) == sorted(accepted)
    assert outputs == {rid: max_tokens[rid] for rid in accepted}
    m = engine.metrics
    assert m.rejected == len(expect_rejected)
    assert m.completed + m.rejected == len(requests)
    assert m.output_tokens == sum(max_tokens[rid] for rid in accepted)
    return engine


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(engine_scenarios())
def test_engine_block_invariants_hold_every_step(scenario):
    """Invariants 1-3 between every engine step (paged and contiguous, continuous and static,
    with and without prefix caching and chunked prefill), invariant 4 at the end, and every
    request that fits finishes exactly once with exactly max_tokens outputs; those that do not fit
    are rejected."""
    args, requests = scenario
    engine = run_engine_checked(args, requests)
    m = engine.metrics
    event(f"engine: preempted={m.preemptions > 0} prefix_hits={engine.kv.prefix_hit_tokens > 0} rejected={m.rejected > 0}")


def flaky_runner_factory(fail_calls):
    """A simulated runner whose execute() raises StepOutOfMemory on the given call numbers."""

    def factory(model, hardware, plan, args):
        inner = SimulatedRunner(model, hardware, plan, args)

        class FlakyRunner:
            name = "flaky-simulated"
            calls = 0

            def execute(self, batch):
                call, self.calls = self.calls, self.calls + 1
                if call in fail_calls:
                    raise StepOutOfMemory(f"injected out-of-memory on call {call}")
                return inner.execute(batch)

        return FlakyRunner()

    return factory


def _no_long_runs(calls) -> bool:
    """At most 3 failures in a row: the engine gives up (by design) after more with one request."""
    return not any(all(c + k in calls for k in range(4)) for c in calls)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(engine_scenarios(), st.sets(st.integers(0, 40), max_size=12).filter(_no_long_runs))
def test_engine_block_invariants_survive_out_of_memory_steps(scenario, fail_calls):
    """The out-of-memory recovery path (a step fails, the newest request is preempted, the step is
    retried) keeps invariants 1-3 after every step and 4 at the end, and every request still
    finishes with exactly max_tokens outputs."""
    args, requests = scenario
    engine = run_engine_checked(args, requests, runner_factory=flaky_runner_factory(fail_calls))
    event(f"engine+oom: injected={bool(fail_calls)} preempted={engine.metrics.preemptions > 0}")


def test_out_of_memory_step_reports_only_real_preemptions():
    """An out-of-memory step with a single running request preempts nobody (it just retries), so its
    StepResult must report 0 preemptions, like the PREEMPTED events and the scheduler say."""
    args = EngineArgs(num_gpu_blocks_override=8, block_size=4, max_model_len=32, max_num_seqs=4,
                      max_num_batched_tokens=32, enable_chunked_prefill=False)
    engine = Engine(MODEL, H100, args, runner_factory=flaky_runner_factory({0}))
    engine.add_request([1, 2, 3], 4, 0.0)
    result = engine.step()
    assert any(e.kind.value == "out_of_memory" for e in result.events)
    assert engine.scheduler.num_preemptions == 0
    assert not any(e.kind == EventKind.PREEMPTED for e in result.events)
    assert result.num_preemptions == 0


def test_snapshot_fill_after_out_of_memory_step_counts_only_computed_tokens():
    """The block map's fill after a failed (out-of-memory) step shows what blocks really hold:
    nothing was computed, so the retained blocks hold 0 tokens, not block_size each."""
    args = EngineArgs(num_gpu_blocks_override=8, block_size=4, max_model_len=32, max_num_seqs=4,
                      max_num_batched_tokens=32, enable_chunked_prefill=False)
    engine = Engine(MODEL, H100, args, runner_factory=flaky_runner_factory({0}))
    engine.add_request(list(range(1, 11)), 4, 0.0)
    engine.step()
    (req,) = engine.scheduler.running
    assert req.num_computed_tokens == 0 and len(req.block_ids) == 3
    snap = engine.snapshot()
    assert snap.block_fill[req.block_ids].tolist() == [0, 0, 0]


@pytest.mark.parametrize("scheduling", ["continuous", "static"])
@pytest.mark.parametrize("chunked", [False, True])
@pytest.mark.parametrize("caching", [False, True])
def test_preemption_keeps_blocks_consistent_and_outputs_exact(caching, chunked, scheduling):
    """A pool too small for the batch forces preemptions; blocks stay consistent through them and
    every request still finishes with exactly max_tokens outputs."""
    shared = list(range(500, 512))
    requests = [(shared + [i, i + 1, i + 2, i + 3], 20, 0.0) for i in range(6)]
    requests += [(list(range(900, 908)), 24, 0.001 * i) for i in range(3)]
    args = EngineArgs(
        num_gpu_blocks_override=12, block_size=4, max_model_len=48, max_num_seqs=8,
        max_num_batched_tokens=48 if not chunked else 16, enable_prefix_caching=caching,
        enable_chunked_prefill=chunked, scheduling=scheduling, allocation="paged",
    )
    engine = run_engine_checked(args, requests)
    assert engine.metrics.preemptions > 0
    assert engine.metrics.completed == len(requests)


def test_contiguous_reservations_fragment_but_balance():
    """Contiguous allocation never preempts and keeps reservations disjoint and contiguous while
    requests finish out of order and leave holes (external fragmentation is really reached), and
    the free extents coalesce back into one at the end."""
    # 4-block reservations in a 10-block pool: two fit, with a 2-block hole after them.
    requests = [([1 + i] * (1 + i % 5), 2 + (7 * i) % 11, 0.001 * i) for i in range(10)]
    args = EngineArgs(
        num_gpu_blocks_override=10, block_size=4, max_model_len=16, max_num_seqs=8,
        max_num_batched_tokens=16, allocation="contiguous", enable_chunked_prefill=False,
    )
    fragmented = []

    def on_step(engine):
        kv = engine.kv
        if kv.largest_free_extent < kv.num_free_blocks:
            fragmented.append(engine.step_count)

    engine = run_engine_checked(args, requests, on_step=on_step)
    assert engine.metrics.preemptions == 0
    assert engine.metrics.completed == len(requests)
    assert fragmented, "no step ever saw the free space split into separate extents"
