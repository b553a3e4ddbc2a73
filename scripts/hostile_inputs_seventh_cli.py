"""The seventh hostile pass's cases (the command line), for scripts/hostile_inputs.py: an output path
below a file (`--json file.txt/x` said "the folder does not exist"), KVSCOPE_CONFIG_DIR through a
file (`file.txt/` was taken without a word), a mis-cased or mistyped scenario, choice or flag with
no did-you-mean, `math --enable-prefix-caching` (it changed nothing there), the real backend's
commands refusing after `loading ...` (two lines, a cache folder that is a file among them), and
memory under a byte said as the preset's. Every case's `expect` is the right behaviour.

Not expressible with Case (tested in tests/test_cli_hostile_seventh.py instead): the shared output
check of app/lab/output_path.py called as the window's exports call it (a trailing '/', /proc),
which the command line's own check alone refused before."""

from __future__ import annotations

from pathlib import Path

RUN = ["run", "--quiet", "--requests", "2"]


def seventh_cli_cases(d: Path, Case, write) -> list:
    t = d / "seventh-cli"
    t.mkdir(parents=True, exist_ok=True)
    notes = write(t / "file.txt", "notes that must survive\n")
    return (_below_a_file_cases(notes, Case) + _config_folder_cases(notes, Case) + _name_cases(Case)
            + _prefix_caching_cases(Case) + _real_backend_cases(Case) + _other_cases(notes, Case))


def _below_a_file_cases(notes: Path, Case) -> list:
    """A path through a file: the OS says "not a directory"; kvscope said the folder was missing."""
    said = (f"{notes} is a file, not a folder",)
    return [
        Case("run --json file.txt/x", "files", RUN + ["--json", f"{notes}/x"], protected=[notes], must_say=said,
             must_not_say=("does not exist",)),
        Case("run --record file.txt/a/b.kvrec (deeper)", "files", RUN + ["--record", f"{notes}/a/b.kvrec"],
             protected=[notes], must_say=said),
        Case("compare --csv file.txt/x.csv", "files",
             ["compare", "--quiet", "--scenario", "cache-ceiling", "--csv", f"{notes}/x.csv"], protected=[notes],
             must_say=said),
        Case("verify --json file.txt/x (its own check said no folder)", "files", ["verify", "--json", f"{notes}/x"],
             protected=[notes], must_say=said),
    ]


def _config_folder_cases(notes: Path, Case) -> list:
    """Path() drops the '/' and os.path.exists() is False through a file: both were taken silently."""
    return [
        Case("presets with KVSCOPE_CONFIG_DIR=file.txt/", "env", ["presets"], env={"KVSCOPE_CONFIG_DIR": f"{notes}/"},
             protected=[notes], must_say=("KVSCOPE_CONFIG_DIR=", "is a file, not a folder")),
        Case("presets with KVSCOPE_CONFIG_DIR=file.txt/sub", "env", ["presets"],
             env={"KVSCOPE_CONFIG_DIR": f"{notes}/sub"}, protected=[notes], must_say=("KVSCOPE_CONFIG_DIR=",)),
        Case("math --model nope with KVSCOPE_CONFIG_DIR=file.txt/sub", "env", ["math", "--model", "nope"],
             env={"KVSCOPE_CONFIG_DIR": f"{notes}/sub"}, must_say=("KVSCOPE_CONFIG_DIR=",)),
        Case("presets with XDG_CONFIG_HOME a file", "env", ["presets"],
             env={"XDG_CONFIG_HOME": str(notes), "KVSCOPE_CONFIG_DIR": ""}, must_say=("XDG_CONFIG_HOME=",)),
        Case("presets with KVSCOPE_CONFIG_DIR blank", "env", ["presets"], env={"KVSCOPE_CONFIG_DIR": " "},
             must_say=("KVSCOPE_CONFIG_DIR=", "blank")),
        Case("verify with KVSCOPE_CACHE_DIR a file (refused after `loading ...`)", "env",
             ["verify", "--model", "tiny-llama"], env={"KVSCOPE_CACHE_DIR": str(notes)}, protected=[notes],
             must_say=("KVSCOPE_CACHE_DIR=", "not a folder")),
    ]


def _name_cases(Case) -> list:
    """A name one letter or one case away from one kvscope knows: said with the one it seems to mean."""
    return [
        Case("compare --scenario Prefix-Caching", "flags", ["compare", "--quiet", "--scenario", "Prefix-Caching"],
             must_say=("did you mean prefix-caching?",)),
        Case("compare --scenario cache-ceilng", "flags", ["compare", "--quiet", "--scenario", "cache-ceilng"],
             must_say=("did you mean cache-ceiling?",)),
        Case("compare --scenario 'prefix caching'", "flags", ["compare", "--quiet", "--scenario", "prefix caching"],
             must_say=("did you mean prefix-caching?",)),
        Case("compare --scenario cache-ceiling.toml (no such file here)", "flags",
             ["compare", "--quiet", "--scenario", "cache-ceiling.toml"], must_say=("did you mean the scenario",)),
        Case("presets Models", "flags", ["presets", "Models"], must_say=("did you mean models?",)),
        Case("math --accounting Lesson", "flags", ["math", "--accounting", "Lesson"], must_say=("did you mean lesson?",)),
        Case("Math (the command)", "flags", ["Math"], must_say=("did you mean math?",)),
        Case("math --JSON", "flags", ["math", "--JSON"], must_say=("did you mean --json?",)),
        Case("math --model 'Llama 3 8B'", "flags", ["math", "--model", "Llama 3 8B"],
             must_say=("did you mean llama-3-8b?",)),
        Case("math --model in full-width letters", "flags", ["math", "--model", "\uff4c\uff4c\uff41\uff4d\uff41-3-8b"],
             must_say=("did you mean llama-3-8b?",)),
        Case("run --workload /dev/zero (a path without .toml)", "flags", RUN + ["--workload", "/dev/zero"],
             must_say=("a path", ".toml")),
    ]


def _prefix_caching_cases(Case) -> list:
    """Memory depends on prefix caching only for linear-attention state under vLLM from 0.24."""
    hybrid = ["math", "--model", "qwen3.6-27b-fp8", "--hardware", "h100-80gb"]
    return [
        Case("math --enable-prefix-caching", "flags", ["math", "--enable-prefix-caching"],
             must_say=("--enable-prefix-caching", "changes nothing")),
        Case("math --no-enable-prefix-caching", "flags", ["math", "--no-enable-prefix-caching"],
             must_say=("--no-enable-prefix-caching", "changes nothing")),
        Case("math --no-enable-prefix-caching --accounting lesson on a hybrid model", "flags",
             hybrid + ["--no-enable-prefix-caching", "--accounting", "lesson"], must_say=("changes nothing",)),
        Case("math --no-enable-prefix-caching on a hybrid model (sizes its state blocks)", "flags",
             hybrid + ["--no-enable-prefix-caching"], expect="ok"),
    ]


def _real_backend_cases(Case) -> list:
    """Refused after `kvscope: loading NAME ...`: two lines, and torch's list of 20 device types."""
    return [
        Case("verify --device tpu", "flags", ["verify", "--device", "tpu"], must_say=("cpu or cuda",)),
        Case("calibrate --device cuda:-1", "flags", ["calibrate", "--device", "cuda:-1", "--no-save"],
             must_say=("numbers a device",)),
        Case("calibrate --model Tiny-Llama", "flags", ["calibrate", "--model", "Tiny-Llama", "--no-save"],
             must_say=("did you mean tiny-llama?",)),
        Case("verify --model-path a missing folder", "flags", ["verify", "--model-path", "/nonexistent-kvscope"],
             must_say=("no such directory",), must_not_say=("loading",)),
    ]


def _other_cases(notes: Path, Case) -> list:
    return [
        Case("math --memory-gib 1e-300 (0 bytes)", "numbers", ["math", "--memory-gib", "1e-300"],
             must_say=("--memory-gib", "less than one byte")),
        Case("attach '' (the URL)", "flags", ["attach", "", "--duration", "1"], must_say=("URL is empty",),
             must_not_say=("--url",)),
        Case("export --csv file.txt/x", "files", ["export", str(notes), "--csv", f"{notes}/x"], protected=[notes]),
    ]
