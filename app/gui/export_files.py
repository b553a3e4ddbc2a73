"""File > Export without Qt: the file names offered, the check that a path can be written, the
error a dialog shows, and the replayed recording saved as a Perfetto trace."""

from __future__ import annotations

import re
from pathlib import Path

from kvscope.app.lab.output_path import check_output_path
from kvscope.engine.config import ConfigError


class ExportError(Exception):
    """Why a file could not be written, in words for a dialog."""


def default_name(title: str, suffix: str) -> str:
    """'KV cache vs compute' -> 'kvscope-kv-cache-vs-compute.png'."""
    slug = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")
    return f"kvscope-{slug}{suffix}"


def writable(path) -> Path:
    """path, if a file can be written there; else ExportError with the reason."""
    try:
        check_output_path("export to", str(path))
    except ConfigError as exc:
        raise ExportError(str(exc).removeprefix("export to ")) from None
    return Path(path)


def export_perfetto(recording_path, target) -> str:
    """The recording at ``recording_path`` as a Chrome / Perfetto trace at ``target``; what was
    written, in words for the status bar."""
    from kvscope.app.lab.export.perfetto import write_perfetto
    from kvscope.app.lab.recording import Recording, RecordingError

    writable(target)
    try:
        # its own reader: the replay thread is reading the file through the other one
        with Recording.open(recording_path) as recording:
            write_perfetto(recording, target)
    except (RecordingError, OSError, ValueError) as exc:
        raise ExportError(f"{target}: {exc}") from exc
    return f"{target} (open it at ui.perfetto.dev)"
