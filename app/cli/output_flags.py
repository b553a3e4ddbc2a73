"""What every command's output flags must name before any work starts, beyond what
app/lab/output_path.py checks: a file the OS would open, and a folder a new file can be made in.

Path() drops a trailing slash: `--json notes.txt/` (a folder's name, which the OS refuses as "not a
directory") replaced notes.txt, and `--json new.json/` made a file. And a file is written whole
through a temporary file beside it: where none can be made (/proc, /sys), `kvscope run --json
/proc/version` failed only after the whole run, with "No such file or directory".
"""

from __future__ import annotations

import os
import stat

from kvscope.engine.config import ConfigError

from kvscope.app.cli.streams import OUTPUT_FLAGS


def refuse_unwritable_outputs(args) -> None:
    """Each output flag the command was given: refused in one line if it cannot be written as a file."""
    for dest in OUTPUT_FLAGS.get(args.command, ()):
        path = getattr(args, dest, None)
        if isinstance(path, str) and path and path != "-":
            _refuse_unwritable("--" + dest.replace("_", "-"), path)


def _refuse_unwritable(flag: str, path: str) -> None:
    if path.endswith(("/", os.sep)) and not os.path.isdir(path):
        raise ConfigError(f"{flag} {path}: ends in '/', which names a folder, and there is none; give a file "
                          "name (without the '/')")
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        mode = None
    except OSError:  # a loop, a name too long, a path through a file: said by the command's own check
        return
    folder = os.path.dirname(os.path.realpath(path))
    if (mode is not None and not stat.S_ISREG(mode)) or not os.path.isdir(folder):
        return  # a device, a pipe, a folder, a missing folder: the command's own check says which
    _refuse_if_no_file_can_be_made_in(flag, path)


def _refuse_if_no_file_can_be_made_in(flag: str, path: str) -> None:
    from kvscope.app.lab.output_path import names_standard_output, partial_path

    if names_standard_output(path):  # written in place, not through a file beside it
        return
    try:
        probe = partial_path(path)
    except OSError as exc:
        folder = os.path.dirname(os.path.abspath(path))  # as typed (/proc/self, not /proc/7995) unless a
        if os.path.realpath(folder) != os.path.dirname(os.path.realpath(path)):  # link leads elsewhere
            folder = os.path.dirname(os.path.realpath(path))  # /dev/stdin, stdin closed: /proc/7995/fd
        raise ConfigError(f"{flag} {path}: no file can be made in {folder} ({exc.strerror or exc}); the output "
                          "is written to a new file there first: give a path in an ordinary folder") from None
    try:
        probe.unlink()
    except OSError:
        pass
