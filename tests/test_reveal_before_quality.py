"""A scenario whose answer is not the quality cost is revealed as soon as every configuration has
run: measuring the quality cost afterwards takes seconds on the real backend (7.5 s of the 24.8 s
weight-quantization-real took in the window), and the answer does not wait for it. The final
table, with the quality measured, fills in under the reveal and keeps the answer's row marked."""

from __future__ import annotations

from kvscope.app.gui.compare_window import METRIC_ROWS, CompareView
from kvscope.app.gui.scenario_texts import scenario_texts
from kvscope.app.host.comparison import ComparisonSession
from kvscope.app.host.protocol import APPLY, PLAY
from kvscope.app.lab.scenarios import load_scenario, scenario_from_dict
from tests.test_compare_page_guess_and_room import FakeHost


def _answer_row_is_bold(view: CompareView, scenario) -> bool:
    name = {key: row for key, row, *_ in METRIC_ROWS}[scenario.reveal_from.name]
    row = [r.name for r in view.table.rows].index(name)
    return view.table.item(row, 0).font().bold()


def _fp8_kv_on_the_tiny_model():
    """fp8-kv-real's shape (answer: peak running; the quality cost measured for the narrowed KV) on
    the tiny model the tests build, so that it runs in seconds."""
    return scenario_from_dict({
        "name": "tiny-fp8", "order": 99, "title": "fp8 KV, tiny", "seed_lesson": "seed 004", "claim": "c",
        "caption": "c. d", "question": "How many times as many run?", "answer": {"kind": "number", "unit": "x"},
        "reveal": {"ratio": "peak_running", "numerator": "fp8 KV", "denominator": "fp32 KV"},
        "base": {"backend": "real", "model": "tiny-llama", "num_requests": 6, "seed": 0,
                 "workload": {"name": "w", "prompt_tokens": 40, "output_tokens": 4, "all_at_once": True}},
        "configs": [{"label": "fp32 KV", "engine": {"kv_cache_dtype": "fp32"}},
                    {"label": "fp8 KV", "engine": {"kv_cache_dtype": "fp8_e4m3"}}]}, "the test's scenario")


def test_the_answer_comes_before_the_quality_cost_is_measured(qtbot):
    scenario = _fp8_kv_on_the_tiny_model()
    spec = scenario.comparison_spec(requests=None, seed=None)
    view = CompareView()
    qtbot.addWidget(view)
    view.resize(1280, 720)
    view.show()
    view.host = FakeHost()
    view.open_comparison(spec, scenario.title, scenario_texts=scenario_texts(scenario), scenario=scenario)
    view.panel.commit()

    session = ComparisonSession()
    session.handle(APPLY, (spec, False))
    session.handle(PLAY, None)
    revealed_at = None  # (the frame was final, the quality notes then)
    for _ in range(10_000):
        session.advance(0.05)
        frame = session.take_frame()
        view.render_frame(frame)
        if view.revealed is not None and revealed_at is None:
            revealed_at = (frame.done, [c.kv_quality_note for c in view.results.configurations])
        if frame.done:
            break
    assert frame.done and revealed_at is not None
    final_at_reveal, notes_at_reveal = revealed_at
    assert not final_at_reveal, "the reveal waited for the quality cost"
    assert "not measured yet" in notes_at_reveal
    measured = view.results.configurations[1]
    assert measured.kv_quality_cost is not None and measured.kv_quality_note != "not measured yet"
    assert view.table.rows and _answer_row_is_bold(view, scenario)
    assert view.done and view.revealed is not None


def test_an_answer_that_is_the_quality_cost_waits_for_it(qtbot):
    scenario = load_scenario("fp8-kv-real")
    view = CompareView()
    qtbot.addWidget(view)
    view.scenario = scenario
    assert not view._answer_needs_quality()
    view.scenario = type("Asked", (), {"reveal_from": type("R", (), {"name": "kv_quality_cost"})()})()
    assert view._answer_needs_quality()


def _run_to_the_end(view: CompareView, spec) -> list:
    session = ComparisonSession()
    session.handle(APPLY, (spec, False))
    session.handle(PLAY, None)
    frames = []
    for _ in range(10_000):
        session.advance(0.05)
        frame = session.take_frame()
        frames.append(frame)
        view.render_frame(frame)
        if frame.done:
            return frames
    raise AssertionError("the comparison did not finish")


def test_the_results_are_laid_out_once_for_a_plain_comparison(qtbot):
    """No scenario: the results table comes forward when the runs end, and the final table with the
    quality cost does not lay the page out again (a splitter moved meanwhile stays where it is)."""
    spec = _fp8_kv_on_the_tiny_model().comparison_spec(requests=None, seed=None)
    view = CompareView()
    qtbot.addWidget(view)
    view.host = FakeHost()
    view.open_comparison(spec, "plain")
    reveals = []
    original = view._reveal
    view._reveal = lambda: (reveals.append(len(reveals)), original())
    frames = _run_to_the_end(view, spec)
    assert any(f.runs_finished and not f.done for f in frames)
    assert len(reveals) == 1 and view.done


def test_a_runs_finished_frame_with_an_error_reveals_nothing(qtbot):
    """The table at the runs' end could not be made: the page says why and reveals no answer from
    an older table."""
    from kvscope.app.host.protocol import CompareFrame

    scenario = _fp8_kv_on_the_tiny_model()
    view = CompareView()
    qtbot.addWidget(view)
    view.host = FakeHost()
    view.open_comparison(scenario.comparison_spec(requests=None, seed=None), scenario.title,
                         scenario_texts=scenario_texts(scenario), scenario=scenario)
    view.panel.commit()
    view.render_frame(CompareFrame(runs_finished=True, error="the table could not be made", status="stopped"))
    assert view.revealed is None and view.errors_shown
