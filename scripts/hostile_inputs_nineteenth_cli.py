"""The nineteenth hostile pass's cases (the command line), for scripts/hostile_inputs.py; every name begins "cli19:"
(`--only "cli19:"` runs them). Found, and how it behaved before: `gui --screenshot w.ico` (and .cur) saved the
window shrunk to 256x256, and .xbm, .wbmp and .pbm one bit a pixel, each exit 0 as if the window had been saved.
`bench real --against-vllm --device cuda` imported torch and transformers before refusing the device (17 s on a
busy machine, past the harness's 10), and `--device CPU` was "it runs on the CPU, not CPU". `kvscope --version
--self-test` printed the version and exited 0, no self-test run (anything after --version was dropped). An output
named for a format kvscope does not write was taken: `run --json mine.toml` into the presets folder (listed then
as an invalid preset, "malformed TOML"), `--csv c.xlsx` (Excel refuses CSV under that name), .yaml, .parquet.

Beside these, tested in tests/test_cli_hostile_nineteenth.py (not expressible with Case): an output written over
an existing file took a new file's permissions and owner (a results file made private, 0600, became readable by
all, 0644; Case compares bytes, not modes). A --record whose writes failed (a full disk, `ulimit -f`) left a new
file cut off mid-record, said only as "cannot write the recording ...: File too large" (usually no whole step in
it). Standard output cut short by `ulimit -f` exited 0 where the cut fell in one large write (`run --json - >
r.json`: 1,024 of 1,915 bytes), and every such failure was told to "free some space" (Case sets no limits).
Standard output open for reading only (`1< notes.txt`) was a traceback after the work; a full standard error
(`2>/dev/full`) ended `run` at its first progress line, its outputs unwritten, and a refusal there exited 1; an
output to stdout with standard error sent into it (`run --json - > r.json 2>&1`) began with the progress line
(Case opens the streams apart). Every case's `expect` is the right behaviour."""

from __future__ import annotations

from pathlib import Path


def nineteenth_cli_cases(d: Path, Case, write) -> list:
    return (_screenshot_cases(d, Case, write) + _against_vllm_cases(Case) + _version_cases(Case)
            + _format_name_cases(d, Case, write))


def _case(Case, name: str, *args, **kwargs):
    return Case(f"cli19: {name}", *args, **kwargs)


def _screenshot_cases(d: Path, Case, write) -> list:
    from hostile_inputs_thirteenth_cli import _recording  # a small run's recording, written in this process

    folder = d / "cli19"
    folder.mkdir(parents=True, exist_ok=True)
    gui = ["gui", "--replay", str(_recording(folder)), "--quit-after", "0.5", "--screenshot"]
    kept = write(folder / "kept.ico", b"\x00\x00\x01\x00 an older icon")
    icon, one_bit = "at most 256x256 (Qt shrinks the window to that)", "one bit a pixel"
    return [
        _case(Case, "gui --screenshot w.ico (saved shrunk to 256x256, exit 0)", "files",
              [*gui, str(folder / "w.ico")], must_say=(icon, "use .png")),
        _case(Case, "gui --screenshot W.CUR (a cursor: the same 256x256)", "files",
              [*gui, str(folder / "W.CUR")], must_say=("a cursor, " + icon,)),
        _case(Case, "gui --screenshot KEPT.ico over a file (refused, the file as it was)", "files",
              [*gui, str(kept)], must_say=(icon,), protected=[kept]),
        _case(Case, "gui --screenshot w.xbm (black and white)", "files", [*gui, str(folder / "w.xbm")],
              must_say=(one_bit,)),
        _case(Case, "gui --screenshot w.pbm (black and white)", "files", [*gui, str(folder / "w.pbm")],
              must_say=(one_bit,)),
        _case(Case, "gui --screenshot w.wbmp (black and white)", "files", [*gui, str(folder / "w.wbmp")],
              must_say=(one_bit,), must_not_say=(".ico,", ".xbm,")),
        _case(Case, "attach --screenshot w.ico (before dialing anything)", "files",
              ["attach", "http://127.0.0.1:9", "--quit-after", "1", "--screenshot", str(folder / "a.ico")],
              must_say=(icon,)),
        _case(Case, "gui --screenshot w.jpg (a full-colour format: taken)", "files", [*gui, str(folder / "w.jpg")],
              expect="ok"),
        _case(Case, "gui --screenshot w.pgm (grey, 8 bits a pixel: taken)", "files", [*gui, str(folder / "w.pgm")],
              expect="ok"),
    ]


def _against_vllm_cases(Case) -> list:
    against = ["bench", "real", "--against-vllm", "--device"]
    return [
        _case(Case, "bench real --against-vllm --device cuda (refused after importing torch: 17 s)", "flags",
              [*against, "cuda"], must_say=("it runs on the CPU, not cuda",)),
        _case(Case, "bench real --against-vllm --device CPU ('runs on the CPU, not CPU')", "flags",
              [*against, "CPU"], must_say=("did you mean cpu?",), must_not_say=("not CPU\n",)),
    ]


def _version_cases(Case) -> list:
    return [
        _case(Case, "--version --self-test (the version printed, exit 0, no self-test run)", "flags",
              ["--version", "--self-test"], must_say=("`kvscope --self-test` without it",)),
        _case(Case, "--version math (the command not run)", "flags", ["--version", "math"],
              must_say=("--version prints the version and exits",)),
        _case(Case, "--version alone (taken)", "flags", ["--version"], expect="ok", must_say=("kvscope ",)),
    ]


def _format_name_cases(d: Path, Case, write) -> list:
    folder = d / "cli19" / "config"
    presets = folder / "presets" / "models"
    presets.mkdir(parents=True, exist_ok=True)
    env = {"KVSCOPE_CONFIG_DIR": str(folder)}
    run = ["run", "--quiet", "--requests", "1"]
    return [
        _case(Case, "run --json PRESETS/mine.toml (JSON listed as an invalid preset, 'malformed TOML')", "files",
              [*run, "--json", str(presets / "mine.toml")], env=env, must_say=("says TOML",)),
        _case(Case, "compare --csv c.xlsx (CSV that Excel will not open under that name)", "files",
              ["compare", "--scenario", "cache-ceiling", "--quiet", "--csv", str(d / "cli19" / "c.xlsx")],
              must_say=("says an Excel workbook",)),
        _case(Case, "run --record r.yaml", "files", [*run, "--record", str(d / "cli19" / "r.yaml")],
              must_say=("give a .kvrec name",)),
        _case(Case, "run --json PRESETS/run.json (not a preset's name: taken)", "files",
              [*run, "--json", str(presets / "run.json")], env=env, expect="ok"),
    ]
