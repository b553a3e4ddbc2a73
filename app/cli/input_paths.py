"""The paths the commands read, checked as typed before any of them is read.

Path() drops a trailing '/', and most readers build one before they open the file: `kvscope export
r.kvrec/`, `--trace t.csv/` and `--config config.json/` read the file, though the OS refuses
"r.kvrec/" (a folder's name) as "not a directory". A path through a file (`--workload
notes.txt/x.toml`) and /dev/fd/N with no N open are said here too, by the same words whichever
reader (a recording, a preset, a trace, a model folder) would have met them.
"""

from __future__ import annotations

import errno
import os
import stat

from kvscope.app.lab.bounded_reads import (descriptor_not_open, not_a_folder_reason, unopened_descriptor,
                                          unreadable_bytes_reason, what_is_there)
from kvscope.app.lab.said_paths import said_path
from kvscope.engine.config import ConfigError

# Each command's arguments (argparse dests) that name a file or folder it reads, or a preset that a
# path may stand for. attach's --replay is a socket address, not a recording.
INPUT_PATHS = {
    "math": ("model", "config", "model_path", "hardware"),
    "run": ("model", "config", "model_path", "hardware", "workload", "trace"),
    "gui": ("model", "model_path", "hardware", "workload", "replay", "scenario"),
    "compare": ("scenario",),
    "export": ("file",),
    "verify": ("model", "model_path"),
    "attach": ("model", "model_path", "hardware"),
    "calibrate": ("model", "model_path"),
    "bench": ("scenario",),
}
POSITIONAL_PATHS = ("file",)  # said without a flag's name, as the readers say them
# A preset's name (--model tiny-llama) is a path only where it holds a '/': a file of that name in the
# current folder is not what was meant.
PRESET_NAMES = ("model", "hardware", "workload", "scenario")


def refuse_unreadable_input_paths(args) -> None:
    """Every input path of the command that the OS would refuse as "not a directory" (a '/' after a
    file's name, a file in place of a folder), that loops, that is a socket or that names a
    descriptor not open: one line, naming the argument, before any of them is read."""
    for dest in INPUT_PATHS.get(getattr(args, "command", None), ()):
        value = getattr(args, dest, None)
        if not isinstance(value, str) or not value or "\0" in value:  # a NUL: each reader says it
            continue
        if dest in PRESET_NAMES and "/" not in value and os.sep not in value:
            continue
        reason = input_path_problem(value)
        if reason is not None:
            said = said_path(value)
            raise ConfigError(f"{said}: {reason}" if dest in POSITIONAL_PATHS else
                              f"--{dest.replace('_', '-')} {said}: {reason}")


def input_path_problem(path: str) -> str | None:
    """Why `path` cannot be read as typed, where the readers said it wrong or in the OS's words (a
    '/' after a file, a file in place of a folder, a loop of links said as "no such file", a socket
    as "no such device or address", an unopened descriptor as "no such file"); None for anything
    else (a missing file, a preset's name), which the command's reader says in its own terms."""
    if path == "-" and not os.path.lexists(path):  # "-: no such file" left the convention unexplained
        return "'-' stands for the standard input, and kvscope reads its inputs from files; give a file name"
    try:
        mode = os.stat(path).st_mode
    except NotADirectoryError:
        return not_a_folder_reason(path)
    except FileNotFoundError:
        closed = unopened_descriptor(path)
        return _blank_around(path) if closed is None else descriptor_not_open(closed)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a loop of symbolic links (each leads to the next, and none to a file); give a path the system can open"
        return None  # a name too long: main() says it for every path alike
    except ValueError:
        return None
    if stat.S_ISSOCK(mode):
        return f"is {what_is_there(path)}, not a file or folder kvscope reads"
    if stat.S_ISREG(mode):
        return _first_byte_problem(path)
    return None


def _blank_around(path: str) -> str | None:
    """A missing path whose name without the spaces (or tabs) around it is there: `--trace "t.csv "`
    was "trace t.csv : no such file", the space unseen in the line. None for any other missing path."""
    bare = path.strip()
    if bare == path or not bare or not os.path.lexists(bare):
        return None
    where = "begins and ends" if path[0].isspace() and path[-1].isspace() else \
        "begins" if path[0].isspace() else "ends"
    blanks = set(path[:len(path) - len(path.lstrip())] + path[len(path.rstrip()):])
    blank = "a space" if blanks == {" "} else "a blank (a tab, a line break)"
    return (f"no such file: the name as typed {where} with {blank} ('{said_path(path)}'), and {said_path(bare)} "
            "is there; give the name without it")


def _first_byte_problem(path: str) -> str | None:
    """Why a regular file's first byte cannot be read (/proc/self/mem opens, then fails every read at
    0): the readers said the OS's "Input/output error" or "Invalid argument", naming no cause. None
    where it reads, or cannot even be opened (each reader says that, a permission among them)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except (OSError, ValueError):
        return None
    try:
        os.read(fd, 1)
    except OSError as exc:
        return unreadable_bytes_reason(path, exc)
    finally:
        os.close(fd)
    return None
