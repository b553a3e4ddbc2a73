"""Plain-text output of the command line: label/value tables, and text shown as it reads."""

from __future__ import annotations

import os
import re

# Characters a terminal acts on rather than shows: C0 and C1 controls (ESC starts a sequence that can
# clear the screen or retitle the window, BEL rings, BS overwrites) and the bidirectional overrides
# that reorder what follows. A file or preset name is shown as typed; these in it are shown escaped.
# (Text, compiled on use: a Unicode class compiled at import needs memory a tiny `ulimit -v` lacks.)
# Lone surrogates too: a name's bytes that are not UTF-8 (`--config $'\xff.json'`, or any name under
# LANG=C) reach Python as U+DC80-U+DCFF, and the terminal got "?" or "\ufffd" for them.
TERMINAL_CONTROLS = "[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]"


def _escaped(char: str) -> str:
    if "\udc80" <= char <= "\udcff":  # the byte the file name holds, as the shell's $'\xff' writes it
        return f"\\x{ord(char) - 0xDC00:02x}"
    return char.encode("unicode_escape").decode("ascii")


def shown(text: str, keep: str = "") -> str:
    """text with each terminal control character but those in `keep` escaped: "\\x1b[2J", not a
    cleared screen."""
    return re.sub(TERMINAL_CONTROLS, lambda m: m[0] if m[0] in keep else _escaped(m[0]), str(text))


def counted(count: int, thing: str) -> str:
    """A count with its noun, singular for one: "1 request", "2 requests" (`--requests 1` said "1 requests")."""
    return f"{count:,} {thing}{'' if count == 1 else 's'}"


def table(rows: list[tuple[str, str]], title: str | None = None) -> str:
    """Rows of label and value under a title; a control character in any of them (a trace named with
    ESC, a random-weights model's answer) is shown escaped, its line breaks kept."""
    rows = [(shown(label, "\n"), shown(value, "\n")) for label, value in rows]
    title = shown(title, "\n") if title else title
    width = max(len(label) for label, _ in rows)
    lines = [title, "-" * len(title)] if title else []
    lines += [f"{label:<{width}}  {value}" for label, value in rows]
    return "\n".join(lines)


def recorded(path: str, details: str) -> str:
    """The line after a recording: where it went and, where a file holds it, how to replay it
    (`--record /dev/null` said "replay it with `kvscope gui --replay /dev/null`")."""
    if not os.path.isfile(path):
        return shown(f"recording written to {path} ({details}), which keeps no file: there is nothing to replay")
    return shown(f"recording written to {path} ({details}); replay it with `kvscope gui --replay {path}`")
