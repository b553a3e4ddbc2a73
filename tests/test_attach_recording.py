"""An attached server recorded to a .kvrec and replayed: the loopback publisher and HTTP server of
test_attach, a session that records while it follows, and a replay session whose frames must show
what the live frames showed (the map's cells, the counts, the metric points, the log). A damaged
or forged attached recording is one RecordingError; `kvscope attach --record`, `kvscope export`
and `kvscope gui --replay`'s check read it. And the latency rows predicted beside observed."""

from __future__ import annotations

import json
import math
import struct
import time

import numpy as np
import pytest

from attach_fixtures import WAIT_S, FixtureServer, LoopbackPublisher, cached_after_run1, play_script, vllm_routes
from kvscope.app.cli.gui import check_replay
from kvscope.app.cli.main import main
from kvscope.app.host.attach_replay import AttachReplaySession
from kvscope.app.host.attach_session import AttachSession
from kvscope.app.host.protocol import APPLY, PLAY, RECORD, SEEK, SPEED, STOP_RECORDING
from kvscope.app.lab.presets import load_hardware, load_model
from kvscope.app.lab.recording import Recording, RecordingError
from kvscope.app.lab.recording.attached_reader import AttachedRecording
from kvscope.app.lab.recording.format import FRAME
from kvscope.app.lab.vllm.attachment import AttachTarget
from kvscope.app.lab.vllm.observed_point import ObservedPoint
from kvscope.app.lab.vllm.prediction import LatencyModel, ObservedLoad
from kvscope.engine.snapshot import BLOCK_CACHED


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A live session recorded from attach to the end of the script: (path, the live frames)."""
    path = tmp_path_factory.mktemp("attached") / "server.kvrec"
    http, pub = FixtureServer(vllm_routes()), LoopbackPublisher()
    target = AttachTarget(http.url, kv_events=pub.endpoint, replay=pub.replay_endpoint, model=load_model("tiny-llama"),
                          hardware=load_hardware("h100-80gb"), scrape_interval_s=0.05)
    session = AttachSession()
    try:
        session.handle(APPLY, (target, True))
        session.handle(RECORD, str(path))
        frames = [session.take_frame()]
        play_script(pub)
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline and (session.attachment.subscriber.counts.batches < 26
                                               or len(session.attachment.points) < 5):
            session.advance(0.001)
            frames.append(session.take_frame())
        session.handle(STOP_RECORDING, None)
        frames.append(session.take_frame())
    finally:
        session.close()
        pub.stop()
        http.stop()
    assert not [f.error for f in frames if f.error]
    return path, frames


def replay_all(path, seek=None) -> list:
    session = AttachReplaySession()
    session.handle(SPEED, 0)
    session.handle(APPLY, (str(path), False))
    frames = [session.take_frame()]
    if seek is not None:
        session.handle(SEEK, seek)
        frames = [session.take_frame()]
    session.handle(PLAY, None)
    while session.playing:
        session.advance(0.01)
        frames.append(session.take_frame())
    frames.append(session.take_frame())
    return frames


def last(frames, name):
    return [getattr(f, name) for f in frames if getattr(f, name) is not None][-1]


def test_the_replay_shows_what_the_live_session_showed(recorded):
    path, live = recorded
    replayed = replay_all(path)
    assert not [f.error for f in replayed if f.error]
    live_snapshot, replay_snapshot = last(live, "snapshot"), last(replayed, "snapshot")
    assert replay_snapshot.count(BLOCK_CACHED) == cached_after_run1()
    for field in ("block_state", "block_owner", "block_hash", "block_fill"):
        assert np.array_equal(getattr(live_snapshot, field), getattr(replay_snapshot, field)), field
    live_cells, replay_cells = last(live, "cells"), last(replayed, "cells")
    for key in ("chain", "depth"):
        assert np.array_equal(live_cells[key], replay_cells[key])
    counts = last(replayed, "counts")
    assert counts == last(live, "counts")
    assert (counts["batches"], counts["gaps"], counts["restarts"]) == (26, 1, 1)
    live_points = np.concatenate([f.points for f in live if len(f.points)])
    replay_points = np.concatenate([f.points for f in replayed if len(f.points)])
    # the first scrape came at attach, before the recording began: every later one was recorded
    for name in live_points.dtype.names:
        assert np.array_equal(live_points[name][1:], replay_points[name], equal_nan=True), name
    # (by repr: NaN, a percentile of nothing observed, equals itself only there)
    assert [repr(p) for f in live for p in f.observed][1:] == [repr(p) for f in replayed for p in f.observed]
    live_rows = [row for f in live for row in f.log_lines]
    replay_rows = [row for f in replayed for row in f.log_lines]
    assert replay_rows == live_rows[-len(replay_rows):] and {"stored", "gap", "replayed", "restart"} <= \
        {kind for kind, _ in replay_rows}
    assert replayed[0].info["num_gpu_blocks"] == 12 and any(f.done for f in replayed)


def test_a_seek_back_and_forth_rebuilds_the_same_state(recorded):
    path, _ = recorded
    recording = AttachedRecording.open(path)
    whole = last(replay_all(path), "snapshot")
    session = AttachReplaySession()
    session.handle(APPLY, (str(path), False))
    session.take_frame()
    session.handle(SEEK, recording.num_steps)
    end = session.take_frame()
    assert end.position == recording.num_steps and end.info is not None and end.counts["batches"] == 26
    assert np.array_equal(end.snapshot.block_hash, whole.block_hash)
    assert len(end.log_lines) > 0 and len(end.observed) == len(recording.points())
    session.handle(SEEK, 0)
    start = session.take_frame()
    assert start.position == 0 and start.snapshot.count(BLOCK_CACHED) == 0 and not start.observed


def test_the_recording_holds_its_header_and_the_engine_reader_refuses_it(recorded):
    path, _ = recorded
    recording = AttachedRecording.open(path)
    assert recording.header["source"] == "vllm-attach" and recording.header["format_version"] == [1, 1]
    assert recording.info["url"].startswith("http://127.0.0.1") and recording.summary["batches"] == 26
    assert recording.num_steps == len(recording.end_times) and np.all(np.diff(recording.end_times) >= 0)
    with pytest.raises(RecordingError, match="is a recording of an attached vLLM server"):
        Recording.open(path)


def test_a_damaged_attached_recording_is_one_error(recorded, tmp_path):
    path, _ = recorded
    data = path.read_bytes()
    damaged = bytearray(data)
    damaged[len(data) // 2] ^= 0xFF
    bad = tmp_path / "damaged.kvrec"
    bad.write_bytes(bytes(damaged))
    with pytest.raises(RecordingError, match=r"damaged.kvrec.*(checksum|damaged frame|corrupt)"):
        AttachedRecording.open(bad)
    cut = tmp_path / "cut.kvrec"
    cut.write_bytes(data[:len(data) // 2])
    with pytest.raises(RecordingError, match="cut.kvrec is truncated"):
        AttachedRecording.open(cut)
    assert main(["gui", "--replay", str(bad), "--quit-after", "0"]) == 2


def forged(path, tmp_path, edit) -> str:
    """The recording with its header record's JSON edited (its checksums made right again)."""
    import zlib

    data = bytearray(path.read_bytes())
    offset = 14  # the header record follows the file header
    length = struct.unpack_from("<Q", data, offset + 4)[0]
    payload = bytes(data[offset + FRAME.size:offset + FRAME.size + length])
    head_len = struct.unpack_from("<I", payload)[0]
    head = json.loads(payload[4:4 + head_len])
    edit(head)
    text = json.dumps(head).encode()
    new_payload = struct.pack("<I", len(text)) + text + payload[4 + head_len:]
    frame = struct.pack("<2sBBQI", b"KR", 1, 0, len(new_payload), zlib.crc32(new_payload))
    frame += struct.pack("<I", zlib.crc32(frame))
    rest = bytes(data[offset + FRAME.size + length:])
    out = tmp_path / "forged.kvrec"
    # the index's offsets no longer hold: cut the trailer so the reader scans the records
    out.write_bytes(bytes(data[:offset]) + frame + new_payload + rest[:-20])
    return str(out)


@pytest.mark.parametrize("edit, message", [
    (lambda h: h["attach"].update(num_gpu_blocks="many"), "attach.num_gpu_blocks"),
    (lambda h: h["attach"].update(prediction=[{"name": 1}]), "attach.prediction"),
    (lambda h: h.pop("target"), "the header's target"),
])
def test_a_forged_header_is_one_error(recorded, tmp_path, edit, message):
    path, _ = recorded
    with pytest.raises(RecordingError, match=message):
        AttachedRecording.open(forged(path, tmp_path, edit), allow_truncated=True)


def test_headless_attach_records_and_export_writes_the_metric_series(tmp_path, capsys):
    http, pub = FixtureServer(vllm_routes()), LoopbackPublisher()
    try:
        play_script(pub)
        path = tmp_path / "headless.kvrec"
        report_path = tmp_path / "report.json"
        assert main(["attach", http.url, "--kv-events", pub.endpoint, "--replay", pub.replay_endpoint,
                     "--model", "tiny-llama", "--hardware", "h100-80gb", "--duration", "1.5", "--record", str(path),
                     "--json", str(report_path)]) == 0
    finally:
        pub.stop()
        http.stop()
    assert "recording written to" in capsys.readouterr().out
    report = json.loads(report_path.read_text())
    assert report["recording"]["ticks"] > 0
    latency = {row["name"]: row for row in report["prediction"] if row["unit"] == "s"}
    assert set(latency) == {"inter_token_latency", "time_to_first_token"}
    assert all("error" in row and row["calibration"] for row in latency.values())
    recording = AttachedRecording.open(path)
    assert sum(isinstance(r, object) and hasattr(r, "batch") for t in recording.ticks for r in t.records) == 26
    assert main(["export", str(path)]) == 0
    assert "attached vLLM server" in capsys.readouterr().out
    csv = tmp_path / "series.csv"
    assert main(["export", str(path), "--csv", str(csv)]) == 0
    lines = csv.read_text().splitlines()
    assert lines[0].startswith("time_s,") and "kv_usage" in lines[0] and "itl_p50_s" in lines[0]
    assert len(lines) == 1 + len(recording.points())
    assert main(["export", str(path), "--perfetto", str(tmp_path / "t.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--perfetto" in err and "attached vLLM server" in err
    assert not (tmp_path / "t.json").exists()
    check_replay(str(path))  # what `kvscope gui --replay` checks before the window opens


def point(time_s, running=8.0, usage=0.5, prompt=2000.0, generated=400.0, firsts=4.0, itl=0.02, ttft=0.2, queue=0.05):
    return ObservedPoint(time_s, usage, running, 0.0, 0.0, prompt, generated, 1.0, math.nan, ttft, ttft, itl, itl,
                         queue, queue, 0, ttft_count=firsts, ttft_sum_s=firsts * ttft, itl_count=generated,
                         itl_sum_s=generated * itl, queue_time_count=firsts, queue_time_sum_s=firsts * queue)


def test_latency_rows_predict_beside_observed_with_units_and_an_error():
    from types import SimpleNamespace

    server = SimpleNamespace(cache_config={"block_size": "16", "num_gpu_blocks": "4096",
                                           "kv_cache_memory_bytes": str(2 * 1024**3)}, version="0.32.0")
    model = LatencyModel.for_server(server, load_model("llama-3.1-8b"), load_hardware("h100-80gb"))
    points = [point(0.0), *(point(float(t)) for t in range(1, 11))]
    load = ObservedLoad.of_points(points, engines=1, num_gpu_blocks=4096, block_size=16)
    assert load.num_running == 8 and load.prompt_tokens_per_s == 2000 and load.itl_mean_s == pytest.approx(0.02)
    itl, ttft = model.predict(load)
    for row in (itl, ttft):
        assert row.unit == "s" and row.predicted > 0 and row.error is not None
        assert row.calibration and row.calibration in row.note
    assert itl.observed == pytest.approx(0.02) and ttft.observed == pytest.approx(0.2)
    assert ttft.predicted > 0.05  # the observed queue time, plus the prefill
    busier = model.predict(ObservedLoad.of_points([point(0.0), point(1.0, running=64)], 1, 4096, 16))[0]
    assert busier.predicted > itl.predicted
    none = LatencyModel.for_server(server, load_model("llama-3.1-8b"), None).predict(load)
    assert all(row.predicted is None and "--hardware" in row.note for row in none)


def test_a_refused_attach_leaves_an_existing_recording_as_it_was_and_makes_no_new_one(recorded, tmp_path, capsys):
    import shutil
    import threading

    existing = tmp_path / "existing.kvrec"
    shutil.copyfile(recorded[0], existing)
    before = existing.read_bytes()
    for target in (existing, tmp_path / "new.kvrec"):
        http, pub = FixtureServer(vllm_routes()), LoopbackPublisher()

        def garbage():
            assert pub.subscribed.wait(WAIT_S)
            pub.send_raw([b"kv", (0).to_bytes(8, "big"), b"\xc1 not msgpack"])

        threading.Thread(target=garbage, daemon=True).start()
        try:
            assert main(["attach", http.url, "--kv-events", pub.endpoint, "--duration", "1", "--record",
                         str(target)]) == 2
        finally:
            pub.stop()
            http.stop()
        assert "not a vLLM KV event publisher" in capsys.readouterr().err
    assert existing.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["existing.kvrec"]  # no new file, no temporary one


def test_a_recording_over_an_existing_file_replaces_it_whole_at_the_end(tmp_path, capsys):
    path = tmp_path / "over.kvrec"
    path.write_bytes(b"an older file")
    http, pub = FixtureServer(vllm_routes()), LoopbackPublisher()
    try:
        play_script(pub)
        assert main(["attach", http.url, "--kv-events", pub.endpoint, "--replay", pub.replay_endpoint,
                     "--duration", "1", "--record", str(path)]) == 0
    finally:
        pub.stop()
        http.stop()
    assert f"recording written to {path}" in capsys.readouterr().out
    assert AttachedRecording.open(path).num_steps > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["over.kvrec"]
