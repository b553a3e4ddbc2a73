"""A GGUF file's header walked before transformers reads it (the format:
https://github.com/ggml-org/ggml/blob/master/docs/gguf.md, versions 2 and 3).

transformers answers a cut or lying file with whatever its parser raises, or reads past the end:
here every count and length is checked against the bytes left in the file before it is trusted,
and each tensor must end inside the file. Nothing is copied: the file is mapped, strings skipped.
"""

from __future__ import annotations

import math
import mmap
import struct
from pathlib import Path


def gguf_damage(gguf: Path) -> str | None:
    """Why the file's header is not a whole GGUF's (the first thing wrong), or None."""
    try:
        if gguf.stat().st_size == 0:
            return "it is empty (0 bytes)"
        with open(gguf, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            _GgufWalk(data).check()
    except ValueError as exc:  # every damage _GgufWalk finds
        return str(exc)
    except OSError as exc:
        return f"it cannot be read ({exc.strerror or exc})"
    return None


_GGUF_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_GGUF_STRING, _GGUF_ARRAY = 8, 9
_GGUF_MIN_TENSOR_INFO = 8 + 4 + 8 + 4 + 8  # an empty name, one dimension, its type, its offset
_GGUF_MIN_KV = 8 + 4 + 1


class _GgufWalk:
    """Each count and length checked against the bytes left before it is trusted; a ValueError says
    the first that is not."""

    def __init__(self, data):
        self.data, self.pos = data, 0

    def _take(self, fmt: str, what: str):
        size = struct.calcsize("<" + fmt)
        if self.pos + size > len(self.data):
            raise ValueError(f"it is truncated: it ends at byte {len(self.data):,}, inside its {what}")
        values = struct.unpack_from("<" + fmt, self.data, self.pos)
        self.pos += size
        return values[0] if len(values) == 1 else values

    def _count(self, what: str, each: int) -> int:
        n = self._take("Q", what)
        if n * each > len(self.data) - self.pos:
            raise ValueError(f"its {what} is {n:,}, more than the rest of the file ({len(self.data) - self.pos:,} "
                             "bytes) can hold: it is truncated or damaged")
        return n

    def _string(self, what: str, keep: bool = True) -> bytes | None:
        n = self._count(f"{what}'s length", 1)
        self.pos += n
        return bytes(self.data[self.pos - n:self.pos]) if keep else None

    def _value(self, kind: int, what: str):
        if kind == _GGUF_STRING:
            return self._string(what, keep=False)
        if kind == _GGUF_ARRAY:
            inner = self._take("I", what)
            if inner in _GGUF_SCALARS:
                size = struct.calcsize("<" + _GGUF_SCALARS[inner])
                n = self._count(f"{what}'s length", size)
                self.pos += size * n
            elif inner == _GGUF_STRING:
                for _ in range(self._count(f"{what}'s length", 8)):
                    self._string(what, keep=False)  # a tokenizer's 50,000: skipped, not copied
            else:
                raise ValueError(f"{what} is an array of value type {inner}, which GGUF does not have")
            return None
        if kind not in _GGUF_SCALARS:
            raise ValueError(f"{what} has value type {kind}, which GGUF does not have")
        return self._take(_GGUF_SCALARS[kind], what)

    def check(self) -> None:
        if bytes(self.data[:4]) != b"GGUF":
            raise ValueError("it does not start with GGUF's magic bytes (it is not a GGUF file)")
        version = self._take("4xI", "header")
        if version not in (2, 3):
            raise ValueError(f"it is GGUF version {version}; this reads versions 2 and 3")
        tensors = self._take("Q", "header")
        pairs = self._count("metadata count", _GGUF_MIN_KV)
        if tensors * _GGUF_MIN_TENSOR_INFO > len(self.data) - self.pos:
            raise ValueError(f"its tensor count is {tensors:,}, more than the rest of the file "
                             f"({len(self.data) - self.pos:,} bytes) can hold: it is truncated or damaged")
        alignment = 32
        for index in range(pairs):
            key = self._string(f"metadata entry {index}'s key")
            value = self._value(self._take("I", f"metadata entry {index}"), f"metadata {key[:80]!r}")
            if key == b"general.alignment":
                alignment = value
        if not isinstance(alignment, int) or isinstance(alignment, bool) or not 0 < alignment <= 1 << 16:
            raise ValueError(f"its general.alignment is {alignment!r}")
        infos = [self._tensor_info(index) for index in range(tensors)]
        data_start = -(-self.pos // alignment) * alignment
        for name, offset, nbytes in infos:
            if data_start + offset + nbytes > len(self.data):
                raise ValueError(f"tensor {name[:80]!r} lies at bytes {data_start + offset:,} to "
                                 f"{data_start + offset + nbytes:,}, past the end of the file at {len(self.data):,}")

    def _tensor_info(self, index: int) -> tuple[str, int, int]:
        from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

        name = self._string(f"tensor {index}'s name").decode("utf-8", "replace")
        dims = self._take("I", f"tensor {name[:80]!r}")
        if not 0 < dims <= 4:
            raise ValueError(f"tensor {name[:80]!r} has {dims} dimensions (GGUF's have 1 to 4)")
        shape = [self._take("Q", f"tensor {name[:80]!r}'s shape") for _ in range(dims)]
        kind, offset = self._take("IQ", f"tensor {name[:80]!r}")
        try:
            block, block_bytes = GGML_QUANT_SIZES[GGMLQuantizationType(kind)]
        except (ValueError, KeyError):
            raise ValueError(f"tensor {name[:80]!r} has type {kind}, which GGUF does not have") from None
        return name, offset, math.prod(shape) // block * block_bytes
