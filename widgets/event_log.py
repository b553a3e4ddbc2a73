"""A bounded, filterable log of engine events: the newest lines, by kind and by text."""

from __future__ import annotations

from collections import deque

from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QLineEdit, QPlainTextEdit, QVBoxLayout, QWidget

ALL_KINDS = "all events"


class EventLog(QWidget):
    def __init__(self, capacity: int = 5000, kinds=(), parent=None):
        super().__init__(parent)
        self.lines: deque[tuple[str, str]] = deque(maxlen=capacity)
        self.kind_filter = QComboBox()
        self.kind_filter.addItems([ALL_KINDS, *kinds])
        self.kind_filter.setToolTip("show one kind of event")
        self.text_filter = QLineEdit()
        self.text_filter.setPlaceholderText("filter: text in the line, e.g. request #12")
        self.text_filter.setClearButtonEnabled(True)
        self.count = QLabel()
        self.view = QPlainTextEdit()
        self.view.setReadOnly(True)
        self.view.setMaximumBlockCount(capacity)
        self.view.setLineWrapMode(QPlainTextEdit.NoWrap)
        top = QHBoxLayout()
        top.addWidget(self.kind_filter)
        top.addWidget(self.text_filter, 1)
        top.addWidget(self.count)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(top)
        layout.addWidget(self.view)
        self.kind_filter.currentTextChanged.connect(self._refilter)
        self.text_filter.textChanged.connect(self._refilter)
        self._update_count()

    def _matches(self, kind: str, text: str) -> bool:
        wanted = self.kind_filter.currentText()
        needle = self.text_filter.text().strip().lower()
        return (wanted == ALL_KINDS or kind == wanted) and (not needle or needle in text.lower())

    def add_lines(self, lines: list[tuple[str, str]]) -> None:
        """(kind, text) pairs, oldest first; only the newest `capacity` are kept."""
        if not lines:
            return
        self.lines.extend(lines)
        shown = [text for kind, text in lines[-self.lines.maxlen:] if self._matches(kind, text)]
        if shown:
            self.view.appendPlainText("\n".join(shown))
        self._update_count()

    def clear(self) -> None:
        self.lines.clear()
        self.view.clear()
        self._update_count()

    def shown_lines(self) -> list[str]:
        text = self.view.toPlainText()
        return text.splitlines() if text else []

    def _refilter(self) -> None:
        self.view.setPlainText("\n".join(text for kind, text in self.lines if self._matches(kind, text)))
        self.view.moveCursor(self.view.textCursor().MoveOperation.End)
        self._update_count()

    def _update_count(self) -> None:
        self.count.setText(f"{len(self.lines):,} of the last {self.lines.maxlen:,} events kept")
