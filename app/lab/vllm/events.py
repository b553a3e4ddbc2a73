"""Decode vLLM's KV cache events: one ZMQ message `[topic, seq, payload]` into plain dataclasses.

The format (vllm/distributed/kv_events.py) changed under its readers; llm-d broke when it did. So
this decoder is tolerant by design:
- the batch is a positional array `[ts, events, data_parallel_rank]` (the rank from vLLM 0.10.2,
  absent before); a map with those keys is read too;
- an event is an array with its tag first (vLLM 0.9 - 0.23, and SGLang) or a map with a "type"
  key (0.24 on); each event is read by its own first byte, so both may even share a batch;
- fields added by later versions are ignored, fields left out (vLLM omits None) take defaults;
- a hash is a 64-bit int (vLLM's default) or raw bytes; an int some publisher sent signed is
  read as the same unsigned 64-bit value, so parent and child hashes always match;
- an event type this decoder does not know becomes UnknownEvent: counted, never fatal.

A frame that cannot be read raises KvEventDecodeError with a one-line message; the subscriber
counts it and goes on. That includes a payload past MAX_BATCH_BYTES (refused before it is decoded,
so 500 million token ids never become a list), one nested deeper than Python recurses, and fields
no vLLM sends (check_batch): a ts that is no wall-clock time, a block_size or group_idx out of
range, more token ids than the blocks hold, a hash or a name of megabytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union

import msgspec

from kvscope.engine.checks import MAX_BLOCK_SIZE
from kvscope.engine.config import ConfigError

BlockHash = Union[int, bytes]
END_OF_REPLAY_SEQ = -1  # the replay socket's last reply carries this seq and an empty payload
# One engine step's batch is KBs (a step of 64K prefilled tokens, msgpack'd, is under 1 MB; this holds
# 3 million tokens of 5 bytes); decoded, each byte can become a 28-byte int in a tuple, so a payload
# past this is refused before decoding. The subscriber's queue holds RECEIVE_QUEUE_MESSAGES of them.
MAX_BATCH_BYTES = 16 * 1024**2
MAX_TOPIC_BYTES = 4096  # vLLM's topics are a few words ("kv@pod@model"); each log row repeats it
MAX_TYPE_NAME = 200  # an event type's name as kept and said (vLLM's are "BlockStored" and the like)
_U64_MASK = (1 << 64) - 1
# vLLM stamps a batch with time.time(): seconds since 1970, finite. Past this (the year 5138) it is no clock.
MAX_TS = 1e11
# vLLM numbers its KV cache groups from 0, one per kind of layer (full attention, sliding window, mamba):
# a handful. Each group's blocks are keyed apart, so a made-up index is a made-up cache.
MAX_GROUP_IDX = 1023
# vLLM's hashes are 8-byte ints or 32-byte digests (sha256; 4 more bytes with a group id); each block
# the map holds keeps its hash, so one of megabytes, batch after batch, is memory kept.
MAX_HASH_BYTES = 128
MAX_NAME_CHARS = 1024  # a medium ("GPU", "CPU") or a LoRA adapter's name, kept with each stored block


class KvEventDecodeError(ConfigError):
    """A KV event message that cannot be read; the message says which part and why, on one line."""


@dataclass(frozen=True, slots=True)
class BlockStored:
    """Full blocks entered the prefix cache: one hash per block, the chain continuing from parent."""

    block_hashes: tuple[BlockHash, ...]
    parent_block_hash: BlockHash | None
    token_ids: tuple[int, ...]  # the tokens of all the blocks, block after block
    block_size: int  # 0 when the publisher did not send it
    medium: str | None = None  # "GPU", or a tier a KV connector offloads to
    group_idx: int = 0  # the KV cache group (hybrid models hash each group apart)
    lora_name: str | None = None

    def tokens_of(self, index: int) -> tuple[int, ...]:
        """The tokens the index-th stored block holds."""
        per_block = len(self.token_ids) // max(len(self.block_hashes), 1)
        return self.token_ids[index * per_block:(index + 1) * per_block]


@dataclass(frozen=True, slots=True)
class BlockRemoved:
    """Blocks left the prefix cache (evicted to make room); one hash each."""

    block_hashes: tuple[BlockHash, ...]
    medium: str | None = None
    group_idx: int = 0


@dataclass(frozen=True, slots=True)
class AllBlocksCleared:
    """The whole prefix cache was reset."""


@dataclass(frozen=True, slots=True)
class UnknownEvent:
    """An event of a type newer than this decoder; kept so it can be counted and named."""

    type_name: str


KvEvent = Union[BlockStored, BlockRemoved, AllBlocksCleared, UnknownEvent]


@dataclass(frozen=True, slots=True)
class EventBatch:
    """What one engine step published."""

    ts: float  # the server's wall clock, seconds since the epoch
    events: tuple[KvEvent, ...]
    data_parallel_rank: int | None  # None before vLLM 0.10.2


@dataclass(frozen=True, slots=True)
class KvEventMessage:
    topic: str
    seq: int  # from 0 at the publisher's start: a lower one than the last means it restarted
    batch: EventBatch


def block_hash_u64(block_hash: BlockHash) -> int:
    """A hash as the unsigned 64-bit int vLLM publishes by default: bytes give their low 64 bits
    (vLLM's own conversion under VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES), so both modes agree."""
    if isinstance(block_hash, bytes):
        return int.from_bytes(block_hash[-8:], "big")
    return block_hash & _U64_MASK


def decode_seq(frame: bytes) -> int:
    if len(frame) != 8:
        raise KvEventDecodeError(f"KV event seq frame has {len(frame)} bytes, expected 8 (big-endian int)")
    return int.from_bytes(frame, "big", signed=True)


def split_message(frames: list) -> tuple[str, int, bytes | memoryview]:
    """(topic, seq, payload) of a published message (bytes or zmq Frames), the payload left
    undecoded. A payload too large to decode is not copied: decode_batch refuses it by its length."""
    if len(frames) != 3:
        raise KvEventDecodeError(f"KV event message has {len(frames)} frames, expected 3 (topic, seq, payload)")
    topic, seq, payload = frames
    if len(topic) > MAX_TOPIC_BYTES:
        raise KvEventDecodeError(f"KV event topic of {len(topic):,} bytes, more than the {MAX_TOPIC_BYTES:,} "
                                 "kvscope reads")
    try:
        topic_text = bytes(topic).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise KvEventDecodeError(f"KV event topic is not UTF-8: {exc}") from None
    payload = bytes(payload) if len(payload) <= MAX_BATCH_BYTES else memoryview(payload)
    return topic_text, decode_seq(bytes(seq) if len(seq) == 8 else seq), payload


def decode_message(frames: list[bytes]) -> KvEventMessage:
    topic, seq, payload = split_message(frames)
    return KvEventMessage(topic, seq, decode_batch(payload))


def decode_batch(payload: bytes | memoryview, recorded: bool = False) -> EventBatch:
    """recorded: a batch kvscope wrote to a recording, where a block_size of 0 stands for one the
    publisher left out (kvscope before 2026-11 wrote it so)."""
    if not payload:
        raise KvEventDecodeError("KV event payload is empty")
    if len(payload) > MAX_BATCH_BYTES:
        raise KvEventDecodeError(f"KV event batch of {len(payload):,} bytes, more than the {MAX_BATCH_BYTES:,} "
                                 "kvscope decodes (one engine step's batch is KBs)")
    decoder = _MAP_BATCH if _is_map(payload[0]) else _ARRAY_BATCH
    try:
        raw = decoder.decode(payload)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:  # msgspec raises the second for a str not UTF-8
        raise KvEventDecodeError(f"KV event batch: {_one_line(exc)}") from None
    except RecursionError:
        raise KvEventDecodeError(_TOO_DEEP.format("batch")) from None
    ts = float(raw.ts)
    if not 0.0 <= ts <= MAX_TS:  # NaN fails it too
        raise KvEventDecodeError(f"KV event batch: ts {ts!r} is not a server's clock (vLLM sends time.time(), "
                                 "seconds since 1970)")
    events = tuple(_checked(index, _decode_event(index, event, recorded)) for index, event in enumerate(raw.events))
    return EventBatch(ts, events, raw.data_parallel_rank)


def _checked(index: int, event: KvEvent) -> KvEvent:
    """The event, or a KvEventDecodeError naming the first field no vLLM server could have sent."""
    if isinstance(event, (UnknownEvent, AllBlocksCleared)):
        return event
    name = type(event).__name__
    if not 0 <= event.group_idx <= MAX_GROUP_IDX:
        raise KvEventDecodeError(f"KV event {index} ({name}): group_idx {event.group_idx} is not a KV cache "
                                 f"group (vLLM numbers them from 0, at most {MAX_GROUP_IDX})")
    parent = (event.parent_block_hash,) if isinstance(event, BlockStored) else ()
    for field, hashes in (("block_hashes", event.block_hashes), ("parent_block_hash", parent)):
        wrong = next((h for h in hashes if isinstance(h, bytes) and not 0 < len(h) <= MAX_HASH_BYTES), None)
        if wrong is not None:
            raise KvEventDecodeError(f"KV event {index} ({name}): a hash in {field} of {len(wrong):,} bytes "
                                     f"(vLLM's are 8 or 32; kvscope reads up to {MAX_HASH_BYTES})")
    for field in ("medium", "lora_name"):
        text = getattr(event, field, None)
        if text is not None and len(text) > MAX_NAME_CHARS:
            raise KvEventDecodeError(f"KV event {index} ({name}): {field} of {len(text):,} characters, more than "
                                     f"the {MAX_NAME_CHARS:,} kvscope keeps")
    if isinstance(event, BlockStored):
        size = event.block_size or MAX_BLOCK_SIZE  # 0: not sent, so at most the largest block
        room = len(event.block_hashes) * size
        if len(event.token_ids) > room:
            raise KvEventDecodeError(f"KV event {index} (BlockStored): {len(event.token_ids):,} token_ids for "
                                     f"{len(event.block_hashes):,} block(s) of at most {size:,} tokens "
                                     f"({room:,} in all)")
    return event


# -- the wire shapes, read by msgspec -----------------------------------------------------------------
# Map events carry only the fields by name; array events are positional, so every field up to the
# last one read is declared, in vLLM's order. msgspec skips unknown map keys and trailing array items.

_Hash = Union[int, bytes]


class _StoredMap(msgspec.Struct, tag_field="type", tag="BlockStored"):
    block_hashes: list[_Hash]
    parent_block_hash: Union[_Hash, None] = None
    token_ids: list[int] = []
    block_size: Union[int, None] = None
    medium: Union[str, None] = None
    group_idx: Union[int, None] = None
    lora_name: Union[str, None] = None


class _RemovedMap(msgspec.Struct, tag_field="type", tag="BlockRemoved"):
    block_hashes: list[_Hash]
    medium: Union[str, None] = None
    group_idx: Union[int, None] = None


class _ClearedMap(msgspec.Struct, tag_field="type", tag="AllBlocksCleared"):
    pass


class _StoredArray(msgspec.Struct, array_like=True, tag="BlockStored"):
    block_hashes: list[_Hash]
    parent_block_hash: Union[_Hash, None]
    token_ids: list[int]
    block_size: int
    lora_id: Union[int, None] = None
    medium: Union[str, None] = None  # from 0.10.2
    lora_name: Union[str, None] = None
    extra_keys: Any = None
    group_idx: Union[int, None] = None


class _RemovedArray(msgspec.Struct, array_like=True, tag="BlockRemoved"):
    block_hashes: list[_Hash]
    medium: Union[str, None] = None
    group_idx: Union[int, None] = None


class _ClearedArray(msgspec.Struct, array_like=True, tag="AllBlocksCleared"):
    pass


class _BatchArray(msgspec.Struct, array_like=True):
    ts: float
    events: list[msgspec.Raw]
    data_parallel_rank: Union[int, None] = None


class _BatchMap(msgspec.Struct):
    ts: float
    events: list[msgspec.Raw]
    data_parallel_rank: Union[int, None] = None


_ARRAY_BATCH = msgspec.msgpack.Decoder(_BatchArray)
_MAP_BATCH = msgspec.msgpack.Decoder(_BatchMap)
_MAP_EVENT = msgspec.msgpack.Decoder(Union[_StoredMap, _RemovedMap, _ClearedMap])
_ARRAY_EVENT = msgspec.msgpack.Decoder(Union[_StoredArray, _RemovedArray, _ClearedArray])
_ANY = msgspec.msgpack.Decoder()
_KNOWN_TYPES = {"BlockStored", "BlockRemoved", "AllBlocksCleared"}
_TOO_DEEP = "the {} is nested deeper than Python can read (vLLM's nest 4 deep)"


def _is_map(first_byte: int) -> bool:
    return 0x80 <= first_byte <= 0x8F or first_byte in (0xDE, 0xDF)


def _decode_event(index: int, raw: msgspec.Raw, recorded: bool = False) -> KvEvent:
    data = bytes(raw)
    as_map = bool(data) and _is_map(data[0])
    try:
        wire = (_MAP_EVENT if as_map else _ARRAY_EVENT).decode(data)
    except RecursionError:
        raise KvEventDecodeError(f"KV event {index}: " + _TOO_DEEP.format("event")) from None
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:  # a medium or lora_name of bytes not UTF-8
        type_name = _type_name(data, as_map)
        if isinstance(type_name, str) and type_name not in _KNOWN_TYPES:
            # kept short: each is repeated in a log row (2,000 kept), and 50 MB of name made 100 GB of rows
            return UnknownEvent(type_name if len(type_name) <= MAX_TYPE_NAME else type_name[:MAX_TYPE_NAME] + "...")
        # a tag that is no name (a list of 8,000,000 ints) is not quoted: the message is a recorded notice
        said = type_name if isinstance(type_name, str) else "no type" if type_name is None else \
            f"a {type(type_name).__name__} where the type belongs"
        raise KvEventDecodeError(f"KV event {index} ({said}): {_one_line(exc)[:MAX_TYPE_NAME]}") from None
    if isinstance(wire, (_StoredMap, _StoredArray)):
        block_size = wire.block_size
        if block_size is not None and not 1 <= block_size <= MAX_BLOCK_SIZE and not (recorded and block_size == 0):
            raise KvEventDecodeError(f"KV event {index} (BlockStored): block_size {block_size} is not a block's "
                                     f"size (tokens per block, from 1 to {MAX_BLOCK_SIZE:,})")
        return BlockStored(
            block_hashes=tuple(_normal_hash(h) for h in wire.block_hashes),
            parent_block_hash=None if wire.parent_block_hash is None else _normal_hash(wire.parent_block_hash),
            token_ids=tuple(wire.token_ids),
            block_size=block_size or 0,  # 0: not sent
            medium=wire.medium,
            group_idx=wire.group_idx or 0,
            lora_name=wire.lora_name,
        )
    if isinstance(wire, (_RemovedMap, _RemovedArray)):
        return BlockRemoved(tuple(_normal_hash(h) for h in wire.block_hashes), wire.medium, wire.group_idx or 0)
    return AllBlocksCleared()


def _type_name(data: bytes, as_map: bool):
    try:
        value = _ANY.decode(data)
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):
        return None
    if as_map and isinstance(value, dict):
        return value.get("type")
    if isinstance(value, list) and value:
        return value[0]
    return None


def _normal_hash(block_hash: BlockHash) -> BlockHash:
    return block_hash & _U64_MASK if isinstance(block_hash, int) else block_hash


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())
