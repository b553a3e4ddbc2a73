"""A prompt and its answer as it streams: the prompt in a muted colour, the answer after it.

Fed the whole answer so far on every update (plain strings), it appends only what is new, so a
long answer costs the same per frame as a short one; while the reader is at the end it follows the
end, and a reader who scrolled up is left where they are.
"""

from __future__ import annotations

from PySide6.QtGui import QColor, QFont, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import QFrame, QPlainTextEdit

from kvscope.widgets.long_words import has_long_word, wrap_anywhere_when
from kvscope.widgets.palette import DARK, Theme


class TextExchangeView(QPlainTextEdit):
    def __init__(self, parent=None, theme: Theme = DARK, placeholder: str = ""):
        super().__init__(parent)
        self.setReadOnly(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
        self.setPlaceholderText(placeholder)
        self._prompt = ""
        self._answer = ""
        self._long_prompt = False
        self._prompt_format = QTextCharFormat()
        self._answer_format = QTextCharFormat()
        self.set_theme(theme)

    @property
    def prompt(self) -> str:
        return self._prompt

    @property
    def answer(self) -> str:
        return self._answer

    def show_exchange(self, prompt: str, answer: str) -> None:
        """Show prompt and answer; an answer that continues the one shown is only appended."""
        if prompt == self._prompt and answer == self._answer:
            return
        bar = self.verticalScrollBar()
        following = bar.value() >= bar.maximum() - 2
        restart = prompt != self._prompt or not answer.startswith(self._answer)
        if restart:  # the prompt is read once, not on every frame of its answer
            self._long_prompt = has_long_word(prompt)
        long_word = self._long_prompt or has_long_word(answer)
        if long_word:  # a prompt of one 100,000-character word took 1 s to show and again at every resize
            wrap_anywhere_when(self, True)
        if restart:
            self.clear()
            self._prompt, self._answer = prompt, ""
            if prompt:
                self._insert(prompt + "\n\n", self._prompt_format)
        self._insert(answer[len(self._answer):], self._answer_format)
        self._answer = answer
        if not long_word:
            wrap_anywhere_when(self, False)
        if following:
            bar.setValue(bar.maximum())

    def clear(self) -> None:
        # Views with no request to show clear on every frame: an empty view cleared again was
        # repainted each time (the request inspector's, 60 times a second).
        if self._prompt or self._answer or not self.document().isEmpty():
            super().clear()
        self._prompt = self._answer = ""

    def set_point_size(self, points: float | None) -> None:
        """Text this large (demo mode: readable from the back of a room); None follows the application font."""
        if points is None:
            self.setFont(QFont())  # an empty font resolves nothing: the widget inherits again
        else:
            font = QFont(self.font())
            font.setPointSizeF(points)
            self.setFont(font)

    def set_theme(self, theme: Theme) -> None:
        self._prompt_format.setForeground(QColor(*_muted(theme)))
        self._answer_format.setForeground(QColor(*theme.foreground))
        prompt, answer = self._prompt, self._answer
        self.clear()
        self.show_exchange(prompt, answer)

    def _insert(self, text: str, fmt: QTextCharFormat) -> None:
        if not text:
            return
        cursor = self.textCursor()
        cursor.movePosition(QTextCursor.MoveOperation.End)
        cursor.insertText(text, fmt)


def _muted(theme: Theme) -> tuple:
    """Halfway between the theme's text and its background: readable, plainly secondary."""
    return tuple((f + b) // 2 for f, b in zip(theme.foreground, theme.background))
