"""Plain-text output of the command line: label/value tables."""

from __future__ import annotations


def table(rows: list[tuple[str, str]], title: str | None = None) -> str:
    width = max(len(label) for label, _ in rows)
    lines = [title, "-" * len(title)] if title else []
    lines += [f"{label:<{width}}  {value}" for label, value in rows]
    return "\n".join(lines)
