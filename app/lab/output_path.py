"""Writing a file where the user asked: checked before the work that fills it, written whole or not at all.

Shared by the commands' output flags (--json, --csv, --record, --perfetto) and the window's
File > Export, so both refuse a path with the same words. `check_output_path` says before a long
run what is wrong with a path (a folder, a missing folder, read-only, or a file the same command
reads: `kvscope export run.kvrec --perfetto run.kvrec` must not destroy run.kvrec).
`atomic_output` writes to a temporary file beside the target and renames it over the target only
once it is complete, so a failed or interrupted write leaves an existing file as it was.

Path() drops a trailing slash: `--json notes.txt/` (a folder's name, which the OS refuses as "not a
directory") replaced notes.txt, and `--json new.json/` made a file; so the path is read as typed
first. And where no temporary file can be made beside the target (/proc, /sys), `kvscope run
--json /proc/version` failed only after the whole run: that is tried first too.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from glob import escape as glob_escape
from pathlib import Path

from kvscope.app.lab.bounded_reads import (descriptor_not_open, not_a_folder_reason, unopened_descriptor,
                                           what_is_there)
from kvscope.app.lab.said_paths import said_path, said_short
from kvscope.engine.config import ConfigError


def same_file(a, b) -> bool:
    """Whether two paths name one file (the same path spelled twice, a symlink, a hard link)."""
    a, b = Path(a), Path(b)
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
    except OSError:
        pass
    return os.path.realpath(a) == os.path.realpath(b)  # not Path.resolve(): it raises on a symlink loop


def check_output_path(flag: str, path: str | None, inputs: dict | None = None) -> None:
    """An output that cannot be written fails now, in one line naming the flag, not after a long
    run. inputs ({what: path}) are the files the command reads: an output that is one of them is
    refused. '-' (stdout) and no path pass."""
    if not path or path == "-":
        return
    try:
        _check_output_path(flag, path, inputs)
    except OSError as exc:  # a name over 255 bytes, a symlink loop: the system cannot even look it up
        raise ConfigError(f"{flag} {said_short(str(path))}: {exc.strerror or exc}; give a path the system can open") from None
    _refuse_another_formats_name(flag, str(path))  # after "is also the trace this command reads", the worse mistake


# What each output flag writes, and the name endings kvscope gives its formats: an output named for
# another (`export --csv trace.json --perfetto steps.csv`, swapped) wrote each in the other's name.
FLAG_FORMATS = {"--json": ".json", "--csv": ".csv", "--perfetto": ".json", "--record": ".kvrec"}
FORMAT_NAMES = {".json": "JSON", ".csv": "CSV", ".kvrec": "a kvscope recording", ".png": "a PNG image",
                ".tsv": "tab-separated values",  # `--csv o.tsv`: its commas in a file read as one column
                # `run --json mine.toml` in the presets folder listed an invalid preset, "malformed TOML"
                ".toml": "TOML (a preset, workload or scenario file)", ".yaml": "YAML", ".yml": "YAML",
                ".xlsx": "an Excel workbook", ".xls": "an Excel workbook", ".parquet": "Parquet"}
# A compressor's name ending: each output is written uncompressed, so `run --json r.json.gz`, `export
# --perfetto t.json.gz` and `compare --csv c.csv.xz` wrote plain text under a compressed file's name,
# which gunzip, and pandas' read_csv (it infers the compression from the name), fail on.
COMPRESSED_NAMES = {".gz": "gzip", ".tgz": "gzip", ".gzip": "gzip", ".zip": "zip", ".zst": "zstd", ".xz": "xz",
                    ".bz2": "bzip2", ".lz4": "lz4", ".7z": "7-Zip", ".br": "Brotli"}


def _refuse_another_formats_name(flag: str, path: str) -> None:
    wanted, suffix = FLAG_FORMATS.get(flag), Path(path).suffix.lower()
    if wanted and suffix in COMPRESSED_NAMES:
        recording = wanted == ".kvrec"  # compressed already, inside: no compressor makes it smaller
        raise ConfigError(f"{flag} {path}: writes {FORMAT_NAMES[wanted]}"
                          f"{', its steps compressed inside it,' if recording else ' uncompressed,'} and the name's "
                          f"{suffix} says a {COMPRESSED_NAMES[suffix]}-compressed file; give the name without {suffix}"
                          f"{'' if recording else ' (and compress the file afterwards if it should be)'}")
    if wanted and suffix != wanted and suffix in FORMAT_NAMES:
        raise ConfigError(f"{flag} {path}: writes {FORMAT_NAMES[wanted]}, and the name's {suffix} says "
                          f"{FORMAT_NAMES[suffix]}; give a {wanted} name (or one without {suffix})")


def _check_output_path(flag: str, path: str, inputs: dict | None) -> None:
    path = str(path)
    if path != path.strip():  # `--json "o.csv "` wrote JSON as "o.csv ", `--json " -"` a file " -" here
        where = "begins" if path[:1].isspace() else "ends"
        raise ConfigError(f"{flag} '{said_path(path)}': the name {where} with a blank (a space, a tab), "
                          "which would be written into the file's name; give the name without it")
    if path.endswith(("/", os.sep)) and not os.path.isdir(path):
        after_a_file = not_a_folder_reason(path) or ""  # `notes.txt/`: "there is none" hid that notes.txt is there
        raise ConfigError(f"{flag} {path}: " + (f"{after_a_file}; give a file name (without the '/')"
                                                if after_a_file.startswith("ends in") else
                                                "ends in '/', which names a folder, and there is none; give a file "
                                                "name (without the '/')"))
    closed = unopened_descriptor(path)
    if closed is not None:  # `--json /dev/fd/5` with no 5 open: "no file can be made in /dev/fd" named no cause
        raise ConfigError(f"{flag} {path}: {descriptor_not_open(closed)}")
    _refuse_if_no_file_can_be_made_beside(flag, path)
    out = Path(path)
    _raise_if_links_loop(os.path.dirname(os.path.abspath(path)))
    for what, given in (inputs or {}).items():
        if given and given != "-" and same_file(out, given):
            raise ConfigError(f"{flag} {path}: is also the {what} this command reads; writing it would destroy "
                              "it: give another file name")
    if out.is_dir():
        raise ConfigError(f"{flag} {path}: is a folder; give a file name")
    folder = Path(os.path.realpath(out)).parent
    if not folder.is_dir():
        blocking = file_in_place_of_a_folder(folder)
        if blocking is not None:  # `file.txt/x`: "does not exist" sent the user looking for a missing folder
            raise ConfigError(f"{flag} {path}: {said_short(blocking)} is a file, not a folder; give a path in a folder")
        raise ConfigError(f"{flag} {path}: the folder does not exist ({folder})")
    existed = out.exists()
    try:  # opening it is the only test that knows about read-only mounts, quotas and odd file systems
        # O_NONBLOCK: a FIFO no one reads would keep open() waiting forever; it fails at once (ENXIO)
        os.close(os.open(out, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NONBLOCK", 0), 0o666))
    except OSError as exc:
        if exc.errno == errno.ENXIO and _is_fifo(out):  # ENXIO is also a terminal device with no terminal
            raise ConfigError(f"{flag} {path}: a pipe that nothing reads; give a file name") from None
        if exc.errno == errno.ENXIO and what_is_there(out).startswith("a socket"):  # "No such device or address"
            raise ConfigError(f"{flag} {path}: is {what_is_there(out)}, not a file; give a file name") from None
        raise ConfigError(f"{flag} {path}: cannot write it: {exc.strerror or exc}") from None
    if not existed:
        out.unlink()


def _raise_if_links_loop(folder: str) -> None:
    """The OSError of a folder reached through a loop of symbolic links, for check_output_path to say:
    `loop/x` was said as "loop is a file, not a folder"."""
    try:
        os.stat(folder)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise


def file_in_place_of_a_folder(folder: Path) -> str | None:
    """The first existing part of a missing folder's path, where that part is not a folder (a file,
    a device): the reason no file can be made below it. None where the path just stops existing."""
    for part in (folder, *folder.parents):
        try:
            if os.path.lexists(part):  # a link that leads nowhere (or round in a loop) is no file either
                return None if os.path.isdir(part) or not os.path.exists(part) else str(part)
        except (OSError, ValueError):
            return None
    return None


def _refuse_if_no_file_can_be_made_beside(flag: str, path: str) -> None:
    """A file written whole goes through a new file beside it (atomic_output): where the folder
    takes none (/proc, /sys), the output is refused now, not after the work. A device, a pipe, a
    folder or a missing folder is left to the checks after this one, which say which it is."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        mode = None
    except (OSError, ValueError):  # a loop, a name too long, a path through a file: said by the checks after
        return
    if (mode is not None and not stat.S_ISREG(mode)) or not os.path.isdir(os.path.dirname(os.path.realpath(path))):
        return
    if names_standard_output(path):  # written in place, not through a file beside it
        return
    try:
        probe = partial_path(path)
    except OSError as exc:
        folder = os.path.dirname(os.path.abspath(path))  # as typed (/proc/self, not /proc/7995) unless a
        if os.path.realpath(folder) != os.path.dirname(os.path.realpath(path)):  # link leads elsewhere
            folder = os.path.dirname(os.path.realpath(path))  # /dev/stdin, stdin closed: /proc/7995/fd
        raise ConfigError(f"{flag} {path}: no file can be made in {folder} ({exc.strerror or exc}); the output "
                          "is written to a new file there first: give a path in an ordinary folder") from None
    with contextlib.suppress(OSError):
        probe.unlink()


def names_standard_output(path) -> bool:
    """Whether `path` is another name of this process's standard output (/dev/stdout, /dev/fd/1,
    or the very file `> out.txt` opened): what goes there would mix with the command's own text,
    and a rename over it would replace what was already written. /dev/null is only /dev/null."""
    if not path or path == "-":
        return path == "-"
    try:
        given, stdout = os.stat(path), os.fstat(1)
    except (OSError, ValueError):
        return False
    return (given.st_dev, given.st_ino) == (stdout.st_dev, stdout.st_ino) and os.path.realpath(path) != os.devnull


def check_file_output(flag: str, path: str | None, what: str, inputs: dict | None = None) -> None:
    """check_output_path for an output that only a file can take (a recording, an image): '-',
    stdout for --json, would otherwise make a file named '-' in the current folder."""
    if names_standard_output(path):
        said = "" if path == "-" else " (another name of this command's standard output)"
        raise ConfigError(f"{flag} {path}{said}: {what} is written to a file, not to stdout; give "
                          f"{'another' if said else 'a'} file name")
    check_output_path(flag, path, inputs)


def check_distinct_outputs(outputs: dict) -> None:
    """No two output flags ({flag: path}) may name the same file, the standard output included:
    the second would overwrite the first, or mix with it."""
    to_stdout = [f"{flag} {path}" for flag, path in outputs.items() if names_standard_output(path)]
    if len(to_stdout) > 1:
        raise ConfigError(f"{' and '.join(to_stdout)} all name the standard output; give at most one of them")
    given = [(flag, path) for flag, path in outputs.items() if path and path != "-"]
    for i, (flag, path) in enumerate(given):
        for other_flag, other in given[i + 1:]:
            if same_file(path, other):
                raise ConfigError(f"{flag} {path} and {other_flag} {other} name the same file; give each its own")


def replaces_in_place(path) -> bool:
    """Whether writing `path` should go through a temporary file: it is (or will be) a regular file
    that is not the standard output. A device, a pipe or stdout's own file is written directly:
    renaming over it would replace it."""
    if names_standard_output(path):
        return False
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except FileNotFoundError:
        return True
    except OSError:
        return False


def partial_path(path) -> Path:
    """A new, empty temporary file beside `path`, to be renamed over it when complete."""
    target = Path(path)
    fd, name = tempfile.mkstemp(prefix=f".{_name_start(target.name)}.", suffix=".partial",
                                dir=Path(os.path.realpath(target)).parent)
    os.close(fd)
    try:  # a file replaced keeps its permissions: one made private (0600) became readable by all (0644)
        kept = os.stat(os.path.realpath(target))
        mode = stat.S_IMODE(kept.st_mode)
        with contextlib.suppress(OSError):  # and its owner and group, where this process may give them
            os.chown(name, kept.st_uid, kept.st_gid)
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask  # a new file: as open() would have made it, not mkstemp's 0600
    os.chmod(name, mode)
    return Path(name)


# A file name holds 255 bytes; the temporary one adds a dot, 8 random characters and ".partial": a
# 250-byte name, valid itself, could not be written ("no file can be made") until its start was used.
PARTIAL_NAME_BYTES = 200


def _name_start(name: str) -> str:
    """The target's name as its temporary file's starts: cut to PARTIAL_NAME_BYTES, not inside a character."""
    raw = os.fsencode(name)
    return name if len(raw) <= PARTIAL_NAME_BYTES else raw[:PARTIAL_NAME_BYTES].decode("utf-8", "ignore")


def partials_of(path, since: float) -> list[Path]:
    """The temporary files (partial_path) beside `path` changed since `since` (seconds since the
    epoch), newest first: what a writer killed before renaming its file over `path` leaves behind."""
    target = Path(os.path.realpath(path))
    try:
        found = [(p.stat().st_mtime, p) for p in target.parent.glob(f".{glob_escape(_name_start(target.name))}.*.partial")]
    except OSError:
        return []
    return [p for mtime, p in sorted(found, reverse=True) if mtime >= since]


def commit_partial(partial: Path, path) -> None:
    """Rename a finished temporary file over its target (atomic on one file system); a target
    that is a symlink keeps it: the file it points at is replaced."""
    os.replace(partial, os.path.realpath(path))


@contextlib.contextmanager
def atomic_output(path):
    """Yields the path to write: a temporary file beside `path`, renamed over it on success and
    removed on any failure (an existing file stays as it was). A device or pipe is yielded as is."""
    if not replaces_in_place(path):
        yield Path(path)
        return
    try:
        partial = partial_path(path)
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror or exc}") from None
    try:
        yield partial
        commit_partial(partial, path)
    except BaseException:
        with contextlib.suppress(OSError):
            partial.unlink()
        raise


def write_text_atomic(flag: str, path, text: str) -> None:
    """Write text to path as a whole (see atomic_output); a failure is a ConfigError naming the flag."""
    try:
        with atomic_output(path) as partial:
            with open(partial, "w", encoding="utf-8") as handle:
                handle.write(text)
    except OSError as exc:
        raise ConfigError(f"{flag} {path}: cannot write: {exc.strerror or exc}") from None


def write_json_output(flag: str, path: str, value) -> None:
    """A report as indented JSON: to stdout for "-", else written whole (write_text_atomic)."""
    import json

    text = json.dumps(value, indent=2) + "\n"
    if path == "-":
        print(text, end="")
    else:
        write_text_atomic(flag, path, text)


def _is_fifo(path) -> bool:
    try:
        return stat.S_ISFIFO(os.stat(path).st_mode)
    except OSError:
        return False
