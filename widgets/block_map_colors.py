"""The block map's colours: what each index of its images means, and the lookup tables that paint them.

The block map draws the pool as ``uint8`` index images through fixed 256-entry lookup tables
(pyqtgraph's fast path: a zero-copy ``Indexed8`` QImage). This module fixes the meaning of every
index and builds the tables for a theme; it is plain numpy (no Qt), so the colours can be checked
without a window.

Index image (:data:`LUT_SIZE` = 256 entries, the tables rebuilt only when the theme changes)::

    0            free block                     theme.free_block
    1   .. 48    used, ref count 1              REQUEST_COLORS[i]
    49  .. 96    cached (free, reusable prefix) REQUEST_COLORS[i] dimmed toward the background
    97  .. 144   reserved (held, no token yet)  REQUEST_COLORS[i] pale tint
    145 .. 192   shared (used, ref count > 1)   REQUEST_COLORS[i] brighter (dark) / deeper (light)
    193 .. 255   no block (grid padding)        theme.background

where ``i = request_color_index(owner)`` so a request has the same colour in every panel.

Flash overlay: index = change kind * :data:`FLASH_LEVELS` + level, the colour of the change kind
with alpha rising with the level (0: transparent). Selection overlay: 0 clear, 1 dimmed.
"""

from __future__ import annotations

import numpy as np

from kvscope.engine.snapshot import BLOCK_CACHED, BLOCK_FREE, BLOCK_RESERVED, BLOCK_USED
from kvscope.widgets.palette import NUM_REQUEST_COLORS, REQUEST_COLORS, Theme

# --- index image layout --------------------------------------------------------------------------
LUT_SIZE = 256
LUT_FREE = 0
LUT_USED = 1
LUT_CACHED = LUT_USED + NUM_REQUEST_COLORS
LUT_RESERVED = LUT_CACHED + NUM_REQUEST_COLORS
LUT_SHARED = LUT_RESERVED + NUM_REQUEST_COLORS
LUT_NO_BLOCK = LUT_SHARED + NUM_REQUEST_COLORS  # grid padding and unknown states
assert LUT_NO_BLOCK < LUT_SIZE

# Kinds of cell: the block states, plus 'shared' (used with ref count > 1) and 'unknown'.
KIND_FREE, KIND_CACHED, KIND_USED, KIND_RESERVED = BLOCK_FREE, BLOCK_CACHED, BLOCK_USED, BLOCK_RESERVED
KIND_SHARED = 4
KIND_UNKNOWN = 5
LEGEND_KINDS = {"used": KIND_USED, "shared": KIND_SHARED, "cached": KIND_CACHED, "reserved": KIND_RESERVED,
                "free": KIND_FREE}
NUM_KINDS = 8  # row stride of the (colour, kind) -> LUT index table

# (kind, colour index) -> LUT index, flattened as colour * NUM_KINDS + kind.
INDEX_TABLE = np.full((NUM_REQUEST_COLORS, NUM_KINDS), LUT_NO_BLOCK, dtype=np.uint8)
INDEX_TABLE[:, KIND_FREE] = LUT_FREE
INDEX_TABLE[:, KIND_USED] = LUT_USED + np.arange(NUM_REQUEST_COLORS)
INDEX_TABLE[:, KIND_CACHED] = LUT_CACHED + np.arange(NUM_REQUEST_COLORS)
INDEX_TABLE[:, KIND_RESERVED] = LUT_RESERVED + np.arange(NUM_REQUEST_COLORS)
INDEX_TABLE[:, KIND_SHARED] = LUT_SHARED + np.arange(NUM_REQUEST_COLORS)
INDEX_TABLE = INDEX_TABLE.reshape(-1)

# --- overlays ------------------------------------------------------------------------------------
# Change kinds in the order they are written: a later one wins when a block has several.
FLASH_EVENTS = ("allocated", "prefix_hit", "evicted", "preempted")
FLASH_LEVELS = 64  # overlay index = event code * 64 + level (level 0: transparent)
_FLASH_MAX_ALPHA = 235
_DIM_ALPHA = 175  # how strongly the blocks of unselected requests are dimmed


def _mix(a, b, t: float) -> np.ndarray:
    return np.asarray(a, dtype=np.float64) * (1.0 - t) + np.asarray(b, dtype=np.float64) * t


def luma(rgb) -> np.ndarray:
    """Perceived brightness (0-255) of RGB colours: decides black or white text on a colour."""
    rgb = np.asarray(rgb, dtype=np.float64)
    return rgb[..., 0] * 0.299 + rgb[..., 1] * 0.587 + rgb[..., 2] * 0.114


def state_colors(theme: Theme) -> dict[str, np.ndarray]:
    """[48, 3] uint8 colours per request colour for each variant, and the fixed colours."""
    base = REQUEST_COLORS.astype(np.float64)
    grey = luma(base)[:, None]
    bg = np.asarray(theme.background, dtype=np.float64)
    if theme.is_dark:
        cached = _mix(_mix(base, grey, 0.35), bg, 0.58)  # dimmed: sinks toward the background
        reserved = _mix(base, (255, 255, 255), 0.62)  # pale tint: claimed, still empty
        shared = _mix(base, (255, 255, 255), 0.30)  # brighter
    else:
        cached = _mix(_mix(base, grey, 0.70), bg, 0.40)  # greyed out toward the background
        reserved = _mix(base, (255, 255, 255), 0.58)  # pale tint
        shared = _mix(base, (0, 0, 0), 0.35)  # deeper
    out = {"used": base, "cached": cached, "reserved": reserved, "shared": shared}
    out = {k: np.clip(np.rint(v), 0, 255).astype(np.uint8) for k, v in out.items()}
    out["free"] = np.asarray(theme.free_block, dtype=np.uint8)
    out["no_block"] = np.asarray(theme.background, dtype=np.uint8)
    return out


def build_lut(theme: Theme) -> np.ndarray:
    """The [256, 3] uint8 lookup table of the index image (layout in the module docstring)."""
    c = state_colors(theme)
    lut = np.empty((LUT_SIZE, 3), dtype=np.uint8)
    lut[:] = c["no_block"]
    lut[LUT_FREE] = c["free"]
    lut[LUT_USED:LUT_USED + NUM_REQUEST_COLORS] = c["used"]
    lut[LUT_CACHED:LUT_CACHED + NUM_REQUEST_COLORS] = c["cached"]
    lut[LUT_RESERVED:LUT_RESERVED + NUM_REQUEST_COLORS] = c["reserved"]
    lut[LUT_SHARED:LUT_SHARED + NUM_REQUEST_COLORS] = c["shared"]
    return lut


def flash_colors(theme: Theme) -> dict[str, tuple]:
    """The colour a block flashes in, by change kind."""
    return {"allocated": theme.flash, "prefix_hit": theme.good, "evicted": theme.accent,
            "preempted": theme.warning}


def build_flash_lut(theme: Theme) -> np.ndarray:
    """[256, 4] RGBA table of the flash overlay: code * 64 + level, alpha rising with level."""
    lut = np.zeros((LUT_SIZE, 4), dtype=np.uint8)
    levels = np.arange(FLASH_LEVELS)
    alpha = np.rint(_FLASH_MAX_ALPHA * levels / (FLASH_LEVELS - 1)).astype(np.uint8)
    colors = flash_colors(theme)
    for code, name in enumerate(FLASH_EVENTS):
        rows = slice(code * FLASH_LEVELS, (code + 1) * FLASH_LEVELS)
        lut[rows, :3] = colors[name]
        lut[rows, 3] = alpha
    return lut


def build_dim_lut(theme: Theme) -> np.ndarray:
    """[256, 4] RGBA table of the selection overlay: 0 clear, 1 dimmed toward the background."""
    lut = np.zeros((LUT_SIZE, 4), dtype=np.uint8)
    lut[1, :3] = theme.background
    lut[1, 3] = _DIM_ALPHA
    return lut
