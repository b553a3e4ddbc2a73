"""The live engine in its process as the window drives it, without a window: frames of a flat-out
simulated engine carry the newest steps, and a rebuild answers a frame request at once."""

import time

from kvscope.app.host.process_host import SessionHost
from kvscope.app.host.protocol import decode_frame, encode_frame
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


def ask_for_a_frame_now(process: SessionHost) -> None:
    """The next take_frame asks for a frame and gets none yet: the answer to the request in flight
    (each frame read asks for the next) is read and dropped first."""
    if process._awaiting_frame:
        assert process._conn.poll(TIMEOUT_S), "the engine process did not answer"
        decode_frame(process._conn.recv_bytes(), process._conn.recv_bytes)
        process._awaiting_frame = False
    process.ask_now()
    assert process.take_frame() is None and process._awaiting_frame


def test_flat_out_frames_carry_the_newest_steps_and_a_rebuild_is_answered_at_once():
    process = SessionHost(EngineSession)
    process.start()
    try:
        process.set_speed(0.0)
        process.apply(endless_config(), play=True)
        frame = next_frame(process, lambda f: f.snapshot is not None and f.snapshot.step > 20_000)
        frame = next_frame(process, lambda f: f.snapshot is not None)
        numbers = frame.steps.numbers
        assert len(numbers) == STEPS_KEPT and numbers == list(range(numbers[0], numbers[0] + STEPS_KEPT))
        assert numbers[-1] < frame.snapshot.step
        reached = frame.snapshot.step
        # Ask for a frame (a flat-out engine answers after its next STEPS_KEPT steps) and rebuild
        # meanwhile: the answer shows the new engine at once, not when it has caught up.
        ask_for_a_frame_now(process)
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
    process.ask_now()
    process.take_frame()  # asked for ...
    assert process._conn.poll(TIMEOUT_S)  # ... on its way (~1 MB: more than the pipe holds), never read
    process.stop()
    assert process._process.exitcode == 0  # it stopped by itself, not terminated after the timeout
    assert Recording.open(path).summary is not None  # finished: an unfinished one has no index


def test_a_process_not_heard_from_yet_is_stopped_at_once_unless_a_recording_was_asked(tmp_path):
    """A window closed while its engine process still starts (or loads a model) waited for it to read
    "stop": ~0.7 s on a 2-core machine, up to the 5 s timeout during a model load. With no frame
    from it yet it holds nothing to finish, so it is terminated; a recording asked for is finished."""
    import signal

    from kvscope.app.lab.recording import Recording

    process = SessionHost(EngineSession)
    process.start()
    process.apply(endless_config(), play=True)
    process.stop()
    assert process._process.exitcode == -signal.SIGTERM  # not waited for
    process = SessionHost(EngineSession)
    process.start()
    path = tmp_path / "run.kvrec"
    process.apply(endless_config(), play=True)
    process.start_recording(str(path))
    process.stop()
    assert process._process.exitcode == 0  # it read "stop" and finished the recording
    assert Recording.open(path).summary is not None
    # asked of a process that died: the new one started for it (the last run built again) records too
    process = SessionHost(EngineSession)
    process.start()
    process.apply(endless_config(), play=True)
    process._process.kill()
    process._process.join()
    process.start_recording(str(tmp_path / "after-a-crash.kvrec"))
    process.stop()
    assert process._process.exitcode == 0
    assert Recording.open(tmp_path / "after-a-crash.kvrec").summary is not None


def test_a_frame_made_before_a_rebuild_is_dropped_not_shown():
    """A frame on its way when the window applies new settings shows an engine that is gone: the
    host drops it, and the next frame shows the new engine."""
    process = SessionHost(EngineSession)
    process.start()
    try:
        old = endless_config()
        process.apply(old, play=False)
        next_frame(process, lambda f: f.engine_info is not None)
        ask_for_a_frame_now(process)  # asked for ...
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


def test_behind_a_flat_out_session_the_window_waits_ten_times_what_it_spent_drawing_the_last_frame():
    from kvscope.app.host.process_host import WINDOW_SHARE_FACTOR

    host = SessionHost(EngineSession)  # not started: the hold-off is the host's own arithmetic
    came = time.perf_counter()
    host._share_since = (came, time.process_time())  # a flat-out frame came just now
    assert not host._may_ask()  # not before it is drawn
    busy_until = time.process_time() + 0.03
    while time.process_time() < busy_until:  # drawing it: 30 ms of this process's CPU
        pass
    host._hold_off_for_drawing()  # the next take_frame
    assert host._next_request_at >= came + WINDOW_SHARE_FACTOR * 0.03
    assert host._next_request_at < came + WINDOW_SHARE_FACTOR * 0.04  # the CPU time, not the wall time it took
    host._next_request_at = time.perf_counter()  # ... and once that has passed
    assert host._may_ask()
    host._awaiting_frame = True
    assert not host._may_ask()  # one request in flight at a time


class _FramePipe:
    """The window's end of the pipe, holding frames the session sent."""

    def __init__(self, frames):
        self.messages = [m for frame in frames for m in (bytes(x) for x in encode_frame(frame))]
        self.sent = []

    def poll(self, timeout=0.0):
        return bool(self.messages)

    def recv_bytes(self):
        return self.messages.pop(0)

    def send(self, message):
        self.sent.append(message)


def test_the_window_holds_back_for_its_drawing_only_when_the_session_says_it_is_short_of_cpu():
    from types import SimpleNamespace

    from kvscope.app.host.process_host import STARVED_CORE_SHARE
    from kvscope.app.host.protocol import FrameDelta

    for share, holds_back in ((None, False), (1.0, False), (STARVED_CORE_SHARE - 0.1, True)):
        host = SessionHost(EngineSession)
        host._process = SimpleNamespace(is_alive=lambda: True)
        host._conn = _FramePipe([FrameDelta(status="x", build_cost_s=1e-9, core_share=share)])
        host._awaiting_frame = True
        assert host.take_frame().status == "x"
        assert (host._share_since is not None) == holds_back
        assert len(host._conn.sent) == (0 if holds_back else 1)  # else the next frame is asked for at once
        host.take_frame()  # drawn meanwhile
        assert host._share_since is None and len(host._conn.sent) == (0 if holds_back else 1)


def pause_and_wait_for_the_answer(process: SessionHost) -> int | None:
    """Pause, then take frames until one asked for after the pause has come; the newest step
    seen on the way (None if no frame carried a snapshot)."""
    process.pause()
    assert not process.run_command_answered  # asked before the pause, or not at all
    deadline = time.monotonic() + TIMEOUT_S
    stopped_at = None
    while not process.run_command_answered:
        assert time.monotonic() < deadline, "the paused engine never answered"
        process.ask_now()
        frame = process.take_frame()
        if frame is not None and frame.snapshot is not None:
            stopped_at = frame.snapshot.step
        time.sleep(0.002)
    return stopped_at


def test_frames_say_how_long_the_session_played_and_when_a_pause_has_been_answered():
    """What `kvscope bench gui` divides by: the process times its playing from reading Play to
    reading Pause, and the first frame asked for after Pause shows where the engine stopped."""
    process = SessionHost(EngineSession)
    process.start()
    try:
        process.set_speed(0.0)
        applied = time.perf_counter()
        process.apply(endless_config(), play=True)
        next_frame(process, lambda f: f.snapshot is not None and f.snapshot.step > 2_000)
        stopped_at = pause_and_wait_for_the_answer(process)
        played = process.played_s
        assert 0 < played < time.perf_counter() - applied  # counted from Play to Pause, within what passed
        time.sleep(0.3)  # paused: the clock stands still ...
        process.ask_now()
        frame = next_frame(process)
        assert frame.played_s == played and (frame.snapshot is None or frame.snapshot.step == stopped_at)
        process.play()  # ... and runs again from Play
        frame = next_frame(process, lambda f: f.snapshot is not None and f.played_s > played + 0.2)
        assert frame.snapshot.step > (stopped_at or 0)
    finally:
        process.stop()


def test_the_first_frame_after_a_pause_does_not_count_the_pause_as_cores_lost():
    """A flat-out session tells the window the share of a core it had since its previous frame;
    measured across a pause, that share looked starved, and the window held off its first frames
    after Play by ten times its drawing."""
    process = SessionHost(EngineSession)
    process.start()
    try:
        process.set_speed(0.0)
        process.apply(endless_config(), play=True)
        next_frame(process, lambda f: f.snapshot is not None and f.snapshot.step > 2_000)
        pause_and_wait_for_the_answer(process)
        time.sleep(0.5)  # paused, no frame asked for: a user reading the window
        process.play()
        process.ask_now()
        frame = next_frame(process, lambda f: f.playing and f.core_share is not None)
        assert frame.core_share > 0.5, frame.core_share
    finally:
        process.stop()
