"""Recordings for the hostile cases: a small real one, and surgery on its records (a payload
replaced with its checksums right, a JSON head changed, a zlib bomb) that leaves the rest valid."""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path


def small_recording(path: Path) -> Path:
    from kvscope.app.lab.recording import RunRecorder
    from kvscope.app.lab.workload import WorkloadSpec, generate_requests, LengthDist
    from kvscope.engine import Engine
    from kvscope.engine.config import EngineArgs
    from kvscope.app.lab.presets import load_hardware, load_model

    path.parent.mkdir(parents=True, exist_ok=True)
    engine = Engine(load_model("tiny-llama"), load_hardware("h100-80gb"),
                    EngineArgs(kv_cache_memory_bytes=2 * 1024**2, max_num_seqs=8))  # 42 blocks: tiny-llama served in bf16
    spec = WorkloadSpec("small", num_requests=12, arrival_rate_per_s=20.0,
                        prompt_tokens=LengthDist("constant", value=100, max=100),
                        output_tokens=LengthDist("constant", value=20, max=20))
    engine.add_workload(generate_requests(spec, engine.model.vocab_size))
    recorder = RunRecorder(engine, path, {"label": "hostile", "workload": spec}, keyframe_interval=16)
    engine.run(on_step=recorder.record_step)
    recorder.close(engine.summary())
    return path


def records_of(data: bytes) -> list:
    """(offset, type, flags, length) of each record of a recording, from the start."""
    from kvscope.app.lab.recording.format import FILE_HEADER, FRAME

    out, offset = [], FILE_HEADER.size
    while offset + FRAME.size <= len(data):
        marker, record_type, flags, length, _, _ = FRAME.unpack_from(data, offset)
        if marker != b"KR":
            break
        out.append((offset, record_type, flags, length))
        offset += FRAME.size + length
    return out


def reframed(data: bytes, number: int, payload: bytes, compress: bool | None = None) -> bytes:
    """The recording with record `number`'s payload replaced (checksums right) and its index and
    trailer dropped (the offsets after the change moved): the reader scans it as an unclosed file."""
    from kvscope.app.lab.recording.format import FRAME, INDEX, frame_record

    records = records_of(data)
    offset, record_type, flags, length = records[number]
    if compress is None:
        compress = bool(flags & 1)
    new = frame_record(record_type, payload, compress)
    end = next((r[0] for r in records if r[1] == INDEX), len(data))
    return data[:offset] + new + data[offset + FRAME.size + length:end]


def zlib_bomb(size: int) -> bytes:
    """zlib data that inflates to `size` zero bytes (about a thousandth of that compressed)."""
    squeeze = zlib.compressobj(9)
    chunk = bytes(64 * 1024**2)
    parts = [squeeze.compress(chunk) for _ in range(size // len(chunk))]
    return b"".join(parts) + squeeze.flush()


def reframed_raw(data: bytes, number: int, stored: bytes) -> bytes:
    """As reframed, with the payload given as stored (already compressed), the zlib flag kept."""
    from kvscope.app.lab.recording.format import FRAME, FRAME_HEAD, FRAME_MARKER, INDEX

    records = records_of(data)
    offset, record_type, flags, length = records[number]
    head = FRAME_HEAD.pack(FRAME_MARKER, record_type, flags, len(stored), zlib.crc32(stored))
    end = next((r[0] for r in records if r[1] == INDEX), len(data))
    return data[:offset] + head + struct.pack("<I", zlib.crc32(head)) + stored + data[offset + FRAME.size + length:end]


def payload_of(data: bytes, number: int) -> bytes:
    from kvscope.app.lab.recording.format import FRAME

    offset, _, flags, length = records_of(data)[number]
    raw = data[offset + FRAME.size: offset + FRAME.size + length]
    return zlib.decompress(raw) if flags & 1 else raw


def with_head(payload: bytes, change) -> bytes:
    """A payload whose JSON head is changed by change(head) (the arrays kept)."""
    (n,) = struct.unpack_from("<I", payload)
    head = json.loads(payload[4:4 + n])
    change(head)
    text = json.dumps(head).encode()
    return struct.pack("<I", len(text)) + text + payload[4 + n:]
