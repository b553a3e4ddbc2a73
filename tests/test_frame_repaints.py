"""What a frame repaints (issue 15's frame budget): views with nothing new do no work, and a view
that repaints does not make Qt repaint the widgets behind it."""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QEvent, QObject
from PySide6.QtWidgets import QVBoxLayout, QWidget


class PaintCounter(QObject):
    def __init__(self, widget: QWidget):
        super().__init__()
        self.paints = 0
        widget.installEventFilter(self)

    def eventFilter(self, watched, event) -> bool:  # noqa: N802
        if event.type() == QEvent.Type.Paint:
            self.paints += 1
        return False


def _series(requests: int) -> dict:
    t = np.linspace(0.0, 10.0, 50)
    return {"time_s": t, "kv_usage": np.full(50, 0.5), "first_token_time_s": np.linspace(0.1, 9.0, requests),
            "ttft_s": np.full(requests, 0.2), "queue_time_s": np.full(requests, 0.05)}


def test_the_latency_plot_sets_its_spots_again_only_when_a_request_got_its_first_token(qtbot):
    from kvscope.widgets.live_plots import LivePlots

    plots = LivePlots()
    qtbot.addWidget(plots)
    calls = []
    original = plots.curves["ttft_s"].setData
    plots.curves["ttft_s"].setData = lambda *a, **k: (calls.append(len(a[0]) if a else 0), original(*a, **k))
    series = _series(40)
    plots.set_series(series)
    plots.set_series(dict(series, time_s=series["time_s"] + 0.1))  # a frame of steps, no new first token
    assert calls == [40]
    plots.set_series(_series(41))
    assert calls == [40, 41]
    plots.clear()  # a new engine: drawn again from nothing
    plots.set_series(series)
    assert calls[-1] == 40


def test_an_empty_text_view_cleared_again_is_not_repainted(qtbot):
    from kvscope.widgets.text_exchange import TextExchangeView

    view = TextExchangeView(placeholder="nothing yet")
    qtbot.addWidget(view)
    changes = []
    view.textChanged.connect(lambda: changes.append(1))
    view.clear()
    assert changes == []  # every frame cleared the request inspector's empty view, and it repainted
    view.show_exchange("You: hi", "Hello")
    view.clear()
    assert changes and view.toPlainText() == "" and view.answer == ""


def test_the_memory_bar_and_the_status_line_repaint_without_what_is_behind_them(qtbot):
    from kvscope.widgets.memory_bar import MemoryBudgetBar, Segment
    from kvscope.widgets.throttled_label import ThrottledLabel

    page = QWidget()
    qtbot.addWidget(page)
    bar, label = MemoryBudgetBar(), ThrottledLabel(interval_s=0.0)
    layout = QVBoxLayout(page)
    layout.addWidget(bar)
    layout.addWidget(label)
    page.resize(600, 200)
    page.show()
    qtbot.waitExposed(page)
    behind, bar_paints, label_paints = PaintCounter(page), PaintCounter(bar), PaintCounter(label)
    for frame, used in enumerate((1.0, 2.0, 3.0, 4.0), start=1):
        if frame == 2:  # the first texts laid the page out (its size hints changed): counted from here
            behind.paints = 0
        bar.set_segments("Memory budget", [Segment("weights", 10.0 * 2**30, (120, 120, 140)),
                                           Segment("KV in use", used * 2**30, (40, 110, 200))])
        label.setText(f"engine clock {used:.2f} s")
        qtbot.waitUntil(lambda: bar_paints.paints >= frame and label_paints.paints >= frame)
    assert behind.paints == 0  # each was 1 repaint of the page (and of every widget above it) a frame


def test_uniform_spots_get_the_atlas_rectangles_pyqtgraph_gives_them_without_a_lookup_each(qtbot, monkeypatch):
    import pyqtgraph as pg

    from kvscope.widgets.uniform_scatter import give_spots_in_one_go

    x, y = np.arange(1500.0), np.sin(np.arange(1500.0))
    plain, fast = pg.PlotDataItem(pen=None, symbol="o", symbolSize=6), pg.PlotDataItem(pen=None, symbol="o",
                                                                                      symbolSize=6)
    give_spots_in_one_go(fast.scatter)
    lookups = []
    atlas_type = type(fast.scatter.fragmentAtlas)
    real_getitem = atlas_type.__getitem__
    monkeypatch.setattr(atlas_type, "__getitem__", lambda atlas, styles: (lookups.append(len(styles)),
                                                                          real_getitem(atlas, styles))[1])
    for item in (plain, fast):
        item.setSymbolPen(pg.mkPen(200, 100, 50))
        item.setSymbolBrush(pg.mkBrush(200, 100, 50, 150))
        item.setData(x, y)
    assert lookups[-1] == 1 and max(lookups) == 1500  # pyqtgraph's own: one key per spot
    plain_rects, fast_rects = plain.scatter.data["sourceRect"], fast.scatter.data["sourceRect"]
    assert (fast_rects["w"] > 0).all()
    assert np.array_equal(plain_rects[["w", "h"]], fast_rects[["w", "h"]])
    # spots of several styles still go through pyqtgraph's own path
    fast.scatter.setData(x=x[:3], y=y[:3], symbol=["o", "t", "o"])
    assert lookups[-1] == 3 and (fast.scatter.data["sourceRect"]["w"] > 0).all()
