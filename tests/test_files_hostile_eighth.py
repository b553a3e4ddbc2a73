"""The eighth hostile pass over the files and servers kvscope reads (scripts/hostile_inputs_eighth_files.py):
KV event batches whose fields no vLLM sends (applied as they were), the subscriber's queue (bounded
only in theory), the scan of an unclosed recording (each record inflated twice), and the trained
model's GGUF file and converted cache when damaged."""

from __future__ import annotations

import json
import math
import struct
import time

import msgspec
import pytest
import zmq
from test_files_hostile_fourth import _records
from test_vllm_subscriber import WAIT_S, connected

from kvscope.app.lab import trained_model
from kvscope.app.lab.recording import Recording
from kvscope.app.lab.recording import records as records_module
from kvscope.app.lab.recording.format import FLAG_ZLIB, INDEX
from kvscope.app.lab.vllm import subscriber as subscriber_module
from kvscope.app.lab.vllm.events import KvEventDecodeError, decode_batch
from kvscope.app.lab.vllm.endpoints import PublisherEndpoint
from kvscope.app.lab.vllm.subscriber import KvEventSubscriber
from kvscope.engine.config import ConfigError

encode = msgspec.msgpack.encode


def stored(**fields) -> dict:
    return {"type": "BlockStored", "block_hashes": [1, 2], "parent_block_hash": None, "token_ids": list(range(32)),
            "block_size": 16, **fields}


# -- KV event fields no vLLM sends ----------------------------------------------------------------------


@pytest.mark.parametrize("batch, named", [
    ([math.nan, [stored()]], "ts nan"), ([math.inf, [stored()]], "ts inf"), ([-math.inf, [stored()]], "ts -inf"),
    ([1e308, [stored()]], "ts 1e+308"), ([-1.0, [stored()]], "ts -1.0"),
    ([1.0, [stored(block_size=0)]], "block_size 0"), ([1.0, [stored(block_size=-16)]], "block_size -16"),
    ([1.0, [stored(block_size=2**64 - 1)]], f"block_size {2**64 - 1}"),
    ([1.0, [["BlockStored", [1], None, [], 0]]], "block_size 0"),  # vLLM's older array encoding
    ([1.0, [stored(group_idx=-1)]], "group_idx -1"), ([1.0, [stored(group_idx=2**63)]], f"group_idx {2**63}"),
    ([1.0, [{"type": "BlockRemoved", "block_hashes": [1], "group_idx": -7}]], "group_idx -7"),
    ([1.0, [stored(token_ids=[1] * 33)]], "33 token_ids for 2 block(s)"),
    ([1.0, [stored(parent_block_hash=b"p" * 4096)]], "parent_block_hash of 4,096 bytes"),
    ([1.0, [stored(block_hashes=[b"h" * 200])]], "block_hashes of 200 bytes"),
    ([1.0, [stored(lora_name="a" * 5000)]], "lora_name of 5,000 characters"),
    ([1.0, [stored(medium="m" * 5000)]], "medium of 5,000 characters"),
])
def test_a_batch_field_no_vllm_sends_is_a_decode_error_naming_it(batch, named):
    """Each was applied as it came: a NaN ts made every cell's age NaN, a block_size of 2**64-1 was the
    map's block size, a group_idx of -1 a cache of its own, a hash of megabytes kept with its block."""
    with pytest.raises(KvEventDecodeError, match=None) as caught:
        decode_batch(encode(batch))
    assert named in str(caught.value) and "\n" not in str(caught.value)


def test_what_vllm_sends_still_decodes():
    fixtures = json.loads((WAIT_FIXTURES / "fixture_v0.33.0.json").read_text())
    for frame in fixtures[:2]:
        decode_batch(bytes.fromhex(frame["payload_hex"]))
    for line in (WAIT_FIXTURES / "live_events_run1.jsonl").read_text().splitlines():
        decode_batch(encode(json.loads(line)["batch"]))
    batch = decode_batch(encode([0.0, [stored(lora_id=-5, block_hashes=[b"d" * 32], parent_block_hash=b"e" * 32,
                                                token_ids=list(range(16)))]]))
    assert batch.ts == 0.0  # a server whose clock says 1970 is still a clock
    assert decode_batch(encode([1.0, [{"type": "BlockStored", "block_hashes": [1]}]])).events[0].block_size == 0


def test_a_recorded_batch_of_unknown_block_size_reads_back():
    """kvscope wrote an absent block_size as 0; a recording holding one still opens."""
    from kvscope.app.lab.recording.attached_writer import encode_batch

    batch = decode_batch(encode([1.0, [{"type": "BlockStored", "block_hashes": [1]}]]))
    assert decode_batch(encode_batch(batch)) == batch
    old = encode({"ts": 1.0, "events": [{"type": "BlockStored", "block_hashes": [1], "block_size": 0}]})
    assert decode_batch(old, recorded=True).events[0].block_size == 0


def test_a_nan_ts_batch_is_skipped_counted_and_the_stream_goes_on(publisher):
    pub = publisher()
    with KvEventSubscriber([PublisherEndpoint(pub.endpoint)], catch_up=False) as sub:
        connected(pub)
        pub.publish(0, encode([1.0, [stored()]]))
        pub.publish(1, encode([math.nan, [stored(block_hashes=[3, 4])]]))
        pub.publish(2, encode([2.0, [stored(block_hashes=[5, 6])]]))
        records, ends = [], time.monotonic() + WAIT_S
        while sub.counts.batches + sub.counts.decode_errors < 3 and time.monotonic() < ends:
            records += sub.poll(20)
    assert (sub.counts.batches, sub.counts.decode_errors, sub.counts.gaps) == (2, 1, 0)
    errors = [r.message for r in records if getattr(r, "kind", None) is not None and r.kind.value == "decode_error"]
    assert "seq 1" in errors[0] and "ts nan" in errors[0]


# -- the subscriber's queue ------------------------------------------------------------------------------


def test_the_receive_queue_is_bounded_to_a_few_gigabytes(publisher):
    """10,000 messages of up to 512 MB each: 5 TB in theory. The replay socket's queue had ZMQ's default."""
    pub = publisher()
    with KvEventSubscriber([PublisherEndpoint(pub.endpoint)]) as sub:
        for socket in sub._sockets:
            held = socket.getsockopt(zmq.RCVHWM) * socket.getsockopt(zmq.MAXMSGSIZE)
            assert held <= 4 * 1024**3 + 64 * 1024 * 256
            assert socket.getsockopt(zmq.MAXMSGSIZE) > subscriber_module.MAX_BATCH_BYTES  # a little past is said
    assert subscriber_module.RECEIVE_QUEUE_BYTES <= 4 * 1024**3 + 64 * 1024 * 256


# -- an unclosed recording, opened ------------------------------------------------------------------------


def test_an_unclosed_recording_inflates_each_record_once(tmp_path, recording_bytes, monkeypatch):
    """The scan inflated every record for its head, then verify inflated each again."""
    cut = next(offset for offset, kind, _, _ in _records(recording_bytes) if kind == INDEX)
    path = tmp_path / "killed.kvrec"
    path.write_bytes(recording_bytes[:cut])
    compressed = sum(1 for _, _, flags, _ in _records(recording_bytes[:cut]) if flags & FLAG_ZLIB)
    inflated, inflate = [], records_module.inflate
    monkeypatch.setattr(records_module, "inflate", lambda data, *a: inflated.append(1) or inflate(data, *a))
    with Recording.open(path, allow_truncated=True) as recording:
        assert recording.warning and recording.num_steps > 0
    assert len(inflated) <= compressed + 1  # the header's is read twice: alone, to choose the reader, then verified


def test_an_unclosed_recording_cut_at_every_record_boundary_opens_or_says_why(tmp_path, recording_bytes):
    from kvscope.app.lab.recording.format import RecordingError

    bounds = [offset for offset, _, _, _ in _records(recording_bytes)]
    for cut in bounds[1:] + [bounds[-1] + 7]:
        path = tmp_path / f"cut{cut}.kvrec"
        path.write_bytes(recording_bytes[:cut])
        try:
            with Recording.open(path, allow_truncated=True) as recording:
                assert recording.warning
        except RecordingError as exc:
            assert path.name in str(exc) and "\n" not in str(exc)


# -- the trained model's GGUF file and its converted cache ----------------------------------------------


def _gguf(version=3, tensors=None, offset=0, magic=b"GGUF", cut=None) -> bytes:
    """A GGUF file of one 32-element F32 tensor ("w") and one metadata string."""
    key, value = b"general.name", b"tiny"
    out = magic + struct.pack("<IQQ", version, 1 if tensors is None else tensors, 1)
    out += struct.pack("<Q", len(key)) + key + struct.pack("<I", 8) + struct.pack("<Q", len(value)) + value
    out += struct.pack("<Q", 1) + b"w" + struct.pack("<IQIQ", 1, 32, 0, offset)
    out += bytes(-len(out) % 32) + bytes(4 * 32)
    return out[:cut] if cut is not None else out


@pytest.mark.parametrize("data, said", [
    (_gguf(magic=b"GGML"), "magic"), (_gguf(version=1), "version 1"), (_gguf(version=99), "version 99"),
    (_gguf(tensors=2**60), "tensor count"), (_gguf(offset=2**40), "past the end"), (_gguf(cut=30), "truncated"), (_gguf(cut=50), "truncated"),
    (_gguf(cut=-8), "past the end"), (b"", "empty"),
])
def test_a_damaged_gguf_is_one_message_naming_the_file_and_the_reinstall(tmp_path, data, said):
    path = tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf"
    path.write_bytes(data)
    with pytest.raises(ConfigError) as caught:
        trained_model.check_gguf(path)
    message = str(caught.value)
    assert str(path) in message and said in message and "--force-reinstall" in message and "\n" not in message


def test_a_whole_gguf_passes_and_a_damaged_one_stops_the_conversion(tmp_path, monkeypatch):
    good, bad = tmp_path / "good.gguf", tmp_path / "bad.gguf"
    good.write_bytes(_gguf())
    bad.write_bytes(_gguf(offset=2**40))
    trained_model.check_gguf(good)
    monkeypatch.setattr(trained_model, "find_gguf", lambda: bad)
    monkeypatch.setattr(trained_model, "_quiet_gguf_progress_bar", lambda: pytest.fail("the damaged file was read on"))
    with pytest.raises(ConfigError, match="bad.gguf is damaged"):
        trained_model.ensure_trained_model(root=tmp_path / "models")
    assert not list((tmp_path / "models").glob(".converting-*"))


def _converted(folder, weights: bytes | None = None):
    folder.mkdir(parents=True)
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (folder / name).write_text("{}")
    header = json.dumps({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode()
    (folder / "model.safetensors").write_bytes(weights if weights is not None else
                                               struct.pack("<Q", len(header)) + header + bytes(16))


def test_a_damaged_conversion_in_the_cache_is_converted_again(tmp_path, monkeypatch):
    """is_converted() looked only for the files: a model.safetensors cut short by a full disk was loaded
    (and failed there) at every start, never converted again."""
    models = tmp_path / "models"
    whole = models / "whole"
    _converted(whole)
    assert trained_model.is_converted(whole)
    target = trained_model.trained_model_dir(models)
    _converted(target)
    with open(target / "model.safetensors", "r+b") as handle:
        handle.truncate(40)
    assert not trained_model.is_converted(target)
    assert "model.safetensors" in trained_model.cache_damage(target)
    (whole / "config.json").write_text("[1, 2")
    assert "config.json" in trained_model.cache_damage(whole)
    good = tmp_path / "good.gguf"
    good.write_bytes(_gguf())
    monkeypatch.setattr(trained_model, "find_gguf", lambda: good)

    def convert(gguf, report):
        raise ValueError("the tiny file converts to nothing")  # stands for transformers, which this test does not load

    monkeypatch.setattr(trained_model, "_dequantise", convert)
    messages = []
    with pytest.raises(ConfigError, match="good.gguf is damaged: it cannot be read"):
        trained_model.ensure_trained_model(messages.append, root=models)
    assert any("is damaged (model.safetensors" in m and "converting it again" in m for m in messages)


WAIT_FIXTURES = __import__("pathlib").Path(__file__).resolve().parent / "fixtures" / "vllm"
