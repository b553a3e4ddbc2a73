"""The engine's side of the window, driven directly: a recording that fails mid-run (a full disk)
stops the recording with a message and the engine keeps running."""

from kvscope.app.engine_worker import EngineSession, RunConfig
from kvscope.engine import EngineArgs
from kvscope.engine.presets import load_hardware, load_model, load_workload
from kvscope.engine.recording import RecordingError


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
    session.handle("step", None)
    assert session.take_frame().snapshot.step == 3


def test_a_paused_engine_answers_idle_frames():
    session = session_with_engine()
    session.take_frame()  # the build
    assert session.take_frame().idle
    session.handle("step", None)
    assert not session.take_frame().idle
