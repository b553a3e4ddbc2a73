"""Decoding vLLM's KV event messages: the frames vLLM's own publisher produced, both encodings,
the live captures, tolerance for newer fields and types, and malformed frames."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from kvscope.app.lab.vllm.events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    EventBatch,
    KvEventDecodeError,
    UnknownEvent,
    block_hash_u64,
    decode_batch,
    decode_message,
)
from kvscope.engine.config import ConfigError

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "vllm"
LEGACY_STORED_FIELDS = ("block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium",
                        "lora_name", "extra_keys", "group_idx")


def expected_event(event):
    """The dataclass a decoded-JSON event (a map with "type", or an array with the tag first) stands for."""
    if isinstance(event, list):
        tag, *values = event
        names = {"BlockStored": LEGACY_STORED_FIELDS, "BlockRemoved": ("block_hashes", "medium", "group_idx"),
                 "AllBlocksCleared": ()}[tag]
        event = {"type": tag, **dict(zip(names, values))}
    if event["type"] == "BlockStored":
        return BlockStored(tuple(event["block_hashes"]), event.get("parent_block_hash"), tuple(event["token_ids"]),
                           event["block_size"], event.get("medium"), event.get("group_idx") or 0,
                           event.get("lora_name"))
    if event["type"] == "BlockRemoved":
        return BlockRemoved(tuple(event["block_hashes"]), event.get("medium"), event.get("group_idx") or 0)
    return AllBlocksCleared()


def expected_batch(decoded) -> EventBatch:
    ts, events, *rank = decoded
    return EventBatch(ts, tuple(expected_event(e) for e in events), rank[0] if rank else None)


def frames(topic: str, seq: int, payload: bytes) -> list[bytes]:
    return [topic.encode(), seq.to_bytes(8, "big", signed=True), payload]


def fixture_frames():
    return [f for f in json.loads((FIXTURES / "fixture_v0.33.0.json").read_text()) if "payload_hex" in f]


def live_batches(name: str) -> list[dict]:
    return [json.loads(line) for line in (FIXTURES / name).read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("frame", fixture_frames(), ids=lambda f: f"seq{f['seq']}")
def test_vllm_0_33_publisher_frames_decode_to_their_recorded_form(frame):
    payload = bytes.fromhex(frame["payload_hex"])
    # the fixture is consistent: its payload bytes are exactly its decoded form on the wire
    assert msgspec.msgpack.decode(payload) == frame["decoded"]
    message = decode_message(frames(frame["topic"], frame["seq"], payload))
    assert (message.topic, message.seq) == (frame["topic"], frame["seq"])
    assert message.batch == expected_batch(frame["decoded"])


def test_the_two_fixture_frames_hold_store_remove_and_clear():
    first, second = (decode_batch(bytes.fromhex(f["payload_hex"])) for f in fixture_frames())
    stored, = first.events
    assert stored.block_hashes == (0x1111, 0x2222) and stored.parent_block_hash is None
    assert stored.block_size == 16 and stored.medium == "GPU" and first.data_parallel_rank == 1
    assert stored.tokens_of(0) == tuple(range(16)) and stored.tokens_of(1) == tuple(range(16, 32))
    assert second.events == (BlockRemoved((0x2222,), "GPU", 0), AllBlocksCleared())
    assert second.ts == 2.5


def test_legacy_array_encoding_decodes_to_the_same_batch_as_the_map_encoding():
    legacy = json.loads((FIXTURES / "fixture_v0.33.0.json").read_text())[2]["legacy_array_encoding_decoded"]
    map_encoded = decode_batch(bytes.fromhex(fixture_frames()[0]["payload_hex"]))
    assert decode_batch(msgspec.msgpack.encode(legacy)) == map_encoded


@pytest.mark.parametrize("name", ["live_events_run1.jsonl", "live_events_pressure_replayed.jsonl"])
def test_live_server_batches_round_trip(name):
    records = live_batches(name)
    for record in records:
        batch = decode_message(frames(record["topic"], record["seq"], msgspec.msgpack.encode(record["batch"]))).batch
        assert batch == expected_batch(record["batch"])
        assert batch.data_parallel_rank == 0
    assert [r["seq"] for r in records] == list(range(len(records)))


def test_live_pressure_run_stores_24_hashes_and_removes_14_with_64_bit_unsigned_hashes():
    batches = [decode_batch(msgspec.msgpack.encode(r["batch"])) for r in live_batches(
        "live_events_pressure_replayed.jsonl")]
    events = [e for b in batches for e in b.events]
    stored = [h for e in events if isinstance(e, BlockStored) for h in e.block_hashes]
    removed = [h for e in events if isinstance(e, BlockRemoved) for h in e.block_hashes]
    assert (len(stored), len(removed)) == (24, 14)
    assert set(removed) <= set(stored)
    assert max(stored) > 2**63 and all(0 <= h < 2**64 for h in stored)  # above int64: unsigned kept
    assert all(e.block_size == 32 and len(e.token_ids) == 32 * len(e.block_hashes)
               for e in events if isinstance(e, BlockStored))


def test_newer_fields_are_ignored_in_both_encodings():
    plain = decode_batch(msgspec.msgpack.encode([1.0, [{"type": "BlockRemoved", "block_hashes": [7]}], 0]))
    with_extras = decode_batch(msgspec.msgpack.encode([1.0, [{
        "type": "BlockRemoved", "block_hashes": [7], "locality": "local", "ownership": {"x": [1, 2]}}], 0, "extra"]))
    assert with_extras == plain
    array_extras = decode_batch(msgspec.msgpack.encode(
        [1.0, [["BlockStored", [1], None, [5, 6], 2, None, "GPU", None, None, 3, "full_attention", None, "new"]]]))
    assert array_extras.events == (BlockStored((1,), None, (5, 6), 2, "GPU", 3),)
    assert array_extras.data_parallel_rank is None  # before vLLM 0.10.2 the batch had no rank


def test_bytes_hashes_and_signed_ints_name_the_same_64_bit_hash():
    raw = bytes(range(24))
    batch = decode_batch(msgspec.msgpack.encode([0.0, [
        {"type": "BlockStored", "block_hashes": [raw], "parent_block_hash": -1, "token_ids": [1], "block_size": 1}]]))
    stored, = batch.events
    assert stored.block_hashes == (raw,)
    assert stored.parent_block_hash == 2**64 - 1  # sent signed, read as the unsigned value
    assert block_hash_u64(raw) == int.from_bytes(raw[-8:], "big")
    assert block_hash_u64(-2) == 2**64 - 2


def test_unknown_event_types_are_kept_by_name_and_the_rest_of_the_batch_survives():
    batch = decode_batch(msgspec.msgpack.encode([3.0, [
        {"type": "BlockPinned", "block_hashes": [1]}, ["BlockMoved", 1, 2], {"type": "AllBlocksCleared"},
        ["BlockRemoved", [9], "CPU"]], 2]))
    assert batch.events == (UnknownEvent("BlockPinned"), UnknownEvent("BlockMoved"), AllBlocksCleared(),
                            BlockRemoved((9,), "CPU", 0))


def test_a_batch_sent_as_a_map_is_read_too():
    batch = decode_batch(msgspec.msgpack.encode({"ts": 4.0, "events": [["AllBlocksCleared"]],
                                                 "data_parallel_rank": 3}))
    assert batch == EventBatch(4.0, (AllBlocksCleared(),), 3)


@pytest.mark.parametrize("message, words", [
    ([b"kv", (0).to_bytes(8, "big"), b"\xc1"], "malformed"),
    ([b"kv", (0).to_bytes(8, "big"), b""], "empty"),
    ([b"kv", (0).to_bytes(7, "big"), msgspec.msgpack.encode([0.0, []])], "7 bytes"),
    ([b"kv", msgspec.msgpack.encode([0.0, []])], "2 frames"),
    ([b"\xff\xfe", (0).to_bytes(8, "big"), msgspec.msgpack.encode([0.0, []])], "UTF-8"),
    ([b"kv", (0).to_bytes(8, "big"), msgspec.msgpack.encode([0.0, "events"])], "batch"),
    ([b"kv", (0).to_bytes(8, "big"), msgspec.msgpack.encode(
        [0.0, [{"type": "BlockStored", "block_hashes": "nope"}]])], "block_hashes"),
    ([b"kv", (0).to_bytes(8, "big"), msgspec.msgpack.encode([0.0, [["BlockRemoved"]]])], "BlockRemoved"),
], ids=["bad-msgpack", "empty", "short-seq", "two-frames", "topic", "events-not-list", "bad-field",
        "missing-field"])
def test_malformed_messages_raise_one_clear_line(message, words):
    with pytest.raises(KvEventDecodeError) as caught:
        decode_message(message)
    text = str(caught.value)
    assert words in text and "\n" not in text
    assert isinstance(caught.value, ConfigError)
