"""A guided scenario's strip: its title, caption and question; the guess the audience commits to
before the run; and, once the run is over, the measured answer beside that guess.

Predict, then reveal: the guess is locked before anything runs, so the answer cannot be
read off the screen first. The panel only collects the guess and shows texts it is given.
"""

from __future__ import annotations

from html import escape

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from kvscope.widgets.guess_box import GuessBox
from kvscope.widgets.palette import DARK, Theme, hex_color


class ScenarioPanel(QFrame):
    guess_committed = Signal(object)  # the guess: a number in the answer's unit, or a choice's text

    def __init__(self, parent: QWidget | None = None, theme: Theme = DARK):
        super().__init__(parent)
        self._theme = theme
        self.setFrameShape(QFrame.StyledPanel)
        self.committed_guess = None
        self._revealed = None  # the reveal's parts, written again in a new theme's colours
        self._kind = "number"

        # Sizes relative to the widget's font (rich text), so demo mode's larger font scales them too.
        self.title = QLabel()
        self.title.setTextFormat(Qt.RichText)
        self.title.setWordWrap(True)  # one line at demo mode's font was 1,150 px: wider than a 1280x720 page
        self.backend = QLabel()
        self.backend.setToolTip("which engine runs this scenario: the simulated backend prices big models on "
                                "modelled hardware; the real backend runs the tiny model on this machine")
        self.caption = QLabel()
        self.caption.setWordWrap(True)
        self.question = QLabel()
        self.question.setWordWrap(True)
        self.question.setTextFormat(Qt.RichText)

        self.guess_number = GuessBox()
        self.guess_number.setToolTip("your prediction, in the unit shown; Enter commits it and runs")
        self.guess_number.lineEdit().returnPressed.connect(self.commit)
        self.guess_number.refused.connect(self.say_refused)
        self.guess_number.lineEdit().textEdited.connect(lambda _text: self.say_refused(""))
        # why a typed guess was not taken, beside the box (the box keeps the text, to be mended)
        self.guess_notice = QLabel()
        self.guess_notice.setWordWrap(True)
        self.guess_notice.hide()
        self.guess_choice = QComboBox()
        self.guess_choice.setToolTip("your prediction; the run reveals the measured answer")
        self.commit_button = QPushButton("Commit guess and run")
        self.commit_button.setToolTip("lock in the guess, then run the comparison (Space)")
        self.commit_button.clicked.connect(self.commit)
        self.guess_label = QLabel("Your guess:")

        self.reveal = QLabel()
        self.reveal.setWordWrap(True)
        self.reveal.setTextFormat(Qt.RichText)
        self.reveal.hide()

        top = QHBoxLayout()
        top.addWidget(self.title, 1)
        top.addWidget(self.backend)
        guess = QHBoxLayout()
        guess.addWidget(self.guess_label)
        guess.addWidget(self.guess_number)
        guess.addWidget(self.guess_choice)
        guess.addWidget(self.commit_button)
        guess.addWidget(self.guess_notice, 1)
        guess.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 6, 8, 6)
        layout.setSpacing(4)
        layout.addLayout(top)
        layout.addWidget(self.caption)
        layout.addWidget(self.question)
        layout.addLayout(guess)
        layout.addWidget(self.reveal)
        self.set_theme(theme)

    def set_scenario(self, title: str, caption: str, question: str, backend_text: str, unit: str = "",
                     choices: list[str] | None = None, minimum: float = 0.0, maximum: float = 1e9,
                     decimals: int = 1, initial: float | None = None) -> None:
        """A numeric answer (with its unit) unless choices are given."""
        self.title.setText(f"<span style='font-size:large; font-weight:bold'>{escape(title)}</span>")
        self.caption.setText(caption)
        self.question.setText(f"<b>{escape(question)}</b>")
        self.backend.setText(backend_text)
        self._kind = "choice" if choices else "number"
        if choices:
            self.guess_choice.clear()
            self.guess_choice.addItems(list(choices))
        else:
            self.guess_number.setDecimals(decimals)
            self.guess_number.setRange(minimum, maximum)
            self.guess_number.setSuffix(f" {unit}" if unit else "")
            self.guess_number.setValue(initial if initial is not None else minimum)
        self.guess_number.setVisible(not choices)
        self.guess_choice.setVisible(bool(choices))
        self.reset()

    def reset(self) -> None:
        """Ready for a new guess (the same scenario run again)."""
        self.committed_guess = None
        self.guess_number.setEnabled(True)
        self.guess_choice.setEnabled(True)
        self.commit_button.setEnabled(True)
        self.commit_button.setText("Commit guess and run")
        self._revealed = None
        self.reveal.clear()
        self.reveal.hide()
        self.say_refused("")
        self.caption.setVisible(bool(self.caption.text()))

    def guess_value(self):
        return self.guess_choice.currentText() if self._kind == "choice" else self.guess_number.value()

    def guess_text(self) -> str:
        return self.guess_choice.currentText() if self._kind == "choice" else self.guess_number.text()

    def say_refused(self, reason: str) -> None:
        """Why the typed guess was not taken, beside the box; "" hides it."""
        self.guess_notice.setText(reason)
        self.guess_notice.setVisible(bool(reason))

    def commit(self) -> bool:
        """Lock in the guess and say so (guess_committed); a number the box cannot take as typed is
        not committed: the reason shows beside the box. True if a guess is (now) committed."""
        if self.committed_guess is not None:
            return True
        if self._kind == "number":
            why = self.guess_number.problem()
            if why is not None:
                self.say_refused(why)
                return False
            self.guess_number.interpretText()  # typed and not yet taken (no Enter, no focus change)
        self.say_refused("")
        self.committed_guess = self.guess_value()
        self.guess_number.setEnabled(False)
        self.guess_choice.setEnabled(False)
        self.commit_button.setEnabled(False)
        self.commit_button.setText(f"Guess locked: {self.guess_text()}")
        self.caption.hide()  # read before the run; while it runs the block maps need the room
        self.guess_committed.emit(self.committed_guess)
        return True

    def show_reveal(self, answer: str, verdict: str, lesson: str = "", source: str = "") -> None:
        """answer: the measured value with its unit; source: where the run measured it; verdict: how
        the guess compares; lesson: the claim the scenario demonstrates."""
        self._revealed = (answer, verdict, lesson, source)
        t = self._theme
        self.reveal.setText(f"<span style='font-size:large'><b style='color:{hex_color(t.accent)}'>Answer: "
                            f"{escape(answer)}</b></span>" + (f" &nbsp;({escape(source)})" if source else "")
                            + (f"<br><b>Your guess:</b> {escape(verdict)}" if verdict else "")
                            + (f"<br><i>{escape(lesson)}</i>" if lesson else ""))
        self.reveal.show()

    def set_theme(self, theme: Theme) -> None:
        self._theme = theme
        self.question.setStyleSheet(f"color: {hex_color(theme.accent)};")
        self.guess_notice.setStyleSheet(f"color: {hex_color(theme.warning)};")
        if self._revealed is not None:  # its answer is in the theme's accent, written into the text
            self.show_reveal(*self._revealed)
