"""`kvscope bench compare`: a comparison in the window against the same comparison headless.

The window opens a scenario (real backend by default: fp8-kv-real; a simulated one runs at the
window's maximum speed) and runs it to its revealed answer, the comparison in its own process;
headless, `kvscope compare --scenario` runs it in a fresh process. Rounds alternate the two on the
same machine (its speed drifts by several per cent between minutes), each side in a fresh process
every round, so the figures are ratios within one run of this command:

frame:  while the comparison runs, every frame that moved its block maps -- the comparison page
        taking the frame and the event loop repainting what it updated -- against the 16 ms
        target, and how late a 16 ms timer fires (what a key press waits for).
speed:  the comparison's own wall time (engines stepping, model loading excluded) in the window
        over the same headless, and end to end (process start to the final table, the KV
        quality measurement included). Target: <= 1.0, i.e. the window costs it nothing.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kvscope.app.lab.output_path import write_json_output
from kvscope.app.bench.bench_gui import _app, _values

FRAME_TARGET_MS = 16.0  # the main window's frame interval: 60 frames a second
PROBE_INTERVAL_MS = 16
RUN_TIMEOUT_S = 600.0
COMPARE_ROUNDS = 3  # each a whole comparison in the window and headless: minutes


def _headless(scenario: str, requests: int | None) -> dict:
    """`kvscope compare --scenario` in a fresh process, as a user runs it."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "result.json"
        command = [sys.executable, "-c", "import sys; from kvscope.app.cli.main import main; sys.exit(main())",
                   "compare", "--scenario", scenario, "--quiet", "--json", str(out)]
        if requests is not None:
            command += ["--requests", str(requests)]
        started = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
        total = time.perf_counter() - started
        if done.returncode != 0:
            raise RuntimeError(f"kvscope compare failed ({done.returncode}): {done.stderr.strip()[-500:]}")
        result = json.loads(out.read_text(encoding="utf-8"))
    return {"stepping_s": result["wall_time_s"], "end_to_end_s": total}


def _percentile(values: list, q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))] if ordered else float("nan")


def _in_window(app, window, scenario: str, requests: int | None) -> dict:
    """The scenario on the comparison page, from opening it (its process started afresh) to the
    revealed answer; every frame it drew meanwhile, timed."""
    from PySide6.QtCore import QTimer

    if window.compare is not None:
        window.compare.stop()  # the next comparison starts its own process, as the headless run does
    started = time.perf_counter()
    if not window.open_scenario(scenario, requests=requests):
        raise RuntimeError(f"the window could not open the scenario {scenario}")
    view = window.compare
    frames_ms: list[float] = []
    original_render = view.render_frame
    rendering = {"count": 0}

    def timed_render(frame):
        if frame.snapshots is not None:  # block maps to redraw: a frame that shows the run move
            rendering["count"] += 1
        original_render(frame)

    view.render_frame = timed_render
    probe_times: list[float] = []
    probe = QTimer()
    probe.setInterval(PROBE_INTERVAL_MS)
    probe.timeout.connect(lambda: probe_times.append(time.perf_counter()))
    probe.start()
    window.play_pressed()  # commits the guess on screen and runs, as a presenter's Space does
    stepping_started = None
    try:
        while not (view.done or view.errors_shown):
            if time.perf_counter() - started > RUN_TIMEOUT_S:
                raise RuntimeError("the comparison did not finish in the window")
            before = rendering["count"]
            t0 = time.perf_counter()
            app.processEvents()  # the frame timers' work and the repaint of what they updated
            if rendering["count"] != before and view.info is not None:
                frames_ms.append((time.perf_counter() - t0) * 1000)
                stepping_started = stepping_started or t0
            time.sleep(0.001)
    finally:
        probe.stop()
        view.render_frame = original_render
    total = time.perf_counter() - started
    if view.errors_shown:
        raise RuntimeError(f"the comparison stopped with an error: {view.errors_shown[-1][-500:]}")
    late_ms = [max(0.0, (b - a) * 1000 - PROBE_INTERVAL_MS) for a, b in zip(probe_times, probe_times[1:])]
    drawing_s = total - (stepping_started - started) if stepping_started else total
    return {"stepping_s": view.results.wall_time_s, "end_to_end_s": total, "frames": len(frames_ms),
            "frames_per_s": len(frames_ms) / drawing_s if drawing_s > 0 else 0.0, "frame_ms": frames_ms,
            "timer_late_ms": late_ms}


def bench_compare(scenario: str = "fp8-kv-real", rounds: int = COMPARE_ROUNDS, requests: int | None = None) -> dict:
    from kvscope.app.lab.scenarios import load_scenario
    from kvscope.app.gui.main_window import MainWindow

    load_scenario(scenario).comparison_spec(requests=requests)  # a bad name or count: one line, exit 2
    rounds = max(1, rounds)
    app = _app()
    # opened on the scenario: the live engine is never built, so nothing else competes for the CPU
    window = MainWindow(_values(), autoplay=False, scenario=scenario)
    window.resize(1920, 1080)
    window.show()
    window.speed.setCurrentText("max")  # a simulated comparison as fast as it goes, as headless
    headless, windowed = [], []
    try:
        for _ in range(rounds):
            windowed.append(_in_window(app, window, scenario, requests))
            # its process ended before headless starts, as headless's ends before the window's next
            # round: each side runs with nothing of the other's left on the machine
            window.compare.stop()
            headless.append(_headless(scenario, requests))
    finally:
        window.close()
    frames = [ms for w in windowed for ms in w["frame_ms"]]
    late = [ms for w in windowed for ms in w["timer_late_ms"]]
    stepping = [w["stepping_s"] / h["stepping_s"] for w, h in zip(windowed, headless)]
    end_to_end = [w["end_to_end_s"] / h["end_to_end_s"] for w, h in zip(windowed, headless)]
    return {
        "scenario": scenario, "rounds": rounds, "frames": len(frames),
        "frames_per_s": statistics.median(w["frames_per_s"] for w in windowed),
        "frame_median_ms": statistics.median(frames), "frame_p90_ms": _percentile(frames, 90),
        "frame_max_ms": max(frames), "frames_over_target": sum(ms > FRAME_TARGET_MS for ms in frames) / len(frames),
        "timer_late_median_ms": statistics.median(late), "timer_late_p99_ms": _percentile(late, 99),
        "timer_late_max_ms": max(late), "target_frame_ms": FRAME_TARGET_MS,
        "window_stepping_s": [w["stepping_s"] for w in windowed], "headless_stepping_s": [h["stepping_s"] for h in headless],
        "window_end_to_end_s": [w["end_to_end_s"] for w in windowed],
        "headless_end_to_end_s": [h["end_to_end_s"] for h in headless],
        "stepping_ratio": statistics.median(stepping), "stepping_ratios": stepping,
        "end_to_end_ratio": statistics.median(end_to_end), "end_to_end_ratios": end_to_end,
    }


def cmd_bench_compare(args) -> int:
    from kvscope.app.cli.output import table

    r = bench_compare(args.scenario, COMPARE_ROUNDS if args.rounds is None else args.rounds)
    print(table([
        ("window frames", f"{r['frames']:,} drawn while it ran, {r['frames_per_s']:.1f} a second (median round)"),
        ("frame time", f"median {r['frame_median_ms']:.1f} ms, p90 {r['frame_p90_ms']:.1f} ms, max "
                       f"{r['frame_max_ms']:.1f} ms (target <= {r['target_frame_ms']:.0f} ms; "
                       f"{r['frames_over_target'] * 100:.1f} % of frames over it)"),
        ("a 16 ms timer fires late by", f"median {r['timer_late_median_ms']:.1f} ms, p99 {r['timer_late_p99_ms']:.1f} ms, "
                                        f"max {r['timer_late_max_ms']:.1f} ms"),
        ("comparison, stepping", f"window / headless {r['stepping_ratio']:.2f}x, median of "
                                 + ", ".join(f"{x:.2f}" for x in r["stepping_ratios"])
                                 + f" (window {statistics.median(r['window_stepping_s']):.2f} s, headless "
                                   f"{statistics.median(r['headless_stepping_s']):.2f} s; target <= 1.00x)"),
        ("comparison, end to end", f"window / headless {r['end_to_end_ratio']:.2f}x, median of "
                                   + ", ".join(f"{x:.2f}" for x in r["end_to_end_ratios"])
                                   + f" (window {statistics.median(r['window_end_to_end_s']):.2f} s, headless "
                                     f"{statistics.median(r['headless_end_to_end_s']):.2f} s)"),
    ], title=f"A comparison in the window vs `kvscope compare --scenario {r['scenario']}` "
             f"({r['rounds']} alternating rounds, each in a fresh process)"))
    if args.json:
        write_json_output("--json", args.json, r)
    return 0
