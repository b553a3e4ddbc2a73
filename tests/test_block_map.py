"""The KV block map widget: index image and colours, layout, flashes, hover, click, selection,
themes, a 500,000-block pool, and that it never reaches for the engine."""

import ast
import math
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from PySide6 import QtCore

from kvscope.engine.snapshot import (
    BLOCK_CACHED,
    BLOCK_FREE,
    BLOCK_RESERVED,
    BLOCK_USED,
    REQUEST_DTYPE,
    Snapshot,
)
from kvscope.widgets import block_map as bm
from kvscope.widgets import block_map_colors as colors
from kvscope.widgets import block_map_grid as grid
from kvscope.widgets.block_map import BlockMapView
from kvscope.widgets.palette import DARK, LIGHT, NUM_REQUEST_COLORS, REQUEST_COLORS, request_color_index

pytestmark = [
    pytest.mark.qt_log_level_fail("WARNING"),
    # the offscreen platform plugin's own notices (propagateSizeHints(), raise() of a tooltip)
    pytest.mark.qt_log_ignore("This plugin does not support"),
]

BS = 16


def make_snapshot(n, owner=None, state=None, ref=None, fill=None, hashes=None, requests=None, block_size=BS):
    owner = np.full(n, -1, np.int64) if owner is None else np.asarray(owner, np.int64)
    state = np.zeros(n, np.uint8) if state is None else np.asarray(state, np.uint8)
    ref = np.zeros(n, np.int32) if ref is None else np.asarray(ref, np.int32)
    fill = np.zeros(n, np.uint16) if fill is None else np.asarray(fill, np.uint16)
    hashes = np.zeros(n, np.uint64) if hashes is None else np.asarray(hashes, np.uint64)
    return Snapshot(
        time_s=0.0, step=0, block_size=block_size, block_owner=owner, block_state=state, block_ref_cnt=ref,
        block_fill=fill, block_hash=hashes,
        requests=np.zeros(0, dtype=REQUEST_DTYPE) if requests is None else requests,
        kv_usage=0.0, num_running=0, num_waiting=0,
    )


def known_snapshot(n=20):
    """Blocks 0-2 used by request 5, block 3 cached from request 5, block 4 shared (ref 2, first
    filled by 5), block 5 reserved by request 5, block 6 used by request 9 holding 7 tokens, rest free."""
    owner = np.full(n, -1, np.int64)
    state = np.full(n, BLOCK_FREE, np.uint8)
    ref = np.zeros(n, np.int32)
    fill = np.zeros(n, np.uint16)
    hashes = np.zeros(n, np.uint64)
    owner[0:6] = 5
    state[0:3] = BLOCK_USED
    ref[0:3] = 1
    fill[0:3] = BS
    hashes[0:2] = [0x1111, 0x2222]
    state[3] = BLOCK_CACHED
    fill[3] = BS
    hashes[3] = 0xDEADBEEF
    state[4] = BLOCK_USED
    ref[4] = 2
    fill[4] = BS
    hashes[4] = 0xABCDEF0123456789
    state[5] = BLOCK_RESERVED
    ref[5] = 1
    owner[6] = 9
    state[6] = BLOCK_USED
    ref[6] = 1
    fill[6] = 7
    return make_snapshot(n, owner, state, ref, fill, hashes)


def random_snapshot(n, seed=0, max_owner=500):
    rng = np.random.default_rng(seed)
    state = rng.integers(0, 4, n).astype(np.uint8)
    owner = rng.integers(0, max_owner, n).astype(np.int64)
    owner[state == BLOCK_FREE] = -1
    ref = np.where(state == BLOCK_USED, rng.integers(1, 4, n), np.where(state == BLOCK_RESERVED, 1, 0)).astype(np.int32)
    fill = np.where(state == BLOCK_FREE, 0, rng.integers(1, BS + 1, n)).astype(np.uint16)
    hashes = np.where(state == BLOCK_FREE, 0, rng.integers(1, 2**62, n)).astype(np.uint64)
    return make_snapshot(n, owner, state, ref, fill, hashes)


@pytest.fixture
def view(qtbot):
    w = BlockMapView()
    qtbot.addWidget(w)
    w.resize(900, 500)
    return w


def color_at(w, block):
    return tuple(int(v) for v in w.lut()[w.index_image()[w.cell_at(block)]])


def rgb(c):
    return tuple(int(v) for v in c)


# --- colours and the index image -----------------------------------------------------------------
def test_known_allocation_colours(view):
    view.update_snapshot(known_snapshot())
    colours = colors.state_colors(DARK)
    red5 = rgb(REQUEST_COLORS[5])
    for b in (0, 1, 2):
        assert view.index_image()[view.cell_at(b)] == colors.LUT_USED + 5
        assert color_at(view, b) == red5
    assert view.index_image()[view.cell_at(3)] == colors.LUT_CACHED + 5
    assert color_at(view, 3) == rgb(colours["cached"][5])
    assert view.index_image()[view.cell_at(4)] == colors.LUT_SHARED + 5
    assert color_at(view, 4) == rgb(colours["shared"][5])
    assert view.index_image()[view.cell_at(5)] == colors.LUT_RESERVED + 5
    assert color_at(view, 5) == rgb(colours["reserved"][5])
    assert color_at(view, 6) == rgb(REQUEST_COLORS[9])
    for b in range(7, 20):
        assert color_at(view, b) == DARK.free_block
    # cached is dimmed toward the background, reserved a pale tint: all five clearly different
    five = {color_at(view, b) for b in (0, 3, 4, 5, 7)}
    assert len(five) == 5
    bg = np.array(DARK.background, float)
    assert np.abs(np.array(color_at(view, 3)) - bg).sum() < np.abs(np.array(red5) - bg).sum()
    assert sum(color_at(view, 5)) > sum(red5)  # paler (lighter) than the used colour on dark


def test_padding_cells_use_the_no_block_entry(view):
    view.update_snapshot(known_snapshot(20))
    rows, width = view.grid_shape()
    assert view.index_image().shape == (rows, width)
    assert rows * width > 20
    flat = view.index_image().reshape(-1)
    assert np.all(flat[20:] == colors.LUT_NO_BLOCK)
    assert rgb(view.lut()[colors.LUT_NO_BLOCK]) == DARK.background != DARK.free_block


def test_index_image_matches_a_per_block_reference(view):
    """The vectorised index image equals a plain loop over blocks, for random pools and owner ids
    on both colour paths (table lookup and the modulo fallback for huge ids)."""
    for seed, max_owner in ((1, 300), (2, grid._MAX_COLOR_TABLE * 4)):
        snap = random_snapshot(5000, seed=seed, max_owner=max_owner)
        view.update_snapshot(snap)
        img = view.index_image().reshape(-1)
        for b in range(snap.num_blocks):
            s, o, r = int(snap.block_state[b]), int(snap.block_owner[b]), int(snap.block_ref_cnt[b])
            c = int(request_color_index(np.array([o]))[0])
            if s == BLOCK_FREE:
                expected = colors.LUT_FREE
            elif s == BLOCK_USED and r > 1:
                expected = colors.LUT_SHARED + c
            elif s == BLOCK_USED:
                expected = colors.LUT_USED + c
            elif s == BLOCK_CACHED:
                expected = colors.LUT_CACHED + c
            else:
                expected = colors.LUT_RESERVED + c
            assert img[b] == expected, (b, s, o, r)


def test_unknown_state_is_not_drawn_as_a_block_colour(view):
    snap = known_snapshot(20)
    snap.block_state[8] = 9
    view.update_snapshot(snap)
    assert view.index_image()[view.cell_at(8)] == colors.LUT_NO_BLOCK


def test_lut_layout_fits_and_has_request_colours():
    lut = colors.build_lut(DARK)
    assert lut.shape == (256, 3) and lut.dtype == np.uint8
    assert np.array_equal(lut[colors.LUT_USED:colors.LUT_USED + NUM_REQUEST_COLORS], REQUEST_COLORS)
    # the four variants of every request colour are distinct from each other and from free
    for i in range(NUM_REQUEST_COLORS):
        entries = {rgb(lut[base + i]) for base in (colors.LUT_USED, colors.LUT_CACHED, colors.LUT_RESERVED, colors.LUT_SHARED)}
        entries.add(rgb(lut[colors.LUT_FREE]))
        assert len(entries) == 5, i


def test_rendered_pixels_match_the_lut(view, qtbot):
    """End to end through pyqtgraph: the cell centres on screen have the LUT colours (row-major,
    y top to bottom, levels mapping index i to lut[i] exactly)."""
    view.show()
    qtbot.waitExposed(view)
    view.update_snapshot(known_snapshot(20))
    image = view._glw.grab().toImage()
    dpr = image.devicePixelRatio()
    for b in (0, 3, 4, 5, 6, 12, 19):
        row, col = view.cell_at(b)
        # left of centre: clear of the ref-count text and the outline of a shared cell
        scene = view._vb.mapViewToScene(QtCore.QPointF(col + 0.2, row + 0.5))
        p = view._glw.mapFromScene(scene)
        c = image.pixelColor(int(p.x() * dpr), int(p.y() * dpr))
        assert (c.red(), c.green(), c.blue()) == color_at(view, b), b
    # block 0 is above block (width), so the y axis runs top to bottom
    _, width = view.grid_shape()
    y0 = view._glw.mapFromScene(view._vb.mapViewToScene(QtCore.QPointF(0.5, 0.5))).y()
    y1 = view._glw.mapFromScene(view._vb.mapViewToScene(QtCore.QPointF(0.5, 1.5))).y()
    assert view.cell_at(width) == (1, 0) and y1 > y0


# --- layout -------------------------------------------------------------------------------------
def test_grid_width_rule():
    assert grid.grid_width(1) == 8
    assert grid.grid_width(20) == 8
    assert grid.grid_width(3000) == round(math.sqrt(6000))
    assert grid.grid_width(500_000) == 1000
    assert grid.grid_width(10_000_000) == 1024
    for n in (1, 7, 8, 9, 1000, 3001, 500_000):
        rows, width = grid.grid_shape(n)
        assert rows * width >= n > (rows - 1) * width


def test_cell_at_and_block_at_are_inverse(view):
    view.update_snapshot(random_snapshot(3001))
    rows, width = view.grid_shape()
    assert view.cell_at(0) == (0, 0)
    assert view.cell_at(width + 3) == (1, 3)
    for b in (0, 1, width - 1, width, 1234, 3000):
        assert view.block_at(*view.cell_at(b)) == b
    assert view.block_at(rows - 1, width - 1) == -1  # padding
    assert view.block_at(-1, 0) == -1


def test_view_range_set_only_when_pool_size_changes(view):
    view.update_snapshot(random_snapshot(3000))
    rows, width = view.grid_shape()
    (x0, x1), (y0, y1) = view._vb.viewRange()
    assert (x0, x1) == pytest.approx((0, view._span[0])) and (y0, y1) == pytest.approx((0, view._span[1]))
    assert view._span[0] >= width and view._span[1] >= rows  # the whole pool, in square cells
    view._vb.setRange(xRange=(10, 20), yRange=(5, 9), padding=0)  # the user zooms in
    view.update_snapshot(random_snapshot(3000, seed=3))
    assert view._vb.viewRange()[0] == pytest.approx([10, 20])  # no jump back
    view.update_snapshot(random_snapshot(200))
    assert view._vb.viewRange()[0] == pytest.approx([0, view._span[0]])
    assert view._vb.viewRange()[1] == pytest.approx([0, view._span[1]])


# --- flashes ------------------------------------------------------------------------------------
class FakeClock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_flash_appears_and_decays(view):
    clock = FakeClock()
    view._clock = clock
    snap = known_snapshot(20)
    view.update_snapshot(snap)
    view.update_snapshot(snap, changed={"allocated": [7], "evicted": np.array([3])})
    cell = view.cell_at(7)
    first = int(view.flash_image()[cell])
    assert first > 0
    assert view.flash_lut()[first][3] > 200  # nearly opaque at first
    assert rgb(view.flash_lut()[first][:3]) == DARK.flash
    assert rgb(view.flash_lut()[int(view.flash_image()[view.cell_at(3)])][:3]) == DARK.accent
    assert view.flash_image()[view.cell_at(8)] == 0
    assert view._flash.isVisible()
    alphas = []
    for _ in range(40):  # 40 frames at 60 per second: 0.67 s
        clock.t += 1 / 60
        view.update_snapshot(snap)
        alphas.append(int(view.flash_lut()[int(view.flash_image()[cell])][3]))
    assert alphas[0] < 235 and alphas[10] < alphas[0]  # fading
    assert all(a >= b for a, b in zip(alphas, alphas[1:]))
    assert alphas[-1] == 0 and not view.flash_image().any()
    assert not view._flash.isVisible()
    assert not view._flash_timer.isActive()


def test_flash_decays_after_enough_fast_updates_without_fake_clock(view):
    snap = known_snapshot(20)
    view.update_snapshot(snap, changed={"prefix_hit": np.array([2, 5]), "preempted": np.array([9]),
                                        "allocated": np.array([99, -1])})  # out of range: ignored
    assert view.flash_image()[view.cell_at(2)] > 0 and view.flash_image()[view.cell_at(9)] > 0
    for _ in range(int(grid.FLASH_SECONDS / grid._FLASH_MIN_STEP_S) + 2):
        view.update_snapshot(snap)
    assert not view.flash_image().any()


def test_flash_keeps_fading_when_frames_stop(view, qtbot):
    view.update_snapshot(known_snapshot(20), changed={"allocated": np.array([7])})
    assert view._flash_timer.isActive()
    qtbot.waitUntil(lambda: not view.flash_image().any(), timeout=3000)
    assert not view._flash_timer.isActive()


# --- hover --------------------------------------------------------------------------------------
def test_hover_text(view):
    view.update_snapshot(known_snapshot())
    text = view.hover_text(6)
    assert "block 6" in text and "used" in text
    assert "request 9" in text
    assert "7 / 16 tokens" in text
    assert "prefix hash: none" in text
    shared = view.hover_text(4)
    assert "shared by 2 requests, first filled by request 5" in shared
    assert "0xabcdef0123456789" in shared
    assert "16 / 16 tokens" in shared
    cached = view.hover_text(3)
    assert "cached" in cached and "request 5" in cached and "0x00000000deadbeef" in cached
    assert "reserved" in view.hover_text(5) and "0 / 16 tokens" in view.hover_text(5)
    free = view.hover_text(10)
    assert "free" in free and "owner: none" in free
    assert view.hover_text(999) == ""


def test_hover_tells_blocks_held_by_the_owner(view):
    requests = np.zeros(1, dtype=REQUEST_DTYPE)
    requests["request_id"] = 9
    requests["num_blocks"] = 3
    s = known_snapshot()
    view.update_snapshot(make_snapshot(20, s.block_owner, s.block_state, s.block_ref_cnt, s.block_fill,
                                       s.block_hash, requests=requests))
    assert "holds 3 blocks" in view.hover_text(6)


def _cell_pos(view, block):
    row, col = view.cell_at(block)
    scene = view._vb.mapViewToScene(QtCore.QPointF(col + 0.5, row + 0.5))
    return view._glw.mapFromScene(scene)


def test_mouse_hover_updates_the_status_line(view, qtbot):
    view.show()
    qtbot.waitExposed(view)
    view.update_snapshot(known_snapshot())
    qtbot.mouseMove(view._glw.viewport(), _cell_pos(view, 6))
    qtbot.waitUntil(lambda: "block 6" in view.status_text(), timeout=2000)
    assert "7 / 16 tokens" in view.status_text()
    assert view._tooltip_text == view.hover_text(6)


# --- click and selection ------------------------------------------------------------------------
def test_emit_for_block(view, qtbot):
    view.update_snapshot(known_snapshot())
    with qtbot.waitSignal(view.request_selected, timeout=1000) as blocker:
        view._emit_for_block(6)
    assert blocker.args == [9]
    assert view.selected_request() == 9
    with qtbot.waitSignal(view.request_selected, timeout=1000) as blocker:
        view._emit_for_block(12)  # free
    assert blocker.args == [-1]
    assert view.selected_request() == -1


def test_real_mouse_click_emits_owner(view, qtbot):
    view.show()
    qtbot.waitExposed(view)
    view.update_snapshot(known_snapshot())
    with qtbot.waitSignal(view.request_selected, timeout=2000) as blocker:
        qtbot.mouseClick(view._glw.viewport(), QtCore.Qt.MouseButton.LeftButton, pos=_cell_pos(view, 1))
    assert blocker.args == [5]
    with qtbot.waitSignal(view.request_selected, timeout=2000) as blocker:
        qtbot.mouseClick(view._glw.viewport(), QtCore.Qt.MouseButton.LeftButton, pos=_cell_pos(view, 15))
    assert blocker.args == [-1]


def test_select_request_highlights_without_emitting(view, qtbot):
    view.update_snapshot(known_snapshot())
    with qtbot.assertNotEmitted(view.request_selected):
        view.select_request(5)
    dim = view.dim_image()
    for b in range(6):
        assert dim[view.cell_at(b)] == 0  # request 5's blocks stay bright
    for b in (6, 7, 19):
        assert dim[view.cell_at(b)] == 1  # everything else is dimmed
    assert view._dim.isVisible()
    assert "request 5 selected (6 blocks)" in view.status_text()
    # follows the request as the snapshot changes
    snap = known_snapshot()
    snap.block_owner[10] = 5
    snap.block_state[10] = BLOCK_USED
    view.update_snapshot(snap)
    assert view.dim_image()[view.cell_at(10)] == 0
    with qtbot.assertNotEmitted(view.request_selected):
        view.select_request(-1)
    assert not view._dim.isVisible()


def test_no_feedback_loop_when_wired_to_itself(view, qtbot):
    view.update_snapshot(known_snapshot())
    received = []
    view.request_selected.connect(received.append)
    view.request_selected.connect(view.select_request)  # an app echoing the selection back
    view._emit_for_block(0)
    assert received == [5]
    assert view.selected_request() == 5


# --- theme --------------------------------------------------------------------------------------
def test_theme_switch_changes_lut_and_background(view):
    view.update_snapshot(known_snapshot())
    dark_lut = view.lut().copy()
    dark_index = view.index_image().copy()
    view.set_theme(LIGHT)
    assert not np.array_equal(view.lut(), dark_lut)
    assert np.array_equal(view.index_image(), dark_index)  # the image is theme-free
    assert color_at(view, 10) == LIGHT.free_block
    assert rgb(view.lut()[colors.LUT_NO_BLOCK]) == LIGHT.background
    assert view._glw.backgroundBrush().color().getRgb()[:3] == LIGHT.background
    assert view._image.lut is view.lut()
    assert rgb(view.flash_lut()[5][:3]) == LIGHT.flash
    view.set_theme(DARK)
    assert np.array_equal(view.lut(), dark_lut)


# --- legend ------------------------------------------------------------------------------------
def test_legend_counts_with_units_and_tooltips(view):
    view.update_snapshot(known_snapshot(20))
    texts = view.legend_texts()
    assert texts["used"] == "in use (1 ref) 4 blocks (20.0 %)"  # 0-2 and 6; shared counted apart
    assert texts["shared"].endswith("1 blocks (5.0 %)") or texts["shared"].endswith("1 block (5.0 %)")
    assert texts["cached"].endswith("1 blocks (5.0 %)") or texts["cached"].endswith("1 block (5.0 %)")
    assert "reserved" in texts["reserved"] and "(5.0 %)" in texts["reserved"]
    assert texts["free"] == "free 13 blocks (65.0 %)"
    for entry in view._legend.entries.values():
        assert len(entry.toolTip()) > 20


# --- decorations ------------------------------------------------------------------------------
def test_ref_count_drawn_on_big_cells_only(view, qtbot):
    view.show()
    qtbot.waitExposed(view)
    view.update_snapshot(known_snapshot(20))
    view._glw.grab()
    assert view._decor.last_outline_count == 1
    assert view._decor.last_label_count == 1
    big = random_snapshot(200_000, seed=4)
    view.update_snapshot(big)
    view._glw.grab()
    assert view._decor.last_label_count == 0  # cells are a pixel or two: the LUT variant alone


# --- scale -------------------------------------------------------------------------------------
def test_half_a_million_blocks(view, qtbot):
    view.show()
    qtbot.waitExposed(view)
    snap = random_snapshot(500_000, seed=7)
    view.update_snapshot(snap)
    rows, width = view.index_image().shape
    assert rows * width >= 500_000 and view.index_image().dtype == np.uint8
    k = view.blocks_per_cell()  # far more blocks than pixels: drawn as an overview
    assert k > 1 and width % k == 0 and view.shown_image().shape == (rows, width // k)
    changed = {"allocated": np.arange(1000, 1200), "evicted": np.arange(5000, 5050)}
    times, numpy_times = [], []
    for i in range(20):
        t = time.perf_counter()
        view.update_snapshot(snap, changed if i % 4 == 0 else None)
        times.append(time.perf_counter() - t)
        t = time.perf_counter()
        view._grid.draw(snap)
        numpy_times.append(time.perf_counter() - t)
    t = time.perf_counter()
    pixmap = view.grab()
    grab_ms = (time.perf_counter() - t) * 1e3
    assert not pixmap.isNull()
    assert view.flash_image()[view.cell_at(1100)] > 0
    print(f"\n500,000 blocks: index image {np.median(numpy_times) * 1e3:.2f} ms, "
          f"update_snapshot {np.median(times) * 1e3:.2f} ms (median of 20), full widget grab {grab_ms:.1f} ms")
    # the legend still adds up
    counts = [int(s.split(" blocks (")[0].split()[-1].replace(",", "")) for s in
              (view.legend_texts()[k] for k in ("used", "shared", "cached", "reserved", "free"))]
    assert sum(counts) == 500_000


# --- layering ------------------------------------------------------------------------------------
BLOCK_MAP_FILES = sorted(Path(bm.__file__).parent.glob("block_map*.py"))


def imported_modules(path: Path) -> set:
    modules = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            modules.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0
            modules.add(node.module)
    return modules


@pytest.mark.parametrize("path", BLOCK_MAP_FILES, ids=lambda p: p.name)
def test_module_imports_only_what_widgets_may(path):
    modules = imported_modules(path)
    allowed = {"__future__", "math", "time", "numpy", "pyqtgraph", "PySide6", "kvscope.engine.snapshot"}
    modules = {m for m in modules if not m.startswith("kvscope.widgets.")}  # other views: fine
    assert modules <= allowed, modules - allowed
    assert "kvscope.engine.engine" not in path.read_text()


def test_the_colours_and_the_grid_are_plain_numpy():
    """What each index means and how a snapshot becomes the images: checkable with no Qt."""
    assert len(BLOCK_MAP_FILES) >= 5
    for module in (colors, grid):
        modules = imported_modules(Path(module.__file__))
        assert not {m for m in modules if m.split(".")[0] in ("PySide6", "pyqtgraph")}, module.__name__
        assert {m for m in modules if m.startswith("kvscope.widgets.")} <= {
            "kvscope.widgets.block_map_colors", "kvscope.widgets.palette"}


def test_the_grid_draws_a_snapshot_without_a_view():
    snap = known_snapshot(20)
    cells = grid.BlockGrid(20)
    cells.draw(snap)
    assert cells.index_image.shape == grid.grid_shape(20)
    assert cells.index_image[cells.cell_at(0)] == colors.LUT_USED + 5
    assert cells.index_image[cells.cell_at(4)] == colors.LUT_SHARED + 5
    assert cells.block_counts() == {"used": 4, "shared": 1, "cached": 1, "reserved": 1, "free": 13}
    assert cells.advance_flashes(0.0, {"evicted": [3]}) and cells.flash_image[cells.cell_at(3)] > 0
    assert cells.advance_flashes(grid.FLASH_SECONDS, None) and not cells.flash_image.any()
    cells.dim_all_but(snap, 9)
    assert cells.undimmed_count() == 1 and cells.dim_image[cells.cell_at(6)] == 0


def test_importing_the_widget_pulls_in_no_engine_module():
    """Beyond what kvscope.engine.snapshot itself costs (its package __init__), the widget adds
    no engine module and no torch."""
    code = (
        "import sys\n"
        "import kvscope.engine.snapshot\n"
        "before = set(sys.modules)\n"
        "import kvscope.widgets.block_map\n"
        "added = set(sys.modules) - before\n"
        "bad = sorted(m for m in added if m.startswith('kvscope.engine') or m.split('.')[0] in ('torch', 'transformers'))\n"
        "print('BAD', bad)\n"
        "assert 'torch' not in sys.modules\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "BAD []" in out.stdout


def test_empty_pool_and_pool_resize(view):
    view.update_snapshot(make_snapshot(0))
    assert view.index_image().size == 0
    assert view.legend_texts()["free"] == "free 0 blocks (0.0 %)"
    view.update_snapshot(known_snapshot(20), changed={"allocated": [7]})
    assert view.index_image().shape == grid.grid_shape(20, view.grid_shape()[1])
    view.update_snapshot(random_snapshot(3000), changed={"allocated": [2999]})
    assert view.index_image().shape == grid.grid_shape(3000, view.grid_shape()[1])
    assert view.flash_image()[view.cell_at(2999)] > 0
    assert view.flash_image()[view.cell_at(7)] == 0  # old pool's flashes do not carry over


def test_reset_view_after_zoom(view):
    view.update_snapshot(random_snapshot(3000))
    view._vb.setRange(xRange=(10, 20), yRange=(5, 9), padding=0)
    view.reset_view()
    assert view._vb.viewRange()[0] == pytest.approx([0, view._span[0]])


def test_a_status_line_wider_than_the_label_ends_in_an_ellipsis_not_mid_word(qtbot):
    from kvscope.widgets.elided_label import ElidedLabel

    label = ElidedLabel()
    qtbot.addWidget(label)
    label.show()
    label.resize(120, 20)
    text = "682 blocks × 16 tokens = 10,912 tokens of KV cache  ·  hover a block for details"
    label.setText(text)
    assert label.full_text() == text and label.text().endswith("…") and len(label.text()) < len(text)
    label.resize(2000, 20)
    assert label.text() == text


def test_a_hybrid_models_blocks_say_their_layer_group(view):
    import dataclasses

    from kvscope.app.lab.presets import load_hardware, load_model
    from kvscope.engine import Engine, EngineArgs

    model = dataclasses.replace(load_model("gpt-oss-20b"), sliding_window=64)
    engine = Engine(model, load_hardware("h100-80gb"), EngineArgs(max_model_len=1024, kv_cache_memory_bytes=1 << 30))
    engine.add_request(list(range(300)), max_tokens=20, arrival_time=0.0)
    engine.step()
    engine.step()
    snap = engine.snapshot()
    view.update_snapshot(snap)
    req = engine.scheduler.running[0]
    full_block = engine.kv.positional_blocks(req)[0]
    sliding_block = next(b for b in req.block_ids if snap.block_group[b] == 1)
    assert "layer group: 1 of 2 (full attention)" in view.hover_text(full_block)
    assert "layer group: 2 of 2 (sliding window of 64 tokens)" in view.hover_text(sliding_block)
    assert "blocks in use by layer group: full attention" in view.status_text()


# --- big pools: an overview of cells of several blocks, zoomed in to each block -------------------
def band_view(qtbot, n=29_043, size=(1200, 220)):
    """A pool of n blocks in a wide, low panel (where 29,043 blocks were a band of 1-pixel noise)."""
    view = BlockMapView()
    qtbot.addWidget(view)
    view.resize(*size)
    view.show()
    qtbot.waitExposed(view)
    snap = random_snapshot(n, seed=3)
    view.update_snapshot(snap)
    return view, snap


def test_a_big_pool_is_drawn_in_readable_cells_each_its_blocks_majority(qtbot):
    view, snap = band_view(qtbot)
    k = view.blocks_per_cell()
    assert k > 1
    shown = view.shown_image()
    rows, columns = shown.shape
    pixels_per_cell = (view._vb.width() / columns, view._vb.height() / rows)
    assert min(pixels_per_cell) >= bm.MIN_CELL_PX - 0.5, pixels_per_cell
    detail = view.index_image()
    rng = np.random.default_rng(0)
    for row, column in zip(rng.integers(0, rows - 1, 40), rng.integers(0, columns, 40)):
        values, counts = np.unique(detail[row, column * k:(column + 1) * k], return_counts=True)
        assert counts[values == shown[row, column]][0] == counts.max()  # the majority of its k blocks
    first = view.block_at(2, 3 * k + 1)
    text = view.hover_text(first)
    assert text.startswith(f"blocks {2 * view.grid_shape()[1] + 3 * k:,}-") and f"({k} blocks in this cell" in text
    assert "free" in text or "used" in text


def test_zooming_in_shows_each_block_and_zooming_out_the_overview_again(qtbot):
    view, snap = band_view(qtbot)
    k = view.blocks_per_cell()
    view._vb.setRange(xRange=(100, 140), yRange=(2, 6), padding=0)
    assert view.blocks_per_cell() == 1
    assert np.array_equal(view.shown_image(), view.index_image())
    block = view.block_at(3, 120)
    assert view.hover_text(block).startswith(f"block {block:,} (row 3, col 120)")
    view.reset_view()
    assert view.blocks_per_cell() == k and view.shown_image().shape[1] == view.grid_shape()[1] // k


def test_a_click_on_an_overview_cell_selects_the_request_holding_most_of_it(qtbot):
    owner = np.repeat(np.arange(300), 100)[:29_043].astype(np.int64)  # request r holds blocks 100r .. 100r+99
    snap = make_snapshot(29_043, owner=owner, state=np.full(29_043, BLOCK_USED, np.uint8),
                         ref=np.ones(29_043, np.int32))
    view = BlockMapView()
    qtbot.addWidget(view)
    view.resize(1200, 220)
    view.show()
    qtbot.waitExposed(view)
    view.update_snapshot(snap)
    k = view.blocks_per_cell()
    assert k > 1
    first, last = view._grid.cell_range(4321, k)
    expected = np.bincount(owner[first:last + 1]).argmax()
    with qtbot.waitSignal(view.request_selected) as signal:
        view._emit_for_block(4321)
    assert signal.args == [expected]


def test_a_small_pool_keeps_one_cell_per_block(view):
    view.update_snapshot(random_snapshot(3000))
    rows, width = view.grid_shape()
    assert view.blocks_per_cell() == 1 and (rows, width) == grid.grid_shape(3000, width) and rows * width >= 3000


def test_neighbouring_requests_get_clearly_different_colours():
    colours = REQUEST_COLORS.astype(np.int64)
    for step in (1, 2):  # request ids next to each other, and one apart, as a batch lays them out
        distance = np.sqrt(((colours - np.roll(colours, -step, axis=0)) ** 2).sum(axis=1))
        assert distance.min() > 60, (step, distance.min())


def test_the_legend_says_1_block_not_1_blocks(view):
    state = np.array([BLOCK_USED, BLOCK_FREE, BLOCK_FREE], dtype=np.uint8)
    view.update_snapshot(make_snapshot(3, owner=np.array([4, -1, -1]), state=state, ref=np.array([1, 0, 0], np.int32)))
    assert view.legend_texts()["used"].startswith("in use (1 ref) 1 block (") and "free 2 blocks (" in view.legend_texts()["free"]
