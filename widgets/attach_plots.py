"""Plots of an attached vLLM server's metrics, one point per scrape (about a second apart): KV
cache usage, running / waiting requests, token rates, preemptions, prefix-cache hit rate, and
TTFT / inter-token / queue-time percentiles of the histogram observations between two scrapes.

``set_series`` takes plain numpy arrays keyed by name (the full history); NaN breaks a line
(nothing observed in that interval).
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtWidgets import QVBoxLayout, QWidget

from kvscope.widgets.palette import DARK, Theme, hex_color
from kvscope.widgets.view_limits import limit_zoom

TIME_LABEL = "seconds since attaching"
# plot -> (title, y label, [(series key, legend, theme colour, dashed)])
PLOTS = {
    "kv": ("KV cache usage (vllm:kv_cache_usage_perc)", "%", [("kv_usage", "in use", "warning", False)]),
    "requests": ("Requests", "requests", [("num_running", "running", "good", False),
                                          ("num_waiting", "waiting", "prefill", False)]),
    "tokens": ("Tokens per second", "tokens/s", [("generation_tokens_per_s", "output", "good", False),
                                                 ("prompt_tokens_per_s", "prompt", "prefill", False)]),
    "latency": ("Latency percentiles between scrapes", "s", [
        ("ttft_p50_s", "TTFT p50", "decode", False), ("ttft_p99_s", "TTFT p99", "decode", True),
        ("itl_p50_s", "inter-token p50", "good", False), ("itl_p99_s", "inter-token p99", "good", True),
        ("queue_time_p50_s", "queue p50", "prefill", False), ("queue_time_p99_s", "queue p99", "prefill", True)]),
    "cache": ("Prefix cache hit rate, preemptions", "% / count", [
        ("prefix_cache_hit_rate", "hit rate %", "accent", False), ("preemptions", "preemptions", "warning", False)]),
}
PERCENT = ("kv_usage", "prefix_cache_hit_rate")


class AttachPlots(QWidget):
    def __init__(self, parent: QWidget | None = None, theme: Theme = DARK):
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        self._view = pg.GraphicsLayoutWidget()
        layout.addWidget(self._view)
        self.plots: dict[str, pg.PlotItem] = {}
        self.curves: dict[str, pg.PlotDataItem] = {}
        self._styles: dict[str, tuple] = {}
        for row, (name, (title, y_label, curves)) in enumerate(PLOTS.items()):
            plot = self._view.addPlot(row=row, col=0, title=title)
            plot.setLabel("left", y_label)
            plot.setLabel("bottom", TIME_LABEL)
            plot.setMenuEnabled(False)
            plot.hideButtons()
            for axis in ("left", "bottom"):
                plot.getAxis(axis).enableAutoSIPrefix(False)  # the unit is in the label
            plot.addLegend(offset=(4, 2), labelTextSize="8pt")
            limit_zoom(plot)  # zoomed far out, its curves' downsampling raised from every repaint
            for key, legend, colour, dashed in curves:
                self.curves[key] = plot.plot([], [], name=legend, connect="finite")
                self._styles[key] = (colour, dashed)
            if row:
                plot.setXLink(self.plots["kv"])
            self.plots[name] = plot
        self.plots["kv"].setYRange(0, 100, padding=0.05)
        self.series: dict = {}
        self.set_theme(theme)

    def set_theme(self, theme: Theme) -> None:
        self._theme = theme
        self._view.setBackground(hex_color(theme.background))
        for key, curve in self.curves.items():
            colour, dashed = self._styles[key]
            pen = pg.mkPen(hex_color(getattr(theme, colour)), width=2)
            if dashed:
                pen.setStyle(pg.QtCore.Qt.PenStyle.DashLine)
            curve.setPen(pen)
        for plot in self.plots.values():
            for axis in ("left", "bottom"):
                plot.getAxis(axis).setTextPen(hex_color(theme.foreground))
                plot.getAxis(axis).setPen(hex_color(theme.grid))
            plot.setTitle(plot.titleLabel.text, color=hex_color(theme.foreground))

    def clear(self) -> None:
        self.set_series({})

    def set_series(self, series: dict) -> None:
        self.series = series
        t = np.asarray(series.get("time_s", ()), dtype=np.float64)
        for key, curve in self.curves.items():
            y = np.asarray(series.get(key, ()), dtype=np.float64)
            if len(y) != len(t):
                y = np.full(len(t), np.nan)
            curve.setData(t, y * 100 if key in PERCENT else y)
        if len(t):
            self.plots["kv"].setXRange(float(t[0]), max(float(t[-1]), float(t[0]) + 10.0), padding=0.02)
        for name in ("requests", "tokens", "latency", "cache"):
            tops = [np.nanmax(c.yData) for key, c in self.curves.items() if key in _keys(name)
                    and c.yData is not None and len(c.yData) and not np.all(np.isnan(c.yData))]
            top = max(tops, default=0.0)
            self.plots[name].setYRange(0, top * 1.15 if top > 0 else (0.1 if name == "latency" else 1.0), padding=0)


def _keys(plot: str) -> tuple:
    return tuple(key for key, *_ in PLOTS[plot][2])
