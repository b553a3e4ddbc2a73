"""The configurations of a comparison on shared axes: one curve per configuration, in its colour,
on each of KV cache usage, running requests and output tokens generated, against the one clock
they all run on. Differences read directly: the same y scale, the same moment.

``set_series`` takes plain numpy arrays per configuration; nothing here knows an engine.
"""

from __future__ import annotations

from html import escape

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QSizePolicy, QVBoxLayout, QWidget

from kvscope.widgets.fitting_axis import FittingAxis, color_axes
from kvscope.widgets.live_plots import let_title_shrink, sticky_range
from kvscope.widgets.minmax_decimation import decimate_minmax
from kvscope.widgets.palette import DARK, Theme, hex_color
from kvscope.widgets.shown_label import shown_label
from kvscope.widgets.view_limits import CLOCK_MAX_S, clock_limit_for, limit_zoom, set_clock_limit

# plot key -> (title, y axis label)
PLOTS = {
    "kv_usage": ("KV cache usage", "%"),
    "num_running": ("Running requests (batch size)", "requests"),
    "output_tokens": ("Output tokens generated", "tokens"),
    "asked": ("", ""),  # a scenario's asked quantity as measured so far; titled by set_asked_plot
}
DASHES = [Qt.SolidLine, Qt.DashLine, Qt.DotLine, Qt.DashDotLine]  # per configuration, in order
DASH_GLYPHS = ["\u2501\u2501", "\u254d\u254d", "\u2505\u2505", "\u2501\u2505"]
TIME_LABEL = "engine clock (s)"
MAX_POINTS = 4000
CURVE_WIDTH_STEP = 2.5  # px wider per configuration before the last


def configuration_colors(theme: Theme) -> list[tuple]:
    """Up to four configurations, told apart by hue and lightness in every theme."""
    return [theme.decode, theme.prefill, theme.good, theme.warning]


class ComparePlots(QWidget):
    def __init__(self, parent: QWidget | None = None, theme: Theme = DARK):
        super().__init__(parent)
        self._theme = theme
        self.labels: list[str] = []
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        # One legend for the three plots: repeated in each title, long configuration labels would
        # set the plots' minimum width wider than a projector's screen.
        self.legend = QLabel()
        self.legend.setTextFormat(Qt.RichText)
        self.legend.setWordWrap(True)
        self.legend.setAlignment(Qt.AlignCenter)
        self.legend.setToolTip("One colour and one dash per configuration. Earlier configurations are drawn wider,\n"
                               "underneath, and later ones dashed: two runs that behave identically show as a\n"
                               "dashed line on a solid one, never as one line hiding the other.")
        self._view = pg.GraphicsLayoutWidget()
        layout.addWidget(self.legend)
        layout.addWidget(self._view, 1)
        self.plots: dict[str, pg.PlotItem] = {}
        for col, key in enumerate(PLOTS):
            plot = self._view.addPlot(row=0, col=col, axisItems={
                "left": FittingAxis("left", whole_numbers=key != "kv_usage"), "bottom": FittingAxis("bottom")})
            plot.setLabel("bottom", TIME_LABEL)
            plot.setLabel("left", PLOTS[key][1])
            plot.getAxis("left").enableAutoSIPrefix(False)
            plot.getAxis("bottom").enableAutoSIPrefix(False)
            plot.setMenuEnabled(False)
            plot.hideButtons()
            limit_zoom(plot)  # from 0; finite both ways (widgets/view_limits.py)
            # sticky ranges (live_plots.sticky_range): an axis that moved every frame regenerated
            # its ticks and re-laid-out the plots, ~16 ms of a comparison's 16 ms frame
            plot.enableAutoRange(x=False, y=False)
            plot.vb.sigRangeChangedManually.connect(self._stop_following)
            plot.titleLabel.setSizePolicy(QSizePolicy.Ignored, QSizePolicy.Preferred)
            let_title_shrink(plot.titleLabel)
            self.plots[key] = plot
        self.moment_lines: list[tuple] = []  # (plot, line)
        self._following = True  # ranges follow the data until the user pans or zooms
        self._shown: dict[tuple, tuple] = {}  # (plot key, axis) -> range shown
        self._clock_limit_s = CLOCK_MAX_S  # widened for runs whose clock passes it (view_limits.py)
        self.asked_title = ""
        self.set_asked_plot(None)
        self.plots["kv_usage"].setYRange(0, 105, padding=0)
        self.plots["kv_usage"].enableAutoRange(axis="y", enable=False)
        self.curves: list[dict[str, pg.PlotDataItem]] = []
        self.set_theme(theme)

    def set_configurations(self, labels: list[str]) -> None:
        for per_config in self.curves:
            for key, item in per_config.items():
                self.plots[key].removeItem(item)
        self.labels = list(labels)
        self.curves = []
        for _ in labels:
            per_config = {}
            for key, plot in self.plots.items():
                item = plot.plot([], [])
                item.setClipToView(True)
                item.setDownsampling(auto=True, method="peak")
                per_config[key] = item
            self.curves.append(per_config)
        self.set_theme(self._theme)

    def set_asked_plot(self, title: str | None, unit: str = "", tip: str = "") -> None:
        """A fourth plot for the quantity a scenario asks about, where the other three do not show it
        (the longest pause between tokens, the prefix cache's hit rate); None hides it."""
        plot = self.plots["asked"]
        self.asked_title = title or ""
        # four plots in a row are cut off at a projector's width: the asked one takes the place of
        # the output tokens (the plot a scenario asking something else needs least)
        for key, shown in (("asked", bool(title)), ("output_tokens", not title)):
            self.plots[key].setVisible(shown)
            self.plots[key].setMaximumWidth(16777215 if shown else 0)
        plot.setLabel("left", unit)
        plot.vb.setToolTip(tip)
        self._shown.pop(("asked", "y"), None)
        plot.setTitle(f"<b>{escape(self.asked_title)}</b>", color=hex_color(self._theme.foreground), size="9pt")

    def set_asked_series(self, index: int, time_s, values) -> None:
        """One configuration's asked quantity, measured so far at each clock (already in the plot's unit)."""
        if index < len(self.curves):
            self.curves[index]["asked"].setData(np.asarray(time_s, dtype=np.float64),
                                                np.asarray(values, dtype=np.float64))
            self._follow_data()

    def mark_moment(self, time_s: float | None, text: str = "") -> None:
        """A vertical line at one moment on every plot (the reveal's decisive moment); None removes it."""
        for plot, line in self.moment_lines:
            plot.removeItem(line)
        self.moment_lines = []
        if time_s is None:
            return
        pen = pg.mkPen(self._theme.accent, width=1.5, style=Qt.DashLine)
        for key, plot in self.plots.items():
            line = pg.InfiniteLine(pos=time_s, angle=90, pen=pen, movable=False)
            line.setToolTip(text)
            plot.addItem(line, ignoreBounds=True)
            self.moment_lines.append((plot, line))

    def set_series(self, index: int, time_s: np.ndarray, kv_usage: np.ndarray, num_running: np.ndarray,
                   output_tokens: np.ndarray) -> None:
        """One configuration's run so far: per step, the clock (s), KV usage (0..1), running
        requests, and output tokens generated since the start."""
        if index >= len(self.curves):
            return
        t = np.asarray(time_s, dtype=np.float64)
        values = {"kv_usage": np.asarray(kv_usage, dtype=np.float64) * 100.0,
                  "num_running": np.asarray(num_running, dtype=np.float64),
                  "output_tokens": np.asarray(output_tokens, dtype=np.float64)}

        for key, y in values.items():  # long runs thinned keeping each bin's peaks, as the live plots do
            self.curves[index][key].setData(*decimate_minmax(t, y, MAX_POINTS))
        self._follow_data()

    def _stop_following(self, *_) -> None:
        self._following = False

    def _follow_data(self) -> None:
        """Every plot's x range holds every curve, each y range (KV fixed at 0 - 105 %) its data
        from zero, both moving only when the data leaves them."""
        if not self._following:
            return
        for key, plot in self.plots.items():
            xs, ys = [], []
            for per_config in self.curves:
                item = per_config[key]  # the data as set: getData() is clipped to the view
                x, y = item.xData, item.yData
                if x is not None and len(x):
                    xs.append((x[0], x[-1]))
                    ys.append((np.nanmin(y), np.nanmax(y)))
            if not xs:
                continue
            axes = [("x", 0.0, max(hi for _, hi in xs))]
            self._set_clock_limit(clock_limit_for(axes[0][2], self._clock_limit_s))
            if key != "kv_usage":
                axes.append(("y", min(0.0, min(lo for lo, _ in ys)), max(hi for _, hi in ys)))
            for axis, lo, hi in axes:
                shown = sticky_range(self._shown.get((key, axis)), lo, hi)
                if shown != self._shown.get((key, axis)):
                    self._shown[(key, axis)] = shown
                    (plot.setXRange if axis == "x" else plot.setYRange)(*shown, padding=0)

    def _set_clock_limit(self, limit_s: float) -> None:
        if limit_s != self._clock_limit_s:
            self._clock_limit_s = limit_s
            for plot in self.plots.values():
                set_clock_limit(plot, limit_s)

    def clear(self) -> None:
        for per_config in self.curves:
            for item in per_config.values():
                item.setData([], [])
        self.mark_moment(None)
        self._shown.clear()
        self._set_clock_limit(CLOCK_MAX_S)
        self._following = True

    def curve_data(self, index: int, key: str) -> tuple:
        return self.curves[index][key].getData()

    def set_theme(self, theme: Theme) -> None:
        self._theme = theme
        fg = theme.foreground
        self._view.setBackground(theme.background)
        colors = configuration_colors(theme)
        n = len(self.curves)
        for i, (per_config, color) in enumerate(zip(self.curves, colors)):
            # Earlier configurations are drawn wider, underneath: two identical runs (the point of
            # some comparisons) show as one line inside another instead of one hiding the other.
            # Later ones are dashed as well, so the one on top never hides the one beneath.
            width = 2 + CURVE_WIDTH_STEP * (n - 1 - i)
            for item in per_config.values():
                item.setPen(pg.mkPen(color, width=width, style=DASHES[i % len(DASHES)]))
        entries = " &nbsp;&nbsp; ".join(
            f"<span style='color:{hex_color(c)}'>{DASH_GLYPHS[i % len(DASH_GLYPHS)]}</span>&nbsp;"
            f"{escape(shown_label(label))}"
            for i, (label, c) in enumerate(zip(self.labels, colors)))
        note = " &nbsp;<i>(dashed over solid: where one line shows, the runs agree)</i>" if n > 1 else ""
        self.legend.setText(f"<span style='color:{hex_color(fg)}'>{entries}{note}</span>")
        self.legend.setStyleSheet(f"background: {hex_color(theme.background)};")
        for key, plot in self.plots.items():
            color_axes(plot, fg)
            title = self.asked_title if key == "asked" else PLOTS[key][0]
            plot.setTitle(f"<b>{escape(title)}</b>", color=hex_color(fg), size="9pt")

    @property
    def theme(self) -> Theme:
        return self._theme
