"""The requests the engine holds, one row each, from the snapshot's request table."""

from __future__ import annotations

import math

import numpy as np
from PySide6.QtCore import QAbstractTableModel, QModelIndex, Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTableView

from kvscope.widgets.palette import request_color

STATUS_NAMES = {0: "pending", 1: "waiting", 2: "running", 3: "finished", 4: "rejected"}

# (header, tooltip, value of a row)
COLUMNS = [
    ("request", "request id; the swatch is its colour in every panel", lambda r: f"#{r['request_id']}"),
    ("status", "waiting for admission, or running", lambda r: STATUS_NAMES.get(int(r["status"]), "?")),
    ("prompt (tokens)", "prompt length", lambda r: f"{r['num_prompt_tokens']:,}"),
    ("output (tokens)", "generated so far / requested", lambda r: f"{r['num_output_tokens']:,} / {r['max_tokens']:,}"),
    ("KV (tokens)", "tokens whose K/V are in the cache", lambda r: f"{r['num_computed_tokens']:,}"),
    ("from prefix cache (tokens)", "prompt tokens reused from the prefix cache, not recomputed",
     lambda r: f"{r['num_cached_prompt_tokens']:,}"),
    ("blocks", "KV blocks held", lambda r: f"{r['num_blocks']:,}"),
    ("preemptions", "times preempted (its blocks taken back; it recomputes)", lambda r: f"{r['num_preemptions']}"),
    ("arrival (s)", "arrival time on the engine clock", lambda r: f"{r['arrival_time_s']:.2f}"),
    ("TTFT (s)", "time to first token", lambda r: "-" if math.isnan(r["ttft_s"]) else f"{r['ttft_s']:.3f}"),
]


_DISPLAY, _DECORATION, _ALIGNMENT = Qt.DisplayRole, Qt.DecorationRole, Qt.TextAlignmentRole
_RIGHT_ALIGNED = int(Qt.AlignRight | Qt.AlignVCenter)


class RequestsModel(QAbstractTableModel):
    def __init__(self):
        super().__init__()
        self.rows = np.zeros(0)

    def set_rows(self, rows: np.ndarray) -> None:
        """New rows: those past the old count inserted or removed, the rest changed in place. A
        model reset made the view lay out every row again and repaint it all (~5 ms for 1,000)."""
        old, new = len(self.rows), len(rows)
        if new > old:
            self.beginInsertRows(QModelIndex(), old, new - 1)
            self.rows = rows
            self.endInsertRows()
        elif new < old:
            self.beginRemoveRows(QModelIndex(), new, old - 1)
            self.rows = rows
            self.endRemoveRows()
        else:
            self.rows = rows
        if min(old, new):
            self.dataChanged.emit(self.index(0, 0), self.index(min(old, new) - 1, len(COLUMNS) - 1))

    def rowCount(self, parent=QModelIndex()) -> int:  # noqa: N802
        return 0 if parent.isValid() else len(self.rows)

    def columnCount(self, parent=QModelIndex()) -> int:  # noqa: N802
        return len(COLUMNS)

    def data(self, index, role=Qt.DisplayRole):
        # The view asks ~7 roles of every visible cell on each refresh; the row (a numpy record) is
        # looked up only for the two this model answers from it.
        if role == _DISPLAY:
            return COLUMNS[index.column()][2](self.rows[index.row()])
        if role == _DECORATION and index.column() == 0:
            return QColor(*request_color(int(self.rows[index.row()]["request_id"])))
        if role == _ALIGNMENT and index.column() > 1:
            return _RIGHT_ALIGNED
        return None

    def headerData(self, section, orientation, role=Qt.DisplayRole):  # noqa: N802
        if orientation != Qt.Horizontal:
            return None
        if role == Qt.DisplayRole:
            return COLUMNS[section][0]
        if role == Qt.ToolTipRole:
            return COLUMNS[section][1]
        return None

    def row_of(self, request_id: int) -> int:
        hits = np.flatnonzero(self.rows["request_id"] == request_id) if len(self.rows) else []
        return int(hits[0]) if len(hits) else -1


class RequestsTable(QTableView):
    request_selected = Signal(int)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.model_ = RequestsModel()
        self.setModel(self.model_)
        self.setSelectionBehavior(QAbstractItemView.SelectRows)
        self.setSelectionMode(QAbstractItemView.SingleSelection)
        self.setAlternatingRowColors(True)
        self.verticalHeader().setVisible(False)
        # Sized once from a sample of rows, then left to the user: measuring every cell on every
        # refresh costs ~1 s a frame with a thousand requests.
        self.horizontalHeader().setSectionResizeMode(QHeaderView.Interactive)
        self.horizontalHeader().setResizeContentsPrecision(50)
        self.horizontalHeader().setStretchLastSection(False)
        self._sized = False
        self.selected_request = -1
        self._quiet = False
        self._unseen_rows: np.ndarray | None = None  # the newest rows given while hidden
        self.clicked.connect(self._on_clicked)

    def show_requests(self, rows: np.ndarray) -> None:
        """set_requests now, or -- hidden (a tab behind the event log, a closed dock) -- when shown:
        1,000 rows cost ~5 ms to set and nobody would see them."""
        if self.isVisible():
            self._unseen_rows = None
            self.set_requests(rows)
        else:
            self._unseen_rows = rows

    def showEvent(self, event) -> None:  # noqa: N802 - Qt's name
        super().showEvent(event)
        if self._unseen_rows is not None:
            rows, self._unseen_rows = self._unseen_rows, None
            self.set_requests(rows)

    def set_requests(self, rows: np.ndarray) -> None:
        """Rows sorted running first, then by id; the selection follows its request."""
        if len(rows):
            order = np.lexsort((rows["request_id"], rows["status"] != 2))  # running first
            rows = rows[order]
        self.model_.set_rows(rows)
        if not self._sized and len(rows):
            self.resizeColumnsToContents()
            self._sized = True
        if len(rows):
            self._fit_id_column(int(rows["request_id"].max()))
        self._restore_selection()

    def _fit_id_column(self, largest_id: int) -> None:
        """The request column widens to its longest id: sized from the first rows ("#3"), it cut
        "#1234" to "#…" later. One measurement a refresh; it never narrows (the user may widen it)."""
        text = COLUMNS[0][2]({"request_id": largest_id})
        swatch = self.iconSize().width() if self.iconSize().width() > 0 else self.style().pixelMetric(
            self.style().PixelMetric.PM_SmallIconSize)
        needed = self.fontMetrics().horizontalAdvance(text) + swatch + 4 * self.style().pixelMetric(
            self.style().PixelMetric.PM_FocusFrameHMargin) + 16
        if self.columnWidth(0) < needed:
            self.setColumnWidth(0, needed)

    def _restore_selection(self) -> None:
        row = self.model_.row_of(self.selected_request) if self.selected_request >= 0 else -1
        self._quiet = True
        if row >= 0:
            self.selectRow(row)
        else:
            self.clearSelection()
        self._quiet = False

    def select_request(self, request_id: int) -> None:
        self.selected_request = request_id
        self._restore_selection()
        row = self.model_.row_of(request_id)
        if row >= 0:
            self.scrollTo(self.model_.index(row, 0))

    def _on_clicked(self, index) -> None:
        if self._quiet or not index.isValid():
            return
        self.selected_request = int(self.model_.rows[index.row()]["request_id"])
        self.request_selected.emit(self.selected_request)
