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
    raised = _ENDING["raised"] = []
    if has_a_window(args):
        yield
        return

    def stop(signum, frame):
        if _ENDING["held"]:  # a file is being handed to its cleanup: raised once it is (release())
            _ENDING["waiting"].append(signum)
        elif not raised:
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



# While held, an ending signal waits for release() instead of raising: the kernel hands a signal to
# any thread that does not block it (torch's, the recorder's), so blocking it in this one is not enough.
_ENDING = {"held": 0, "waiting": [], "raised": []}


def _wait_for_release(signum, frame) -> None:
    _ENDING["waiting"].append(signum)


def hold_ending_signals():
    """Hold Ctrl+C, SIGTERM and SIGHUP back until release(): while a file is created and handed to the
    code that removes it on an interruption. Raised in between (a SIGTERM landed in the recorder's
    thread start), the interruption left the file (a recording's `.partial`) with no one to remove it."""
    _ENDING["held"] += 1
    try:
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, _wait_for_release)
            return signal.default_int_handler
    except ValueError:  # not the main thread: Ctrl+C stays as it is
        pass
    return None


def release(sigint_handler) -> None:
    """Let ending signals through again: one that came meanwhile is raised here, as it would have been."""
    _ENDING["held"] -= 1
    if sigint_handler is not None:
        signal.signal(signal.SIGINT, sigint_handler)
    waiting, _ENDING["waiting"] = _ENDING["waiting"], []
    if waiting and not _ENDING["held"]:
        if waiting[0] == signal.SIGINT:
            raise KeyboardInterrupt
        _ENDING["raised"].append(waiting[0])  # a second, while cleaning up, is ignored as ever
        raise Terminated(waiting[0])
