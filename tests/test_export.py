"""Recordings out of kvscope and back into the window: `kvscope run --record`, `kvscope export`
(Perfetto trace, CSV, a description) and ReplayWorker, the window's source for a replay."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
import time

import numpy as np
import pytest

from kvscope.app.host.replay import ReplayWorker
from kvscope.engine import Engine, EngineArgs
from kvscope.app.lab.perfetto import ENGINE_PID, REQUESTS_PID, perfetto_trace
from kvscope.app.lab.presets import load_hardware, load_model
from kvscope.app.lab.recording import Recording, RecordingError, RunRecorder
from kvscope.app.lab.workload import LengthDist, WorkloadSpec, generate_requests
from cli_helper import cli

WAIT_S = 20.0  # deadline for a background thread to get somewhere; a test never just sleeps


@pytest.fixture(scope="module")
def recording_path(tmp_path_factory):
    """A small simulated run with prefix hits and preemptions, recorded."""
    path = tmp_path_factory.mktemp("export") / "run.kvrec"
    engine = Engine(load_model("llama-3-8b"), load_hardware("h100-80gb"),
                    EngineArgs(num_gpu_blocks_override=40, max_model_len=600))
    spec = WorkloadSpec(name="small", num_requests=30, arrival_rate_per_s=200.0,
                        prompt_tokens=LengthDist("lognormal", median=120, sigma=0.6, min=2, max=300),
                        output_tokens=LengthDist("lognormal", median=40, sigma=0.8, min=1, max=200),
                        shared_prefix_fraction=0.6, shared_prefix_tokens=48, num_shared_prefixes=2)
    engine.add_workload(generate_requests(spec, engine.model.vocab_size, seed=3))
    recorder = RunRecorder(engine, path, {"label": "small run", "workload": spec}, keyframe_interval=64)
    while (result := engine.step()) is not None:
        recorder.record_step(result)
    recorder.close(engine.summary())
    return path


def wait_for(condition, what: str):
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


# -- Perfetto ----------------------------------------------------------------------------------------


def test_the_perfetto_trace_is_valid_trace_event_json_that_matches_the_recording(recording_path, tmp_path):
    recording = Recording.open(recording_path)
    trace, stats = perfetto_trace(recording)
    text = json.dumps(trace, allow_nan=False)  # what write_perfetto writes: strict JSON, no NaN
    events = json.loads(text)["traceEvents"]
    assert trace["displayTimeUnit"] == "ms" and stats.num_events == len(events)
    for event in events:
        assert {"ph", "ts", "pid", "tid", "name"} <= event.keys(), event
        assert event["ph"] in "XiCM"
        if event["ph"] == "X":
            assert event["dur"] >= 0
        if event["ph"] == "i":
            assert event["s"] == "t"

    # each track's slices in order, never overlapping: whole microseconds, so exactly
    tracks: dict = {}
    for event in events:
        if event["ph"] == "X":
            assert isinstance(event["ts"], int) and isinstance(event["dur"], int)
            tracks.setdefault((event["pid"], event["tid"]), []).append((event["ts"], event["ts"] + event["dur"]))
    assert len(tracks) == 1 + 30  # the engine's steps and one track per request
    for key, slices in tracks.items():
        for (start_a, end_a), (start_b, _) in zip(slices, slices[1:]):
            assert start_a <= start_b and end_a <= start_b, f"track {key}: {start_a}..{end_a} then {start_b}"

    series = recording.series()
    counts = recording.event_counts()

    def named(name, pid):
        return [e for e in events if e["name"] == name and e["pid"] == pid]

    engine_slices = [e for e in events if e["ph"] == "X" and e["pid"] == ENGINE_PID]
    assert len(engine_slices) == int(np.count_nonzero((series["batch_size"] > 0) & (series["duration_s"] > 0)))
    assert sum(e["args"]["batch_size"] for e in engine_slices) == series["batch_size"].sum()
    assert len(named("KV cache usage", ENGINE_PID)) == len(named("requests", ENGINE_PID)) == recording.num_steps
    assert len(named("finished", REQUESTS_PID)) == counts["finished"] == len(recording.finished_requests()["ttft_s"])
    assert len(named("preempted", REQUESTS_PID)) == counts["preempted"] > 0
    assert len(named("prefix hit", REQUESTS_PID)) == counts["prefix_hit"] > 0
    prefill = named("prefill", REQUESTS_PID)
    decode = named("decode", REQUESTS_PID)
    assert sum(e["args"]["tokens"] for e in prefill) == series["num_prefill_tokens"].sum()
    assert sum(e["args"]["tokens"] for e in prefill + decode) == series["num_tokens"].sum()
    thread_names = {e["tid"] for e in events if e["ph"] == "M" and e["name"] == "thread_name" and e["pid"] == REQUESTS_PID}
    assert thread_names == {rid + 1 for rid in range(30)}
    assert stats.requests_exported == 30 and stats.requests_left_out == 0 and stats.steps_left_out == 0


def test_a_capped_trace_says_what_it_left_out(recording_path):
    recording = Recording.open(recording_path)
    trace, stats = perfetto_trace(recording, max_requests=5, max_steps=100)
    events = trace["traceEvents"]
    request_tracks = {e["tid"] for e in events if e["pid"] == REQUESTS_PID and e["ph"] != "M"}
    assert request_tracks <= {1, 2, 3, 4, 5}
    assert stats.requests_exported == 5 and stats.requests_left_out > 0
    assert stats.steps_exported == 100 and stats.steps_left_out == recording.num_steps - 100
    assert len([e for e in events if e["name"] == "KV cache usage"]) == 100
    assert "requests after the first 5 have no track" in trace["otherData"]["left_out"]


# -- the command line --------------------------------------------------------------------------------


def test_run_record_then_export_perfetto_and_csv(capsys, tmp_path):
    recording = tmp_path / "run.kvrec"
    rc, out, err = cli(capsys, "run", "--quiet", "--workload", "chat", "--requests", "12", "--record", recording)
    assert rc == 0, err
    size = recording.stat().st_size
    line = next(line for line in out.splitlines() if line.startswith("recording written to"))
    assert str(recording) in line and ("KiB" in line or "MiB" in line) and "steps" in line
    opened = Recording.open(recording)
    assert opened.closed and opened.summary["completed"] == 12 and opened.file_size == size
    assert opened.header["workload"]["name"] == "chat" and opened.header["run"]["seed"] == 0
    arguments = opened.header["run"]["arguments"]
    assert arguments["requests"] == 12 and arguments["record"] == str(recording)

    trace, table = tmp_path / "trace.json", tmp_path / "steps.csv"
    rc, out, err = cli(capsys, "export", recording, "--perfetto", trace, "--csv", table)
    assert rc == 0, err
    assert "Perfetto trace written to" in out and "ui.perfetto.dev" in out and "per-step CSV written to" in out
    assert json.loads(trace.read_text())["traceEvents"]
    with open(table, newline="") as handle:
        rows = list(csv.reader(handle))
    header = rows[0]
    assert header[:5] == ["step_index", "engine_step", "start_time_s", "end_time_s", "duration_s"]
    assert {"kv_usage_fraction", "num_running_requests", "output_tokens", "compute_utilization_fraction"} <= set(header)
    assert len(rows) == 1 + opened.num_steps
    kv = [float(row[header.index("kv_usage_fraction")]) for row in rows[1:]]
    np.testing.assert_array_equal(kv, opened.series()["kv_usage"])


def test_export_without_outputs_describes_the_recording(capsys, recording_path):
    rc, out, err = cli(capsys, "export", recording_path)
    assert rc == 0 and not err
    paragraph = out.strip()
    assert "\n" not in paragraph
    steps = Recording.open(recording_path).num_steps
    assert paragraph.startswith("run.kvrec: the small workload (30 requests) through small run (simulated backend)")
    assert f"{steps:,} engine steps over " in paragraph and " s of engine clock" in paragraph
    assert "30 requests completed" in paragraph and "KiB." in paragraph


@pytest.mark.parametrize("damage, message", [
    ("missing", "no such file"),
    ("truncated", r"is truncated: the last complete step is \d+; it ends mid-record at byte [\d,]+ \(record \d+"),
    ("corrupt", "fails its checksum: the file is corrupt"),
    ("not a recording", "is not a kvscope recording"),
])
def test_export_of_a_bad_file_is_one_line_and_exit_2(capsys, tmp_path, recording_path, damage, message):
    data = recording_path.read_bytes()
    path = tmp_path / "bad.kvrec"
    if damage == "truncated":
        path.write_bytes(data[:len(data) // 2])
    elif damage == "corrupt":
        damaged = bytearray(data)
        damaged[len(data) // 2] ^= 0x10
        path.write_bytes(bytes(damaged))
    elif damage == "not a recording":
        path.write_text("step,kv\n0,0.5\n")
    rc, out, err = cli(capsys, "export", path, "--csv", tmp_path / "out.csv")
    assert rc == 2 and not out
    assert err.count("\n") == 1 and err.startswith("kvscope: error: ") and re.search(message, err), err
    assert not (tmp_path / "out.csv").exists()


def test_what_a_user_sees_for_an_unreadable_recording_and_an_unwritable_record_path(tmp_path):
    command = [sys.executable, "-m", "kvscope.app"]
    result = subprocess.run(command + ["export", str(tmp_path / "missing.kvrec")], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr == f"kvscope: error: {tmp_path / 'missing.kvrec'}: no such file\n"
    started = time.monotonic()
    result = subprocess.run(command + ["run", "--requests", "5", "--record", str(tmp_path / "no" / "run.kvrec")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.startswith("kvscope: error: --record ") and "does not exist" in result.stderr
    assert result.stderr.count("\n") == 1
    assert time.monotonic() - started < 30


def test_a_record_path_that_is_a_folder_fails_before_the_run(capsys, tmp_path):
    rc, out, err = cli(capsys, "run", "--requests", "5", "--record", tmp_path)
    assert rc == 2 and "is a folder" in err and "Run:" not in out


# -- ReplayWorker ------------------------------------------------------------------------------------


@pytest.fixture
def replay(recording_path):
    worker = ReplayWorker(recording_path)
    worker.start()
    yield worker
    worker.stop()
    assert not worker.alive


def snapshot_equal(a, b) -> bool:
    return (all(np.array_equal(getattr(a, f), getattr(b, f)) for f in
                ("block_owner", "block_state", "block_ref_cnt", "block_fill", "block_hash"))
            and (a.time_s, a.step, a.kv_usage, a.num_running, a.num_waiting)
            == (b.time_s, b.step, b.kv_usage, b.num_running, b.num_waiting)
            and len(a.requests) == len(b.requests)
            and all(np.array_equal(a.requests[n], b.requests[n], equal_nan=True) for n in a.requests.dtype.names))


def test_replay_frames_carry_the_recordings_snapshots_and_end_done(replay):
    recording = Recording.open(replay.recording.path)
    first = replay.take_frame()
    assert first.engine_info is not None and first.engine_info["plan"].num_blocks == recording.num_blocks
    assert first.engine_info["workload"].name == "small" and first.engine_info["backend"] == "simulated"
    assert snapshot_equal(first.snapshot, recording.initial_snapshot())
    end_times = recording.series()["time_s"]
    replay.set_speed(0)
    replay.play()
    steps_seen, snapshots_checked, done = [], 0, None
    deadline = time.monotonic() + WAIT_S
    while done is None:
        assert time.monotonic() < deadline, "the replay did not finish"
        time.sleep(0.01)
        frame = replay.take_frame()
        steps_seen += list(frame.steps)
        if frame.snapshot is not None:  # the state after the step that ended at the snapshot's time
            i = int(np.searchsorted(end_times, frame.snapshot.time_s))
            assert snapshot_equal(frame.snapshot, recording.snapshot_at(i))
            snapshots_checked += 1
        if frame.done:
            done = frame
    assert snapshots_checked >= 2
    assert steps_seen == recording.steps(0, recording.num_steps)  # at speed 0 no step is dropped
    assert done.summary == recording.summary and replay.position == recording.num_steps
    assert snapshot_equal(done.snapshot, recording.snapshot_at(recording.num_steps - 1))


def test_replay_seeks_backwards_and_steps_one_at_a_time(replay):
    recording = Recording.open(replay.recording.path)
    replay.take_frame()
    replay.seek(150)
    wait_for(lambda: replay.position == 150, "the seek")
    frame = replay.take_frame()
    assert frame.engine_info is not None  # the window clears its views and takes the history that follows
    assert snapshot_equal(frame.snapshot, recording.snapshot_at(149))
    assert list(frame.steps) == recording.steps(0, 150)
    assert sum(p.output_tokens for p in frame.points) == recording.series()["output_tokens"][:150].sum()
    assert len(frame.finished) == int(np.count_nonzero(recording.finished_requests()["step"] < 150))
    replay.step_once()
    wait_for(lambda: replay.position == 151, "one step after the seek")
    replay.seek(10)
    wait_for(lambda: replay.position == 10, "a seek backwards")
    assert snapshot_equal(replay.take_frame().snapshot, recording.snapshot_at(9))
    replay.seek(0)
    wait_for(lambda: replay.position == 0, "a seek to the start")
    assert snapshot_equal(replay.take_frame().snapshot, recording.initial_snapshot())


def test_replay_steps_once_to_the_recordings_next_snapshot(replay):
    recording = Recording.open(replay.recording.path)
    replay.take_frame()
    for position in (1, 2, 3):
        replay.step_once()
        wait_for(lambda: replay.position == position, f"step {position}")
        frames = []
        wait_for(lambda: frames.append(replay.take_frame()) or frames[-1].snapshot is not None, "a snapshot")
        assert snapshot_equal(frames[-1].snapshot, recording.snapshot_at(position - 1))
        assert [s for f in frames for s in f.steps] == [recording.step(position - 1)]


def test_replay_paces_the_recorded_clock(replay):
    replay.set_speed(1.0)
    replay.take_frame()
    replay.play()
    started = time.monotonic()
    wait_for(lambda: replay.position > 0, "the first steps")
    time.sleep(0.3)
    position = replay.position
    end_times = Recording.open(replay.recording.path).series()["time_s"]
    elapsed = time.monotonic() - started
    # at 1x, the recorded clock replayed so far is about the wall time that passed
    assert end_times[position - 1] <= elapsed + 0.05
    assert position < replay.num_steps


def test_replay_of_an_unreadable_file_fails_before_any_window(tmp_path):
    with pytest.raises(RecordingError, match="no such file"):
        ReplayWorker(tmp_path / "missing.kvrec")
