"""The comparison page: configurations side by side on one clock, the results table with its
ratios, and every guided scenario from its question to its revealed answer, in the window.

The real-backend scenarios run with 4 requests (the window's flow, not their claim, is under test
here: the claims are tested in test_scenarios.py); the simulated ones with their own minimum.
"""

from __future__ import annotations

import dataclasses

import pytest
from PySide6.QtWidgets import QMessageBox

import kvscope.app.gui.main_window as main_window_module
from kvscope.app.gui.compare_window import METRIC_ROWS
from kvscope.app.gui.scenario_verdict import guess_verdict
from kvscope.app.cli.gui import initial_values
from kvscope.app.gui.main_window import MainWindow
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
        assert backend.startswith(f"real backend ({scenario.configs[0].model} on this ")
    else:
        assert backend.startswith("simulated backend (")
    # until its process has built every configuration the page says so, and the status bar keeps saying it
    assert view.building_note.isVisibleTo(view) and not view.columns
    assert ("real model" in view.building_note.text()) == (scenario.backend == "real")
    assert window.statusBar().currentMessage() == "building the configurations ..."
    # nothing runs before the guess is committed, and nothing on screen gives the answer away
    qtbot.waitUntil(lambda: len(view.columns) == len(scenario.configs), timeout=120000)  # a real model loads first
    qtbot.wait(150)
    assert view.building_note.isHidden()
    assert not view.playing and view.results is None
    assert all(c.veiled and not c.block_map.isVisible() for c in view.columns)
    assert not any(" blocks" in c.numbers.text() for c in view.columns)  # no pool size
    shown = [view.table.shown_text(r, c) for r in range(view.table.rowCount()) for c in range(1, view.table.columnCount())]
    assert set(shown) <= {"\u2013", ""}
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
    # the reveal: the block maps at the decisive moment, its line on the plots, the answer's row marked
    assert not any(c.veiled for c in view.columns)
    assert all(" s (" in c.numbers.text() and " blocks" in c.numbers.text() for c in view.columns)  # at a moment
    assert view.plots.moment_lines
    row = {key: row_name for key, row_name, *_ in METRIC_ROWS}.get(scenario.reveal_from.name)
    if row is not None:
        r = [view.table.item(i, 0).text().startswith(row) for i in range(view.table.rowCount())].index(True)
        assert view.table.item(r, 0).font().bold()


# the plot that holds each answer's quantity: a standard one, or the page's plot of the asked quantity
ASKED_PLOT = {"peak_kv_usage": "kv_usage", "peak_running": "num_running", "itl_max_s": "asked",
              "prefix_cache_hit_rate": "asked", "throughput_tokens_per_s": "asked", "max_concurrent_sequences": "asked"}
# every simulated scenario, and the real one whose ratio (of throughputs) no standard plot shows
ASKED_PLOT_SCENARIOS = [n for n in scenario_names() if load_scenario(n).backend == "simulated"] + ["static-vs-continuous"]


@pytest.mark.parametrize("name", ASKED_PLOT_SCENARIOS)
def test_a_scenario_plots_the_quantity_its_question_asks_about(window, qtbot, monkeypatch, name):
    scenario = small_scenario(name)
    monkeypatch.setattr(main_window_module, "load_scenario", lambda _name: scenario)
    assert window.open_scenario(name)
    view, reveal = window.compare, scenario.reveal_from
    key = ASKED_PLOT[reveal.name]
    assert view.plots.plots[key].isVisible()
    assert view.plots.plots["asked"].isVisible() == (key == "asked")
    window.play_pressed()
    wait_revealed(qtbot, view)
    value, _ = scenario.reveal(view.results)  # in the answer's unit: ms, %, sequences, x, or the winner's label
    if reveal.kind == "best":  # the plot shows each choice's peak: the answer is the higher curve
        peaks = {label: max(view.plots.curve_data(scenario.labels.index(label), key)[1])
                 for label in scenario.answer.choices}
        assert peaks == {label: pytest.approx(view.results[label].value(reveal.name)) for label in peaks}
        assert max(peaks, key=peaks.get) == value
        return
    x, y = view.plots.curve_data(scenario.labels.index(reveal.numerator or reveal.config), key)
    assert x is not None and len(y) > 0
    if key == "asked":  # the value so far: the last point is the answer
        assert y[-1] == pytest.approx(value, rel=0.02)
        assert view.plots.plots["asked"].getAxis("left").labelText == scenario.answer.unit  # drawn in its unit
    else:  # a peak, read off the standard plot
        assert max(y) == pytest.approx(value, rel=0.02)
    if reveal.kind == "memory":  # known before the run: one level from the guess to the end
        assert min(y) == pytest.approx(max(y))


def test_a_run_that_served_no_request_says_so_without_a_traceback(window, qtbot, monkeypatch, tmp_path):
    """Before: "0.00 %" revealed from a hit rate no request measured (every prompt over max_model_len)."""
    text = open(load_scenario("prefix-caching").path).read().replace(
        "engine = { enable_prefix_caching = true }", "engine = { enable_prefix_caching = true, max_model_len = 512 }")
    (tmp_path / "rejected.toml").write_text(text)
    scenario = small_scenario(str(tmp_path / "rejected.toml"))
    monkeypatch.setattr(main_window_module, "load_scenario", lambda _name: scenario)
    assert window.open_scenario("prefix-caching")
    view = window.compare
    qtbot.waitUntil(lambda: len(view.columns) == len(scenario.configs), timeout=60000)
    view.panel.guess_number.setValue(50.0)
    window.play_pressed()
    qtbot.waitUntil(lambda: bool(view.errors_shown), timeout=60000)
    assert view.revealed is None
    assert '"prefix caching on" completed no request' in view.errors_shown[-1]
    assert "Traceback" not in view.errors_shown[-1]
    view.errors_shown.clear()  # the window is the module's: the next test's reveal starts without this error


def test_an_answer_the_memory_math_computes_is_drawn_from_the_runs_start(window, qtbot, monkeypatch):
    """Before: drawn from the first results update on (at maximum speed 22.7 s into a 27.4 s run), a stub
    or nothing at the reveal."""
    scenario = small_scenario("cache-ceiling")
    monkeypatch.setattr(main_window_module, "load_scenario", lambda _name: scenario)
    assert window.open_scenario("cache-ceiling")
    view = window.compare
    assert view.asked.computed
    qtbot.waitUntil(lambda: len(view.columns) == len(scenario.configs), timeout=60000)
    view.panel.guess_number.setValue(30.0)
    window.play_pressed()
    wait_revealed(qtbot, view)
    for (times, values), config in zip(view.asked_series, view.results.configurations):
        assert times[0] == 0.0 and times[-1] > 0.0
        assert set(values) == {config.memory["max_concurrent_sequences"]}
