"""The engine's side of the window, driven directly: a recording that fails mid-run (a full disk)
stops the recording with a message and the engine keeps running."""

import numpy as np

from kvscope.app.host.session import EVENTS_KEPT, STEPS_KEPT, EngineSession, RunConfig
from kvscope.engine import EngineArgs
from kvscope.app.lab.presets import load_hardware, load_model, load_workload
from kvscope.app.lab.recording import RecordingError


def session_with_engine() -> EngineSession:
    model, hardware = load_model("llama-3-8b"), load_hardware("h100-80gb")
    session = EngineSession()
    session.handle("apply", (RunConfig("simulated", model, hardware, EngineArgs(),
                                       load_workload("chat").with_overrides(num_requests=200)), False))
    session.speed = 0.0
    return session


def test_a_recording_that_fails_mid_run_stops_with_a_message_and_the_engine_goes_on(tmp_path):
    session = session_with_engine()
    session.handle("record", str(tmp_path / "run.kvrec"))
    session.handle("step", None)
    assert session.take_frame().recording_steps == 1

    def disk_full(result):
        raise RecordingError("run.kvrec: cannot write: No space left on device")

    session._recorder.record_step = disk_full
    session.handle("step", None)
    frame = session.take_frame()
    assert "Recording to" in frame.error and "No space left" in frame.error
    assert frame.recording_steps is None and frame.steps  # the step itself happened
    assert frame.recording_stopped  # said, for a window that never saw it running
    session.handle("step", None)
    assert session.take_frame().snapshot.step == 3


def test_a_paused_engine_answers_idle_frames():
    session = session_with_engine()
    session.take_frame()  # the build
    assert session.take_frame().idle
    session.handle("step", None)
    assert not session.take_frame().idle


def flat_out_session(num_requests: int = 100_000) -> EngineSession:
    model, hardware = load_model("llama-3-8b"), load_hardware("h100-80gb")
    session = EngineSession()
    session.handle("apply", (RunConfig("simulated", model, hardware, EngineArgs(),
                                       load_workload("chat").with_overrides(num_requests=num_requests)), True))
    session.speed = 0.0
    session.take_frame()  # the build
    return session


def run_steps(session: EngineSession, n: int) -> None:
    target = session.engine.step_count + n
    while session.engine.step_count < target:
        session.advance(0.001)


def test_between_frames_a_flat_out_engine_keeps_no_steps_then_the_newest_when_asked():
    session = flat_out_session()
    run_steps(session, 200)
    assert session.cheap_steps  # simulated steps at maximum speed
    session.take_frame(keep_history=False)
    run_steps(session, 500)
    frame = session.take_frame(keep_history=False)
    assert not frame.steps and not frame.events and len(frame.points)  # the plots still get their points
    session.keep_history_for_next_frame()
    run_steps(session, STEPS_KEPT + 50)
    frame = session.take_frame(keep_history=False)
    numbers = frame.steps.numbers
    assert len(numbers) == STEPS_KEPT and numbers == list(range(numbers[0], numbers[0] + STEPS_KEPT))
    assert numbers[-1] == frame.snapshot.step - 1  # they end at the state the snapshot shows
    kept_steps_events = list(frame.steps.events)
    assert len(kept_steps_events) == frame.steps.rows["num_events"].sum()
    tail = min(len(kept_steps_events), EVENTS_KEPT)
    assert tail and list(frame.events) == kept_steps_events[-tail:]  # the newest, in order


def test_plot_points_count_every_sampled_token_however_fast_the_engine_runs():
    session = flat_out_session(num_requests=300)
    points = []
    while session.playing:
        session.advance(0.001)
        points.append(session.take_frame(keep_history=False).points)
    points = np.concatenate(points)
    engine = session.engine
    assert engine.metrics.completed == 300
    assert points["output_tokens"].sum() == engine.metrics.sampled_tokens == engine.metrics.output_tokens
    assert len(points) < engine.step_count  # thinned to one per SERIES_INTERVAL_S, yet nothing lost


def test_a_single_step_after_a_fast_frame_reaches_the_next_frame_with_a_summary():
    session = flat_out_session()
    run_steps(session, 300)
    session.take_frame(keep_history=False)  # as the engine process answers at maximum speed
    session.handle("pause", None)
    frame = session.take_frame(keep_history=False)
    assert frame.snapshot is not None and frame.summary is not None  # the paused state, counted
    session.handle("step", None)
    frame = session.take_frame()
    assert frame.steps.numbers == [frame.snapshot.step - 1] and frame.summary is not None


def test_pacing_targets_speed_times_the_wall_time_since_it_restarted():
    from kvscope.app.host.pacing import Pacing

    pacing = Pacing()
    assert pacing.target(clock=5.0, speed=2.0, now=100.0) == 5.0
    assert pacing.target(clock=123.0, speed=2.0, now=101.5) == 8.0  # from where it started: 5 + 2 x 1.5
    pacing.restart()
    assert pacing.target(clock=9.0, speed=0.5, now=200.0) == 9.0
    assert pacing.target(clock=9.0, speed=0.5, now=204.0) == 11.0


def test_a_paced_engine_ahead_of_the_wall_clock_waits_instead_of_stepping():
    session = flat_out_session()
    session.handle("speed", 1e-6)  # a microsecond of engine time per wall second: ahead after one step
    session.advance(0.01)
    steps = session.engine.step_count
    wait = session.advance(0.01)
    assert 0 < wait <= 0.01 and session.engine.step_count == steps


def test_a_frame_asked_for_when_steps_stop_being_cheap_still_carries_the_newest_steps():
    """Steps kept none between frames while cheap; if they turn dear (a loaded machine) before the
    next frame is asked for, that frame must still wait for a timeline's worth, not come empty."""
    session = flat_out_session()
    run_steps(session, 200)
    session.take_frame(keep_history=False)  # cheap: nothing kept from here on
    session.mean_step_s = 1.0  # ... and now dear
    assert not session.cheap_steps
    session.frame_requested()
    assert not session.frame_ready()
    run_steps(session, STEPS_KEPT)
    assert session.frame_ready()
    assert len(session.take_frame().steps) == STEPS_KEPT


def test_only_a_simulated_engine_at_maximum_speed_says_it_keeps_one_core_busy():
    """Its process's share of a core then tells whether other processes take the core (the window
    draws less while they do); a paced engine idles by design, a real model runs torch threads."""
    session = flat_out_session()
    assert session.flat_out and session.core_bound
    session.handle("speed", 1.0)
    assert not session.flat_out and not session.core_bound
    session.handle("speed", 0.0)
    session.handle("pause", None)
    assert not session.core_bound


def test_a_run_whose_every_request_is_rejected_ends_at_once_at_1x_and_says_why():
    """Every request longer than max_model_len: the engine's clock jumps over all the arrivals in
    one step; paced at 1x, the session used to wait that long (255 s for this workload) with
    nothing to run, the window showing Pause and 'rejected 1,000' and no reason."""
    model, hardware = load_model("llama-3-8b"), load_hardware("l4-24gb")
    session = EngineSession()
    session.handle("apply", (RunConfig("simulated", model, hardware, EngineArgs(max_model_len=16),
                                       load_workload("chat").with_overrides(num_requests=100)), True))
    session.speed = 1.0
    session.take_frame()  # the build
    for _ in range(3):
        if not session.playing:
            break
        assert session.advance(0.01) < 1.0  # never a long wait
    assert not session.playing
    frame = session.take_frame()
    assert frame.done
    assert frame.status.startswith("workload complete: 100 of 100 requests rejected on arrival (the first, request 0: ")
    assert "exceed max_model_len 16" in frame.status
    assert session.engine.clock > 10  # the clock did jump over the arrivals: nothing was run
