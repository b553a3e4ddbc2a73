"""`kvscope bench scenarios`: for each guided scenario, the seconds from the committed guess to its
revealed answer in the window at its default speed, and when its decisive moment comes.

Opening a simulated scenario sets the window's speed to the scenario's playback_speed (engine
seconds per wall-clock second; 1x unless its file says otherwise), so the wait for its reveal is
the shared engine clock at which its last configuration finishes, divided by that speed; the real backend is not paced (it runs at this machine's speed), so a real scenario's
wait is the wall time its comparison takes here, model loading excluded. The comparison is the
window's own (lab.compare.Comparison, at the scenario's own request count), run headless.

The decisive moment: the clock at which the configuration the answer is read from first has its
KV pool fullest, the moment the reveal freezes its block maps at. Target: every reveal within
about 20 s at 1x.
"""

from __future__ import annotations

import time

from kvscope.app.lab.compare import Comparison
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


def cmd_bench_scenarios(args) -> int:
    rows = []
    print("seconds of wall time from the guess, at the speed the window opens each scenario at")
    print(f"{'scenario':<26} {'backend':<10} {'speed':>6} {'reveal':>9} {'decisive':>9} {'KV peak':>8}  answer")
    for name in scenario_names():
        row = measure_scenario(name)
        rows.append(row)
        flag = "" if row["within_target"] else f"  (over the {REVEAL_TARGET_S:.0f} s target)"
        decisive = f"{row['decisive_moment_s']:>7.1f} s" if row["decisive_moment_s"] is not None else f"{'-':>9}"
        print(f"{name:<26} {row['backend']:<10} {row['playback_speed']:>5g}x {row['seconds_to_reveal']:>7.1f} s "
              f"{decisive} {row['peak_kv_usage_of_answer_config'] * 100:>7.1f} %  "
              f"{row['answer']} ({row['answer_source']}){flag}", flush=True)
    if getattr(args, "json", None):
        write_json_output("--json", args.json, {"reveal_target_s": REVEAL_TARGET_S, "scenarios": rows})
    return 0
