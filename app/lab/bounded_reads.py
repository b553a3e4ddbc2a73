"""Reading files someone else wrote, bounded before anything is allocated for them.

A file is read whole only when it is a regular file within a size cap (`read_capped`), so
/dev/zero or a 50 GB file ends in a sentence, not in a MemoryError; JSON is parsed with its
nesting depth limited (`load_json`), so a table nested a thousand deep is refused, not recursed
into. Presets, workloads, recordings, calibrations and model directories are all read this way;
the engine itself reads no files, so this lives above it.

Every failure is a ConfigError whose message starts with `label` (what was read).
"""

from __future__ import annotations

import datetime
import errno
import json
import os
import stat
import sys
from pathlib import Path

from kvscope.engine.checks import ConfigError

MAX_JSON_DEPTH = 64  # config.json nests 3 deep; a recording's head 3
# the leading bytes of compressed files, a download often is one (azure_conv.csv.gz, config.json.gz)
PACKED = ((b"\x1f\x8b", "gzip"), (b"PK\x03\x04", "zip"), (b"\x28\xb5\x2f\xfd", "zstd"), (b"\xfd7zXZ\0", "xz"))


def packed_kind(data: bytes) -> str | None:
    """The compression the bytes start with (gzip, zip, zstd, xz), or None."""
    return next((name for magic, name in PACKED if bytes(data[:6]).startswith(magic)), None)


def nesting_depth(value) -> int:
    """How deep lists and dicts nest inside value, counted without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return deepest


MAX_WHOLE = 2**63 - 1  # TOML's integers are 64-bit; no field of a preset, profile or header is larger


def _first_inside(value, found) -> tuple[str, object] | None:
    """(where, item) of the first item inside value (tables and lists walked, a dotted path kept)
    for which found(item) holds; None if there is none."""
    stack = [("", value)]
    while stack:
        where, item = stack.pop()
        if found(item):
            return where or "a value", item
        children = item.items() if isinstance(item, dict) else enumerate(item) if isinstance(item, list) else ()
        stack.extend((f"{where}.{key}" if where else str(key), child) for key, child in children)
    return None


def outsized_whole(value) -> tuple[str, int] | None:
    """(where, number) of the first whole number past 64 bits inside value, None if there is none.
    Such a number has no float (10**400 in a rate), so a check that compares it with one raises
    OverflowError instead of naming the field; the TOML spec itself says it must be refused."""
    return _first_inside(value, lambda item: isinstance(item, int) and not isinstance(item, bool)
                         and not -MAX_WHOLE - 1 <= item <= MAX_WHOLE)


def refuse_toml_dates(value, label: str) -> None:
    """TOML's bare dates and times (num_requests = 1979-05-27) are no value of any field kvscope
    reads; left to each field's own check they were quoted as Python's datetime.date(1979, 5, 27)."""
    found = _first_inside(value, lambda item: isinstance(item, (datetime.date, datetime.time)))
    if found is not None:
        where, item = found
        raise ConfigError(f"{label}: {str(where)[:80]} is a TOML date or time ({item.isoformat()}); no field takes "
                          "one (counts and rates are numbers, names and paths quoted text)")


def refuse_outsized_whole(value, label: str) -> None:
    """A ConfigError naming the first whole number past 64 bits in value (a file just read)."""
    found = outsized_whole(value)
    if found is not None:
        where, number = found
        raise ConfigError(f"{label}: {str(where)[:80]} is a whole number of {len(str(abs(number))):,} digits, "
                          "past the 64-bit range (no field is that large)")


def unholdable_number(label: str, exc: Exception) -> ConfigError:
    """The error for a number a JSON or TOML file may spell but Python will not convert (a whole
    number of more than 4,300 digits): Python's advice (set_int_max_str_digits) is not the user's to take."""
    if "digits" in str(exc):
        return ConfigError(f"{label}: a whole number of more than {sys.get_int_max_str_digits():,} digits; "
                           "no field of it is that large")
    return ConfigError(f"{label}: {exc}")


class _DuplicateKey(ValueError):
    pass


def _unique_pairs(pairs):
    """An object's pairs as a dict, refusing a key given twice with two values: json keeps the last
    without a word (config.json's "num_hidden_layers": 2 then 40 was a 40-layer model), and which was
    meant cannot be told. The same value twice is read: transformers loads such files, and so do users."""
    table = {}
    for key, value in pairs:
        if key in table and table[key] != value:
            raise _DuplicateKey(f"the key {key[:80]!r} is given twice in one object ({_shown_json(table[key])}, then "
                                f"{_shown_json(value)}); keep the one meant")
        table[key] = value
    return table


def _shown_json(value) -> str:
    text = json.dumps(value) if not isinstance(value, (dict, list)) else ("an object" if isinstance(value, dict)
                                                                           else "a list")
    return text if len(text) <= 40 else text[:37] + "..."


_TEXT_BYTES = {0, 9, 10, 13, *range(32, 127)}  # printable ASCII, tab and line ends, and the NULs between them


def wide_unicode(data) -> str | None:
    """What a file of UTF-16 or UTF-32 text is, said for a reader of UTF-8 (None: it is not such text): by its
    byte-order mark (UTF-32's begins as UTF-16's, and was said as UTF-16), or, without one, by its first 8 bytes
    being printable ASCII characters each followed or preceded by NUL bytes (it was "malformed JSON at line 1,
    column 2", or "binary data (a NUL byte)")."""
    head = [ord(c) for c in data[:8]] if isinstance(data, str) else list(bytes(data[:8]))
    if head[:4] in ([0xFF, 0xFE, 0, 0], [0, 0, 0xFE, 0xFF]):
        return "UTF-32 text"
    if head[:2] in ([0xFF, 0xFE], [0xFE, 0xFF]):  # an editor's "Unicode": every other byte is 0
        return "UTF-16 text"
    # the places of the characters among each 2 (UTF-16 LE, BE) or 4 bytes (UTF-32 LE, BE)
    places = ((2, 0), (2, 1), (4, 0), (4, 3))
    if len(head) == 8 and all(b in _TEXT_BYTES for b in head) and any(
            all((head[i] == 0) == (i % width != at) for i in range(8)) for width, at in places):
        return "UTF-16 or UTF-32 text without a byte-order mark (NUL bytes between its characters)"
    return None


def load_json(text, label: str, max_depth: int = MAX_JSON_DEPTH, unique_keys: bool = False):
    """Parsed JSON (text or UTF-8 bytes); anything unreadable, or nested deeper than max_depth,
    is a ConfigError naming `label`. unique_keys: a key given twice in one object is refused too
    (a file whose fields kvscope reads: config.json, an index, generation_config.json)."""
    if isinstance(text, (bytes, bytearray, memoryview)):
        text = bytes(text)
        if packed := packed_kind(text):  # was "not UTF-8 text (byte 1)", what the file is not said
            raise ConfigError(f"{label}: {packed}-compressed, not JSON text; decompress it first")
    bom, blanks = (b"\xef\xbb\xbf", b" \t\r\n") if isinstance(text, bytes) else ("\ufeff", " \t\r\n")
    if isinstance(text, (bytes, str)) and not text.removeprefix(bom).strip(blanks):
        # was "malformed JSON at line 1, column 1: Expecting value", the file's emptiness not said
        raise ConfigError(f"{label}: empty ({f'only blanks in its {len(text):,} bytes' if text else '0 bytes'}), "
                          "no JSON in it")
    try:
        if isinstance(text, (bytes, bytearray, memoryview)):
            text = bytes(text).decode("utf-8-sig")
        value = json.loads(text, object_pairs_hook=_unique_pairs if unique_keys else None)
    except _DuplicateKey as exc:
        raise ConfigError(f"{label}: {exc}") from None
    except UnicodeDecodeError as exc:
        if wide := wide_unicode(text):
            raise ConfigError(f"{label}: {wide}; JSON is read as UTF-8: save it as UTF-8") from None
        raise ConfigError(f"{label}: not UTF-8 text (byte {exc.start:,})") from None
    except json.JSONDecodeError as exc:
        if wide := wide_unicode(text):  # UTF-16 without a byte-order mark decodes as UTF-8 (NULs between)
            raise ConfigError(f"{label}: {wide}; JSON is read as UTF-8: save it as UTF-8") from None
        raise ConfigError(f"{label}: malformed JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    except RecursionError:
        raise ConfigError(f"{label}: JSON nested deeper than {max_depth} levels") from None
    except (ValueError, OverflowError) as exc:  # numbers JSON allows but Python cannot hold
        raise unholdable_number(label, exc) from None
    if nesting_depth(value) > max_depth:
        raise ConfigError(f"{label}: JSON nested deeper than {max_depth} levels")
    return value


def read_capped(path, label: str, max_bytes: int, what: str = "file") -> bytes:
    """A regular file's bytes if it holds at most max_bytes; /dev/zero, a FIFO or a file too big
    for its kind is refused before anything is allocated for it."""
    typed = os.fspath(path)  # not Path(path): it drops a trailing '/', and "notes.txt/" names no file
    if "\0" in str(typed):  # a workload file's trace = "a\u0000b": open() raises ValueError, naming no field
        raise ConfigError(f"{label}: cannot read: the path holds a NUL character, which no file name has")
    try:
        # O_NONBLOCK: opening a FIFO to read waits for a writer, forever if none comes; opened this
        # way it returns at once and fstat refuses it. A regular file reads as usual.
        with os.fdopen(os.open(typed, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)), "rb") as handle:
            info = os.fstat(handle.fileno())
            if stat.S_ISDIR(info.st_mode):
                raise ConfigError(f"{label}: is a folder, not a {what}")
            if not stat.S_ISREG(info.st_mode):
                raise ConfigError(f"{label}: not a regular file (a device or a pipe); give a {what}")
            if info.st_size > max_bytes:
                raise ConfigError(f"{label}: {info.st_size:,} bytes, more than the {max_bytes:,} a {what} may have")
            data = _read_to_cap(handle, info.st_size, max_bytes)
    except IsADirectoryError:
        raise ConfigError(f"{label}: is a folder, not a {what}") from None
    except NotADirectoryError:  # the OS's "Not a directory" does not say which part is the file
        raise ConfigError(f"{label}: {not_a_folder_reason(typed) or 'cannot read: a part of the path is not a folder'}"
                          ) from None
    except FileNotFoundError:
        closed = unopened_descriptor(typed)
        raise ConfigError(f"{label}: " + (descriptor_not_open(closed) if closed is not None else "cannot read: no such file")
                          ) from None
    except OSError as exc:
        if exc.errno == errno.ENXIO and what_is_there(typed).startswith("a socket"):  # "No such device or address"
            raise ConfigError(f"{label}: is {what_is_there(typed)}, not a {what}") from None
        raise ConfigError(f"{label}: {unreadable_bytes_reason(typed, exc, what)}") from None
    if len(data) > max_bytes:  # it grew while being read
        raise ConfigError(f"{label}: more than the {max_bytes:,} bytes a {what} may have")
    return data


READ_STEP_BYTES = 1 << 20


def _read_to_cap(handle, size: int, max_bytes: int) -> bytes:
    """At most max_bytes + 1 bytes (one past the cap says it was passed), reading the size fstat gave
    first: read(max_bytes + 1) reserved the whole cap (1 GiB for a trace) before a byte came, which an
    address-space limit refuses. Past that size (a file that grows, or one the kernel makes up as it is
    read, whose size says 0) it reads on a step at a time."""
    chunks = [handle.read(min(size, max_bytes) + 1)]
    total = len(chunks[0])
    while total > size and total <= max_bytes:
        chunk = handle.read(min(READ_STEP_BYTES, max_bytes + 1 - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def unreadable_bytes_reason(path, exc: OSError, what: str = "file") -> str:
    """Why a file that opened gave no bytes, in words: /proc/self/mem opens, then says only "Input/output
    error" (a process's memory is read at its addresses, never from 0), as do other files the kernel
    makes up as they are read."""
    reason = (exc.strerror or str(exc)).lower()
    try:
        made_up = os.path.realpath(os.fsdecode(path)).startswith(("/proc/", "/sys/"))
    except (OSError, ValueError):
        made_up = False
    where = ", a file the kernel makes up as it is read, not one that holds data" if made_up else ""
    return f"cannot read its bytes ({reason}{where}); give a {what} kvscope can read"


def not_a_folder_reason(path) -> str | None:
    """Why the OS said "not a directory" of `path`, in words: it ends in '/' after a file's name
    (Path() drops that '/', so the file was read as if it were not there), or a part before its
    name is a file. None where neither is so (the path changed meanwhile)."""
    from kvscope.app.lab.output_path import file_in_place_of_a_folder  # it imports this module (said_paths)
    from kvscope.app.lab.said_paths import said_path

    typed = os.fsdecode(path)
    named = typed.rstrip("/" + os.sep)
    if named != typed and named and os.path.lexists(named) and not os.path.isdir(named):
        return f"ends in '/', which names a folder; {said_path(named)} is {what_is_there(named)}"
    blocking = file_in_place_of_a_folder(Path(typed).parent)
    return None if blocking is None else f"{said_path(blocking)} is a file, not a folder"


def what_is_there(path) -> str:
    """What kind of thing that is no folder `path` names, as a message says it: "a file", "a socket"."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return "a link that leads nowhere"
    return ("a file" if stat.S_ISREG(mode) else "a pipe" if stat.S_ISFIFO(mode) else "a socket (a program's "
            "connection point)" if stat.S_ISSOCK(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "a folder" if stat.S_ISDIR(mode) else "no file")


# Where this process's open file descriptors appear as files: /dev/fd/N, /proc/self/fd/N, /dev/stdin.
DESCRIPTOR_FOLDERS = ("/dev/fd", f"/proc/{os.getpid()}/fd", "/proc/self/fd")
STANDARD_STREAMS = {0: "standard input", 1: "standard output", 2: "standard error"}


def unopened_descriptor(path) -> int | None:
    """N where `path` names this process's file descriptor N (/dev/fd/5, /dev/stdin) and N is not
    open: the OS says "no such file", and the folder it is in is no folder a file can be made in."""
    try:
        folder, name = os.path.split(os.path.realpath(os.fsdecode(path)))
    except (OSError, ValueError):
        return None
    if not (name.isascii() and name.isdigit() and len(name) <= 9) or folder not in DESCRIPTOR_FOLDERS:
        return None
    try:
        os.fstat(int(name))
    except OSError:
        return int(name)
    return None


def descriptor_not_open(number: int) -> str:
    """What to say of a path naming file descriptor `number`, which is not open."""
    stream = f" ({STANDARD_STREAMS[number]}, closed)" if number in STANDARD_STREAMS else ""
    return (f"descriptor {number}{stream} is not open in this command (a shell opens one with `{number}< file` "
            f"or `{number}> file`); give a file name")


def is_one_line(text, limit: int) -> bool:
    """Text another program sent or wrote that kvscope shows (a version, a model's name): one line of
    printable characters (no newline, no terminal escape code), not empty, at most `limit` long."""
    return isinstance(text, str) and 0 < len(text) <= limit and text.isprintable()


def escaped(text: str) -> str:
    """text with each character that is not printable (a newline, ESC) written as its escape ("\\x1b"),
    so a file that holds one cannot move the terminal's cursor or clear its screen when shown."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)
