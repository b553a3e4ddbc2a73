"""The engine in its own process, so drawing never takes time from it.

In one process the window and a CPU-bound engine share one interpreter lock: the window's frames
cost the engine ~45 % of its speed however little they drew. Here the engine process runs an
EngineSession flat out on its own core; the window sends it commands over a pipe and asks for one
frame at a time. The engine process checks the pipe about once a millisecond of its own time (every
10 ms while a frame is being sent) and answers a frame request with the FrameDelta pickled, its numpy arrays sent as raw buffers beside
the pickle (a 500,000-block snapshot is 11 MB: copying it into one pickle cost 12 ms), written by
a thread (FrameSender). One request is in flight at a time, and the window asks again no sooner
than FRAME_COST_FACTOR times what the last frame cost the engine, so frames take at most ~1/40
of the engine's time however big the batch or the pool. An engine of cheap steps (simulated, at
maximum speed) keeps no steps between frames: asked for a frame, it keeps the next STEPS_KEPT
and then answers.
"""

from __future__ import annotations

import multiprocessing
import pickle
import queue
import signal
import sys
import threading
import time

from kvscope.app.host.session import STEPS_KEPT, EngineSession, FrameDelta, RunConfig
from kvscope.app.host.process_tuning import tune_for_engine

COMMAND_POLL_S = 0.001  # while playing, the engine looks at the pipe this often (wall time)
BUSY_POLL_S = 0.01  # ... and while a frame is being sent, this often
SENDER_SWITCH_INTERVAL_S = 0.001  # how soon the sender thread gets the interpreter back between writes
IDLE_POLL_S = 0.05  # while paused it blocks on the pipe this long at a time
FRAME_COST_FACTOR = 40  # the next frame request waits >= 40x the engine-side cost of the last one
STOP_TIMEOUT_S = 5.0


def encode_frame(frame: FrameDelta) -> list:
    """The messages that carry a frame: a count and the pickle, then each array's memory as is."""
    buffers = []
    head = pickle.dumps(frame, protocol=5, buffer_callback=buffers.append)
    return [len(buffers).to_bytes(4, "little") + head] + [b.raw() for b in buffers]


def decode_frame(first: bytes, receive_buffer) -> FrameDelta:
    count = int.from_bytes(first[:4], "little")
    return pickle.loads(memoryview(first)[4:], buffers=[receive_buffer() for _ in range(count)])


class FrameSender:
    """Writes frames to the pipe from a thread. A frame of megabytes fills the pipe's buffer and
    the write waits until the window reads it, up to a frame interval: the thread waits, not the
    engine. While it sends, the engine must not look at the pipe: each look lets go of the
    interpreter lock and takes it straight back, which resets the sender's claim on the lock --
    polling once a millisecond, a 800 KB frame took 150-500 ms to cross instead of ~10 ms."""

    def __init__(self, conn):
        self._conn = conn
        self._outbox: queue.Queue = queue.Queue()
        self._busy = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kvscope-frames", daemon=True)
        self._thread.start()

    @property
    def busy(self) -> bool:
        return self._busy.is_set() and self._thread.is_alive()

    def send(self, messages: list) -> None:
        self._busy.set()
        self._outbox.put(messages)

    def close(self) -> None:
        self._outbox.put(None)
        self._thread.join(0.2)  # a frame the window will never read must not hold up the exit

    def _run(self) -> None:
        while (messages := self._outbox.get()) is not None:
            try:
                for message in messages:
                    self._conn.send_bytes(message)
            except OSError:  # the window is gone; the engine notices on its next read
                return
            finally:
                self._busy.clear()


def serve(conn) -> None:
    """The engine process: commands in, frames out, until told to stop or the window is gone."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl+C in a terminal is the window's to handle
    tune_for_engine()
    # Between two writes of a frame the sender thread waits for the interpreter lock, up to this
    # long (the default is 5 ms). Only a waiting thread makes the engine let go, so a shorter
    # interval costs nothing while no frame is being sent.
    sys.setswitchinterval(SENDER_SWITCH_INTERVAL_S)
    sender = FrameSender(conn)
    try:
        _serve_commands(conn, sender)
    finally:
        sender.close()


def _serve_commands(conn, sender: FrameSender) -> None:
    session = EngineSession()
    frame_cost = 0.0  # smoothed engine-side seconds per frame
    frame_due_at_step = None  # a frame asked for, going out once the engine has kept the steps it shows
    next_busy_poll = 0.0
    try:
        while True:
            wait = IDLE_POLL_S
            if session.playing and session.engine is not None:
                wait = session.advance(COMMAND_POLL_S)
            if frame_due_at_step is not None and not (session.flat_out and session.engine.step_count < frame_due_at_step):
                frame_cost = _send_frame(session, sender, frame_cost)
                frame_due_at_step = None
            if wait == 0 and sender.busy:
                # See FrameSender: while it sends, look at the pipe only every BUSY_POLL_S. A frame
                # the window never reads (it is closing) must not keep "stop" from being read.
                now = time.perf_counter()
                if now < next_busy_poll:
                    continue
                next_busy_poll = now + BUSY_POLL_S
            if not conn.poll(wait):
                continue
            command, arg = conn.recv()
            if command == "stop":
                session.handle("stop_recording", None)  # a recording in progress is finished, not lost
                return
            if command == "frame" and session.flat_out and session.cheap_steps:
                # Steps this cheap are kept only when asked for (holding the newest STEPS_KEPT all
                # the time cost ~10 % of the engine's speed): the frame goes out after the next ones.
                session.keep_history_for_next_frame()
                frame_due_at_step = session.engine.step_count + STEPS_KEPT
                continue
            if command != "frame":
                session.handle(command, arg)
                if frame_due_at_step is None:
                    continue
                # else a frame is due, and after a new engine or a pause the window wants it now
            frame_cost = _send_frame(session, sender, frame_cost)
            frame_due_at_step = None
    except (EOFError, OSError):  # the window went away without saying goodbye
        return


def _send_frame(session: EngineSession, sender: FrameSender, frame_cost: float) -> float:
    """Hands the frame to the sender thread; returns the smoothed cost of frames so far."""
    started = time.perf_counter()
    # Only an engine running flat out loses time to frames; a paced one waits anyway. The window
    # asks again no sooner than FRAME_COST_FACTOR x the cost it is told.
    flat_out = session.flat_out
    frame = session.take_frame(keep_history=not (flat_out and session.cheap_steps))
    frame.build_cost_s = frame_cost if flat_out else 0.0
    sender.send(encode_frame(frame))  # snapshot arrays are fresh copies: safe to send from a thread
    # smoothed: the summary's percentiles make one frame in thirty several times dearer
    return 0.8 * frame_cost + 0.2 * (time.perf_counter() - started)


class EngineProcess:
    """The window's handle on the engine process; every method returns at once."""

    def __init__(self):
        self._context = multiprocessing.get_context("spawn")  # fork is unsafe in a Qt (threaded) process
        self._process = None
        self._conn = None
        self._awaiting_frame = False
        self._next_request_at = 0.0
        self._reported_exit = False
        self._stopped = False

    def start(self) -> None:
        parent_conn, child_conn = self._context.Pipe()
        self._process = self._context.Process(target=serve, args=(child_conn,), name="kvscope-engine", daemon=True)
        self._process.start()
        child_conn.close()
        self._conn = parent_conn
        self._awaiting_frame = False
        self._reported_exit = False

    def _send(self, command: str, arg=None) -> None:
        if self._stopped:
            return
        if not self.alive:
            self.start()  # after a crash of the engine process the next command starts a fresh one
        try:
            self._conn.send((command, arg))
        except (BrokenPipeError, OSError):
            pass  # the process died just now; take_frame reports it

    def apply(self, config: RunConfig, play: bool = True) -> None:
        self._send("apply", (config, play))

    def play(self) -> None:
        self._send("play")

    def pause(self) -> None:
        self._send("pause")

    def step_once(self) -> None:
        self._send("step")

    def set_speed(self, speed: float) -> None:
        self._send("speed", speed)

    def start_recording(self, path: str) -> None:
        """Record the run from its current step to path (.kvrec) until stop_recording, a rebuild
        or the end of the workload."""
        self._send("record", str(path))

    def stop_recording(self) -> None:
        self._send("stop_recording")

    def inject_failure(self, message: str) -> None:
        """Make the engine's next step raise: how the self-test and tests check error handling."""
        self._send("fail", message)

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        self._stopped = True
        if self._process is None:
            return
        try:
            self._conn.send(("stop", None))
        except (BrokenPipeError, OSError):
            pass
        deadline = time.monotonic() + timeout
        while self._process.is_alive() and time.monotonic() < deadline:
            try:  # a frame on its way is read and dropped: its writer must finish before the engine stops
                while self._conn.poll(0.02):
                    self._conn.recv_bytes()
            except (EOFError, OSError):
                pass
            self._process.join(0.02)
        if self._process.is_alive():
            self._process.terminate()
            self._process.join(1.0)
        self._conn.close()

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.is_alive()

    def take_frame(self) -> FrameDelta | None:
        """The newest frame if one has arrived (else None), and the request for the next."""
        frame = None
        if self._process is None:
            return None
        if not self.alive:
            if self._reported_exit:
                return None
            self._reported_exit = True
            return FrameDelta(error=f"The engine process exited unexpectedly (exit code {self._process.exitcode}); "
                                    "apply the settings to start a new one.", status="the engine process stopped")
        try:
            if self._awaiting_frame and self._conn.poll():
                frame = decode_frame(self._conn.recv_bytes(), self._conn.recv_bytes)
                self._awaiting_frame = False
                self._next_request_at = time.perf_counter() + FRAME_COST_FACTOR * frame.build_cost_s
            if not self._awaiting_frame and time.perf_counter() >= self._next_request_at:
                self._conn.send(("frame", None))
                self._awaiting_frame = True
        except (EOFError, OSError):
            pass  # reported on the next call, once the process is seen to be gone
        return frame
