"""A name the user gave (a configuration's label, a comparison's title) as a view shows it.

Given whole, a label of 500 characters made the comparison page 4,000 px wide (a wrapped label is
as wide as its longest word), one with a right-to-left override reversed the line around it, and
one holding '<b>' was read as markup by a rich-text header. Shown: every character that is not
printable escaped, a long name cut in its middle with its length, and a break allowed inside a
long word; escape() it too where the view reads HTML. The name itself (a CSV's header, a tooltip)
is left whole."""

from __future__ import annotations

import re

LONGEST_CHARS = 60
BREAK_AFTER_CHARS = 16  # a longer run of non-spaces may wrap (a zero-width space after each 16)
_LONG_RUN = re.compile(r"\S{%d}(?=\S)" % BREAK_AFTER_CHARS)


def shown_label(text: str, longest: int = LONGEST_CHARS) -> str:
    text = str(text)
    if not text.isprintable():
        text = "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)
    if len(text) > longest:
        keep = (longest - 3) // 2
        text = f"{text[:keep]}...{text[-keep:]} ({len(text):,} characters)"
    return _LONG_RUN.sub(lambda run: run.group(0) + "\u200b", text)
