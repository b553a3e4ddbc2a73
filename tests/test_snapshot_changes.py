"""A live engine's snapshots cross the pipe as the blocks that changed (app/host/session_blocks.py):
rebuilt in the window they equal the engine's own snapshots, step after step, for paged,
contiguous (reserved tails) and layer-group pools; the block map draws the rebuilt ones exactly as
whole ones; and a window that lost track asks for a whole snapshot and gets one."""

import gc
import weakref

import numpy as np
import pytest

from kvscope.app.host import session_blocks
from kvscope.app.host.process_host import SessionHost
from kvscope.app.host.protocol import FrameDelta, decode_frame, encode_frame
from kvscope.app.host.session import EngineSession, RunConfig
from kvscope.app.host.session_blocks import (
    BLOCK_FIELDS,
    RebuiltSnapshot,
    SnapshotChanges,
    SnapshotRebuilder,
    SnapshotSender,
)
from kvscope.app.lab.presets import load_hardware, load_model, load_workload
from kvscope.app.lab.workload import generate_requests
from kvscope.engine import Engine, EngineArgs
from kvscope.engine.events import EventKind
from kvscope.engine.snapshot import BLOCK_RESERVED
from kvscope.widgets.block_map_grid import BlockGrid

from test_engine_process import endless_config, next_frame

SNAPSHOT_FIELDS = ("time_s", "step", "block_size", "kv_usage", "num_running", "num_waiting", "group_names")


def busy_engine(model: str = "llama-3-8b", **args) -> Engine:
    """A pool small enough to fill: blocks are allocated, freed, evicted and shared all the time."""
    engine = Engine(load_model(model), load_hardware("h100-80gb"), EngineArgs(**args))
    workload = load_workload("chat").with_overrides(num_requests=400)
    engine.add_workload(generate_requests(workload, engine.model.vocab_size, seed=3))
    return engine


def through_the_pipe(sent: SnapshotChanges) -> SnapshotChanges:
    """What the window reads: the frame encoded and decoded (big arrays arrive read-only)."""
    messages = [bytes(m) for m in encode_frame(FrameDelta(snapshot=sent))]
    rest = iter(messages[1:])
    return decode_frame(messages[0], lambda: next(rest)).snapshot


def assert_same_snapshot(rebuilt, expected) -> None:
    for name in BLOCK_FIELDS:
        assert np.array_equal(getattr(rebuilt, name), getattr(expected, name)), name
        assert getattr(rebuilt, name).dtype == getattr(expected, name).dtype, name
    assert rebuilt.requests.tobytes() == expected.requests.tobytes()
    for name in SNAPSHOT_FIELDS:
        assert getattr(rebuilt, name) == getattr(expected, name), name
    if expected.block_group is None:
        assert rebuilt.block_group is None
    else:
        assert np.array_equal(rebuilt.block_group, expected.block_group)


@pytest.mark.parametrize("noted", [False, True], ids=["compared", "noted"])
@pytest.mark.parametrize("model, args", [("llama-3-8b", {}), ("llama-3-8b", {"allocation": "contiguous"}),
                                         ("gemma-3-27b", {})])
def test_rebuilt_snapshots_equal_the_engines_step_after_step(model, args, noted, monkeypatch):
    """Both ways of finding the changed blocks: comparing the pool's arrays (pools this small) and
    the pool's own note (pools of TRACK_MIN_BLOCKS and more; the contiguous allocator keeps none)."""
    monkeypatch.setattr(session_blocks, "TRACK_MIN_BLOCKS", 0 if noted else session_blocks.TRACK_MIN_BLOCKS)
    engine = busy_engine(model, **args)
    sender, rebuilder = SnapshotSender(), SnapshotRebuilder()
    kinds, reserved_seen = [], 0
    for step in range(1, 1500):
        engine.step()
        if step % 7:  # several steps a frame, as a running engine between frames
            continue
        frame = FrameDelta(snapshot=through_the_pipe(sender.snapshot(engine)))
        kinds.append(frame.snapshot.base is not None)
        assert rebuilder.rebuild(frame)
        expected = engine.snapshot()
        assert isinstance(frame.snapshot, RebuiltSnapshot)
        assert_same_snapshot(frame.snapshot, expected)
        reserved_seen += expected.count(BLOCK_RESERVED)
    assert not kinds[0] and sum(kinds) > 0.5 * len(kinds)  # the first whole, most others changes
    if args.get("allocation") == "contiguous":
        assert reserved_seen > 0  # the reserved tails were there to be sent


def test_changes_say_which_blocks_differ_from_the_snapshot_before():
    engine = busy_engine()
    sender, rebuilder = SnapshotSender(), SnapshotRebuilder()
    previous = None
    for step in range(300):
        engine.step()
        frame = FrameDelta(snapshot=sender.snapshot(engine))
        rebuilder.rebuild(frame)
        snap = frame.snapshot
        if previous is not None and snap.block_changes is not None:
            assert snap.block_changes.since == previous[0]
            differ = np.zeros(snap.num_blocks, dtype=bool)
            for name in BLOCK_FIELDS:
                differ |= getattr(snap, name) != previous[1][name]
            assert np.isin(np.flatnonzero(differ), snap.block_changes.block_ids).all()
        previous = (snap.blocks_version, {name: getattr(snap, name).copy() for name in BLOCK_FIELDS})


def test_a_new_engine_or_too_many_changes_go_whole():
    sender = SnapshotSender()
    engine = busy_engine()
    engine.step()
    assert sender.snapshot(engine).base is None
    engine.step()
    assert sender.snapshot(engine).base is not None
    other = busy_engine(kv_cache_memory_bytes=1000 * 16 * 131072)  # 1,000 blocks of llama-3-8b
    other.step()
    assert sender.snapshot(other).base is None  # another engine: nothing of the last one holds
    for _ in range(400):  # requests come and go: the small pool changes over and over
        other.step()
    assert sender.snapshot(other).base is None


def test_the_sender_does_not_keep_a_rebuilt_engine_alive():
    """A rebuild drops the old engine (a real model's GPU memory) before building the new one."""
    sender, engine = SnapshotSender(), busy_engine()
    engine.step()
    sender.snapshot(engine)
    gone = weakref.ref(engine)
    del engine
    gc.collect()
    assert gone() is None


def test_changes_against_a_snapshot_the_window_lacks_are_refused():
    engine = busy_engine()
    sender, rebuilder = SnapshotSender(), SnapshotRebuilder()
    engine.step()
    sender.snapshot(engine)  # the whole one, never rebuilt
    engine.step()
    frame = FrameDelta(snapshot=sender.snapshot(engine))
    assert not rebuilder.rebuild(frame) and frame.snapshot is None
    sender.restart()
    frame = FrameDelta(snapshot=sender.snapshot(engine))
    assert rebuilder.rebuild(frame)
    assert_same_snapshot(frame.snapshot, engine.snapshot())


def test_the_block_map_draws_rebuilt_snapshots_as_whole_ones():
    engine = busy_engine()
    sender, rebuilder = SnapshotSender(), SnapshotRebuilder()
    hinted, whole, told = None, None, 0
    for step in range(1, 900):
        engine.step()
        if step % 5:
            continue
        frame = FrameDelta(snapshot=sender.snapshot(engine))
        rebuilder.rebuild(frame)
        if hinted is None:
            hinted, whole = BlockGrid(frame.snapshot.num_blocks), BlockGrid(frame.snapshot.num_blocks)
        changes = frame.snapshot.block_changes
        told += changes is not None and changes.since == hinted._drawn_version  # drawn from the changes alone
        hinted.draw(frame.snapshot)
        whole.draw(engine.snapshot())  # plain snapshots: compared with the last drawn
        assert np.array_equal(hinted.index_image, whole.index_image)
        assert hinted.block_counts() == whole.block_counts()
        assert np.array_equal(hinted.shared_mask, whole.shared_mask)
    assert told > 150  # of 179 frames


def test_a_window_that_lost_track_gets_a_whole_snapshot():
    process = SessionHost(EngineSession)
    process.start()
    try:
        process.apply(endless_config(), play=False)
        first = next_frame(process, lambda f: f.snapshot is not None)
        assert first.snapshot.block_changes is None  # a new engine's first snapshot goes whole
        process.step_once()
        frame = next_frame(process, lambda f: f.snapshot is not None)
        assert frame.snapshot.block_changes is not None and frame.snapshot.step == 1
        rebuilt = []
        rebuild = process._snapshots.rebuild
        process._snapshots.rebuild = lambda f: rebuilt.append(rebuild(f)) or rebuilt[-1]
        process._snapshots.restart()  # as if a frame had been lost: the next changes cannot be applied
        process.step_once()
        # that step's changes are refused (the frame comes without a snapshot); the next frame
        # request asks for a whole snapshot, which comes with no other step taken
        frame = next_frame(process, lambda f: f.snapshot is not None)
        assert False in rebuilt
        assert frame.snapshot.block_changes is None and frame.snapshot.step == 2
        process.step_once()
        frame = next_frame(process, lambda f: f.snapshot is not None)
        assert frame.snapshot.block_changes is not None and frame.snapshot.step == 3
    finally:
        process.stop()


def test_sessions_driven_directly_still_give_whole_snapshots():
    session = EngineSession()
    session.handle("apply", (RunConfig("simulated", load_model("llama-3-8b"), load_hardware("h100-80gb"), EngineArgs(),
                                       load_workload("chat").with_overrides(num_requests=5)), False))
    session.handle("step", None)
    frame = session.take_frame()
    assert type(frame.snapshot).__name__ == "Snapshot"


def test_a_paged_pool_notes_every_block_it_changes_preemptions_and_evictions_included():
    """A big pool's sender reads the pool's own note of changed blocks instead of comparing its
    arrays: the note must hold every block whose owner, ref count or hash changed, through prefix hits,
    evictions and preemptions (a pool of 300 blocks under the shared-system-prompt workload has all
    three)."""
    engine = Engine(load_model("llama-3-8b"), load_hardware("h100-80gb"),
                    EngineArgs(kv_cache_memory_bytes=300 * 16 * 131072))
    workload = load_workload("shared-system-prompt").with_overrides(num_requests=200)
    engine.add_workload(generate_requests(workload, engine.model.vocab_size, seed=3))
    engine.step()
    assert engine.kv.take_block_changes() is None  # noting only once asked to
    engine.kv.track_block_changes()
    kept = [array.copy() for array in engine.kv.block_arrays()]
    compared, seen = 0, set()
    for _ in range(600):
        seen.update(event.kind for event in engine.step().events)
        noted = engine.kv.take_block_changes()
        assert noted is not None
        now = engine.kv.block_arrays()
        differ = np.flatnonzero((now[0] != kept[0]) | (now[1] != kept[1]) | (now[2] != kept[2]))
        assert set(differ.tolist()) <= noted
        compared += len(differ)
        kept = [array.copy() for array in now]
    assert compared > 1000
    assert {EventKind.PREFIX_HIT, EventKind.EVICTED, EventKind.PREEMPTED} <= seen


def test_only_a_big_pool_is_asked_to_note_its_changes():
    """Noting costs the engine's step a little on every change; comparing costs the frame ~3 ns a
    block: a small pool is compared, a big one notes."""
    small, big = busy_engine(), busy_engine(kv_cache_memory_bytes=session_blocks.TRACK_MIN_BLOCKS * 16 * 131072)
    for engine in (small, big):
        engine.step()
        SnapshotSender().snapshot(engine)
        engine.step()
    assert small.kv.num_blocks < session_blocks.TRACK_MIN_BLOCKS and small.kv.take_block_changes() is None
    assert big.kv.num_blocks == session_blocks.TRACK_MIN_BLOCKS and big.kv.take_block_changes() is not None
