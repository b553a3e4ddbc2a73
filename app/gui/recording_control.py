"""File > Record the run: the path asked for, checked like an export's (never a file the run reads),
and a recording that did not start or stopped said as the recording's failure, with Record unchecked.

Record is checked only while a recording may be running. A path is refused here, before the engine
is asked, when it cannot be written or is one of the run's inputs; the engine's process can still
fail to open it (a /proc file, a device) or fill it (/dev/full): that error comes back in a frame,
marked recording_stopped, and `show_failure` tells it from the engine's own errors: the engine keeps running, so the dialog
is about the recording, not "The engine stopped"."""

from __future__ import annotations

import time
from pathlib import Path

from PySide6.QtWidgets import QFileDialog, QMessageBox

from kvscope.app.gui.export_files import ExportError, writable
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
    target(window).start_recording(str(path))
    return True


def refuse(window, reason: str) -> None:
    window.record_action.setChecked(False)
    QMessageBox.warning(window, DID_NOT_START, reason)


def kept_note(window, update, steps_recorded: int | None) -> str:
    """For the dialog of an engine that stopped while recording (its process killed): what the file
    keeps. Its recorder writes the steps in chunks of at most about a second of the run, so all but
    the last chunk are there, though the file was never finished."""
    path = window.state.recording_path
    if not update.recording_ended or path is None:
        return ""
    of = f" of the {steps_recorded:,} recorded" if steps_recorded is not None else ""
    return (f"The recording {path} was cut off: it keeps the steps written before the engine stopped (all but "
            f"about the last second of the run{of}); File > Open recording... (Ctrl+O) replays them.\n\n")


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
