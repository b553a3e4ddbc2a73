"""The batch timeline: for every engine step, the tokens each request in the batch ran (a prompt
chunk or a decode), and where requests joined the batch (refill), finished or were preempted.

One ``uint8`` index image drawn through a fixed lookup table (pyqtgraph's fast image path):
x is the engine step (newest at the right), y is a lane. A request takes the lowest free lane when
it first appears in a batch and gives it back when it finishes or is preempted. The marks are three
scatter items over the image; a thin stacked bar plot above shows the tokens of each step.

The view receives plain data (``TimelineStep``); it never sees the engine.
"""

from __future__ import annotations

from itertools import chain
from typing import NamedTuple

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QCursor, QPalette
from PySide6.QtWidgets import QLabel, QToolTip, QVBoxLayout, QWidget

from kvscope.widgets.fitting_axis import FittingAxis, color_axes
from kvscope.widgets.palette import DARK, Theme, hex_color, request_color


class TimelineStep(NamedTuple):
    step: int
    start_time_s: float
    duration_s: float
    request_ids: list  # list[int], the batch in order
    num_new_tokens: list  # list[int], per batch entry: prompt-chunk length, or 1 for a decode
    is_prefill: list  # list[bool], per batch entry
    joined: list  # list[int], request ids admitted to the batch this step
    finished: list  # list[int]
    preempted: list  # list[int]


# Cell codes of the index image.
EMPTY = 0
DECODE = 1
PREFILL_SMALL = 2  # PREFILL_SMALL + k for the k-th chunk-size bin
PREFILL_BIN_EDGES = np.array([32, 256, 1024])  # chunks of <32, 32-255, 256-1023, >=1024 tokens
PREFILL_BIN_LABELS = ("<32", "32-255", "256-1023", "\u22651024")
PREFILL_SHADES = (0.40, 0.60, 0.80, 1.0)  # share of the prefill colour over the background
NUM_CODES = PREFILL_SMALL + len(PREFILL_SHADES)

JOINED, FINISHED, PREEMPTED = "joined", "finished", "preempted"
MARK_KINDS = (JOINED, FINISHED, PREEMPTED)
_MARK_SYMBOL = {JOINED: "t2", FINISHED: "o", PREEMPTED: "t"}  # right triangle, disc, down triangle
_MARK_GLYPH = {JOINED: "\u25b6", FINISHED: "\u25cf", PREEMPTED: "\u25bc"}
_MARK_X_OFFSET = {JOINED: 0.15, FINISHED: 0.85, PREEMPTED: 0.5}  # within the step's cell
_MARK_SIZE = 8


def prefill_codes(num_tokens: np.ndarray) -> np.ndarray:
    """Cell code of prompt chunks of the given sizes (vectorised)."""
    return (PREFILL_SMALL + np.searchsorted(PREFILL_BIN_EDGES, num_tokens, side="right")).astype(np.uint8)


def _blend(a, b, t: float) -> tuple:
    return tuple(int(round(x * (1.0 - t) + y * t)) for x, y in zip(a, b))


def _fmt_ms(seconds: float) -> str:
    ms = seconds * 1e3
    if ms >= 100:
        return f"{ms:,.0f} ms"
    if ms >= 1:
        return f"{ms:.2f} ms"
    return f"{ms:.3f} ms"


class _StepAxis(pg.AxisItem):
    """Bottom axis whose ticks (positions in the ring of steps) read as engine step numbers."""

    def __init__(self, to_step, **kw):
        super().__init__("bottom", **kw)
        self._to_step = to_step

    def tickStrings(self, values, scale, spacing):
        return [self._to_step(v) for v in values]


class BatchTimelineView(QWidget):
    """Per-step batch composition. ``add_steps`` every frame; ``request_selected`` on click."""

    request_selected = Signal(int)

    def __init__(self, parent: QWidget | None = None, capacity: int = 400, max_lanes: int = 256,
                 theme: Theme = DARK):
        super().__init__(parent)
        self.capacity = int(capacity)
        self.max_lanes = int(max_lanes)
        self._theme = theme
        self._selected = -1
        self.last_hover_text = ""

        cap, lanes = self.capacity, self.max_lanes
        # Ring buffers: column slot = sequence number % capacity. The sequence number counts steps
        # since clear(); x in the plots is the sequence number, the axis shows the step number.
        self._codes = np.zeros((lanes, cap), dtype=np.uint8)
        self._rid = np.full((lanes, cap), -1, dtype=np.int64)
        self._ntok = np.zeros((lanes, cap), dtype=np.int32)
        self._step_no = np.zeros(cap, dtype=np.int64)
        self._duration = np.zeros(cap, dtype=np.float64)
        self._prefill_tok = np.zeros(cap, dtype=np.int64)
        self._decode_tok = np.zeros(cap, dtype=np.int64)
        self._batch_size = np.zeros(cap, dtype=np.int64)
        self._overflow = np.zeros(cap, dtype=np.int64)  # batch entries with no lane, per column
        self._marks = {k: (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64))
                       for k in MARK_KINDS}  # kind -> (sequence, lane, request id)
        self._init_state()
        self._build_ui()
        self.set_theme(theme)

    # ------------------------------------------------------------------ state

    def _init_state(self) -> None:
        self._seq_end = 0  # sequence number of the next step
        self._last_step: int | None = None  # engine step number of the newest step added
        self._count = 0  # valid columns, <= capacity
        self._lane_owner = np.full(self.max_lanes, -1, dtype=np.int64)  # lane -> request id
        self._lane_by_id = np.full(1024, -1, dtype=np.int64)  # request id -> lane
        self._lacked_lane = np.zeros(1024, dtype=bool)  # request id -> ever drawn without a lane
        self.overflow_requests_total = 0  # distinct requests that ran without a lane since clear()

    def clear(self) -> None:
        self._codes.fill(EMPTY)
        self._rid.fill(-1)
        self._ntok.fill(0)
        for a in (self._step_no, self._duration, self._prefill_tok, self._decode_tok,
                  self._batch_size, self._overflow):
            a.fill(0)
        for k in MARK_KINDS:
            self._marks[k] = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64))
        self._init_state()
        self._refresh()

    def _ensure_ids(self, max_id: int) -> None:
        n = len(self._lane_by_id)
        if max_id < n:
            return
        size = max(max_id + 1, 2 * n)
        grown = np.full(size, -1, dtype=np.int64)
        grown[:n] = self._lane_by_id
        self._lane_by_id = grown
        lacked = np.zeros(size, dtype=bool)
        lacked[:n] = self._lacked_lane
        self._lacked_lane = lacked

    def _lanes_of(self, ids: np.ndarray) -> np.ndarray:
        if ids.size and ids.min() < 0:
            out = np.full(ids.shape, -1, dtype=np.int64)
            ok = ids >= 0
            out[ok] = self._lane_by_id[ids[ok]]
            return out
        return self._lane_by_id[ids]

    @property
    def lanes_in_use(self) -> int:
        return int((self._lane_owner >= 0).sum())

    def lane_of(self, request_id: int) -> int:
        """The lane a request holds now, or -1."""
        if 0 <= request_id < len(self._lane_by_id):
            return int(self._lane_by_id[request_id])
        return -1

    # ------------------------------------------------------------------ data in

    def add_steps(self, steps: list) -> None:
        """Append the steps since the last frame (oldest first); keeps the newest ``capacity``.
        Lanes are given step by step (a lane freed by one step is taken in the next); the
        drawn columns are written together afterwards: at maximum speed a frame brings 400 steps,
        and writing each column with its own dozen small array operations took 15 ms."""
        if not steps:
            return
        cap = self.capacity
        first_drawn = len(steps) - cap  # steps before this index scroll out at once: lanes only
        new_marks = {k: [] for k in MARK_KINDS}
        drawn = []  # (slot, lanes, ids, tokens, is_prefill) of every step drawn
        for i, st in enumerate(steps):
            ids = np.asarray(st.request_ids, dtype=np.int64)
            last = self._last_step  # a step retried after running out of memory repeats its number
            if last is not None and (st.step > last + 1 or st.step < last):
                self._release_lanes_after_gap(ids)
            self._last_step = st.step
            hi = max(int(ids.max()) if ids.size else -1, max(st.joined, default=-1), max(st.finished, default=-1),
                     max(st.preempted, default=-1))
            self._ensure_ids(hi)
            lanes = self._lanes_of(ids)
            n_over = 0
            if ids.size and (lanes < 0).any():
                lanes, n_over = self._give_lanes(ids, lanes)

            seq = self._seq_end
            draw = i >= first_drawn
            if draw:
                slot = seq % cap
                drawn.append((slot, lanes, ids, st.num_new_tokens, st.is_prefill))
                self._step_no[slot] = st.step
                self._duration[slot] = st.duration_s
                self._batch_size[slot] = ids.size
                self._overflow[slot] = n_over

            # Marks, then give back the lanes of finished and preempted requests.
            for kind, lst in ((JOINED, st.joined), (FINISHED, st.finished), (PREEMPTED, st.preempted)):
                if not lst:
                    continue
                mid = np.asarray(lst, dtype=np.int64)
                ml = self._lanes_of(mid)
                ok = ml >= 0
                if draw and ok.any():
                    new_marks[kind].append((np.full(int(ok.sum()), seq, np.int64), ml[ok], mid[ok]))
                if kind != JOINED and ok.any():
                    self._lane_owner[ml[ok]] = -1
                    self._lane_by_id[mid[ok]] = -1
            self._seq_end += 1
        self._count = min(cap, self._count + len(steps))
        self._draw_columns(drawn)

        first = self._seq_end - self._count
        for kind in MARK_KINDS:
            parts = [self._marks[kind]] + new_marks[kind]
            s = np.concatenate([p[0] for p in parts])
            keep = s >= first
            self._marks[kind] = (s[keep], np.concatenate([p[1] for p in parts])[keep],
                                 np.concatenate([p[2] for p in parts])[keep])
        self._refresh()

    def _release_lanes_after_gap(self, batch_ids: np.ndarray) -> None:
        """Steps were skipped (a fast run sends only the newest of them): whoever finished or was
        preempted meanwhile never gave back a lane, so every request not in this batch does now.
        Without this, lanes ran out after a minute at maximum speed with 4 requests running."""
        owners = self._lane_owner
        held = np.flatnonzero(owners >= 0)
        gone = held[~np.isin(owners[held], batch_ids)]
        self._lane_by_id[owners[gone]] = -1
        owners[gone] = -1

    def _give_lanes(self, ids: np.ndarray, lanes: np.ndarray) -> tuple[np.ndarray, int]:
        """The batch's newcomers take the lowest free lanes, in batch order; those left without
        one are counted. Returns the lanes of the batch and how many entries have none."""
        need = (lanes < 0) & (ids >= 0)
        if need.any():
            new_ids = ids[need]
            free = np.flatnonzero(self._lane_owner < 0)
            k = min(len(new_ids), len(free))
            if k:
                got = free[:k]
                self._lane_by_id[new_ids[:k]] = got
                self._lane_owner[got] = new_ids[:k]
                lanes = self._lanes_of(ids)
        no_lane = lanes < 0
        n_over = int(no_lane.sum())
        if n_over:
            over_ids = ids[no_lane & (ids >= 0)]
            fresh = over_ids[~self._lacked_lane[over_ids]]
            self._lacked_lane[fresh] = True
            self.overflow_requests_total += int(np.unique(fresh).size)
        return lanes, n_over

    def _draw_columns(self, drawn: list) -> None:
        """Writes the columns of the drawn steps (distinct slots) in one go."""
        if not drawn:
            return
        slots = np.fromiter((d[0] for d in drawn), dtype=np.int64, count=len(drawn))
        self._codes[:, slots] = EMPTY
        self._rid[:, slots] = -1
        self._ntok[:, slots] = 0
        sizes = np.fromiter((len(d[2]) for d in drawn), dtype=np.int64, count=len(drawn))
        if not sizes.sum():
            self._prefill_tok[slots] = 0
            self._decode_tok[slots] = 0
            return
        column = np.repeat(np.arange(len(drawn)), sizes)
        lanes = np.concatenate([d[1] for d in drawn])
        ids = np.concatenate([d[2] for d in drawn])
        tok = np.fromiter(chain.from_iterable(d[3] for d in drawn), dtype=np.int64, count=len(ids))
        pre = np.fromiter(chain.from_iterable(d[4] for d in drawn), dtype=bool, count=len(ids))
        has = lanes >= 0
        cells = (lanes[has], slots[column[has]])
        self._codes[cells] = np.where(pre[has], prefill_codes(tok[has]), DECODE)
        self._rid[cells] = ids[has]
        self._ntok[cells] = tok[has]
        prefill = np.bincount(column, weights=np.where(pre, tok, 0), minlength=len(drawn)).astype(np.int64)
        total = np.bincount(column, weights=tok, minlength=len(drawn)).astype(np.int64)
        self._prefill_tok[slots] = prefill
        self._decode_tok[slots] = total - prefill

    # ------------------------------------------------------------------ queries (also for tests)

    @property
    def first_seq(self) -> int:
        return self._seq_end - self._count

    def _window_slots(self) -> np.ndarray:
        return np.arange(self.first_seq, self._seq_end) % self.capacity

    def index_image(self) -> np.ndarray:
        """The drawn codes, [lane, column], oldest step at column 0 (a copy)."""
        return self._codes[:, self._window_slots()]

    def steps_shown(self) -> np.ndarray:
        return self._step_no[self._window_slots()].copy()

    def tokens_shown(self) -> tuple[np.ndarray, np.ndarray]:
        """(prompt tokens, decode tokens) of every step shown, oldest first: the bars above."""
        slots = self._window_slots()
        return self._prefill_tok[slots].copy(), self._decode_tok[slots].copy()

    def marks(self, kind: str) -> list:
        """[(step, lane, request id)] of the marks of one kind (joined, finished, preempted)."""
        s, lanes, rid = self._marks[kind]
        slots = s % self.capacity
        return [(int(self._step_no[sl]), int(l), int(r)) for sl, l, r in zip(slots, lanes, rid)]

    def _cell(self, x: float, y: float):
        seq, lane = int(np.floor(x)), int(np.floor(y))
        if not (self.first_seq <= seq < self._seq_end and 0 <= lane < self.max_lanes):
            return None
        return seq, lane

    def request_at(self, x: float, y: float) -> int:
        """Request id drawn at view position (x = sequence, y = lane), or -1."""
        cell = self._cell(x, y)
        if cell is None:
            return -1
        seq, lane = cell
        rid = int(self._rid[lane, seq % self.capacity])
        if rid >= 0:
            return rid
        for kind in MARK_KINDS:  # a preempted request has a mark but no cell in its last step
            s, ln, r = self._marks[kind]
            hit = np.flatnonzero((s == seq) & (ln == lane))
            if hit.size:
                return int(r[hit[0]])
        return -1

    def hover_text_at(self, x: float, y: float) -> str:
        """Tooltip for the timeline cell at view position (x = sequence, y = lane)."""
        cell = self._cell(x, y)
        if cell is None:
            return ""
        seq, lane = cell
        slot = seq % self.capacity
        step_no = int(self._step_no[slot])
        rid = int(self._rid[lane, slot])
        lines = []
        if rid >= 0:
            n = int(self._ntok[lane, slot])
            lines.append(f"step {step_no} \u00b7 request {rid} (lane {lane})")
            if self._codes[lane, slot] == DECODE:
                lines.append("decode (1 token)" if n == 1 else f"decode ({n} tokens)")
            else:
                lines.append(f"prefill chunk of {n:,} tokens")
        for kind in MARK_KINDS:
            s, ln, r = self._marks[kind]
            for j in np.flatnonzero((s == seq) & (ln == lane)):
                if rid < 0:
                    lines.append(f"step {step_no} \u00b7 request {int(r[j])} (lane {lane})")
                    rid = int(r[j])
                lines.append({JOINED: "joined the batch", FINISHED: "finished",
                              PREEMPTED: "preempted (blocks freed, will recompute)"}[kind])
        if not lines:
            return ""
        lines.append(f"step duration {_fmt_ms(float(self._duration[slot]))}")
        return "\n".join(lines)

    def bar_text_at(self, x: float) -> str:
        seq = int(np.floor(x))
        if not (self.first_seq <= seq < self._seq_end):
            return ""
        sl = seq % self.capacity
        return (f"step {int(self._step_no[sl])}: {int(self._batch_size[sl]):,} requests, "
                f"{int(self._prefill_tok[sl]):,} prefill + {int(self._decode_tok[sl]):,} decode tokens\n"
                f"step duration {_fmt_ms(float(self._duration[sl]))}")

    def overflow_text(self) -> str:
        """The overflow notice ('' when every request of the window has a lane)."""
        return self._overflow_label.text()

    def _step_label(self, v: float) -> str:
        seq = int(np.floor(v + 1e-6))
        if self._count == 0:
            return str(seq)
        near = min(max(seq, self.first_seq), self._seq_end - 1)
        return str(int(self._step_no[near % self.capacity]) + (seq - near))

    # ------------------------------------------------------------------ UI

    def _build_ui(self) -> None:
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.setSpacing(2)
        self._legend = QLabel()
        self._legend.setTextFormat(Qt.TextFormat.RichText)
        self._legend.setWordWrap(True)
        layout.addWidget(self._legend)
        self._overflow_label = QLabel()
        self._overflow_label.setWordWrap(True)
        self._overflow_label.hide()
        layout.addWidget(self._overflow_label)

        self._view = pg.GraphicsLayoutWidget()
        self._view.ci.setContentsMargins(2, 2, 8, 2)
        self._view.ci.setSpacing(6)
        layout.addWidget(self._view, 1)

        self._bars = self._view.addPlot(row=0, col=0, axisItems={"left": FittingAxis("left", whole_numbers=True)})
        self._plot = self._view.addPlot(row=1, col=0, axisItems={"bottom": _StepAxis(self._step_label),
                                                                 "left": FittingAxis("left", whole_numbers=True)})
        self._view.ci.layout.setRowSpacing(0, 14)  # the bars' "0" and the first lane's "0" apart
        self._view.ci.layout.setRowStretchFactor(0, 1)
        self._view.ci.layout.setRowStretchFactor(1, 4)
        self._bars.setMinimumHeight(110)
        self._bars.setMaximumHeight(130)
        self._bars.setXLink(self._plot)
        self._bars.hideAxis("bottom")
        self._bars.setLabel("left", "tokens")
        self._bars.getAxis("left").setWidth(62)
        self._plot.getAxis("left").setWidth(62)
        self._plot.setLabel("bottom", "engine step")
        self._plot.setLabel("left", "lane")
        for p in (self._bars, self._plot):
            p.setMenuEnabled(False)
            p.setMouseEnabled(x=False, y=False)
            p.hideButtons()
        self._plot.invertY(True)

        self._image = pg.ImageItem(axisOrder="row-major")
        self._plot.addItem(self._image)
        self._highlight = pg.ImageItem(axisOrder="row-major")
        self._highlight.setZValue(5)
        self._plot.addItem(self._highlight)
        self._lane_band = pg.LinearRegionItem(orientation="horizontal", movable=False)
        self._lane_band.setZValue(4)
        self._lane_band.hide()
        self._plot.addItem(self._lane_band)
        self._scatter = {}
        for z, kind in enumerate(MARK_KINDS):
            sp = pg.ScatterPlotItem(symbol=_MARK_SYMBOL[kind], size=_MARK_SIZE, pxMode=True)
            sp.setZValue(10 + z)
            self._plot.addItem(sp)
            self._scatter[kind] = sp

        # Stacked token bars: total (prefill on top) drawn behind decode, both filled to 0.
        self._total_curve = pg.PlotDataItem(stepMode="center", fillLevel=0)
        self._decode_curve = pg.PlotDataItem(stepMode="center", fillLevel=0)
        self._bars.addItem(self._total_curve)
        self._bars.addItem(self._decode_curve)

        scene = self._view.scene()
        scene.sigMouseMoved.connect(self._on_mouse_moved)
        scene.sigMouseClicked.connect(self._on_mouse_clicked)

    def set_theme(self, theme: Theme) -> None:
        self._theme = theme
        bg, fg = theme.background, theme.foreground
        pal = self.palette()
        pal.setColor(QPalette.ColorRole.Window, QColor(*bg))
        pal.setColor(QPalette.ColorRole.WindowText, QColor(*fg))
        self.setPalette(pal)
        self.setAutoFillBackground(True)
        self._view.setBackground(bg)

        lut = np.zeros((256, 4), dtype=np.uint8)
        lut[:, :3] = bg
        lut[:, 3] = 255
        lut[DECODE, :3] = theme.decode
        for k, share in enumerate(PREFILL_SHADES):
            lut[PREFILL_SMALL + k, :3] = _blend(bg, theme.prefill, share)
        self._lut = lut
        self._image.setLookupTable(lut)

        for p in (self._bars, self._plot):
            color_axes(p, fg)
        self._total_curve.setPen(pg.mkPen(theme.prefill, width=1))
        self._total_curve.setBrush(pg.mkBrush(*theme.prefill, 230))
        self._decode_curve.setPen(pg.mkPen(theme.decode, width=1))
        self._decode_curve.setBrush(pg.mkBrush(*theme.decode, 255))

        outline = pg.mkPen(bg, width=1)
        self._scatter[JOINED].setPen(outline)
        self._scatter[JOINED].setBrush(pg.mkBrush(theme.good))
        self._scatter[FINISHED].setPen(outline)
        self._scatter[FINISHED].setBrush(pg.mkBrush(fg))
        self._scatter[PREEMPTED].setPen(outline)
        self._scatter[PREEMPTED].setBrush(pg.mkBrush(theme.warning))
        self._lane_band.setBrush(pg.mkBrush(*theme.accent, 45))
        for line in self._lane_band.lines:
            line.setPen(pg.mkPen(*theme.accent, 160))

        self._overflow_label.setStyleSheet(f"color: {hex_color(theme.warning)}; font-weight: bold;")
        self._legend.setText(self._legend_html())
        self._refresh()

    def _legend_html(self) -> str:
        t = self._theme
        sw = "<span style='color:{c}; font-size:13pt'>\u25a0</span>&nbsp;{txt}"
        mk = "<span style='color:{c}; font-size:11pt'>{g}</span>&nbsp;{txt}"
        shades = "".join(
            f"<span style='color:{hex_color(_blend(t.background, t.prefill, s))}; font-size:13pt'>\u25a0</span>"
            for s in PREFILL_SHADES)
        items = [
            sw.format(c=hex_color(t.decode), txt="decode (1 token)"),
            f"{shades}&nbsp;prefill chunk ({PREFILL_BIN_LABELS[0].replace('<', '&lt;')} \u2026 {PREFILL_BIN_LABELS[-1]} tokens)",
            mk.format(c=hex_color(t.good), g=_MARK_GLYPH[JOINED], txt="joined (refill)"),
            mk.format(c=hex_color(t.foreground), g=_MARK_GLYPH[FINISHED], txt="finished"),
            mk.format(c=hex_color(t.warning), g=_MARK_GLYPH[PREEMPTED], txt="preempted"),
        ]
        return (f"<span style='color:{hex_color(t.foreground)}'>"
                + " &nbsp;&nbsp; ".join(items) + "</span>")

    # ------------------------------------------------------------------ drawing

    def _refresh(self) -> None:
        n, cap = self._count, self.capacity
        first = self.first_seq
        if n == 0:
            self._image.clear()
            self._highlight.clear()
            self._lane_band.hide()
            for sp in self._scatter.values():
                sp.setData([], [])
            self._total_curve.setData([], [])
            self._decode_curve.setData([], [])
            self._overflow_label.hide()
            self._plot.setXRange(0, cap, padding=0)
            self._plot.setYRange(0, 8, padding=0)
            return
        slots = self._window_slots()
        img = self._codes[:, slots]
        rect = QRectF(first, 0, n, self.max_lanes)
        self._image.setImage(img, autoLevels=False, levels=(0, 255), lut=self._lut)
        self._image.setRect(rect)

        used = np.flatnonzero(img.any(axis=1))
        top = int(used[-1]) + 1 if used.size else 0
        for kind in MARK_KINDS:
            s, ln, _ = self._marks[kind]
            if ln.size:
                top = max(top, int(ln.max()) + 1)
            self._scatter[kind].setData(s + _MARK_X_OFFSET[kind], ln + 0.5)
        top = max(top, 8)
        x0 = max(0, self._seq_end - cap)
        self._plot.setXRange(x0, x0 + cap, padding=0)
        self._plot.setYRange(0, top, padding=0)

        edges = np.arange(first, self._seq_end + 1, dtype=np.float64)
        dec = self._decode_tok[slots].astype(np.float64)
        tot = dec + self._prefill_tok[slots]
        self._total_curve.setData(edges, tot)
        self._decode_curve.setData(edges, dec)
        self._bars.setYRange(0, max(1.0, float(tot.max())) * 1.05, padding=0)

        over = int(self._overflow[slots].max())
        if over:
            self._overflow_label.setText(
                f"All {self.max_lanes} lanes taken: up to {over:,} requests per step not drawn "
                f"({self.overflow_requests_total:,} requests so far); the token bars count them.")
            self._overflow_label.show()
        else:
            self._overflow_label.setText("")
            self._overflow_label.hide()
        self._update_highlight(rect)

    def _update_highlight(self, rect=None) -> None:
        sel = self._selected
        if sel < 0 or self._count == 0:
            self._highlight.clear()
            self._lane_band.hide()
            return
        slots = self._window_slots()
        mask = self._rid[:, slots] == sel
        if not mask.any():
            self._highlight.clear()
        else:
            lut = np.zeros((2, 4), dtype=np.uint8)
            lut[1, :3] = request_color(sel)
            lut[1, 3] = 255
            self._highlight.setImage(mask.astype(np.uint8), autoLevels=False, levels=(0, 1), lut=lut)
            self._highlight.setRect(rect if rect is not None else
                                    QRectF(self.first_seq, 0, self._count, self.max_lanes))
        lane = self.lane_of(sel)
        if lane < 0 and mask.any():
            lane = int(np.flatnonzero(mask.any(axis=1))[-1])
        if lane >= 0:
            self._lane_band.setRegion((lane, lane + 1))
            self._lane_band.show()
        else:
            self._lane_band.hide()

    def select_request(self, request_id: int) -> None:
        """Highlight a request's cells and lane (no signal)."""
        self._selected = int(request_id)
        self._update_highlight()

    @property
    def selected_request(self) -> int:
        return self._selected

    # ------------------------------------------------------------------ mouse

    def _on_mouse_moved(self, scene_pos) -> None:
        text = ""
        if self._plot.vb.sceneBoundingRect().contains(scene_pos):
            p = self._plot.vb.mapSceneToView(scene_pos)
            text = self.hover_text_at(p.x(), p.y())
        elif self._bars.vb.sceneBoundingRect().contains(scene_pos):
            p = self._bars.vb.mapSceneToView(scene_pos)
            text = self.bar_text_at(p.x())
        self.last_hover_text = text
        if text:
            QToolTip.showText(QCursor.pos(), text, self._view)
        else:
            QToolTip.hideText()

    def _on_mouse_clicked(self, ev) -> None:
        if ev.button() != Qt.MouseButton.LeftButton:
            return
        pos = ev.scenePos()
        if not self._plot.vb.sceneBoundingRect().contains(pos):
            return
        p = self._plot.vb.mapSceneToView(pos)
        rid = self.request_at(p.x(), p.y())
        self.select_request(rid)
        self.request_selected.emit(rid)

    def timeline_viewport(self) -> QWidget:
        return self._view.viewport()

    def timeline_pos(self, x: float, y: float):
        """Viewport pixel position of a timeline view position (for tests and tools)."""
        return self._view.mapFromScene(self._plot.vb.mapViewToScene(QPointF(x, y)))
