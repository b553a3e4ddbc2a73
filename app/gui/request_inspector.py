"""The request inspector: the request selected in any view (the requests table, the block map, the
batch timeline, the prompt box) -- its prompt as the model reads it, its answer so far, where it
stands, and what its KV blocks share through the prefix cache. The block map lights its blocks
(the same selection); this panel says how many of them are shared, and with whom.

A request of a workload of token ids (a trace, a synthetic workload, a model without a tokenizer)
has no words: the panel says so, and still gives its blocks.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QSizePolicy, QVBoxLayout, QWidget

from kvscope.app.gui.request_blocks import request_blocks
from kvscope.app.gui.window_state import FrameUpdate
from kvscope.widgets.palette import DARK, Theme, hex_color, request_color
from kvscope.widgets.requests_table import STATUS_NAMES
from kvscope.widgets.text_exchange import TextExchangeView

NOTHING_SELECTED = ("Click a request in the requests table, the block map or the batch timeline to read its "
                    "prompt and its answer so far.")


class RequestInspector(QWidget):
    def __init__(self, parent=None, theme: Theme = DARK):
        super().__init__(parent)
        self._theme = theme
        self.heading = QLabel()
        self.heading.setTextFormat(Qt.RichText)
        self.facts = QLabel()
        self.facts.setWordWrap(True)
        self.facts.setTextFormat(Qt.PlainText)
        self.facts.setSizePolicy(QSizePolicy.Ignored, QSizePolicy.Preferred)  # wraps to the dock's width
        self.text = TextExchangeView(theme=theme)
        self.text.setToolTip("the prompt as the model reads it (chat template applied, muted), then its answer")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 4, 6, 4)
        layout.setSpacing(3)
        layout.addWidget(self.heading)
        layout.addWidget(self.facts)
        layout.addWidget(self.text, 1)
        self.selected = -1
        self._state = None  # the WindowState the latest frame was folded into
        self._drawn = None
        self.refresh()

    # -- what the window hands every view ----------------------------------------------------------
    def select_request(self, request_id: int) -> None:
        self.selected = max(int(request_id), -1)
        self.refresh()

    def clear(self) -> None:
        self.selected = -1
        self.refresh()

    def set_theme(self, theme: Theme) -> None:
        self._theme = theme
        self.text.set_theme(theme)
        self._drawn = None
        self.refresh()

    def take(self, update: FrameUpdate) -> None:
        self._state = update.state
        self.refresh()

    # -- drawing ----------------------------------------------------------------------------------
    def refresh(self) -> None:
        state, request_id = self._state, self.selected
        snapshot = state.latest_snapshot if state is not None else None
        record = state.texts.get(request_id) if state is not None and request_id >= 0 else None
        key = (request_id, record.version if record is not None else -1, id(snapshot), self._theme.name)
        if key == self._drawn:
            return
        self._drawn = key
        if request_id < 0:
            self.heading.setText("<b>No request selected</b>")
            self.facts.setText(NOTHING_SELECTED)
            self.text.clear()
            self.text.setPlaceholderText("")
            return
        row = _row(snapshot, request_id)
        swatch = hex_color(request_color(request_id))
        where = (STATUS_NAMES.get(int(row["status"]), "?") if row is not None
                 else record.finish_text() if record is not None and record.finished else "no longer held by the engine")
        origin = " \u00b7 typed in the prompt box" if record is not None and record.typed else ""
        self.heading.setText(f"<span style='color:{swatch}'>\u25a0</span> <b>Request #{request_id}</b> \u00b7 "
                             f"{where}{origin}")
        facts = []
        if row is not None:
            facts.append(f"{int(row['num_prompt_tokens']):,} prompt tokens, {int(row['num_output_tokens']):,} of at "
                         f"most {int(row['max_tokens']):,} output tokens written, "
                         f"{int(row['num_preemptions'])} preemptions.")
            blocks = request_blocks(snapshot, request_id)
            if blocks is not None:
                facts += blocks.sentences()
        else:
            facts.append("It holds no KV blocks now: its blocks went back to the pool (those holding a full "
                         "prefix stay cached for reuse).")
        if record is None:
            facts.append(_no_text_reason(state))
            self.text.clear()
            self.text.setPlaceholderText("no text: this request's prompt is token ids")
        else:
            self.text.show_exchange(record.prompt, record.output)
        self.facts.setText("\n".join(facts))

    def facts_text(self) -> str:
        return self.facts.text()


def _row(snapshot, request_id: int):
    if snapshot is None or not len(snapshot.requests):
        return None
    rows = snapshot.requests[snapshot.requests["request_id"] == request_id]
    return rows[0] if len(rows) else None


def _no_text_reason(state) -> str:
    info = state.engine_info if state is not None else None
    workload = getattr(getattr(info, "workload", None), "name", "this workload")
    reason = getattr(info, "no_text_reason", None)
    if reason is not None:
        return f"No words to show: its prompt is token ids, not text ({reason})."
    return (f"No words to show: its prompt is token ids from the workload {workload!r} (lengths from a trace or a "
            "distribution), not text; a chat workload such as chat-text, or the prompt box, sends text.")


def show_inspector(view: RequestInspector, update: FrameUpdate) -> None:
    view.take(update)
