"""The sixth hostile pass's cases (the command line), for scripts/hostile_inputs.py: flags that only
vLLM's accounting reads given with --accounting lesson, output paths ending in '/' (Path() drops
the slash: `--json notes.txt/` replaced notes.txt) or in a folder where no file can be made (/proc:
the run finished before the write failed), numbers too close to 0 for a float (1e-400 was 0: an
arrival rate of one request in eons ran all at once), an argv of 50,000 flags (argparse is
quadratic: minutes), and cache folders named with ESC listed raw by `kvscope models`. Every
case's `expect` is the right behaviour.

Not expressible with Case (tested in tests/test_cli_hostile_sixth.py instead): a tiny `ulimit -v`
(the runner's limit is fixed; 100 - 120 MiB ended in a MemoryError, SyntaxError or SystemError
traceback, a page of hashlib's logged tracebacks, OpenBLAS's abort or a segmentation fault, each
in a run or two of fifteen), and an output onto /dev/stdin with standard input closed."""

from __future__ import annotations

from pathlib import Path

LESSON = ["--accounting", "lesson"]
RUN = ["run", "--quiet", "--requests", "2"]


def sixth_cli_cases(d: Path, Case, write) -> list:
    t = d / "sixth-cli"
    t.mkdir(parents=True, exist_ok=True)
    return (_lesson_cases(Case) + _trailing_slash_cases(t, Case, write) + _virtual_folder_cases(Case)
            + _underflow_cases(Case) + _argv_cases(Case) + _listing_cases(t, Case))


def _lesson_cases(Case) -> list:
    """The lesson's formula (memory x utilization - weights - reserve) has no vLLM release, CUDA
    graphs or profiled activation: a flag that sizes only those changed nothing, without a word."""
    return [
        Case("run --accounting lesson --vllm-version 0.5", "flags", RUN + LESSON + ["--vllm-version", "0.5"],
             must_say=("--vllm-version", "--accounting lesson")),
        Case("math --accounting lesson --vllm-version 0.33 (the default, typed)", "flags",
             ["math", *LESSON, "--vllm-version", "0.33"], must_say=("--vllm-version",)),
        Case("math --accounting lesson --enforce-eager", "flags", ["math", *LESSON, "--enforce-eager"],
             must_say=("--enforce-eager",)),
        Case("math --accounting lesson --no-enforce-eager", "flags", ["math", *LESSON, "--no-enforce-eager"],
             must_say=("--enforce-eager",)),
        Case("math --accounting lesson --max-num-seqs 8 (vLLM's activation peak only)", "flags",
             ["math", *LESSON, "--max-num-seqs", "8"], must_say=("--max-num-seqs",)),
        Case("math --accounting lesson --no-enable-chunked-prefill", "flags",
             ["math", *LESSON, "--no-enable-chunked-prefill"], must_say=("--enable-chunked-prefill",)),
        Case("math --acc lesson --vllm 0.5 (abbreviated)", "flags", ["math", "--acc", "lesson", "--vllm", "0.5"],
             must_say=("--vllm-version",)),
        Case("run --accounting=lesson --enforce-eager (simulated)", "flags", RUN + ["--accounting=lesson",
                                                                                   "--enforce-eager"],
             must_say=("--enforce-eager",)),
        Case("math --vllm-version 0.5 --accounting lesson (the flag first)", "flags",
             ["math", "--vllm-version", "0.5", *LESSON], must_say=("--vllm-version",)),
        # read there: the lesson's pool takes the reserve and utilization; run schedules with max-num-seqs
        Case("math --accounting lesson --reserve-bytes 1e9 --gpu-memory-utilization 0.8", "flags",
             ["math", *LESSON, "--reserve-bytes", "1e9", "--gpu-memory-utilization", "0.8"], expect="ok"),
        Case("run --accounting lesson --max-num-seqs 8", "flags", RUN + LESSON + ["--max-num-seqs", "8"], expect="ok"),
        Case("math --accounting vllm --vllm-version 0.5", "flags", ["math", "--accounting", "vllm", "--vllm-version",
                                                                    "0.5"], expect="ok", must_say=("vLLM 0.5",)),
    ]


def _trailing_slash_cases(t: Path, Case, write) -> list:
    """A trailing '/' names a folder; the OS refuses `notes.txt/` as "not a directory", but Path()
    drops the slash and the output replaced notes.txt, or made new.json."""
    notes = write(t / "notes.txt", "notes that must survive\n")
    recording = t / "r.kvrec"
    from hostile_inputs_fourth_cli import _recording

    _recording(recording)
    slash = (str(notes) + "/",)
    return [
        Case("run --json notes.txt/ (an existing file, a '/' after it)", "files", RUN + ["--json", *slash],
             protected=[notes], must_say=("ends in '/'",)),
        Case("run --json new.json/ (no such folder)", "files", RUN + ["--json", str(t / "new.json") + "/"],
             must_say=("ends in '/'",)),
        Case("run --record notes.txt/", "files", RUN + ["--record", *slash], protected=[notes],
             must_say=("ends in '/'",)),
        Case("export --csv notes.txt/", "files", ["export", str(recording), "--csv", *slash], protected=[notes],
             must_say=("ends in '/'",)),
        Case("export --perfetto the recording with a '/'", "files",
             ["export", str(recording), "--perfetto", str(recording) + "/"], protected=[recording]),
        Case("compare --csv notes.txt/", "files", ["compare", "--quiet", "--scenario", "cache-ceiling", "--csv", *slash],
             protected=[notes], must_say=("ends in '/'",)),
        Case("gui --screenshot notes.txt/", "files",
             ["gui", "--backend", "simulated", "--quit-after", "0", "--screenshot", *slash], protected=[notes],
             must_say=("ends in '/'",)),
        Case("bench scheduler --json notes.txt/ (before measuring)", "files", ["bench", "scheduler", "--json", *slash],
             protected=[notes], must_say=("ends in '/'",)),
        # an existing folder with its '/' is said as a folder, as without it
        Case("run --json an existing folder/", "files", RUN + ["--json", str(t) + "/"], must_say=("is a folder",)),
    ]


def _virtual_folder_cases(Case) -> list:
    """An output is written to a new file beside it, then renamed: in /proc none can be made, and
    `run --json /proc/version` said "No such file or directory" only after the run."""
    return [
        Case("run --json /proc/version", "files", RUN + ["--json", "/proc/version"],
             must_say=("no file can be made",)),
        Case("run --record /proc/version", "files", RUN + ["--record", "/proc/version"],
             must_say=("no file can be made",)),
        Case("compare --json /proc/cpuinfo (before the comparison)", "files",
             ["compare", "--quiet", "--scenario", "cache-ceiling", "--json", "/proc/cpuinfo"],
             must_say=("no file can be made",)),
        Case("run --json /sys/kernel/new.json", "files", RUN + ["--json", "/sys/kernel/new.json"]),
    ]


def _underflow_cases(Case) -> list:
    """A number past a float's smallest (1e-400) was read as 0: a meaning the user did not type."""
    return [
        Case("run --arrival-rate 1e-400 (was all at once)", "numbers",
             RUN + ["--arrival-rate", "1e-400"], must_say=("too close to 0",)),
        Case("run --arrival-rate -1e-400", "numbers", RUN + ["--arrival-rate", "-1e-400"], must_say=("too close to 0",)),
        Case("math --gpu-memory-utilization 1e-999", "numbers", ["math", "--gpu-memory-utilization", "1e-999"],
             must_say=("too close to 0",)),
        Case("math --memory-gib 1_0e-400 (an underscore)", "numbers", ["math", "--memory-gib", "1_0e-400"],
             must_say=("too close to 0",)),
        Case("gui --quit-after 1e-999", "numbers", ["gui", "--backend", "simulated", "--quit-after", "1e-999"],
             must_say=("too close to 0",)),
        # zero written any way is zero: all at once
        Case("run --arrival-rate 0e5", "numbers", RUN + ["--arrival-rate", "0e5"], expect="ok"),
        Case("run --arrival-rate -0.0", "numbers", RUN + ["--arrival-rate", "-0.0"], expect="ok"),
        Case("run --arrival-rate in Arabic-Indic digits", "numbers", RUN + ["--arrival-rate", "\u0665"], expect="ok"),
    ]


def _argv_cases(Case) -> list:
    """argparse's time grows with the square of the options: 50,000 `--json` took minutes."""
    return [
        Case("math with --json given 50,000 times", "flags", ["math"] + ["--json"] * 50_000,
             must_say=("arguments",)),
        Case("--self-test with 5,000 arguments", "flags", ["--self-test"] + ["x"] * 5000, must_say=("arguments",)),
        Case("math with --json given 900 times (the same flag again passes)", "flags", ["math"] + ["--json"] * 900,
             expect="ok"),
        Case("run -- --requests 3 (a flag after --)", "flags", ["run", "--quiet", "--", "--requests", "3"]),
        Case("math --json=1", "flags", ["math", "--json=1"], must_say=("--json",)),
    ]


def _listing_cases(t: Path, Case) -> list:
    """`kvscope models` printed the cache folders named by the environment as they were."""
    raw = ("\x1b", "\x07")
    return [
        Case("models with HF_HUB_CACHE holding ESC [ 2 J", "env", ["models"],
             env={"HF_HUB_CACHE": str(t / "\x1b[2Jhub")}, expect="ok", must_say=("\\x1b[2J",), must_not_say=raw),
        Case("models with KVSCOPE_CACHE_DIR holding BEL", "env", ["models"],
             env={"KVSCOPE_CACHE_DIR": str(t / "\x07cache")}, expect="ok", must_say=("\\x07",), must_not_say=raw),
        Case("models with HF_HOME holding ESC ] 0 ; (a terminal title)", "env", ["models"],
             env={"HF_HOME": str(t / "\x1b]0;pwned\x07"), "HF_HUB_CACHE": ""}, expect="ok", must_not_say=raw),
    ]
