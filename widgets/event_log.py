"""A bounded, filterable log of engine events: the newest lines, by kind and by text."""

from __future__ import annotations

import functools
import re
from collections import deque

from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QLineEdit, QPlainTextEdit, QVBoxLayout, QWidget

from kvscope.widgets.number_box import ascii_number

ALL_KINDS = "all events"


_NUMBER = re.compile(r"[0-9]+(?:,[0-9]{3})*")


def _either_grouping(number: str) -> str:
    """A number of the filter as a pattern for it written with or without its thousands' commas: the
    log writes "a 1,024-token prompt" but "request #1200" and "block 1024", so "1024-token" and
    "request #1,200" (as the window writes numbers everywhere else) matched nothing."""
    digits = number.replace(",", "")
    head = len(digits) % 3 or 3
    return ",?".join([digits[:head], *(digits[i:i + 3] for i in range(head, len(digits), 3))])


def _as_logged(typed: str, number: re.Match) -> str:
    """A number of the filter as a pattern for it as the log writes it: its times and durations with
    their decimals ("1.500 s", "12.0 ms"), so "1.5 s" and "12 ms" matched none of them."""
    start, end = number.start(), number.end()
    if typed[start - 1:start] == "." and typed[start - 2:start - 1].isdigit():  # a fraction: its zeros after
        return re.escape(number.group()) + "0*"
    return _either_grouping(number.group()) + ("" if typed[end:end + 1] == "." else r"(?:\.0+)?")


@functools.lru_cache(maxsize=8)
def _needle(typed: str) -> re.Pattern:
    """The text filter, case ignored; a number in it is the whole number: "request #12", the
    placeholder's example, showed request #120 to #129 and #1200 on too. Its digits are read as
    the number boxes read them: "request #１２" (a CJK input method's full-width digits) found none."""
    typed = ascii_number(typed)
    before = r"(?<!\d)(?<!\d,)" if typed[:1].isdigit() else ""
    after = r"(?!\d)(?!,\d)" if typed[-1:].isdigit() else ""
    pattern, end = "", 0
    for number in _NUMBER.finditer(typed):
        pattern += re.escape(typed[end:number.start()]) + _as_logged(typed, number)
        end = number.end()
    return re.compile(f"{before}{pattern}{re.escape(typed[end:])}{after}", re.IGNORECASE)


class EventLog(QWidget):
    """The lines are (kind, text) pairs. While the log is hidden (a tab behind the requests table,
    a closed dock) what comes is only kept, unformatted: formatting and appending ~60 lines a
    frame cost ~0.8 ms of every frame nobody saw; it is formatted and shown when the log is."""

    def __init__(self, capacity: int = 5000, kinds=(), parent=None):
        super().__init__(parent)
        self.lines: deque[tuple[str, str]] = deque(maxlen=capacity)
        self._unseen: deque[tuple[list, object]] = deque()  # (items, format_line) that came while hidden
        self._unseen_count = 0
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
        needle = _needle(self.text_filter.text().strip())
        return (wanted == ALL_KINDS or kind == wanted) and needle.search(text) is not None

    def add_lines(self, lines: list, format_line=None) -> None:
        """(kind, text) pairs, oldest first -- or any items and ``format_line`` making such a pair of
        one; only the newest `capacity` are kept."""
        if not lines:
            return
        if not self.isVisible():
            self._unseen.append((lines, format_line))
            self._unseen_count += len(lines)
            while self._unseen_count - len(self._unseen[0][0]) >= self.lines.maxlen:  # wholly scrolled out
                self._unseen_count -= len(self._unseen.popleft()[0])
            return
        self._catch_up()
        if format_line is not None:
            lines = [format_line(item) for item in lines]
        self.lines.extend(lines)
        shown = [text for kind, text in lines[-self.lines.maxlen:] if self._matches(kind, text)]
        if shown:
            self.view.appendPlainText("\n".join(shown))
        self._update_count()

    def _catch_up(self) -> None:
        """Formats what came while hidden and shows the newest lines again."""
        if not self._unseen:
            return
        skip = max(0, self._unseen_count - self.lines.maxlen)  # scrolled out already: never formatted
        for items, format_line in self._unseen:
            if skip >= len(items):
                skip -= len(items)
                continue
            items, skip = items[skip:], 0
            self.lines.extend(items if format_line is None else map(format_line, items))
        self._unseen.clear()
        self._unseen_count = 0
        self._refilter()

    def showEvent(self, event) -> None:  # noqa: N802 - Qt's name
        super().showEvent(event)
        self._catch_up()

    def clear(self) -> None:
        self._unseen.clear()
        self._unseen_count = 0
        self.lines.clear()
        self.view.clear()
        self._update_count()

    def shown_lines(self) -> list[str]:
        """The lines on show (or to be shown when the log is: those that came while hidden too)."""
        self._catch_up()
        text = self.view.toPlainText()
        return text.splitlines() if text else []

    def _refilter(self) -> None:
        shown = [text for kind, text in self.lines if self._matches(kind, text)]
        self.view.setPlainText("\n".join(shown))
        self.view.moveCursor(self.view.textCursor().MoveOperation.End)
        self._update_count()

    def _filtering(self) -> bool:
        return self.kind_filter.currentText() != ALL_KINDS or bool(self.text_filter.text().strip())

    def _update_count(self) -> None:
        """What is kept and, while a filter is set, how many of those lines it shows: a filter that
        matched nothing left an empty log beside "5,000 of the last 5,000 events kept", as if nothing had come."""
        kept = f"{len(self.lines):,} of the last {self.lines.maxlen:,} events kept"
        if not self._filtering():
            self.count.setText(kept)
            return
        # the view holds the lines shown, one block each (none: one empty block)
        shown = 0 if self.view.document().isEmpty() else self.view.blockCount()
        self.count.setText(f"{shown:,} match the filter ({kept})" if shown else f"none match the filter ({kept})")
