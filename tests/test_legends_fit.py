"""Legends and labels at a projector's 1280x720 (issue 15): each legend entry stays on one line, the
memory bar's row under the bar shows every crowded segment whole, the live plots' legend wraps instead
of being cut at the right edge, and the comparison page's splitter handle keeps clear of its legend."""

from __future__ import annotations

import pytest
from PySide6.QtGui import QTextDocument


def lines_of(html: str, width: float) -> list[str]:
    """The lines rich text breaks into at a width (non-breaking spaces read as spaces)."""
    doc = QTextDocument()
    doc.setHtml(html)
    doc.setTextWidth(width)
    return lines_laid_out(doc)


def lines_laid_out(doc: QTextDocument) -> list[str]:
    doc.size()  # lays the document out
    lines = []
    block = doc.begin()
    while block.isValid():
        layout, text = block.layout(), block.text()
        for i in range(layout.lineCount()):
            line = layout.lineAt(i)
            lines.append(text[line.textStart():line.textStart() + line.textLength()].replace("\xa0", " ").strip())
        block = block.next()
    return lines


@pytest.mark.parametrize("width", [300, 420, 560])
def test_the_timeline_legend_wraps_between_entries_never_inside_one(qtbot, width):
    from kvscope.widgets.batch_timeline import BatchTimelineView

    view = BatchTimelineView()
    qtbot.addWidget(view)
    lines = lines_of(view._legend_html(), width)
    assert len(lines) > 1 or width >= 560  # narrow widths do wrap: the check below is not vacuous
    for entry in ("decode (1 token)", "joined (refill)", "finished", "preempted"):
        assert any(entry in line for line in lines), (entry, lines)
    assert any("prefill chunk (" in line and "tokens)" in line for line in lines), lines


def test_the_memory_bar_wraps_its_crowded_row_and_cuts_no_entry(qtbot):
    from kvscope.engine.units import format_bytes_short
    from kvscope.widgets.memory_bar import CROWDED_ROW_HEIGHT, MemoryBudgetBar, Segment

    bar = MemoryBudgetBar()
    qtbot.addWidget(bar)
    bar.resize(490, bar.sizeHint().height())
    bar.show()
    weights = Segment("weights", 256.57 * 2**20, (120, 120, 140))
    in_use = Segment("KV in use", 28.48 * 2**20, (40, 110, 200))
    cached = Segment("KV cached", 3.87 * 2**20, (40, 160, 90))
    free = Segment("KV free", 720 * 2**10, (220, 220, 230))  # read "KV free: 720.00 Ki…" before
    bar.set_segments("Memory budget: test", [weights, in_use, cached, free])
    entries = bar._crowded_layout(bar.crowded_segments())
    assert [seg for seg, *_ in entries] == [in_use, cached, free]
    assert all("\u2026" not in text for *_, text in entries)  # every entry whole: none elided
    assert max(row for _, _, row, _ in entries) == 1  # too many for one row at 490 px: a second one
    qtbot.waitUntil(lambda: bar.height() >= bar.minimumHeight() and bar.minimumHeight() >= 2 * CROWDED_ROW_HEIGHT)
    assert bar.segment_text(free) == "KV free: 720 KiB (0.2 %)"
    assert [format_bytes_short(n) for n in (720 * 2**10, 23.55 * 2**20, 3.874 * 2**30, 999.97 * 2**20)] == [
        "720 KiB", "23.6 MiB", "3.87 GiB", "1000 MiB"]
    bar.resize(1600, bar.height())  # wide: one row, and the widget shrinks back
    qtbot.waitUntil(lambda: max(row for _, _, row, _ in bar._crowded_layout(bar.crowded_segments())) == 0)
    assert bar.sizeHint().height() < 2 * CROWDED_ROW_HEIGHT + 62



def test_the_memory_bar_labels_sizes_to_three_digits_and_gives_the_exact_size_in_its_tooltip(qtbot):
    from kvscope.engine.units import format_bytes_short
    from kvscope.widgets.memory_bar import MemoryBudgetBar, Segment

    bar = MemoryBudgetBar()
    qtbot.addWidget(bar)
    weights = Segment("weights", 15 * 2**30, (120, 120, 140), tooltip="from model.safetensors")
    free = Segment("KV free", 2**30, (220, 220, 230))
    bar.set_segments("Memory budget: test", [weights, free])
    assert bar.segment_text(weights) == "weights: 15.0 GiB (93.8 %)"
    assert bar.tooltip_text(weights) == "weights: 15.00 GiB (16.1 GB), 93.8 % of the budget\nfrom model.safetensors"
    assert [format_bytes_short(n) for n in (512, -1536, 5 * 2**40, None)] == ["512 B", "-1.50 KiB", "5.00 TiB", "-"]

def test_a_narrow_kv_plot_wraps_its_legend_above_the_data(qtbot):
    """In demo mode the plots dock is ~420 px and the font 1.5x: the legend lost "KV pool full" at the
    right edge. It wraps now, and the title row grows so that no line is drawn over the plot."""
    from kvscope.widgets.live_plots import LivePlots

    plots = LivePlots()
    qtbot.addWidget(plots)
    plots.resize(300, 700)
    plots.show()
    kv = plots.plots["kv"]
    title = kv.titleLabel
    qtbot.waitUntil(lambda: title.item.textWidth() > 0)  # wrapped to the title's width
    assert title.item.boundingRect().width() <= title.rect().width() + 0.5
    lines = lines_laid_out(title.item.document())
    assert len(lines) >= 3 and any(line.endswith("KV pool full") for line in lines), lines
    text_height = title.item.boundingRect().height() - 2 * title.item.document().documentMargin()
    qtbot.waitUntil(lambda: title.geometry().height() >= text_height)
    # the view box (the data) starts below the title's text
    assert kv.vb.geometry().top() >= title.geometry().top() + text_height - 1
    plots.resize(900, 700)  # wide again: one line of legend, the title row back to pyqtgraph's 30 px
    qtbot.waitUntil(lambda: title.item.textWidth() < 0 and kv.layout.rowMaximumHeight(0) == 30)


def test_the_compare_page_s_splitter_handle_keeps_clear_of_the_block_legend(qtbot):
    from kvscope.app.gui.compare_window import LEGEND_CLEARANCE_PX, CompareView

    view = CompareView()
    qtbot.addWidget(view)
    view.resize(1280, 640)
    view.show()
    qtbot.waitUntil(lambda: view.block_legend.isVisible() and view.split.handle(1).isVisible())
    legend_bottom = view.block_legend.mapTo(view, view.block_legend.rect().bottomLeft()).y()
    handle_top = view.split.handle(1).mapTo(view, view.split.handle(1).rect().topLeft()).y()
    assert handle_top - legend_bottom >= LEGEND_CLEARANCE_PX


def test_three_veiled_columns_get_the_height_their_wrapped_text_needs(qtbot):
    """The reveal gives the results table more of the height, but never so much that the columns'
    text is squeezed: at demo mode's font three columns' numbers wrap to three lines, and squeezed,
    the lines overlapped."""
    from PySide6.QtGui import QFont

    from kvscope.app.gui.compare_window import REVEALED_COLUMNS_SHARE, CompareView

    view = CompareView()
    qtbot.addWidget(view)
    font = QFont(view.font())
    font.setPointSizeF(13.5)  # demo mode's 1.5x
    view.setFont(font)
    view.resize(1280, 480)
    view.show()
    view._set_columns(["max_num_seqs 64", "max_num_seqs 256", "fp8 KV, max_num_seqs 256"])
    for column in view.columns:
        column.set_veiled(True)
        column.numbers.setText("KV 0.0 % in use (the pool's size shows after the guess)\n"
                               "running 0 \u00b7 waiting 0 \u00b7 finished 0 of 100")
    qtbot.waitUntil(lambda: view._sized)  # the first layout's split is in place
    total = sum(view.split.sizes())
    view._reveal()  # the reveal's smaller share, but never less than the text needs

    def stacked_without_overlap() -> bool:
        for column in view.columns:
            parts = [column.header, column.numbers, column.veil]
            for upper, lower in zip(parts, parts[1:]):
                if upper.geometry().bottom() >= lower.geometry().top():
                    return False
            if any(part.height() < part.heightForWidth(part.width()) for part in parts):
                return False
        return True

    qtbot.waitUntil(stacked_without_overlap)
    assert view.split.sizes()[0] > int(total * REVEALED_COLUMNS_SHARE)  # the text needed more than the share
