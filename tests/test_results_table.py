"""The comparison's results table updates in place while a comparison runs, and says the same as a
table built from scratch."""

from __future__ import annotations

from PySide6.QtCore import Qt

from kvscope.widgets.results_table import ResultRow, ResultsTable

LABELS = ["paged, fp16 KV", "paged, fp8 KV"]


def _rows(ttft_a: float, ttft_b: float) -> list[ResultRow]:
    return [ResultRow("TTFT p50", "ms", (ttft_a, ttft_b), "lower", 1),
            ResultRow("requests running", "", (4, 7), "higher", 0)]


def test_an_update_changes_the_cells_in_place_and_reads_like_a_fresh_table(qtbot):
    table = ResultsTable()
    qtbot.addWidget(table)
    table.set_results(LABELS, _rows(100.0, 50.0))
    first_item = table.item(0, 1)
    assert table.shown_text(0, 3) == "\u00d70.50"
    assert table.item(0, 3).data(Qt.ForegroundRole) is not None  # an improvement is coloured

    table.set_results(LABELS, _rows(100.0, 100.0))
    assert table.item(0, 1) is first_item  # the same cell, not a rebuilt table
    assert table.shown_text(0, 2) == "100.0"
    assert table.shown_text(0, 3) == "\u00d71.00"
    assert table.item(0, 3).data(Qt.ForegroundRole) is None  # no change: no colour left from before

    fresh = ResultsTable()
    qtbot.addWidget(fresh)
    fresh.set_results(LABELS, _rows(100.0, 100.0))
    for r in range(table.rowCount()):
        for c in range(table.columnCount()):
            assert table.shown_text(r, c) == fresh.shown_text(r, c)


def test_new_configurations_rebuild_the_table_and_fit_its_columns(qtbot):
    table = ResultsTable()
    qtbot.addWidget(table)
    table.set_results(LABELS, _rows(1.0, 2.0))
    table.set_results(LABELS + ["a much longer configuration label"], [
        ResultRow("TTFT p50", "ms", (1.0, 2.0, 123456.7), "lower", 1)])
    assert table.columnCount() == 1 + 3 + 2 and table.rowCount() == 1
    assert table.shown_text(0, 4) == "123,456.7"
    # measured once after the update: the widest cell fits its column
    width = table.fontMetrics().horizontalAdvance("123,456.7")
    assert table.columnWidth(4) >= width


def test_the_emphasised_answer_row_is_not_cut(qtbot):
    table = ResultsTable()
    qtbot.addWidget(table)
    name = "Full-length requests that fit (memory math)"
    table.set_results(LABELS, [ResultRow(name, "sequences", (33.7, 67.4), "higher", 1)] + _rows(1.0, 2.0))
    table.emphasize_row(name)
    font = table.item(0, 0).font()
    assert font.bold()
    from PySide6.QtGui import QFontMetrics

    assert table.columnWidth(0) >= QFontMetrics(font).horizontalAdvance(f"{name} (sequences)")


def test_a_table_too_narrow_for_its_columns_wraps_the_names_instead_of_cutting_a_ratio(qtbot):
    """Four configurations beside the plots on a 1280 px screen: the last ratio column was cut
    ("x2.(") behind a scroll bar. The names' column gives up the room and its names wrap."""
    table = ResultsTable()
    qtbot.addWidget(table)
    labels = ["max_num_seqs 64", "max_num_seqs 256", "fp8 KV, max_num_seqs 256", "fp8 KV, max_num_seqs 512"]
    name = "Full-length requests that fit (memory math)"
    table.set_results(labels, [ResultRow(name, "sequences", (33.7, 33.7, 67.4, 67.4), "higher", 1)]
                      + [ResultRow("Fragmentation", "% of slots", (0.1, 0.1, 0.2, 0.2), "lower", 1)])
    table.emphasize_row(name)
    natural = table.columnWidth(0)
    table.resize(table.full_width() - natural // 2, 400)  # half the names' width short
    table.show()
    qtbot.waitExposed(table)
    header = table.horizontalHeader()
    assert header.length() <= table.viewport().width()  # every ratio in view, no scroll bar needed
    assert table.columnWidth(0) < natural
    line = table.fontMetrics().height()
    assert table.rowHeight(0) >= 2 * line  # the answer's name wrapped onto a second line, not cut
    table.resize(table.full_width() + natural, 400)  # room again: one line a name
    qtbot.waitUntil(lambda: table.rowHeight(0) < 2 * line, timeout=2000)


def test_where_names_would_lose_whole_words_the_titles_break_narrower_first(qtbot):
    """Three configurations beside the plots in demo mode at 1920x1080: the names' column went down to
    twelve characters and "Fragmentation" and "Preemptions" were elided ("Fragmen..."). Now the
    configurations' titles break over narrower lines first, never inside a word, and no word of a name
    is cut."""
    from PySide6.QtGui import QFontMetrics

    table = ResultsTable()
    qtbot.addWidget(table)
    labels = ["max_num_seqs 64", "max_num_seqs 256", "fp8 KV, max_num_seqs 256"]
    names = ["Full-length requests that fit (memory math)", "Fragmentation", "Preemptions"]
    table.set_results(labels, [ResultRow(n, "sequences", (33.7, 33.7, 67.4), "higher", 1) for n in names])
    table.emphasize_row(names[0])
    wide_header = table.header()
    table.resize(560, 400)
    table.show()
    qtbot.waitExposed(table)
    narrow_header = table.header()
    assert narrow_header != wide_header and narrow_header[1] == "max_num_seqs\n64\n(baseline)"  # whole words
    assert narrow_header[3] == "\u00f7\nbaseline"
    bold = table.item(0, 0).font()
    widest = max(QFontMetrics(bold).horizontalAdvance(w) for n in names for w in f"{n} (sequences)".split())
    assert table.columnWidth(0) > widest  # "Fragmentation" and "(sequences)" whole
    assert table.header(for_csv=True)[1] == "max_num_seqs 64 (baseline)"  # the CSV's titles stay one line
    table.resize(table.full_width() + 600, 400)  # room again: the titles on their usual lines
    qtbot.waitUntil(lambda: table.header() == wide_header, timeout=2000)
