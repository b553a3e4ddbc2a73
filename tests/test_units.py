"""The one set of formatters every printed number goes through: units always, thousands grouped."""

from __future__ import annotations

import pytest

from kvscope.engine.units import format_seconds


@pytest.mark.parametrize("seconds, text", [
    (0, "0 s"), (0.0, "0 s"),  # nothing took no time, in seconds, not "0 us"
    (0.0005, "500 us"), (1e-7, "under 1 us"), (0.5, "500.0 ms"), (2.0, "2.00 s"),
    (1017.06, "1,017.06 s"), (3224.76, "3,224.76 s"),  # as the progress line groups them
    (None, "-"), (float("nan"), "-"),
])
def test_seconds_read_with_their_unit(seconds, text):
    assert format_seconds(seconds) == text
