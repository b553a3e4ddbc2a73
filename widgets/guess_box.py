"""The number box a scenario's guess is typed in: it takes the whole text as typed and judges it
when the guess is committed.

A QDoubleSpinBox filters each keystroke against its range and decimals: "1e9" arrived as 19 (the
"e" dropped), "150" in a box up to 100 as 15, "-5" as "-", and on Enter Qt put the previous value
back without a word -- and that value was locked in as the guess. Here every keystroke is kept;
Enter with text the box cannot hold keeps the text, says why (``refused``) and commits nothing,
and so does leaving the box. ``problem()`` is the one judgement, for whatever commits the guess.
"""

from __future__ import annotations

import math
import re

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QValidator
from PySide6.QtWidgets import QDoubleSpinBox

from kvscope.widgets.kept_value_notice import shown_value
from kvscope.widgets.number_box import ascii_number, grouped_as_the_box_groups, point_grouped

_COMMITTING_KEYS = (Qt.Key.Key_Return, Qt.Key.Key_Enter)
# digits as Python writes a float, an exponent included ("1e9", "2.5E3"); not "nan", "inf" or "0x1F"
_PLAIN_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


class GuessBox(QDoubleSpinBox):
    refused = Signal(str)  # why the text in the box is not a guess it takes, in one line

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setKeyboardTracking(False)

    # -- the judgement ---------------------------------------------------------------------------
    def _typed(self, text: str) -> str:
        # the unit typed by hand too ("150 %"): Qt appends its suffix to text that does not end in it;
        # digits and signs of other scripts as the number boxes read them ("５０％" was "not a number")
        # (a scenario's unit written so too: a unit "×" is the "x" typed)
        # (and as they read thousands grouped by a space, an apostrophe or "_": "1 000" was "not a
        # number" here, 1,000 in every other box; a count's singular too: "1 request")
        prefix, suffix = ascii_number(self.prefix()), ascii_number(self.suffix())
        typed = grouped_as_the_box_groups(self, ascii_number(text).removeprefix(prefix).removesuffix(suffix).strip())
        unit = suffix.strip()
        for written in (unit, unit[:-1] if unit.isalpha() and unit.endswith("s") else ""):
            if written and typed.lower().endswith(written.lower()):
                return typed[:len(typed) - len(written)].strip()
        return typed

    def read(self, text: str | None = None) -> tuple[float | None, str | None]:
        """(the value, None) for text the box holds as typed (its current text by default), else
        (None, why not)."""
        typed = self._typed(self.text() if text is None else text)
        low, high = shown_value(self, self.minimum()), shown_value(self, self.maximum())
        if not typed:
            return None, f"type a guess first: a number from {low} to {high}"
        if point_grouped(self, typed):  # "2.000" typed for 2,000 was the guess 2
            return None, (f"{typed}: '.' is a decimal point here, not a thousands separator (1,000 or 1000), and "
                          f"this guess is a whole number from {low} to {high}")
        value, ok = self.locale().toDouble(typed)
        if not ok and _PLAIN_NUMBER.fullmatch(typed):
            value, ok = float(typed), True
        if not ok:
            return None, f"{typed!r} is not a number: type a guess from {low} to {high}"
        if not math.isfinite(value):
            return None, f"{typed} is not a finite number: type a guess from {low} to {high}"
        if value < self.minimum():
            return None, f"{typed} is below the smallest guess this question takes, {low}"
        if value > self.maximum():
            return None, f"{typed} is above the largest guess this question takes, {high}"
        # "1e-400" is no number a float holds: read as 0, it was locked in as a guess of 0
        underflow = value == 0 and re.search(r"[1-9]", typed.lower().split("e")[0]) is not None
        if underflow or round(value, self.decimals()) != value:
            places = f"{self.decimals()} decimal{'s' if self.decimals() != 1 else ''}"
            return None, (f"{typed} has more decimals than this guess keeps ({places}): "
                          f"type {self.textFromValue(round(value, self.decimals()))}, say")
        return value + 0.0, None  # "-0" is the guess 0: never "You guessed -0.00 %"

    def problem(self) -> str | None:
        """Why the text in the box is not a guess (None: it is one)."""
        return self.read()[1]

    # -- Qt's side -------------------------------------------------------------------------------
    def validate(self, text: str, pos: int):
        # never Invalid: Qt would drop the keystroke, and "1e9" would arrive as 19
        state = QValidator.State.Acceptable if self.read(text)[1] is None else QValidator.State.Intermediate
        return state, text, pos

    def valueFromText(self, text: str) -> float:  # noqa: N802 - Qt's name
        value, why = self.read(text)
        return self.value() if why is not None else value

    def keyPressEvent(self, event) -> None:  # noqa: N802 - Qt's name
        if event.key() in _COMMITTING_KEYS:
            why = self.problem()
            if why is not None:  # Qt would put the previous value back, and Enter would commit it
                self.refused.emit(why)
                event.accept()
                return
        super().keyPressEvent(event)

    def focusOutEvent(self, event) -> None:  # noqa: N802 - Qt's name
        typed, why = self.lineEdit().text(), self.problem()
        super().focusOutEvent(event)  # puts the previous value back when the text is not one
        if why is not None:  # ... but the text is what the user typed: kept, to be mended
            self.lineEdit().setText(typed)
            self.refused.emit(why)
