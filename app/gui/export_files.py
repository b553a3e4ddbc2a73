"""File > Export without Qt: the file names offered, the check that a path can be written, the
error a dialog shows, the writing of a file whole or not at all, and the replayed recording saved
as a Perfetto trace.

Every export is written to a temporary file beside the target and renamed over it once complete
(output_path.atomic_output), so a full disk or a failed exporter leaves an existing file as it
was; a target that is a file the window reads (the open recording, the trace, a config.json) is
refused, as the commands refuse `kvscope export run.kvrec --perfetto run.kvrec`."""

from __future__ import annotations

import os
import re
from pathlib import Path

from kvscope.app.lab.output_path import atomic_output, check_output_path
from kvscope.app.lab.said_paths import said_path
from kvscope.engine.config import ConfigError


class ExportError(Exception):
    """Why a file could not be written, in words for a dialog."""


def default_name(title: str, suffix: str) -> str:
    """'KV cache vs compute' -> 'kvscope-kv-cache-vs-compute.png'."""
    slug = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")
    return f"kvscope-{slug}{suffix}"


FOLDER_FILES_CHECKED = 1000  # a model folder holds tens of files; past this many the rest are not compared


def shown_name(path) -> str:
    """A file's name for a message: a 300-character name would fill the dialog and hide the reason
    (a path with no name, "/", is said whole: the dialog began ": a plot is saved as ...")."""
    return said_path(Path(path).name or path)


def files_read(files: dict, folders: dict) -> dict:
    """{what: path} of the files a run reads: files ({what: path or None}) as given, and the files
    directly in each folder ({what: folder or None}), named "<what>'s <file name>": a recording
    written over a model's weights destroys them as surely as one over its config.json."""
    read = {what: path for what, path in files.items() if path}
    for what, folder in folders.items():
        if not folder:
            continue
        try:
            with os.scandir(folder) as entries:
                for _, entry in zip(range(FOLDER_FILES_CHECKED), entries):
                    read.setdefault(f"{what}'s {entry.name}", entry.path)
        except OSError:  # gone or unreadable since it was opened: the run cannot read it either
            continue
    return read


def writable(path, inputs: dict | None = None) -> Path:
    """path, if a file can be written there and is none of inputs ({what: path}, the files the
    window reads); else ExportError with the reason."""
    try:
        check_output_path("export to", str(path), inputs)
    except ConfigError as exc:
        # the shared check speaks of a command's inputs; here they are the window's
        message = str(exc).removeprefix("export to ").replace("this command reads", "the window reads")
        # ... and names the path as given: a right-to-left override in it reversed the dialog's line
        raise ExportError(message.replace(str(path), said_path(path), 1)) from None
    except ValueError:  # a NUL or a lone surrogate in the name: the system looks up no such name
        raise ExportError(f"{said_path(path)}: no file can have this name (it holds a NUL or a character the "
                          "file system cannot encode); give another file name") from None
    return Path(path)


def write_whole(path, write, inputs: dict | None = None) -> Path:
    """Checks path (writable), then write(partial) fills a temporary file beside it, which is
    renamed over path only when write returns; on any failure path is left as it was."""
    path = writable(path, inputs)
    try:
        with atomic_output(path) as partial:
            write(partial)
    except OSError as exc:
        raise ExportError(f"{path}: {exc.strerror or exc}") from None
    except ConfigError as exc:
        raise ExportError(str(exc)) from None
    return path


def export_perfetto(recording_path, target, inputs: dict | None = None) -> str:
    """The recording at ``recording_path`` as a Chrome / Perfetto trace at ``target``; what was
    written, in words for the status bar. Written whole, never over the recording it reads."""
    from kvscope.app.lab.export.perfetto import write_perfetto
    from kvscope.app.lab.recording import Recording, RecordingError

    def write(partial) -> None:
        # its own reader: the replay's process reads the file through another one
        with Recording.open(recording_path) as recording:
            write_perfetto(recording, partial)

    try:
        write_whole(target, write, {**(inputs or {}), "recording": str(recording_path)})
    except (RecordingError, ValueError) as exc:
        raise ExportError(f"{target}: {exc}") from exc
    return f"{said_path(target)} (open it at ui.perfetto.dev)"
