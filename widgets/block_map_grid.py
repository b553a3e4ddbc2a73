"""The pool as a grid of cells, and the three ``uint8`` images the block map draws over it.

Layout: block ``b`` sits at ``(row, col) = divmod(b, width)``, rows top to bottom. The view picks
the width from its panel (overview_layout): the grid of the biggest square cells that fill it
(fitted_width), or a big pool's overview; without a panel, ``width = clamp(round(sqrt(2 *
num_blocks)), 8, 1024)``, a grid about twice as wide as it is tall. The last row is padded with
the 'no block' index.

From a snapshot, :class:`BlockGrid` computes the index image (block_map_colors.py says what each
index means) in a handful of vectorised passes into buffers allocated once per pool size, so a
500,000-block pool costs no Python loop over blocks; it also fades the flash overlay (blocks that
changed) and builds the selection overlay. Plain numpy: the view only hands the images to Qt.
"""

from __future__ import annotations

import math

import numpy as np

from kvscope.engine.snapshot import BLOCK_USED, Snapshot
from kvscope.widgets.block_map_colors import (
    FLASH_EVENTS,
    FLASH_LEVELS,
    INDEX_TABLE,
    KIND_UNKNOWN,
    LEGEND_KINDS,
    LUT_NO_BLOCK,
    NUM_KINDS,
)
from kvscope.widgets.palette import NUM_REQUEST_COLORS, request_color_index

MIN_GRID_WIDTH = 8
MAX_GRID_WIDTH = 1024
_GRID_ASPECT = 2.0  # columns / rows the grid aims for
_MAX_COLOR_TABLE = 1 << 24  # request ids below this get their colour by table lookup

FLASH_SECONDS = 0.5  # a changed cell fades out linearly over this long
# A snapshot differing from the last one drawn in at most 1/REDRAW_ALL_SHARE of the blocks has
# only those blocks drawn again: a decode step of 1,024 requests changes ~60 of 500,000 blocks,
# and the full set of passes over the pool was ~1.5 ms of every frame, the overview's majority
# over all of it another ~2 ms.
REDRAW_ALL_SHARE = 16
_FLASH_MIN_STEP_S = 1.0 / 120.0  # each update ages flashes by at least this (bounded frame count)


def grid_width(num_blocks: int) -> int:
    """Cells per row: clamp(round(sqrt(2 * num_blocks)), 8, 1024), a grid about 2:1 wide."""
    return int(min(MAX_GRID_WIDTH, max(MIN_GRID_WIDTH, round(math.sqrt(_GRID_ASPECT * max(num_blocks, 0))))))


def grid_shape(num_blocks: int, width: int | None = None) -> tuple[int, int]:
    """(rows, width) of the grid that holds num_blocks cells (at least one row); width: grid_width's."""
    width = width or grid_width(num_blocks)
    return max(1, -(-num_blocks // width)), width


def fitted_width(num_blocks: int, width_px: float, height_px: float) -> tuple[int, float]:
    """(grid width, cell side in px) of the biggest square cells that lay num_blocks out in
    width_px x height_px, one block each: a small pool fills the panel it has, at a glance, instead
    of a 2:1 grid stretched into a short band."""
    if num_blocks <= 0:
        return MIN_GRID_WIDTH, 0.0
    columns = np.arange(1, min(num_blocks, MAX_GRID_WIDTH) + 1)
    side = np.minimum(width_px / columns, height_px / -(-num_blocks // columns))
    best = int(np.argmax(side))
    return int(columns[best]), float(side[best])


def overview_layout(num_blocks: int, width_px: int, height_px: int, min_cell_px: int) -> tuple[int, int]:
    """(grid width, blocks per drawn cell) for a pool drawn in width_px x height_px.

    While one cell per block is at least min_cell_px square, the grid whose square cells fill the
    area best (fitted_width) and 1. A bigger pool (29,043 blocks in a 300-pixel-high panel: a band
    of 1-pixel noise) keeps rows min_cell_px high and puts k neighbouring blocks of a row into one
    drawn cell, k so that the cells are min_cell_px wide too; the grid width is a multiple of k,
    so each drawn cell is a contiguous range of blocks, and zoomed in far enough each block is its
    own cell again."""
    columns, rows = max(1, width_px // min_cell_px), max(1, height_px // min_cell_px)
    if num_blocks <= columns * rows:
        return fitted_width(num_blocks, width_px, height_px)[0], 1
    width = -(-num_blocks // rows)  # rows min_cell_px high fill the height
    k = -(-width // columns)
    return k * -(-width // k), k


class BlockGrid:
    """The images of one pool size: index (what each block is), flash (what changed), dim (which
    blocks are not the selected request's), each [rows, width] uint8, row-major."""

    def __init__(self, num_blocks: int = 0):
        self._color_table = (request_color_index(np.arange(4096)) * NUM_KINDS).astype(np.int32)
        self._last_flash_t: float | None = None
        self.resize(num_blocks)

    def resize(self, num_blocks: int, width: int | None = None) -> None:
        """A new pool size (or grid width): every image and buffer anew (flashes do not carry over)."""
        n = num_blocks
        self.num_blocks = n
        self.rows, self.width = grid_shape(n, width) if n else (0, 0)
        shape = (self.rows, self.width)
        self.index_image = np.full(shape, LUT_NO_BLOCK, dtype=np.uint8)
        self._index_flat = self.index_image.reshape(-1)
        self.flash_image = np.zeros(shape, dtype=np.uint8)
        self._flash_flat = self.flash_image.reshape(-1)
        self.dim_image = np.zeros(shape, dtype=np.uint8)
        self._dim_flat = self.dim_image.reshape(-1)
        self._kind = np.zeros(n, dtype=np.uint8)
        self.shared_mask = np.zeros(n, dtype=bool)  # used blocks with ref count > 1
        self._tmp_mask = np.zeros(n, dtype=bool)
        self._color = np.zeros(n, dtype=np.int32)
        self._flash_level = np.zeros(n, dtype=np.float32)
        self._flash_code = np.zeros(n, dtype=np.uint8)
        self.flashing = np.zeros(0, dtype=np.int64)  # ids of the blocks still flashing
        self._counts = np.zeros(NUM_KINDS, dtype=np.int64)
        self._diff_mask = np.zeros(n, dtype=bool)
        # (owner, state, ref count) as last drawn, None until a whole snapshot is: what the next
        # snapshot is compared with (copies: a caller may reuse its arrays)
        self._drawn: tuple | None = None
        self._drawn_version = 0  # the blocks_version of the snapshot last drawn (0: none said)
        self._cells = np.zeros((0, 0), dtype=np.uint8)  # the overview as last computed ...
        self._cells_k = 0  # ... for this many blocks per cell (0: none valid)
        self._redrawn: list = []  # ids of the blocks drawn again since (arrays)
        self._redrawn_count = 0
        self._flash_cells = np.zeros((0, 0), dtype=np.uint8)  # the flash overlay at the overview's cells ...
        self._flash_cells_k = 0  # ... of this many blocks (0: none valid)
        self._flash_touched: list = []  # ids of the blocks whose flash changed since (arrays)
        self._flash_touched_count = 0

    # --- geometry -----------------------------------------------------------------------------------
    def cell_at(self, block_id: int) -> tuple[int, int]:
        """(row, col) of a block's cell."""
        row, col = divmod(int(block_id), self.width)
        return row, col

    def block_at(self, row: int, col: int) -> int:
        """Block id at a cell, or -1 for padding / outside the grid."""
        if not (0 <= col < self.width and 0 <= row < self.rows):
            return -1
        block = row * self.width + col
        return block if block < self.num_blocks else -1

    # --- the index image ----------------------------------------------------------------------------
    def draw(self, snap: Snapshot) -> None:
        """Index image from the snapshot: only the blocks that differ from the last snapshot drawn,
        or (the first time, or after many changes) a handful of vectorised passes over the pool
        into preallocated buffers."""
        changed = self._changed_blocks(snap)
        if changed is None:
            self._draw_all(snap)
        else:
            self._draw_blocks(snap, changed)
        self._drawn_version = getattr(snap, "blocks_version", 0)

    def _changed_blocks(self, snap: Snapshot) -> np.ndarray | None:
        """Ids of the blocks whose owner, state or ref count differ from the last drawn; None
        when the whole pool is to be drawn (nothing drawn yet, or too many changes)."""
        if self._drawn is None:
            return None
        owner, state, ref_cnt = self._drawn
        # A live engine's snapshot says which blocks may differ from the one before it
        # (app/host/session_blocks.py): when that is the one drawn, only those are compared.
        hint = getattr(snap, "block_changes", None)
        if hint is not None and self._drawn_version and hint.since == self._drawn_version:
            ids = hint.block_ids
            if len(ids) > self.num_blocks // REDRAW_ALL_SHARE:
                return None
            differs = np.not_equal(snap.block_owner[ids], owner[ids])
            differs |= np.not_equal(snap.block_state[ids], state[ids])
            differs |= np.not_equal(snap.block_ref_cnt[ids], ref_cnt[ids])
            return ids[differs]
        diff, other = self._diff_mask, self._tmp_mask
        np.not_equal(snap.block_owner, owner, out=diff)
        np.logical_or(diff, np.not_equal(snap.block_state, state, out=other), out=diff)
        np.logical_or(diff, np.not_equal(snap.block_ref_cnt, ref_cnt, out=other), out=diff)
        ids = np.flatnonzero(diff)
        return ids if len(ids) <= self.num_blocks // REDRAW_ALL_SHARE else None

    def _draw_blocks(self, snap: Snapshot, ids: np.ndarray) -> None:
        """Draws only the blocks ``ids``, keeping the counts and the overview up to date."""
        if not len(ids):
            return
        owner, state, ref_cnt = snap.block_owner[ids], snap.block_state[ids], snap.block_ref_cnt[ids]
        shared = (ref_cnt > 1) & (state == BLOCK_USED)
        kind = np.minimum(state, KIND_UNKNOWN).astype(np.uint8) + 2 * shared.view(np.uint8)
        self._counts -= np.bincount(self._kind[ids], minlength=NUM_KINDS)[:NUM_KINDS]
        self._counts += np.bincount(kind, minlength=NUM_KINDS)[:NUM_KINDS]
        self._kind[ids] = kind
        self.shared_mask[ids] = shared
        self._index_flat[ids] = np.take(INDEX_TABLE, self._color_rows(owner) + kind, mode="clip")
        drawn_owner, drawn_state, drawn_ref = self._drawn
        drawn_owner[ids], drawn_state[ids], drawn_ref[ids] = owner, state, ref_cnt
        self._redrawn.append(ids)
        self._redrawn_count += len(ids)
        if self._redrawn_count > self.num_blocks // REDRAW_ALL_SHARE:  # cheaper to redo the overview
            self._forget_cells()

    def _color_rows(self, owner: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """colour * NUM_KINDS per block: request_color_index(owner) = max(owner, 0) mod 48, by table
        lookup (mode 'clip' sends ids < 0 to entry 0, like the max); a modulo pass is 4x slower."""
        if out is None:
            out = np.empty(len(owner), dtype=np.int32)
        top = int(owner.max()) if len(owner) else 0
        if top < _MAX_COLOR_TABLE:
            if top >= len(self._color_table):
                size = max(top + 1, 2 * len(self._color_table))
                self._color_table = (request_color_index(np.arange(size)) * NUM_KINDS).astype(np.int32)
            np.take(self._color_table, owner, out=out, mode="clip")
        else:
            wide = np.remainder(np.maximum(owner, 0), NUM_REQUEST_COLORS)
            np.multiply(wide, NUM_KINDS, out=out, casting="unsafe")
        return out

    def _forget_cells(self) -> None:
        self._cells_k = 0
        self._redrawn = []
        self._redrawn_count = 0

    def _draw_all(self, snap: Snapshot) -> None:
        n = self.num_blocks
        kind, shared, tmp, col = self._kind, self.shared_mask, self._tmp_mask, self._color
        # kind: the state (5 for anything unknown), 4 for shared = used (2) with ref count > 1
        np.minimum(snap.block_state, KIND_UNKNOWN, out=kind)
        np.greater(snap.block_ref_cnt, 1, out=shared)
        np.equal(snap.block_state, BLOCK_USED, out=tmp)
        np.logical_and(shared, tmp, out=shared)
        np.add(kind, shared.view(np.uint8), out=kind)
        np.add(kind, shared.view(np.uint8), out=kind)
        self._color_rows(snap.block_owner, out=col)
        # LUT index = table[colour * 8 + kind]
        np.add(col, kind, out=col)
        np.take(INDEX_TABLE, col, out=self._index_flat[:n], mode="clip")
        for k in range(KIND_UNKNOWN + 1):
            np.equal(kind, k, out=tmp)
            self._counts[k] = np.count_nonzero(tmp)
        self._drawn = (snap.block_owner.copy(), snap.block_state.copy(), snap.block_ref_cnt.copy())
        self._forget_cells()

    def index_of(self, block_ids: np.ndarray) -> np.ndarray:
        """The index-image entries of some blocks."""
        return self._index_flat[block_ids]

    def block_counts(self) -> dict[str, int]:
        """Blocks of the last drawn snapshot by the legend's kinds (used, shared, cached, reserved, free)."""
        return {key: int(self._counts[kind]) for key, kind in LEGEND_KINDS.items()}

    # --- overlays -----------------------------------------------------------------------------------
    def advance_flashes(self, now: float, changed: dict | None, min_interval_s: float = 0.0) -> bool:
        """Fade the flashes by the time since the last call, then flash the blocks in ``changed``
        (block ids by change kind, FLASH_EVENTS). Returns whether the flash image changed.
        min_interval_s: while blocks flash, a call sooner than this after the last one does
        nothing (a timer that keeps the fade going when frames stop defers to arriving frames)."""
        n = self.num_blocks
        ids = self.flashing
        level = self._flash_level
        dead = np.zeros(0, dtype=np.int64)
        if len(ids):
            last = self._last_flash_t if self._last_flash_t is not None else now
            dt = now - last
            if dt < min_interval_s:
                return False
            dt = max(dt, _FLASH_MIN_STEP_S)
            level[ids] -= np.float32(dt / FLASH_SECONDS)
            alive = level[ids] > 0.0
            dead = ids[~alive]
            ids = ids[alive]
            level[dead] = 0.0
        self._last_flash_t = now
        new = []
        if changed and n > 0:
            for code, name in enumerate(FLASH_EVENTS):
                blocks = changed.get(name)
                if blocks is None:
                    continue
                blocks = np.asarray(blocks, dtype=np.int64).reshape(-1)
                blocks = blocks[(blocks >= 0) & (blocks < n)]
                if len(blocks):
                    new.append(blocks[level[blocks] <= 0.0])  # not flashing yet: they join ids
                    level[blocks] = 1.0
                    self._flash_code[blocks] = code
        if new:
            # (a union with the thousands flashing sorted them all again: ~0.3 ms a frame)
            ids = np.concatenate((ids, np.unique(np.concatenate(new))))
        self.flashing = ids
        if not len(ids) and not len(dead):
            return False
        self._flash_flat[dead] = 0
        if len(ids):
            lv = np.ceil(level[ids] * (FLASH_LEVELS - 1)).astype(np.uint8)
            self._flash_flat[ids] = self._flash_code[ids] * FLASH_LEVELS + lv
        self._flash_touched += [dead, ids]
        self._flash_touched_count += len(dead) + len(ids)
        if self._flash_touched_count > self.num_blocks // REDRAW_ALL_SHARE:  # (zoomed in: no overview asked)
            self._forget_flash_cells()
        return True

    def dim_all_but(self, snap: Snapshot, request_id: int) -> None:
        """Dim every block ``request_id`` does not own."""
        np.not_equal(snap.block_owner, request_id, out=self._tmp_mask)
        self._dim_flat[:self.num_blocks] = self._tmp_mask

    def undimmed_count(self) -> int:
        """Blocks the selection overlay leaves clear: the selected request's."""
        return int(np.count_nonzero(self._dim_flat[:self.num_blocks] == 0))

    # --- the overview of a big pool --------------------------------------------------------------------
    def aggregate(self, k: int) -> np.ndarray:
        """[rows, width / k] uint8: each cell the index most of its k blocks have (their majority
        state and, for a request's blocks, the request's colour); a tie goes to the lower index
        (free blocks first)."""
        if k == 1:
            return self.index_image.copy()
        groups = self.index_image.reshape(-1, k)  # one row per drawn cell (the width is a multiple of k)
        if self._cells_k != k:
            self._cells = majority(groups).reshape(self.rows, self.width // k)
        elif self._redrawn:  # only the cells holding blocks drawn again since
            cells = self._cells_of(np.concatenate(self._redrawn), k)
            self._cells.reshape(-1)[cells] = majority(groups[cells])
        self._cells_k = k
        self._redrawn = []
        self._redrawn_count = 0
        return self._cells.copy()

    def flash_cells(self, k: int) -> np.ndarray:
        """The flash overlay at the overview's cells of k blocks (reduce_overlay), kept between
        calls: only the cells of blocks whose flash changed are reduced again (a max over the
        whole pool was ~0.3 ms of every frame)."""
        groups = self.flash_image.reshape(-1, k)
        if self._flash_cells_k != k:
            self._flash_cells = groups.max(axis=1).reshape(self.rows, self.width // k)
        elif self._flash_touched:
            cells = self._cells_of(np.concatenate(self._flash_touched), k)
            self._flash_cells.reshape(-1)[cells] = groups[cells].max(axis=1)
        self._flash_cells_k = k
        self._flash_touched = []
        self._flash_touched_count = 0
        return self._flash_cells.copy()

    def _forget_flash_cells(self) -> None:
        self._flash_cells_k = 0
        self._flash_touched = []
        self._flash_touched_count = 0

    def _cells_of(self, ids: np.ndarray, k: int) -> np.ndarray:
        """The overview cells (flat indices) holding these blocks, each once."""
        return np.unique((ids // self.width) * (self.width // k) + (ids % self.width) // k)

    def reduce_overlay(self, image: np.ndarray, k: int, brightest: bool) -> np.ndarray:
        """An overlay ([rows, width]) at the overview's cells of k blocks: the strongest flash of
        each cell (brightest), or a cell dimmed only if all its blocks are (a selected request's
        blocks stay visible). Drawn at full resolution, a 500,000-block overlay was ~24,000
        columns scaled down on every paint, and showed only the columns the scaling happened to hit."""
        groups = image.reshape(self.rows, self.width // k, k)
        return groups.max(axis=2) if brightest else groups.min(axis=2)

    def cell_range(self, block_id: int, k: int) -> tuple[int, int]:
        """[first, last] block of the drawn cell holding block_id when cells hold k blocks."""
        first = block_id - (block_id % self.width) % k
        return first, min(first + k, self.num_blocks) - 1


def majority(groups: np.ndarray) -> np.ndarray:
    """Per row of ``groups`` ([cells, k] uint8), the value most of its k entries have; a tie goes
    to the lower value. A row of one value (most cells of a big pool: all free, or one request's
    run of blocks) is taken as it is; the others are counted over the values present only."""
    first = groups[:, 0]
    out = first.copy()
    mixed = np.flatnonzero(~(groups == first[:, None]).all(axis=1))
    if not len(mixed):
        return out
    rows = groups[mixed]
    present = np.flatnonzero(np.bincount(rows.reshape(-1), minlength=256))
    code = np.zeros(256, dtype=np.intp)
    code[present] = np.arange(len(present))
    keys = code[rows] + (np.arange(len(rows), dtype=np.intp) * len(present))[:, None]
    counts = np.bincount(keys.reshape(-1), minlength=len(rows) * len(present)).reshape(len(rows), len(present))
    out[mixed] = present[counts.argmax(axis=1)]  # argmax: the first of equal counts, the lower value
    return out
