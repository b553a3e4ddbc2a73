"""Recordings out of kvscope: `kvscope run --record`, `kvscope export` (Perfetto trace, CSV, a
description). The replay of a recording in the window is tests/test_replay_session.py's."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
import time

import numpy as np
import pytest

from kvscope.app.lab.export.perfetto import ENGINE_PID, REQUESTS_PID, perfetto_trace
from kvscope.app.lab.export.series_csv import CSV_COLUMNS, write_series_csv
from kvscope.app.lab.recording import Recording
from cli_helper import cli
from small_recording import record_small_run


@pytest.fixture(scope="module")
def recording_path(tmp_path_factory):
    """A small simulated run with prefix hits and preemptions, recorded."""
    return record_small_run(tmp_path_factory.mktemp("export") / "run.kvrec")


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


@pytest.mark.parametrize("per_write", [1, 7, 10_000])
def test_the_trace_written_a_chunk_of_events_at_a_time_is_the_trace(recording_path, tmp_path, monkeypatch, per_write):
    from kvscope.app.lab.export import perfetto

    monkeypatch.setattr(perfetto, "EVENTS_PER_WRITE", per_write)
    with Recording.open(recording_path) as recording:
        trace, _ = perfetto_trace(recording)
        perfetto.write_perfetto(recording, tmp_path / "t.json")
    assert len(trace["traceEvents"]) > 7
    assert json.loads((tmp_path / "t.json").read_text(encoding="utf-8")) == json.loads(json.dumps(trace))


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


# -- CSV -----------------------------------------------------------------------------------------------


def test_the_series_csv_has_a_row_per_step_and_units_in_its_column_names(recording_path, tmp_path):
    recording = Recording.open(recording_path)
    table = tmp_path / "steps.csv"
    assert write_series_csv(recording, table) == recording.num_steps
    with open(table, newline="") as handle:
        rows = list(csv.reader(handle))
    header = rows[0]
    assert header == [name for name, _ in CSV_COLUMNS] and len(rows) == 1 + recording.num_steps
    assert [int(row[0]) for row in rows[1:]] == list(range(recording.num_steps))
    series = recording.series()
    for name, key in CSV_COLUMNS[1:]:
        np.testing.assert_array_equal([float(row[header.index(name)]) for row in rows[1:]], series[key])


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
    assert "max_num_seqs None" not in paragraph and re.search(r"max_num_seqs [\d,]+,", paragraph)


def test_export_says_each_thing_once_with_the_values_the_run_used(capsys, tmp_path):
    path = tmp_path / "run.kvrec"
    assert cli(capsys, "run", "--quiet", "--requests", "3", "--record", str(path))[0] == 0
    rc, out, _ = cli(capsys, "export", str(path))
    assert rc == 0
    # the run's label already says "simulated"; max_num_seqs was left to its default, which the run resolved
    assert "through llama-3-8b (simulated on l4-24gb), with" in out and "backend)" not in out
    assert "max_num_seqs 256," in out


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


def test_sparse_request_ids_are_counted_as_the_requests_they_are():
    """Ids 0, 7 and 2**40 past a cap of 5: two requests have no track, not 2**40 - 4."""
    from kvscope.app.lab.export.perfetto import _TraceBuilder

    builder = _TraceBuilder(max_requests=5)
    for rid in (0, 7, 2**40, 7, -1):
        builder.track(rid)
    assert builder.tracked == {0} and builder.left_out == {7, 2**40}
