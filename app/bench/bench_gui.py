"""`kvscope bench gui`: the window's figures for README.md.

frame: one frame — the engine session's snapshot and frame, pickled and unpickled as they cross
       from the engine process to the window (the snapshot as the blocks changed since the last,
       rebuilt on the window's side, as the process host does), then handed to every view and the
       whole window repainted — with a 500,000-block pool and 1,024 running requests (simulated
       llama-3-8b on h100-80gb). Target: median <= 10 ms (issue 15: 16 ms must hold on a slower machine).
cost:  the window's engine (its own process, running flat out: the simulated clock at "max", a
       chat workload too long to finish) against a headless copy of it in this process, over the
       same steps, in short alternating rounds (see bench_cost); the median round. Both sides
       step on the same core (see _Cores), the window drawing on the other. Target: the window
       costs <= 5 % (issue 15: 10 % on a slower machine). Beside it, where the cost goes: the CPU
       time the engine's process spent beyond the headless copy's for the same steps, and the
       share of a core each process had.
"""

from __future__ import annotations

import glob
import math
import os
import statistics
import time

FRAME_BLOCKS = 500_000
ENDLESS_REQUESTS = 1_000_000
FRAME_RUNNING = 1024
# Issue 15: 10 ms here, so that a slower machine of the same kind stays within a 60 Hz frame (16 ms).
FRAME_TARGET_MS = 10.0
COST_TARGET = 0.05
COST_ROUNDS = 24  # about a minute in all
COST_INTERVAL = 0.90  # the bootstrap interval given around the median round
SETTLE_TIMEOUT_S = 10.0  # a paused engine's frame later than this: the benchmark stops, saying so


def _app():
    if not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY"):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtWidgets import QApplication

    return QApplication.instance() or QApplication([])


def _values(**changes) -> dict:
    from kvscope.app.cli.gui import initial_values

    class Args:
        backend, model, hardware, workload, model_path = "simulated", "llama-3-8b", "h100-80gb", "azure-conv", None

    values = initial_values(Args())
    values.update(changes)
    return values


def _process_cpu_s(pid: int | None) -> float | None:
    """CPU seconds of every thread of process pid so far (Linux's scheduler statistics); None
    where there are none to read."""
    if pid is None:
        return None
    total = 0
    for path in glob.glob(f"/proc/{pid}/task/*/schedstat"):
        try:
            with open(path) as stats:
                total += int(stats.read().split()[0])  # nanoseconds on a CPU
        except (OSError, ValueError, IndexError):  # a thread that ended meanwhile
            continue
    return total / 1e9 if total else None


def _wait(app, predicate, timeout: float, failure: str = "the window did not get ready in time") -> None:
    deadline = time.perf_counter() + timeout
    while not predicate():
        if time.perf_counter() > deadline:
            raise RuntimeError(failure)
        app.processEvents()
        time.sleep(0.01)


def _run_event_loop(seconds: float) -> None:
    from PySide6.QtCore import QEventLoop, Qt, QTimer

    loop = QEventLoop()
    timer = QTimer(loop, singleShot=True, timerType=Qt.TimerType.PreciseTimer)
    timer.timeout.connect(loop.quit)
    timer.start(round(seconds * 1000))
    loop.exec()


class _WindowOnThisThread:
    """The real window at 1920x1080, its engine session driven on this thread instead of its own
    process; a frame goes across as through the pipe (send, receive: pickled, the block arrays as
    changes rebuilt on the window's side) and draw() paints it."""

    def __init__(self, values: dict):
        from kvscope.app.gui.main_window import MainWindow
        from kvscope.app.host.session import EngineSession
        from kvscope.app.host.session_blocks import SnapshotRebuilder

        self.app = _app()
        self.window = MainWindow(values, autoplay=False)
        self.window.resize(1920, 1080)
        self.window.show()
        self.window.timer.stop()
        self.window.worker.stop()
        self.session = EngineSession()
        self.session.restart_snapshot_changes()  # as in the engine's process (process_host.serve)
        self.snapshots = SnapshotRebuilder()
        self.session.handle("apply", (self.window.config, False))

    @staticmethod
    def send(frame) -> list:
        """The engine process's side: the frame as the messages it writes to the pipe."""
        from kvscope.app.host.protocol import encode_frame

        return encode_frame(frame)

    def receive(self, messages: list):
        """The window's side: the messages read back into a frame, its snapshot rebuilt."""
        from kvscope.app.host.protocol import decode_frame

        received = iter([bytes(m) for m in messages])  # what reading them from the pipe makes
        frame = decode_frame(next(received), lambda: next(received))
        if not self.snapshots.rebuild(frame):
            raise RuntimeError("a frame's snapshot could not be rebuilt from its changes")
        return frame

    def draw(self, frame) -> None:
        self.window.render_frame(frame)
        self.app.processEvents()  # the event loop paints every view the frame updated, as in the window


def bench_frame(frames: int = 120) -> dict:
    block_bytes = 16 * 131072  # llama-3-8b, bf16 KV, 16-token blocks
    here = _WindowOnThisThread(_values(workload="uniform-short", num_requests=1, max_num_seqs=FRAME_RUNNING,
                                       kv_cache_memory_bytes=FRAME_BLOCKS * block_bytes))
    window, session, snapshots = here.window, here.session, here.snapshots
    first = session.take_frame()
    snapshots.rebuild(first)
    window.render_frame(first)
    engine = session.engine
    for i in range(FRAME_RUNNING):  # long requests: all of them running for the whole benchmark
        engine.add_request([(i * 7919 + t) % 32000 for t in range(256)], max_tokens=7000)
    while len(engine.scheduler.running) < FRAME_RUNNING or engine.step().num_prefill_tokens:
        engine.step()
    assert len(engine.scheduler.running) == FRAME_RUNNING and engine.plan.num_blocks == FRAME_BLOCKS
    snapshot_ms, render_ms, total_ms = [], [], []
    for _ in range(frames):
        session._run_one_step()
        t0 = time.perf_counter()
        frame = here.receive(here.send(session.take_frame()))
        t1 = time.perf_counter()
        here.draw(frame)
        t2 = time.perf_counter()
        snapshot_ms.append((t1 - t0) * 1000)
        render_ms.append((t2 - t1) * 1000)
        total_ms.append((t2 - t0) * 1000)
    window.close()
    return {"blocks": FRAME_BLOCKS, "running": FRAME_RUNNING, "frames": frames,
            "frame_median_ms": statistics.median(total_ms), "frame_mean_ms": statistics.mean(total_ms),
            "frame_p90_ms": sorted(total_ms)[int(0.9 * frames)],
            "snapshot_median_ms": statistics.median(snapshot_ms), "render_median_ms": statistics.median(render_ms),
            "target_median_ms": FRAME_TARGET_MS}


FAST_FRAMES = 60
FAST_FRAME_INTERVAL_S = 0.1  # the engine runs this long between two frames, as a window at ~10 frames/s
LONG_RUN_POINTS = 300_000  # ten minutes at maximum speed: a plot point every 2 ms of wall time


def bench_fast_frame(frames: int = FAST_FRAMES, long_run_points: int = LONG_RUN_POINTS) -> dict:
    """The window's side of a frame at maximum speed: the default chat run on h100-80gb flat out,
    FAST_FRAME_INTERVAL_S of steps between two frames (~1,500 steps: 400 for the timeline, hundreds
    of plot points, finished requests), each frame decoded, handed to every view and painted. Then
    the live plots' update after a long run: long_run_points points, grown by 500 a frame."""
    import numpy as np

    from kvscope.widgets.live_plots import LivePlots

    here = _WindowOnThisThread(_values(workload="chat", num_requests=ENDLESS_REQUESTS))
    session = here.session
    session.speed, session.playing = 0, True
    window_ms, steps = [], []
    for _ in range(frames):
        started, first = time.perf_counter(), session.engine.step_count
        while time.perf_counter() - started < FAST_FRAME_INTERVAL_S:
            session.advance(0.001)
        session.frame_requested()
        while not session.frame_ready():
            session.advance(0.001)
        messages = here.send(session.take_frame())
        steps.append(session.engine.step_count - first)
        t0 = time.perf_counter()  # the window's side: from the bytes read to the frame painted
        here.draw(here.receive(messages))
        window_ms.append((time.perf_counter() - t0) * 1000)
    here.window.close()
    plots = LivePlots()
    plots.resize(480, 900)
    plots.show()
    rng = np.random.default_rng(0)
    t = np.cumsum(np.full(long_run_points, 0.002))
    y = rng.random(long_run_points)
    long_ms = []
    for end in range(max(1, long_run_points - 20 * 500), long_run_points + 1, 500):
        series = {"time_s": t[:end], "kv_usage": y[:end], "compute_utilization": y[:end], "num_running": 10 * y[:end],
                  "num_waiting": 5 * y[:end], "throughput_tokens_per_s": 100 * y[:end],
                  "preemptions": np.arange(end, dtype=float)}
        t0 = time.perf_counter()
        plots.set_series(series)
        long_ms.append((time.perf_counter() - t0) * 1000)
    plots.close()
    return {"frames": frames, "steps_per_frame_median": statistics.median(steps),
            "window_median_ms": statistics.median(window_ms), "window_mean_ms": statistics.mean(window_ms),
            "window_p90_ms": sorted(window_ms)[int(0.9 * frames)], "long_run_points": long_run_points,
            "long_run_plots_median_ms": statistics.median(long_ms[1:])}  # the first builds the bins


class _Cores:
    """Both sides step on the same core: the engine's process's stepping thread always, the
    headless loop in its segments, the window on the other core in the window's. This VM's two cores are not alike (the
    same engine made 0.93 - 0.95x the steps on core 1, which takes the disk's interrupts), and left
    to the scheduler the two sides often ran on different ones. No-op with one core or no affinity."""

    def __init__(self, engine_pid: int | None):
        self._usable = (hasattr(os, "sched_setaffinity") and engine_pid is not None
                        and len(os.sched_getaffinity(0)) >= 2)
        if not self._usable:
            return
        self._original = os.sched_getaffinity(0)
        self.engine_core, self.window_core = sorted(self._original)[:2]
        try:  # the engine's thread only (its pid): the thread that writes frames goes where it may
            os.sched_setaffinity(engine_pid, {self.engine_core})
        except OSError:  # the process ended: the measurement says so
            self._usable = False

    def _pin_this_thread(self, core: int) -> None:
        if self._usable:
            os.sched_setaffinity(0, {core})

    def headless_segment(self) -> None:
        self._pin_this_thread(self.engine_core if self._usable else 0)

    def window_segment(self) -> None:
        self._pin_this_thread(self.window_core if self._usable else 0)

    def restore(self) -> None:
        if self._usable:
            os.sched_setaffinity(0, self._original)


def catch_up(engine, snapshot) -> None:
    """Steps engine to the step of snapshot (another engine's) and checks that it took the same
    steps: the same simulated clock there. Else the comparison would be of different work."""
    while engine.step_count < snapshot.step:
        if engine.step() is None:
            raise RuntimeError("the headless engine finished its workload; the comparison would be meaningless")
    if engine.step_count != snapshot.step or not math.isclose(engine.clock, snapshot.time_s, rel_tol=1e-12):
        raise RuntimeError(f"the window's engine and the headless one diverged (step {snapshot.step:,}: clock "
                           f"{snapshot.time_s!r} s against {engine.clock!r} s at step {engine.step_count:,}); "
                           "the comparison would be meaningless")


def median_interval(values: list[float], level: float, resamples: int = 4000) -> tuple[float, float]:
    """Where the median of values would fall (level of the time) had the rounds been run again:
    the percentile bootstrap, so that a figure at this machine's noise says so. It covers the
    noise between one run's rounds, not the drift between runs minutes apart (two runs of 120
    rounds here: 2.9 % and 6.0 %, intervals 1.5 - 4.4 % and 3.4 - 8.7 %). Seeded: the same rounds
    give the same interval."""
    import numpy as np

    samples = np.random.default_rng(0).choice(np.asarray(values, dtype=float), size=(resamples, len(values)))
    medians = np.median(samples, axis=1)
    tail = (1 - level) / 2 * 100
    return float(np.percentile(medians, tail)), float(np.percentile(medians, 100 - tail))


def bench_cost(rounds: int = COST_ROUNDS, round_s: float = 1.0) -> dict:
    """The window's engine and a headless copy of it take the same steps: each round the window's
    plays for round_s, then the copy catches up to exactly the step the window's reached, timed.
    Both are built from the window's RunConfig and seed, so step for step they do the same work
    (checked: their simulated clocks must agree after every round); comparing two engines over
    equal wall time instead compares different stretches of the workload, whose steps cost up to
    a third more or less. Short alternating rounds let a drift in this machine's speed (+-25 %
    from one second to the next here) hit both sides alike; the figure is the median round, with
    the pooled one and the middle half of the rounds beside it."""
    from kvscope.app.gui.main_window import MainWindow
    from kvscope.app.host.process_tuning import tune_for_engine
    from kvscope.app.host.session import build_simulated_engine

    app = _app()
    tune_for_engine()  # as the window's engine process does, so both sides run the same interpreter
    # A workload no run of this length can finish: an idle engine measures nothing.
    window = MainWindow(_values(workload="chat", num_requests=ENDLESS_REQUESTS), autoplay=False)
    window.resize(1920, 1080)
    window.show()
    window.speed.setCurrentText("max")
    window.apply_settings(play=True)
    headless = build_simulated_engine(window.config)

    def settle_paused():
        """The window engine's snapshot once it has paused: the first frame asked for after the
        pause (without the window's hold-offs) shows where it stopped, as the process reads its
        commands in order; the window has drawn it when the host says it came."""
        window.worker.pause()

        def answered() -> bool:
            window.worker.ask_now()  # without the window's hold-offs
            return window.worker.run_command_answered

        _wait(app, answered, SETTLE_TIMEOUT_S, "the paused engine sent no frame in time; the figure would be "
                                               "meaningless")
        return window.latest_snapshot

    _wait(app, lambda: window.latest_snapshot is not None and window.latest_snapshot.step > 1000, 60)  # built, past its first steps
    cores = _Cores(window.worker.pid)
    live = window.engine_info
    snapshot = settle_paused()

    catch_up(headless, snapshot)
    steps = frames = 0
    window_time = window_wall = headless_time = window_cpu = headless_cpu = engine_cpu = 0.0
    engine_cpu_known = True
    round_costs = []
    for _ in range(rounds):
        first, played_before = snapshot.step, window.worker.played_s
        frames_before = window.frames_rendered
        engine_cpu_before = _process_cpu_s(window.worker.pid)
        cores.window_segment()
        window.worker.play()
        started, cpu_started = time.perf_counter(), time.process_time()
        _run_event_loop(round_s)  # as the window's own: woken by its timers and the engine's frames
        window.worker.pause()
        window_wall += time.perf_counter() - started
        window_cpu += time.process_time() - cpu_started
        frames += window.frames_rendered - frames_before
        snapshot = settle_paused()
        # The engine's process timed the round itself, from reading Play to reading Pause: the
        # steps it took after this process sent Pause (a millisecond, or ten while it writes a
        # frame) are in its time too.
        round_window_time = window.worker.played_s - played_before
        engine_cpu_after = _process_cpu_s(window.worker.pid)  # paused since: only the round's steps
        if engine_cpu_before is None or engine_cpu_after is None:
            engine_cpu_known = False
        else:
            engine_cpu += engine_cpu_after - engine_cpu_before
        cores.headless_segment()
        started, cpu_started = time.perf_counter(), time.thread_time()
        catch_up(headless, snapshot)
        round_headless_time = time.perf_counter() - started
        headless_cpu += time.thread_time() - cpu_started
        if snapshot.step == first:
            raise RuntimeError("the window's engine made no step in a round; the comparison would be meaningless")
        round_costs.append(1 - round_headless_time / round_window_time)
        steps += snapshot.step - first
        window_time += round_window_time
        headless_time += round_headless_time
    cores.restore()
    if window.done or window.engine_info is not live or window.errors_shown:
        raise RuntimeError("the engine stopped during the measurement; the figure would be meaningless")
    window.close()
    quartiles = statistics.quantiles(round_costs, n=4) if len(round_costs) > 1 else round_costs * 3
    return {"rounds": rounds, "round_s": round_s, "steps": steps,
            "headless_steps_per_s": steps / headless_time, "window_steps_per_s": steps / window_time,
            "cost": statistics.median(round_costs), "pooled_cost": 1 - headless_time / window_time,
            "round_costs": round_costs, "middle_half": (quartiles[0], quartiles[2]),
            "median_interval": median_interval(round_costs, COST_INTERVAL), "interval_level": COST_INTERVAL,
            "frames_drawn": frames, "frames_per_s": frames / window_wall, "target_cost": COST_TARGET,
            "headless_core_share": headless_cpu / headless_time,
            "engine_core_share": engine_cpu / window_time if engine_cpu_known else None,
            # the same steps: what the engine's process spent beyond them (frames, plot points)
            "engine_cpu_extra": engine_cpu / headless_cpu - 1 if engine_cpu_known and headless_cpu > 0 else None,
            "window_core_share": window_cpu / window_wall,
            "load_average": os.getloadavg()[0] if hasattr(os, "getloadavg") else None}


def gui_cost_split_rows(result: dict) -> list[tuple[str, str]]:
    """The table rows that say where the window's cost went (see bench_cost)."""
    rows = []
    if result.get("engine_cpu_extra") is not None:
        rows.append(("engine process", f"{result['engine_cpu_extra'] * 100:+.1f} % CPU time against headless for the "
                                       f"same steps (frames, plot points); it had "
                                       f"{result['engine_core_share'] * 100:.0f} % of a core, headless "
                                       f"{result['headless_core_share'] * 100:.0f} %"))
    rows.append(("window process", f"{result['window_core_share'] * 100:.0f} % of a core while the engine ran"))
    if result.get("load_average") is not None:
        rows.append(("machine", f"{os.cpu_count()} cores, load average {result['load_average']:.2f} at the end "
                                "(other processes take cores too)"))
    return rows
