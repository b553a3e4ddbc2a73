"""The prompt box: type a prompt, send it into the running engine, and read its answer as it streams.

Enter (or Ctrl+Return, or Send) sends the text to the live session (the protocol's submit_prompt);
the next frame says which request it became, or why the engine refused it (longer than the
context, a backend that reads no text) -- a refused prompt stays in the box with the reason under
it. The answer streams below as frames bring it. The box is off, with the reason as its tooltip,
when the engine shown cannot answer text: the simulated backend, a model without a tokenizer, a
recording being replayed. In demo mode it presents: the answer in large type, following the
request chosen in any view, else the newest typed one, else the newest still answering.
"""

from __future__ import annotations

import unicodedata

from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtGui import QColor, QFont, QPalette
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPlainTextEdit, QPushButton, QSizePolicy, QVBoxLayout, QWidget

from kvscope.app.gui.window_state import FrameUpdate
from kvscope.app.lab.chat_workload import MAX_TEXT_CHARS
from kvscope.widgets.long_words import has_long_word, wrap_anywhere_when
from kvscope.widgets.palette import DARK, Theme, hex_color
from kvscope.widgets.requests_table import STATUS_NAMES
from kvscope.widgets.text_exchange import TextExchangeView

FOCUS_KEY = "Ctrl+K"  # Ctrl+L is File > Back to the live engine
INPUT_LINES = 2  # the box's height in lines of text; Shift+Enter adds more, and it scrolls
PLACEHOLDER = "Ask the model something (Enter sends it; Shift+Enter: a new line)"
ANSWER_PLACEHOLDER = "The answer streams here, token by token, as the engine writes it."
NO_ENGINE = "no engine is running yet"
# The box's own hint when it is off: a reason of a sentence or two overflowed its two lines at
# 1280x720, so the box says only that it is off and the wrapped line under it says why.
OFF_PLACEHOLDER = "Typed prompts are off (why: below)"
QWIDGETSIZE_MAX = 16777215  # Qt's "no maximum" (PySide6 does not export it)
QUESTION_SCALE = 0.75  # demo mode: the question's type, against the answer's


class PromptInput(QPlainTextEdit):
    """A few lines of text; Enter (or Ctrl+Return) asks to send, Shift+Enter is a new line, Esc
    hands the keyboard back to the window (Space, R and the digits are the run keys there)."""

    send_requested = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setPlaceholderText(PLACEHOLDER)
        self.setTabChangesFocus(True)
        self.setSizePolicy(QSizePolicy.Expanding, QSizePolicy.Fixed)
        self._fit_height()
        # typed or pasted text is laid out after textChanged: its wrap follows (see long_words.py)
        self.textChanged.connect(lambda: wrap_anywhere_when(self, has_long_word(self.toPlainText())))

    def setPlainText(self, text: str) -> None:  # noqa: N802 - Qt's name
        if has_long_word(text):  # laid out here, at once: one 2 MB word froze the window for minutes
            wrap_anywhere_when(self, True)
        super().setPlainText(text)

    def _fit_height(self) -> None:
        line = self.fontMetrics().lineSpacing()
        self.setFixedHeight(INPUT_LINES * line + 2 * round(self.document().documentMargin()) + 2 * self.frameWidth() + 2)

    def changeEvent(self, event) -> None:  # noqa: N802
        super().changeEvent(event)
        if event.type() == QEvent.FontChange:  # demo mode's larger font: two lines still show
            self._fit_height()

    def event(self, event) -> bool:
        # The window's Ctrl+Return is Apply (it rebuilds the engine): typed here, it sends instead.
        if event.type() == QEvent.ShortcutOverride and event.key() in (Qt.Key_Return, Qt.Key_Enter):
            event.accept()
            return True
        return super().event(event)

    def keyPressEvent(self, event) -> None:  # noqa: N802
        if event.key() in (Qt.Key_Return, Qt.Key_Enter) and not event.modifiers() & Qt.ShiftModifier:
            self.send_requested.emit()
            return
        if event.key() == Qt.Key_Escape:
            self.clearFocus()
            return
        super().keyPressEvent(event)


class PromptBox(QWidget):
    """The panel's view. ``prompt_submitted`` carries the text to send; ``request_selected`` the
    request a prompt became, so every view selects it (its blocks light up in the block map)."""

    prompt_submitted = Signal(str)
    request_selected = Signal(int)
    # Whether the box can send text changed, or why it cannot: off, it hides the answer pane (no
    # answer can come) and keeps the height of its input and the reason, so the window gives the
    # rest to the panels above.
    usable_changed = Signal(bool)

    def __init__(self, parent=None, theme: Theme = DARK):
        super().__init__(parent)
        self._theme = theme
        self.input = PromptInput()
        self.input.send_requested.connect(self.send)
        self.send_button = QPushButton("Send")
        self.send_button.setToolTip("send the prompt into the running engine (Enter)")
        self.send_button.clicked.connect(self.send)
        self.status = QLabel()
        self.status.setWordWrap(True)
        self.status.setTextFormat(Qt.PlainText)
        self.question = QLabel()  # demo mode: the question, above the answer, never scrolled away
        self.question.setWordWrap(True)
        self.question.setTextFormat(Qt.PlainText)
        self.question.hide()
        self.answer = TextExchangeView(theme=theme, placeholder=ANSWER_PLACEHOLDER)
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.input, 1)
        row.addWidget(self.send_button, 0, Qt.AlignTop)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 4, 6, 4)
        layout.setSpacing(3)
        layout.addLayout(row)
        layout.addWidget(self.status)
        layout.addWidget(self.question)
        layout.addWidget(self.answer, 1)
        layout.addStretch(0)  # the answer hidden (the box is off): the reason stays under the input
        self.no_text_reason: str | None = NO_ENGINE
        self.refusal: str | None = None  # why the engine refused the last prompt sent
        self.awaiting: str | None = None  # the text sent, until a frame says what became of it
        self.typed: dict[int, str] = {}  # request id -> the text as typed, for the requests sent from here
        self.shown_request = -1  # whose answer is shown
        self.presenting = False  # demo mode
        self._selected = -1
        self._state = None  # the WindowState the latest frame was folded into
        self._drawn = None  # (request id, record version, snapshot) last drawn
        self._warning = False  # the status line says a refusal, in the theme's warning colour
        self._set_enabled_for(NO_ENGINE)
        self.set_theme(theme)

    # -- sending ----------------------------------------------------------------------------------
    def focus_input(self) -> None:
        self.input.setFocus(Qt.ShortcutFocusReason)
        self.input.selectAll()

    def send(self) -> None:
        text = self.input.toPlainText()
        if self.no_text_reason is not None or self.awaiting is not None:
            return
        if not text.strip():
            self._say("Type a prompt first.", warning=True)
            return
        if len(text) > MAX_TEXT_CHARS:  # a 10 MB paste held the engine's process ~10 s tokenizing it, to refuse it
            self._say(f"Not sent: the prompt is {len(text):,} characters; a typed prompt has at most "
                      f"{MAX_TEXT_CHARS:,}, as one message of a chat workload.", warning=True)
            return
        if not any(_visible(ch) for ch in text):  # the model would be asked nothing the user can see
            self._say(f"Not sent: the prompt's {len(text):,} character(s) are all invisible (zero-width, "
                      "direction or control characters such as NUL); type some words.", warning=True)
            return
        self.awaiting = text
        self.refusal = None
        self.send_button.setEnabled(False)
        self._say("sending to the engine ...")
        self.prompt_submitted.emit(text)

    def answered(self, request_id: int | None, refused: str | None) -> None:
        """What the engine made of the prompt sent: request_id, or the reason it refused it."""
        text, self.awaiting = self.awaiting, None
        self.send_button.setEnabled(self.no_text_reason is None)
        if refused is not None:
            self.refusal = refused
            self._say(f"Not sent: {refused}.", warning=True)  # the typed text stays in the box
            return
        if request_id is None:
            return
        self.typed[request_id] = text if text is not None else ""
        if self.input.toPlainText() == text:
            self.input.clear()
        self.shown_request = request_id
        self._drawn = None
        self.request_selected.emit(request_id)
        self.refresh()

    # -- what the window hands every view ----------------------------------------------------------
    def set_engine(self, info) -> None:
        """A new engine (or a recording) is shown: can it answer typed text?"""
        reason = NO_ENGINE if info is None else getattr(info, "no_text_reason", "this engine cannot answer text")
        self.awaiting, self.refusal, self.typed, self.shown_request, self._drawn = None, None, {}, -1, None
        self.answer.clear()
        self._set_enabled_for(reason)

    def select_request(self, request_id: int) -> None:
        self._selected = int(request_id)
        if self.presenting:
            self.refresh()

    def clear(self) -> None:
        self.answer.clear()
        self._drawn = None

    def set_theme(self, theme: Theme) -> None:
        self._theme = theme
        self.answer.set_theme(theme)
        # a box on the high-contrast theme's black needs its edge drawn, and its hint readable
        self.input.setStyleSheet(f"QPlainTextEdit {{ border: 1px solid {hex_color(theme.grid)}; }}")
        hint = QPalette()
        hint.setColor(QPalette.PlaceholderText, QColor(*((f + b) // 2 for f, b in zip(theme.foreground,
                                                                                      theme.background))))
        self.input.setPalette(hint)
        if self._warning:  # a refusal said in the previous theme's colour
            self._say(self.status.text(), warning=True)
        self._drawn = None
        self.refresh()

    def set_presenting(self, on: bool, answer_points: float | None = None) -> None:
        """Demo mode: the answer in large type, following the chosen request or the newest one."""
        self.presenting = on
        self.answer.set_point_size(answer_points if on else None)
        font = QFont()
        if on and answer_points:
            font.setPointSizeF(answer_points * QUESTION_SCALE)
            font.setBold(True)
        self.question.setFont(font)
        self.question.setVisible(on)
        self.question.clear()
        self._drawn = None
        self.refresh()

    # -- drawing ----------------------------------------------------------------------------------
    def take(self, update: FrameUpdate) -> None:
        frame = update.frame
        self._state = update.state
        submitted, refused = getattr(frame, "submitted_request_id", None), getattr(frame, "prompt_refused", None)
        if update.new_engine:
            # a prompt sent while an Apply was building reaches the new engine, and its answer comes in
            # the new engine's first frame: still awaited, else the sent text stayed in the box, as unsent
            awaiting = self.awaiting if submitted is not None or refused is not None else None
            self.set_engine(update.state.engine_info)
            self.awaiting = awaiting
        if submitted is not None or refused is not None:
            self.answered(submitted, refused)
        elif frame.error and self.awaiting is not None:  # the engine stopped: no answer is coming
            self.answered(None, "the engine stopped (see the error)")
        self.refresh()

    def refresh(self) -> None:
        state = self._state
        if state is None:
            return
        texts = state.texts
        shown = texts.shown_in_demo(self._selected) if self.presenting else self.shown_request
        record = texts.get(shown) if shown >= 0 else None
        snapshot = state.latest_snapshot
        key = (shown, record.version if record is not None else -1, id(snapshot))
        if key == self._drawn:
            return
        self._drawn = key
        if record is None:
            if shown != self.shown_request or shown < 0:
                self.answer.clear()
            if shown >= 0 and self.refusal is None and self.awaiting is None and self.no_text_reason is None:
                self._say(f"request #{shown}: waiting for its first words ...")
            return
        typed = self.typed.get(shown)
        question = typed.strip() if typed is not None else _last_user_turn(record.prompt)
        if self.presenting:
            self.question.setText(f"#{shown}: {question}")
            self.answer.show_exchange("", record.output)
        else:
            self.answer.show_exchange(f"You: {question}", record.output)
        if self.refusal is None and self.awaiting is None:
            self._say(_progress(shown, record, snapshot))

    def compact_height(self, width: int) -> int:
        """The height the box needs at this width while it is off: the input row and the reason
        under it, wrapped."""
        margins = self.layout().contentsMargins()
        row = max(self.input.height(), self.send_button.sizeHint().height())
        reason = self.status.heightForWidth(max(1, width - margins.left() - margins.right()))
        return margins.top() + row + self.layout().spacing() + reason + margins.bottom()

    def resizeEvent(self, event) -> None:  # noqa: N802
        super().resizeEvent(event)
        if event.size().width() != event.oldSize().width():
            self._fit_height()  # the reason wraps to more or fewer lines

    def _fit_height(self) -> None:
        """Off, no taller than its input and the reason (demo mode may still fold it away)."""
        self.setMaximumHeight(QWIDGETSIZE_MAX if self.no_text_reason is None else self.compact_height(self.width()))

    def _set_enabled_for(self, reason: str | None) -> None:
        changed = reason != self.no_text_reason
        self.no_text_reason = reason
        on = reason is None
        self.answer.setVisible(on)
        self.input.setEnabled(on)
        self.send_button.setEnabled(on and self.awaiting is None)
        tip = (f"Type a prompt for the running engine; Enter sends it ({FOCUS_KEY} comes here)" if on
               else f"Typed prompts are off: {reason}")
        self.input.setToolTip(tip)
        self.setToolTip("" if on else tip)
        self.input.setPlaceholderText(PLACEHOLDER if on else OFF_PLACEHOLDER)
        if not on:
            self._say(f"Typed prompts are off: {reason}.")
        else:
            self._say(f"Type a prompt and press Enter: it joins the running batch ({FOCUS_KEY} comes here).")
        self._fit_height()
        if changed:
            self.usable_changed.emit(on)

    def _say(self, text: str, warning: bool = False) -> None:
        self._warning = warning
        self.status.setText(text)
        self.status.setStyleSheet(f"color: {hex_color(self._theme.warning)}" if warning else "")

    def status_text(self) -> str:
        return self.status.text()


def _progress(request_id: int, record, snapshot) -> str:
    """The status line under the box: where the request is, and how much it has written."""
    words = f"request #{request_id}"
    if record.finished:
        return f"{words}: {record.finish_text()}."
    if snapshot is not None and len(snapshot.requests):
        rows = snapshot.requests[snapshot.requests["request_id"] == request_id]
        if len(rows):
            row = rows[0]
            status = STATUS_NAMES.get(int(row["status"]), "?")
            return (f"{words}: {status}, {int(row['num_output_tokens']):,} of at most {int(row['max_tokens']):,} "
                    f"tokens written, {int(row['num_blocks']):,} KV blocks held")
    return f"{words}: answering"


def _visible(ch: str) -> bool:
    """Not whitespace, a control (Cc: NUL), format (Cf: zero-width, direction marks), unassigned or
    surrogate character: one that shows on screen."""
    return not ch.isspace() and unicodedata.category(ch) not in ("Cc", "Cf", "Cn", "Cs")


def _last_user_turn(prompt: str) -> str:
    """The user's words of a chat-template prompt (ChatML, as SmolLM2 writes it), else the whole prompt."""
    start = prompt.rfind("<|im_start|>user\n")
    if start < 0:
        return prompt
    text = prompt[start + len("<|im_start|>user\n"):]
    return text.split("<|im_end|>", 1)[0].strip()


def show_prompt_box(view: PromptBox, update: FrameUpdate) -> None:
    view.take(update)

