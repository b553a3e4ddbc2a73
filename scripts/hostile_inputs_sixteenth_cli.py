"""The sixteenth hostile pass's cases (the command line and attach), for scripts/hostile_inputs.py; every name
begins "sixteenth cli:" (`--only "sixteenth cli"` runs them). Found, and how it behaved before: `math --params
1e6` said its weights as "(--params 0.00 B x 2 B (bf16))", a million parameters as none, and `math --model
tiny-llama` its 34 M parameters as "0.03 B parameters". `verify --model deepseek-v3` and `calibrate --model
deepseek-v3` (random weights past the machine's memory) printed `loading ...`, then the refusal: two lines on
stderr. `math --json out.json` (math's --json is a switch that prints to stdout; run's takes a file) was
"unrecognized arguments: out.json", as were `scenarios --json s.json` and `math --enforce-eager yes`, the switch
unnamed; `bench scheduler trace` "unrecognized arguments: trace". `math --model presets/models/llama-3-8b.toml`
(a preset's file) was "a Hugging Face repository name, not a preset", `--model ./config.json` and `--hardware
PATH.toml` "a preset name uses letters, digits, ...". `kvscope math --self-test` was "did you mean
--reserve-bytes?". `run --record /dev/null` (and attach's) said "replay it with `kvscope gui --replay
/dev/null`". `compare --scenario static-vs-continuous --requests 5` was "scenario static-vs-continuous: needs at
least 64 requests ..., got 5", the flag unnamed (--seed is named). Every case's `expect` is the right behaviour.

Not expressible with Case (tested in tests/test_cli_hostile_sixteenth.py instead): attach's summary said
--duration rounded to six digits ("Attached for 1.23457 s" for 1.2345678; it needs a server on loopback and a
publisher that sends), and the fit check made with a machine of 1 GiB (llama-3-8b)."""

from __future__ import annotations

from pathlib import Path

from hostile_case import ROOT


def sixteenth_cli_cases(d: Path, Case, write) -> list:
    return (_parameter_cases(Case) + _loading_cases(Case) + _switch_cases(Case) + _preset_path_cases(d, Case, write)
            + _own_flag_cases(Case) + _dev_null_cases(d, Case) + _compare_cases(Case))


def _case(Case, name: str, *args, **kwargs):
    return Case(f"sixteenth cli: {name}", *args, **kwargs)


def _parameter_cases(Case) -> list:
    return [
        _case(Case, "math --params 1e6 (said as '--params 0.00 B')", "numbers", ["math", "--params", "1e6"],
              expect="ok", must_say=("(--params 1.00 M x 2 B (bf16))",), must_not_say=("0.00 B",)),
        _case(Case, "math --model tiny-llama (its 34 M parameters said as '0.03 B')", "numbers",
              ["math", "--model", "tiny-llama"], expect="ok", must_say=("34.02 M parameters",),
              must_not_say=("0.03 B",)),
        _case(Case, "math --params 8e9 (in billions, as before)", "numbers", ["math", "--params", "8e9"],
              expect="ok", must_say=("(--params 8.00 B x 2 B (bf16))",)),
    ]


def _loading_cases(Case) -> list:
    said = ("deepseek-v3 needs about 2499.8 GiB for its weights as fp32",)
    return [
        _case(Case, "verify --model deepseek-v3 (refused after `loading ...`: two lines)", "flags",
              ["verify", "--model", "deepseek-v3", "--device", "cpu"], must_say=said, must_not_say=("loading",)),
        _case(Case, "calibrate --model deepseek-v3 (refused after `loading ...`: two lines)", "flags",
              ["calibrate", "--model", "deepseek-v3", "--device", "cpu", "--no-save"], must_say=said,
              must_not_say=("loading",)),
    ]


def _switch_cases(Case) -> list:
    return [
        _case(Case, "math --json out.json ('unrecognized arguments: out.json')", "flags",
              ["math", "--json", "out.json"],
              must_say=("out.json (--json takes no value in `kvscope math`", "redirect it to keep it: > out.json")),
        _case(Case, "scenarios --json s.json ('unrecognized arguments: s.json')", "flags",
              ["scenarios", "--json", "s.json"], must_say=("s.json (--json takes no value in `kvscope scenarios`",)),
        _case(Case, "math --enforce-eager yes ('unrecognized arguments: yes')", "flags",
              ["math", "--enforce-eager", "yes"], must_say=("yes (--enforce-eager takes no value",)),
        _case(Case, "bench scheduler trace ('unrecognized arguments: trace')", "flags", ["bench", "scheduler", "trace"],
              must_say=("trace (a second choice: `kvscope bench` takes one at a time)",)),
        _case(Case, "math extra (no switch before it: said as before)", "flags", ["math", "extra"],
              must_say=("unrecognized arguments: extra",), must_not_say=("takes no value",)),
    ]


def _preset_path_cases(d: Path, Case, write) -> list:
    config = write(d / "sixteenth-cli" / "config.json", "{}")
    said = "a path, and --model takes a preset's name"
    return [
        _case(Case, "math --model PRESETS/models/llama-3-8b.toml ('a Hugging Face repository name')", "flags",
              ["math", "--model", str(ROOT / "presets" / "models" / "llama-3-8b.toml")], must_say=(said,),
              must_not_say=("Hugging Face",)),
        _case(Case, "math --model presets/models/llama-3-8b.toml, relative ('a Hugging Face repository name')",
              "flags", ["math", "--model", "presets/models/llama-3-8b.toml"],
              must_say=("takes a preset's name",), must_not_say=("repository",)),
        _case(Case, "math --model DIR/config.json ('a preset name uses letters, digits')", "flags",
              ["math", "--model", str(config)], must_say=(said, "--model-path DIR"),
              must_not_say=("uses letters",)),
        _case(Case, "math --hardware PRESETS/hardware/h100-80gb.toml ('a preset name uses letters')", "flags",
              ["math", "--hardware", str(ROOT / "presets" / "hardware" / "h100-80gb.toml")],
              must_say=("a path, and --hardware takes a preset's name",), must_not_say=("uses letters",)),
        _case(Case, "math --model meta-llama/Meta-Llama-3-8B (a hub name: said as before)", "flags",
              ["math", "--model", "meta-llama/Meta-Llama-3-8B"], must_say=("is a Hugging Face repository name",)),
        _case(Case, "run --workload PRESETS/workloads/chat.toml (a workload file: taken)", "flags",
              ["run", "--quiet", "--requests", "2", "--workload", str(ROOT / "presets" / "workloads" / "chat.toml")],
              expect="ok"),
    ]


def _own_flag_cases(Case) -> list:
    return [
        _case(Case, "kvscope math --self-test ('did you mean --reserve-bytes?')", "flags", ["math", "--self-test"],
              must_say=("--self-test (a flag of `kvscope` itself, typed before the command",),
              must_not_say=("did you mean",)),
    ]


def _dev_null_cases(d: Path, Case) -> list:
    kept = d / "sixteenth-cli" / "r.kvrec"
    return [
        _case(Case, "run --record /dev/null ('replay it with kvscope gui --replay /dev/null')", "files",
              ["run", "--quiet", "--requests", "2", "--record", "/dev/null"], expect="ok",
              must_say=("which keeps no file: there is nothing to replay",), must_not_say=("--replay /dev/null",)),
        _case(Case, "run --record r.kvrec (a file: offered for replay)", "files",
              ["run", "--quiet", "--requests", "2", "--record", str(kept)], expect="ok",
              must_say=(f"replay it with `kvscope gui --replay {kept}`",)),
    ]


def _compare_cases(Case) -> list:
    return [
        _case(Case, "compare --scenario static-vs-continuous --requests 5 (the flag unnamed)", "numbers",
              ["compare", "--scenario", "static-vs-continuous", "--requests", "5"],
              must_say=("--requests 5: scenario static-vs-continuous needs at least 64 requests",)),
    ]
