"""`kvscope bench soak`: the window left running for a long time, its memory measured.

The real window (offscreen unless a display is there) runs the default simulated run -- the
window's own defaults with --backend simulated -- at maximum speed, applying it again each time
the workload ends, for --minutes. Every SAMPLE_INTERVAL_S the resident memory (RSS) of the window's
process and of its engine process is sampled. The figure is the growth from minute 2 (the first
run's arrays, fonts and caches are built by then) to the end, and the slope of a straight line
fitted through the samples after minute 2, per 10 minutes. Target: < 50 MB growth for each process
over 30 minutes.

--tracemalloc also traces the window's Python allocations from minute 2 and lists the lines that
grew most by the end: where to look if the window's growth is over the target.
"""

from __future__ import annotations

import math
import os
import platform
import time

from kvscope.engine.config import ConfigError

SAMPLE_INTERVAL_S = 10.0
WARMUP_S = 120.0
DONE_POLL_MS = 200  # how often the soak looks for the end of a run, to apply it again
TARGET_GROWTH_MB = 50.0
TRACEMALLOC_TOP = 10
MB = 1e6


def rss_bytes(pid: int) -> int | None:
    """The resident memory of a process now; None if it is gone (or this system has no /proc and
    no psutil)."""
    try:
        with open(f"/proc/{pid}/statm", encoding="ascii") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        pass
    try:
        import psutil

        return psutil.Process(pid).memory_info().rss
    except Exception:  # noqa: BLE001 - psutil missing, or the process gone
        return None


def growth(samples: list[tuple[float, int | None]], warmup_s: float | None = None) -> dict:
    """From (seconds since the start, RSS bytes) samples: the RSS at the first sample from warmup_s
    on and at the last, their difference, and a least-squares slope through the samples from
    warmup_s on, per 10 minutes (all in MB). Empty when fewer than two samples are past warmup_s."""
    import numpy as np

    warmup_s = WARMUP_S if warmup_s is None else warmup_s
    kept = [(t, rss) for t, rss in samples if t >= warmup_s and rss is not None]
    if len(kept) < 2:
        return {}
    times = np.array([t for t, _ in kept])
    values = np.array([rss for _, rss in kept], dtype=np.float64) / MB
    slope_per_s = float(np.polyfit(times, values, 1)[0]) if times[-1] > times[0] else 0.0
    return {"from_s": float(times[0]), "to_s": float(times[-1]), "start_mb": float(values[0]),
            "end_mb": float(values[-1]), "peak_mb": float(values.max()), "growth_mb": float(values[-1] - values[0]),
            "slope_mb_per_10_min": slope_per_s * 600}


def _soak_values() -> dict:
    """The window's first settings as `kvscope gui --backend simulated` would give them."""
    from kvscope.app.cli.gui import initial_values

    class Args:
        backend, model, hardware, workload, model_path = "simulated", None, None, None, None

    return initial_values(Args())


def soak(minutes: float, trace_allocations: bool = False, progress=None) -> dict:
    """Runs the window for `minutes`; the samples, the runs completed and the growth of each process."""
    from PySide6.QtCore import QEventLoop, QTimer

    from kvscope.app.bench.bench_gui import _app
    from kvscope.app.gui.main_window import MainWindow

    _app()
    window = MainWindow(_soak_values(), autoplay=False)
    window.resize(1600, 960)
    window.show()
    window.arrange_docks()
    window.speed.setCurrentText("max")
    window.apply_settings(play=True)
    started = time.perf_counter()
    gui_samples: list[tuple[float, int | None]] = []
    engine_samples: list[tuple[float, int | None]] = []
    state = {"runs_completed": 0, "engine_pids": set(), "tracemalloc_start": None}

    def restart_finished_run() -> None:
        if window.done:
            # Reset (R) at the end of a run, as a user would; the host rebuilds from the config it
            # holds, so a preset file edited meanwhile on disk cannot stop the soak.
            state["runs_completed"] += 1
            window.done = False
            window.worker.restart(play=True)

    def sample() -> None:
        elapsed = time.perf_counter() - started
        engine_pid = window.worker.pid
        gui_samples.append((elapsed, rss_bytes(os.getpid())))
        engine_samples.append((elapsed, rss_bytes(engine_pid) if engine_pid else None))
        if engine_pid:
            state["engine_pids"].add(engine_pid)
        if trace_allocations and state["tracemalloc_start"] is None and elapsed >= WARMUP_S:
            import tracemalloc

            tracemalloc.start(8)
            state["tracemalloc_start"] = tracemalloc.take_snapshot()
        if progress is not None and len(gui_samples) % 6 == 0:  # once a minute
            gui, engine = gui_samples[-1][1], engine_samples[-1][1]
            progress(f"{elapsed / 60:5.1f} min  window {_mb(gui)}  engine {_mb(engine)}  "
                     f"runs completed {state['runs_completed']}  frames {window.frames_rendered:,}")

    done_timer, sample_timer = QTimer(), QTimer()
    done_timer.timeout.connect(restart_finished_run)
    sample_timer.timeout.connect(sample)
    done_timer.start(DONE_POLL_MS)
    sample_timer.start(int(SAMPLE_INTERVAL_S * 1000))
    sample()

    def finish() -> None:
        done_timer.stop()
        sample_timer.stop()
        sample()  # the last sample while both processes still run
        loop.quit()

    # an event loop of its own, as the window's: quitting it leaves the application (and any other
    # window in this process) as it was
    loop = QEventLoop()
    QTimer.singleShot(int(minutes * 60_000), finish)
    loop.exec()
    top_growth = _allocation_growth(state["tracemalloc_start"])
    result = {
        "minutes": minutes, "sample_interval_s": SAMPLE_INTERVAL_S, "warmup_s": WARMUP_S,
        "runs_completed": state["runs_completed"], "frames_rendered": window.frames_rendered,
        "engine_errors": len(window.errors_shown), "engine_processes": len(state["engine_pids"]),
        "window": growth(gui_samples), "engine": growth(engine_samples),
        # a warm-up curve flattens, a leak does not: the same figures over the second half
        "window_second_half": growth(gui_samples, minutes * 30),
        "engine_second_half": growth(engine_samples, minutes * 30),
        "window_samples": gui_samples, "engine_samples": engine_samples,
        "allocation_growth": top_growth, "target_growth_mb": TARGET_GROWTH_MB,
    }
    window.close()
    return result


def _allocation_growth(start_snapshot) -> list[str]:
    """The lines whose allocations grew most since start_snapshot (empty without one)."""
    if start_snapshot is None:
        return []
    import tracemalloc

    end = tracemalloc.take_snapshot()
    tracemalloc.stop()
    return [str(stat) for stat in end.compare_to(start_snapshot, "lineno")[:TRACEMALLOC_TOP]]


def _mb(value) -> str:
    return "-" if value is None else f"{value / MB:,.1f} MB"


def _growth_line(g: dict, second_half: dict) -> str:
    if not g:
        return f"too short to measure (needs samples after minute {WARMUP_S / 60:g})"
    verdict = "within" if g["growth_mb"] < TARGET_GROWTH_MB else "OVER"
    line = (f"{g['start_mb']:,.1f} MB at {g['from_s'] / 60:.1f} min -> {g['end_mb']:,.1f} MB at "
            f"{g['to_s'] / 60:.1f} min: {g['growth_mb']:+,.1f} MB ({verdict} the {TARGET_GROWTH_MB:.0f} MB target); "
            f"slope {g['slope_mb_per_10_min']:+,.2f} MB per 10 min; peak {g['peak_mb']:,.1f} MB")
    if second_half:
        line += (f"; second half {second_half['growth_mb']:+,.1f} MB, slope "
                 f"{second_half['slope_mb_per_10_min']:+,.2f} MB per 10 min")
    return line


def cmd_soak(args) -> int:
    import sys

    from kvscope.app.cli.output import table
    from kvscope.app.lab.output_path import check_output_path, write_json_output

    check_output_path("--json", args.json)
    minutes = args.minutes
    print(f"soak: the window at maximum speed for {minutes:g} min, memory sampled every {SAMPLE_INTERVAL_S:g} s",
          file=sys.stderr, flush=True)
    r = soak(minutes, trace_allocations=args.tracemalloc,
             progress=lambda line: print(line, file=sys.stderr, flush=True))
    rows = [
        ("date", time.strftime("%Y-%m-%d %H:%M")),
        ("machine", f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
                    f"Python {platform.python_version()}"),
        ("runs", f"{r['runs_completed']} completed (the default simulated run, rebuilt at each end), "
                 f"{r['frames_rendered']:,} frames drawn, {r['engine_errors']} engine errors, "
                 f"{r['engine_processes']} engine process(es)"),
        ("window process RSS", _growth_line(r["window"], r["window_second_half"])),
        ("engine process RSS", _growth_line(r["engine"], r["engine_second_half"])),
    ]
    print(table(rows, title=f"Soak: the window at maximum speed for {minutes:g} min"))
    if r["allocation_growth"]:
        print("\nwindow process: Python allocations that grew most from minute 2 (tracemalloc)")
        for line in r["allocation_growth"]:
            print(f"  {line}")
    if args.json:
        r["machine"] = rows[1][1]
        write_json_output("--json", args.json, r)
    return 0


def check_soak_minutes(minutes: float) -> None:
    """The soak's figure is the memory growth from minute 2 (past the start's own growth), through the
    samples taken after it: `bench soak --minutes 1e-9` ran for nothing and printed "too short to
    measure" under a title of 1e-09 min, exit 0."""
    least = math.ceil((WARMUP_S + 2 * SAMPLE_INTERVAL_S) / 60 * 2) / 2  # two samples past the warm-up, in half minutes
    if minutes < least:
        raise ConfigError(f"--minutes {minutes:g}: the soak measures memory growth from minute {WARMUP_S / 60:g}, in "
                          f"samples every {SAMPLE_INTERVAL_S:g} s, so a shorter soak measures nothing; give at least "
                          f"--minutes {least:g} (default 30)")
