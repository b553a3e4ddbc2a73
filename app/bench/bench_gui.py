"""`kvscope bench gui`: the window's figures for README.md.

frame: one frame — the engine session's snapshot and frame, pickled and unpickled as they cross
       from the engine process to the window (the snapshot as the blocks changed since the last,
       rebuilt on the window's side, as the process host does), then handed to every view and the
       whole window repainted — with a 500,000-block pool and 1,024 running requests (simulated
       llama-3-8b on h100-80gb). Target: median <= 10 ms (issue 15: 16 ms must hold on a slower machine).
cost:  engine steps per second with the window open (its engine process running flat out: the
       simulated clock at "max") against the same engine headless in this process, same machine,
       on a chat workload too long to finish meanwhile, in alternating rounds; the median round.
       Both sides step on the same core (see _Cores), the window drawing on the other.
       Target: the window costs <= 5 % (issue 15: 10 % on a slower machine). Beside it, where the
       cost goes: the engine's steps per CPU second of its process (what frames cost the engine
       process itself) and the share of a core each process had (what drawing and whatever else
       runs took from it on a busy machine).
"""

from __future__ import annotations

import glob
import os
import statistics
import time

FRAME_BLOCKS = 500_000
ENDLESS_REQUESTS = 1_000_000
FRAME_RUNNING = 1024
# Issue 15: 10 ms here, so that a slower machine of the same kind stays within a 60 Hz frame (16 ms).
FRAME_TARGET_MS = 10.0
COST_TARGET = 0.05


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


def _wait(app, predicate, timeout: float) -> None:
    deadline = time.perf_counter() + timeout
    while not predicate():
        if time.perf_counter() > deadline:
            raise RuntimeError("the window did not get ready in time")
        app.processEvents()
        time.sleep(0.01)


def bench_frame(frames: int = 120) -> dict:
    from kvscope.app.host.protocol import decode_frame, encode_frame
    from kvscope.app.host.session import EngineSession
    from kvscope.app.host.session_blocks import SnapshotRebuilder
    from kvscope.app.gui.main_window import MainWindow

    app = _app()
    block_bytes = 16 * 131072  # llama-3-8b, bf16 KV, 16-token blocks
    window = MainWindow(_values(workload="uniform-short", num_requests=1, max_num_seqs=FRAME_RUNNING,
                                kv_cache_memory_bytes=FRAME_BLOCKS * block_bytes), autoplay=False)
    window.resize(1920, 1080)
    window.show()
    window.timer.stop()
    window.worker.stop()  # the benchmark drives an engine session on this thread instead
    session = EngineSession()
    session.restart_snapshot_changes()  # as in the engine's process (process_host.serve)
    snapshots = SnapshotRebuilder()
    session.handle("apply", (window.config, False))
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
        messages = encode_frame(session.take_frame())
        received = iter([bytes(m) for m in messages])  # what reading them from the pipe makes
        frame = decode_frame(next(received), lambda: next(received))
        if not snapshots.rebuild(frame):
            raise RuntimeError("a frame's snapshot could not be rebuilt from its changes")
        t1 = time.perf_counter()
        window.render_frame(frame)
        app.processEvents()  # the event loop paints every view the frame updated, as in the window
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


def bench_cost(seconds: float = 12.0, rounds: int = 10) -> dict:
    """Alternates headless and window segments (seconds / rounds each, the idle side paused), so
    that a drift in this machine's speed -- +-5 % between minutes here -- hits both sides alike.
    Each round gives its own cost (window segment against the headless one right after it); the
    figure is their median, which one disturbed segment cannot move, with the pooled one beside."""
    from kvscope.engine import Engine, EngineArgs
    from kvscope.app.lab.presets import load_hardware, load_model, load_workload
    from kvscope.app.lab.workload import generate_requests

    from kvscope.app.gui.main_window import MainWindow
    from kvscope.app.host.process_tuning import tune_for_engine

    app = _app()
    tune_for_engine()  # as the window's engine process does, so both sides run the same interpreter
    model, hardware = load_model("llama-3-8b"), load_hardware("h100-80gb")
    # A workload no run of this length can finish, on both sides: an idle engine measures nothing.
    workload = load_workload("chat").with_overrides(num_requests=ENDLESS_REQUESTS)
    engine = Engine(model, hardware, EngineArgs())
    engine.add_workload(generate_requests(workload, model.vocab_size, seed=0))

    window = MainWindow(_values(workload="chat", num_requests=ENDLESS_REQUESTS), autoplay=False)
    window.resize(1920, 1080)
    window.show()
    window.speed.setCurrentText("max")
    window.apply_settings(play=True)

    def engine_step() -> int:
        return window.latest_snapshot.step if window.latest_snapshot is not None else 0

    def settle_paused() -> int:
        """The exact step count once the paused engine's last frame has arrived."""
        window.worker.pause()
        before = -1
        while engine_step() != before:  # frames until two in a row show the same step
            before = engine_step()
            deadline = time.perf_counter() + 0.2
            while time.perf_counter() < deadline:
                app.processEvents()
                time.sleep(0.005)
        return engine_step()

    _wait(app, lambda: engine_step() > 1000, 60)  # built, and past its first steps
    cores = _Cores(window.worker.pid)
    while engine.step_count < 1000:
        engine.step()
    live = window.engine_info
    segment = seconds / rounds
    headless_steps = window_steps = 0
    headless_time = window_time = 0.0
    headless_cpu = window_cpu = engine_cpu = 0.0
    engine_cpu_known = True
    frames = 0
    round_costs = []
    for _ in range(rounds):
        first = settle_paused()
        frames_before = window.frames_rendered
        engine_cpu_before = _process_cpu_s(window.worker.pid)
        cores.window_segment()
        window.worker.play()
        started, cpu_started = time.perf_counter(), time.process_time()
        while time.perf_counter() - started < segment:
            app.processEvents()
            time.sleep(0.002)
        window.worker.pause()
        round_window_time = time.perf_counter() - started
        window_cpu += time.process_time() - cpu_started
        frames += window.frames_rendered - frames_before
        round_window_steps = settle_paused() - first
        engine_cpu_after = _process_cpu_s(window.worker.pid)  # paused since: only the segment's steps
        if engine_cpu_before is None or engine_cpu_after is None:
            engine_cpu_known = False
        else:
            engine_cpu += engine_cpu_after - engine_cpu_before
        cores.headless_segment()
        first, started, cpu_started = engine.step_count, time.perf_counter(), time.thread_time()
        while time.perf_counter() - started < segment:
            engine.step()
        round_headless_time = time.perf_counter() - started
        headless_cpu += time.thread_time() - cpu_started
        round_headless_steps = engine.step_count - first
        round_costs.append(1 - (round_window_steps / round_window_time) / (round_headless_steps / round_headless_time))
        window_time += round_window_time
        window_steps += round_window_steps
        headless_time += round_headless_time
        headless_steps += round_headless_steps
    cores.restore()
    if window.done or window.engine_info is not live or window.errors_shown:
        raise RuntimeError("the engine stopped during the measurement; the figure would be meaningless")
    window.close()
    headless, with_window = headless_steps / headless_time, window_steps / window_time
    # Where the cost goes. The engine process's steps per CPU second against the headless loop's
    # are what frames cost that process itself (keeping steps, building and sending frames; the
    # settling pauses add a few idle polls); its share of a core while the window drew is what it
    # lost to other processes -- the window's among them, a share of a core beside it.
    engine_share = engine_cpu / window_time if engine_cpu_known else None
    engine_work_cost = (1 - (window_steps / engine_cpu) / (headless_steps / headless_cpu)
                        if engine_cpu_known and engine_cpu > 0 else None)
    return {"seconds": seconds, "rounds": rounds, "headless_steps_per_s": headless,
            "window_steps_per_s": with_window, "cost": statistics.median(round_costs),
            "pooled_cost": 1 - with_window / headless, "round_costs": round_costs,
            "frames_drawn": frames, "frames_per_s": frames / window_time, "target_cost": COST_TARGET,
            "headless_core_share": headless_cpu / headless_time, "engine_core_share": engine_share,
            "window_core_share": window_cpu / window_time, "engine_work_cost": engine_work_cost,
            "load_average": os.getloadavg()[0] if hasattr(os, "getloadavg") else None}


def gui_cost_split_rows(result: dict) -> list[tuple[str, str]]:
    """The table rows that say where the window's cost went (see bench_cost)."""
    rows = []
    if result.get("engine_work_cost") is not None:
        rows.append(("engine process", f"{result['engine_work_cost'] * 100:.1f} % fewer steps per CPU second "
                                       f"than headless (frames' cost to it); it had "
                                       f"{result['engine_core_share'] * 100:.0f} % of a core, headless "
                                       f"{result['headless_core_share'] * 100:.0f} %"))
    rows.append(("window process", f"{result['window_core_share'] * 100:.0f} % of a core while the engine ran"))
    if result.get("load_average") is not None:
        rows.append(("machine", f"{os.cpu_count()} cores, load average {result['load_average']:.2f} at the end "
                                "(other processes take cores too)"))
    return rows
