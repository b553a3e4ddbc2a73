"""Live plots of a run, on one engine-clock axis: KV cache usage against compute utilisation (the
KV pool fills while compute still has headroom), running / waiting requests, output throughput,
per-request latency, cumulative preemptions.

``set_series`` takes plain numpy arrays every frame (the full history); the plots draw at most
``max_points`` points per curve: longer step series are reduced by a min/max (peak-keeping)
decimation, longer per-request series by even thinning that keeps the worst request.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
import shiboken6
from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QSizePolicy, QVBoxLayout, QWidget

from kvscope.widgets.fitting_axis import FittingAxis, color_axes
from kvscope.widgets.minmax_decimation import MinMaxDecimator
from kvscope.widgets.palette import DARK, Theme, hex_color
from kvscope.widgets.throttle import Throttle
from kvscope.widgets.trailing_mean import GAP_MIN_S, TrailingMean
from kvscope.widgets.uniform_scatter import give_spots_in_one_go
from kvscope.widgets.view_limits import CLOCK_MAX_S, clock_limit_for, limit_zoom, set_clock_limit

TIME_LABEL = "engine clock (s)"
LOG_FLOOR_S = 1e-3  # on the log latency axis, shorter times (a zero queue time) are drawn here
LOG_ON_SPAN, LOG_OFF_SPAN = 100.0, 30.0  # latency spread (max / 5th percentile) to switch log y on / off
# Ranges move in steps, not every frame: a new range makes pyqtgraph regenerate the tick labels of
# every axis and re-lay-out the panel (a second repaint) -- most of a frame's cost when they moved
# with each new point. The view leaves this much headroom and only moves when the data leaves it.
RANGE_HEADROOM = 0.25
RANGE_SLACK = 2.5  # shrink back once the data spans less than 1/RANGE_SLACK of the shown range

# curve name -> (plot, legend name, theme colour attribute, style)
CURVES = {
    "kv_usage": ("kv", "KV cache usage", "warning", "fill"),
    "compute_utilization": ("kv", "compute (1 s mean)", "decode", "line"),
    "num_running": ("requests", "running", "good", "line"),
    "num_waiting": ("requests", "waiting", "prefill", "line"),
    "throughput_tokens_per_s": ("throughput", "output tokens/s", "good", "line"),
    "ttft_s": ("latency", "TTFT", "decode", "o"),
    "queue_time_s": ("latency", "queue time", "prefill", "t1"),
    "preemptions": ("preemptions", "preemptions", "warning", "line"),
}
PERCENT = ("kv_usage", "compute_utilization")
STEP_SERIES = ("kv_usage", "compute_utilization", "num_running", "num_waiting",
               "throughput_tokens_per_s", "preemptions")
REQUEST_SERIES = ("ttft_s", "queue_time_s")
# Two step points further apart than GAP_MIN_S (and than GAP_FACTOR x the usual spacing) have the
# engine idle between them -- no request to run until the next arrival: the line breaks there.
GAP_FACTOR = 20
# A latency scatter of more than this many requests is redrawn at most every
# BIG_SCATTER_INTERVAL_S: rebuilding 2 x 3,000 spots took ~10 ms of every frame at maximum speed.
BIG_SCATTER_POINTS = 1000
# Compute utilisation per step swings between ~100 % (a prefill) and a few % (decodes): drawn as its
# time-weighted mean over this much engine time, it reads as one line beside the KV curve.
COMPUTE_WINDOW_S = 1.0
COMPUTE_TIP = ("Compute utilisation: achieved FLOP/s / the hardware's peak FLOP/s, i.e. the share of each step's\n"
               "time the step's FLOPs need at peak (simulated: the roofline model of the preset GPU; real backend:\n"
               "this machine's estimated peak), averaged over the last 1 s of engine time. KV cache usage: the\n"
               "share of KV blocks requests hold. The point of the plot: the KV pool fills while compute has headroom.")
BIG_SCATTER_INTERVAL_S = 0.25
# In the window the step curves are redrawn at most 20 times a second (LivePlots(step_interval_s=...)):
# over a run's whole time axis a frame's new point moves a line's end by less than a pixel, and
# redrawing and repainting six curves was ~3 ms of every 60 Hz frame. The latest series is always
# drawn, at most this much later.
STEP_CURVES_INTERVAL_S = 0.05
LATENCY_TIP = ("One point per request, drawn at the engine time its first token came (it may still be running):\n"
               "TTFT, arrival to first token; queue time, arrival to first scheduled.")

TITLES = {
    "kv": "KV cache vs compute",  # what they mean: the plot's tooltip (COMPUTE_TIP)
    "requests": "Requests",
    "throughput": "Throughput (output tokens/s)",
    "latency": "Latency (s)",
    "preemptions": "Preemptions (cumulative)",
}
Y_LABELS = {  # short: the title names the quantity, the axis gives its unit
    "kv": "%",
    "requests": "requests",
    "throughput": "tokens/s",
    "latency": "s",
    "preemptions": "count",
}


_GLYPH = {"line": "\u2501", "fill": "\u2501", "o": "\u25cf", "t1": "\u25b2"}


def _array(series: dict, key: str) -> np.ndarray:
    v = series.get(key)
    if v is None:
        return np.zeros(0, dtype=np.float64)
    a = np.asarray(v, dtype=np.float64).ravel()
    return a


def _request_series_key(arrays: list) -> tuple:
    """What the latency plot drew from: each array's buffer, length and sum (microseconds for
    thousands of requests; the series only grow, so an unchanged key means nothing new)."""
    return tuple((a.__array_interface__["data"][0], len(a), float(np.nansum(a))) for a in arrays)


def _bounds(*arrays) -> tuple | None:
    lo, hi = np.inf, -np.inf
    for a in arrays:
        if a.size:
            f = a[np.isfinite(a)]
            if f.size:
                lo, hi = min(lo, float(f.min())), max(hi, float(f.max()))
    return (lo, hi) if lo <= hi else None


TITLE_ROW_PX = 30  # pyqtgraph's fixed title row: two lines at 9 pt


def fit_title_row(label: pg.LabelItem) -> None:
    """A plot's title row as tall as its title's lines (PlotItem.setTitle fixes it at 30 px, which cut
    a wrapped or scaled title in half, or let it cover the plot's top)."""
    parent = label.parentItem()
    if isinstance(parent, pg.PlotItem) and parent.titleLabel is label and label.isVisible():
        margins = 2 * label.item.document().documentMargin()
        height = max(TITLE_ROW_PX, int(label.item.boundingRect().height() - margins) + 2)
        if parent.layout.rowMaximumHeight(0) != height:
            label.setMaximumHeight(height)
            parent.layout.setRowFixedHeight(0, height)


def let_title_shrink(label: pg.LabelItem) -> None:
    """A plot title wider than its plot wraps onto more lines (at its breakable spaces, each line
    centred), and never becomes the plot's minimum width: pyqtgraph's LabelItem re-sets its text's width
    as its minimum on every setText and resize (updateMin), which pushed the plots past a side dock and
    off the right edge of a 1280 px screen in demo mode; cut instead, the legend lost its last entry
    ("KV pool full" read "KV poo" in demo mode's large font)."""
    original = label.updateMin
    original_resize = label.resizeEvent
    text_option = label.item.document().defaultTextOption()
    text_option.setAlignment(Qt.AlignmentFlag.AlignHCenter)
    label.item.document().setDefaultTextOption(text_option)

    def resize_event(event):
        if not shiboken6.isValid(label.item):  # a closing window lays out what it is deleting
            return
        room = label.rect().width()
        label.item.setTextWidth(-1)
        if room > 0 and label.item.boundingRect().width() > room:
            label.item.setTextWidth(room)
        original_resize(event)
        # The row is re-fitted after this event, not in it: re-laying out the plot from inside its own
        # layout pass crashed a closing window (the plot deleted under the call).
        QTimer.singleShot(0, label, lambda: fit_title_row(label))

    def update_min():
        original()
        label.setMinimumWidth(0)
        height = label._sizeHint[Qt.SizeHint.MinimumSize][1]
        label._sizeHint[Qt.SizeHint.MinimumSize] = (0, height)
        label._sizeHint[Qt.SizeHint.PreferredSize] = (0, label._sizeHint[Qt.SizeHint.PreferredSize][1])
        label.updateGeometry()

    label.updateMin = update_min
    label.resizeEvent = resize_event
    update_min()


def idle_gaps(t: np.ndarray) -> np.ndarray:
    """Midpoints of the stretches where the engine stood idle between two step points: apart by
    more than GAP_MIN_S and GAP_FACTOR x the usual spacing (no request to run until the next arrival)."""
    if len(t) < 3:
        return np.zeros(0)
    dt = np.diff(t)
    typical = float(np.median(dt[::max(1, len(dt) // 2000)]))  # a sample: this runs every frame
    starts = np.flatnonzero(dt > max(GAP_MIN_S, GAP_FACTOR * typical))
    return (t[starts] + t[starts + 1]) / 2


def break_at_gaps(x: np.ndarray, y: np.ndarray, gaps: np.ndarray) -> tuple:
    """x and y with a NaN (no line drawn) at each gap: a straight line across an idle stretch
    would show work nobody did."""
    if not gaps.size or not len(x):
        return x, y
    at = np.unique(np.searchsorted(x, gaps))
    at = at[(at > 0) & (at < len(x))]
    if not at.size:
        return x, y
    return (np.insert(np.asarray(x, dtype=np.float64), at, np.nan),
            np.insert(np.asarray(y, dtype=np.float64), at, np.nan))


def thin_indices(n: int, max_points: int, keep: np.ndarray | None = None) -> np.ndarray:
    """Evenly spaced indices (at most max_points, plus the indices in keep), sorted."""
    if n <= max_points:
        return np.arange(n)
    idx = np.linspace(0, n - 1, max_points).astype(np.int64)
    if keep is not None and keep.size:
        idx = np.concatenate((idx, keep))
    return np.unique(idx)


def sticky_range(shown: tuple | None, lo: float, hi: float) -> tuple:
    """The range to show for data in [lo, hi]: ``shown`` while it still holds the data without
    leaving most of itself empty, else a new one with RANGE_HEADROOM of room above hi."""
    span = hi - lo if hi > lo else max(abs(hi), 1.0)
    if shown is not None:
        s_lo, s_hi = shown
        if s_lo <= lo and hi <= s_hi and (s_hi - s_lo) <= RANGE_SLACK * span * (1 + RANGE_HEADROOM):
            return shown
    return (lo, lo + span * (1 + RANGE_HEADROOM))


class LivePlots(QWidget):
    """Grid of live plots sharing the engine-clock x axis. Call ``set_series`` every frame."""

    def __init__(self, parent: QWidget | None = None, theme: Theme = DARK, max_points: int = 3000,
                 step_interval_s: float = 0.0):
        super().__init__(parent)
        self.max_points = int(max_points)
        self._steps_pending: dict | None = None  # the series the step curves are to show
        self._steps_throttle = Throttle(self, step_interval_s, self._draw_pending_steps)  # 0: every call
        self._compute_mean = TrailingMean(COMPUTE_WINDOW_S)  # the compute line, smoothed
        self._decimators = {key: MinMaxDecimator(self.max_points) for key in STEP_SERIES}
        self._theme = theme
        self.latency_log_y = False
        self.latency_shown = 0  # requests drawn on the latency plot
        self.latency_total = 0  # requests with a first token given
        self._latency_key: tuple | None = None  # _request_series_key of the requests drawn
        self._latency_pending: tuple | None = None  # a big scatter the throttle is to draw: _draw_latency's arguments
        self._latency_throttle = Throttle(self, BIG_SCATTER_INTERVAL_S, self._draw_pending_latency)
        self._in_set_series = False  # set_series applies the y ranges once, after everything it drew

        layout = QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        self._view = pg.GraphicsLayoutWidget()
        self._view.ci.setSpacing(4)
        layout.addWidget(self._view)

        self.plots: dict[str, pg.PlotItem] = {}
        # One column: the panel is a side dock, and plots side by side cannot shrink to its width.
        for row, name in enumerate(("kv", "requests", "throughput", "latency", "preemptions")):
            counts = name in ("requests", "preemptions")  # whole things: no tick between 0 and 1
            self.plots[name] = self._view.addPlot(row=row, col=0, axisItems={
                "left": FittingAxis("left", whole_numbers=counts), "bottom": FittingAxis("bottom")})
            self._view.ci.layout.setRowStretchFactor(row, 3 if name == "kv" else 2)

        self._follow_x = True  # x and y follow the data until the user pans or zooms; a double-click resumes
        self._shown_x: tuple | None = None
        self._shown_y: dict[str, tuple] = {}
        self._syncing = False
        for name, plot in self.plots.items():
            plot.setLabel("bottom", TIME_LABEL)
            plot.setLabel("left", Y_LABELS[name])
            plot.getAxis("left").setWidth(58)
            plot.getAxis("left").enableAutoSIPrefix(False)  # units are in the labels; no "(x0.001)"
            plot.getAxis("bottom").enableAutoSIPrefix(False)
            # No grid: pyqtgraph's grid lines cost ~13 ms a repaint of this panel (measured), most
            # of a 60 Hz frame; the tick labels and the KV wall line carry the scale.
            plot.setMenuEnabled(False)
            plot.enableAutoRange(x=False, y=False)  # sticky ranges instead (see RANGE_HEADROOM)
            # Shared x by value (setXLink would map by screen position, and the plots differ in width).
            plot.vb.sigXRangeChanged.connect(self._sync_x)
            plot.vb.sigRangeChangedManually.connect(self._stop_following)
            plot.hideButtons()  # its "A" would turn autorange back on and fight the shared x
            # Titles may be wider than a narrow dock: let them be cut rather than push the plots out.
            plot.titleLabel.setSizePolicy(QSizePolicy.Ignored, QSizePolicy.Preferred)
            let_title_shrink(plot.titleLabel)

        for name in ("requests", "throughput", "preemptions"):  # counts and rates: never below zero
            limit_zoom(self.plots[name])
        kv = self.plots["kv"]
        kv.setYRange(-8, 118, padding=0)  # room for the "0" tick label
        kv.enableAutoRange(axis="y", enable=False)
        limit_zoom(kv, y_min=-10, y_max=200)
        self._limit_latency_zoom()
        kv.vb.setToolTip(COMPUTE_TIP)
        self.plots["latency"].vb.setToolTip(LATENCY_TIP)
        # The wall is named in the legend, not on the plot: a label on the line covered the KV curve
        # exactly where it reaches 100 %, and above the line a short plot cuts it off.
        self.wall_line = pg.InfiniteLine(pos=100, angle=0, movable=False)
        self.wall_line.setZValue(5)  # over the curves, its label on the plot's background (set_theme)
        kv.addItem(self.wall_line, ignoreBounds=True)

        self.curves: dict[str, pg.PlotDataItem] = {}
        for key, (plot_name, legend, _, style) in CURVES.items():
            plot = self.plots[plot_name]
            if style in ("line", "fill"):
                # About one min/max pair per pixel: pyqtgraph's default of five samples per pixel
                # drew every one of 3,000 points on a 350-pixel plot, ~1 ms of line drawing per
                # curve and repaint; a pair per pixel draws the same envelope.
                item = plot.plot([], [], connect="finite", autoDownsampleFactor=1.0)
                item.setClipToView(True)
                item.setDownsampling(auto=True, method="peak")
                if style == "fill":
                    item.setFillLevel(0)
            else:
                item = plot.plot([], [], pen=None, symbol=style, symbolSize=6)
                give_spots_in_one_go(item.scatter)
            self.curves[key] = item
        self._x_bounds = None
        self._clock_limit_s = CLOCK_MAX_S  # widened for a run whose clock passes it (view_limits.py)
        self._view.scene().sigMouseClicked.connect(self._on_click)
        self.set_theme(theme)

    # ------------------------------------------------------------------ theme

    def set_theme(self, theme: Theme) -> None:
        self._theme = theme
        bg, fg = theme.background, theme.foreground
        pal = self.palette()
        pal.setColor(QPalette.ColorRole.Window, QColor(*bg))
        self.setPalette(pal)
        self.setAutoFillBackground(True)
        self._view.setBackground(bg)
        for name, plot in self.plots.items():
            color_axes(plot, fg)
            self._update_title(name)
        for key, (_, _, colour_attr, style) in CURVES.items():
            c = getattr(theme, colour_attr)
            item = self.curves[key]
            if style == "line":
                item.setPen(pg.mkPen(c, width=2))
            elif style == "fill":
                item.setPen(pg.mkPen(c, width=2))
                item.setBrush(pg.mkBrush(*c, 50))
            else:
                item.setSymbolPen(pg.mkPen(*c, 230))
                item.setSymbolBrush(pg.mkBrush(*c, 150))
        self.wall_line.setPen(pg.mkPen(theme.accent, width=2, style=Qt.PenStyle.DashLine))

    @property
    def theme(self) -> Theme:
        return self._theme

    def legend_html(self, name: str) -> str:
        """The legend of one plot: a coloured sample and the name of each of its curves."""
        parts = []
        for key, (plot_name, legend, colour_attr, style) in CURVES.items():
            if plot_name != name:
                continue
            glyph = _GLYPH.get(style, "\u2501")
            parts.append(f"<span style='color:{hex_color(getattr(self._theme, colour_attr))}'>{glyph}</span>"
                         f"&nbsp;{legend}")
        if name == "kv":
            parts.append(f"<span style='color:{hex_color(self._theme.accent)}'>\u254c</span>&nbsp;KV pool full")
        # A narrow plot wraps its title between entries, never inside one (a sample apart from its name).
        return "&nbsp; ".join(f"<span style='white-space:nowrap'>{part}</span>" for part in parts)

    def title_text(self, name: str) -> str:
        title = TITLES[name]
        if name == "latency":
            if self.latency_log_y:
                title += " \u2014 log y, 0 s drawn at 1 ms"
            if self.latency_shown < self.latency_total:
                title += f" \u2014 {self.latency_shown:,} of {self.latency_total:,} shown"
        return f"<b>{title}</b><br>{self.legend_html(name)}"

    def _update_title(self, name: str) -> None:
        self.plots[name].setTitle(self.title_text(name), color=hex_color(self._theme.foreground), size="9pt")

    # ------------------------------------------------------------------ x range

    def _stop_following(self, *_):
        self._follow_x = False

    def _on_click(self, ev) -> None:
        if ev.double():
            self._resume_following()

    def _resume_following(self, *_):
        self._follow_x = True
        self._shown_x = None
        self._shown_y = {}
        self._apply_x_range()
        self._apply_y_ranges()

    def _sync_x(self, vb, rng) -> None:
        if self._syncing:
            return
        self._syncing = True
        try:
            for plot in self.plots.values():
                if plot.vb is not vb:
                    plot.setXRange(rng[0], rng[1], padding=0)
        finally:
            self._syncing = False

    def _set_clock_limit(self, limit_s: float) -> None:
        if limit_s != self._clock_limit_s:
            self._clock_limit_s = limit_s
            for plot in self.plots.values():
                set_clock_limit(plot, limit_s)

    def _apply_x_range(self) -> None:
        if not self._follow_x or self._x_bounds is None:
            return
        lo, hi = self._x_bounds
        shown = sticky_range(self._shown_x, lo, hi)
        if shown != self._shown_x:
            self._shown_x = shown
            self.plots["kv"].setXRange(*shown, padding=0)

    def _apply_y_ranges(self) -> None:
        """Each plot but the fixed 0-100 % KV one: from zero (or the smallest latency) to above
        the largest value drawn, moving only when the data leaves the shown range."""
        if not self._follow_x:
            return
        for name, plot in self.plots.items():
            if name == "kv":
                continue
            ys = [item.yData for item in plot.listDataItems() if item.yData is not None and len(item.yData)]
            bounds = _bounds(*ys)
            if bounds is None:
                continue
            lo, hi = bounds
            if name == "latency" and self.latency_log_y:
                lo, hi = np.log10(max(lo, LOG_FLOOR_S)), np.log10(max(hi, LOG_FLOOR_S))
                lo = np.floor(lo)
            else:
                lo = 0.0 if lo >= 0 else lo
            shown = sticky_range(self._shown_y.get(name), lo, hi)
            if shown != self._shown_y.get(name):
                self._shown_y[name] = shown
                plot.setYRange(*shown, padding=0)

    def x_range(self, name: str = "kv") -> tuple:
        return tuple(self.plots[name].vb.viewRange()[0])

    # ------------------------------------------------------------------ data

    def clear(self) -> None:
        for item in self.curves.values():
            item.setData([], [])
        self.latency_shown = self.latency_total = 0
        self._latency_key = None
        self._latency_pending = None
        self._latency_throttle.cancel()
        self._steps_pending = None
        self._compute_mean.clear()
        for decimator in self._decimators.values():
            decimator.clear()
        self._steps_throttle.cancel()
        self._x_bounds = None
        self._set_clock_limit(CLOCK_MAX_S)
        self._follow_x = True
        self._shown_x = None
        self._shown_y = {}
        self._set_latency_log(False)
        self._update_title("latency")

    def set_series(self, series: dict) -> None:
        """Draw the run so far. Keys (numpy arrays; any may be missing or empty): per step
        time_s, kv_usage (0..1), num_running, num_waiting, throughput_tokens_per_s,
        compute_utilization (0..1), preemptions (cumulative); per request with a first token
        first_token_time_s, ttft_s, queue_time_s (seconds); finish_time_s per finished request."""
        self._in_set_series = True
        try:
            # now, or once the throttle's interval has passed: the newest show even if no frame follows
            self._steps_pending = series
            self._steps_throttle.request()
            self._set_latency(series)
        finally:
            self._in_set_series = False
        self._x_bounds = _bounds(_array(series, "time_s"), _array(series, "first_token_time_s"),
                                 _array(series, "finish_time_s"))
        if self._x_bounds is not None:
            self._set_clock_limit(clock_limit_for(self._x_bounds[1], self._clock_limit_s))
        self._apply_x_range()
        self._apply_y_ranges()

    def _draw_pending_steps(self) -> None:
        if self._steps_pending is not None:
            series, self._steps_pending = self._steps_pending, None
            self._set_step_curves(series)
            if not self._in_set_series:  # the throttle's timer: no set_series to apply them after
                self._apply_y_ranges()

    def _set_step_curves(self, series: dict) -> None:
        t = _array(series, "time_s")
        gaps = idle_gaps(t)
        for key in STEP_SERIES:
            y = _array(series, key)
            n = min(len(t), len(y))
            if n == 0:
                self.curves[key].setData([], [])
                continue
            x, y = t[len(t) - n:], y[len(y) - n:]
            if key in PERCENT:
                # Compute time is the roofline's estimate: a machine that beats its estimated peak
                # (a CPU's FLOP/s are guessed) would plot over 100 % of the time it took.
                y = np.minimum(y, 1.0) * 100.0
            if key == "compute_utilization":
                y = self._compute_mean.of(x, y)
            x, y = self._decimators[key].of(x, y)
            self.curves[key].setData(*break_at_gaps(x, y, gaps))

    def _set_latency(self, series: dict) -> None:
        ft = _array(series, "first_token_time_s")  # a request is drawn from its first token on
        drawn = _request_series_key([ft, *(_array(series, key) for key in REQUEST_SERIES)])
        if drawn == self._latency_key:
            # Most frames bring steps and no first token: setting the same spots again cost ~2 ms
            # a frame with 1,024 requests (the spots rebuilt, the plot's bounds measured again).
            self._latency_pending = None
            return
        if len(ft) > BIG_SCATTER_POINTS:
            # now, or once BIG_SCATTER_INTERVAL_S has passed: the newest show even if no frame follows
            self._latency_pending = (ft, drawn, series)
            self._latency_throttle.request()
            return
        self._latency_pending = None  # an older big scatter waiting must not be drawn over this one
        self._draw_latency(ft, drawn, series)

    def _draw_pending_latency(self) -> None:
        if self._latency_pending is not None:
            pending, self._latency_pending = self._latency_pending, None
            self._draw_latency(*pending)
            if not self._in_set_series:
                self._apply_y_ranges()

    def _draw_latency(self, ft: np.ndarray, drawn: tuple, series: dict) -> None:
        ys = {key: _array(series, key) for key in REQUEST_SERIES}
        total = max((min(len(ft), len(y)) for y in ys.values()), default=0)
        thinned = {}
        for key, y in ys.items():
            n = min(len(ft), len(y))
            if n == 0:
                thinned[key] = None
                continue
            x, y = ft[len(ft) - n:], y[len(y) - n:]
            finite = np.isfinite(y)
            worst = np.array([int(np.argmax(np.where(finite, y, -np.inf)))]) if finite.any() else None
            idx = thin_indices(n, self.max_points, worst)
            thinned[key] = (x[idx], y[idx])
        shown = max((len(v[0]) for v in thinned.values() if v is not None), default=0)

        # Log y when the latencies spread over orders of magnitude (with hysteresis).
        vals = [v[1] for v in thinned.values() if v is not None]
        if vals:
            allv = np.concatenate(vals)
            pos = allv[np.isfinite(allv) & (allv > 0)]
            if pos.size:
                span = float(pos.max()) / max(float(np.percentile(pos, 5)), LOG_FLOOR_S)
                if not self.latency_log_y and span > LOG_ON_SPAN:
                    self._set_latency_log(True)
                elif self.latency_log_y and span < LOG_OFF_SPAN:
                    self._set_latency_log(False)
        for key, v in thinned.items():
            if v is None:
                self.curves[key].setData([], [])
                continue
            x, y = v
            if self.latency_log_y:
                y = np.maximum(y, LOG_FLOOR_S)
            self.curves[key].setData(x, y)
        self._latency_key = drawn
        if (shown, total) != (self.latency_shown, self.latency_total):
            self.latency_shown, self.latency_total = shown, total
            self._update_title("latency")

    def _limit_latency_zoom(self) -> None:
        """In log mode the view's y is log10 of seconds: 0.1 ms to 1e10 s; else seconds from 0."""
        limit_zoom(self.plots["latency"], *((-4.0, 10.0) if self.latency_log_y else (0.0, 1e10)))

    def _set_latency_log(self, on: bool) -> None:
        plot = self.plots["latency"]
        if on == self.latency_log_y and plot.ctrl.logYCheck.isChecked() == on:
            return
        self.latency_log_y = on
        self._shown_y.pop("latency", None)  # log units: the shown range means something else now
        plot.setLogMode(x=False, y=on)
        self._limit_latency_zoom()
        plot.setLabel("left", "s (log)" if on else Y_LABELS["latency"])
        self._update_title("latency")
