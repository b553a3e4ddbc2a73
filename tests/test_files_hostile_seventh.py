"""The seventh hostile pass over the files and servers kvscope reads (scripts/hostile_inputs_seventh_files.py):
the closing /metrics scrape of a headless attach, which waited the whole --timeout past the attach's
end; a recording reader whose cache of decoded chunks was bounded by their number, not their bytes;
and what the pass's probes found further."""

from __future__ import annotations

import gc
import json
import struct
import time
import tracemalloc
import zlib

from test_attach_hostile_fourth import run_in_thread
from test_files_hostile_fourth import _records
from test_files_hostile_sixth import PROM, ScriptedServer, dribble, send
from test_vllm_subscriber import WAIT_S

from kvscope.app.lab.recording import Recording
from kvscope.app.lab.recording.format import FRAME, INDEX, STEPS, frame_record
from kvscope.app.lab.vllm.attachment import Attachment, AttachTarget


def quiet_after_the_probe(handler, nth):
    """A vLLM look-alike whose /metrics answers the attach's probe, then a byte every 50 ms."""
    if handler.path == "/metrics" and nth > 1:
        dribble(handler, 8.0)
    elif handler.path == "/metrics":
        send(handler, PROM)
    elif handler.path == "/version":
        send(handler, b'{"version": "0.32.0"}')
    else:
        send(handler, b"not found", 404)


# -- the closing scrape of a headless attach ------------------------------------------------------------


def test_the_closing_scrape_keeps_the_attach_deadline(publisher):
    """`kvscope attach --duration 0.3 --timeout 5` against a /metrics gone quiet: the polls' scrapes
    stopped at the end, then the closing scrape waited the whole 5 s --timeout past it."""
    from kvscope.app.cli.attach import follow

    pub = publisher()
    slow = ScriptedServer(quiet_after_the_probe)
    try:
        target = AttachTarget(slow.url, kv_events=pub.endpoint, timeout_s=5.0)
        outcome, took = run_in_thread(lambda: follow(target, 0.3), limit_s=WAIT_S)
    finally:
        slow.stop()
    # no batch was published: the attach is refused as not a publisher's, with its report kept
    report = outcome["value"] if "value" in outcome else outcome["error"].report
    assert took < 3.0
    assert report["scrape_failures"] >= 1  # the closing scrape's, said as one, not silently dropped


def test_a_scrape_given_a_deadline_long_past_ends_soon_after_it(publisher):
    pub = publisher()
    slow = ScriptedServer(quiet_after_the_probe)
    try:
        with Attachment(AttachTarget(slow.url, kv_events=pub.endpoint, timeout_s=5.0)) as attachment:
            ended = time.monotonic() - 10
            outcome, took = run_in_thread(lambda: attachment.scrape(ended), limit_s=WAIT_S)
            failures = attachment.counts.scrape_failures
    finally:
        slow.stop()
    assert outcome == {"value": None} and failures == 1
    assert took < 1.5


# -- the reader's cache of decoded chunks ------------------------------------------------------------------


def _padded(data: bytes, pad_bytes: int) -> bytes:
    """The recording with an array of pad_bytes zeros added to each STEPS record (a few KB stored,
    pad_bytes inflated): chunks as large as a long run's, without recording one. Unclosed (no index)."""
    out = bytearray(data[:_records(data)[0][0]])
    for offset, record_type, flags, length in _records(data):
        if record_type == INDEX:
            break
        raw = data[offset:offset + FRAME.size + length]
        if record_type == STEPS:
            payload = zlib.decompress(raw[FRAME.size:]) if flags & 1 else raw[FRAME.size:]
            (n,) = struct.unpack_from("<I", payload)
            head, body = json.loads(payload[4:4 + n]), bytearray(payload[4 + n:])
            body += bytes(-len(body) % 8)
            head["arrays"]["padding"] = {"dtype": "|u1", "count": pad_bytes, "offset": len(body)}
            body += bytes(pad_bytes)
            text = json.dumps(head).encode()
            raw = frame_record(STEPS, struct.pack("<I", len(text)) + text + bytes(body), True)
        out += raw
    return bytes(out)


def test_the_chunk_cache_is_bounded_by_bytes_not_by_chunks(tmp_path, recording_bytes, monkeypatch):
    """Each chunk 4 MB inflated and a budget of 12 MB: the 16-chunk cache held every one (~46 MB);
    at most CACHED_CHUNKS chunks of 512 MB each could be 8 GB."""
    path = tmp_path / "padded.kvrec"
    path.write_bytes(_padded(recording_bytes, 4 * 1024**2))
    monkeypatch.setattr(Recording, "CACHED_BYTES", 12 * 1024**2, raising=False)
    gc.collect()
    tracemalloc.start()
    try:
        with Recording.open(path, allow_truncated=True) as recording:
            assert len(recording._chunks) > 6
            for i in range(recording.num_steps):
                recording.step(i)
            gc.collect()
            held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert held < 20 * 1024**2


def test_a_chunk_larger_than_the_budget_is_decoded_once_while_it_is_read(tmp_path, recording_bytes, monkeypatch):
    """A seek reads a chunk's steps and deltas in turn: with each over the budget, keeping only the
    record just used would inflate both again at every step."""
    path = tmp_path / "small.kvrec"
    path.write_bytes(recording_bytes)
    monkeypatch.setattr(Recording, "CACHED_BYTES", 1)
    with Recording.open(path) as recording:
        first = recording._chunks[0][0]
        decoded, payload = [], recording._handle.payload
        monkeypatch.setattr(recording._handle, "payload", lambda entry, *a: decoded.append(entry) or payload(entry))
        for i in range(first.first, first.first + first.count):
            recording.step(i)
            recording.snapshot_at(i)
    assert len({entry.offset for entry in decoded}) == len(decoded)


def test_a_normal_recording_keeps_its_chunks_cached(tmp_path, recording_bytes, monkeypatch):
    """The same hit rate as before on a recording of normal chunks: a second pass decodes nothing."""
    path = tmp_path / "small.kvrec"
    path.write_bytes(recording_bytes)
    with Recording.open(path) as recording:
        assert len(recording._chunks) <= Recording.CACHED_CHUNKS
        for i in range(recording.num_steps):
            recording.step(i)
        decoded = []
        monkeypatch.setattr(recording._handle, "payload", lambda entry, *a: decoded.append(entry))
        for i in range(recording.num_steps):
            recording.step(i)
    assert decoded == []


# -- a /metrics of many engines ---------------------------------------------------------------------------


def test_an_exposition_of_many_engines_is_read_in_one_pass():
    """Each engine's series were filtered from every sample: 1,024 engines of 150 series (9 MB) took
    38 s a scrape, n x n. Here 1,024 engines of 30 series: seconds before, a fraction of one now."""
    from kvscope.app.lab.vllm.metrics import parse_metrics

    lines = ['vllm:cache_config_info{block_size="16",num_gpu_blocks="100",engine="0"} 1']
    lines += [f'vllm:num_requests_running{{engine="{e}",model_name="m{m}"}} 1' for e in range(1024) for m in range(30)]
    started = time.monotonic()
    metrics = parse_metrics("\n".join(lines) + "\n")
    took = time.monotonic() - started
    assert len(metrics.engines) == 1024 and metrics.engines["7"].num_requests_running == 30
    assert metrics.total.num_requests_running == 1024 * 30
    assert took < 2.5


# -- KV events storing more blocks than the server has ---------------------------------------------------


def test_blocks_waiting_for_a_cell_are_bounded_and_removed_in_constant_time():
    """20,000 made-up hashes on a 12-block pool all waited (a million held 400 MB), and each removal
    scanned the queue twice: 2,000 removals after a million took 146 s."""
    import msgspec

    from kvscope.app.lab.vllm.events import decode_batch
    from kvscope.app.lab.vllm.prefix_cache_map import PrefixCacheMap

    def batch(kind, hashes):
        return decode_batch(msgspec.msgpack.encode([1.0, [{"type": kind, "block_hashes": hashes}]]))

    cache = PrefixCacheMap(12, 16)
    cache.apply(batch("BlockStored", list(range(1, 20_001))))
    counts = cache.counts()
    assert counts.placed_copies == 12 and counts.unplaced <= 4096 and len(cache.blocks) <= 12 + 4096
    assert cache.forgotten == 20_000 - 12 - counts.unplaced
    started = time.monotonic()
    cache.apply(batch("BlockRemoved", list(range(1, 13)) + list(range(19_000, 20_001))))
    assert time.monotonic() - started < 1.0
    counts = cache.counts()
    assert counts.placed_copies == 12 and counts.unplaced == cache.num_unplaced  # the oldest waiting, placed


def test_a_batch_storing_more_blocks_than_the_pool_is_skipped_and_said(server, publisher):
    """A batch of 5,000 stored blocks for a 12-block pool (no engine step stores more than its pool)
    was placed block by block; a million of them took 10 s and 400 MB."""
    import msgspec

    from test_vllm_subscriber import WAIT_S as wait_s

    http, pub = server(), publisher()
    encode = msgspec.msgpack.encode
    with Attachment(AttachTarget(http.url, kv_events=pub.endpoint)) as attachment:
        assert pub.subscribed.wait(wait_s)
        pub.publish(0, encode([1.0, [{"type": "BlockStored", "block_hashes": list(range(1, 5001)),
                                      "parent_block_hash": None, "token_ids": [], "block_size": 32}]]))
        pub.publish(1, encode([1.0, [{"type": "BlockStored", "block_hashes": [9], "parent_block_hash": None,
                                      "token_ids": [1] * 32, "block_size": 32}]]))
        counts = attachment.subscriber.counts
        ends = time.monotonic() + wait_s
        while counts.batches + counts.decode_errors < 2 and time.monotonic() < ends:
            attachment.poll(20)
        rows = [text for kind, text in attachment.log_rows if kind == "decode_error"]
        map_counts = attachment.prefix_map.counts()
    assert (counts.batches, counts.decode_errors, counts.gaps) == (1, 1, 0)
    assert map_counts.cached_blocks == 1 and map_counts.unplaced == 0
    assert "storing 5,000 blocks, more than the server's pool of 12" in rows[0]
