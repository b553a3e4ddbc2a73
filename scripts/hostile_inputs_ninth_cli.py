"""The ninth hostile pass's cases (the command line), for scripts/hostile_inputs.py: refusals that were
clean but wrong. A number flag's refusal said nothing of what it takes (`--block-size 0x10`, `--x=`,
inf), 1e-320 passed where 1e-400 was refused, a field set by a flag was named only as the engine's or
the workload's field (`--requests 0`: "workload chat: num_requests ..."), a flag of another command
was "did you mean --help?", a flag before the command made its value an invalid command,
`--vllm-version "0.19 "` was shown with its space, /proc/self/mem was "Input/output error",
`kvscope models` listed a KVSCOPE_CACHE_DIR that is a file as "none yet", a HOME that is a file was
said only after `loading ...` (calibrate, the real backend), and a name's bytes that are not UTF-8 were shown as "?". Every
case's `expect` is the right behaviour.

Not expressible with Case (tested in tests/test_cli_hostile_ninth.py instead): `kvscope --help >&-`
(the runner always gives a stdout; it exited 0 with the help on stderr), and a user preset named
apart from another only in case (saved from the window's editor, not the command line)."""

from __future__ import annotations

import sys
from pathlib import Path

RUN = ["run", "--quiet", "--requests", "2"]


def ninth_cli_cases(d: Path, Case, write) -> list:
    t = d / "ninth-cli"
    t.mkdir(parents=True, exist_ok=True)
    notes = write(t / "notes.txt", "notes that must survive\n")
    return (_number_cases(Case) + _flag_named_cases(Case) + _placement_cases(Case)
            + _text_cases(t, notes, Case))


def _number_cases(Case) -> list:
    """A refused number says how to write one; a subnormal is as near 0 as 1e-400 is."""
    takes = ("such as 16",)
    return [
        Case("math --block-size 0x10 (says what it takes)", "numbers", ["math", "--block-size", "0x10"],
             must_say=("hexadecimal is not read",) + takes),
        Case("math --block-size= (no value)", "numbers", ["math", "--block-size="], must_say=("no value given",) + takes),
        Case("math --max-model-len inf (says what it takes)", "numbers", ["math", "--max-model-len", "inf"],
             must_say=("not a finite number",) + takes),
        Case("math --max-model-len -inf", "numbers", ["math", "--max-model-len", "-inf"], must_say=takes),
        Case("math --head-dim nan", "numbers", ["math", "--head-dim", "nan"], must_say=takes),
        Case("math --layers 1.5 (says what it takes)", "numbers", ["math", "--layers", "1.5"],
             must_say=("not a whole number",) + takes),
        Case("math --reserve-bytes 0.5", "numbers", ["math", "--reserve-bytes", "0.5"], must_say=("such as 16e9",)),
        Case("math --gpu-memory-utilization 1e-320 (a subnormal)", "numbers",
             ["math", "--gpu-memory-utilization", "1e-320"], must_say=("too close to 0", "at least 1e-300")),
        Case("attach --duration 1e-320 (a subnormal)", "numbers",
             ["attach", "http://127.0.0.1:1", "--duration", "1e-320"], must_say=("too close to 0",)),
        Case("run --arrival-rate 1e-310", "numbers", RUN + ["--arrival-rate", "1e-310"], must_say=("too close to 0",)),
        Case("math --block-size 1_000 (Python's and TOML's grouping)", "numbers", ["math", "--block-size", "1_000"],
             expect="ok", must_say=("1,000 tokens",)),
    ]


def _flag_named_cases(Case) -> list:
    """The field a typed flag set is said with the flag as typed, the field's own name kept."""
    def lead(flag_value, field):
        return (f"error: {flag_value}: ", field)

    return [
        Case("math --max-model-len 0 (named as the engine's field)", "flags", ["math", "--max-model-len", "0"],
             must_say=lead("--max-model-len 0", "max_model_len")),
        Case("math --block-size -16", "flags", ["math", "--block-size", "-16"],
             must_say=lead("--block-size -16", "block_size")),
        Case("math --attention-heads 5 (divides no KV heads)", "flags", ["math", "--attention-heads", "5"],
             must_say=lead("--attention-heads 5", "num_attention_heads")),
        Case("math --kv-heads 5 --model llama-3-8b", "flags", ["math", "--model", "llama-3-8b", "--kv-heads", "5"],
             must_say=lead("--kv-heads 5", "num_key_value_heads")),
        Case("math --layers 0 --model llama-3-8b", "flags", ["math", "--model", "llama-3-8b", "--layers", "0"],
             must_say=lead("--layers 0", "num_hidden_layers")),
        Case("math --tensor-parallel-size 5 (splits no heads)", "flags", ["math", "--tensor-parallel-size", "5"],
             must_say=lead("--tensor-parallel-size 5", "tensor_parallel_size")),
        Case("math --gpu-memory-utilization 5", "flags", ["math", "--gpu-memory-utilization", "5"],
             must_say=lead("--gpu-memory-utilization 5", "gpu_memory_utilization")),
        Case("math --max-num-batched-tokens 5 (under max_num_seqs)", "flags",
             ["math", "--max-num-batched-tokens", "5"], must_say=lead("--max-num-batched-tokens 5", "max_num_seqs")),
        Case("run --requests 0 (named as the workload's field)", "flags", ["run", "--quiet", "--requests", "0"],
             must_say=lead("--requests 0", "num_requests")),
        Case("run --arrival-rate -5", "flags", RUN + ["--arrival-rate", "-5"],
             must_say=lead("--arrival-rate -5", "arrival_rate_per_s")),
        Case("compare --requests 99999999999", "flags",
             ["compare", "--scenario", "paged-vs-contiguous", "--quiet", "--requests", "99999999999"],
             must_say=lead("--requests 99,999,999,999", "num_requests")),
        Case("math --vllm-version 0.99 (accounting, a word, is no flag there)", "flags",
             ["math", "--vllm-version", "0.99"], must_say=("memory accounting up to 0.33",),
             must_not_say=("--accounting up",)),
    ]


def _placement_cases(Case) -> list:
    """A flag where no parser of its command takes it."""
    return [
        Case("export --model x (a flag of other commands)", "flags", ["export", "--model", "x"],
             must_say=("a flag of `kvscope math`", "not of `kvscope export`"), must_not_say=("--help?",)),
        Case("presets --json", "flags", ["presets", "--json"], must_say=("not of `kvscope presets`",)),
        Case("math --requests 2", "flags", ["math", "--requests", "2"], must_say=("a flag of `kvscope run`",)),
        Case("--model x math (before the command)", "flags", ["--model", "x", "math"],
             must_say=("--model comes before the command",), must_not_say=("invalid choice",)),
        Case("--json math", "flags", ["--json", "math"], must_say=("comes before the command",)),
    ]


def _text_cases(t: Path, notes: Path, Case) -> list:
    cases = [
        Case("math --vllm-version '0.19 ' (shown with its space)", "flags", ["math", "--vllm-version", "0.19 "],
             expect="ok", must_say=("what vLLM 0.19 allocates",), must_not_say=("0.19  ",)),
        Case("models with KVSCOPE_CACHE_DIR a file (listed as 'none yet')", "files", ["models"],
             env={"KVSCOPE_CACHE_DIR": str(notes)}, expect="ok", protected=[notes],
             must_say=("none can be: KVSCOPE_CACHE_DIR=", "not a folder"), must_not_say=("none yet",)),
        Case("models with HF_HUB_CACHE a file (not 'no models')", "files", ["models"],
             env={"HF_HUB_CACHE": str(notes)}, expect="ok", must_say=("not a folder",), protected=[notes]),
    ]
    cases += [
        Case("models with HOME a file (the default cache below it)", "files", ["models"],
             env={"HOME": str(notes), "KVSCOPE_CACHE_DIR": ""}, protected=[notes], expect="ok",
             must_say=("none can be: the kvscope cache", "is a file, not a folder")),
        Case("calibrate with HOME a file (said after `loading ...`)", "files", ["calibrate", "--no-save"],
             env={"HOME": str(notes), "KVSCOPE_CACHE_DIR": ""}, protected=[notes],
             must_say=("the kvscope cache",), must_not_say=("loading",)),
        Case("math --config with a byte not UTF-8 (shown as '?')", "files",
             ["math", "--config", f"{t}/a\udcffb.json"], env={"LC_ALL": "C"}, must_say=("a\\xffb.json",)),
        # tiny-llama's float32 is served in bf16 on the L4, as vLLM's --dtype auto does (205,649 read as float32);
        # at vLLM 0.33's default share of 0.92 (412,722 at 0.9)
        Case("math --max-model-len 1 (422356.00 concurrent sequences)", "numbers",
             ["math", "--model", "tiny-llama", "--max-model-len", "1"], expect="ok", must_say=("422,356.00",)),
    ]
    if sys.platform == "linux":
        said = ("/proc/self/mem", "cannot read its bytes", "the kernel makes up")
        cases += [
            Case("math --config /proc/self/mem (Input/output error)", "files", ["math", "--config", "/proc/self/mem"],
                 must_say=said),
            Case("export /proc/self/mem (Invalid argument)", "files", ["export", "/proc/self/mem"], must_say=said),
            Case("gui --replay /proc/self/mem", "files", ["gui", "--replay", "/proc/self/mem", "--quit-after", "0"],
                 must_say=said),
            Case("run --trace /proc/self/mem", "files", RUN + ["--trace", "/proc/self/mem"], must_say=said),
            Case("run --workload naming a trace /proc/self/mem", "files",
                 RUN[:2] + ["--workload", str(_workload(t))], must_say=("cannot read its bytes",)),
        ]
    return cases


def _workload(t: Path) -> Path:
    path = t / "mem.toml"
    path.write_text('name = "mem"\ntrace = "/proc/self/mem"\n', encoding="utf-8")
    return path
