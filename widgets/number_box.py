"""Number boxes that keep what was typed, so that the form can say why it was not taken.

Qt's QSpinBox and QDoubleSpinBox judge each keystroke and each paste against their range, and drop
what could never be in it without a word: 99999999999 typed in the Requests box arrived as
9,999,999 (the last digits dropped) and was applied; -5 typed in a box from 0 arrived as 5; a
pasted 1e400 or -5 left the box as it was. Here a number out of range, or with more decimals than
the box keeps, stays in the box as typed, as text Qt calls unfinished: on Enter or Tab Qt puts the
value back, and the form's KeptValueNotice (kept_value_notice.py) says why, under the field; Apply
refuses it the same way. What is not a number at all ("abc") is still dropped as it is typed.
"""

from __future__ import annotations

import math
import re

from PySide6.QtGui import QValidator
from PySide6.QtWidgets import QAbstractSpinBox, QDoubleSpinBox, QSpinBox

# a number as typed, possibly unfinished: a sign, digits with group separators, a point, an exponent
_NUMBER_LIKE = re.compile(r"[+-]?[\d,]*\.?\d*([eE][+-]?\d*)?")


def _kept_as_typed(box: QAbstractSpinBox, text: str, state: QValidator.State) -> bool:
    """Whether text Qt would drop (Invalid) is a number the box should keep, to be refused with its reason."""
    if state != QValidator.State.Invalid or (box.specialValueText() and text == box.specialValueText()):
        return False
    typed = text.removeprefix(box.prefix()).removesuffix(box.suffix()).strip()
    # a sign alone too: dropped, "-5" typed in a box from 0 arrived as 5
    return (typed in ("-", "+") or any(c.isdigit() for c in typed)) and _NUMBER_LIKE.fullmatch(typed) is not None


def misplaced_group_separator(box: QAbstractSpinBox, text: str) -> bool:
    """Whether the number typed has a thousands separator where the box's locale puts none ("2,5",
    "1,0,2,4"): Qt drops every separator it finds, so "2,5" typed for 2.5 arrived as 25 and "0,5" as 5.
    The locale's own reading is strict about where they go (10,00,000 is a number in India)."""
    locale = box.locale()
    separator = locale.groupSeparator()
    typed = text.removeprefix(box.prefix()).removesuffix(box.suffix()).strip()
    if not separator or separator not in typed:
        return False
    return not locale.toDouble(typed)[1] and locale.toDouble(typed.replace(separator, ""))[1]


def exponent_value(box: QAbstractSpinBox, text: str) -> float | None:
    """The number typed with an exponent ("5e-1", "2.5E3"), None for text without one or no number."""
    typed = text.removeprefix(box.prefix()).removesuffix(box.suffix()).strip()
    if "e" not in typed.lower():
        return None
    value, ok = box.locale().toDouble(typed)
    return value if ok and math.isfinite(value) else None


def beyond_decimals(box: QAbstractSpinBox, value: float) -> bool:
    """Whether value has more decimals than the box keeps (0.5 in a box of whole MiB, or of requests)."""
    return round(value, box.decimals() if isinstance(box, QDoubleSpinBox) else 0) != value


class _KeepsTypedNumbers:
    """validate() for a spin box: Qt's verdict, except that a number it would drop, or read as
    another number (a misplaced separator), stays as typed.

    A number with an exponent is judged by its value: Qt counted the decimals of "5e-1" as none, so
    in a box of whole MiB it took 0.5 MiB unrounded and showed "1 MiB" (1e-9 MiB showed "0 MiB" and
    ran the default pool, int(1e-9 MiB) bytes being 0); "2.5e0" in a box of two decimals, or "1e3" in
    the Requests box, was refused as "not a value this field takes" with a range it is in. Now what
    the box can hold is taken ("2.5e0" is 2.5, "1e3" 1,000) and the rest stays as typed, refused with
    its reason."""

    def validate(self, text: str, pos: int):
        value = exponent_value(self, text)
        if value is not None:
            fits = self.minimum() <= value <= self.maximum() and not beyond_decimals(self, value)
            return (QValidator.State.Acceptable if fits else QValidator.State.Intermediate), text, pos
        state, text_out, pos_out = super().validate(text, pos)
        if _kept_as_typed(self, text, state) or (state != QValidator.State.Invalid
                                                 and misplaced_group_separator(self, text)):
            return QValidator.State.Intermediate, text, pos
        return state, text_out, pos_out

    def fixup(self, text: str) -> str:
        # Qt's fixup removes the separators of a box that shows none: the seed's "2,5" became 25 on Enter
        return text if misplaced_group_separator(self, text) else super().fixup(text)


class NumberBox(_KeepsTypedNumbers, QSpinBox):
    """A QSpinBox that keeps an out-of-range number as typed (see the module)."""

    def valueFromText(self, text: str) -> int:  # noqa: N802 - Qt's name
        value = exponent_value(self, text)
        return super().valueFromText(text) if value is None else int(value)


class DecimalBox(_KeepsTypedNumbers, QDoubleSpinBox):
    """A QDoubleSpinBox that keeps an out-of-range number, or one with too many decimals, as typed."""

    def valueFromText(self, text: str) -> float:  # noqa: N802 - Qt's name
        value = exponent_value(self, text)
        return super().valueFromText(text) if value is None else value
