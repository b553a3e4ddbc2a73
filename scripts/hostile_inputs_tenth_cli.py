"""The tenth hostile pass's cases (the command line), for scripts/hostile_inputs.py: the process's
surroundings and flags in combination. An ASCII-only stderr said a typed name as "?", a full /dev/full
under export's --perfetto was "cannot write the output" (no flag), a name holding ESC was printed raw
in the lines that say what was written, a 309-digit value was said as 412 characters, the real
backend refused after `loading ...` (more than one device, a --max-model-len past the model's
positions, weights larger than the machine, a KV budget larger than its memory, a cache folder where
none can be made), a value beginning with '-' was "expected one argument", `--model-path` of nothing was "config ...: no such file", a contiguous run took
--enable-prefix-caching and cached nothing, a KV budget of 1 TB fit on a 24 GB device, and
`--json` onto this-machine's calibration profile destroyed it. Every case's `expect` is the right
behaviour.

Not expressible with Case (tested in tests/test_cli_hostile_tenth.py instead): SIGTERM and SIGHUP
mid-run and mid-export (a hidden .partial was left, nothing said), Ctrl+C while kvscope loads (a
traceback), a current folder that was deleted, and a reader of the standard output that leaves
(`| head -1`: the files asked for were never written)."""

from __future__ import annotations

from pathlib import Path

RUN = ["run", "--quiet", "--requests", "2"]
REAL = RUN + ["--backend", "real", "--model", "tiny-llama"]
ESC = "\x1b[2J"


def tenth_cli_cases(d: Path, Case, write) -> list:
    t = d / "tenth-cli"
    t.mkdir(parents=True, exist_ok=True)
    return _stream_cases(t, Case) + _number_cases(Case) + _real_cases(t, Case, write) + _combination_cases(t, Case, write)


def _stream_cases(t: Path, Case) -> list:
    """What the user sees of the names they typed, and of a write that failed."""
    from hostile_inputs_fourth_cli import _recording

    recording = t / "r.kvrec"
    _recording(recording)
    return [
        Case("run --trace ü.csv with PYTHONIOENCODING=ascii (said as '?')", "env",
             RUN + ["--trace", str(t / "ü.csv")], env={"PYTHONIOENCODING": "ascii"}, must_say=("\\xfc.csv",)),
        Case("run --record a name holding ESC [ 2 J (the 'written to' line) printed raw", "files",
             RUN + ["--record", str(t / f"{ESC}x.kvrec")], expect="ok", must_say=("\\x1b[2Jx.kvrec",),
             must_not_say=("\x1b",)),
        Case("export --csv and --perfetto names holding ESC [ 2 J printed raw", "files",
             ["export", str(recording), "--csv", str(t / f"{ESC}y.csv"), "--perfetto", str(t / f"{ESC}y.json")],
             expect="ok", must_say=("written to", "\\x1b[2Jy.csv"), must_not_say=("\x1b",)),
        Case("export --perfetto /dev/full (said as 'the output')", "files",
             ["export", str(recording), "--perfetto", "/dev/full"], protected=[recording],
             must_say=("--perfetto /dev/full: cannot write: No space left",)),
        Case("run --json -x.json (a value read as a flag: 'expected one argument')", "flags",
             RUN + ["--json", "-x.json"], must_say=("'-x.json' begins with '-'", "--json=-x.json")),
        Case("export -r.kvrec (the name said nowhere: 'FILE is required')", "flags", ["export", "-r.kvrec"],
             must_say=("'-r.kvrec' begins with '-'", "after `--`")),
        Case("export --csv /dev/full (said as 'the output')", "files", ["export", str(recording), "--csv", "/dev/full"],
             protected=[recording], must_say=("--csv /dev/full: cannot write",)),
    ]


def _number_cases(Case) -> list:
    """A value of hundreds of digits is said as the checks say it, its flag leading."""
    return [
        Case("math --max-model-len 1e308 (412 characters said)", "numbers", ["math", "--max-model-len", "1e308"],
             must_say=("--max-model-len 100000... (309 digits): ",), must_not_say=("characters)",)),
        Case("math --layers 1e308 --model llama-3-8b (412 characters said)", "numbers",
             ["math", "--model", "llama-3-8b", "--layers", "1e308"], must_say=("--layers 100000... (309 digits): ",),
             must_not_say=("characters)",)),
        Case("run --requests 1e308 (the workload's 411 characters)", "numbers", RUN[:2] + ["--requests", "1e308"],
             must_say=("--requests 100000... (309 digits): ", "num_requests must be at most 10,000,000, got 100000... (309 digits)"),
             must_not_say=("characters)",)),
        Case("compare --requests 1e30 (the workload's 411 characters)", "numbers",
             ["compare", "--scenario", "prefix-caching", "--quiet", "--requests", "1e30"],
             must_say=("(31 digits)",), must_not_say=("characters)",)),
    ]


def _real_cases(t: Path, Case, write) -> list:
    """What the real backend refused only after `loading ...` (and its seconds), said before it."""
    before = ("loading",)
    return [
        Case("run real --tensor-parallel-size 2 (refused after loading)", "flags",
             REAL + ["--tensor-parallel-size", "2"], must_say=("--tensor-parallel-size 2: ", "one device"),
             must_not_say=before),
        Case("run real --max-model-len 100000 (past tiny-llama's 4,096 positions, after loading)", "flags",
             REAL + ["--max-model-len", "100000"], must_say=("--max-model-len 100,000: ", "give at most 4,096"),
             must_not_say=before),
        Case("run real --model llama-3-70b (262 GiB of weights, after loading)", "flags",
             RUN + ["--backend", "real", "--model", "llama-3-70b"], must_say=("for its weights as fp32",),
             must_not_say=before),
        Case("run real --kv-cache-memory-bytes 1e15 (past this machine's memory)", "numbers",
             REAL + ["--kv-cache-memory-bytes", "1e15"], must_say=("this machine's", "of memory; give at most"),
             must_not_say=before),
        Case("calibrate with KVSCOPE_CACHE_DIR=/proc/self (no folder can be made there)", "env",
             ["calibrate", "--scale", "0.05"], env={"KVSCOPE_CACHE_DIR": "/proc/self"},
             must_say=("KVSCOPE_CACHE_DIR=/proc/self must be a folder kvscope can write",), must_not_say=before),
        Case("run real with KVSCOPE_CACHE_DIR=/proc/self", "env", REAL, env={"KVSCOPE_CACHE_DIR": "/proc/self"},
             must_say=("cannot make the folder",), must_not_say=before),
        Case("math --model-path a missing folder (said as a config file)", "files",
             ["math", "--model-path", str(t / "no-model")], must_say=("no such directory",),
             must_not_say=("config ",)),
        Case("math --model-path a file (read as a config.json)", "files",
             ["math", "--model-path", str(write(t / "notes.txt", "notes\n"))], must_say=("--model-path", "not a folder"),
             protected=[t / "notes.txt"]),
        Case("attach --model-path a missing folder", "files",
             ["attach", "http://127.0.0.1:1", "--kv-events", "tcp://127.0.0.1:1", "--duration", "1",
              "--model-path", str(t / "no-model")], must_say=("model directory", "no such directory")),
    ]


def _combination_cases(t: Path, Case, write) -> list:
    """Flags that together make no sense, taken without a word; an output onto what the run rests on."""
    cache = t / "cache"
    profile = write(cache / "calibration" / "cpu-another-machine-8cores.json", '{"format": "kvscope-calibration"}\n')
    return [
        Case("run --allocation contiguous --enable-prefix-caching (0 % hits, no word)", "flags",
             RUN + ["--allocation", "contiguous", "--enable-prefix-caching"],
             must_say=("--enable-prefix-caching: --allocation contiguous", "shares no blocks")),
        Case("run --allocation contiguous --no-enable-prefix-caching (what it does)", "flags",
             RUN + ["--allocation", "contiguous", "--no-enable-prefix-caching"], expect="ok"),
        Case("math --kv-cache-memory-bytes 1e12 on a 24 GB L4 (a 931 GiB pool 'fit')", "numbers",
             ["math", "--kv-cache-memory-bytes", "1e12"], must_say=("--kv-cache-memory-bytes 1e+12: ", "more than the",
                                                                   "give at most")),
        Case("run --kv-cache-memory-bytes 1e12 on a 24 GB L4 (ran)", "numbers", RUN + ["--kv-cache-memory-bytes", "1e12"],
             must_say=("more than the", "of l4-24gb")),
        Case("math --kv-cache-memory-bytes 4e9 (fits beside the weights)", "numbers",
             ["math", "--kv-cache-memory-bytes", "4e9"], expect="ok", must_say=("3.73 GiB",)),
        Case("run --hardware this-machine --json a stored calibration profile (destroyed)", "files",
             RUN + ["--hardware", "this-machine", "--json", str(profile)], env={"KVSCOPE_CACHE_DIR": str(cache)},
             protected=[profile], must_say=("calibration profile", "of --hardware this-machine")),
        Case("run --hardware this-machine --record a stored calibration profile", "files",
             RUN + ["--hardware", "this-machine", "--record", str(profile)], env={"KVSCOPE_CACHE_DIR": str(cache)},
             protected=[profile], must_say=("calibration profile",)),
        Case("attach --hardware this-machine --json a stored calibration profile", "files",
             ["attach", "http://127.0.0.1:1", "--kv-events", "tcp://127.0.0.1:1", "--duration", "1",
              "--hardware", "this-machine", "--json", str(profile)], env={"KVSCOPE_CACHE_DIR": str(cache)},
             protected=[profile], must_say=("calibration profile",)),
    ]
