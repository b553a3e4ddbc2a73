"""The one dialog a page says its engine's errors in.

An engine, a replay or a comparison that fails on every frame opened a new dialog each frame: a
recording cut short or replaced while it was replayed failed each time the window asked for its
snapshot, and Play left hundreds of "The engine stopped" dialogs stacked on the window. Here one
dialog is kept: an error while it is open changes its text (the same error again changes nothing),
and one after it was closed opens it again."""

from __future__ import annotations

from PySide6.QtWidgets import QMessageBox


def first_line(error: str) -> str:
    """A traceback's last line (the exception), else the error as it is."""
    return error.strip().splitlines()[-1] if "Traceback" in error else error


class ErrorBox:
    def __init__(self, parent):
        self.parent = parent
        self._box: QMessageBox | None = None

    @property
    def box(self) -> QMessageBox | None:
        """The dialog while it is open, else None."""
        return self._box if self._box is not None and self._box.isVisible() else None

    def show(self, title: str, error: str, advice: str) -> None:
        """Says `error` under `title`, with `advice` (what the user can do next) below it."""
        text = f"{first_line(error)}\n\n{advice}"
        details = error if "Traceback" in error else ""
        box = self._box
        if box is None:
            box = self._box = QMessageBox(QMessageBox.Warning, title, text, parent=self.parent)
            box.setModal(False)  # it came with a frame: a modal loop here would run the frame timer inside it
        elif box.isVisible() and (box.windowTitle(), box.text(), box.detailedText()) == (title, text, details):
            return
        box.setWindowTitle(title)
        box.setText(text)
        box.setDetailedText(details)
        if not box.isVisible():
            box.open()
