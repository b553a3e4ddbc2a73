"""A value that begins with '-' (`--json -x.json`, `kvscope export -r.kvrec`): argparse reads it as a
flag, and said "expected one argument" of the flag the value was typed after, or "the following
arguments are required: FILE" with the name typed nowhere in the message. The note here names the
value and the two ways to give it."""

from __future__ import annotations

import re


def note(message: str, parser) -> str:
    """What to add to argparse's message (" (...)"), or nothing, from what the parser was given."""
    typed, options = getattr(parser, "typed", []), parser._option_string_actions
    missing_value = re.match(r"argument (--?[\w-]+)(?:/--?[\w-]+)*: expected one argument", message)
    if missing_value:
        flag = missing_value[1]
        for i, token in enumerate(typed[:-1]):
            value = typed[i + 1]
            if token.startswith("--") and flag.startswith(token) and _dashed(value, options):
                return (f" ({value!r} begins with '-', so it was read as a flag: give it as {flag}={value}"
                        + (f", or ./{value} for a file)" if not value.startswith("--") else ")"))
        return ""
    if message.startswith("the following arguments are required"):
        strays = [t for t in typed if _dashed(t, options)]
        if strays:
            return (f" ({strays[0]!r} begins with '-', so it was read as a flag: give it after `--`, or as "
                    f"./{strays[0]} for a file)")
    return ""


def after_double_dash(parser, extra: str) -> str | None:
    """What to say of a command's own flag typed after "--", which argparse then reads as a value
    (it was said as another command's flag, or "did you mean" itself); None for any other word."""
    if "--" in getattr(parser, "typed", ()) and extra.split("=", 1)[0] in parser._option_string_actions:
        return f"{extra} (a flag of `{parser.prog}`, but after '--', which ends the flags: put it before '--')"
    return None


def _dashed(token: str, options: dict) -> bool:
    """Whether token looks like a flag to argparse and is none of this parser's (nor an abbreviation)."""
    if not token.startswith("-") or token in ("-", "--") or re.match(r"^-(\d|\.\d)", token):
        return False
    name = token.split("=", 1)[0]
    return not any(option == name or (name.startswith("--") and option.startswith(name)) for option in options)
