"""Numbers for people: every figure printed or drawn carries its unit. One set of formatters for the
command line, the window and the widgets (plain Python: the widgets may import it)."""

from __future__ import annotations

import math

KiB, MiB, GiB, TiB = 1024, 1024**2, 1024**3, 1024**4


def _in_binary_units(n: float) -> tuple[str, float, str, int]:
    """(sign, magnitude in the largest binary unit it reaches, that unit, its size in bytes)."""
    sign, n = ("-" if n < 0 else ""), abs(n)
    for unit, size in (("TiB", TiB), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= size:
            return sign, n / size, unit, size
    return sign, n, "B", 1


def format_bytes(n: float) -> str:
    """Binary units (GiB, MiB, KiB), as memory is sized; decimal GB follows for large values."""
    if n is None:
        return "-"
    sign, value, unit, size = _in_binary_units(n)
    if size == 1:
        return f"{sign}{value:.0f} B"
    text = f"{sign}{value:,.2f} {unit}"  # past 1,024 TiB the TiB count grows: separated, as every count
    return text + f" ({sign}{abs(n) / 1e9:,.1f} GB)" if size >= GiB else text


def format_bytes_short(n: float) -> str:
    """Three significant digits in binary units ("720 KiB", "23.6 MiB", "3.87 GiB"), for a label with
    little room; where the room allows, give the exact format_bytes beside it (a tooltip, say)."""
    if n is None:
        return "-"
    sign, value, unit, size = _in_binary_units(n)
    # 99.97 rounds to "100", not "100.0"; bytes are whole
    digits = 0 if size == 1 or value >= 99.95 else 1 if value >= 9.995 else 2
    return f"{sign}{value:.{digits}f} {unit}"


def format_seconds(s: float | None) -> str:
    if s is None or (isinstance(s, float) and math.isnan(s)):
        return "-"
    if s >= 1 or s == 0:  # nothing is "0 s", not "0 us"
        return f"{s:,.2f} s" if s else "0 s"
    if s >= 1e-3:
        return f"{s * 1e3:.1f} ms"
    return f"{s * 1e6:.0f} us" if s >= 0.5e-6 or s < 0 else "under 1 us"


def format_percent(fraction: float) -> str:  # a share between none and all never reads as either
    text = f"{fraction * 100:.1f} %"
    return {"0.0 %": "under 0.1 %", "100.0 %": "over 99.9 %"}.get(text, text) if 0 < fraction < 1 else text


def format_parameters(n: float) -> str:  # `--params 1e6` was said as "0.00 B" parameters, tiny-llama's as "0.03 B"
    return next((f"{n / size:,.2f} {unit}" for size, unit in ((1e9, "B"), (1e6, "M"), (1e3, "K")) if n >= size),
                f"{n:,.0f}")
