"""The comparison page: configurations side by side on one clock, the results table with its
ratios, and every guided scenario from its question to its revealed answer, in the window.

The real-backend scenarios run with 4 requests (the window's flow, not their claim, is under test
here: the claims are tested in test_scenarios.py); the simulated ones with their own minimum.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from PySide6.QtWidgets import QMessageBox

import kvscope.app.gui.main_window as main_window_module
from kvscope.app.gui.compare_window import METRIC_ROWS
from kvscope.app.gui.scenario_verdict import guess_verdict
from kvscope.app.cli.gui import initial_values
from kvscope.app.gui.main_window import MainWindow
from kvscope.app.lab.compare import ComparisonSpec, ComparisonWorkload, Variant
from kvscope.engine.config import ConfigError, EngineArgs
from kvscope.app.lab.presets import load_workload
from kvscope.app.lab.scenarios import load_scenario, scenario_names

REAL_BACKEND_REQUESTS = 4


class Args:
    backend, model, hardware, workload, model_path = "simulated", None, "h100-80gb", "chat", None


def small_scenario(name: str):
    """The scenario at the fewest requests that still shows its claim (real backend: 4)."""
    scenario = load_scenario(name)
    requests = REAL_BACKEND_REQUESTS if scenario.backend == "real" else scenario.min_requests
    workload = scenario.workload.replace(spec=scenario.workload.spec.with_overrides(num_requests=requests))
    return dataclasses.replace(scenario, workload=workload, min_requests=1)


@pytest.fixture(scope="module")
def window(qapp, tmp_path_factory):
    values = initial_values(Args())
    values["num_requests"] = 50
    # opened on a scenario: the live engine is not built, so these tests spend no CPU on it
    win = MainWindow(values, autoplay=False, scenario=scenario_names()[0])
    win.resize(1600, 960)
    win.show()
    win.speed.setCurrentText("max")
    yield win
    win.close()


@pytest.fixture
def quiet_dialogs(monkeypatch):
    """Modal warnings would wait for a click: record them instead."""
    shown = []
    monkeypatch.setattr(QMessageBox, "warning", lambda parent, title, text, *a, **k: shown.append((title, text)))
    return shown


def wait_revealed(qtbot, view, timeout=60000):
    qtbot.waitUntil(lambda: view.revealed is not None or bool(view.errors_shown), timeout=timeout)
    assert not view.errors_shown, view.errors_shown[-1]


def test_the_scenarios_menu_lists_every_scenario_with_keys_1_to_9(window):
    names = scenario_names()
    assert window.scenario_names == names and len(window.scenario_actions) == len(names)
    for i, action in enumerate(window.scenario_actions[:9]):
        assert action.shortcut().toString() == str(i + 1)
        assert load_scenario(names[i]).title in action.text()


@pytest.mark.parametrize("name", scenario_names())
def test_each_scenario_asks_takes_a_guess_runs_and_reveals(window, qtbot, monkeypatch, name):
    scenario = small_scenario(name)
    monkeypatch.setattr(main_window_module, "load_scenario", lambda _name: scenario)
    assert window.open_scenario(name)
    view, panel = window.compare, window.compare.panel
    assert window.compare_showing()
    assert panel.question.text().endswith(f"{scenario.question}</b>") or scenario.question[:20] in panel.question.text()
    backend = panel.backend.text()
    if scenario.backend == "real":
        assert backend.startswith("real backend (tiny-llama on this ")
    else:
        assert backend.startswith("simulated backend (")
    # nothing runs before the guess is committed
    qtbot.wait(150)
    assert not view.playing and view.results is None
    if scenario.answer.kind == "choice":
        assert panel.guess_choice.isVisible() and panel.guess_choice.count() == len(scenario.answer.choices)
        panel.guess_choice.setCurrentIndex(0)
        guess = scenario.answer.choices[0]
    else:
        assert panel.guess_number.suffix().strip() == scenario.answer.unit
        panel.guess_number.setValue(2.0)
        guess = 2.0
    window.play_pressed()  # Space: commits the guess on screen and runs
    assert panel.committed_guess == guess and not panel.commit_button.isEnabled()
    wait_revealed(qtbot, view)
    answer, verdict = view.revealed
    value, text = scenario.reveal(view.results)
    assert answer == text
    assert verdict == guess_verdict(scenario, guess, value)
    assert panel.reveal.isVisible() and text in panel.reveal.text()
    n = len(scenario.configs)
    assert view.table.rowCount() == len(METRIC_ROWS) and view.table.columnCount() == 1 + n + (n - 1)
    assert [c.label for c in view.columns] == scenario.labels


def test_a_comparison_differing_in_any_setting_runs_in_lockstep(window, qtbot):
    workload = ComparisonWorkload(load_workload("chat").with_overrides(num_requests=60, arrival_rate_per_s=20.0))
    small = dict(gpu_memory_utilization=0.3, max_model_len=4096)
    spec = ComparisonSpec([
        Variant("paged", engine_args=EngineArgs(**small)),
        Variant("block 64", engine_args=EngineArgs(block_size=64, **small)),
        Variant("static", engine_args=EngineArgs(scheduling="static", **small)),
        Variant("contiguous", engine_args=EngineArgs(allocation="contiguous", **small)),
    ], workload)
    window.open_comparison(spec, "four settings")
    view = window.compare
    qtbot.waitUntil(lambda: view.info is not None, timeout=20000)
    assert [c.label for c in view.columns] == ["paged", "block 64", "static", "contiguous"]
    window.step_pressed()  # Right: one lockstep step
    qtbot.waitUntil(lambda: all(s is not None and s.step >= 1 for s in view.latest_snapshots), timeout=10000)
    clocks = [s.time_s for s in view.latest_snapshots]
    assert not view.playing
    window.play_pressed()
    qtbot.waitUntil(lambda: view.done, timeout=60000)
    assert min(s.time_s for s in view.latest_snapshots) >= max(clocks)
    table = view.table
    assert table.columnCount() == 1 + 4 + 3
    assert table.shown_text(0, 1) != "\u2013"  # a throughput for the baseline
    assert table.shown_text(0, 3).startswith("\u00d7")  # block 64 / paged
    for i in range(4):  # every configuration's curves drawn, on the same clock
        x, y = view.plots.curve_data(i, "kv_usage")
        assert x is not None and len(x) > 10 and np.nanmax(y) <= 100.0
    assert window.play_action.text() == "Play"


def test_reset_asks_for_a_new_guess_and_runs_the_scenario_again(window, qtbot, monkeypatch):
    name = "prefix-caching" if "prefix-caching" in scenario_names() else scenario_names()[0]
    scenario = small_scenario(name)
    monkeypatch.setattr(main_window_module, "load_scenario", lambda _name: scenario)
    window.open_scenario(name)
    view = window.compare
    window.play_pressed()
    wait_revealed(qtbot, view)
    window.reset_pressed()  # R
    assert view.panel.committed_guess is None and view.revealed is None and not view.panel.reveal.isVisible()
    assert view.table.rowCount() == 0
    window.play_pressed()
    wait_revealed(qtbot, view)


def test_a_scenario_that_cannot_load_says_why_and_the_window_keeps_working(window, qtbot, monkeypatch, quiet_dialogs):
    def broken(_name):
        raise ConfigError("scenario file x.toml: base.backend: must be one of simulated, real, got 'gpu'")

    monkeypatch.setattr(main_window_module, "load_scenario", broken)
    assert not window.open_scenario("x")
    assert quiet_dialogs and "base.backend" in quiet_dialogs[0][1]
    monkeypatch.undo()
    assert window.open_scenario(scenario_names()[0])


def test_leaving_the_comparison_page_pauses_it_and_gives_the_docks_back(window, qtbot, monkeypatch):
    name = scenario_names()[0]
    monkeypatch.setattr(main_window_module, "load_scenario", lambda _name: load_scenario(name))
    window.speed.setCurrentText("0.1x")  # slow: still running when the page changes
    window.open_scenario(name)
    assert window.settings_dock.isHidden() and window.plots_dock.isHidden()
    window.play_pressed()
    qtbot.waitUntil(lambda: window.compare.playing, timeout=5000)
    window.pages.setCurrentIndex(0)
    assert not window.compare.playing
    assert window.settings_dock.isVisible() and window.plots_dock.isVisible()
    window.speed.setCurrentText("max")


def test_the_results_table_formats_values_and_colours_ratios(qtbot):
    from kvscope.widgets.palette import DARK
    from kvscope.widgets.results_table import ResultRow, ResultsTable

    table = ResultsTable()
    qtbot.addWidget(table)
    table.set_results(["a", "b"], [ResultRow("TTFT p99", "ms", (100.0, 50.0), "lower"),
                                   ResultRow("KV quality cost", "% tokens", (None, 1.5), "lower"),
                                   ResultRow("Throughput", "tokens/s", (1000, 2500), "higher", 0)])
    assert table.header() == ["metric (unit)", "a\n(baseline)", "b", "\u00f7 baseline"]
    assert table.header(for_csv=True) == ["metric (unit)", "a (baseline)", "b", "b \u00f7 baseline"]
    assert [table.shown_text(0, c) for c in range(4)] == ["TTFT p99 (ms)", "100.0", "50.0", "\u00d70.50"]
    assert table.shown_text(1, 1) == "\u2013" and table.shown_text(1, 3) == "\u2013"
    assert table.item(0, 3).foreground().color().getRgb()[:3] == DARK.good
    assert table.shown_text(2, 2) == "2,500" and table.shown_text(2, 3) == "\u00d72.50"
    assert table.csv_rows()[0] == ["TTFT p99 (ms)", 100.0, 50.0, 0.5]


def test_a_configurations_columns_sum_output_tokens_as_points_arrive():
    from kvscope.app.gui.compare_window import _Columns
    from kvscope.app.host.points import POINT_DTYPE, POINT_FIELDS

    rng = np.random.default_rng(2)
    columns, everything = _Columns(), []
    for size in (3, 1500, 1, 700):  # past the first 1,024 rows: the array grows
        rows = np.zeros(size, dtype=POINT_DTYPE)
        for name in POINT_FIELDS:
            rows[name] = rng.integers(0, 50, size=size)
        columns.extend(rows)
        everything.append(rows)
    rows = np.concatenate(everything)
    assert np.array_equal(columns.column("output_tokens"), rows["output_tokens"])
    assert np.array_equal(columns.column("kv_usage"), rows["kv_usage"])
    assert np.array_equal(columns.output_tokens_so_far(), np.cumsum(rows["output_tokens"]))


def test_the_comparison_session_hands_over_every_step_as_points_and_flashes_and_a_final_table():
    """The comparison's process side, driven directly as its process drives it."""
    from kvscope.app.host.comparison import ComparisonSession
    from kvscope.app.host.points import POINT_DTYPE
    from kvscope.app.host.protocol import APPLY, SPEED

    workload = ComparisonWorkload(load_workload("chat").with_overrides(num_requests=40, arrival_rate_per_s=20.0))
    small = dict(gpu_memory_utilization=0.3, max_model_len=4096)
    spec = ComparisonSpec([Variant("paged", engine_args=EngineArgs(**small)),
                           Variant("block 64", engine_args=EngineArgs(block_size=64, **small))], workload)
    session = ComparisonSession()
    session.handle(SPEED, 0.0)
    session.handle(APPLY, (spec, True))
    frames = [session.take_frame()]
    assert frames[0].info["labels"] == ["paged", "block 64"] and len(frames[0].snapshots) == 2
    while session.playing:
        session.advance(0.001)
        frames.append(session.take_frame())
    done = [f for f in frames if f.done]
    assert len(done) == 1 and done[0].status == "comparison complete"
    for i, config in enumerate(done[0].results.configurations):
        points = np.concatenate([f.points[i] for f in frames if f.points])
        assert points.dtype == POINT_DTYPE  # the format of the live run and the replay
        assert len(points) == config.metrics["steps"]  # one point per step: nothing dropped
        assert points["output_tokens"].sum() == config.metrics["output_tokens"]
        assert np.all(np.diff(points["time_s"]) > 0)
        flashed = [f.flashes[i] for f in frames if f.flashes]
        assert sum(len(f.get("allocated", ())) for f in flashed) > 0
