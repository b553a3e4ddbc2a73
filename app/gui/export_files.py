"""File > Export without Qt: the file names offered, the check that a path can be written, the
error a dialog shows, the writing of a file whole or not at all, and the replayed recording saved
as a Perfetto trace.

Every export is written to a temporary file beside the target and renamed over it once complete
(output_path.atomic_output), so a full disk or a failed exporter leaves an existing file as it
was; a target that is a file the window reads (the open recording, the trace, a config.json) is
refused, as the commands refuse `kvscope export run.kvrec --perfetto run.kvrec`."""

from __future__ import annotations

import re
from pathlib import Path

from kvscope.app.lab.output_path import atomic_output, check_output_path
from kvscope.engine.config import ConfigError


class ExportError(Exception):
    """Why a file could not be written, in words for a dialog."""


def default_name(title: str, suffix: str) -> str:
    """'KV cache vs compute' -> 'kvscope-kv-cache-vs-compute.png'."""
    slug = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")
    return f"kvscope-{slug}{suffix}"


def writable(path, inputs: dict | None = None) -> Path:
    """path, if a file can be written there and is none of inputs ({what: path}, the files the
    window reads); else ExportError with the reason."""
    try:
        check_output_path("export to", str(path), inputs)
    except ConfigError as exc:
        raise ExportError(str(exc).removeprefix("export to ")) from None
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
    return f"{target} (open it at ui.perfetto.dev)"
