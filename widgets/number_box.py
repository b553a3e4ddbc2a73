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
import unicodedata
from decimal import Decimal, InvalidOperation

from PySide6.QtGui import QValidator
from PySide6.QtWidgets import QAbstractSpinBox, QDoubleSpinBox, QSpinBox

# a number as typed, possibly unfinished: a sign, digits with group separators, a point, an exponent
_NUMBER_LIKE = re.compile(r"[+-]?[\d,]*\.?\d*([eE][+-]?\d*)?")
_NUMBER_START = re.compile(r"[+-][.,]?|[+-]?[.,]")  # what a number's first keys type before a digit


def number_typed(box: QAbstractSpinBox, text: str) -> str:
    """The number a box's text holds as typed: without the box's prefix and suffix, nor spaces around."""
    return text.removeprefix(box.prefix()).removesuffix(box.suffix()).strip()


def _kept_as_typed(box: QAbstractSpinBox, text: str, state: QValidator.State) -> bool:
    """Whether text Qt would drop (Invalid) is a number the box should keep, to be refused with its reason."""
    if state != QValidator.State.Invalid or (box.specialValueText() and text == box.specialValueText()):
        return False
    typed = number_typed(box, text)
    # a sign alone too: dropped, "-5" typed in a box from 0 arrived as 5; and a point or a
    # comma typed first: dropped, ".5" typed for half a request arrived as 5 requests, ",5" (0.5 as
    # much of Europe writes it) as 5 req/s -- the line that said the key was dropped went with the
    # Enter that took the rest. (A letter first is still dropped: "default" in a box without one.)
    return ((_NUMBER_START.fullmatch(typed) is not None or any(c.isdigit() for c in typed))
            and _NUMBER_LIKE.fullmatch(typed) is not None)


def spoilt_number(box: QAbstractSpinBox, text: str) -> bool:
    """Whether text is digits with something no number holds ("5k", "0x10", "1.2.3", "5-3"): Qt dropped
    the key that spoilt it and went on with the next ones, so "5k" typed for 5,000 was taken as 5
    requests, "0x10" as 10, "1 000" as 1 token, "1.2.3" as 1.23 req/s, "5-3" as 53 -- the line that
    said the key was dropped was gone with the Enter that took the rest. Such text stays in the box
    as typed, said at once and refused on Enter like any number the box cannot hold."""
    typed = number_typed(box, text)
    # invisible characters (a direction mark, a zero-width space) are dropped as before: the user
    # cannot see them to remove them, and the line that says so names them
    hidden = any(unicodedata.category(c) in ("Cf", "Cc") for c in typed)
    return not hidden and any(c.isdigit() for c in typed) and _NUMBER_LIKE.fullmatch(typed) is None


# digits grouped in threes by a space, a no-break or narrow no-break space (French), an apostrophe (Swiss)
# or an underscore (Python, and so the command line's int()): "1 000" typed was taken as 1, "1_000" as 1000
# only by dropping the "_" (and "1 000 000" as 1); each is the box's own separator, read by its locale
_OTHER_SEPARATORS = " _'\u00a0\u202f\u2009\u2019"
_OTHER_GROUPING = re.compile(rf"(?<=\d)[{_OTHER_SEPARATORS}](?=\d{{3}}(?!\d))")


def grouped_as_the_box_groups(box: QAbstractSpinBox, text: str) -> str:
    separator = box.locale().groupSeparator()
    typed = number_typed(box, text)
    if not separator or not _OTHER_GROUPING.search(typed):
        return text
    # every group of three ("1 000 000", or "1,000 000" as the box rewrote the first while it was typed)
    grouped = rf"[+-]?\d{{1,3}}([{_OTHER_SEPARATORS}{re.escape(separator)}]\d{{3}})+(\.\d*)?([eE][+-]?\d+)?"
    if re.fullmatch(grouped, typed) is None:
        return text
    return text.replace(typed, _OTHER_GROUPING.sub(separator, typed), 1)


def misplaced_group_separator(box: QAbstractSpinBox, text: str) -> bool:
    """Whether the number typed has a thousands separator where the box's locale puts none ("2,5",
    "1,0,2,4"): Qt drops every separator it finds, so "2,5" typed for 2.5 arrived as 25 and "0,5" as 5.
    The locale's own reading is strict about where they go (10,00,000 is a number in India)."""
    locale = box.locale()
    separator = locale.groupSeparator()
    typed = number_typed(box, text)
    if not separator or separator not in typed:
        return False
    return not locale.toDouble(typed)[1] and locale.toDouble(typed.replace(separator, ""))[1]


def point_grouped(box: QAbstractSpinBox, text: str) -> bool:
    """Whether the number typed in a box of whole numbers has its thousands grouped by points, as
    German, Italian, Spanish or Brazilian write them ("2.000", "1.024"): the point is this box's
    decimal point, so "2.000" typed for 2,000 requests ran 2 (and "1.024" was "not a whole number")."""
    whole = not isinstance(box, QDoubleSpinBox) or box.decimals() == 0
    typed = number_typed(box, text)
    return whole and box.locale().decimalPoint() == "." and re.fullmatch(r"[+-]?\d{1,3}(\.\d{3})+", typed) is not None


# Signs pasted beside such digits, or from a web page or a PDF: the minus sign U+2212, the full-width
# forms of a CJK input method (any of U+FF01-FF5E, and its space U+3000: "５０％" and "２０４８ＭｉＢ" were
# refused as "in ％, not %", "in ＭｉＢ, not MiB"), the Arabic decimal and thousands separators ("٠٫٥" was
# "in ٫5") and the times sign of a speed-up ("2×" was "in ×, not x"). Each goes in as its ASCII sign.
_ASCII_SIGNS = str.maketrans({"\u2212": "-", "\ufe63": "-", "\u3000": " ", "\u066b": ".", "\u066c": ",",
                              "\u00d7": "x", **{chr(c): chr(c - 0xFEE0) for c in range(0xFF01, 0xFF5F)}})


def ascii_number(text: str) -> str:
    """text with a digit of another script (a full-width "１２" from a CJK input method, an Arabic-Indic
    "٣") written as its ASCII digit, as Python's int() and the command line read it: Qt refused "１２"
    as "not a value this field takes (1 to 1,024 tokens)", a range 12 is in, and "−5" as no number."""
    digits = (str(unicodedata.decimal(c)) if not c.isascii() and unicodedata.decimal(c, None) is not None else c
              for c in text)
    return "".join(digits).translate(_ASCII_SIGNS)


def _units(box: QAbstractSpinBox) -> list[str]:
    """The unit of the box, as typed by hand: its suffix, and a count's singular and plural."""
    count = box.property("count_unit")
    units = {box.suffix().strip(), *((count, f"{count}s") if count else ())} - {""}
    return sorted(units, key=len, reverse=True)


def _as_a_share(box: QAbstractSpinBox, text: str) -> str:
    """In a box of a share written as a fraction (the memory utilisation, 0.05 to 1.00: its property
    "share"), a percentage as the fraction it is: "90%" was refused as "in %: type the number alone",
    and 90 then as above 1.00."""
    written = text.strip()
    if not box.property("share") or not written.endswith("%"):
        return text
    try:
        share = Decimal(written.removesuffix("%").strip()).scaleb(-2)
    except InvalidOperation:
        return text
    return str(share) if share.is_finite() else text


def unit_being_typed(box: QAbstractSpinBox, text: str) -> str | None:
    """The start of the box's unit typed after a number, key by key ("7 req", "7 request" on the way to
    "7 requests"), or None. Taken whole at its singular, the box rewrote "7 request" as "7 requests"
    with the cursor after the 7, and the "s" typed next made "7s": "'7s' is not a number"."""
    suffix = box.suffix()
    if not suffix:
        return None
    typed = re.fullmatch(r"(.*\d)\s*([^\d\s]+)", ascii_number(text).removesuffix(suffix).strip())
    if typed is None or _NUMBER_LIKE.fullmatch(typed[1]) is None:
        return None
    start = typed[2].lower()
    longer = [unit for unit in _units(box) if unit.lower().startswith(start) and unit.lower() != start]
    return typed[2] if longer else None


def as_the_box_writes(box: QAbstractSpinBox, text: str) -> str:
    """text typed or pasted, with ASCII digits and the unit as the box writes it: "50%" for 50 %,
    "2048MiB", "5X", "1 request" in a box showing "requests" were refused as "not a number"."""
    text = _as_a_share(box, grouped_as_the_box_groups(box, ascii_number(text)))
    suffix = box.suffix()
    if not suffix or text == box.specialValueText():
        return text
    body = text.removesuffix(suffix).rstrip()  # Qt appends the suffix to text that does not end in it
    for unit in _units(box):
        number = body[:len(body) - len(unit)]
        if body.lower().endswith(unit.lower()) and any(c.isdigit() for c in number):
            return number.rstrip() + suffix
    return text


def typed_number(box: QAbstractSpinBox, text: str) -> float | None:
    """The number typed in the box ("5e-1", "1.0", "1,024"), judged by its value; None for text that is
    no finite number, or whose group separators are misplaced ("2,5")."""
    text = as_the_box_writes(box, text)
    typed = number_typed(box, text)
    if (not typed or _NUMBER_LIKE.fullmatch(typed) is None or misplaced_group_separator(box, text)
            or point_grouped(box, text)):
        return None
    value, ok = box.locale().toDouble(typed)
    return value if ok and math.isfinite(value) else None


def least_number(box: QAbstractSpinBox) -> float:
    """The least number the box takes as typed: its minimum, or 0 where its special value stands below
    0 (the arrival rate's and the shared prefix's "preset's" at -1): "-1" typed there became
    "preset's" without a word, where "-0.5" was refused as a negative rate."""
    return 0 if box.specialValueText() and box.minimum() < 0 else box.minimum()


def beyond_decimals(box: QAbstractSpinBox, value: float) -> bool:
    """Whether value has more decimals than the box keeps (0.5 in a box of whole MiB, or of requests)."""
    return round(value, box.decimals() if isinstance(box, QDoubleSpinBox) else 0) != value


def _special_typed(box: QAbstractSpinBox, text: str, pos: int) -> tuple | None:
    """Qt's validate for the box's special value typed as the user types it ("default", "Default",
    "default MiB", "presets", "preset’s"): Qt dropped it, or each letter as "not a number" under a field whose
    notice says "..., or default"; a pasted "default" kept the number without a word. Its start
    ("def") is the word being typed. None for other text."""
    special = box.specialValueText()
    typed, word = (t.replace("'", "").replace("\u2019", "").lower()
                   for t in (number_typed(box, text), special))
    if not special or not typed or not word.startswith(typed):
        return None
    if typed != word:
        return QValidator.State.Intermediate, text, pos
    return QValidator.State.Acceptable, special, len(special)


class _KeepsTypedNumbers:
    """validate() for a spin box: a number is judged by its value; other text by Qt, except that a
    number it would drop, or read as another number (a misplaced separator), stays as typed.

    Qt judged the text: "1.0" or "2." in a box of whole numbers was refused as "not a value this
    field takes (1 to 1,024 tokens)", a range 1 is in (in a box of whole MiB "2." was taken and
    "1.0" refused). A number with an exponent likewise: Qt counted the decimals of "5e-1" as none, so
    in a box of whole MiB it took 0.5 MiB unrounded and showed "1 MiB" (1e-9 MiB showed "0 MiB" and
    ran the default pool, int(1e-9 MiB) bytes being 0); "2.5e0" in a box of two decimals, or "1e3" in
    the Requests box, was refused as "not a value this field takes" with a range it is in. Now what
    the box can hold is taken ("2.5e0" is 2.5, "1e3" 1,000) and the rest stays as typed, refused with
    its reason."""

    def validate(self, text: str, pos: int):
        special = _special_typed(self, text, pos)
        if special is not None:
            return special
        if unit_being_typed(self, text) is not None:  # as typed, the cursor where it is: the unit goes on
            value = typed_number(self, text)  # "7 request" is 7 on the way to "7 requests"
            fits = value is not None and least_number(self) <= value <= self.maximum() and not beyond_decimals(self, value)
            return (QValidator.State.Acceptable if fits else QValidator.State.Intermediate), text, pos
        typed, typed_pos = text, pos
        written = as_the_box_writes(self, text)
        if written != text:  # the cursor goes where the number typed ends
            text, pos = written, len(written.removesuffix(self.suffix()))
        value = typed_number(self, text)
        if value is not None:
            fits = least_number(self) <= value <= self.maximum() and not beyond_decimals(self, value)
            return (QValidator.State.Acceptable if fits else QValidator.State.Intermediate), text, pos
        state, text_out, pos_out = super().validate(text, pos)
        if _kept_as_typed(self, text, state) or (state != QValidator.State.Invalid
                                                 and misplaced_group_separator(self, text)):
            return QValidator.State.Intermediate, text, pos
        if state == QValidator.State.Invalid and spoilt_number(self, text):
            return QValidator.State.Intermediate, typed, typed_pos  # as typed: "３ｍｓ" is said as such
        return state, text_out, pos_out

    def stepBy(self, steps: int) -> None:  # noqa: N802 - Qt's name
        """A special value below 0 ("preset's" at -1) stands before the numbers from 0: the arrow
        stepped from it by the box's step, to -0.5 req/s (the arrival rate, then refused as negative)
        or to 4 % (the shared prefix); now from it to 0, and from 0 down back to it."""
        least, before = self.minimum(), self.value()
        if not self.specialValueText() or least >= 0:
            super().stepBy(steps)
        elif before == least and steps > 0:
            self.setValue(min((steps - 1) * self.singleStep(), self.maximum()))
            self.selectAll()
        else:
            super().stepBy(steps)
            if least < self.value() < 0:
                self.setValue(0 if before > 0 else least)

    def fixup(self, text: str) -> str:
        # Qt's fixup removes the separators of a box that shows none: the seed's "2,5" became 25 on Enter
        return text if misplaced_group_separator(self, text) else super().fixup(text)


class NumberBox(_KeepsTypedNumbers, QSpinBox):
    """A QSpinBox that keeps an out-of-range number as typed (see the module)."""

    def valueFromText(self, text: str) -> int:  # noqa: N802 - Qt's name
        value = typed_number(self, text)
        return super().valueFromText(text) if value is None else int(value)


class DecimalBox(_KeepsTypedNumbers, QDoubleSpinBox):
    """A QDoubleSpinBox that keeps an out-of-range number, or one with too many decimals, as typed."""

    def valueFromText(self, text: str) -> float:  # noqa: N802 - Qt's name
        value = typed_number(self, text)
        return super().valueFromText(text) if value is None else value
