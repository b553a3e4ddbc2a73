"""A path or value as a message says it. What a user typed or a file dialog returned can be a name
of 10,000 characters, hold right-to-left overrides or a newline: said whole, it buried the message
(a label or dialog that cannot wrap a word that long grew as wide as it) or reordered the line."""

from __future__ import annotations

import os

from kvscope.app.lab.bounded_reads import escaped

LONGEST_SAID = 80  # characters; a longer text is said by its ends and its length


def said_short(text: str, longest: int = LONGEST_SAID) -> str:
    """text, or its first 40 and last 30 characters and its length if it is longer than `longest`."""
    return text if len(text) <= longest else f"{text[:40]}...{text[-30:]} ({len(text):,} characters)"


def said_path(path) -> str:
    """path with every character that is not printable escaped (\\u202e, \\n, \\x00), said short."""
    return said_short(escaped(os.fsdecode(path)), 120)


def os_error_text(path, exc: BaseException) -> str:
    """What stopped `path` being read: the system's reason (a name over 255 bytes, a NUL in it), with
    the path said short, not Python's "[Errno 36] ..." repeating it whole."""
    reason = getattr(exc, "strerror", None) or str(exc)
    return f"{said_path(path)}: cannot be read ({reason[:1].lower()}{reason[1:]})"
