"""`kvscope bench scenarios`: for each guided scenario, the seconds from the committed guess to its
revealed answer in the window at its default speed, and when its decisive moment comes.

Opening a simulated scenario sets the window's speed to the scenario's playback_speed (engine
seconds per wall-clock second; 1x unless its file says otherwise), so the wait for its reveal is
the shared engine clock at which its last configuration finishes, divided by that speed; the real backend is not paced (it runs at this machine's speed), so a real scenario's
wait is the wall time its comparison takes here, model loading excluded. The comparison is the
window's own (lab.compare.Comparison, at the scenario's own request count), run headless.

With --in-window each scenario is also timed where a person meets it: the window (offscreen unless
a display is there) opens it at its default speed, waits for its configurations (a real model loads
first), commits a guess as Space does, and the wall time to the revealed answer is read off the
clock, frames, pacing and drawing included.

The decisive moment: the clock at which the configuration the answer is read from first has its
KV pool fullest, the moment the reveal freezes its block maps at. Target: every reveal within
about 20 s at 1x.
"""

from __future__ import annotations

import time

from kvscope.app.lab.compare import Comparison
from kvscope.engine.config import ConfigError
from kvscope.app.lab.output_path import write_json_output
from kvscope.app.lab.scenarios import load_scenario, scenario_names

REVEAL_TARGET_S = 20.0


def measure_scenario(name: str) -> dict:
    """One scenario's comparison run to its end: the seconds to its reveal at 1x, and its decisive moment."""
    scenario = load_scenario(name)
    comparison = Comparison(scenario.comparison_spec())
    answer_config = scenario.reveal_from.config or scenario.reveal_from.numerator or scenario.labels[0]
    watched = comparison.engines[scenario.labels.index(answer_config)]
    fullest, fullest_at = -1.0, 0.0
    started = time.perf_counter()
    while not comparison.done:
        comparison.step()
        usage = watched.kv.usage
        if usage > fullest + 1e-9:
            fullest, fullest_at = usage, watched.clock
    wall_s = time.perf_counter() - started
    value, answer = scenario.reveal(comparison.results(measure_quality=False))
    clock_s = max(engine.clock for engine in comparison.engines)
    speed = scenario.playback_speed
    reveal_s = clock_s / speed if scenario.backend == "simulated" else wall_s
    return {"scenario": name, "backend": scenario.backend, "requests": scenario.num_requests,
            "playback_speed": speed, "seconds_to_reveal": reveal_s, "engine_clock_s": clock_s, "wall_s": wall_s,
            "decisive_moment_s": fullest_at / speed if scenario.backend == "simulated" else None, "peak_kv_usage_of_answer_config": fullest,
            "answer": answer, "answer_source": "computed" if scenario.reveal_from.kind == "memory" else "measured",
            "decisive_moment_engine_s": fullest_at, "within_target": reveal_s <= REVEAL_TARGET_S}


REVEAL_TIMEOUT_S = 300.0
CONDITION_CHECK_MS = 100  # a reveal is timed to within this


def _wait(app, condition, timeout_s: float, what: str) -> None:
    """Runs the window's event loop until condition() holds. The loop sleeps between events as a
    window left to itself does: polling it every 2 ms woke this process ~500 times a second, and
    each wake-up took a core from a real comparison's torch threads (fp8-kv-real's reveal 16.6 ->
    14.9 s in one pair of runs)."""
    from PySide6.QtCore import QEventLoop, QTimer

    started = time.perf_counter()
    loop = QEventLoop()
    while not condition():
        if time.perf_counter() - started > timeout_s:
            raise RuntimeError(f"{what} took over {timeout_s:.0f} s in the window")
        QTimer.singleShot(CONDITION_CHECK_MS, loop.quit)
        loop.exec()


def time_reveal_in_window(app, window, name: str) -> float:
    """Seconds of wall time from the committed guess to the revealed answer, in the window at the
    scenario's default speed (the window sets it on opening)."""
    if window.compare is not None:
        window.compare.stop()
    if not window.open_scenario(name):
        raise RuntimeError(f"the window could not open the scenario {name}")
    view, scenario = window.compare, load_scenario(name)
    _wait(app, lambda: len(view.columns) == len(scenario.configs) or bool(view.errors_shown), REVEAL_TIMEOUT_S,
          f"building {name}'s configurations")
    started = time.perf_counter()
    window.play_pressed()  # commits the guess on screen and runs, as a presenter's Space does
    _wait(app, lambda: view.revealed is not None or bool(view.errors_shown), REVEAL_TIMEOUT_S, f"{name}'s reveal")
    if view.errors_shown:
        raise RuntimeError(f"{name} stopped with an error: {view.errors_shown[-1][-300:]}")
    return time.perf_counter() - started


def cmd_bench_scenarios(args) -> int:
    rows = []
    in_window = getattr(args, "in_window", False)
    window = app = None
    if in_window:
        from kvscope.app.bench.bench_gui import _app, _values
        from kvscope.app.gui.main_window import MainWindow

        app = _app()
        # opened on a scenario: the live engine is never built, so nothing else competes for the CPU
        window = MainWindow(_values(), autoplay=False, scenario=scenario_names()[0])
        window.resize(1920, 1080)
        window.show()
    print("seconds of wall time from the guess, at the speed the window opens each scenario at"
          + ("; 'window': timed in the window itself" if in_window else ""))
    print(f"{'scenario':<26} {'backend':<10} {'speed':>6} {'reveal':>9} " + (f"{'window':>9} " if in_window else "")
          + f"{'decisive':>9} {'KV peak':>8}  answer")
    for name in scenario_names():
        row = measure_scenario(name)
        if in_window:
            try:
                row["seconds_to_reveal_in_window"] = time_reveal_in_window(app, window, name)
            except RuntimeError as exc:
                window.close()
                raise ConfigError(str(exc)) from exc
            row["within_target"] = row["within_target"] and row["seconds_to_reveal_in_window"] <= REVEAL_TARGET_S
        rows.append(row)
        flag = "" if row["within_target"] else f"  (over the {REVEAL_TARGET_S:.0f} s target)"
        decisive = f"{row['decisive_moment_s']:>7.1f} s" if row["decisive_moment_s"] is not None else f"{'-':>9}"
        timed = f"{row['seconds_to_reveal_in_window']:>7.1f} s " if in_window else ""
        print(f"{name:<26} {row['backend']:<10} {row['playback_speed']:>5g}x {row['seconds_to_reveal']:>7.1f} s {timed}"
              f"{decisive} {row['peak_kv_usage_of_answer_config'] * 100:>7.1f} %  "
              f"{row['answer']} ({row['answer_source']}){flag}", flush=True)
    if window is not None:
        window.close()
    if getattr(args, "json", None):
        write_json_output("--json", args.json, {"reveal_target_s": REVEAL_TARGET_S, "scenarios": rows})
    return 0
