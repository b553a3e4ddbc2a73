"""Numbers for people: every figure printed carries its unit."""

from __future__ import annotations

import math


def format_bytes(n: float) -> str:
    """Binary units (GiB, MiB, KiB), as memory is sized; decimal GB follows for large values."""
    if n is None:
        return "-"
    sign = "-" if n < 0 else ""
    n = abs(n)
    for unit, size in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= size:
            text = f"{sign}{n / size:.2f} {unit}"
            if size >= 1024**3:
                text += f" ({sign}{n / 1e9:.1f} GB)"
            return text
    return f"{sign}{n:.0f} B"


def format_seconds(s: float | None) -> str:
    if s is None or (isinstance(s, float) and math.isnan(s)):
        return "-"
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.1f} ms"
    return f"{s * 1e6:.0f} us"


def format_percent(fraction: float) -> str:
    return f"{fraction * 100:.1f} %"


def table(rows: list[tuple[str, str]], title: str | None = None) -> str:
    width = max(len(label) for label, _ in rows)
    lines = [title, "-" * len(title)] if title else []
    lines += [f"{label:<{width}}  {value}" for label, value in rows]
    return "\n".join(lines)
