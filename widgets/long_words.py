"""Wrapping text that holds a very long word.

Qt's default wrap (at a word boundary, else anywhere) lays a run with no space in it out in time
that grows with the square of its length: a pasted line of 200,000 characters (minified JSON,
base64) froze the window 2 s, one of 2,000,000 several minutes, and every resize laid it out again.
Text with a word longer than LONG_WORD_CHARS wraps anywhere, which takes linear time; any other
text keeps wrapping at its spaces."""

from __future__ import annotations

import re

from PySide6.QtGui import QTextOption
from PySide6.QtWidgets import QPlainTextEdit

LONG_WORD_CHARS = 1000  # far past any word; a 1,000-character run lays out in well under a millisecond
_LONG_WORD = re.compile(r"\S{%d}" % (LONG_WORD_CHARS + 1))


def has_long_word(text: str) -> bool:
    return len(text) > LONG_WORD_CHARS and _LONG_WORD.search(text) is not None


def wrap_anywhere_when(edit: QPlainTextEdit, long_word: bool) -> None:
    """Wrap edit anywhere (text with a long word) or at spaces. Turn to anywhere before such text
    goes in (setPlainText lays it out at once, in the wrap it finds) and back to spaces only once
    it is gone: switched while the long word was still there, it laid the word out again."""
    modes = QTextOption.WrapMode
    mode = modes.WrapAnywhere if long_word else modes.WrapAtWordBoundaryOrAnywhere
    if edit.wordWrapMode() != mode:
        edit.setWordWrapMode(mode)
