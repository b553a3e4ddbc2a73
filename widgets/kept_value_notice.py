"""Says why a number box put back the value it had.

A spin box takes, while it is typed in, text it cannot hold ("0" in a box whose smallest value is
0.05: the start of 0.05 for all it knows); on Enter or when it loses focus Qt puts the previous value
back without a word, so a user who typed 0 saw 0.90 again and could not tell why. The notice reads
the typed text just before Qt does and hands one line to `show`, which the form puts under the field.
"""

from __future__ import annotations

import math
import re
import unicodedata
from typing import Callable

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QValidator
from PySide6.QtWidgets import QAbstractSpinBox, QDoubleSpinBox

from kvscope.widgets.number_box import (ascii_number, beyond_decimals, least_number, misplaced_group_separator,
                                        number_typed, point_grouped, spoilt_number,
                                        unit_being_typed)

_COMMITTING_KEYS = (Qt.Key.Key_Return, Qt.Key.Key_Enter)
# "2 GiB", "50%"; a unit holds no digit: "0x10" was said to be "in x10", "1/2" "in /2"
_ANOTHER_UNIT = re.compile(r"\s*([+-]?[\d,]*\.?\d+(?:[eE][+-]?\d+)?)\s*([^\d\s.,+\-_'\u2019][^\d]*?)\s*")
_PAST_A_FLOAT = re.compile(r"[+-]?[\d,]*\.?\d*[eE]\+?\d{3,}")  # an exponent a float cannot hold: infinite


def shown_value(box: QAbstractSpinBox, value) -> str:
    """value as the box writes it, with its unit (its special text at the minimum)."""
    if box.specialValueText() and value == box.minimum():
        return box.specialValueText()
    count = box.property("count_unit")  # a count's suffix follows the box's value: "1 requests" was said
    unit = (f" {count}" if value == 1 else f" {count}s") if count else box.suffix()
    return f"{box.textFromValue(value)}{unit}"


def taken_range(box: QAbstractSpinBox) -> str:
    """The values the box takes, in words, the unit said once: "1 to 1,024 tokens", or with its special
    text at the minimum "1 to 1,024 tokens, or default" (not "default to 1,024 tokens")."""
    least = box.minimum()
    if box.specialValueText():  # the least number it holds past the special value: not singleStep away
        least += 10 ** -box.decimals() if isinstance(box, QDoubleSpinBox) else 1
        # a special value below 0 stands before the numbers from 0: the arrival rate's "preset's" at -1
        # was said as "-0.99 to 1000000000.00 req/s, or preset's", and a negative rate is refused
        least = max(least, least_number(box))
    span = f"{box.textFromValue(least)} to {shown_value(box, box.maximum())}"
    return f"{span}, or {box.specialValueText()}" if box.specialValueText() else span


SHOWN_CHARS = 16  # of the typed text: a pasted 400-digit number, one unbreakable word, widened the form past its dock


def _shown(typed: str) -> str:
    return typed if len(typed) <= SHOWN_CHARS else f"{typed[:SHOWN_CHARS]}... ({len(typed):,} characters)"


def kept_value_reason(box: QAbstractSpinBox, typed: str) -> str:
    """The line for typed text the box cannot hold: its range, and the value it keeps."""
    if point_grouped(box, typed):  # "2.000" for 2,000 requests was 2; "1.000.000" "not a number"
        return (f"{_shown(typed)}: '.' is a decimal point here, not a thousands separator (1,000 or 1000), "
                f"and this field takes whole numbers: kept {shown_value(box, box.value())}")
    if spoilt_number(box, typed):  # "5k", "0x10": kept as typed, said as a key Qt dropped was
        return dropped_reason(box, typed)
    if misplaced_group_separator(box, typed):
        locale = box.locale()
        point = f"; a decimal is written with '{locale.decimalPoint()}'" if isinstance(box, QDoubleSpinBox) else ""
        return (f"{_shown(typed)}: '{locale.groupSeparator()}' only separates thousands here (1{locale.groupSeparator()}024)"
                f"{point}: kept {shown_value(box, box.value())}")
    number, ok = (box.locale().toDouble(typed) if isinstance(box, QDoubleSpinBox)
                  else box.locale().toLongLong(typed.replace(box.locale().groupSeparator(), "")))
    if not ok and typed.lstrip("+-").replace(box.locale().groupSeparator(), "").isdigit():
        number, ok = float(typed.replace(box.locale().groupSeparator(), "")), True  # past what toLongLong holds
    if not ok and not isinstance(box, QDoubleSpinBox):  # "0.5" or "5e-1" in a box of whole numbers
        number, ok = box.locale().toDouble(typed)
        ok = ok and math.isfinite(number)
    if not ok and _PAST_A_FLOAT.fullmatch(typed):  # "1e400": past what a float holds, not "not a value"
        number, ok = float(typed.replace(box.locale().groupSeparator(), "")), True
    if ok and math.isnan(number):  # Qt reads "NaN" as a number: it "has more decimals than this field keeps"
        shown = repr(typed if len(typed) <= SHOWN_CHARS else f"{typed[:SHOWN_CHARS]}...")
        return f"{shown} is not a number; this field takes {taken_range(box)}: kept {shown_value(box, box.value())}"
    if len(typed) > SHOWN_CHARS:
        typed = f"{typed[:SHOWN_CHARS]}... ({len(typed):,} characters)"
    if ok and number < least_number(box):
        why = f"{typed} is below the smallest value this field takes, {shown_value(box, least_number(box))}"
    elif ok and number > box.maximum():
        why = f"{typed} is above the largest value this field takes, {shown_value(box, box.maximum())}"
    elif ok and not isinstance(box, QDoubleSpinBox) and beyond_decimals(box, number):
        why = f"{typed} is not a whole number ({taken_range(box)})"
    elif ok and beyond_decimals(box, number):
        step = f"{box.textFromValue(10.0 ** -box.decimals())}{box.suffix()}"
        why = f"{typed} has more decimals than this field keeps (it goes in steps of {step})"
    else:
        why = f"{typed!r} is not a value this field takes ({taken_range(box)})"
    return f"{why}: kept {shown_value(box, box.value())}"


def typed_refusal(box: QAbstractSpinBox) -> str | None:
    """Why the text in the box is not a value it takes (the line `kept_value_reason` gives), or None
    when it holds a value: a number in range, or its special text ("default", "preset's"), which
    Qt's validate calls Invalid -- Enter or Tab on a box left at "default" said it was refused."""
    typed = box.cleanText().strip()
    special = box.specialValueText()
    if special and box.text().strip() == special:
        return None
    if not typed:  # emptied: Qt puts the value back as it does for text it cannot hold
        return f"the field is empty: kept {shown_value(box, box.value())}"
    if box.validate(box.text(), 0)[0] == QValidator.State.Acceptable:
        return None
    return kept_value_reason(box, typed)


def dropped_reason(box: QAbstractSpinBox, text: str) -> str:
    """The line for a key or a paste Qt dropped as no number at all: a letter, or a number copied
    with invisible characters around it (a direction mark from a right-to-left page, a zero-width
    space), which the user cannot see to remove."""
    hidden = sorted({f"U+{ord(c):04X}" for c in text if unicodedata.category(c) in ("Cf", "Cc")})
    shown = repr(text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS]) + \
        ("" if len(text) <= SHOWN_CHARS else f"... ({len(text):,} characters)")
    invisible = (f" (it holds invisible characters: {', '.join(hidden[:4])}{' ...' if len(hidden) > 4 else ''})"
                 if hidden else "")
    kept = f"{taken_range(box)}: kept {shown_value(box, box.value())}"
    unit = _ANOTHER_UNIT.fullmatch(ascii_number(text))
    # a unit: "%" or a word ("GiB", "tokens"); a lone letter is not one ("5k" may mean 5,000, "0k" a slip)
    if unit and not hidden and not (len(unit[2]) == 1 and unit[2].isalpha()):  # "5MiB" in a box of tokens, "50%" in the memory share, was "not a number"
        count = box.property("count_unit")
        mine = f", not {f'{count}s' if count else box.suffix().strip()}" if box.suffix().strip() else ""
        return f"{shown} is in {unit[2]}{mine}: type the number alone; this field takes {kept}"
    return f"{shown} is not a number{invisible}; this field takes {kept}"


class KeptValueNotice(QObject):
    """Event filter on one spin box: on Enter, or when the box loses focus, with text it cannot
    hold in it, calls show(reason) before Qt puts the previous value back. A key or a paste Qt
    drops at once (no number at all) is said too: a pasted "\u202e12" left the box as it was,
    without a word."""

    def __init__(self, box: QAbstractSpinBox, show: Callable[[str], None], taken: Callable[[], None] | None = None):
        super().__init__(box)
        self._said, self._taken = show, taken
        self._edited = False  # typed in since the last line said: a dropped key's line stays over Enter
        box.installEventFilter(self)
        box.lineEdit().inputRejected.connect(lambda: self._dropped(box))
        box.lineEdit().textEdited.connect(lambda text: self._spoilt(box, text))

    def _show(self, reason: str) -> None:
        self._edited = False
        self._said(reason)

    def _dropped(self, box: QAbstractSpinBox) -> None:
        # while the signal is emitted the line holds the text refused, before Qt puts it back
        typed = number_typed(box, box.lineEdit().text())
        if typed and box.validate(box.lineEdit().text(), 0)[0] == QValidator.State.Invalid:
            self._show(dropped_reason(box, typed))

    def _spoilt(self, box: QAbstractSpinBox, text: str) -> None:
        # a key that leaves no number ("5k") stays in the box (number_box.spoilt_number): said at once,
        # as the key Qt dropped was
        self._edited = True
        typed = number_typed(box, text)
        if (spoilt_number(box, text) and unit_being_typed(box, text) is None
                and box.validate(text, 0)[0] != QValidator.State.Acceptable):
            self._show(dropped_reason(box, typed))

    def eventFilter(self, box, event) -> bool:  # noqa: N802 - Qt's name
        kind = event.type()
        committing = kind == QEvent.Type.FocusOut or (kind == QEvent.Type.KeyPress and event.key() in _COMMITTING_KEYS)
        if committing:
            reason = typed_refusal(box)
            if reason is not None:
                self._show(reason)
            elif self._taken is not None and self._edited:  # mended to the value kept: no valueChanged,
                self._edited = False                             # the notice stood under it
                self._taken()
        return False


def notice_kept_values(boxes, show: Callable[[QAbstractSpinBox, str], None],
                       taken: Callable[[QAbstractSpinBox], None] | None = None) -> None:
    """A KeptValueNotice on each box; show(box, reason) says where; taken(box), on Enter or Tab with a
    value the box holds, lets the form check itself again (the notice goes, or a refusal stays)."""
    for box in boxes:
        KeptValueNotice(box, lambda reason, box=box: show(box, reason),
                        None if taken is None else (lambda box=box: taken(box)))
