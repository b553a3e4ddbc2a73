"""The live engine in its process as the window drives it, without a window: frames of a flat-out
simulated engine carry the newest steps, and a rebuild answers a frame request at once."""

import time

from kvscope.app.host.process_host import SessionHost
from kvscope.app.host.session import STEPS_KEPT, EngineSession, RunConfig
from kvscope.engine import EngineArgs
from kvscope.app.lab.presets import load_hardware, load_model, load_workload

TIMEOUT_S = 60.0


def endless_config(seed: int = 0) -> RunConfig:
    return RunConfig("simulated", load_model("llama-3-8b"), load_hardware("h100-80gb"), EngineArgs(),
                     load_workload("chat").with_overrides(num_requests=1_000_000), seed=seed)


def next_frame(process: SessionHost, condition=lambda frame: True):
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        frame = process.take_frame()
        if frame is not None and condition(frame):
            return frame
        time.sleep(0.002)
    raise AssertionError("no such frame from the engine process")


def test_flat_out_frames_carry_the_newest_steps_and_a_rebuild_is_answered_at_once():
    process = SessionHost(EngineSession)
    process.start()
    try:
        process.set_speed(0.0)
        process.apply(endless_config(), play=True)
        frame = next_frame(process, lambda f: f.snapshot is not None and f.snapshot.step > 20_000)
        frame = next_frame(process, lambda f: f.snapshot is not None)
        numbers = [s.step for s in frame.steps]
        assert len(numbers) == STEPS_KEPT and numbers == list(range(numbers[0], numbers[0] + STEPS_KEPT))
        assert numbers[-1] < frame.snapshot.step
        reached = frame.snapshot.step
        # Ask for a frame (a flat-out engine answers after its next STEPS_KEPT steps) and rebuild
        # meanwhile: the answer shows the new engine at once, not when it has caught up.
        process._next_request_at = 0.0  # ask now, not after the hold-off the last frame set
        assert process.take_frame() is None and process._awaiting_frame
        process.apply(endless_config(seed=1), play=True)
        rebuilt = next_frame(process, lambda f: f.engine_info is not None)
        first = next_frame(process, lambda f: f.snapshot is not None) if rebuilt.snapshot is None else rebuilt
        assert first.snapshot.step < reached
    finally:
        process.stop()


def test_closing_with_a_frame_in_flight_stops_the_engine_and_finishes_its_recording(tmp_path):
    """The window stops reading frames when it closes; a big frame still on its way must not keep
    the engine process from reading "stop" (it was killed after 5 s, its recording unfinished)."""
    from kvscope.app.lab.recording import Recording

    process = SessionHost(EngineSession)
    process.start()
    path = tmp_path / "run.kvrec"
    process.set_speed(0.0)
    process.apply(endless_config(), play=True)
    next_frame(process, lambda f: f.snapshot is not None and f.snapshot.step > 2_000)
    process.start_recording(str(path))
    next_frame(process, lambda f: f.recording_steps)
    process._next_request_at = 0.0
    process.take_frame()  # asked for ...
    assert process._conn.poll(TIMEOUT_S)  # ... on its way (~1 MB: more than the pipe holds), never read
    process.stop()
    assert process._process.exitcode == 0  # it stopped by itself, not terminated after the timeout
    assert Recording.open(path).summary is not None  # finished: an unfinished one has no index


def test_a_frame_made_before_a_rebuild_is_dropped_not_shown():
    """A frame on its way when the window applies new settings shows an engine that is gone: the
    host drops it, and the next frame shows the new engine."""
    process = SessionHost(EngineSession)
    process.start()
    try:
        old = endless_config()
        process.apply(old, play=False)
        next_frame(process, lambda f: f.engine_info is not None)
        process._next_request_at = 0.0
        assert process.take_frame() is None and process._awaiting_frame  # asked for ...
        assert process._conn.poll(TIMEOUT_S)  # ... and made, of the old engine
        new = RunConfig("simulated", load_model("llama-3-8b"), load_hardware("h100-80gb"), EngineArgs(),
                        load_workload("chat").with_overrides(num_requests=123))
        process.apply(new, play=False)
        assert process.take_frame() is None  # the old engine's frame, read and dropped
        rebuilt = next_frame(process, lambda f: f.engine_info is not None)
        assert rebuilt.engine_info.workload.num_requests == 123
    finally:
        process.stop()


def test_a_killed_process_is_reported_by_its_signal_and_the_next_command_rebuilds_the_last_run():
    import os
    import signal

    process = SessionHost(EngineSession)
    process.start()
    try:
        process.apply(endless_config(), play=True)
        next_frame(process, lambda f: f.snapshot is not None and f.snapshot.step > 10)
        killed = process.pid
        os.kill(killed, signal.SIGKILL)
        report = next_frame(process, lambda f: bool(f.error))
        assert "ended unexpectedly (signal 9, SIGKILL)" in report.error and process.pid is None
        assert process.take_frame() is None  # said once
        process.play()  # a fresh process knows nothing: the host builds the last run there first
        rebuilt = next_frame(process, lambda f: f.engine_info is not None)
        assert process.pid not in (None, killed) and rebuilt.engine_info.workload.num_requests == 1_000_000
        next_frame(process, lambda f: f.snapshot is not None and f.snapshot.step > 10 and f.playing)
    finally:
        process.stop()


def test_exit_causes_in_words():
    from kvscope.app.host.process_host import exit_cause

    assert exit_cause(-9) == "signal 9, SIGKILL" and exit_cause(-11) == "signal 11, SIGSEGV"
    assert exit_cause(1) == "exit code 1" and exit_cause(-200) == "signal 200"
