"""`kvscope bench scenarios --in-window`: a scenario's reveal timed in the window itself, from the
committed guess to the answer on screen, and the flag refused with any other benchmark."""

from __future__ import annotations

import dataclasses

import pytest
from PySide6.QtWidgets import QApplication

import kvscope.app.bench.bench_scenarios as bench_scenarios
import kvscope.app.gui.main_window as main_window_module
from kvscope.app.lab.scenarios import load_scenario
from tests.cli_helper import cli


@pytest.mark.parametrize("what", ["scheduler", "trace", "compare", "calibration"])
def test_in_window_goes_with_the_scenarios_benchmark_only(capsys, what):
    rc, _, err = cli(capsys, "bench", what, "--in-window")
    assert rc == 2 and "Traceback" not in err
    assert err.strip().splitlines()[-1].endswith("--in-window goes with `kvscope bench scenarios`")


def test_a_reveal_is_timed_in_the_window_from_the_guess_to_the_answer(qtbot, monkeypatch, tmp_path):
    from kvscope.app.bench.bench_gui import _values
    from kvscope.app.gui.main_window import MainWindow

    monkeypatch.setenv("KVSCOPE_CONFIG_DIR", str(tmp_path / "config"))
    name = "cache-ceiling"
    full = load_scenario(name)
    # its smallest run at the fastest notch (500x): the timing is under test here, not the scenario's pace
    small = dataclasses.replace(full, workload=full.workload.replace(
        spec=full.workload.spec.with_overrides(num_requests=full.min_requests)), playback_speed=500)
    monkeypatch.setattr(main_window_module, "load_scenario", lambda _name: small)
    monkeypatch.setattr(bench_scenarios, "load_scenario", lambda _name: small)
    window = MainWindow(_values(), autoplay=False, scenario=name)
    qtbot.addWidget(window)
    window.show()
    seconds = bench_scenarios.time_reveal_in_window(QApplication.instance(), window, name)
    view = window.compare
    assert view.revealed is not None and not view.errors_shown
    assert 0 < seconds < 120
    # the window paces the run at 500x: the wait is at least the engine clock at the reveal / 500
    clock_s = bench_scenarios.measure_scenario(name)["engine_clock_s"]
    assert seconds >= 0.9 * clock_s / 500
    window.close()
