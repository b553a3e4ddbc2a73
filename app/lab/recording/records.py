"""The .kvrec file as records: its signature and versions, where each record lies (from the index
the trailer points at, or by a scan of a file whose writer never closed it), each payload read with
its checksums verified, and the header. reader.py (an engine run) and attached_reader.py (an
attached vLLM server) read what these find.
"""

from __future__ import annotations

import dataclasses
import os
import stat
import threading
import zlib
from pathlib import Path

import numpy as np

from kvscope.app.lab.recording.format import (
    DELTAS,
    FILE_HEADER,
    FLAG_ZLIB,
    FORMAT_MAJOR,
    FRAME,
    FRAME_MARKER,
    HEADER,
    INDEX,
    KEYFRAME,
    MAX_RECORD_BYTES,
    MAX_STORED_BYTES,
    RECORD_NAMES,
    SIGNATURE,
    SOURCE_ATTACH,
    SOURCE_ENGINE,
    STEPS,
    TRAILER,
    TRAILER_TAG,
    RecordingError,
    decode_payload,
    inflate,
)
from kvscope.app.lab.recording.schema import check_header, check_index_head, whole


@dataclasses.dataclass(frozen=True)
class RecordEntry:
    number: int  # 0-based position in the file, as error messages count records
    type: int
    offset: int
    first: int  # first step (STEPS, DELTAS) or position (KEYFRAME)
    count: int  # steps in a STEPS or DELTAS record


@dataclasses.dataclass
class OpenedFile:
    """A .kvrec file's records found and its header read and checked (recording/schema.py)."""

    handle: object
    reader: "_RecordReader"
    header: dict
    entries: list
    index_head: dict | None
    warning: str | None  # a file that was not closed; "{last}" stands for what it holds
    size: int


def is_attached(header: dict) -> bool:
    """Whether a header is an attached vLLM server's (attached_reader.py), not an engine run's."""
    return header.get("source", SOURCE_ENGINE) == SOURCE_ATTACH


def read_header(path) -> dict:
    """A recording's header alone (checked): what a caller reads to choose its reader."""
    opened = open_records(path, allow_truncated=True)
    opened.handle.close()
    return opened.header


def open_records(path, allow_truncated: bool = False) -> OpenedFile:
    """The signature, the versions, the records (from the index, or by a scan of a file that was not
    closed) and the header. RecordingError, naming the file, for anything else."""
    path = Path(path)
    name = path.name
    if path.is_dir():
        raise RecordingError(f"{path} is a folder, not a recording")
    try:
        # not blocking: opening a FIFO to read would wait for a writer, forever if none comes
        handle = os.fdopen(os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)), "rb")
    except FileNotFoundError:
        raise RecordingError(f"{path}: no such file") from None
    except OSError as exc:
        raise RecordingError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise RecordingError(f"{path}: not a regular file (a device or a pipe); give a .kvrec recording")
        try:
            size = handle.seek(0, 2)
            handle.seek(0)
        except OSError as exc:  # a file that cannot seek (procfs) is no recording
            raise RecordingError(f"cannot read {path}: {exc.strerror or exc}") from None
        start = handle.read(FILE_HEADER.size)
        if len(start) < len(SIGNATURE) or not start.startswith(SIGNATURE):
            if SIGNATURE.startswith(start):
                raise RecordingError(f"{name} is truncated: it ends at byte {size:,}, inside the file signature")
            raise RecordingError(f"{name} is not a kvscope recording (it does not start with the .kvrec signature)")
        if len(start) < FILE_HEADER.size:
            raise RecordingError(f"{name} is truncated: it ends at byte {size:,}, inside the file header")
        _, major, minor = FILE_HEADER.unpack(start)
        if major > FORMAT_MAJOR:
            raise RecordingError(
                f"{name} uses recording format {major}.{minor}, newer than this kvscope reads "
                f"({FORMAT_MAJOR}.x): open it with a newer kvscope")
        if major < 1:  # read as a 1.x recording, a forged or damaged version went unsaid
            raise RecordingError(f"{name} says recording format {major}.{minor}, which no kvscope writes (the first "
                                 "is 1.0): the file header is damaged")
        reader = _RecordReader(handle, name, size)
        entries, index_head = reader.index_from_trailer()
        warning = None
        if entries is None:
            entries, index_head, warning = reader.scan(allow_truncated)  # checks every checksum on the way
        if not entries or entries[0].type != HEADER:
            raise RecordingError(f"{name}: its first record is not a header: the file is corrupt")
        header, _ = decode_payload(reader.payload(entries[0]), f"{name}: record 0 (the header)", head_only=True)
        if header.get("arrays"):  # never written: arrays there are a forgery's, unread but for their size
            raise RecordingError(f"{name}: record 0 (the header) holds arrays, which a header never has: "
                                 "the file is corrupt")
        header = check_header(header, name, (major, minor))
        index_head = check_index_head(index_head, name)
        return OpenedFile(handle, reader, header, entries, index_head, warning, size)
    except BaseException:
        handle.close()
        raise


class _RecordReader:
    """Frames and checksums: finds the records of a file and reads their payloads."""

    def __init__(self, handle, name: str, size: int):
        self.handle = handle
        self.name = name
        self.size = size
        self._lock = threading.Lock()  # one file position: a seek and its read go together

    def close(self) -> None:
        self.handle.close()

    def _read(self, offset: int, n: int) -> bytes:
        with self._lock:
            self.handle.seek(offset)
            return self.handle.read(n)

    def _frame_at(self, number: int, offset: int, kind: str = "") -> tuple[int, int, int, int]:
        """(type, flags, payload length, payload CRC) of the frame at offset, or a RecordingError."""
        raw = self._read(offset, FRAME.size)
        if len(raw) < FRAME.size:
            raise _Truncated(number, offset, FRAME.size)
        marker, record_type, flags, length, crc, frame_crc = FRAME.unpack(raw)
        if marker != FRAME_MARKER or zlib.crc32(raw[:16]) != frame_crc:
            raise RecordingError(f"{self.name}: record {number}{kind} at byte {offset:,} has a damaged frame "
                                 "(its marker or frame checksum is wrong): the file is corrupt")
        return record_type, flags, length, crc

    def payload(self, entry: RecordEntry, label: str | None = None) -> bytes:
        """The record's payload, checksum verified and decompressed."""
        flags, data, what = self._stored(entry, label)
        if flags & FLAG_ZLIB:
            data = inflate(data, f"{self.name}: {what}")
        return data

    def head(self, entry: RecordEntry, where: str) -> dict:
        """The record's JSON head, its checksum verified but only as much inflated as the head takes:
        the scan of an unclosed file needs no more, and Recording.verify inflates each record whole
        (inflating it here too made opening such a file take twice as long)."""
        flags, data, what = self._stored(entry, None)
        if flags & FLAG_ZLIB:
            inflater = zlib.decompressobj()
            try:
                start = inflater.decompress(data, 4)
                wanted = int.from_bytes(start.ljust(4, b"\xff"), "little") if len(start) == 4 else 0
                if wanted > MAX_RECORD_BYTES:
                    raise RecordingError(f"{where} is malformed (its head of {wanted:,} bytes is more than a record "
                                         "holds): the file is corrupt")
                data = start + inflater.decompress(inflater.unconsumed_tail, wanted) if wanted else start
            except zlib.error as exc:
                raise RecordingError(f"{self.name}: {what} cannot be decompressed ({exc}): the file is corrupt") \
                    from None
        try:
            return decode_payload(data, where, head_only=True)[0]
        except RecordingError:
            if not flags & FLAG_ZLIB:
                raise
            # a damaged head is read whole once, so that it is said as the whole record's reader says it
            # (a zlib bomb: "inflates to more than ...", not the JSON parser's "Expecting value")
            return decode_payload(self.payload(entry), where, head_only=True)[0]

    def _stored(self, entry: RecordEntry, label: str | None) -> tuple[int, bytes, str]:
        """(flags, the payload as stored, checksum verified, what to call the record)."""
        try:
            record_type, flags, length, crc = self._frame_at(entry.number, entry.offset)
        except _Truncated:
            raise RecordingError(f"{self.name} is truncated: record {entry.number} at byte {entry.offset:,} "
                                 f"lies past the end of the file at byte {self.size:,}") from None
        what = label or (f"record {entry.number} (a {RECORD_NAMES.get(record_type, f'type-{record_type}')} record "
                         f"at byte {entry.offset:,})")
        if entry.offset + FRAME.size + length > self.size:  # said before reading: a claimed length costs nothing
            raise RecordingError(f"{self.name} is truncated: {what} ends past the end of the file at byte {self.size:,}")
        if length > MAX_STORED_BYTES:  # a sparse file can be that long and cost its maker nothing
            raise RecordingError(f"{self.name}: {what} claims {length:,} bytes, more than the {MAX_STORED_BYTES:,} "
                                 "a record may take: the file is corrupt")
        data = self._read(entry.offset + FRAME.size, length)
        if len(data) < length:
            raise RecordingError(f"{self.name} is truncated: {what} ends past the end of the file at byte {self.size:,}")
        if zlib.crc32(data) != crc:
            raise RecordingError(f"{self.name}: {what} fails its checksum: the file is corrupt")
        return flags, data, what

    def verify(self, entries) -> None:
        for entry in entries:
            self.payload(entry)

    def index_from_trailer(self):
        """(entries, index head) from the INDEX record the trailer points at; (None, None) when the
        file has no valid trailer (its writer never closed it)."""
        if self.size < FILE_HEADER.size + TRAILER.size:
            return None, None
        raw = self._read(self.size - TRAILER.size, TRAILER.size)
        index_offset, tag, crc = TRAILER.unpack(raw)
        if tag != TRAILER_TAG or zlib.crc32(raw[:16]) != crc or not FILE_HEADER.size <= index_offset < self.size:
            return None, None
        probe = RecordEntry(-1, INDEX, index_offset, 0, 0)
        label = f"the index record (at byte {index_offset:,})"
        try:
            record_type = self._frame_at(-1, index_offset)[0]
        except (_Truncated, RecordingError):
            raise RecordingError(f"{self.name}: {label} has a damaged frame: the file is corrupt") from None
        if record_type != INDEX:
            raise RecordingError(f"{self.name}: the trailer points at byte {index_offset:,}, which holds no index "
                                 "record: the file is corrupt")
        # Each record takes at least its frame: an index listing more than the bytes before it hold
        # is refused before its entries are made (10,000,000 of them fit in a 100 KB file's index).
        most = (index_offset - FILE_HEADER.size) // FRAME.size
        payload = self.payload(probe, label)
        head, _ = decode_payload(payload, f"{self.name}: {label}", head_only=True)
        listed = head["arrays"].get("record.type") if isinstance(head.get("arrays"), dict) else None
        claimed = listed.get("count") if isinstance(listed, dict) else None
        if isinstance(claimed, int) and claimed > most:
            raise RecordingError(f"{self.name}: {label} lists {claimed:,} records, more than the {most:,} that the "
                                 f"{index_offset - FILE_HEADER.size:,} bytes before it can hold ({FRAME.size} bytes "
                                 "each at least): the file is corrupt")
        head, a = decode_payload(payload, f"{self.name}: {label}", max_count=most)
        columns = [a.get(f"record.{name}") for name in ("type", "offset", "first", "count")]
        if (any(c is None or c.dtype.kind not in "iu" for c in columns) or len({len(c) for c in columns}) != 1
                or not len(columns[0])):
            raise RecordingError(f"{self.name}: {label} is malformed: the file is corrupt")
        types, offsets = columns[0], columns[1].astype(np.int64)
        if int(types[0]) != HEADER or int(offsets[0]) != FILE_HEADER.size:
            raise RecordingError(f"{self.name}: {label} does not list the header as its first record: "
                                 "the file is corrupt")
        # in file order, a frame apart at least, and before the index: checked whole, before the walk
        if (np.diff(offsets) < FRAME.size).any() or int(offsets[-1]) > index_offset - FRAME.size:
            raise RecordingError(f"{self.name}: the index lists records out of order or outside the records "
                                 f"(before byte {index_offset:,}): the file is corrupt")
        entries = [RecordEntry(n, t, o, f, c) for n, (t, o, f, c) in enumerate(zip(*(c.tolist() for c in columns)))]
        for entry in entries:
            whole(entry.first, f"{self.name}: {label} entry {entry.number}: first step", 0)
            whole(entry.count, f"{self.name}: {label} entry {entry.number}: step count", 0)
        return entries, head

    def scan(self, allow_truncated: bool):
        """Walk the records from the start (a file with no index: its writer did not close it)."""
        entries: list[RecordEntry] = []
        offset, number = FILE_HEADER.size, 0
        complete_steps = 0  # steps whose STEPS and DELTAS records are both whole
        pending_steps: dict[int, int] = {}
        while offset < self.size:
            try:
                record_type, flags, length, _ = self._frame_at(number, offset)
                if offset + FRAME.size + length > self.size:
                    raise _Truncated(number, offset, FRAME.size + length)
            except _Truncated as cut:
                message = (f"{self.name} is truncated: "
                           + (f"the last complete step is {complete_steps - 1:,}" if complete_steps
                              else "it holds no complete step")
                           + f"; it ends mid-record at byte {self.size:,} (record {cut.number} starts at byte "
                             f"{cut.offset:,} and needs {cut.needed:,} bytes)")
                if number == 0 or not allow_truncated:
                    raise RecordingError(message) from None
                return entries, None, message
            entry = RecordEntry(number, record_type, offset, 0, 0)
            if record_type in (STEPS, DELTAS, KEYFRAME, INDEX):
                where = f"{self.name}: record {number}"
                head = self.head(entry, where)
                if record_type == KEYFRAME:
                    entry = dataclasses.replace(entry, first=whole(head.get("position"), f"{where}: position", 0))
                elif record_type in (STEPS, DELTAS):
                    entry = dataclasses.replace(entry, first=whole(head.get("first_step"), f"{where}: first_step", 0),
                                                count=whole(head.get("num_steps"), f"{where}: num_steps", 1))
                    seen = pending_steps.pop(entry.first, None)
                    if seen is None:
                        pending_steps[entry.first] = entry.count
                    else:
                        complete_steps = max(complete_steps, entry.first + entry.count)
                elif record_type == INDEX:
                    return entries, head, None  # whole, but its trailer was damaged: the index is enough
            else:
                self._stored(entry, None)  # the checksum of the header and of types a newer minor added
            entries.append(entry)
            offset += FRAME.size + length
            number += 1
        if not entries:
            raise RecordingError(f"{self.name} is truncated: it ends at byte {self.size:,}, before its header record")
        return entries, None, (f"{self.name} was not closed (the process recording it stopped before writing its "
                               "index): it is read up to its last complete record, which holds {last}")


class _Truncated(Exception):
    def __init__(self, number: int, offset: int, needed: int):
        super().__init__(number, offset, needed)
        self.number, self.offset, self.needed = number, offset, needed
