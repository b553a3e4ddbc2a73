"""After an Apply whose engine could not be built: what the window shows, and what Play and Step say.

The engine's process answers a failed build with an error frame and no engine: the live page
still held the previous run's picture, Play turned to "Pause" over nothing and Step did nothing.
A banner above the views now says the engine could not be built and that what they show is the
previous run (kept, not cleared: it is what the user had); the status line says so too, and Play
and Step say why they cannot run until an Apply builds an engine."""

from __future__ import annotations

from PySide6.QtWidgets import QLabel, QMessageBox

from kvscope.app.host.session import BUILD_FAILED_STATUS
from kvscope.widgets.palette import hex_color

REASON_CHARS = 300  # a trace's whole path and reason; a longer one is in the dialog's details


def first_line(error: str) -> str:
    """The line that says what went wrong: a traceback's last, else the text itself."""
    text = error.strip()
    return text.splitlines()[-1] if "Traceback" in text else text


class BuildWatch:
    """Tells a failed build from the engine's other errors: an error frame after an Apply and
    before that Apply's engine reported is the build's."""

    def __init__(self, window):
        self.window = window
        self.awaiting = False  # an Apply was sent and no engine has reported since
        self.failed: str | None = None  # why the last build failed, until an engine reports
        self.banner = QLabel()
        self.banner.setWordWrap(True)
        self.banner.hide()
        window.panels.page.layout().insertWidget(0, self.banner)

    def applied(self) -> None:
        self.awaiting = True

    def take(self, frame, update) -> bool:
        """Fold in one frame of the live engine; True when its error is a failed build (said here)."""
        if update.new_engine:
            self.awaiting = False
            self.failed = None
            self.banner.hide()
            return False
        if not (self.awaiting and frame.error and frame.status == BUILD_FAILED_STATUS):
            return False  # another error (an old recording stopping) is not this Apply's
        self.awaiting = False
        reason = first_line(frame.error)
        self.failed = reason if len(reason) <= REASON_CHARS else reason[:REASON_CHARS] + " ..."
        self._mark_previous_run()
        self._dialog(frame.error)
        return True

    def set_theme(self, theme) -> None:
        """The banner in the theme's warning colour: styled once, it kept the dark theme's red on the
        light and high-contrast themes after View > Theme or demo mode."""
        colour = hex_color(theme.warning)
        self.banner.setStyleSheet(f"color: {colour}; border: 1px solid {colour}; padding: 4px; font-weight: bold;")

    def _mark_previous_run(self) -> None:
        w = self.window
        self.set_theme(w.theme)
        self.banner.setText(f"No engine: it could not be built ({self.failed}). The views below show the previous "
                            "run, stopped. Change the settings and Apply (Ctrl+Enter).")
        self.banner.show()
        w.setWindowTitle("kvscope \u2014 no engine (the last Apply failed)")
        w.play_action.setText("Play")

    def _dialog(self, error: str) -> None:
        box = QMessageBox(QMessageBox.Warning, "The engine could not be built",
                          f"{first_line(error)}\n\nThe views keep the previous run, stopped: change a setting "
                          "and apply.", parent=self.window)
        if "Traceback" in error:
            box.setDetailedText(error)
        box.setModal(False)  # it came with a frame: a modal loop here would run the frame timer inside it
        box.open()

    # A recording opened after a failed build is not the previous run, and Step steps it: the banner,
    # the status line's "no engine" and the refusal wait until the live engine is shown again.
    def _replaying(self) -> bool:
        return self.window.replay_path is not None

    def set_replaying(self, on: bool) -> None:
        """A recording was opened (on) or closed: the banner hides while it shows, and comes back
        after it while the live engine is still the one that could not be built."""
        self.banner.setVisible(not on and self.failed is not None)

    def status_line(self, text: str) -> str:
        """The status line: after a failed build it says first that its numbers are the previous run's."""
        if self.failed is None or self._replaying():
            return text
        return f"no engine (the last Apply failed); the previous run: {text}"

    def refused(self, what: str) -> bool:
        """Play or Step with no engine after a failed build: says why in the status bar, and True."""
        if self.failed is None or self._replaying():
            return False
        self.window.statusBar().showMessage(
            f"cannot {what}: there is no engine, it could not be built ({self.failed}); change the settings "
            "and Apply (Ctrl+Enter)", 10000)
        return True
