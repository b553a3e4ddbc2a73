"""A recording replayed in the main window in place of the live engine: File > Open recording,
the replay's scrubber and its Play, and File > Back to the live engine. A replay needs no model:
its process (host/replay.py) reads the file, and the (disabled) settings form shows what the
recording ran with until the live engine is shown again."""

from __future__ import annotations

import time

from PySide6.QtWidgets import QFileDialog, QMessageBox

from kvscope.app.host.process_host import SessionHost
from kvscope.app.lab.said_paths import os_error_text

SEEK_SETTLE_S = 0.5  # the scrubber waits this long at most for a seek to be taken before following again


class ReplayControls:
    """MainWindow's recordings: ``replay_path`` is the open recording (None: the live engine shows),
    ``worker`` its replay while it is open and ``live_worker`` the live engine throughout."""

    def ask_open_recording(self) -> bool:
        path, _ = QFileDialog.getOpenFileName(self, "Open a recording", "",
                                              "kvscope recordings (*.kvrec);;all files (*)")
        return bool(path) and self.open_recording(path)

    def open_recording(self, path) -> bool:
        """Replay a recorded run in place of the engine: no model, no GPU. A file that cannot be
        read leaves the window as it was, with a dialog giving the reader's reason."""
        from kvscope.app.lab.recording import RecordingError
        from kvscope.app.lab.recording.records import is_attached, read_header

        from kvscope.app.gui.attach_view import recording_in_progress
        from kvscope.app.host.replay import ReplaySession, read_replay_info

        writing = recording_in_progress(self, path)
        if writing is not None:  # opened half-written, it was said to be cut short
            QMessageBox.warning(self, "Cannot open the recording", f"{writing}.\n\nThe window keeps what it showed.")
            return False
        try:
            if is_attached(read_header(path)):  # a recorded vLLM server: its own page (attach_view.py)
                from kvscope.app.gui.attach_view import open_attached_replay

                return open_attached_replay(self, path)
            info = read_replay_info(path)
        except (RecordingError, OSError, ValueError) as exc:  # ValueError: a NUL in the name
            reason = str(exc) if isinstance(exc, RecordingError) else os_error_text(path, exc)
            QMessageBox.warning(self, "Cannot open the recording", f"{reason}\n\nThe window keeps what it showed.")
            return False
        if self.replay_path is not None:
            self.worker.stop()
        else:
            self.live_worker.pause()
            self._values_before_replay = self.settings.values()
        # the (disabled) form shows what the recording ran with, not the live settings
        self.settings_form.show_recorded(info.engine_info)
        self.worker = SessionHost(ReplaySession, name="replay")
        self.replay_path = str(path)
        self.done = False
        self.worker.start()
        self.worker.set_speed(self.speed.currentData())
        self.worker.apply(info.path, play=False)
        self.scrubber.set_recording(info.num_steps, info.end_times, info.steps_before)
        self._set_replay_mode(True)
        # opened where the pool holds something: at step 0 it is empty (a scripted screenshot was too)
        self._seek(info.opening_position)
        self.scrubber.set_position(info.opening_position)
        self.pages.setCurrentIndex(0)
        self.play_action.setText("Play")
        if info.warning:
            self.statusBar().showMessage(info.warning, 10000)
        return True

    def close_recording(self) -> None:
        """Back to the live engine, rebuilt with the settings in the panel."""
        if self.replay_path is None:
            return
        self.worker.stop()
        self.worker = self.live_worker
        self.replay_path = None
        self._set_replay_mode(False)
        self.settings_form.leave_recorded(self._values_before_replay)
        self.apply_settings(play=False)
        self.play_action.setText("Play")

    def _set_replay_mode(self, on: bool) -> None:
        why = ("a recording replays exactly as it was recorded: its settings cannot change. "
               "File > Back to the live engine (Ctrl+L) runs the engine again.")
        self.settings_dock.widget().setEnabled(not on)
        self.settings_dock.widget().setToolTip(why if on else "")
        self.seed.setEnabled(not on)
        self.seed.setToolTip(why if on else "random seed of the workload: the same seed replays the same run")
        self.apply_action.setEnabled(not on)
        self.reset_action.setToolTip("back to the start of the recording (R)" if on else
                                     "rebuild the engine and restart the workload with this seed (R)")
        self.live_action.setEnabled(on)
        self.record_action.setEnabled(not on)
        self.export_actions["perfetto"].setEnabled(on)
        self.replay_bar.setVisible(on)
        self.show_run_controls_use()  # a recording is paced by it, whatever backend it recorded
        self.builds.set_replaying(on)
        if on:
            self.scrubber_timer.start()
        else:
            self.scrubber_timer.stop()

    def _seek(self, position: int) -> None:
        if self.replay_path is None:
            return
        self.worker.seek(position)
        self.done = position >= self.scrubber.num_steps
        self._seek_target = (position, time.perf_counter())

    def _follow_replay(self) -> None:
        if self.replay_path is None:
            return
        position = self.worker.position  # as of the replay's newest frame
        if position is None:
            return
        if self._seek_target is not None:
            # until a frame after the seek has come, its position is the old one: the slider would jump back
            target, asked = self._seek_target
            if position != target and time.perf_counter() - asked < SEEK_SETTLE_S:
                return
            self._seek_target = None
        self.scrubber.set_position(position)

    def toggle_replay(self) -> None:
        if self.play_action.text() == "Pause":
            self.worker.pause()
            self.play_action.setText("Play")
            return
        if self.done:  # at the end: play it again from the start
            self.worker.seek(0)
            self.done = False
        self.worker.play()
        self.play_action.setText("Pause")
