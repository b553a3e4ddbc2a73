"""Recordings: a run written step by step and read back exactly as it happened.

Every test records a run while keeping what the live engine produced at each step (its
StepResult and its snapshot), then checks the file gives back the same: every step, every
snapshot, seeking in any order, and the precise errors of truncated, corrupt and newer files.
"""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from kvscope.engine import Engine, EngineArgs
from kvscope.engine.events import EventKind
from kvscope.app.lab.presets import load_hardware, load_model
from kvscope.app.lab.recording import Recording, RecordingError, RunRecorder
from kvscope.app.lab.recording.format import FILE_HEADER, FRAME, RECORD_NAMES
from kvscope.engine.runners.base import StepOutOfMemory
from kvscope.engine.runners.simulated import SimulatedRunner
from kvscope.app.lab.workload import LengthDist, WorkloadSpec, generate_requests

SNAPSHOT_ARRAYS = ("block_owner", "block_state", "block_ref_cnt", "block_fill", "block_hash")
SNAPSHOT_SCALARS = ("time_s", "step", "block_size", "kv_usage", "num_running", "num_waiting")


def small_workload(num_requests: int = 30, shared: float = 0.6) -> WorkloadSpec:
    """Short requests arriving fast into a small pool: chunked prefills, prefix hits, preemptions."""
    return WorkloadSpec(
        name="small", num_requests=num_requests, arrival_rate_per_s=200.0,
        prompt_tokens=LengthDist("lognormal", median=120, sigma=0.6, min=2, max=300),
        output_tokens=LengthDist("lognormal", median=40, sigma=0.8, min=1, max=200),
        shared_prefix_fraction=shared, shared_prefix_tokens=48, num_shared_prefixes=2)


class FlakyRunner(SimulatedRunner):
    """Runs out of device memory on every 7th batch of more than one request."""

    def __init__(self, *args):
        super().__init__(*args)
        self.calls = 0

    def execute(self, batch):
        self.calls += 1
        if self.calls % 7 == 0 and len(batch.requests) > 1:
            raise StepOutOfMemory("injected by the test")
        return super().execute(batch)


def record_run(path, engine: Engine, keyframe_interval: int | None = None, run_info: dict | None = None):
    """Step the engine to the end, recording it; returns (steps, snapshots) as the live engine gave them."""
    recorder = RunRecorder(engine, path, run_info or {"label": "test run"}, keyframe_interval=keyframe_interval)
    steps, snapshots = [], []
    while (result := engine.step()) is not None:
        recorder.record_step(result)
        steps.append(result)
        snapshots.append(engine.snapshot())
    recorder.close(engine.summary())
    return steps, snapshots


def simulated_engine(workload: WorkloadSpec | None = None, runner_factory=None, seed: int = 3, **args) -> Engine:
    args.setdefault("num_gpu_blocks_override", 40)
    args.setdefault("max_model_len", 600)
    engine = Engine(load_model("llama-3-8b"), load_hardware("h100-80gb"), EngineArgs(**args), runner_factory=runner_factory)
    workload = workload or small_workload()
    engine.add_workload(generate_requests(workload, engine.model.vocab_size, seed=seed))
    return engine


def assert_same_snapshot(got, want, where: str = "") -> None:
    for name in SNAPSHOT_ARRAYS:
        a, b = getattr(got, name), getattr(want, name)
        assert a.dtype == b.dtype, f"{where} {name}: dtype {a.dtype} != {b.dtype}"
        differ = np.flatnonzero(a != b)
        assert not len(differ), f"{where} {name} differs at blocks {differ[:8].tolist()}: {a[differ[:8]]} != {b[differ[:8]]}"
    for name in SNAPSHOT_SCALARS:
        assert getattr(got, name) == getattr(want, name), f"{where} {name}"
    assert got.requests.dtype == want.requests.dtype
    assert len(got.requests) == len(want.requests), f"{where} request table length"
    for name in want.requests.dtype.names:
        np.testing.assert_array_equal(got.requests[name], want.requests[name], err_msg=f"{where} requests.{name}")


def assert_round_trip(path, steps, snapshots) -> Recording:
    recording = Recording.open(path)
    assert recording.warning is None and recording.closed
    assert recording.delta_mismatches == 0
    assert recording.num_steps == len(steps)
    for i, (step, snapshot) in enumerate(zip(steps, snapshots)):
        assert recording.step(i) == step, f"step {i}"
        assert_same_snapshot(recording.snapshot_at(i), snapshot, f"after step {i}:")
    return recording


# -- round trips -------------------------------------------------------------------------------------


CONFIGURATIONS = {
    "paged, prefix caching, preemption": dict(),
    "device out of memory mid-run": dict(runner_factory=FlakyRunner),
    "contiguous reservations": dict(allocation="contiguous", num_gpu_blocks_override=120),
    "static batching, no chunked prefill": dict(scheduling="static", enable_chunked_prefill=False,
                                                num_gpu_blocks_override=120),
}


@pytest.mark.parametrize("name", CONFIGURATIONS)
def test_every_step_and_snapshot_of_a_simulated_run_reads_back_as_the_engine_produced_it(tmp_path, name):
    engine = simulated_engine(**CONFIGURATIONS[name])
    steps, snapshots = record_run(tmp_path / "run.kvrec", engine, keyframe_interval=97)
    recording = assert_round_trip(tmp_path / "run.kvrec", steps, snapshots)
    counts = recording.event_counts()
    # the run exercised what the configuration is about
    if name.startswith("paged"):
        assert counts["preempted"] > 0 and counts["prefix_hit"] > 0 and counts["evicted"] > 0
    elif name.startswith("device"):
        assert counts["out_of_memory"] > 0
    elif name.startswith("contiguous"):
        assert recording.header["allocation"] == "contiguous"
        assert (snapshots[len(snapshots) // 2].block_state == 3).any()  # reserved, not yet written
    assert recording.initial_snapshot().count(0) == recording.num_blocks


def test_a_real_tiny_llama_run_reads_back_exactly(tmp_path):
    from kvscope.app.lab.real_backend import create_real_engine, load_for_real_backend

    engine = create_real_engine(load_for_real_backend("tiny-llama"),
                                EngineArgs(num_gpu_blocks_override=10, max_model_len=256))
    rng = np.random.default_rng(0)
    prefix = rng.integers(0, engine.model.vocab_size, 32).tolist()  # two blocks the later requests share
    for i in range(4):
        engine.add_request(prefix + rng.integers(0, engine.model.vocab_size, 8 + 9 * i).tolist(), max_tokens=4,
                           arrival_time=0.01 * i)
    steps, snapshots = record_run(tmp_path / "real.kvrec", engine, keyframe_interval=3)
    recording = assert_round_trip(tmp_path / "real.kvrec", steps, snapshots)
    assert recording.header["backend"] == "real"
    assert recording.event_counts()["prefix_hit"] > 0
    assert recording.summary == engine.summary()


def test_the_default_keyframe_spacing_reads_back_exactly(tmp_path):
    engine = simulated_engine(small_workload(60))
    steps, snapshots = record_run(tmp_path / "run.kvrec", engine)
    recording = assert_round_trip(tmp_path / "run.kvrec", steps, snapshots)
    assert recording.header["keyframe_interval"] == "by size"


def test_seeking_backwards_and_forwards_gives_the_same_snapshots(tmp_path):
    steps, snapshots = record_run(tmp_path / "run.kvrec", simulated_engine(), keyframe_interval=50)
    recording = Recording.open(tmp_path / "run.kvrec")
    n = len(steps)
    order = [n - 1, 0, n // 2, n // 2 - 1, 3, n - 2, 51, 49, 50, n // 3] + np.random.default_rng(1).integers(0, n, 20).tolist()
    for i in order:
        assert_same_snapshot(recording.snapshot_at(i), snapshots[i], f"seek to {i}:")
    with pytest.raises(IndexError, match="outside the recording"):
        recording.snapshot_at(n)


def test_header_series_events_and_finished_requests_match_the_run(tmp_path):
    engine = simulated_engine()
    spec = small_workload()
    steps, _ = record_run(tmp_path / "run.kvrec", engine, run_info={"label": "a label", "workload": spec, "seed": 3})
    recording = Recording.open(tmp_path / "run.kvrec")
    header = recording.header
    assert header["label"] == "a label" and header["run"] == {"seed": 3}
    assert header["workload"]["name"] == "small" and header["workload"]["prompt_tokens"]["median"] == 120
    assert header["model"]["num_key_value_heads"] == engine.model.num_key_value_heads
    assert header["plan"] == engine.plan.to_dict()
    assert header["num_blocks"] == engine.plan.num_blocks == recording.num_blocks
    assert recording.summary == engine.summary()

    series = recording.series()
    np.testing.assert_array_equal(series["kv_usage"], [s.kv_usage for s in steps])
    np.testing.assert_array_equal(series["time_s"], [s.start_time_s + s.duration_s for s in steps])
    np.testing.assert_array_equal(series["num_waiting"], [s.num_waiting for s in steps])
    assert series["output_tokens"].sum() == sum(s.num_output_tokens for s in steps)
    assert series["preemptions"].sum() == engine.summary()["preemptions"] > 0

    assert recording.events_between(0, len(steps)) == [e for s in steps for e in s.events]
    assert recording.events_between(10, 20) == [e for s in steps[10:20] for e in s.events]
    finished = recording.finished_requests()
    metrics = engine.metrics
    np.testing.assert_array_equal(finished["ttft_s"], metrics.ttft)
    np.testing.assert_array_equal(finished["queue_time_s"], metrics.queue_time)
    np.testing.assert_array_equal(finished["finish_time_s"], metrics.finish_times)
    finish_events = [e.request_id for s in steps for e in s.events if e.kind == EventKind.FINISHED]
    assert finished["request_id"].tolist() == finish_events


def test_recording_does_not_change_the_run(tmp_path):
    recorded = simulated_engine()
    record_run(tmp_path / "run.kvrec", recorded)
    plain = simulated_engine()
    plain.run()
    assert recorded.summary() == plain.summary()


# -- damaged files -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A recording of a few chunks, its bytes, and the (offset, type) of every record."""
    path = tmp_path_factory.mktemp("recorded") / "run.kvrec"
    steps, snapshots = record_run(path, simulated_engine(), keyframe_interval=60)
    data = path.read_bytes()
    records, offset = [], FILE_HEADER.size
    while offset < len(data):
        marker, record_type, _, length, _, _ = FRAME.unpack_from(data, offset)
        if marker != b"KR":
            break  # the trailer
        records.append((offset, record_type, length))
        offset += FRAME.size + length
    return path, data, records, steps, snapshots


def write(tmp_path, data: bytes, name: str = "damaged.kvrec"):
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_a_file_cut_mid_record_is_reported_with_its_last_complete_step(tmp_path, recorded):
    _, data, records, steps, snapshots = recorded
    deltas = [(offset, length) for offset, record_type, length in records if RECORD_NAMES[record_type] == "deltas"]
    # a cut inside the second DELTAS record: the first chunk (60 steps: keyframe_interval) is whole
    second_deltas, length = deltas[1]
    for cut in (second_deltas + 5, second_deltas + FRAME.size + length // 2, second_deltas + FRAME.size + length - 1):
        path = write(tmp_path, data[:cut])
        with pytest.raises(RecordingError) as error:
            Recording.open(path)
        message = str(error.value)
        assert message.startswith("damaged.kvrec is truncated: the last complete step is 59;"), message
        assert f"it ends mid-record at byte {cut:,}" in message
        # ... and read up to there when asked to
        salvaged = Recording.open(path, allow_truncated=True)
        assert salvaged.num_steps == 60 and "truncated" in salvaged.warning
        assert_same_snapshot(salvaged.snapshot_at(59), snapshots[59], "salvaged:")
        assert salvaged.step(59) == steps[59]


@pytest.mark.parametrize("cut, expected", [
    (0, "is truncated: it ends at byte 0, inside the file signature"),
    (7, "is truncated: it ends at byte 7, inside the file signature"),
    (12, "is truncated: it ends at byte 12, inside the file header"),
    (FILE_HEADER.size + 3, "is truncated: it holds no complete step; it ends mid-record at byte 17"),
])
def test_a_file_cut_in_its_header_is_an_error(tmp_path, recorded, cut, expected):
    with pytest.raises(RecordingError, match=expected):
        Recording.open(write(tmp_path, recorded[1][:cut]))


def test_a_recording_whose_writer_was_killed_is_read_up_to_its_last_record(tmp_path):
    """A recorder process killed mid-run (SIGKILL: no close, no index) leaves whole records."""
    path = tmp_path / "killed.kvrec"
    script = textwrap.dedent(f"""
        import os, signal, sys, time
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from test_recording import simulated_engine
        from kvscope.app.lab.recording import RunRecorder
        engine = simulated_engine()
        recorder = RunRecorder(engine, {str(path)!r}, {{"label": "killed"}}, keyframe_interval=50)
        for _ in range(230):
            recorder.record_step(engine.step())
        size, deadline = -1, time.monotonic() + 10
        while os.path.getsize({str(path)!r}) != size and time.monotonic() < deadline:
            size = os.path.getsize({str(path)!r})
            time.sleep(0.1)  # until the writer thread has the chunks up to step 200 on disk
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == -signal.SIGKILL, result.stderr
    recording = Recording.open(path)
    assert not recording.closed and recording.summary is None
    assert recording.num_steps == 200  # four chunks of 50 steps; the last 30 were still in memory
    assert recording.warning == ("killed.kvrec was not closed (the process recording it stopped before writing its "
                                 "index): it is read up to its last complete record, which holds step 199")
    engine = simulated_engine()
    for i in range(200):
        step = engine.step()
        assert recording.step(i) == step
    assert_same_snapshot(recording.snapshot_at(199), engine.snapshot(), "killed recording:")


def test_a_corrupt_byte_fails_its_records_checksum(tmp_path, recorded):
    _, data, records, _, _ = recorded
    number, (offset, record_type, length) = next((n, r) for n, r in enumerate(records) if RECORD_NAMES[r[1]] == "deltas")
    damaged = bytearray(data)
    damaged[offset + FRAME.size + length // 2] ^= 0x5A
    path = write(tmp_path, bytes(damaged))
    expected = f"damaged.kvrec: record {number} (a deltas record at byte {offset:,}) fails its checksum: the file is corrupt"
    with pytest.raises(RecordingError) as error:
        Recording.open(path)
    assert str(error.value) == expected
    lazy = Recording.open(path, verify=False)  # opens from the index; the damage shows when that chunk is read
    lazy.step(0)
    with pytest.raises(RecordingError, match="fails its checksum"):
        lazy.snapshot_at(5)


def test_a_damaged_frame_or_index_is_an_error(tmp_path, recorded):
    _, data, records, _, _ = recorded
    offset = records[3][0]
    damaged = bytearray(data)
    damaged[offset + 6] ^= 0xFF  # the payload length
    with pytest.raises(RecordingError, match=f"record 3 at byte {offset:,} has a damaged frame"):
        Recording.open(write(tmp_path, bytes(damaged)))
    index_offset, _, index_length = records[-1]
    damaged = bytearray(data)
    damaged[index_offset + FRAME.size + index_length // 2] ^= 0x01
    with pytest.raises(RecordingError, match="the index record .* fails its checksum"):
        Recording.open(write(tmp_path, bytes(damaged)))


def test_a_newer_major_version_is_refused_and_a_newer_minor_read(tmp_path, recorded):
    data = recorded[1]
    newer = bytearray(data)
    struct.pack_into("<HH", newer, 10, 2, 0)
    with pytest.raises(RecordingError, match=r"uses recording format 2\.0, newer than this kvscope reads \(1\.x\): "
                                             "open it with a newer kvscope"):
        Recording.open(write(tmp_path, bytes(newer)))
    minor = bytearray(data)
    struct.pack_into("<HH", minor, 10, 1, 7)
    assert Recording.open(write(tmp_path, bytes(minor), "minor.kvrec")).num_steps == len(recorded[3])


def test_files_that_are_not_recordings(tmp_path):
    with pytest.raises(RecordingError, match="no such file"):
        Recording.open(tmp_path / "missing.kvrec")
    with pytest.raises(RecordingError, match="is a folder"):
        Recording.open(tmp_path)
    with pytest.raises(RecordingError, match=r"notes.txt is not a kvscope recording"):
        Recording.open(write(tmp_path, b"TIMESTAMP,ContextTokens\n1,2\n", "notes.txt"))


def test_a_recording_path_that_cannot_be_written_is_a_recording_error(tmp_path):
    with pytest.raises(RecordingError, match="cannot write the recording"):
        RunRecorder(simulated_engine(), tmp_path / "no" / "such" / "folder.kvrec", {})
