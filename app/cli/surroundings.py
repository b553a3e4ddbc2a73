"""The process's surroundings as a command meets them: a signal that ends it (SIGTERM from `kill` or
a service manager, SIGHUP from a closed terminal), and a current folder that was deleted.

SIGTERM killed a command where it stood: `kvscope run --record r.kvrec` left a hidden
`.r.kvrec.XXXX.partial` of megabytes beside the recording it was to replace, and `kvscope export`
one beside each export, with nothing said. Ctrl+C (KeyboardInterrupt) already ran the cleanup that
removes them; these signals now raise the same exception where the command is.

In a folder deleted after the shell entered it, a relative path was said as the OS says it: `--json
o.json: No such file or directory`, `r.kvrec: no such file`, naming no cause.
"""

from __future__ import annotations

import contextlib
import os
import signal

from kvscope.engine.config import ConfigError

# Signals that end a command as Ctrl+C does (SIGINT stays Python's own KeyboardInterrupt).
ENDING_SIGNALS = ("SIGTERM", "SIGHUP")


class Terminated(KeyboardInterrupt):
    """A SIGTERM or SIGHUP, raised where the command was: every cleanup Ctrl+C runs runs for it too."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


def has_a_window(args) -> bool:
    """Whether the command opens a window: its event loop has its own ways to close."""
    return args.command == "gui" or (args.command == "attach" and getattr(args, "duration", None) is None)


@contextlib.contextmanager
def ending_as_interrupted(args):
    """While in it, SIGTERM and SIGHUP raise Terminated in a command without a window (once: a second
    while cleaning up is ignored, so the cleanup finishes). A signal already ignored (`nohup`) stays
    ignored; the handlers that were there are put back after."""
    previous = {}
    raised = []
    if has_a_window(args):
        yield
        return

    def stop(signum, frame):
        if not raised:
            raised.append(signum)
            raise Terminated(signum)

    for name in ENDING_SIGNALS:
        signum = getattr(signal, name, None)
        if signum is None:
            continue
        try:
            old = signal.getsignal(signum)
            if old is signal.SIG_IGN:
                continue
            signal.signal(signum, stop)
            previous[signum] = old
        except (ValueError, OSError):  # not the main thread (a test's runner): left as it is
            continue
    try:
        yield
    finally:
        for signum, old in previous.items():
            with contextlib.suppress(ValueError, OSError, TypeError):
                signal.signal(signum, old if old is not None else signal.SIG_DFL)


def current_folder_gone() -> bool:
    """Whether the current folder no longer exists (deleted or moved away after the shell entered it)."""
    try:
        os.getcwd()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return False


def refuse_relative_paths_where_the_folder_is_gone(args) -> None:
    """A relative input or output path when the current folder was deleted: said as that, not as
    "no such file" of a file that may well be there, in a folder that is not."""
    if not current_folder_gone():
        return
    from kvscope.app.cli.input_paths import INPUT_PATHS, POSITIONAL_PATHS, PRESET_NAMES
    from kvscope.app.cli.streams import OUTPUT_FLAGS
    from kvscope.app.lab.said_paths import said_path

    command = getattr(args, "command", None)
    for dest in INPUT_PATHS.get(command, ()) + OUTPUT_FLAGS.get(command, ()):
        value = getattr(args, dest, None)
        if not isinstance(value, str) or not value or value == "-" or os.path.isabs(value):
            continue
        if dest in PRESET_NAMES and "/" not in value and not value.endswith(".toml"):
            continue  # a preset's name, not a path
        said = said_path(value) if dest in POSITIONAL_PATHS else f"--{dest.replace('_', '-')} {said_path(value)}"
        raise ConfigError(f"{said}: a relative path, and the current folder no longer exists (deleted or moved "
                          "after the shell entered it); cd to a folder that exists, or give an absolute path")
