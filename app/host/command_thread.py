"""A worker thread driven by the window's commands: play, pause, step_once, set_speed and stop
go through a queue; while playing the thread advances its work between commands. The replay of
a recording and a comparison run this way (the live engine runs in its own process instead)."""

from __future__ import annotations

import queue
import threading

IDLE_WAIT_S = 0.05  # while paused, the thread waits this long for a command at a time


class CommandThread:
    def __init__(self, name: str):
        self._commands: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None
        self._thread_name = name
        self._playing = False

    # -- commands, from the GUI thread ----------------------------------------------------------
    def play(self) -> None:
        self._commands.put(("play", None))

    def pause(self) -> None:
        self._commands.put(("pause", None))

    def step_once(self) -> None:
        self._commands.put(("step", None))

    def set_speed(self, speed: float) -> None:
        self._commands.put(("speed", speed))

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _start_thread(self) -> None:
        self._thread = threading.Thread(target=self._loop, name=self._thread_name, daemon=True)
        self._thread.start()

    def _stop_thread(self, timeout: float) -> None:
        self._commands.put(("stop", None))
        if self._thread is not None:
            self._thread.join(timeout)

    # -- the thread -------------------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            try:
                command, arg = self._commands.get_nowait() if self._playing else self._commands.get(timeout=IDLE_WAIT_S)
            except queue.Empty:
                command, arg = None, None
            if command == "stop":
                return
            self._run(command, arg)

    def _run(self, command: str | None, arg) -> None:
        """One turn of the loop: a command if one came, else a piece of work."""
        if command is not None:
            self._handle(command, arg)
        elif self._playing:
            self._advance()
        else:
            self._idle()

    def _handle(self, command: str, arg) -> None:
        raise NotImplementedError

    def _advance(self) -> None:
        raise NotImplementedError

    def _idle(self) -> None:
        """Paused with no command: nothing by default."""
