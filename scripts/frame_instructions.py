"""What the window's engine session and its frames cost a flat-out engine, counted in instructions.

`kvscope bench gui --part cost` times the window's engine against a headless copy; on a 2-core VM
that figure moves by several points between runs of the same code, so it cannot say whether the
engine's process does too much or the machine takes the time. Instruction counts do not move with
the machine. This script runs, each under valgrind's cachegrind (`apt-get install valgrind`):
  bare    -- a headless engine stepping;
  loop    -- the same engine in the window's EngineSession, no frames;
  session -- the same, played the way the process host plays it (advance for COMMAND_POLL_S,
             a look at a pipe, a frame encoded for the pipe FRAME_INTERVAL_S apart);
each for N and for 2N steps, so that one-off work (imports, building) cancels, and prints each
one's instructions per step against the bare engine's. Wall time is virtual (STEP_S per engine
step), so the session thins plot points and frames exactly as it would at that speed, and, with
Python's hash seed fixed, the counts repeat run to run. With --cache it also counts the misses of
a simulated 2 MB last-level cache (this machine's per-core L2): what a frame's arrays push out of
the core's cache, which the engine's next steps fetch again. The "session" play repeats the process host's loop
(process_host._serve_commands) without its pipe, sender thread and frame throttle: keep the two alike.

  .venv/bin/python scripts/frame_instructions.py [--steps N] [--cache]   (about 4 minutes at 20,000, two runs
  at a time; 6 with --cache)
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import select
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

STEP_S = 47e-6  # a flat-out simulated step of this workload here (~21,000 steps a second)
FRAME_INTERVAL_S = 0.19  # the window's frames at maximum speed (~5.2 a second, `bench gui --part cost`)
WARM_STEPS = 3000
SIMULATED_CACHE = "2097152,16,64"  # --cache: 2 MB, 16-way, 64-byte lines, as this machine's per-core L2


def _run_config():
    from kvscope.app.bench.bench_gui import ENDLESS_REQUESTS, _values
    from kvscope.app.gui.run_settings import build_run_config

    return build_run_config(_values(workload="chat", num_requests=ENDLESS_REQUESTS))


def _play(mode: str, steps: int) -> int:
    """One measured process: the engine stepped bare or by a session; the steps it took."""
    from kvscope.app.host import session as session_module
    from kvscope.app.host.process_host import COMMAND_POLL_S
    from kvscope.app.host.process_tuning import tune_for_engine
    from kvscope.app.host.protocol import APPLY, SPEED, encode_frame
    from kvscope.app.host.session import EngineSession, build_simulated_engine

    tune_for_engine()
    config = _run_config()
    if mode == "bare":
        engine = build_simulated_engine(config)
        for _ in range(WARM_STEPS + steps):
            engine.step()
        return engine.step_count
    session = EngineSession()

    class VirtualClock:  # the session's wall clock: STEP_S per step taken
        @staticmethod
        def perf_counter() -> float:
            return 1000.0 + (session.engine.step_count if session.engine is not None else 0) * STEP_S

    session_module.time = VirtualClock
    session.handle(SPEED, 0)
    session.handle(APPLY, (config, True))
    session.restart_snapshot_changes()
    reader, _ = os.pipe()
    poller = select.poll()
    poller.register(reader, select.POLLIN)

    def play_until(step: int) -> None:
        next_frame, asked = VirtualClock.perf_counter() + FRAME_INTERVAL_S, False
        while session.engine.step_count < step:
            session.advance(COMMAND_POLL_S)
            poller.poll(0)  # the host's look at its pipe
            if mode == "loop":
                continue
            if not asked and VirtualClock.perf_counter() >= next_frame:
                session.frame_requested()
                asked = True
            if asked and session.frame_ready():
                encode_frame(session.take_frame())
                next_frame, asked = VirtualClock.perf_counter() + FRAME_INTERVAL_S, False

    play_until(WARM_STEPS)
    # The host's first frame: from then on a flat-out session keeps steps only for a frame asked
    # for (before it, it keeps the newest 400 all the time).
    encode_frame(session.take_frame())
    play_until(WARM_STEPS + steps)
    return session.engine.step_count


def _counted(mode: str, steps: int, cache: bool) -> tuple[int, int, int | None]:
    """(instructions, engine steps, last-level cache misses or None) of one process under cachegrind."""
    simulation = ["--cache-sim=yes", f"--LL={SIMULATED_CACHE}"] if cache else ["--cache-sim=no"]
    done = subprocess.run(["valgrind", "--tool=cachegrind", *simulation, "--cachegrind-out-file=/dev/null",
                           sys.executable, __file__, "--play", mode, "--steps", str(steps)],
                          capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": "0"})
    if done.returncode != 0:
        raise SystemExit(f"frame_instructions: the {mode} run of {steps:,} steps failed (exit {done.returncode}):\n"
                         f"{done.stderr[-2000:]}")
    instructions = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
    taken = re.search(r"^steps (\d+)$", done.stdout, re.M)
    misses = re.search(r"LL misses:\s+([\d,]+)", done.stderr)
    if instructions is None or taken is None or (cache and misses is None):
        raise SystemExit(f"frame_instructions: no count in valgrind's output:\n{done.stderr[-2000:]}")
    return (int(instructions.group(1).replace(",", "")), int(taken.group(1)),
            int(misses.group(1).replace(",", "")) if cache else None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20_000, help="engine steps measured (default 20,000)")
    parser.add_argument("--cache", action="store_true",
                        help="also count the misses of a simulated 2 MB last-level cache (this machine's per-core L2)")
    parser.add_argument("--play", choices=("bare", "loop", "session"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not 1_000 <= args.steps <= 1_000_000:
        parser.error("--steps: from 1,000 to 1,000,000")
    if args.play:
        print(f"steps {_play(args.play, args.steps)}")
        return 0
    if shutil.which("valgrind") is None:
        print("frame_instructions: needs valgrind (apt-get install valgrind)", file=sys.stderr)
        return 2
    n = args.steps
    runs = [(mode, steps) for mode in ("bare", "loop", "session") for steps in (n, 2 * n)]
    with ThreadPoolExecutor(max_workers=min(2, os.cpu_count() or 1)) as pool:
        counts = dict(zip(runs, pool.map(lambda run: _counted(*run, args.cache), runs)))

    def per_step(mode: str, what: int = 0) -> float:
        """Instructions (what=0) or cache misses (what=2) per step: the difference between its N and
        2N runs (one-off work cancels)."""
        short, long = counts[mode, n], counts[mode, 2 * n]
        return (long[what] - short[what]) / (long[1] - short[1])

    bare = per_step("bare")
    print(f"virtual time: {STEP_S * 1e6:.0f} us a step, a frame every {FRAME_INTERVAL_S * 1000:.0f} ms")
    print(f"one engine step           {bare:,.0f} instructions (bare)")
    for mode, what in (("loop", "the session, no frames"), ("session", "the session and frames")):
        print(f"{what:<25} {per_step(mode):,.0f} a step: {100 * (per_step(mode) / bare - 1):+.2f} %")
    if args.cache:
        bare_misses = per_step("bare", 2)
        print(f"2 MB cache misses a step: {bare_misses:,.1f} bare")
        for mode, what in (("loop", "the session, no frames"), ("session", "the session and frames")):
            print(f"{what:<25} {per_step(mode, 2):,.1f} a step: {per_step(mode, 2) - bare_misses:+,.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
