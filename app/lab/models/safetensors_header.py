"""A safetensors file's header checked before transformers reads it (the format:
https://github.com/huggingface/safetensors, "Format": an 8-byte little-endian header length, a
JSON object of tensors, then their bytes, each tensor's data_offsets counted from the end of the header).

The safetensors library refuses a damaged header in its own words ("invalid shape, data type, or
offset for tensor", no tensor named, nor the file); here the first thing wrong is said with the
shard, the tensor and the field a user would look for, before anything is loaded.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from kvscope.app.lab.bounded_reads import load_json
from kvscope.engine.checks import ConfigError, shown

MAX_SAFETENSORS_HEADER = 100 * 1024**2  # the safetensors library's own limit
# bits per element of each dtype the format names (F4 and the F6 pair pack below a byte)
DTYPE_BITS = {"BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "F8_E4M3FNUZ": 8,
              "F8_E5M2FNUZ": 8, "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32,
              "I64": 64, "U64": 64, "F64": 64, "C64": 64, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6}
NAMES_SHOWN = 80


def safetensors_header(weights: Path, label: str) -> dict:
    """The tensors a safetensors file's header lists (name -> its entry, __metadata__ left out), each
    checked: a known dtype, a shape of whole numbers, data_offsets whose span is the shape's bytes,
    the spans end to end from 0 to the end of the file. A ConfigError starting with `label` otherwise."""
    try:
        with open(weights, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size < 8:
                raise ConfigError(f"{label}: {size} bytes, shorter than the 8-byte header length a safetensors "
                                  "file starts with (it is empty or cut short)")
            length = int.from_bytes(handle.read(8), "little")
            room = min(size - 8, MAX_SAFETENSORS_HEADER)
            if length > room:
                limit = "the rest of the file" if length > size - 8 else "the header limit"
                raise ConfigError(f"{label}: its header length says {length:,} bytes, more than {limit} "
                                  f"({room:,}): it is cut short or not a safetensors file")
            header = load_json(handle.read(length), f"{label}: header", unique_keys=True)
    except OSError as exc:
        raise ConfigError(f"{label}: cannot be read ({exc.strerror or exc})") from None
    if not isinstance(header, dict):
        raise ConfigError(f"{label}: its header must be a JSON object of tensors, got {shown(header)}")
    metadata = header.pop("__metadata__", None)
    if metadata is not None and not (isinstance(metadata, dict)
                                     and all(isinstance(v, str) for v in metadata.values())):
        raise ConfigError(f"{label}: __metadata__ must be an object of text values, got {shown(metadata)}")
    spans = sorted((_span(name, entry, label), name) for name, entry in header.items())
    end = 0
    for (begin, stop), name in spans:
        if begin != end:
            words = "overlaps the tensor before it" if begin < end else f"leaves bytes {end:,} to {begin:,} unused"
            raise ConfigError(f"{label}: tensor {name[:NAMES_SHOWN]!r}: data_offsets [{begin:,}, {stop:,}] {words}; "
                              "a safetensors file's tensors lie end to end")
        end = stop
    if 8 + length + end != size:
        said = "is cut short" if 8 + length + end > size else "has bytes after its last tensor"
        raise ConfigError(f"{label}: its header lists tensors up to byte {8 + length + end:,}, but the file holds "
                          f"{size:,}: it {said}")
    return header


def _span(name: str, entry, label: str) -> tuple[int, int]:
    what = f"{label}: tensor {name[:NAMES_SHOWN]!r}"
    if not isinstance(entry, dict):
        raise ConfigError(f"{what} must be an object with dtype, shape and data_offsets, got {shown(entry)}")
    missing = [k for k in ("dtype", "shape", "data_offsets") if k not in entry]
    if missing:
        raise ConfigError(f"{what}: missing {', '.join(missing)}")
    dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if dtype not in DTYPE_BITS:
        raise ConfigError(f"{what}: dtype {shown(dtype)} is not one safetensors has ({', '.join(DTYPE_BITS)})")
    if not isinstance(shape, list) or not all(_whole(n) for n in shape):
        raise ConfigError(f"{what}: shape must be a list of whole numbers 0 or more, got {shown(shape)}")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_whole(n) for n in offsets)):
        raise ConfigError(f"{what}: data_offsets must be [begin, end] in bytes, got {shown(offsets)}")
    begin, stop = offsets
    if stop < begin:
        raise ConfigError(f"{what}: data_offsets [{shown(begin)}, {shown(stop)}] end before they begin")
    bits = math.prod(shape) * DTYPE_BITS[dtype]
    if bits % 8 or bits // 8 != stop - begin:
        size = f"{shown(bits // 8)} bytes" if bits % 8 == 0 else "not a whole number of bytes"
        raise ConfigError(f"{what}: shape {shown(shape)} of {dtype} is {size}, but its data_offsets "
                          f"[{shown(begin)}, {shown(stop)}] hold {shown(stop - begin)}")
    return begin, stop


def _whole(n) -> bool:
    return isinstance(n, int) and not isinstance(n, bool) and n >= 0
