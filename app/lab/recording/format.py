"""The .kvrec format's shared vocabulary: constants, record framing, payload encoding, the error.

docs/recording-format.md is the specification; writer.py and reader.py are its two halves.

    file    = signature (10 bytes), u16 major, u16 minor, record..., [trailer]
    record  = frame (20 bytes: b"KR", type, flags, payload length, payload CRC32, frame CRC32)
              + payload
    payload = u32 head length, a JSON head, then the 1-D arrays the head names (raw little-endian)
"""

from __future__ import annotations

import json
import re
import struct
import zlib

import numpy as np

from kvscope.app.lab.bounded_reads import MAX_JSON_DEPTH, nesting_depth
from kvscope.engine.config import ConfigError

FORMAT_MAJOR = 1
FORMAT_MINOR = 1  # 1.1: a recording of an attached vLLM server (header "source"; ATTACH_START, ATTACH_TICKS)
SIGNATURE = b"\x89KVREC\r\n\x1a\n"  # PNG-style: a text-mode transfer or a 7-bit channel breaks it visibly
FILE_HEADER = struct.Struct("<10sHH")
FRAME_HEAD = struct.Struct("<2sBBQI")  # marker, type, flags, payload length, payload CRC32
FRAME = struct.Struct("<2sBBQII")  # ... + CRC32 of the 16 bytes before it
FRAME_MARKER = b"KR"
TRAILER = struct.Struct("<Q8sI")  # byte offset of the INDEX record, tag, CRC32 of the 16 bytes before it
TRAILER_TAG = b"KVRINDEX"
FLAG_ZLIB = 1

HEADER, KEYFRAME, STEPS, DELTAS, INDEX = 1, 2, 3, 4, 5
ATTACH_START, ATTACH_TICKS = 6, 7  # an attached server: its prefix-cache map at the start, then what arrived
RECORD_NAMES = {HEADER: "header", KEYFRAME: "keyframe", STEPS: "steps", DELTAS: "deltas", INDEX: "index",
                ATTACH_START: "attach start", ATTACH_TICKS: "attach ticks"}
SOURCE_ENGINE, SOURCE_ATTACH = "engine", "vllm-attach"  # the header's "source": what was recorded

COMPRESS_LEVEL = 1  # zlib: higher levels cost several times the time for a few percent of size
# The most one record may hold once inflated: a keyframe of the largest pool the engine builds
# (engine/checks.py MAX_NUM_BLOCKS blocks of 23 bytes) is about 100 MB, a chunk of steps less. A
# record claiming more is refused before it is inflated further: a zlib bomb costs no memory.
MAX_RECORD_BYTES = 512 * 1024**2
# ... and stored: zlib's worst case for that much incompressible data (its compressBound). A frame
# claiming more is refused before it is read: the claim costs a hostile file nothing (a sparse file).
MAX_STORED_BYTES = MAX_RECORD_BYTES + (MAX_RECORD_BYTES >> 12) + (MAX_RECORD_BYTES >> 14) + 64

BLOCK_FIELDS = ("owner", "state", "ref_cnt", "fill", "hash")
BLOCK_DTYPES = {"owner": np.int64, "state": np.uint8, "ref_cnt": np.int32, "fill": np.uint16, "hash": np.uint64}
STEP_COLUMNS = (  # StepResult's scalar fields, in the order the recorder stores them
    ("step", np.int64), ("start_time_s", np.float64), ("duration_s", np.float64), ("num_running", np.int64),
    ("num_waiting", np.int64), ("kv_usage", np.float64), ("num_tokens", np.int64), ("num_prefill_tokens", np.int64),
    ("compute_time_s", np.float64), ("memory_time_s", np.float64), ("unused_slots", np.int64),
    ("num_preemptions", np.int64), ("num_output_tokens", np.int64),
)
SNAPSHOT_COLUMNS = (("time_s", np.float64), ("step", np.int64), ("kv_usage", np.float64),
                    ("num_running", np.int64), ("num_waiting", np.int64))
EVENT_COLUMNS = (("kind", np.int64), ("request_id", np.int64), ("time_s", np.float64), ("value", np.float64),
                 ("num_blocks", np.int64))
FINISHED_COLUMNS = (("step", np.int64), ("request_id", np.int64), ("finish_time_s", np.float64),
                    ("ttft_s", np.float64), ("queue_time_s", np.float64))


class RecordingError(ConfigError):
    """A recording that cannot be written or read; the message names the file and what is wrong."""


# -- payloads: a JSON head and named 1-D arrays ------------------------------------------------------


NARROW_MIN_SIZE = 64  # below this, finding the range costs more than the bytes it saves


def _narrowed(values: np.ndarray) -> np.ndarray:
    """The smallest integer dtype that holds every value (request ids fit in int32, ref counts in uint8)."""
    if values.dtype.kind not in "iu" or values.size < NARROW_MIN_SIZE or values.dtype.itemsize == 1:
        return values
    low, high = int(values.min()), int(values.max())
    for candidate in (np.uint8, np.int8, np.uint16, np.int16, np.uint32, np.int32):
        info = np.iinfo(candidate)
        if np.dtype(candidate).itemsize < values.dtype.itemsize and info.min <= low and high <= info.max:
            return values.astype(candidate)
    return values


def encode_payload(head: dict, arrays: dict, delta=()) -> bytes:
    """The JSON head (with an "arrays" map added) and the arrays' bytes. Arrays named in delta are
    stored as differences from their predecessor (integers only: exact, and runs compress)."""
    specs, parts, offset = {}, [], 0
    for name, values in arrays.items():
        values = np.ascontiguousarray(values)
        if values.ndim != 1 or values.dtype.kind not in "biuf":
            raise ValueError(f"array {name}: a recording holds 1-D numeric arrays, got {values.dtype} {values.shape}")
        spec = {}
        stored = values
        if name in delta and values.dtype.kind in "iu" and values.size:
            stored = np.diff(values.astype(np.int64), prepend=np.int64(0))
            spec["delta"] = True
        stored = _narrowed(stored)
        stored = stored.astype(stored.dtype.newbyteorder("<"), copy=False)
        spec.update(dtype=stored.dtype.str, count=int(stored.size), offset=offset)
        if stored.dtype != values.dtype:
            spec["as"] = values.dtype.newbyteorder("<").str  # the dtype the reader restores
        specs[name] = spec
        raw = stored.tobytes()
        parts.append(raw)
        pad = -len(raw) % 8
        if pad:
            parts.append(bytes(pad))
        offset += len(raw) + pad
    text = json.dumps({**head, "arrays": specs}, separators=(",", ":"), default=str).encode("utf-8")
    return struct.pack("<I", len(text)) + text + b"".join(parts)


def inflate(data: bytes, where: str, limit: int | None = None) -> bytes:
    """zlib data inflated, at most `limit` (MAX_RECORD_BYTES) bytes of it: more is a
    RecordingError, found having inflated no more than the limit."""
    limit = MAX_RECORD_BYTES if limit is None else limit
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(data, limit)
    except zlib.error as exc:
        raise RecordingError(f"{where} cannot be decompressed ({exc}): the file is corrupt") from None
    if inflater.unconsumed_tail:
        raise RecordingError(f"{where} inflates to more than {limit:,} bytes, more than any record kvscope writes: "
                             "the file is corrupt or hostile")
    if not inflater.eof:
        raise RecordingError(f"{where} cannot be decompressed (its zlib stream is cut short): the file is corrupt")
    return out


def decode_payload(payload: bytes, where: str, head_only: bool = False, max_count: int | None = None,
                   max_counts: dict | None = None) -> tuple[dict, dict]:
    """(head, arrays); arrays come back in the dtypes the writer had (views of the payload when
    stored as they were). head_only: the arrays are not decoded ({}). Every array is checked before
    any is made: each holds at most max_count entries (those named in max_counts, {name: (most,
    why)}, at most their own), and all of them restored at most
    MAX_RECORD_BYTES, as much as a record may hold. The head alone can claim more: 500 MB of zeros
    inflate from 500 KB, and restored as float64 (or summed as deltas to int64) they are 4 GB."""
    try:
        (head_len,) = struct.unpack_from("<I", payload, 0)
        if 4 + head_len > len(payload):
            raise ValueError(f"its head of {head_len:,} bytes runs past the end of the record")
        head = json.loads(payload[4:4 + head_len].decode("utf-8"))
        if not isinstance(head, dict) or nesting_depth(head) > MAX_JSON_DEPTH:
            raise ValueError("its head is not a JSON object of fields")
        base = 4 + head_len
        specs = head.get("arrays", {})
        if not isinstance(specs, dict):
            raise ValueError("its arrays are not a table")
        if head_only:
            return head, {}
        plan, restored_bytes = [], 0
        for name, spec in specs.items():
            dtype = _array_dtype(spec["dtype"], name)
            count, offset = int(spec["count"]), int(spec["offset"])
            if count < 0 or offset < 0 or base + offset + count * dtype.itemsize > len(payload):
                raise ValueError(f"array {name} runs past the end of the record")
            if max_count is not None and count > max_count:
                raise ValueError(f"array {name} has {count:,} entries, more than the {max_count:,} it can have")
            most, why = (max_counts or {}).get(name, (None, ""))
            if most is not None and count > most:
                raise ValueError(f"{name} declares {count:,} entries, more than {why}")
            restored = _array_dtype(spec["as"], name) if "as" in spec else None
            delta = bool(spec.get("delta"))
            # a view costs nothing now, but the views of one payload may overlap, and a concatenation copies them
            widest = max(dtype.itemsize, 8 if delta else 0, restored.itemsize if restored is not None else 0)
            restored_bytes += count * widest
            if restored_bytes > MAX_RECORD_BYTES:
                raise ValueError(f"its arrays restore to more than {MAX_RECORD_BYTES:,} bytes, more than any record "
                                 "kvscope writes")
            plan.append((name, dtype, count, offset, delta, restored))
        arrays = {}
        for name, dtype, count, offset, delta, restored in plan:
            values = np.frombuffer(payload, dtype=dtype, count=count, offset=base + offset)
            if delta:
                values = np.cumsum(values, dtype=np.int64)
            if restored is not None:
                values = values.astype(restored)
            arrays[name] = values
    except RecursionError:
        raise RecordingError(f"{where} is malformed (its head is nested too deep): the file is corrupt") from None
    except (struct.error, UnicodeDecodeError, ValueError, TypeError, KeyError, IndexError, AttributeError,
            OverflowError) as exc:
        raise RecordingError(f"{where} is malformed ({str(exc)[:200]}): the file is corrupt") from None
    return head, arrays


def _array_dtype(text, name: str) -> np.dtype:
    """An array's dtype as the writer spells it ("<i4", "|u1", "<f8", "|b1"). Anything that is not a
    one-letter kind and a size is refused before numpy parses it: np.dtype("i4,") raises SyntaxError
    from inside ast, "(1000000000)i4" is 4 GB a row, and a table or a list makes a structured dtype."""
    if not isinstance(text, str) or not _DTYPE_TEXT.fullmatch(text):
        raise ValueError(f"array {str(name)[:40]!r} has dtype {str(text)[:40]!r}, not a number's")
    try:
        dtype = np.dtype(text)
    except TypeError:  # "<i9": no such type
        raise ValueError(f"array {str(name)[:40]!r} has dtype {text!r}, not a number's") from None
    if dtype.kind not in "biuf":
        raise ValueError(f"array {name} has dtype {dtype}")
    return dtype


_DTYPE_TEXT = re.compile(r"[<>|=]?[A-Za-z][0-9]{0,2}")


def frame_record(record_type: int, payload: bytes, compress: bool) -> bytes:
    """A record as it lies in the file: its 20-byte frame, then the payload (zlib'd if compress)."""
    flags = 0
    if compress:
        payload = zlib.compress(payload, COMPRESS_LEVEL)
        flags |= FLAG_ZLIB
    head = FRAME_HEAD.pack(FRAME_MARKER, record_type, flags, len(payload), zlib.crc32(payload))
    return head + struct.pack("<I", zlib.crc32(head)) + payload
