"""File > Record the run: the path asked for, checked like an export's (never a file the run reads),
and a recording that did not start or stopped said as the recording's failure, with Record unchecked.

Record is checked only while a recording may be running. A path is refused here, before the engine
is asked, when it cannot be written or is one of the run's inputs; the engine's process can still
fail to open it (a /proc file, a device) or fill it (/dev/full): that error comes back in a frame,
marked recording_stopped, and `show_failure` tells it from the engine's own errors: the engine keeps running, so the dialog
is about the recording, not "The engine stopped"."""

from __future__ import annotations

import os
import time
from pathlib import Path

from PySide6.QtWidgets import QFileDialog, QMessageBox

from kvscope.app.gui.export_files import ExportError, writable
from kvscope.app.lab.output_path import partials_of, replaces_in_place
from kvscope.app.lab.said_paths import said_short

DID_NOT_START = "Recording did not start"
STOPPED = "Recording stopped"
def target(window):
    """What File > Record records: the attached server when its page shows, else the live engine."""
    attached = window.attached
    showing = attached is not None and window.pages.currentWidget() is attached
    return attached if showing and attached.recording is None else window.live_worker


def recording(window):
    """What Record, unchecked, stops: the page that records, whichever page shows. It stopped what the
    page on screen would record: the server's recording, begun on its page, ran on unchecked from the
    Live run page, and the live engine's from the server's page."""
    attached = window.attached
    return attached if attached is not None and attached.recording_to is not None else window.live_worker


def why_not(window) -> str | None:
    """Why the live engine cannot be recorded now (none is built: a scenario's page opened the
    window, or the last Apply failed), or the attached page follows no server, else None."""
    if window.compare_showing():  # it recorded the live engine, paused behind the comparison shown
        return ("a comparison is not recorded: File > Record records the engine of the Live run page, or an "
                "attached server's page; go to that page to record it")
    page = target(window)
    if page is not window.live_worker:
        if page.failed:  # Record stayed checked over "Nothing to record: not attached to a server."
            return (f"the page follows no server now ({said_short(page.failure, 200)}); Reset (R) on the page "
                    "attaches again: record once it follows the server")
        return None
    if window.builds.failed is not None:
        return f"no engine is running: it could not be built ({window.builds.failed}); change the settings and Apply"
    if window.engine_info is None:
        if window.builds.awaiting:
            return "no engine is running yet: it is still being built; record once it runs"
        return "no engine is running yet: press Play (Space) or Apply (Ctrl+Enter) to build it, then record"
    return None


def toggle(window, checked: bool) -> None:
    """The Record action's slot (Qt has already checked or unchecked it)."""
    if not checked:
        stopped = recording(window)
        stopped.stop_recording()
        if stopped is window.attached:  # finished: no longer a file in progress (the live run's keeps its note)
            window.state.recording_path = None
        return
    reason = why_not(window)
    if reason is not None:  # before the file dialog: no file to choose for a run that is not there
        refuse(window, reason)
        return
    default = Path.home() / time.strftime("kvscope-%Y%m%d-%H%M%S.kvrec")
    path, _ = QFileDialog.getSaveFileName(window, "Record the run to", str(default), "kvscope recordings (*.kvrec)")
    if not path or not start(window, path):
        window.record_action.setChecked(False)


def start(window, path) -> bool:
    """Record from the current step; a run that is not there, a path that cannot be written or is
    a file the run reads is refused here with the reason, and Record left unchecked."""
    reason = why_not(window)
    if reason is None:
        try:
            writable(path, window.exports.inputs())
        except ExportError as exc:
            reason = str(exc)
    if reason is not None:
        refuse(window, reason)
        return False
    window.record_action.setChecked(True)
    window.state.recording_seen = False
    window.state.recording_path = str(path)  # no export may write over it meanwhile (ExportMenu.inputs)
    replaces = Path(path).exists() and replaces_in_place(path)
    window.state.recording_replaces_since = time.time() if replaces else None
    target(window).start_recording(str(path))
    return True


def refuse(window, reason: str) -> None:
    window.record_action.setChecked(False)
    QMessageBox.warning(window, DID_NOT_START, reason)


def kept_note(window, update, steps_recorded: int | None) -> str:
    """For the dialog of an engine that stopped while recording (its process killed): what the file
    keeps, read from it. Its recorder writes the steps in chunks of at most about a second of the
    run, so all but the last chunk are there, though the file was never finished. A recording begun
    over an existing file was written beside it: that one stays, and the new one is named."""
    from kvscope.app.lab.recording.reader import steps_held  # read only after a crash

    path = window.state.recording_path
    if not update.recording_ended or path is None:
        return ""
    since = window.state.recording_replaces_since
    written_to = path
    if since is not None:  # a second's slack: the file system's clock is coarser than time.time()
        partials = partials_of(path, since - 1.0)
        if not partials:
            return (f"{path} keeps the recording that was there before; the new one, written beside it until "
                    "complete, is gone.\n\n")
        written_to = partials[0]
    held = steps_held(written_to)
    of = f" of the {steps_recorded:,} recorded" if steps_recorded is not None else ""
    if since is not None:
        if not held:
            _remove(written_to)  # a header alone: nothing of the user's, nothing to replay
            return (f"{path} keeps the recording that was there before; the new one holds no step (the engine "
                    "stopped before the first were written, about a second into the recording).\n\n")
        written_to = _visible(written_to, Path(path))
        return (f"{path} keeps the recording that was there before. The new one was cut off: {written_to} keeps "
                f"the {held:,} steps written before the engine stopped{of}; File > Open recording... (Ctrl+O) "
                "replays them.\n\n")
    if not held:
        return (f"The recording {path} holds no step: the engine stopped before the first were written (about "
                "a second into the recording), so it has nothing to replay.\n\n")
    return (f"The recording {path} was cut off: it keeps the {held:,} steps written before the engine "
            f"stopped{of}; File > Open recording... (Ctrl+O) replays them.\n\n")


def _visible(partial: Path, path: Path) -> Path:
    """The cut-off recording written beside `path`, renamed from its hidden temporary name to one a
    file dialog shows ("NAME.cut-off.kvrec"); left as it is when that name is taken or not made."""
    shown = path.with_name(f"{path.stem}.cut-off{path.suffix or '.kvrec'}")
    try:
        if not shown.exists():
            os.rename(partial, shown)
            return shown
    except OSError:
        pass
    return partial


def _remove(partial: Path) -> None:
    try:
        partial.unlink()
    except OSError:
        pass


def show_failure(window, frame, was_recording: bool) -> bool:
    """If the frame's error is its recording's (the engine's process marks it recording_stopped):
    Record unchecked, a dialog about the recording (the run goes on, so Play is left as it is), and
    True; else False, for the window to show it as the engine's."""
    if not (frame.error and frame.recording_stopped):
        return False
    title = STOPPED if was_recording else DID_NOT_START
    window.record_action.setChecked(False)
    box = QMessageBox(QMessageBox.Warning, title, f"{frame.error}\n\nThe run goes on; File > Record the run "
                      "(Ctrl+Shift+R) records it to another file.", parent=window)
    box.setModal(False)  # it came with a frame: a modal loop here would run the frame timer inside it
    box.open()
    return True
