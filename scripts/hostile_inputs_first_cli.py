"""The first pass's cases over the command line, for scripts/hostile_inputs.py: numbers out of range
for every flag that takes one, files that are not what their flag needs, and preset lookups. Every
case's `expect` is the right behaviour."""

from __future__ import annotations

import json
import os
from pathlib import Path

from hostile_case import ROOT, Case, write
from hostile_recordings import small_recording


def number_cases(d: Path) -> list:
    math = ["math", "--model", "llama-3-8b"]
    cases = []
    for flags in (
        ["--layers", "1e300"], ["--layers", "1e18"], ["--layers", "-1"], ["--layers", "0"], ["--layers", "2.5"],
        ["--kv-heads", "1e300"], ["--head-dim", "1e12"], ["--attention-heads", "1e15"],
        ["--memory-gib", "1e30"], ["--memory-gib", "-0.5e2"], ["--memory-gib", "nan"], ["--memory-gib", "-inf"],
        ["--memory-bytes", "-1e3"], ["--memory-bytes", "1e300"], ["--memory-gib", "0"],
        ["--block-size", "1e12"], ["--block-size", "0"], ["--max-model-len", "1e15"], ["--max-model-len", "-5"],
        ["--gpu-memory-utilization", "nan"], ["--gpu-memory-utilization", "2"], ["--gpu-memory-utilization", "-0.5"],
        ["--tensor-parallel-size", "1e9"], ["--reserve-bytes", "1e300"], ["--reserve-bytes", "-1e9"],
        ["--kv-cache-memory-bytes", "1e300"], ["--kv-cache-memory-bytes", "-1"], ["--weights-bytes", "1e300"],
        ["--params", "1e300"], ["--params", "-5"], ["--weight-dtype", "fp7"], ["--kv-cache-dtype", "fp7"],
        ["--vllm-version", "x.y"],
    ):
        cases.append(Case(f"math {' '.join(flags)}", "numbers", math + flags))
    cases.append(Case("math custom --layers 1e300", "numbers",
                      ["math", "--layers", "1e300", "--kv-heads", "8", "--head-dim", "128", "--weights-bytes", "1e9"]))
    cases.append(Case("math custom --head-dim 1e300", "numbers",
                      ["math", "--layers", "2", "--kv-heads", "8", "--head-dim", "1e300", "--weights-bytes", "1e9"]))
    cases.append(Case("math --memory-bytes 1", "numbers", ["math", "--memory-bytes", "1"], expect="either"))
    run = ["run", "--quiet", "--requests", "3"]
    for flags in (
        ["--requests", "-1"], ["--requests", "1e12"], ["--requests", "0"], ["--arrival-rate", "-1"],
        ["--arrival-rate", "1e308"], ["--arrival-rate", "nan"], ["--seed", "-1"], ["--seed", "1e30"],
        ["--max-num-seqs", "1e12"], ["--max-num-seqs", "0"], ["--max-num-batched-tokens", "1e15"],
        ["--memory-bytes", "1e30"], ["--kv-cache-memory-bytes", "1"], ["--kv-cache-memory-bytes", "1e15"],
        ["--block-size", "1e9"], ["--max-model-len", "1e12"],
    ):
        cases.append(Case(f"run {' '.join(flags)}", "numbers", run + flags,
                          must_not_say=("weights take",) if "--kv-cache-memory-bytes" in flags else ()))
    cases += [
        Case("gui --quit-after -1", "numbers", ["gui", "--quit-after", "-1"]),
        Case("gui --quit-after nan", "numbers", ["gui", "--quit-after", "nan"]),
        Case("gui --quit-after 1e12", "numbers", ["gui", "--quit-after", "1e12"]),
        Case("gui --size 99999x99999", "numbers", ["gui", "--size", "99999x99999", "--quit-after", "1"]),
        Case("gui --size 0x0", "numbers", ["gui", "--size", "0x0"]),
        Case("gui --size axb", "numbers", ["gui", "--size", "axb"]),
        Case("gui --size 1e3x800", "numbers", ["gui", "--size", "1e3x800"]),
        Case("gui --size -5x5", "numbers", ["gui", "--size", "-5x5", "--quit-after", "1"]),
        Case("gui --size 1600x", "numbers", ["gui", "--size", "1600x", "--quit-after", "1"]),
        Case("gui --size 1e9x1e9", "numbers", ["gui", "--size", "1e9x1e9", "--quit-after", "1"]),
        Case("gui --size 99999999999999999999x800", "numbers",
             ["gui", "--size", "99999999999999999999x800", "--quit-after", "1"]),
        Case("gui --quit-after inf", "numbers", ["gui", "--quit-after", "inf"]),
        Case("gui --quit-after 1e-300 (closes at once)", "numbers",
             ["gui", "--backend", "simulated", "--quit-after", "1e-300"], expect="ok", slow=True),
        Case("compare --requests -5", "numbers", ["compare", "--scenario", "cache-ceiling", "--requests", "-5"]),
        Case("compare --requests 1e12", "numbers", ["compare", "--scenario", "cache-ceiling", "--requests", "1e12"]),
        Case("compare --seed -1", "numbers", ["compare", "--scenario", "cache-ceiling", "--seed", "-1"]),
        Case("compare --seed 1e30", "numbers", ["compare", "--scenario", "cache-ceiling", "--seed", "1e30"]),
        Case("bench --requests 0", "numbers", ["bench", "real", "--requests", "0"]),
        Case("bench --rounds -1", "numbers", ["bench", "compare", "--rounds", "-1"]),
    ]
    return cases


def file_cases(d: Path) -> list:
    f = d / "files"
    recording = small_recording(f / "run.kvrec")
    trace = write(f / "t.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n0,100,10\n1,100,10\n")
    existing = small_recording(f / "existing.kvrec")
    bad_late = write(f / "late.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n0,100,10\n" +
                     "".join(f"{i},100,10\n" for i in range(1, 50)) + "60,oops,10\n")
    cases = [
        Case("export --perfetto onto the recording", "files", ["export", str(recording), "--perfetto", str(recording)],
             protected=[recording]),
        Case("export --csv onto the recording", "files", ["export", str(recording), "--csv", str(recording)],
             protected=[recording]),
        Case("export --csv and --perfetto the same file", "files",
             ["export", str(recording), "--csv", str(f / "same.out"), "--perfetto", str(f / "same.out")]),
        Case("export via another spelling of the path", "files",
             ["export", str(recording), "--csv", str(f / "." / "run.kvrec")], protected=[recording]),
        Case("run --trace t.csv --json t.csv", "files", ["run", "--quiet", "--trace", str(trace), "--json", str(trace)],
             protected=[trace]),
        Case("run --trace t.csv --record t.csv", "files",
             ["run", "--quiet", "--trace", str(trace), "--record", str(trace)], protected=[trace]),
        Case("run --json x --record x", "files",
             ["run", "--quiet", "--requests", "2", "--json", str(f / "x.out"), "--record", str(f / "x.out")]),
        Case("run fails early with an existing --record", "files",
             ["run", "--quiet", "--trace", str(bad_late), "--record", str(existing)], protected=[existing]),
        Case("run fails at once with an existing --record", "files",
             ["run", "--quiet", "--requests", "-1", "--record", str(existing)], protected=[existing]),
        Case("run bad model with an existing --record", "files",
             ["run", "--quiet", "--model", "nope", "--record", str(existing)], protected=[existing]),
        Case("run --json to a folder", "files", ["run", "--quiet", "--requests", "2", "--json", str(f)]),
        Case("run --json /dev/full", "files", ["run", "--quiet", "--requests", "2", "--json", "/dev/full"]),
        Case("run --record /dev/full", "files", ["run", "--quiet", "--requests", "2", "--record", "/dev/full"]),
        Case("run --json in a missing folder", "files",
             ["run", "--quiet", "--requests", "2", "--json", str(f / "no" / "x.json")]),
        Case("compare --json x --csv x", "files",
             ["compare", "--scenario", "cache-ceiling", "--json", str(f / "c.out"), "--csv", str(f / "c.out")]),
        Case("verify --json in a missing folder", "files", ["verify", "--json", str(f / "no" / "v.json")]),
        Case("export a folder", "files", ["export", str(f)]),
        Case("export /dev/zero", "files", ["export", "/dev/zero"]),
        Case("gui --replay missing", "files", ["gui", "--replay", str(f / "missing.kvrec"), "--quit-after", "1"]),
        Case("gui --screenshot in a missing folder", "files",
             ["gui", "--screenshot", str(f / "no" / "s.png"), "--quit-after", "1"]),
        Case("gui --replay a folder", "files", ["gui", "--replay", str(f), "--quit-after", "1"],
             must_say=("is a folder",)),
        Case("gui --replay /dev/zero", "files", ["gui", "--replay", "/dev/zero", "--quit-after", "1"],
             must_say=("not a regular file",)),
        Case("gui --replay a trace", "files", ["gui", "--replay", str(trace), "--quit-after", "1"],
             protected=[trace]),
        Case("gui --screenshot onto the --replay recording", "files",
             ["gui", "--replay", str(recording), "--screenshot", str(recording), "--quit-after", "1"],
             protected=[recording], must_say=("is also the recording",)),
        Case("gui --screenshot another spelling of the --replay recording", "files",
             ["gui", "--replay", str(recording), "--screenshot", str(f / "." / "run.kvrec"), "--quit-after", "1"],
             protected=[recording]),
        Case("gui --screenshot a folder", "files", ["gui", "--screenshot", str(f), "--quit-after", "1"]),
        Case("gui --screenshot without --quit-after", "files", ["gui", "--screenshot", str(f / "s.png")],
             must_say=("needs --quit-after",)),
        Case("gui --screenshot /dev/full", "files", ["gui", "--screenshot", "/dev/full", "--quit-after", "1"],
             must_say=("not a regular file",)),
        Case("gui --screenshot of an unknown image format", "files",
             ["gui", "--screenshot", str(f / "shot.nope"), "--quit-after", "1"], must_say=("no .nope images",)),
        Case("gui --model-path /dev/null", "files", ["gui", "--model-path", "/dev/null", "--quit-after", "1"]),
        Case("gui --replay with a screenshot", "files",
             ["gui", "--replay", str(recording), "--screenshot", str(f / "shot.png"), "--quit-after", "1"],
             expect="ok", slow=True, protected=[recording]),
        Case("math --config /dev/urandom", "files", ["math", "--config", "/dev/urandom"]),
    ]
    return cases + lookup_cases(f)


def lookup_cases(f: Path) -> list:
    """Paths the system cannot look up or that would block, and outputs that are inputs the run
    reads indirectly (the second hostile pass, 2026-11-27)."""
    long_name = str(f / ("a" * 300))
    (f / "loopA").unlink(missing_ok=True)
    (f / "loopB").unlink(missing_ok=True)
    os.symlink(f / "loopB", f / "loopA")
    os.symlink(f / "loopA", f / "loopB")
    pipe = f / "pipe"
    if not pipe.exists():
        os.mkfifo(pipe)
    shape = f / "shape"
    shape.mkdir(exist_ok=True)
    config = write(shape / "config.json", json.dumps({"num_hidden_layers": 2, "num_attention_heads": 4,
                                                       "hidden_size": 64, "vocab_size": 100}))
    trace = write(f / "named.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n0,100,10\n1,100,10\n")
    workload = write(f / "named.toml", 'name = "named"\ntrace = "named.csv"\n')
    return [
        Case("math --model a 300-character name", "files", ["math", "--model", "a" * 300], must_say=("too long",)),
        Case("run --trace a 300-character name", "files", ["run", "--quiet", "--trace", long_name]),
        Case("run --json a 300-character name", "files", ["run", "--quiet", "--requests", "2", "--json", long_name]),
        Case("export a 300-character name", "files", ["export", long_name]),
        Case("run --json a symlink loop", "files", ["run", "--quiet", "--requests", "2", "--json", str(f / "loopA")]),
        Case("gui --screenshot a symlink loop", "files",
             ["gui", "--screenshot", str(f / "loopA"), "--quit-after", "1"]),
        Case("presets with KVSCOPE_CONFIG_DIR a symlink loop", "files", ["presets"],
             env={"KVSCOPE_CONFIG_DIR": str(f / "loopA")}),
        Case("run --trace a named pipe", "files", ["run", "--quiet", "--trace", str(pipe)],
             must_say=("not a regular file",)),
        Case("export a named pipe", "files", ["export", str(pipe)], must_say=("not a regular file",)),
        Case("math --config a named pipe", "files", ["math", "--config", str(pipe)]),
        Case("run --json a named pipe", "files", ["run", "--quiet", "--requests", "2", "--json", str(pipe)],
             must_say=("nothing reads",)),
        Case("export /proc/self/status", "files", ["export", "/proc/self/status"]),
        Case("gui --replay /proc/self/status", "files", ["gui", "--replay", "/proc/self/status", "--quit-after", "1"]),
        Case("run --json the trace a workload file names", "files",
             ["run", "--quiet", "--workload", str(workload), "--json", str(trace)], protected=[trace]),
        Case("run --record a --config folder's config.json", "files",
             ["run", "--quiet", "--config", str(shape), "--requests", "2", "--record", str(config)], protected=[config]),
        Case("run --json the default model preset", "files",
             ["run", "--quiet", "--requests", "2", "--json", str(ROOT / "presets" / "models" / "llama-3-8b.toml")],
             protected=[ROOT / "presets" / "models" / "llama-3-8b.toml"]),
        Case("run --device meta on the real backend", "files",
             ["run", "--quiet", "--backend", "real", "--model", "tiny-llama", "--device", "meta", "--requests", "2"],
             must_say=("cpu or cuda",)),
        Case("run --quantization on the simulated backend", "files",
             ["run", "--quiet", "--quantization", "nf4", "--requests", "2"], must_say=("--weight-dtype",)),
        Case("math --tensor-parallel-size 24 on 32 query heads", "files", ["math", "--tensor-parallel-size", "24"],
             must_say=("num_attention_heads",)),
        Case("run --arrival-rate 1e-300", "files", ["run", "--quiet", "--arrival-rate", "1e-300", "--requests", "3"]),
        Case("gui --replay with --model", "files",
             ["gui", "--replay", str(f / "run.kvrec"), "--model", "llama-3-8b", "--quit-after", "1"],
             must_say=("would not apply",)),
        Case("export --csv -", "files", ["export", str(f / "run.kvrec"), "--csv", "-"]),
        Case("kvscope with no command", "files", [], must_say=("give a command",)),
    ]


# -- running -----------------------------------------------------------------------------------

