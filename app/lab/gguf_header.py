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
_GGUF_MAX_NESTING = 8


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

    def _value(self, kind: int, what: str, depth: int = 0):
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
            elif inner == _GGUF_ARRAY:  # arrays of arrays are GGUF's too; no model's nest more than a few deep
                if depth >= _GGUF_MAX_NESTING:
                    raise ValueError(f"{what} nests arrays more than {_GGUF_MAX_NESTING} deep")
                for _ in range(self._count(f"{what}'s length", 4 + 8)):
                    self._value(_GGUF_ARRAY, what, depth + 1)
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
        alignment, keys = 32, set()
        for index in range(pairs):
            raw = self._string(f"metadata entry {index}'s key")
            try:
                key = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise ValueError(f"metadata entry {index}'s key {raw[:80]!r} is not UTF-8 text") from None
            if key in keys:  # which of the two a reader takes cannot be told
                raise ValueError(f"metadata key {key[:80]!r} is given twice")
            keys.add(key)
            kind = self._take("I", f"metadata entry {index}")
            if key == "general.architecture" and kind != _GGUF_STRING:  # the kind of model it holds: a name
                raise ValueError(f"its general.architecture has value type {kind}, not text (a model kind's name)")
            value = self._value(kind, f"metadata {key[:80]!r}")
            if key == "general.alignment":
                alignment = value
        if not isinstance(alignment, int) or isinstance(alignment, bool) or not 0 < alignment <= 1 << 16 \
                or alignment % 8:
            raise ValueError(f"its general.alignment is {alignment!r} (GGUF's is a multiple of 8, 32 when not given)")
        infos = sorted(self._tensor_info(index) for index in range(tensors))
        data_start = -(-self.pos // alignment) * alignment
        names, end = set(), 0
        for offset, name, nbytes in infos:
            if name in names:
                raise ValueError(f"tensor {name[:80]!r} is listed twice")
            names.add(name)
            if offset % alignment:
                raise ValueError(f"tensor {name[:80]!r} starts at offset {offset:,}, not a multiple of the "
                                 f"alignment ({alignment})")
            if offset < end:
                raise ValueError(f"tensor {name[:80]!r} at offset {offset:,} overlaps the tensor before it "
                                 f"(which ends at {end:,})")
            end = offset + nbytes
            if data_start + end > len(self.data):
                raise ValueError(f"tensor {name[:80]!r} lies at bytes {data_start + offset:,} to "
                                 f"{data_start + end:,}, past the end of the file at {len(self.data):,}")

    def _tensor_info(self, index: int) -> tuple[int, str, int]:
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
        if 0 in shape:
            raise ValueError(f"tensor {name[:80]!r} has a dimension of 0 (shape {shape})")
        if shape[0] % block:  # a quantised row is whole blocks; the bytes of a part block cannot be told
            raise ValueError(f"tensor {name[:80]!r}'s rows of {shape[0]:,} are not whole blocks of {block} for its "
                             f"type {GGMLQuantizationType(kind).name}")
        return offset, name, math.prod(shape) // block * block_bytes
