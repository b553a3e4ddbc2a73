"""The one set of formatters every printed number goes through: units always, thousands grouped."""

from __future__ import annotations

import re

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


@pytest.mark.parametrize("size, text", [
    (1024**5, "1,024.00 TiB (1,125,899.9 GB)"),  # a budget typed as 1e18 bytes read as "1125899.9 GB"
    (1000 * 1024**3, "1,000.00 GiB (1,073.7 GB)"),
    (80 * 1024**3, "80.00 GiB (85.9 GB)"),
])
def test_large_sizes_are_grouped_as_every_count(size, text):
    from kvscope.engine.units import format_bytes

    assert format_bytes(size) == text


def test_a_reserve_past_the_memory_is_said_grouped():
    from kvscope.app.lab.presets import load_hardware, load_model
    from kvscope.engine.config import EngineArgs, resolve_engine_args
    from kvscope.engine.memory_math import no_room_reason, plan_memory

    model, hardware = load_model("llama-3-8b"), load_hardware("l4-24gb")
    plan = plan_memory(model, hardware, resolve_engine_args(EngineArgs(reserve_bytes=10**18), model, hardware))
    # 10**18 bytes and vLLM's own reserve: read as 931322576.27 GiB before
    assert re.search(r" 931,322,5\d\d\.\d\d GiB held back", no_room_reason(plan)), no_room_reason(plan)
