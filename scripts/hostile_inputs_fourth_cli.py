"""The fourth hostile pass's cases (command-line flags and values of every command), for
scripts/hostile_inputs.py: each carries its category (numbers, flags, files, env), beside its
fixture. Every case's `expect` is what the right behaviour is, so a case the product gets wrong
today shows as a failure.

Not expressible with Case (said here so it is not lost): `kvscope math >&-` (standard output
closed) ends in a traceback (AttributeError: 'NoneType' object has no attribute 'flush', from
main()'s sys.stdout.flush()); a case for it needs the runner to close the child's stdout."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KVSCOPE = ROOT / ".venv" / "bin" / "kvscope"
HUGE = "9" * 5000  # past Python's int_max_str_digits (4,300)
LONG = "x" * 100_000  # a 100,000-character value
ECHOED = "x" * 1000  # a refusal that repeats a long value whole says at least this much of it


def fourth_cli_cases(d: Path, Case, write) -> list:
    t = d / "fourth-cli"
    t.mkdir(parents=True, exist_ok=True)
    return (_number_cases(Case) + _version_cases(Case) + _conflict_cases(Case) + _self_test_cases(Case)
            + _bench_cases(t, Case) + _calibrate_verify_cases(t, Case) + _attach_cases(Case)
            + _long_value_cases(Case) + _output_cases(t, Case, write) + _env_cases(t, Case, write))


def _number_cases(Case) -> list:
    """Numbers as people and programs spell them: other digits, signs, precision past a float's."""
    run = ["run", "--quiet", "--requests", "2"]
    return [
        # accepted spellings of the same number: the value is what was meant, and the table says it
        Case("math --block-size in full-width digits", "numbers", ["math", "--block-size", "１６"], expect="ok",
             must_say=("16 tokens",)),
        Case("math --block-size 1_6 (an underscore)", "numbers", ["math", "--block-size", "1_6"], expect="ok",
             must_say=("16 tokens",)),
        Case("math --block-size 0x10 (hex)", "numbers", ["math", "--block-size", "0x10"], must_say=("not a number",)),
        Case("math --block-size -0", "numbers", ["math", "--block-size", "-0"], must_say=("block_size",)),
        Case("math --max-model-len -0", "numbers", ["math", "--max-model-len", "-0"], must_say=("max_model_len",)),
        # a number that is not whole, read as one only because a float cannot tell them apart
        Case("math --block-size 16.0000000000000001 (not a whole number)", "numbers",
             ["math", "--block-size", "16.0000000000000001"], must_say=("whole",)),
        # seeds past a float's 53 bits: the largest seed the refusal names is refused, and a seed
        # is silently replaced by a neighbour (2**53 + 1 runs as 2**53: "same seed, same run" breaks)
        Case("run --seed 9223372036854775807 (the most it says it takes)", "numbers",
             run + ["--seed", "9223372036854775807"], expect="ok"),
        Case("compare --seed 9223372036854775807 (the most it says it takes)", "numbers",
             ["compare", "--quiet", "--scenario", "cache-ceiling", "--seed", "9223372036854775807"], expect="ok"),
        Case("run --seed 2**53 + 1 is the seed the report says", "numbers",
             run + ["--seed", "9007199254740993", "--json", "-"], expect="ok",
             must_say=('"seed": 9007199254740993',)),
        Case("run --seed 2**64", "numbers", run + ["--seed", "18446744073709551616"], must_say=("--seed",)),
        Case("run --max-model-len 1 (every request rejected, and said so)", "numbers",
             run + ["--max-model-len", "1"], expect="ok", must_say=("longer than max_model_len",)),
        Case("run --block-size 1 --kv-cache-memory-bytes 1e6 (not one request fits)", "numbers",
             run + ["--block-size", "1", "--kv-cache-memory-bytes", "1e6"], must_say=("vLLM would refuse",)),
    ]


def _version_cases(Case) -> list:
    """--vllm-version: str.isdigit() is true of digits int() does not read (superscripts), and of
    5,000 of them; a release past the ones modelled is claimed as modelled."""
    return [
        Case("math --vllm-version 0.² (a superscript digit)", "numbers", ["math", "--vllm-version", "0.²"],
             must_say=("vllm_version",)),
        Case("run --vllm-version ¹.⁸ (superscript digits)", "numbers",
             ["run", "--quiet", "--requests", "2", "--vllm-version", "¹.⁸"], must_say=("vllm_version",)),
        Case("math --vllm-version 0.<5,000 digits>", "numbers", ["math", "--vllm-version", "0." + HUGE],
             must_say=("vllm_version",)),
        Case("math --vllm-version 99.99 (a release not modelled)", "numbers", ["math", "--vllm-version", "99.99"],
             must_not_say=("what vLLM 99.99 allocates",)),
        Case("math --vllm-version v0.8", "numbers", ["math", "--vllm-version", "v0.8"], expect="ok"),
        Case("math --vllm-version '0. 8'", "numbers", ["math", "--vllm-version", "0. 8"], must_say=("vllm_version",)),
    ]


def _conflict_cases(Case) -> list:
    """Values valid alone that cannot go together, and flags that would change nothing."""
    run = ["run", "--quiet", "--requests", "2"]
    return [
        # vLLM refuses to start: max_num_batched_tokens must be >= max_num_seqs
        Case("math --max-num-batched-tokens 16 --max-num-seqs 256", "flags",
             ["math", "--max-num-batched-tokens", "16", "--max-num-seqs", "256"], must_say=("max_num_seqs",)),
        Case("run --max-num-batched-tokens 1 --max-num-seqs 256", "flags",
             run + ["--max-num-batched-tokens", "1", "--max-num-seqs", "256"], must_say=("max_num_seqs",)),
        Case("run without chunked prefill, a budget under max_model_len", "flags",
             run + ["--no-enable-chunked-prefill", "--max-num-batched-tokens", "15"], must_say=("chunked prefill",)),
        # two flags that both give the weights' size: one would be dropped without a word
        Case("math --params 8e9 --weights-bytes 16e9", "flags",
             ["math", "--params", "8e9", "--weights-bytes", "16e9"]),
        # a set KV budget holds nothing back: --reserve-bytes would change nothing
        Case("math --kv-cache-memory-bytes 1e9 --reserve-bytes 1e9", "flags",
             ["math", "--kv-cache-memory-bytes", "1e9", "--reserve-bytes", "1e9"]),
        # the lesson's formula models no vLLM release
        # the lesson's formula has no vLLM version; the table says "the formula of ..." and no version
        Case("math --accounting lesson --vllm-version 0.5", "flags",
             ["math", "--accounting", "lesson", "--vllm-version", "0.5"], expect="either",
             must_not_say=("vLLM 0.5",)),
        # a CPU target's KV pool is a set 1 GiB: the utilization is not applied, and the table must not apply it
        Case("math --hardware this-machine --gpu-memory-utilization 0.5", "flags",
             ["math", "--hardware", "this-machine", "--gpu-memory-utilization", "0.5"], expect="either",
             must_not_say=("x gpu_memory_utilization 0.5",)),
        # latent attention has no KV heads: the flag would change nothing
        Case("math --model deepseek-v3 --kv-heads 4", "flags", ["math", "--model", "deepseek-v3", "--kv-heads", "4"]),
        Case("math --model qwen3-next-80b-a3b --layers 1", "flags",
             ["math", "--model", "qwen3-next-80b-a3b", "--layers", "1"], must_say=("layer_types",)),
        Case("math --attention-heads 12 on 8 KV heads", "flags", ["math", "--attention-heads", "12"],
             must_say=("must divide",)),
        Case("math --hardware h100-80gb --tensor-parallel-size 2", "flags",
             ["math", "--hardware", "h100-80gb", "--tensor-parallel-size", "2"], must_say=("needs 2 devices",)),
        # the real backend runs the weights it loads: a simulated weight size or precision would be ignored
        Case("run --backend real --weight-dtype int4", "flags",
             ["run", "--quiet", "--backend", "real", "--model", "tiny-llama", "--requests", "2", "--weight-dtype",
              "int4"], slow=True),
        Case("run --workload './chat'", "flags", run + ["--workload", "./chat"]),
        Case("run --workload=-chat", "flags", run + ["--workload=-chat"]),
    ]


def _self_test_cases(Case) -> list:
    return [
        Case("--self-test math", "flags", ["--self-test", "math"]),
        Case("--self-test --startup math", "flags", ["--self-test", "--startup", "math"]),
        Case("--self-test -h", "flags", ["--self-test", "-h"], expect="either"),
        Case("--self-test ''", "flags", ["--self-test", ""]),
        # argparse's abbreviation of --self-test: the command runs and the self-test is dropped
        Case("--self math (an abbreviation of --self-test)", "flags", ["--self", "math"]),
        Case("--self-t presets", "flags", ["--self-t", "presets"]),
        Case("--self-test=1", "flags", ["--self-test=1"]),
        Case("math --self-test", "flags", ["math", "--self-test"]),
    ]


def _bench_cases(t: Path, Case) -> list:
    """Flag parsing only: a case that is accepted starts at most `bench scheduler` (about 2 s)."""
    return [
        # `bench cuda` says a bad --device on stdout, with no `kvscope ... error` line on stderr
        Case("bench cuda --device nonsense", "flags", ["bench", "cuda", "--device", "nonsense"],
             must_say=("--device",)),
        Case("bench cuda --device cuda:0", "flags", ["bench", "cuda", "--device", "cuda:0"], must_say=("--device",)),
        # flags of other benchmarks: --part, --rounds, --in-window and --against-vllm are refused so; these pass
        Case("bench scheduler --minutes 5", "flags", ["bench", "scheduler", "--minutes", "5"],
             must_say=("--minutes",)),
        Case("bench scheduler --tracemalloc", "flags", ["bench", "scheduler", "--tracemalloc"],
             must_say=("--tracemalloc",)),
        Case("bench scheduler --scenario nope", "flags", ["bench", "scheduler", "--scenario", "nope"]),
        Case("bench scheduler --requests 5", "flags", ["bench", "scheduler", "--requests", "5"],
             must_say=("--requests",)),
        Case("bench scheduler --device cuda:7", "flags", ["bench", "scheduler", "--device", "cuda:7"]),
        Case("bench scheduler --part fast", "flags", ["bench", "scheduler", "--part", "fast"], must_say=("--part",)),
        Case("bench trace --against-vllm", "flags", ["bench", "trace", "--against-vllm"],
             must_say=("--against-vllm",)),
        Case("bench --minutes 0", "numbers", ["bench", "soak", "--minutes", "0"]),
        Case("bench scheduler --json in a missing folder", "files",
             ["bench", "scheduler", "--json", str(t / "no" / "b.json")], must_say=("does not exist",)),
    ]


def _calibrate_verify_cases(t: Path, Case) -> list:
    """Refused before anything is loaded or measured (those that load a model are marked slow)."""
    return [
        Case("calibrate --threads 0", "numbers", ["calibrate", "--threads", "0"]),
        Case("calibrate --scale 0", "numbers", ["calibrate", "--scale", "0"]),
        Case("calibrate --seed 2147483648", "numbers", ["calibrate", "--seed", "2147483648"]),
        Case("calibrate --json a folder", "files", ["calibrate", "--json", str(t)], must_say=("is a folder",)),
        Case("calibrate --model nope", "flags", ["calibrate", "--model", "nope"], slow=True),
        Case("calibrate --model with --model-path", "flags",
             ["calibrate", "--model", "tiny-llama", "--model-path", str(t)], slow=True, must_say=("give one",)),
        # `verify --kv-cache-dtype auto` is taken since the thirteenth pass, as run and math take it (its case there)
        Case("verify --kv-cache-dtype all,fp16", "flags", ["verify", "--kv-cache-dtype", "all,fp16"]),
        Case("verify --passages 65", "numbers", ["verify", "--passages", "65"]),
    ]


def _attach_cases(Case) -> list:
    """No server: each is refused by its flags before (or on) the first request, to a closed port."""
    dead, events = "http://127.0.0.1:1", ["--kv-events", "tcp://127.0.0.1:9"]
    return [
        Case("attach: DP rank past port 65535", "flags",
             ["attach", dead, "--kv-events", "tcp://127.0.0.1:65535", "--data-parallel-size", "2", "--duration", "1"],
             must_say=("65536",)),
        Case("attach: a URL with a space", "flags", ["attach", "http://a b", *events, "--duration", "1"]),
        Case("attach --json without --duration", "flags", ["attach", dead, *events, "--json", "x.json"],
             must_say=("--duration",)),
        Case("attach --duration with --theme", "flags", ["attach", dead, *events, "--duration", "1", "--theme", "dark"],
             must_say=("--theme",)),
    ]


def _long_value_cases(Case) -> list:
    """A 100,000-character value (or a 5,000-digit number) said back whole makes a 100 kB "line";
    the product shortens long paths (`x...y (100,000 characters)`), and should these."""
    return [
        Case("math --vllm-version of 100,000 characters", "numbers", ["math", "--vllm-version", LONG],
             must_not_say=(ECHOED,)),
        Case("math --kv-cache-dtype of 100,000 characters", "numbers", ["math", "--kv-cache-dtype", LONG],
             must_not_say=(ECHOED,)),
        Case("math --weight-dtype of 100,000 characters", "numbers", ["math", "--weight-dtype", LONG],
             must_not_say=(ECHOED,)),
        Case("math --block-size of 5,000 digits", "numbers", ["math", "--block-size", HUGE],
             must_not_say=("9" * 1000,)),
        Case("presets <100,000 characters>", "flags", ["presets", LONG], must_not_say=(ECHOED,)),
        Case("math --<100,000 characters>", "flags", ["math", "--" + LONG], must_not_say=(ECHOED,)),
        Case("math --model of 100,000 characters", "flags", ["math", "--model", LONG], must_not_say=(ECHOED,)),
    ]


def _recording(path: Path) -> Path:
    """A small recording made by the product itself."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([str(KVSCOPE), "run", "--quiet", "--requests", "3", "--record", str(path)], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
    return path


def _output_cases(t: Path, Case, write) -> list:
    recording = _recording(t / "r.kvrec")
    run = ["run", "--quiet", "--requests", "2"]
    return [
        # another name for standard output: `--record -` and `--csv -` are refused; these write a
        # binary recording, or a CSV, into the text already there
        Case("run --record /dev/stdout", "files", run + ["--record", "/dev/stdout"], must_say=("stdout",)),
        Case("compare --json - --csv /dev/stdout", "files",
             ["compare", "--quiet", "--scenario", "cache-ceiling", "--json", "-", "--csv", "/dev/stdout"],
             must_say=("stdout",)),
        Case("export --csv /dev/stdout", "files", ["export", str(recording), "--csv", "/dev/stdout"],
             protected=[recording], must_say=("stdout",)),
        # accepted, and then says it wrote 0 B
        Case("export --csv /dev/null", "files", ["export", str(recording), "--csv", "/dev/null"], expect="ok",
             protected=[recording], must_not_say=("(0 B",)),
        Case("run --json /proc/self/status", "files", run + ["--json", "/proc/self/status"]),
        # help and listings with standard output on a full disk
        Case("--help with stdout on a full disk", "files", ["--help"], stdout="/dev/full",
             must_say=("No space left",)),
        Case("math --help with stdout on a full disk", "files", ["math", "--help"], stdout="/dev/full",
             must_say=("No space left",)),
        Case("scenarios --json with stdout on a full disk", "files", ["scenarios", "--json"], stdout="/dev/full",
             must_say=("No space left",)),
        Case("export (summary) with stdout on a full disk", "files", ["export", str(recording)], stdout="/dev/full",
             protected=[recording], must_say=("No space left",)),
        Case("bench scheduler with stdout on a full disk", "files", ["bench", "scheduler"], stdout="/dev/full",
             must_say=("No space left",)),
    ]


def _env_cases(t: Path, Case, write) -> list:
    """The environment variables the product reads (HF_HUB_CACHE, KVSCOPE_CACHE_DIR,
    KVSCOPE_CONFIG_DIR, HOME), and one Python reads for it (PYTHONIOENCODING)."""
    a_file = write(t / "a-file", "not a folder\n")
    # a Hugging Face cache whose snapshot names weights that are gone (an interrupted download:
    # the snapshot's files are symlinks into blobs/)
    hub = t / "hub"
    snapshot = hub / "models--org--gone" / "snapshots" / "r1"
    write(snapshot / "config.json", '{"architectures": ["LlamaForCausalLM"], "model_type": "llama"}')
    dangling = snapshot / "model.safetensors"
    if not dangling.is_symlink():
        os.symlink("../../blobs/missing", dangling)
    dangling_config = hub / "models--org--noconfig" / "snapshots" / "r1"
    dangling_config.mkdir(parents=True, exist_ok=True)
    if not (dangling_config / "config.json").is_symlink():
        os.symlink("../../blobs/missing", dangling_config / "config.json")
    return [
        Case("models with a cached snapshot whose weights are a dangling symlink", "env", ["models"], expect="ok",
             env={"HF_HUB_CACHE": str(hub)}),
        Case("models with HF_HUB_CACHE /dev/null", "env", ["models"], expect="ok", env={"HF_HUB_CACHE": "/dev/null"}),
        Case("models with HF_HUB_CACHE a 300-character name", "env", ["models"],
             env={"HF_HUB_CACHE": str(t / ("a" * 300))}),
        Case("models with KVSCOPE_CACHE_DIR a file", "env", ["models"], expect="ok",
             env={"KVSCOPE_CACHE_DIR": str(a_file)}),
        # `run` and `presets` refuse a KVSCOPE_CONFIG_DIR that is not a folder; `math` with a built-in
        # preset never looks there (either is fair, but not a traceback)
        Case("run with KVSCOPE_CONFIG_DIR /dev/null", "env", ["run", "--quiet", "--requests", "2"],
             env={"KVSCOPE_CONFIG_DIR": "/dev/null"}, must_say=("KVSCOPE_CONFIG_DIR",)),
        Case("math with KVSCOPE_CONFIG_DIR /dev/null", "env", ["math"], expect="either",
             env={"KVSCOPE_CONFIG_DIR": "/dev/null"}),
        Case("run with HOME missing", "env", ["run", "--quiet", "--requests", "2"], expect="ok",
             env={"HOME": str(t / "no-home")}),
        # run's table holds "±": an ASCII-only standard output must not end in a traceback
        Case("run with PYTHONIOENCODING=ascii", "env", ["run", "--quiet", "--requests", "2"], expect="ok",
             env={"PYTHONIOENCODING": "ascii"}),
    ]
