"""Any session (protocol.py) in a process of its own, so drawing never takes time from it.

In one process the window and a CPU-bound engine share one interpreter lock: the window's frames
cost the engine ~45 % of its speed however little they drew. Here the session runs in a spawned
process on its own core; the window sends it commands over a pipe and asks for one frame at a
time. The process checks the pipe about once a millisecond of its own time (every 10 ms while a
frame is being sent) and answers a frame request with the frame pickled, its big numpy arrays
sent as raw buffers beside the pickle, written by a thread (FrameSender). One request is in
flight at a time, and the window asks again no sooner than FRAME_COST_FACTOR times what the last
frame cost a session running flat out, so frames take at most ~1/60 of its time however big the
batch or the pool. When such a session, on one core (Session.core_bound), says it is short of
CPU -- its process had less than STARVED_CORE_SHARE of a core since its last frame: other
processes want the cores too -- the window also waits WINDOW_SHARE_FACTOR times the CPU time it
spent on the last frame (from the frame's arrival to the next take_frame, by then drawn): a fast
run's frame takes it 20 - 40 ms to draw, each taken from the engine on a busy machine. The window
then uses at most ~1/10 of a core for frames; with a core to spare it draws as often as before.
The live engine, a replay and a comparison all run this way.
"""

from __future__ import annotations

import multiprocessing
import queue
import select
import signal
import sys
import threading
import time

from kvscope.app.host.process_tuning import tune_for_engine
from kvscope.app.host.protocol import (
    APPLY,
    FAIL,
    FRAME,
    NEW_PICTURE,
    PAUSE,
    PLAY,
    RECORD,
    SEEK,
    SPEED,
    STEP,
    STOP,
    STOP_RECORDING,
    SUBMIT_PROMPT,
    WHOLE_SNAPSHOT,
    Frame,
    Session,
    decode_frame,
    encode_frame,
)
from kvscope.app.host.session_blocks import SnapshotRebuilder

COMMAND_POLL_S = 0.001  # while playing, the session looks at the pipe this often (wall time)
BUSY_POLL_S = 0.01  # ... and while a frame is being sent, this often
SENDER_SWITCH_INTERVAL_S = 0.001  # how soon the sender thread gets the interpreter back between writes
IDLE_POLL_S = 0.05  # while paused it blocks on the pipe this long at a time
# The next frame request waits >= 60x the session-side cost of the last one: frames take at most
# 1/60 of a flat-out engine (1/40 cost it 5 - 6 % with the window's drawing and the rest; issue 15).
FRAME_COST_FACTOR = 60
WINDOW_SHARE_FACTOR = 10  # ... and, behind a session short of CPU, >= 10x the window's CPU time for the last one
STARVED_CORE_SHARE = 0.95  # a flat-out session's process with less of a core than this is short of CPU
STOP_TIMEOUT_S = 5.0


class FrameSender:
    """Writes frames to the pipe from a thread. A frame of megabytes fills the pipe's buffer and
    the write waits until the window reads it, up to a frame interval: the thread waits, not the
    session. While it sends, the session must not look at the pipe: each look lets go of the
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
            except OSError:  # the window is gone; the session notices on its next read
                return
            finally:
                self._busy.clear()


def serve(conn, session_class: type[Session]) -> None:
    """The session's process: commands in, frames out, until told to stop or the window is gone."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl+C in a terminal is the window's to handle
    tune_for_engine()
    # Between two writes of a frame the sender thread waits for the interpreter lock, up to this
    # long (the default is 5 ms). Only a waiting thread makes the session let go, so a shorter
    # interval costs nothing while no frame is being sent.
    sys.setswitchinterval(SENDER_SWITCH_INTERVAL_S)
    sender = FrameSender(conn)
    session = session_class()
    session.restart_snapshot_changes()  # the host's SnapshotRebuilder keeps the window's copy of the blocks
    try:
        _serve_commands(conn, sender, session)
    finally:
        try:
            session.close()
        finally:
            sender.close()


def _pipe_poller(conn):
    """readable(wait): whether a command waits in the pipe, waiting up to `wait` seconds. A flat-out
    session looks about a thousand times a second: Connection.poll(0) builds a selector each time
    (~4 us, ~0.4 % of the engine), one poll object registered once answers in ~0.5 us."""
    if not hasattr(select, "poll"):  # Windows: its pipes are not selectable
        return conn.poll
    poller = select.poll()
    poller.register(conn.fileno(), select.POLLIN)  # a closed pipe reports POLLHUP: recv() then raises EOFError

    def readable(wait: float) -> bool:
        return bool(poller.poll(0)) if wait == 0 else conn.poll(wait)

    return readable


class _FrameCosts:
    """What frames cost the session, told to the window in each: the smoothed seconds it takes to
    make one, and the share of a core its process had since the previous one."""

    def __init__(self):
        self.build_s = 0.0
        self._last = (time.perf_counter(), time.process_time())

    def stamp(self, frame: Frame, flat_out: bool, core_bound: bool) -> None:
        wall, cpu = time.perf_counter(), time.process_time()
        last_wall, last_cpu = self._last
        self._last = (wall, cpu)
        # Only a session running flat out loses time to frames; a paced one waits anyway (and
        # leaves its core idle meanwhile, so its share says nothing).
        frame.build_cost_s = self.build_s if flat_out else 0.0
        frame.core_share = (cpu - last_cpu) / (wall - last_wall) if core_bound and wall > last_wall else None

    def playing_started(self) -> None:
        """A share since a frame made before a pause would count the pause as cores lost, and
        the window would hold off its first frames after Play (10x its drawing each)."""
        self._last = (time.perf_counter(), time.process_time())

    def took(self, seconds: float) -> None:
        # smoothed: the summary's percentiles make one frame in thirty several times dearer
        self.build_s = 0.8 * self.build_s + 0.2 * seconds


class _PlayClock:
    """Wall seconds the session has played: from the moment the host reads Play (or sees it
    playing) to the moment it reads Pause (or sees it stop), so a frame can say exactly how long
    the steps it reports took to make (`kvscope bench gui` divides by it)."""

    def __init__(self):
        self._played_s = 0.0
        self._since: float | None = None  # perf_counter() when playing was last seen to start

    def observe(self, playing: bool) -> bool:
        """Whether the session has just started playing."""
        if playing and self._since is None:
            self._since = time.perf_counter()
            return True
        if not playing and self._since is not None:
            self._played_s += time.perf_counter() - self._since
            self._since = None
        return False

    @property
    def played_s(self) -> float:
        return self._played_s + (time.perf_counter() - self._since if self._since is not None else 0.0)


def _serve_commands(conn, sender: FrameSender, session: Session) -> None:
    readable = _pipe_poller(conn)
    costs = _FrameCosts()
    clock = _PlayClock()
    frame_asked = False  # a frame asked for, going out once the session is ready to answer
    generation = 0  # apply and seek commands so far: stamped on each frame
    next_busy_poll = 0.0
    try:
        while True:
            wait = IDLE_POLL_S
            if session.playing:
                wait = session.advance(COMMAND_POLL_S)
                clock.observe(session.playing)  # a workload that ended stops it
            if frame_asked and session.frame_ready():
                _send_frame(session, sender, costs, generation, clock)
                frame_asked = False
            if wait == 0 and sender.busy:
                # See FrameSender: while it sends, look at the pipe only every BUSY_POLL_S. A frame
                # the window never reads (it is closing) must not keep "stop" from being read.
                now = time.perf_counter()
                if now < next_busy_poll:
                    continue
                next_busy_poll = now + BUSY_POLL_S
            if not readable(wait):
                continue
            command, arg = conn.recv()
            if command == STOP:
                return
            if command == FRAME:
                if arg == WHOLE_SNAPSHOT:
                    session.restart_snapshot_changes()
                session.frame_requested()
                frame_asked = True
                if not session.frame_ready():
                    continue
            else:
                generation += command in NEW_PICTURE
                session.handle(command, arg)
                if clock.observe(session.playing):
                    costs.playing_started()
                if not frame_asked:
                    continue
                # else a frame is due, and after a new engine or a pause the window wants it now
            _send_frame(session, sender, costs, generation, clock)
            frame_asked = False
    except (EOFError, OSError):  # the window went away without saying goodbye
        return


def _send_frame(session: Session, sender: FrameSender, costs: _FrameCosts, generation: int,
                clock: _PlayClock) -> None:
    """Hands the frame to the sender thread, with what frames cost (the window asks again no
    sooner than FRAME_COST_FACTOR x the cost it is told)."""
    started = time.perf_counter()
    flat_out, core_bound = session.flat_out, session.core_bound
    frame = session.take_frame()
    costs.stamp(frame, flat_out, core_bound)
    frame.generation = generation
    frame.played_s = clock.played_s
    sender.send(encode_frame(frame))  # snapshot arrays are fresh copies: safe to send from a thread
    costs.took(time.perf_counter() - started)


def exit_cause(exitcode: int | None) -> str:
    """How a process ended, in words: "signal 9, SIGKILL" (killed: the OOM killer, kill -9) or "exit code 1"."""
    if exitcode is None:
        return "no exit status"
    if exitcode < 0:
        try:
            return f"signal {-exitcode}, {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"signal {-exitcode}"
    return f"exit code {exitcode}"


class SessionHost:
    """The window's handle on a session in its own process; every method returns at once.

    session_class is built with no arguments in the new process (so it must be importable there);
    apply() gives it what to run. After a crash of the process the next command starts a fresh one."""

    def __init__(self, session_class: type[Session], name: str = "engine"):
        self.session_class = session_class
        self.name = name
        self.position: int | None = None  # a replay's position, as of the newest frame
        self.played_s = 0.0  # seconds the session has played, as of the newest frame (Frame.played_s)
        self.config = None  # what the newest apply() built from
        self._context = multiprocessing.get_context("spawn")  # fork is unsafe in a Qt (threaded) process
        self._process = None
        self._conn = None
        self._awaiting_frame = False
        self._next_request_at = 0.0
        # behind a session short of CPU: (wall clock, this process's CPU time) when the last frame
        # came, until the next take_frame turns what was spent since into a hold-off
        self._share_since: tuple[float, float] | None = None
        self._generation = 0  # apply and seek commands sent: frames made before the newest are stale
        self._reported_exit = False
        self._stopped = False
        self._snapshots = SnapshotRebuilder()
        self._whole_snapshot_due = False  # a frame's snapshot could not be rebuilt: ask for a whole one
        # Play, Pause and Step sent, and what the last of them left: a frame asked for before the
        # newest of them may have been made before the process read it, and its `playing` is then
        # the state the user just changed (a Pause label flipped back, a committed guess "paused")
        self._run_commands = 0
        self._commanded_playing: bool | None = None
        self._asked_at_run_commands = 0
        self._answered_run_commands = 0  # ... and as of the request the newest frame answered

    def start(self) -> None:
        parent_conn, child_conn = self._context.Pipe()
        self._process = self._context.Process(target=serve, args=(child_conn, self.session_class),
                                              name=f"kvscope-{self.name}", daemon=True)
        self._process.start()
        child_conn.close()
        self._conn = parent_conn
        self._heard_from = False  # no frame yet: the process is still starting, or building its first run
        self._recording_asked = False
        self._awaiting_frame = False
        self._share_since = None
        self._generation = 0
        self._reported_exit = False
        self._snapshots.restart()
        self._whole_snapshot_due = False
        self.played_s = 0.0

    def _send(self, command: str, arg=None) -> None:
        if self._stopped:
            return
        if not self.alive:
            crashed = self._process is not None
            self.start()  # after a crash of the process the next command starts a fresh one
            if crashed and command != APPLY and self.config is not None:
                # the new process holds nothing yet: build the last config, then Play, Step or Seek acts on it
                self._send(APPLY, (self.config, False))
        self._generation += command in NEW_PICTURE
        if command in (PLAY, PAUSE, STEP) or command == APPLY:
            self._run_commands += 1
            self._commanded_playing = command == PLAY or (command == APPLY and bool(arg[1]))
        try:
            self._conn.send((command, arg))
        except (BrokenPipeError, OSError):
            pass  # the process died just now; take_frame reports it

    # -- commands (protocol.py) -------------------------------------------------------------------
    def apply(self, config, play: bool = True) -> None:
        """Build from config (a RunConfig, a recording's path, a ComparisonSpec), then play or not."""
        self.config = config
        self._send(APPLY, (config, play))

    def restart(self, play: bool = False) -> None:
        """Build again from the last config (in a new process if the last one died)."""
        if self.config is not None:
            self.apply(self.config, play)

    def play(self) -> None:
        self._send(PLAY)

    def pause(self) -> None:
        self._send(PAUSE)

    def step_once(self) -> None:
        self._send(STEP)

    def submit_prompt(self, text: str) -> None:
        """A typed prompt for the live engine: the next frame names its request, or why it was refused."""
        self._send(SUBMIT_PROMPT, text)

    def set_speed(self, speed: float) -> None:
        self._send(SPEED, speed)

    def seek(self, position: int) -> None:
        """A replay: jump to the state after `position` steps (0 .. its number of steps)."""
        self._send(SEEK, int(position))

    def start_recording(self, path: str) -> None:
        """Record the run from its current step to path (.kvrec) until stop_recording, a rebuild
        or the end of the workload."""
        self._send(RECORD, str(path))
        self._recording_asked = True  # after: a send to a dead process starts a new one, which clears it

    def stop_recording(self) -> None:
        self._send(STOP_RECORDING)

    def inject_failure(self, message: str) -> None:
        """Make the engine's next step raise: how the self-test and tests check error handling."""
        self._send(FAIL, message)

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        self._stopped = True
        if self._process is None:
            return
        if not (self._heard_from or self._recording_asked):
            # Nothing in it to finish: a process still importing would read STOP only once started
            # (~0.7 s of CPU on a 2-core machine; seconds while a model loads), which a closing
            # window waited out
            timeout = 0.0
        try:
            self._conn.send((STOP, None))
        except (BrokenPipeError, OSError):
            pass
        deadline = time.monotonic() + timeout
        while self._process.is_alive() and time.monotonic() < deadline:
            try:  # a frame on its way is read and dropped: its writer must finish before the process stops
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

    @property
    def pid(self) -> int | None:
        """The session process's id while it runs (what a soak samples, what a fault test kills)."""
        return self._process.pid if self.alive else None

    def take_frame(self) -> Frame | None:
        """The newest frame if one has arrived (else None), and the request for the next."""
        frame = None
        if self._process is None:
            return None
        if not self.alive:
            if self._reported_exit:
                return None
            self._reported_exit = True
            return self.session_class.frame_type(
                error=f"The {self.name} process ended unexpectedly ({exit_cause(self._process.exitcode)}); "
                      f"{self.session_class.restart_hint}",
                status=f"the {self.name} process ended unexpectedly")
        try:
            if self._share_since is not None:
                self._hold_off_for_drawing()
            if self._awaiting_frame and self._conn.poll():
                frame = decode_frame(self._conn.recv_bytes(), self._conn.recv_bytes)
                self._heard_from = True
                # every frame's snapshot, a stale one's too: the next one is sent as changes to it
                if not self._snapshots.rebuild(frame):
                    self._whole_snapshot_due = True
                self._awaiting_frame = False
                self._answered_run_commands = self._asked_at_run_commands
                now = time.perf_counter()
                self._next_request_at = now + FRAME_COST_FACTOR * frame.build_cost_s
                if frame.generation != self._generation:
                    frame = None  # made before the newest apply or seek: what it shows is gone
                else:
                    if frame.core_share is not None and frame.core_share < STARVED_CORE_SHARE:
                        self._share_since = (now, time.process_time())  # what drawing this costs counts
                    if getattr(frame, "position", None) is not None:
                        self.position = frame.position
                    self.played_s = frame.played_s
                    if self._run_commands != self._asked_at_run_commands and not frame.done:
                        frame.playing = self._commanded_playing
            if self._may_ask():
                self._conn.send((FRAME, WHOLE_SNAPSHOT if self._whole_snapshot_due else None))
                self._whole_snapshot_due = False
                self._awaiting_frame = True
                self._asked_at_run_commands = self._run_commands
        except (EOFError, OSError):
            pass  # reported on the next call, once the process is seen to be gone
        return frame

    @property
    def run_command_answered(self) -> bool:
        """Whether a frame asked for after the newest Play, Pause or Step has arrived: the process
        reads them in order, so that frame shows the session as that command left it."""
        return self._answered_run_commands == self._run_commands

    def _hold_off_for_drawing(self) -> None:
        """Called on the take_frame after a frame from a session short of CPU came: the window has
        drawn it since.
        This process's CPU time over that span (the drawing, and whatever else the window did)
        times WINDOW_SHARE_FACTOR, from the frame's arrival, is the least wait for the next."""
        since, cpu_then = self._share_since
        self._share_since = None
        spent = time.process_time() - cpu_then
        self._next_request_at = max(self._next_request_at, since + WINDOW_SHARE_FACTOR * spent)

    def _may_ask(self) -> bool:
        """Whether the next frame request may go now: none in flight, the last frame drawn, and the
        hold-offs it set passed."""
        return (not self._awaiting_frame and self._share_since is None
                and time.perf_counter() >= self._next_request_at)

    def ask_now(self) -> None:
        """Drop the hold-offs after the last frame: the next take_frame asks for one (tests)."""
        self._next_request_at = 0.0
        self._share_since = None
