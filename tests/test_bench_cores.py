"""`kvscope bench gui --part cost` steps both sides on the same core (this VM's two cores differ by
5 - 7 % in engine steps per second) and lets the window draw on the other."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from kvscope.app.bench.bench_gui import _Cores


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs two cores this process may run on")
def test_both_sides_step_on_one_core_and_the_window_draws_on_the_other():
    original = os.sched_getaffinity(0)
    engine = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        cores = _Cores(engine.pid)
        assert cores.engine_core != cores.window_core
        assert os.sched_getaffinity(engine.pid) == {cores.engine_core}
        cores.headless_segment()
        assert os.sched_getaffinity(0) == {cores.engine_core}
        cores.window_segment()
        assert os.sched_getaffinity(0) == {cores.window_core}
        cores.restore()
        assert os.sched_getaffinity(0) == original
    finally:
        os.sched_setaffinity(0, original)
        engine.kill()
        engine.wait()


def test_without_an_engine_process_nothing_is_pinned():
    original = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    cores = _Cores(None)
    cores.headless_segment()
    cores.window_segment()
    cores.restore()
    if original is not None:
        assert os.sched_getaffinity(0) == original
