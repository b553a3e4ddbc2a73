"""A recording as the window's engine source: ReplaySession, driven directly as its process drives
it, hands over the recording's own snapshots, steps and points; and through its SessionHost."""

from __future__ import annotations

import time

import numpy as np
import pytest

from kvscope.app.lab.recording import Recording, RecordingError
from kvscope.app.host.points import POINT_DTYPE
from kvscope.app.host.process_host import SessionHost
from kvscope.app.host.protocol import APPLY, PLAY, SEEK, SPEED, STEP, StepTable
from kvscope.app.host.replay import ReplaySession, read_replay_info
from small_recording import record_small_run

WAIT_S = 20.0  # deadline for the replay's process to get somewhere; a test never just sleeps


@pytest.fixture(scope="module")
def recording_path(tmp_path_factory):
    """A small simulated run with prefix hits and preemptions, recorded."""
    return record_small_run(tmp_path_factory.mktemp("replay") / "run.kvrec")


@pytest.fixture
def replay(recording_path):
    session = ReplaySession()
    session.handle(APPLY, (str(recording_path), False))
    yield session
    session.close()


def play_until(session, condition, what: str) -> list:
    """Frames taken as the session's process takes them, until condition(session)."""
    frames = []
    deadline = time.monotonic() + WAIT_S
    while not condition(session):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        if session.playing:
            wait = session.advance(0.001)
            time.sleep(wait)
        frames.append(session.take_frame())
    return frames


def snapshot_equal(a, b) -> bool:
    return (all(np.array_equal(getattr(a, f), getattr(b, f)) for f in
                ("block_owner", "block_state", "block_ref_cnt", "block_fill", "block_hash"))
            and (a.time_s, a.step, a.kv_usage, a.num_running, a.num_waiting)
            == (b.time_s, b.step, b.kv_usage, b.num_running, b.num_waiting)
            and len(a.requests) == len(b.requests)
            and all(np.array_equal(a.requests[n], b.requests[n], equal_nan=True) for n in a.requests.dtype.names))


def same_steps(tables: list, results: list) -> bool:
    """Whether frames' step tables, one after another, hold exactly these StepResults."""
    def columns(table):
        return (table.numbers, table.request_ids.tolist(), table.num_new_tokens.tolist(), table.is_prefill.tolist(),
                table.rows["num_events"].tolist(), list(table.events))

    seen = [columns(table) for table in tables]
    joined = tuple(sum((part[i] for part in seen), []) for i in range(6))
    return len(results) > 0 and joined == columns(StepTable.of(results))

def test_replay_frames_carry_the_recordings_snapshots_and_end_done(replay):
    recording = Recording.open(replay.recording.path)
    first = replay.take_frame()
    assert first.engine_info is not None and first.engine_info["plan"].num_blocks == recording.num_blocks
    assert first.engine_info["workload"].name == "small" and first.engine_info["backend"] == "simulated"
    assert snapshot_equal(first.snapshot, recording.initial_snapshot())
    end_times = recording.series()["time_s"]
    replay.handle(SPEED, 0)
    replay.handle(PLAY, None)
    steps_seen, snapshots_checked, done, points = [], 0, None, []
    deadline = time.monotonic() + WAIT_S
    while done is None:
        assert time.monotonic() < deadline, "the replay did not finish"
        if replay.playing:
            replay.advance(0.001)
        frame = replay.take_frame()
        steps_seen.append(frame.steps)
        points.append(frame.points)
        if frame.snapshot is not None:  # the state after the step that ended at the snapshot's time
            i = int(np.searchsorted(end_times, frame.snapshot.time_s))
            assert snapshot_equal(frame.snapshot, recording.snapshot_at(i))
            snapshots_checked += 1
        if frame.done:
            done = frame
    assert snapshots_checked >= 2
    assert same_steps(steps_seen, recording.steps(0, recording.num_steps))  # at speed 0 no step is dropped
    assert done.summary == recording.summary and replay.position == recording.num_steps
    assert done.position == recording.num_steps
    assert snapshot_equal(done.snapshot, recording.snapshot_at(recording.num_steps - 1))
    points = np.concatenate(points)  # the one plot-point format, every token counted
    assert points.dtype == POINT_DTYPE and points["output_tokens"].sum() == recording.series()["output_tokens"].sum()


def test_replay_seeks_backwards_and_steps_one_at_a_time(replay):
    recording = Recording.open(replay.recording.path)
    replay.take_frame()
    replay.handle(SEEK, 150)
    assert replay.position == 150
    frame = replay.take_frame()
    assert frame.engine_info is not None  # the window clears its views and takes the history that follows
    assert snapshot_equal(frame.snapshot, recording.snapshot_at(149))
    assert same_steps([frame.steps], recording.steps(0, 150))
    assert frame.points["output_tokens"].sum() == recording.series()["output_tokens"][:150].sum()
    assert len(frame.finished) == int(np.count_nonzero(recording.finished_requests()["step"] < 150))
    replay.handle(STEP, None)
    assert replay.position == 151
    replay.handle(SEEK, 10)
    assert replay.position == 10
    assert snapshot_equal(replay.take_frame().snapshot, recording.snapshot_at(9))
    replay.handle(SEEK, 0)
    assert replay.position == 0
    assert snapshot_equal(replay.take_frame().snapshot, recording.initial_snapshot())


def test_replay_steps_once_to_the_recordings_next_snapshot(replay):
    recording = Recording.open(replay.recording.path)
    replay.take_frame()
    for position in (1, 2, 3):
        replay.handle(STEP, None)
        assert replay.position == position
        frame = replay.take_frame()
        assert snapshot_equal(frame.snapshot, recording.snapshot_at(position - 1))
        assert same_steps([frame.steps], [recording.step(position - 1)])


def test_replay_paces_the_recorded_clock(replay):
    replay.handle(SPEED, 1.0)
    replay.take_frame()
    replay.handle(PLAY, None)
    started = time.monotonic()
    play_until(replay, lambda s: s.position > 0, "the first steps")
    play_until(replay, lambda s: time.monotonic() - started > 0.3, "0.3 s")
    position = replay.position
    end_times = Recording.open(replay.recording.path).series()["time_s"]
    elapsed = time.monotonic() - started
    # at 1x, the recorded clock replayed so far is about the wall time that passed
    assert end_times[position - 1] <= elapsed + 0.05
    assert position < replay.num_steps


def test_replay_of_an_unreadable_file_fails_before_any_window(tmp_path):
    with pytest.raises(RecordingError, match="no such file"):
        read_replay_info(tmp_path / "missing.kvrec")


def test_the_replay_runs_in_its_own_process_and_reports_where_it_is(recording_path):
    info = read_replay_info(recording_path)
    host = SessionHost(ReplaySession, name="replay")
    host.start()
    try:
        host.apply(info.path, play=False)
        host.seek(info.num_steps // 2)
        deadline = time.monotonic() + WAIT_S
        frame = None
        while frame is None or frame.snapshot is None:
            assert time.monotonic() < deadline, "no frame after the seek"
            frame = host.take_frame()
            time.sleep(0.005)
        assert host.position == info.num_steps // 2 and frame.engine_info.label == "small run (replay)"
        assert frame.snapshot.time_s == info.end_times[info.num_steps // 2 - 1]
    finally:
        host.stop()
    assert not host.alive


def test_a_record_damaged_after_opening_stops_the_replay_with_the_readers_sentence(recording_path, tmp_path):
    """The file passed every check when it opened; a chunk read later fails its checksum. The
    window is told what is wrong with the file in one sentence, not handed a traceback."""
    damaged = tmp_path / "damaged.kvrec"
    damaged.write_bytes(recording_path.read_bytes())
    session = ReplaySession()
    session.handle(APPLY, (str(damaged), False))
    session.take_frame()
    data = bytearray(damaged.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 64] = bytes(b ^ 0xFF for b in data[middle:middle + 64])
    damaged.write_bytes(bytes(data))
    errors = []
    for position in range(0, session.num_steps + 1, 16):
        session.handle(SEEK, position)
        frame = session.take_frame()
        if frame.error:
            errors.append(frame.error)
            break
    session.close()
    assert errors, "no seek read the damaged chunk"
    assert "Traceback" not in errors[0] and "\n" not in errors[0].strip()
    assert str(damaged) in errors[0] or "damaged.kvrec" in errors[0]


def test_a_damaged_position_is_said_once_not_in_every_frame_after_it(recording_path, tmp_path):
    """The window asks for a frame 60 times a second; a position whose snapshot cannot be read was
    read again, and its error sent again, in each of them."""
    cut = tmp_path / "cut.kvrec"
    cut.write_bytes(recording_path.read_bytes())
    session = ReplaySession()
    session.handle(APPLY, (str(cut), False))
    session.take_frame()
    cut.write_bytes(cut.read_bytes()[:200])
    session.handle(SEEK, session.num_steps)
    errors = [session.take_frame().error for _ in range(5)]
    session.close()
    assert errors[0] and "truncated" in errors[0]
    assert errors[1:] == [None] * 4


def test_a_plan_recorded_under_its_old_name_reads_its_total_held_back(recording_path):
    """Recordings before 2026-11-29 named the plan's total held back reserve_bytes, the name of the
    flag that is one part of it (math --json printed "reserve_bytes" 1.65 GiB for --reserve-bytes 0)."""
    from kvscope.app.host.replay import engine_info_from_header

    with Recording.open(recording_path) as recording:
        header = recording.header
    now = engine_info_from_header(header).plan
    old = dict(header, plan={("reserve_bytes" if k == "held_back_bytes" else k): v for k, v in header["plan"].items()})
    assert "held_back_bytes" not in old["plan"]
    assert engine_info_from_header(old).plan.held_back_bytes == now.held_back_bytes > 0
