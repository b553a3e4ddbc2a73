"""The pool as a grid of cells, and the three ``uint8`` images the block map draws over it.

Layout: block ``b`` sits at ``(row, col) = divmod(b, width)``, rows top to bottom, with
``width = clamp(round(sqrt(2 * num_blocks)), 8, 1024)``: the grid is about twice as wide as it is
tall, so in a landscape panel (about 2:1) the cells come out roughly square and the map fills the
panel. The last row is padded with the 'no block' index.

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
_FLASH_MIN_STEP_S = 1.0 / 120.0  # each update ages flashes by at least this (bounded frame count)


def grid_width(num_blocks: int) -> int:
    """Cells per row: clamp(round(sqrt(2 * num_blocks)), 8, 1024), a grid about 2:1 wide."""
    return int(min(MAX_GRID_WIDTH, max(MIN_GRID_WIDTH, round(math.sqrt(_GRID_ASPECT * max(num_blocks, 0))))))


def grid_shape(num_blocks: int, width: int | None = None) -> tuple[int, int]:
    """(rows, width) of the grid that holds num_blocks cells (at least one row); width: grid_width's."""
    width = width or grid_width(num_blocks)
    return max(1, -(-num_blocks // width)), width


def overview_layout(num_blocks: int, width_px: int, height_px: int, min_cell_px: int) -> tuple[int, int]:
    """(grid width, blocks per drawn cell) for a pool drawn in width_px x height_px.

    While one cell per block is at least min_cell_px square, the usual grid (grid_width) and 1.
    A bigger pool (29,043 blocks in a 300-pixel-high panel: a band of 1-pixel noise) keeps rows
    min_cell_px high and puts k neighbouring blocks of a row into one drawn cell, k so that the
    cells are min_cell_px wide too; the grid width is a multiple of k, so each drawn cell is a
    contiguous range of blocks, and zoomed in far enough each block is its own cell again."""
    columns, rows = max(1, width_px // min_cell_px), max(1, height_px // min_cell_px)
    if num_blocks <= columns * rows:
        return grid_width(num_blocks), 1
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
        self._color64 = np.zeros(0, dtype=np.int64)
        self._flash_level = np.zeros(n, dtype=np.float32)
        self._flash_code = np.zeros(n, dtype=np.uint8)
        self.flashing = np.zeros(0, dtype=np.int64)  # ids of the blocks still flashing
        self._counts = np.zeros(NUM_KINDS, dtype=np.int64)

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
        """Index image from the snapshot: a handful of vectorised passes into preallocated buffers."""
        n = self.num_blocks
        kind, shared, tmp, col = self._kind, self.shared_mask, self._tmp_mask, self._color
        # kind: the state (5 for anything unknown), 4 for shared = used (2) with ref count > 1
        np.minimum(snap.block_state, KIND_UNKNOWN, out=kind)
        np.greater(snap.block_ref_cnt, 1, out=shared)
        np.equal(snap.block_state, BLOCK_USED, out=tmp)
        np.logical_and(shared, tmp, out=shared)
        np.add(kind, shared.view(np.uint8), out=kind)
        np.add(kind, shared.view(np.uint8), out=kind)
        # colour * 8: request_color_index(owner) = max(owner, 0) mod 48, by table lookup (mode
        # 'clip' sends ids < 0 to entry 0, like the max); a modulo pass is 4x slower
        owner = snap.block_owner
        top = int(owner.max())
        if top < _MAX_COLOR_TABLE:
            if top >= len(self._color_table):
                size = max(top + 1, 2 * len(self._color_table))
                self._color_table = (request_color_index(np.arange(size)) * NUM_KINDS).astype(np.int32)
            np.take(self._color_table, owner, out=col, mode="clip")
        else:
            if len(self._color64) != n:
                self._color64 = np.zeros(n, dtype=np.int64)
            np.maximum(owner, 0, out=self._color64)
            np.remainder(self._color64, NUM_REQUEST_COLORS, out=self._color64)
            np.multiply(self._color64, NUM_KINDS, out=col, casting="unsafe")
        # LUT index = table[colour * 8 + kind]
        np.add(col, kind, out=col)
        np.take(INDEX_TABLE, col, out=self._index_flat[:n], mode="clip")
        for k in range(KIND_UNKNOWN + 1):
            np.equal(kind, k, out=tmp)
            self._counts[k] = np.count_nonzero(tmp)

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
                    level[blocks] = 1.0
                    self._flash_code[blocks] = code
                    new.append(blocks)
        if new:
            ids = np.union1d(ids, np.concatenate(new))
        self.flashing = ids
        if not len(ids) and not len(dead):
            return False
        self._flash_flat[dead] = 0
        if len(ids):
            lv = np.ceil(level[ids] * (FLASH_LEVELS - 1)).astype(np.uint8)
            self._flash_flat[ids] = self._flash_code[ids] * FLASH_LEVELS + lv
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
        groups = self.index_image.reshape(self.rows, self.width // k, k)
        if k == 1:
            return groups[:, :, 0].copy()
        cells = groups.shape[0] * groups.shape[1]
        keys = groups.reshape(cells, k).astype(np.int64) + (np.arange(cells, dtype=np.int64) * 256)[:, None]
        counts = np.bincount(keys.reshape(-1), minlength=cells * 256).reshape(cells, 256)
        return counts.argmax(axis=1).astype(np.uint8).reshape(groups.shape[:2])

    def cell_range(self, block_id: int, k: int) -> tuple[int, int]:
        """[first, last] block of the drawn cell holding block_id when cells hold k blocks."""
        first = block_id - (block_id % self.width) % k
        return first, min(first + k, self.num_blocks) - 1
