"""A live engine's snapshots through the pipe as the blocks that changed since the previous one.

A 500,000-block pool is 11.5 MB of block arrays; a decode step of 1,024 running requests changes
~1,100 blocks' entries (each request's last block gains a token, a few blocks change hands).
Copying the whole pool, sending it through the pipe and comparing it again in the window with what
the block map drew cost ~3 ms of every frame. Instead, in the engine's process a SnapshotSender
asks a big paged pool which blocks it changed since the last snapshot (the pool notes them as it
writes them), or compares a smaller or contiguous pool's arrays with their copies as last sent
(~1.5 ms for 500,000 blocks); what changed, with the running requests' partly filled and reserved
blocks (which the pool's arrays do not hold), goes as SnapshotChanges. In the window's process a
SnapshotRebuilder applies them to its own copy of the arrays and hands the views a Snapshot that
says which blocks may differ from the one before, so the block map draws those without comparing
the pool.

The rebuilt snapshots share their block arrays: each frame's changes are written into the arrays
of the snapshot before it. A view that keeps a snapshot past the next frame copies what it keeps
(the block map keeps its own copies already). The first snapshot of an engine, and one where more
than 1/FULL_SHARE of the pool changed, go whole.
"""

from __future__ import annotations

import itertools
import weakref
from dataclasses import dataclass

import numpy as np

from kvscope.engine.snapshot import BLOCK_RESERVED, Snapshot, block_state_and_fill

# More changes than 1/8 of the pool: the whole pool goes. Sorting and gathering a change costs
# several times what copying a block does (a chat workload flat out changes ~45 % of a 27,000-block
# pool between two frames: as changes 3.2 ms a frame, whole 2.5 ms; 1,100 changes of 500,000
# blocks: 1 ms against 2.6 ms).
FULL_SHARE = 8
# From this many blocks the pool notes its changes instead of being compared: comparing costs
# ~3 ns a block a frame (1.5 ms at 500,000), noting ~80 ns a change in the engine's step (a chat
# workload flat out on 27,000 blocks: ~1.5 % of the engine's time, where comparing took 0.1 ms a frame).
TRACK_MIN_BLOCKS = 100_000
BLOCK_FIELDS = ("block_owner", "block_state", "block_ref_cnt", "block_fill", "block_hash")
_versions = itertools.count(1)  # blocks_version of rebuilt snapshots: unique in the window's process


@dataclass
class SnapshotChanges:
    """A Snapshot as it crosses the pipe: its block arrays whole (base None) or, at block_ids, the
    values that replace those of the snapshot numbered base; its other fields as they are."""

    serial: int  # this snapshot's number from its sender
    base: int | None  # the number of the snapshot it changes; None: `blocks` holds whole arrays
    block_ids: np.ndarray | None  # int64, sorted: the blocks that may differ from base's (None when whole)
    blocks: dict  # BLOCK_FIELDS name -> the values at block_ids (or the whole array)
    fields: dict  # every other Snapshot field

    @property
    def requests(self) -> np.ndarray:
        return self.fields["requests"]

    @property
    def time_s(self) -> float:
        return self.fields["time_s"]

    @property
    def step(self) -> int:
        return self.fields["step"]


@dataclass(frozen=True)
class BlockChanges:
    """The blocks of a rebuilt snapshot that may differ from the snapshot of version `since`."""

    since: int
    block_ids: np.ndarray  # int64, sorted


@dataclass(frozen=True)
class RebuiltSnapshot(Snapshot):
    """A Snapshot rebuilt from SnapshotChanges; its arrays are the rebuilder's (see the module
    docstring). Views that know it read block_changes (duck-typed: widgets do not import app/)."""

    blocks_version: int = 0
    block_changes: BlockChanges | None = None


class SnapshotSender:
    """The engine process's side: each snapshot() is SnapshotChanges against the previous one."""

    def __init__(self):
        self._serial = 0
        # the engine the kept arrays are of, weakly: a rebuild drops the old engine (and a real
        # model's GPU memory) before it builds the new one
        self._engine = lambda: None
        self._kept: tuple | None = None  # (owner, ref_cnt, block_hash) as last sent
        # the last snapshot's partly filled blocks, and its reserved ones (sorted)
        self._partial = self._reserved = np.zeros(0, dtype=np.int64)
        self._diff = self._other = None  # comparison buffers, one bool per block

    def restart(self) -> None:
        """The next snapshot goes whole (the window lost track of the arrays)."""
        self._kept = None

    def snapshot(self, engine) -> SnapshotChanges:
        self._serial += 1
        owner, ref_cnt, block_hash = engine.kv.block_arrays()
        kept = self._kept
        if kept is None or engine is not self._engine() or len(kept[0]) != len(owner):
            return self._whole(engine)
        most = len(owner) // FULL_SHARE
        # a paged pool notes its changes once asked to; the contiguous allocator, whose reservations
        # change whole extents, has no note and is compared
        take_noted = getattr(engine.kv, "take_block_changes", None)
        noted = take_noted() if take_noted is not None else None
        if noted is not None:  # the pool noted them: no comparing
            if len(noted) > most:
                return self._whole(engine)
            changed = np.fromiter(noted, np.int64, len(noted))
        else:
            kept_owner, kept_ref, kept_hash = kept
            diff, other = self._diff, self._other
            np.not_equal(owner, kept_owner, out=diff)
            # A pool that churns between frames (a flat-out engine: ~4,000 steps a frame change
            # ~2/3 of its owners) goes whole: seen in the owners, the other two need no comparing
            # (each comparison reads the pool twice, ~0.4 MB here, and pushes the engine's own
            # data out of the core's cache).
            if np.count_nonzero(diff) > most:
                return self._whole(engine)
            np.logical_or(diff, np.not_equal(ref_cnt, kept_ref, out=other), out=diff)
            np.logical_or(diff, np.not_equal(block_hash, kept_hash, out=other), out=diff)
            changed = np.flatnonzero(diff)
            if len(changed) > most:
                return self._whole(engine)
        partial, tokens, reserved = engine.block_marks()
        reserved = np.unique(reserved) if len(reserved) else reserved
        # Besides the pool's changes: the partly filled blocks, then and now (a block partly filled
        # last time and not now is back to what the pool's arrays say), and the blocks that became
        # or stopped being reserved (a contiguous pool holds many reserved blocks for long).
        came_or_went = (np.setxor1d(reserved, self._reserved, assume_unique=True)
                        if len(reserved) or len(self._reserved) else reserved)
        ids = np.unique(np.concatenate((changed, partial, self._partial, came_or_went)))
        if len(ids) > most:
            return self._whole(engine)
        if noted is None:
            kept_owner[changed], kept_ref[changed] = owner[changed], ref_cnt[changed]
            kept_hash[changed] = block_hash[changed]
        self._partial, self._reserved = partial, reserved
        ref_at, hash_at = ref_cnt[ids], block_hash[ids]
        state, fill = block_state_and_fill(ref_at, hash_at, engine.kv.block_size)
        fill[np.searchsorted(ids, partial)] = tokens
        if len(reserved):  # a paged pool has none but after a step the device could not run
            at_reserved = np.isin(ids, reserved, assume_unique=True)
            state[at_reserved], fill[at_reserved] = BLOCK_RESERVED, 0
        blocks = dict(zip(BLOCK_FIELDS, (owner[ids], state, ref_at, fill, hash_at)))
        return SnapshotChanges(self._serial, self._serial - 1, ids, blocks, engine.snapshot_fields())

    def _whole(self, engine) -> SnapshotChanges:
        marks = engine.block_marks()
        snap = engine.snapshot(marks)
        if snap.num_blocks >= TRACK_MIN_BLOCKS and hasattr(engine.kv, "track_block_changes"):
            engine.kv.track_block_changes()  # the changes from this snapshot on
        # The snapshot's own arrays (copies of the pool's) are kept to compare the next one with:
        # the next snapshot is taken when the window asks for it, which it does only once it has
        # read the whole of this frame, so the sender thread is done with them by the time the
        # changes path writes into them. (A copy of each cost a flat-out engine ~0.5 MB of memory
        # traffic per frame at 27,000 blocks.)
        self._kept = (snap.block_owner, snap.block_ref_cnt, snap.block_hash)
        self._engine = weakref.ref(engine)
        self._partial, self._reserved = marks[0], np.unique(marks[2])
        n = snap.num_blocks
        if self._diff is None or len(self._diff) != n:
            self._diff, self._other = np.empty(n, dtype=bool), np.empty(n, dtype=bool)
        blocks = {name: getattr(snap, name) for name in BLOCK_FIELDS}
        fields = {name: getattr(snap, name) for name in Snapshot.__dataclass_fields__ if name not in BLOCK_FIELDS}
        return SnapshotChanges(self._serial, None, None, blocks, fields)


class SnapshotRebuilder:
    """The window's side: turns each frame's SnapshotChanges back into a Snapshot."""

    def __init__(self):
        self._serial: int | None = None  # the sender's number of the last snapshot rebuilt
        self._arrays: dict | None = None
        self._version = 0

    def restart(self) -> None:
        """A new session process: nothing of the old one's numbering holds."""
        self._serial, self._arrays = None, None

    def rebuild(self, frame) -> bool:
        """Replaces the frame's SnapshotChanges by the Snapshot (any other snapshot stays as it
        is). False: the changes were against a snapshot this rebuilder does not have (the frame
        then has no snapshot, and the sender must send the next one whole)."""
        sent = getattr(frame, "snapshot", None)
        if not isinstance(sent, SnapshotChanges):
            return True
        changes = None
        if sent.base is None:
            self._arrays = {name: np.array(values) for name, values in sent.blocks.items()}  # writable copies
        elif sent.base != self._serial or self._arrays is None:
            self._serial, self._arrays, frame.snapshot = None, None, None
            return False
        else:
            ids = sent.block_ids
            for name, values in sent.blocks.items():
                self._arrays[name][ids] = values
            changes = BlockChanges(self._version, ids)
        self._serial, self._version = sent.serial, next(_versions)
        frame.snapshot = RebuiltSnapshot(**sent.fields, **self._arrays, blocks_version=self._version,
                                         block_changes=changes)
        return True
