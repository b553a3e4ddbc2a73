"""The thirteenth hostile pass's cases (the command line), for scripts/hostile_inputs.py; every name
begins "thirteenth cli:" (`--only "thirteenth cli"` runs them). Found, and how it behaved before:
`attach --duration 0.001` (or 1e-300, 0.19) followed for a millisecond and refused the endpoint as "not
the server's publisher", the wrong cause; a server whose /metrics names 2 DP engines, attached with the
default --data-parallel-size 1, was shown as rank 0's events alone ("2 engine(s)", half its blocks) with
exit 0. A command's own flag after "--" was said as another command's (`export -- r.kvrec --csv x.csv`:
"--csv (a flag of `kvscope compare`, not of `kvscope export`)", attach's "--kv-events (did you mean
--kv-events?)"). A number typed with its unit (`--memory-gib 24GiB`, `--duration 10s`,
`--gpu-memory-utilization 90%`) was told to "give a number in decimal digits", which it was. An output
named for another of kvscope's formats was written so: `export --csv trace.json --perfetto steps.csv`
(swapped) wrote the CSV as trace.json and the Perfetto JSON as steps.csv, `run --record out.json` a
recording as .json, `run --json out.kvrec` JSON as .kvrec. `run --trace t.csv --seed 5` (and the
azure-conv trace preset) ran the very run of --seed 0, the seed drawing only token ids the simulated
backend does not read; `run --backend real --hardware this-machine` was "describe a simulated target"
(gui takes it); `verify --kv-cache-dtype auto` was "unknown kv_cache_dtype 'auto'" and FP16 refused where
math takes FP8; `gui --size 1600×960` (the multiplication sign) was "expected WIDTHxHEIGHT"; `gui
--workload mine.toml` said "a workload file's name ends in .toml; give a workload .toml file" of a .toml
file; `attach --model-path DIR/config.json` was told to give the file "with --config", a flag attach
has not. Every case's `expect` is the right behaviour."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

from hostile_case import ROOT

DEAD = "http://127.0.0.1:1"  # nothing listens: each refusal here comes before the server is asked
EVENTS = ["--kv-events", "tcp://127.0.0.1:5557"]
TRACE = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.53,396,9\n"


def thirteenth_cli_cases(d: Path, Case, write) -> list:
    t = d / "thirteenth-cli"
    t.mkdir(parents=True, exist_ok=True)
    return _attach_cases(Case) + _number_cases(Case) + _output_cases(t, Case, write) + _run_cases(t, Case, write)


def _case(Case, name: str, *args, **kwargs):
    return Case(f"thirteenth cli: {name}", *args, **kwargs)


def _attach_cases(Case) -> list:
    import json

    from hostile_fixtures import fake_http_server

    prom = (ROOT / "tests" / "fixtures" / "vllm" / "metrics_live_vllm_cpu_0.32_pressure.prom").read_bytes()
    lines = prom.splitlines()
    two_engines = b"\n".join(lines + [line.replace(b'engine="0"', b'engine="1"') for line in lines
                                      if b'engine="0"' in line and not line.startswith(b"#")]) + b"\n"
    url = fake_http_server({"/version": b'{"version": "0.32.0"}', "/metrics": two_engines,
                            "/v1/models": json.dumps({"object": "list", "data": [{"id": "tiny"}]}).encode()})
    dp = ["attach", url, "--kv-events", "tcp://127.0.0.1:9", "--duration", "0.3"]
    return [
        _case(Case, "attach --duration 0.001 (said as 'not the server's publisher')", "numbers",
              ["attach", DEAD, *EVENTS, "--duration", "0.001"],
              must_say=("s is too short to hear a KV event", "give at least 0.2 s"),
              must_not_say=("not the server's publisher", "cannot reach")),
        _case(Case, "attach --duration 0.2 (the shortest: the server is asked)", "numbers",
              ["attach", DEAD, *EVENTS, "--duration", "0.2"], must_say=("cannot reach",)),
        _case(Case, "attach --model-path DIR/config.json ('give it with --config', a flag attach has not)", "flags",
              ["attach", DEAD, *EVENTS, "--duration", "0.3", "--model-path",
               str(ROOT / "tests" / "fixtures" / "vllm" / "fixture_v0.33.0.json")],
              must_say=("give the served model's folder, the one holding its config.json",),
              must_not_say=("--config",)),
        _case(Case, "attach a DP-2 server with --data-parallel-size 1 (rank 0's events shown as the server's)",
              "flags", dp, must_say=("names 2 DP engines (ranks 0-1)", "give --data-parallel-size 2")),
        _case(Case, "attach a DP-2 server with --data-parallel-size 2 (both ranks followed)", "flags",
              [*dp, "--data-parallel-size", "2"], must_say=("no KV event from tcp://127.0.0.1:9",),
              must_not_say=("DP engines",)),
    ]


def _number_cases(Case) -> list:
    unit = "a number with a unit"
    return [
        _case(Case, "export -- r.kvrec --csv x.csv (--csv said as a flag of compare)", "flags",
              ["export", "--", "r.kvrec", "--csv", "x.csv"],
              must_say=("--csv (a flag of `kvscope export`, but after '--', which ends the flags",),
              must_not_say=("kvscope compare",)),
        _case(Case, "attach -- URL --kv-events E ('did you mean --kv-events?')", "flags",
              ["attach", "--", DEAD, *EVENTS], must_say=("but after '--', which ends the flags",),
              must_not_say=("did you mean",)),
        _case(Case, "math --memory-gib 24GiB ('give a number in decimal digits')", "numbers",
              ["math", "--memory-gib", "24GiB"], must_say=(f"{unit} (GiB) typed after it",),
              must_not_say=("decimal digits",)),
        _case(Case, "math --gpu-memory-utilization 90% ('give a number in decimal digits')", "numbers",
              ["math", "--gpu-memory-utilization", "90%"], must_say=("such as 0.9 for 90 %",)),
        _case(Case, "attach --duration 10s ('give a number in decimal digits')", "numbers",
              ["attach", DEAD, *EVENTS, "--duration", "10s"], must_say=(f"{unit} (s)",)),
        _case(Case, "math --memory-gib 1e (an exponent left out, not a unit)", "numbers",
              ["math", "--memory-gib", "1e"], must_say=("decimal digits",), must_not_say=("unit",)),
    ]


def _recording(t: Path) -> Path:
    """A small recording, written by `kvscope run --record` in this process."""
    from kvscope.app.cli.main import main

    path = t / "r.kvrec"
    if not path.exists():
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            main(["run", "--quiet", "--requests", "2", "--record", str(path)])
    return path


def _output_cases(t: Path, Case, write) -> list:
    recording = _recording(t)
    swapped = [write(t / "trace.json", "keep me\n"), write(t / "steps.csv", "keep me too\n")]
    run = ["run", "--quiet", "--requests", "2"]
    return [
        _case(Case, "export --csv trace.json --perfetto steps.csv (swapped: each written in the other's name)",
              "files", ["export", str(recording), "--csv", str(swapped[0]), "--perfetto", str(swapped[1])],
              protected=swapped, must_say=("writes JSON, and the name's .csv says CSV; give a .json name",)),
        _case(Case, "export --csv steps.csv --perfetto trace.json (each its own)", "files",
              ["export", str(recording), "--csv", str(t / "ok.csv"), "--perfetto", str(t / "ok.json")],
              expect="ok", must_say=("Perfetto trace written",)),
        _case(Case, "run --record out.json (a recording written as .json)", "files",
              [*run, "--record", str(t / "out.json")], must_say=("writes a kvscope recording",)),
        _case(Case, "run --json out.kvrec (JSON written as .kvrec)", "files",
              [*run, "--json", str(t / "out.kvrec")], must_say=("writes JSON, and the name's .kvrec",)),
        _case(Case, "run --json out.txt --record run (names of no kvscope format)", "files",
              [*run, "--json", str(t / "out.txt"), "--record", str(t / "run")], expect="ok"),
        _case(Case, "gui --size 1600×960 (the multiplication sign: 'expected WIDTHxHEIGHT')", "flags",
              ["gui", "--replay", str(recording), "--size", "1600×960", "--quit-after", "0.1"], expect="ok",
              slow=True),
    ]


def _run_cases(t: Path, Case, write) -> list:
    trace = write(t / "t.csv", TRACE)
    mine = write(t / "mine.toml", 'name = "mine"\n')
    real = ["run", "--backend", "real", "--model", "tiny-llama", "--workload", "uniform-short", "--requests", "1",
            "--quiet"]
    verify = ["verify", "--model", "tiny-llama", "--prompts", "1", "--max-tokens", "1", "--passages", "0"]
    return [
        _case(Case, "run --trace t.csv --seed 5 (the run of --seed 0)", "flags",
              ["run", "--quiet", "--trace", str(trace), "--seed", "5"],
              must_say=("the seed draws only the prompts' token ids", "--seed would be ignored")),
        _case(Case, "run --workload azure-conv --seed 5 (the run of --seed 0)", "flags",
              ["run", "--quiet", "--workload", "azure-conv", "--requests", "2", "--seed", "5"],
              must_say=("--seed would be ignored",)),
        _case(Case, "run --workload chat --seed 5 (a synthetic workload: the seed draws it)", "flags",
              ["run", "--quiet", "--workload", "chat", "--requests", "2", "--seed", "5"], expect="ok"),
        _case(Case, "run --backend real --hardware this-machine ('describe a simulated target')", "flags",
              [*real, "--hardware", "this-machine"], expect="ok", slow=True, must_say=("this-machine",)),
        _case(Case, "run --backend real --hardware this-machine --memory-gib 4 (the memory flag named)", "flags",
              [*real, "--hardware", "this-machine", "--memory-gib", "4"],
              must_say=("--memory-gib 4: describes a simulated target",), must_not_say=("--hardware",)),
        _case(Case, "verify --kv-cache-dtype auto ('unknown kv_cache_dtype')", "flags",
              [*verify, "--kv-cache-dtype", "auto"], expect="ok", slow=True, must_say=("KV cache fp32",)),
        _case(Case, "verify --kv-cache-dtype FP16 (refused where math takes FP8)", "flags",
              [*verify, "--kv-cache-dtype", "FP16"], expect="ok", slow=True, must_say=("KV cache fp16",)),
        _case(Case, "gui --workload mine.toml ('give a workload .toml file' of a .toml file)", "flags",
              ["gui", "--backend", "simulated", "--workload", str(mine), "--quit-after", "0"],
              must_say=("a workload file, where a preset's name is read", "give the name 'mine'"),
              must_not_say=("give a workload .toml file",)),
    ]
