"""The `kvscope` command: builds the parser from the command modules and runs the one asked for.

Each command is one module of this package, named after it, with `add_parser(subparsers)` and
`run(args)`; heavy imports (torch, Qt) wait inside `run`, so `kvscope math` starts in a moment.
Bad input of any kind ends in one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import difflib
import errno
import importlib
import os
import re
import sys


def _address_space_limit() -> int | None:
    """This process's soft `ulimit -v` in bytes; None where there is none (or no such limit: Windows)."""
    try:
        import resource
    except ImportError:
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return None if soft == resource.RLIM_INFINITY else soft


ADDRESS_SPACE_LIMIT = _address_space_limit()
# Below this the start-up's imports run out at a different place each run, and not all of them can
# be caught: OpenBLAS aborts in C under 97 MiB (exit 1), CPython's parser reports a SyntaxError in
# kvscope's own code, hashlib logs a page of tracebacks, and at 109 MiB one run in a hundred was a
# segmentation fault. `kvscope --help` needs 111 MiB, a command 116: below 120 the start-up is not
# tried, and the one line is said the same way every time.
SMALLEST_START_UP_ADDRESS_SPACE = 120 * 1024**2

if ADDRESS_SPACE_LIMIT is not None and ADDRESS_SPACE_LIMIT < 1024**3:
    # Under 100 - 140 MiB OpenBLAS, loaded with numpy, gave up allocating a buffer per core and
    # killed the process in C before main() could say why; one thread's buffers fit.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before anything imports numpy

from kvscope.app.cli.output import shown  # noqa: E402 - after the BLAS set-up above


def _import_hashlib_quietly() -> None:
    """hashlib, short of memory for its extension modules, calls logging.exception once per hash it
    cannot load: eight tracebacks on stderr (the root logger gets a stderr handler) before the one
    line. Imported here first with the root logger's output sent nowhere, and left as it was."""
    import logging

    root = logging.getLogger()
    kept = root.handlers
    root.handlers = [logging.NullHandler()]  # a handler present: logging.exception adds none of its own
    try:
        importlib.import_module("hashlib")
    except Exception:  # noqa: BLE001 - what failed to load fails again, and is said, where it is used
        pass
    finally:
        root.handlers = kept


if ADDRESS_SPACE_LIMIT is not None and SMALLEST_START_UP_ADDRESS_SPACE <= ADDRESS_SPACE_LIMIT < 1024**3:
    try:
        _import_hashlib_quietly()
    except MemoryError:  # said with the rest of the start-up's failures below
        pass


def starved(exc: BaseException) -> bool:
    """Whether exc is the address space running out (a tiny `ulimit -v`) while loading code: a
    MemoryError, ENOMEM, or a shared library that could not be mapped (numpy's OpenBLAS)."""
    cause = exc.__cause__ or exc.__context__
    try:
        text = f"{exc} {cause}"
    except MemoryError:  # too short even to say it
        text = "Cannot allocate memory"
    return (isinstance(exc, MemoryError) or getattr(exc, "errno", None) == errno.ENOMEM
            or "failed to map segment" in text or "Cannot allocate memory" in text
            or (cause is not None and cause is not exc and isinstance(cause, MemoryError)))


STARTUP_FAILURE: BaseException | None = None
if ADDRESS_SPACE_LIMIT is not None and ADDRESS_SPACE_LIMIT < SMALLEST_START_UP_ADDRESS_SPACE:
    STARTUP_FAILURE = MemoryError(f"starting needs about {SMALLEST_START_UP_ADDRESS_SPACE // 1024**2} MiB")
    ConfigError = options = streams = None  # type: ignore[assignment,misc]  # main() says why and stops
else:
    try:
        from kvscope.engine.config import ConfigError

        from kvscope.app.cli import options, streams
    except KeyboardInterrupt as exc:  # Ctrl+C while kvscope loads: said by main() as any interruption
        STARTUP_FAILURE = exc
        ConfigError = options = streams = None  # type: ignore[assignment,misc]
    except Exception as exc:  # noqa: BLE001 - numpy's libraries could not even be mapped (see main())
        # Under a limit that leaves no room, any failure of an import is the memory's: CPython's
        # parser says SyntaxError or SystemError when it cannot allocate.
        small = ADDRESS_SPACE_LIMIT is not None and ADDRESS_SPACE_LIMIT < 1024**3
        if not (starved(exc) or (small and isinstance(exc, (SyntaxError, SystemError, ImportError, OSError)))):
            raise  # a broken installation, not a memory limit: its own message is the one to read
        STARTUP_FAILURE = exc if starved(exc) else MemoryError(f"{type(exc).__name__} while loading kvscope")
        ConfigError = options = streams = None  # type: ignore[assignment,misc]  # main() says why and stops

EXIT_USAGE = 2
# No command takes a list: its flags once each and their values are under a hundred arguments. 50,000
# `--json` (the same flag given again passes) kept argparse busy for minutes: quadratic in the options.
MOST_ARGUMENTS = 1000
EXIT_BROKEN_PIPE = 128 + 13  # as a command killed by SIGPIPE exits, which is what a shell expects
# In the order `kvscope --help` lists them.
COMMANDS = ("math", "run", "gui", "scenarios", "compare", "export", "verify", "models", "presets", "attach",
            "calibrate", "bench")


# A flag's leading dashes as word processors and web pages set them: en and em dashes, the minus sign.
# (Patterns as text, compiled on use: compiling a Unicode class at import needs memory that a tiny
# `ulimit -v` does not leave, before main() can say so.)
TYPOGRAPHIC_DASHES = "^[\u2010-\u2015\u2212\ufe58\ufe63\uff0d]+-*"


class Parser(argparse.ArgumentParser):
    """argparse, reading "-0.5e2", "-1e3", "-inf" and "-5x5" as values, not as unknown options (its
    own test knows only "-1" and "-0.5"; no kvscope option starts with a digit), so a negative
    number or size is refused by its flag's own check with the bound in the message, never with
    "expected one argument"."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = re.compile(r"^-(\d|\.\d)|^-(inf|infinity|nan)$", re.IGNORECASE)

    def _print_message(self, message, file=None):
        """As argparse's, but a failed write (--help > /dev/full) is not swallowed: main() says it. A stream
        of None is the one meant, closed: stderr (2>&-), whose exit code still says it, or stdout (`kvscope
        --version >&-`), which main() says; argparse's fallback to stderr put the version there, then the error."""
        if message and file is not None:
            file.write(message)

    def print_help(self, file=None):
        """As argparse's, but with standard output closed (`kvscope --help >&-`) not onto stderr, which
        _print_message falls back to: main() says the output is closed, as for any command."""
        if file is None and sys.stdout is None:
            return
        super().print_help(file)

    def _check_value(self, action, value):
        """As argparse's, with the choice a mis-cased or mistyped one seems to mean (`--accounting Lesson`)."""
        if action.choices is not None and value not in action.choices and isinstance(value, str):
            from kvscope.app.lab.presets import meant_names

            meant = meant_names(value, [c for c in action.choices if isinstance(c, str)])
            if meant:
                choices = ", ".join(map(repr, action.choices))
                raise argparse.ArgumentError(action, f"invalid choice: {value!r} (did you mean {meant[0]}?) "
                                                     f"(choose from {choices})")
        super()._check_value(action, value)

    def parse_known_args(self, args=None, namespace=None):
        self.typed = list(sys.argv[1:] if args is None else args)  # for error(): what this parser was given
        return super().parse_known_args(args, namespace)

    def error(self, message: str):
        """One line, not argparse's usage block first (21 lines for `kvscope math`) with the reason last."""
        message += importlib.import_module("kvscope.app.cli.dash_values").note(message, self)  # `--json -x.json`
        self.exit(EXIT_USAGE, f"{self.prog}: error: {one_line(message)} (`{self.prog} --help` says what it takes)\n")

    def unknown_flags_error(self, extras: list[str], others: dict | None = None):
        """Flags this command does not take, each with the flag it seems to mean, or the commands that
        take it (`kvscope export --model x`: "did you mean --help?" was difflib's nearest)."""
        flags = [f for f in self._option_string_actions if f.startswith("--")]
        said = []
        for extra in extras:
            name = extra.split("=", 1)[0]
            if (ended := importlib.import_module("kvscope.app.cli.dash_values").after_double_dash(self, extra)):
                said.append(ended)  # `export -- r.kvrec --csv x.csv`: "--csv (a flag of `kvscope compare`...)"
                continue
            if any(extra in (a.choices or ()) for a in self._actions if not a.option_strings
                   and not isinstance(a, argparse._SubParsersAction)):  # `bench scheduler trace`: "unrecognized: trace"
                said.append(f"{extra} (a second choice: `{self.prog}` takes one at a time)")
                continue
            if (switch := self._switch_before(extra)) is not None:  # `math --json out.json`: "unrecognized: out.json"
                flag, action = switch
                said.append(f"{extra} ({flag} takes no value in `{self.prog}`: {action.help}"
                            + (f"; redirect it to keep it: > {extra}" if action.dest == "json" else "") + ")")
                continue
            # "—requests" (an editor's or a web page's dash for "--") is meant as the flag
            typed = re.sub(TYPOGRAPHIC_DASHES, "--", name)
            owners = [c for c in commands_taking(typed, others or {}) if (others or {})[c] is not self]
            if name.startswith("--") and owners:
                commands = ", ".join(f"`kvscope {c}`" if c else "`kvscope` itself, typed before the command"
                                     for c in owners[:4]) + (" and others" if len(owners) > 4 else "")
                said.append(f"{extra} (a flag of {commands}, not of `{self.prog}`)")
                continue
            close = ([f for f in flags if f == typed.lower()]  # --JSON: too unlike --json for difflib
                     or difflib.get_close_matches(typed, flags, n=1, cutoff=0.6))
            note = ", spelled with two hyphens" if typed != name else ""
            said.append(f"{extra} (did you mean {close[0]}{note}?)" if (extra.startswith("-") or note) and close
                        else extra)
        self.error(f"unrecognized arguments: {' '.join(said)}")

    def _switch_before(self, extra: str):
        """The switch (a flag of no value) typed just before `extra`, which was then read as a value of it."""
        typed = getattr(self, "typed", [])
        flag = re.sub(TYPOGRAPHIC_DASHES, "--", extra).startswith("-")  # "—requests" is a flag, pasted
        at = typed.index(extra) if extra in typed and not flag else 0
        action = self._option_string_actions.get(typed[at - 1]) if at > 0 else None
        return (typed[at - 1], action) if action is not None and action.nargs == 0 and action.help else None


def _installed_version() -> str:
    try:
        from importlib.metadata import version

        return version("kvscope")
    except Exception:  # noqa: BLE001 - a source checkout that was never installed, as a recording says it
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="kvscope",
        description="See why the KV cache, not compute, decides how many requests a GPU can serve.",
        allow_abbrev=False,  # `kvscope --self math` is not --self-test (which would drop the command)
    )
    parser.add_argument("--self-test", action="store_true",
                        help="check this installation end to end (imports, presets, simulated and real steps, "
                             "the window) and exit 0 only if all passed")
    # `kvscope --version`, what a bug report asks first, was "unrecognized arguments: --version"
    parser.add_argument("--version", action="version", version=f"kvscope {_installed_version()}",
                        help="print kvscope's version (the one each recording names) and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"kvscope.app.cli.{name}").add_parser(sub)
    return parser


# The lookup errors a path given as input can cause anywhere it is read: too long a name, a symlink loop.
PATH_ERRNOS = (errno.ENAMETOOLONG, errno.ELOOP)
# What writing the standard output (redirected to a file) can meet: a full disk or quota, a too-large file, a failing device.
STDOUT_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO)
# What to do about each: `> out.txt` under `ulimit -f` (EFBIG) was told to "free some space".
WRITE_ADVICE = {errno.EFBIG: "the file size limit (`ulimit -f`) is reached; raise it, or write elsewhere",
                errno.EIO: "the device failed; write elsewhere"}


def cannot_write_output(exc: OSError) -> str:
    """The one line for standard output that cannot be written (a full disk, /dev/full, `ulimit -f`)."""
    advice = WRITE_ADVICE.get(exc.errno, "free some space or write elsewhere")
    return f"kvscope: error: cannot write the output: {exc.strerror}; {advice}"


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:  # Ctrl+C while loading, before any command ran (a command's is said in _main)
        _say("kvscope: interrupted")
        return 130
    except MemoryError as exc:  # argparse's or a check's own work under a tiny `ulimit -v`; a command's
        if not _tiny_memory_limit():  # is said in _main, as too large an input where the limit is not tiny
            raise
        return _out_of_memory_at_start(exc)


def _main(argv: list[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if streams is not None:  # `2>&-`: see give_closed_stderr_a_place
        streams.give_closed_stderr_a_place()
        streams.errors_may_go_nowhere()  # `2>/dev/full`: the progress line's failure ended the run
        if streams.stdout_read_only() and argv[:1] != ["gui"]:  # a window writes nothing there
            _say("kvscope: error: the standard output is open for reading only (as `1< FILE` or `>&0` opens it), so "
                 "nothing can be written to it; give the command somewhere to write (a terminal, a pipe, `> FILE`)")
            return EXIT_USAGE
        streams.whole_writes_to_stdout()  # `> r.json` under `ulimit -f`: cut short with an error, not without
    # an ASCII terminal (PYTHONIOENCODING=ascii) gets "?" for "±" in a table, but an error line names what
    # was typed as it was typed: `--trace ü.csv` is "trace \xfc.csv", not "trace ?.csv"
    for stream, errors in ((sys.stdout, "replace"), (sys.stderr, "backslashreplace")):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors=errors)
    if STARTUP_FAILURE is not None:
        if isinstance(STARTUP_FAILURE, KeyboardInterrupt):
            raise STARTUP_FAILURE
        return _out_of_memory_at_start(STARTUP_FAILURE)
    if len(argv) > MOST_ARGUMENTS:  # argparse's time grows with the square of the options given
        _say(f"kvscope: error: {len(argv):,} arguments; a command takes at most {MOST_ARGUMENTS:,} (each flag once, "
             "a few dozen in all): see `kvscope COMMAND --help`")
        return EXIT_USAGE
    if argv[:1] == ["--version"] and argv[1:] and argv[1] not in ("-h", "--help"):  # argparse printed the version
        rest = one_line(" ".join(argv[1:]))  # and exited 0: `kvscope --version --self-test` ran no self-test
        _say(f"kvscope: error: --version prints the version and exits, so `{rest}` after it would not run; give "
             f"--version alone, or `kvscope {rest}` without it")
        return EXIT_USAGE
    if argv[:1] == ["--self-test"]:  # its lines are standard output too: a full disk or `| head` is said as below
        from kvscope.app.bench.self_test import run_self_test

        return _said_if_output_fails(lambda: run_self_test(argv[1:]))
    try:
        parser = build_parser()
    except (ImportError, MemoryError, SyntaxError, SystemError) as exc:  # importing the commands' modules
        if not starved(exc) and _tiny_memory_limit():  # CPython's parser, out of memory, says SyntaxError
            exc = MemoryError(f"{type(exc).__name__} while loading kvscope")
        return _out_of_memory_at_start(exc)
    early = _flag_before_the_command(parser, argv)
    if early:  # `kvscope --model x math` said "invalid choice: 'x'" of the command
        _say(f"kvscope: error: {early}")
        return EXIT_USAGE
    try:
        args, extras = parser.parse_known_args(argv)
    except SystemExit as exc:  # --help printed: said to fail if it could not be written (> /dev/full)
        if exc.code not in (0, None):
            raise
        return _flush_stdout_or_say()
    except OSError:
        return _flush_stdout_or_say(sys.exc_info()[1])
    if extras:  # said by the command's own parser: it names the command and knows its flags
        commands = command_parsers(parser)
        # with kvscope's own (""): `kvscope math --self-test` was "did you mean --reserve-bytes?"
        commands.get(getattr(args, "command", None), parser).unknown_flags_error(extras, {**commands, "": parser})
    args.given_flags = refuse_repeated_flags(parser, argv, getattr(args, "command", None))
    if not getattr(args, "func", None):
        parser.print_help()
        print("kvscope: error: give a command (above); `kvscope COMMAND --help` says what each takes", file=sys.stderr)
        return EXIT_USAGE
    if sys.stdout is None and args.command != "gui":  # `kvscope math >&-`: nowhere for what it says
        _say(STDOUT_CLOSED_LINE)
        return EXIT_USAGE
    surroundings = importlib.import_module("kvscope.app.cli.surroundings")
    try:
        refuse_blank_values(args)
        surroundings.refuse_relative_paths_where_the_folder_is_gone(args)
        importlib.import_module("kvscope.app.cli.input_paths").refuse_unreadable_input_paths(args)
        streams.name_standard_output_dash(args)
        streams.refuse_outputs_onto_standard_streams(args)
        streams.refuse_stderr_into_the_dash_output(args)
        with surroundings.ending_as_interrupted(args), streams.reader_may_leave() as stdout:
            code = args.func(args)
            sys.stdout.flush()  # here, so a full disk under `> out.txt` is said below, not at the exit
        return EXIT_BROKEN_PIPE if stdout.left and code == 0 else code
    except ConfigError as exc:
        _say(f"kvscope: error: {one_line(options.said_with_flags(str(exc), args))}")
        return EXIT_USAGE
    except surroundings.Terminated as exc:  # SIGTERM, SIGHUP: the same cleanup as Ctrl+C, then as killed by it
        _say(f"kvscope: stopped by {exc.name}")
        return 128 + exc.signum
    except KeyboardInterrupt:
        _say("kvscope: interrupted")
        return 130
    except BrokenPipeError:  # `kvscope presets | head -1`: the reader has all it wanted
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except OSError as exc:
        if exc.errno in STDOUT_ERRNOS and exc.filename is None:  # `kvscope math > /dev/full`, a full disk
            _silence_stdout()
            _say(cannot_write_output(exc))
            return EXIT_USAGE
        if exc.errno == errno.ENOMEM and _tiny_memory_limit():
            return _out_of_memory_at_start(exc)
        if exc.errno not in PATH_ERRNOS:
            raise
        # A path the OS cannot even look up (a name over 255 bytes, a symlink loop): each reading
        # of a path would need its own check for these, and every one of them means the same thing.
        _say(f"kvscope: error: {_short_path(exc.filename)}: {exc.strerror}: give a path the system can open")
        return EXIT_USAGE
    except ImportError as exc:  # a module imported on use (torch, Qt) under a tiny `ulimit -v`
        return _out_of_memory_at_start(exc)
    except (MemoryError, RecursionError) as exc:  # the last resort: every input is bounded before use
        if isinstance(exc, MemoryError) and _tiny_memory_limit():
            return _out_of_memory_at_start(exc)  # not the input: the limit leaves no room to work at all
        what = "out of memory" if isinstance(exc, MemoryError) else "input nested too deep"
        _say(f"kvscope: error: {what} (an input larger than kvscope checks for): {one_line(str(exc))[:200]}")
        return EXIT_USAGE


STDOUT_CLOSED_LINE = "kvscope: error: the standard output is closed; give the command somewhere to write"


def _say(line: str) -> None:
    """An error line on stderr; a stderr that cannot take it (`2>&1 | head -c 5` closed) leaves the
    exit code to say it, rather than a traceback that could not be shown either (exit 1)."""
    if sys.stderr is None:  # closed, and nowhere else to put it (print would pick stdout)
        return
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


SMALLEST_WORKING_ADDRESS_SPACE = 1024**3  # a simulated run of the default model needs about 250 MiB


def _tiny_memory_limit() -> bool:
    """Whether this process's address space is limited below what any command needs (`ulimit -v`)."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return soft != resource.RLIM_INFINITY and soft < SMALLEST_WORKING_ADDRESS_SPACE


def _out_of_memory_at_start(exc: BaseException) -> int:
    """A library that could not be loaded for want of address space (`ulimit -v 100000`): one line.
    Any other import failure is a broken installation, and its traceback is what to read."""
    if not starved(exc):
        raise exc
    try:
        import resource

        cause = exc.__cause__ or exc  # numpy wraps the loader's error in a page of advice
        said = (str(cause).strip().splitlines() or [type(cause).__name__])[0]
        # not one_line(): its Unicode class is compiled on first use, and that needs memory this
        # process has not got (1 run in 15 at 107 MiB ended in that compile's traceback)
        said = "".join(c if c.isprintable() else "?" for c in said[:160])
        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        limit = f" of {soft / 1024**2:,.0f} MiB" if soft != resource.RLIM_INFINITY else ""
        line = (f"kvscope: error: out of memory under this process's address-space limit{limit} ({said}); "
                f"{OUT_OF_MEMORY_ADVICE}")
    except MemoryError:  # too short even to say which library failed: the line without it
        line = OUT_OF_MEMORY_LINE
    _say(line)
    return EXIT_USAGE


OUT_OF_MEMORY_ADVICE = "kvscope needs a few hundred MiB, the real backend about 2 GiB: raise the limit (`ulimit -v`)"
OUT_OF_MEMORY_LINE = f"kvscope: error: out of memory under this process's address-space limit; {OUT_OF_MEMORY_ADVICE}"


def _said_if_output_fails(work) -> int:
    """work()'s exit code; standard output closed by its reader or on a full disk ends as any
    command's output does (exit 141, or one line and 2), not in a traceback."""
    try:
        code = work()
        if sys.stdout is not None:
            sys.stdout.flush()
        return code
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except OSError as exc:
        if exc.errno not in STDOUT_ERRNOS or exc.filename is not None:
            raise
        _silence_stdout()
        _say(cannot_write_output(exc))
        return EXIT_USAGE


def _flush_stdout_or_say(failed: OSError | None = None) -> int:
    """After --help: 0 if all of it was written; else as a failed write of any command's output."""
    try:
        if failed is not None:
            raise failed
        if sys.stdout is None:  # `kvscope --help >&-`: the help went nowhere, and 0 would say it was shown
            _say(STDOUT_CLOSED_LINE)
            return EXIT_USAGE
        sys.stdout.flush()
        return 0
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except OSError as exc:
        _silence_stdout()
        print(cannot_write_output(exc), file=sys.stderr)
        return EXIT_USAGE


def _flag_before_the_command(parser: argparse.ArgumentParser, argv: list[str]) -> str | None:
    """What to say of a command's flag typed before the command (`kvscope --json math`): kvscope itself
    takes only --help, --version and --self-test, so argparse read the flag's value as the command."""
    first = argv[0] if argv else ""
    name = first.split("=", 1)[0]
    if not name.startswith("--") or name in parser._option_string_actions or name == "--":
        return None
    owners = commands_taking(name, command_parsers(parser))
    if not owners:
        return None
    commands = ", ".join(owners[:4]) + (", ..." if len(owners) > 4 else "")
    return (f"{one_line(first)} comes before the command; it is a flag of {commands}: give it after the command, "
            f"as in `kvscope {owners[0]} {one_line(first)} ...` (kvscope itself takes only --help, --version and "
            "--self-test)")


def commands_taking(flag: str, commands: dict) -> list[str]:
    """The names of the commands (name -> parser) that take this flag."""
    return [name for name, command in commands.items() if flag in command._option_string_actions]


def command_parsers(parser: argparse.ArgumentParser) -> dict:
    """Each command's own parser, by its name."""
    return next((a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction)), {})


def refuse_repeated_flags(parser: argparse.ArgumentParser, argv: list[str], command: str | None) -> frozenset:
    """A flag given twice with different values (--model a ... --model b, --x ... --no-x) is refused:
    argparse would keep the last without a word. The same value twice is harmless and passes.
    Returns the dests of the flags typed, so a command can refuse one that would change nothing
    (argparse gives a default and a typed default alike)."""
    sub = command_parsers(parser).get(command)
    if sub is None:
        return frozenset()
    flags = {option: action for action in sub._actions for option in action.option_strings}
    seen: dict[str, tuple[str, str]] = {}
    i = argv.index(command) + 1 if command in argv else len(argv)
    while i < len(argv):
        token = argv[i]
        i += 1
        if token == "--":
            break
        if not token.startswith("--"):
            continue
        name, has_value, value = token.partition("=")
        matches = [o for o in flags if o == name] or [o for o in flags if o.startswith(name)]  # argparse's abbreviations
        if len(matches) != 1:
            continue
        action = flags[matches[0]]
        if action.nargs == 0:
            value = matches[0]  # --x and --no-x differ by their spelling
        elif not has_value:
            value = argv[i] if i < len(argv) else ""
            i += 1
        said = f"{matches[0]} {value}" if action.nargs != 0 else matches[0]
        if action.dest in seen and seen[action.dest][0] != value:
            earlier = seen[action.dest][1]
            sub.error(f"argument {matches[0]}: contradicts {earlier}; give one of them" if action.nargs == 0 else
                      f"argument {matches[0]}: given twice ({earlier}, then {said}); give it once")
        seen.setdefault(action.dest, (value, said))
    return frozenset(seen)


def _silence_stdout() -> None:
    """Standard output pointed at /dev/null, so the exit's flush of what could not be written does not fail again."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):  # no file behind it (a captured stream): nothing is flushed at the exit
        pass


def _short_path(filename) -> str:
    from kvscope.app.lab.said_paths import said_short

    # 120, as said_path: a name another layer already said short (90 characters) is not cut again
    return said_short(one_line(os.fsdecode(filename)), 120) if filename is not None else "a path"


LONGEST_WORD_SAID = 200  # a value longer than this is said by its ends and its length


def one_line(text: str) -> str:
    """A message as the one line the command prints (a path or a field may hold a newline); a
    100,000-character value is said as its ends and its length, not repeated whole; a control
    character is shown escaped (\\x1b), not sent to the terminal."""
    if "\n" in text or "\r" in text:
        text = " ".join(text.split())
    text = shown(text)  # ESC, BEL, a right-to-left override: escaped, not acted on by the terminal
    if len(text) > LONGEST_WORD_SAID:
        text = re.sub(rf"\S{{{LONGEST_WORD_SAID + 1},}}",
                      lambda m: f"{m[0][:40]}...{m[0][-30:]} ({len(m[0]):,} characters)", text)
    return text


# The commands' positional arguments that take any text (export's FILE, attach's URL): said by
# their names in --help, not as a flag (`kvscope attach ""` said "--url is empty").
POSITIONAL_TEXTS = ("file", "url")


def refuse_blank_values(args) -> None:
    """Every text a flag takes is a name, a path or a choice: an empty one (--model "") is refused
    rather than read as "not given" and replaced by a default."""
    for dest, value in vars(args).items():
        if isinstance(value, str) and not value.strip():
            flag = dest.upper() if dest in POSITIONAL_TEXTS else "--" + dest.replace("_", "-")
            raise ConfigError(f"{flag} is empty; give a value (see `kvscope {args.command} --help`)")


if __name__ == "__main__":
    sys.exit(main())
