"""The process's standard streams, as the commands meet them: a closed standard error, and an
output flag naming standard input or standard error by another name (/dev/stdin, /dev/fd/2,
/proc/self/fd/0, or the very file `< in.txt` or `2> log.txt` opened).

Standard output has its own rules (app/lab/output_path.py: '-' and names_standard_output); these
are the other two. Writing an output "to" standard input renamed the report over the file the
shell opened for reading (`kvscope run --json /dev/stdin < notes.txt` replaced notes.txt), and
to standard error mixed a binary recording or a PNG into the command's messages.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import stat
import sys

from kvscope.engine.config import ConfigError

# Each command's flags that name a file it writes (argparse dests). A command not listed writes none.
OUTPUT_FLAGS = {"run": ("json", "record"), "compare": ("json", "csv"), "verify": ("json",),
                "attach": ("json", "record", "screenshot"), "export": ("perfetto", "csv"), "gui": ("screenshot",),
                "bench": ("json",), "calibrate": ("json",)}
# The text outputs that take '-' for stdout: another name of stdout (/dev/stdout, the file that
# `> out.txt` opened) is that '-', so the command's own text moves to stderr as it does for '-'.
STDOUT_DASH_OUTPUTS = {"run": ("json",), "compare": ("json", "csv"), "verify": ("json",), "attach": ("json",)}
STREAMS = ((0, "standard input"), (2, "standard error"))


def give_closed_stderr_a_place() -> None:
    """`kvscope run 2>&-`: Python leaves sys.stderr None, and the progress line's isatty() was a
    traceback (exit 1). It becomes /dev/null: the exit code still says a refusal. Opened now, the
    null device also takes file descriptor 2, so no file the command opens later gets it (and with
    it every library's stray message)."""
    if sys.stderr is None:
        try:
            sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - the process's stderr until it exits
        except OSError:
            pass


class _WholeWrites(io.BufferedWriter):
    """Writes all it is given, or raises. CPython's BufferedWriter returns a short count where the file
    takes part of a large write (`ulimit -f`: the bytes up to the limit), and TextIOWrapper drops the
    rest: `kvscope run --json - > r.json` left half a JSON object and exited 0."""

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        done = 0
        while done < len(view):
            wrote = super().write(view[done:])
            if not wrote:  # nothing taken and no error: said as the file that cannot grow
                raise OSError(errno.EFBIG, os.strerror(errno.EFBIG))
            done += wrote
        return done


def whole_writes_to_stdout() -> None:
    """The process's standard output (fd 1) rewrapped so that no write is cut short without an error
    (_WholeWrites); its encoding and buffering kept. A stream replaced already (a test's capture) is left."""
    stdout = sys.stdout
    if stdout is None or stdout is not sys.__stdout__ or not isinstance(stdout, io.TextIOWrapper):
        return
    try:
        if stdout.fileno() != 1:
            return
        stdout.flush()
        raw = io.FileIO(1, "w", closefd=False)
    except (OSError, ValueError):
        return
    sys.stdout = io.TextIOWrapper(_WholeWrites(raw), encoding=stdout.encoding, errors=stdout.errors,
                                  line_buffering=stdout.line_buffering, write_through=stdout.write_through)


# What each command writes on stderr beside a '-' output (stdout): with `2>&1` into the same file or pipe it
# is mixed into the JSON or CSV (`kvscope run --json - > r.json 2>&1` began with the progress line, not '{').
STDERR_BESIDE_DASH = {"run": "the progress line (--quiet leaves it out)", "verify": "the `loading ...` lines",
                      "compare": "the comparison's table"}


def refuse_stderr_into_the_dash_output(args) -> None:
    """An output to stdout ('-') where stderr is stdout's own file or pipe (not a terminal, not /dev/null)
    and the command writes on stderr: what it writes there would corrupt the output."""
    command = getattr(args, "command", None)
    said = STDERR_BESIDE_DASH.get(command)
    dashes = [d for d in STDOUT_DASH_OUTPUTS.get(command, ()) if getattr(args, d, None) == "-"]
    if not said or not dashes or (command == "run" and getattr(args, "quiet", False)):
        return
    try:
        out, err = os.fstat(1), os.fstat(2)
    except OSError:
        return
    if (out.st_dev, out.st_ino) != (err.st_dev, err.st_ino) or os.isatty(1) or stat.S_ISCHR(out.st_mode):
        return  # apart, a terminal a person reads, or a device such as /dev/null that keeps nothing
    flag = "--" + dashes[0].replace("_", "-")
    raise ConfigError(f"{flag} -: standard error goes to the same file or pipe as standard output (2>&1), so "
                      f"{said} would be mixed into the output; give {flag} a file name, or send standard error "
                      "elsewhere" + (", or add --quiet" if command == "run" else ""))


class _GoesNowhereOnFailure:
    """A standard stream that, at the first write failing with `caught`, points its file descriptor at
    the null device (what is still buffered goes there at the exit) and takes every later write as done."""

    caught: type = OSError

    def __init__(self, stream):
        self._stream = stream
        self.gone = False

    def write(self, text):
        if not self.gone:
            try:
                return self._stream.write(text)
            except self.caught:
                self._gone()
        return len(text)

    def flush(self):
        if not self.gone:
            try:
                self._stream.flush()
            except self.caught:
                self._gone()

    def _gone(self):
        self.gone = True
        with contextlib.suppress(OSError, ValueError):  # no file behind it (a captured stream)
            os.dup2(os.open(os.devnull, os.O_WRONLY), self._stream.fileno())

    def __getattr__(self, name):
        return getattr(self._stream, name)


class ErrorsMayGoNowhere(_GoesNowhereOnFailure):
    """Standard error whose writes may fail (`2>/dev/full`, a log file on a full disk): the first failure
    points it at the null device and the command goes on. The progress line's failed write ended `kvscope
    run` with exit 2, its table and --json file unwritten, and nothing said (nothing could be); argparse's
    refusal that could not be written was a traceback that could not be either (exit 1, not 2)."""

    caught = OSError

    @property
    def failed(self) -> bool:
        return self.gone


def errors_may_go_nowhere() -> None:
    """sys.stderr as an ErrorsMayGoNowhere (a stream replaced already, a test's capture, is left)."""
    if sys.stderr is not None and sys.stderr is sys.__stderr__:
        sys.stderr = ErrorsMayGoNowhere(sys.stderr)


def stdout_read_only() -> bool:
    """Whether file descriptor 1 is open for reading only (`kvscope math 1< notes.txt`, `>&0`): every
    write to it fails (EBADF), after the work, in a traceback."""
    try:
        import fcntl

        return fcntl.fcntl(1, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDONLY
    except (ImportError, OSError, ValueError):  # closed (said as closed), or no fcntl (Windows)
        return False


def stream_named(path: str) -> str | None:
    """'standard input' or 'standard error' when `path` is another name of that stream's file;
    None otherwise, and for /dev/null and for a stream that is also the standard output (one
    terminal for all three): standard output's own rules take that one."""
    try:
        given = os.stat(path)
    except (OSError, ValueError):
        return None
    if os.path.realpath(path) == os.devnull:
        return None
    try:
        stdout = os.fstat(1)
        stdout_id = (stdout.st_dev, stdout.st_ino)
    except OSError:
        stdout_id = None
    for fd, name in STREAMS:
        try:
            stream = os.fstat(fd)
        except OSError:  # closed
            continue
        same = (stream.st_dev, stream.st_ino)
        if same == (given.st_dev, given.st_ino) and same != stdout_id:
            return name
    return None


def refuse_outputs_onto_standard_streams(args) -> None:
    """Every output flag of the command: one naming standard input or standard error is refused."""
    for dest in OUTPUT_FLAGS.get(getattr(args, "command", None), ()):
        path = getattr(args, dest, None)
        if not isinstance(path, str) or path == "-":
            continue
        name = stream_named(path)
        if name is not None:
            flag = "--" + dest.replace("_", "-")
            where = ("opened for reading; writing it would replace what it holds"
                     if name == "standard input" else "where this command's messages go")
            dash = dest in STDOUT_DASH_OUTPUTS.get(args.command, ())
            raise ConfigError(f"{flag} {path}: is this command's {name} ({where}); give a file name"
                              + (" or '-' for stdout" if dash else ""))


def name_standard_output_dash(args) -> None:
    """A text output naming standard output by another name (/dev/stdout, the file `> out.txt` opened)
    becomes '-', so the command's own text moves to stderr as it does for '-'."""
    from kvscope.app.lab.output_path import names_standard_output

    onto_stdout = [dest for dest in STDOUT_DASH_OUTPUTS.get(args.command, ())
                   if isinstance(getattr(args, dest, None), str) and names_standard_output(getattr(args, dest))]
    if len(onto_stdout) > 1:  # said as typed: after the renaming `--json /dev/stdout --csv -` read "--json - and ..."
        given = " and ".join(f"--{dest.replace('_', '-')} {getattr(args, dest)}" for dest in onto_stdout)
        raise ConfigError(f"{given} {'both' if len(onto_stdout) == 2 else 'all'} name the standard output; give at "
                          "most one of them, the others a file")
    for dest in onto_stdout:
        setattr(args, dest, "-")


class ReaderMayLeave(_GoesNowhereOnFailure):
    """Standard output whose reader may leave (`kvscope run --json o.json | head -3`): past that, what is
    printed goes nowhere and the command goes on to write the files it was asked for, then exits as a
    command killed by SIGPIPE would. The BrokenPipeError of the first print ended the command there:
    o.json, compare's --csv, export's second file and calibrate's profile (stored after its table,
    after minutes of measuring) were never written, and nothing said so."""

    caught = BrokenPipeError

    @property
    def left(self) -> bool:
        return self.gone


@contextlib.contextmanager
def reader_may_leave():
    """sys.stdout as a ReaderMayLeave while in it; put back after."""
    kept = sys.stdout
    stdout = sys.stdout = ReaderMayLeave(kept)
    try:
        yield stdout
    finally:
        sys.stdout = kept
