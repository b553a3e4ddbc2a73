"""The results of a comparison: one row per metric, a column per configuration, and after each
configuration but the first its ratio to the first (the baseline).

Rows come in as plain data, already in the unit their row names; the table formats them, colours
a ratio by whether the change is an improvement, and writes exactly what it shows as CSV (the
numbers unformatted, so a spreadsheet can use them).
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QFontMetrics
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTableWidget, QTableWidgetItem

from kvscope.widgets.palette import DARK, Theme
from kvscope.widgets.shown_label import shown_label

RATIO_SIGN = "\u00f7"  # B ÷ A
NEWLINE = "\n"
LABEL_WIDTH = 18  # characters a configuration's title spans before it breaks over lines
NARROW_LABEL_WIDTH = 10  # where the metric names would otherwise lose whole words ("Fragmen...")
CELL_MARGIN_PX = 12  # a cell's padding either side of its text, and a little room


@dataclass(frozen=True)
class ResultRow:
    name: str  # what is measured, e.g. "TTFT p99"
    unit: str  # the unit of every value in the row, e.g. "ms"; "" for a pure number
    values: tuple  # per configuration: a number, or None where it does not apply
    better: str = ""  # "higher" or "lower": which way a ratio is an improvement; "" for neither
    decimals: int = 1
    tooltip: str = ""
    notes: tuple = ()  # per configuration: a tooltip for its cell (e.g. how a value was measured)


def _wrapped(label: str, width: int = 18) -> str:
    """A long configuration label over lines of about `width` characters, broken at spaces."""
    # a word longer than the width stays whole: "max_num_se / qs 64" read as two words
    return NEWLINE.join(textwrap.wrap(label, width, break_long_words=False)) if len(label) > width else label


def row_title(row: ResultRow) -> str:
    return f"{row.name} ({row.unit})" if row.unit else row.name


def ratio(value, base) -> float | None:
    if value is None or base is None:
        return None
    if not (math.isfinite(value) and math.isfinite(base)) or base == 0:
        return None
    return value / base


def format_value(value, decimals: int) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "\u2013"  # an en dash: not measured / does not apply
    if isinstance(value, int) or float(value).is_integer() and decimals == 0:
        return f"{int(value):,}"
    return f"{value:,.{decimals}f}"


def format_ratio(r: float | None) -> str:
    return "\u2013" if r is None else f"\u00d7{r:.2f}"


class ResultsTable(QTableWidget):
    def __init__(self, parent=None, theme: Theme = DARK):
        super().__init__(parent)
        self._theme = theme
        self.labels: list[str] = []
        self.rows: list[ResultRow] = []
        self._base_name = ""
        self._rows_fitted_for: tuple | None = None  # (names' column width, row names) the row heights fit
        self._label_width = LABEL_WIDTH
        self._narrow_for: tuple = (None, False)  # (viewport width, labels, row names), titles narrow there
        self._floor_for: tuple = (None, 0)  # (row names, bold): the names' column's least width, measured
        self.setEditTriggers(QAbstractItemView.NoEditTriggers)
        self.setSelectionMode(QAbstractItemView.NoSelection)
        self.setFocusPolicy(Qt.NoFocus)  # the window's keys (space, arrows) stay the window's
        self.verticalHeader().setVisible(False)
        # Columns are measured once per update (fit_columns), not per cell: in ResizeToContents
        # mode every setItem re-measured its column, 0.4 ms a cell, 54 ms for a 4-configuration
        # table -- the window's slowest frame while a comparison runs.
        self.horizontalHeader().setSectionResizeMode(QHeaderView.Interactive)
        self.horizontalHeader().setStretchLastSection(False)  # a ratio stays next to its value
        self.setAlternatingRowColors(True)
        # Metric names wrap where the columns would not fit beside the plots (a 1280 px screen with
        # four configurations): a cut ratio column ("x2.(") or a scroll bar hid the answer. Numbers
        # hold no space, so they never break.
        self.setWordWrap(True)

    # -- data -------------------------------------------------------------------------------------
    def header(self, for_csv: bool = False) -> list[str]:
        """Column titles. On screen long ones break over lines (four configurations side by side
        must fit beside the plots); in CSV each is one line."""
        narrow = not for_csv and self._label_width < LABEL_WIDTH
        cols = [f"metric{NEWLINE}(unit)" if narrow else "metric (unit)"]
        for i, label in enumerate(self.labels):
            if for_csv:
                cols.append(f"{label} (baseline)" if i == 0 else label)
                if i > 0:
                    cols.append(f"{label} {RATIO_SIGN} baseline")
                continue
            shown = _wrapped(shown_label(label), self._label_width)
            cols.append(f"{shown}{NEWLINE}(baseline)" if i == 0 else shown)
            if i > 0:  # right after its configuration's column: the label would only repeat
                cols.append(f"{RATIO_SIGN}{NEWLINE if narrow else ' '}baseline")
        return cols

    def set_results(self, labels: list[str], rows: list[ResultRow]) -> None:
        """Shows these results. A frame of a running comparison changes a few numbers: cells are
        updated in place and the columns measured again only when some text changed."""
        same_shape = (list(labels) == self.labels and [r.name for r in rows] == [r.name for r in self.rows]
                      and self.rowCount() == len(rows))
        self.labels, self.rows = list(labels), list(rows)
        if not same_shape:
            self._set_header()
        changed = not same_shape
        for r, row in enumerate(rows):
            changed |= self._set(r, 0, row_title(row), row.tooltip, align=Qt.AlignLeft)
            col = 1
            base = row.values[0] if row.values else None
            for i, value in enumerate(row.values):
                note = row.notes[i] if i < len(row.notes) else ""
                changed |= self._set(r, col, format_value(value, row.decimals), note)
                col += 1
                if i > 0:
                    rt = ratio(value, base)
                    tip = f"{shown_label(labels[i])} {RATIO_SIGN} {self._base_name}"
                    changed |= self._set(r, col, format_ratio(rt), tip, color=self._ratio_color(rt, row.better))
                    col += 1
        if changed:
            self.fit_columns()

    def fit_columns(self) -> None:
        """Every column at its content's width; where that is wider than the table shows, the
        metric names' column gives up the difference and its names wrap, down to the widest word
        among them, below which the table scrolls. Before that, the configurations' titles break over
        narrower lines: at 1920x1080 in demo mode three configurations left the names twelve
        characters, "Fragmen..." and "Preempti..." elided."""
        self.resizeColumnsToContents()
        if self.isVisible() and self.columnCount() > 1:
            key = (self.viewport().width(), tuple(self.labels), tuple(r.name for r in self.rows))
            if self._narrow_for[0] != key:  # measured once per width and shape: a running comparison's frames not
                self._use_label_width(LABEL_WIDTH)
                self._narrow_for = (key, self._names_room() < self._names_floor())
            self._use_label_width(NARROW_LABEL_WIDTH if self._narrow_for[1] else LABEL_WIDTH)
            room = self._names_room()
            if self.horizontalHeader().sectionSize(0) > room:
                self.setColumnWidth(0, max(room, self._names_floor()))
        # only the names wrap (numbers hold no space): rows are measured again only when their
        # column's width or the rows themselves changed, not for every new number of a running comparison
        key = (self.columnWidth(0), tuple(r.name for r in self.rows))
        if key != self._rows_fitted_for:
            self._rows_fitted_for = key
            self.resizeRowsToContents()

    def _use_label_width(self, width: int) -> None:
        """Titles broken at `width` characters, the columns measured again if they changed."""
        if width != self._label_width:
            self._label_width = width
            for col, text in enumerate(self.header()):
                self.horizontalHeaderItem(col).setText(text)
            self.resizeColumnsToContents()

    def _names_room(self) -> int:
        header = self.horizontalHeader()
        return self.viewport().width() - sum(header.sectionSize(c) for c in range(1, self.columnCount()))

    def _names_floor(self) -> int:
        """The widest word of the metric names (in bold: the answer's row is), so that none is elided."""
        names = tuple(row_title(r) for r in self.rows)
        if self._floor_for[0] != names:
            font = self.font()
            font.setBold(True)
            widest = max((QFontMetrics(font).horizontalAdvance(w) for n in names for w in n.split()), default=0)
            self._floor_for = (names, max(widest + 2 * CELL_MARGIN_PX, 12 * self.fontMetrics().averageCharWidth()))
        return self._floor_for[1]

    def resizeEvent(self, event) -> None:  # noqa: N802
        super().resizeEvent(event)
        if self.rowCount():
            self.fit_columns()

    def showEvent(self, event) -> None:  # noqa: N802
        super().showEvent(event)
        if self.rowCount():
            self.fit_columns()

    def _set_header(self) -> None:
        header = self.header()
        self.clearContents()
        self.setColumnCount(len(header))
        self.setRowCount(len(self.rows))
        self.setHorizontalHeaderLabels(header)
        labels = [shown_label(label) for label in self.labels]  # the tooltips too: a \u202e reversed them
        self._base_name = labels[0] if labels else ""
        for col, text in enumerate(header):
            item = self.horizontalHeaderItem(col)
            if RATIO_SIGN in text:
                item.setToolTip(f"{labels[(col - 1) // 2]} {RATIO_SIGN} baseline: this configuration's value divided "
                                f"by the baseline's ({self._base_name}); green: better, red: worse")
            elif col == 1:
                item.setToolTip(f"{self._base_name}: the baseline, the configuration the others are compared with")
            elif col > 1:
                item.setToolTip(f"configuration {labels[col // 2]}")

    def emphasize_row(self, name: str) -> int | None:
        """The row named `name` (a scenario's answer) in bold, accent-coloured and scrolled into view;
        its index, or None where the table has no such row."""
        for r, row in enumerate(self.rows):
            if row.name != name:
                continue
            for col in range(self.columnCount()):
                item = self.item(r, col)
                if item is not None:
                    font = item.font()
                    font.setBold(True)
                    item.setFont(font)
                    item.setBackground(QColor(*self._theme.accent, 60))
            self._rows_fitted_for = None  # bold is wider: the row may wrap where it did not
            self.fit_columns()  # measured in regular type, the name was elided
            self.scrollToItem(self.item(r, 0), QAbstractItemView.PositionAtCenter)
            return r
        return None

    def _set(self, row: int, col: int, text: str, tooltip: str = "", align=Qt.AlignRight, color=None) -> bool:
        """Puts the text in the cell; whether the cell's text changed."""
        item = self.item(row, col)
        if item is None:
            item = QTableWidgetItem(text)
            item.setTextAlignment(align | Qt.AlignVCenter)
            self.setItem(row, col, item)
            changed = True
        else:
            changed = item.text() != text
            if changed:
                item.setText(text)
        if item.toolTip() != tooltip:
            item.setToolTip(tooltip)
        if color is not None:
            if item.foreground().color() != QColor(*color):
                item.setForeground(QColor(*color))
        elif item.data(Qt.ForegroundRole) is not None:
            item.setData(Qt.ForegroundRole, None)  # back to the theme's text colour
        return changed

    def _ratio_color(self, r: float | None, better: str):
        if r is None or not better or abs(r - 1.0) < 0.005:
            return None
        improved = (r > 1.0) == (better == "higher")
        return self._theme.good if improved else self._theme.warning

    def set_theme(self, theme: Theme) -> None:
        self._theme = theme
        if self.labels:
            labels, rows = self.labels, self.rows
            self.labels = []  # rebuilt whole: the emphasised row takes the new theme's accent too
            self.set_results(labels, rows)

    # -- what it shows, as data (the CSV export) -----------------------------------------------------
    def csv_rows(self) -> list[list]:
        """The table's rows, cell for cell, with the numbers unformatted (None for an empty cell)."""
        out = []
        for row in self.rows:
            base = row.values[0] if row.values else None
            cells: list = [row_title(row)]
            for i, value in enumerate(row.values):
                cells.append(value)
                if i > 0:
                    rt = ratio(value, base)
                    cells.append(None if rt is None else round(rt, 6))
            out.append(cells)
        return out

    def full_width(self) -> int:
        """The width that shows every column without scrolling."""
        return (self.horizontalHeader().length() + self.verticalScrollBar().sizeHint().width()
                + 2 * self.frameWidth())

    def shown_text(self, row: int, col: int) -> str:
        item = self.item(row, col)
        return item.text() if item is not None else ""
