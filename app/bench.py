"""`kvscope bench`: the engine-core benchmarks whose figures README.md records.

scheduler: wall time of Engine.step() with the simulated runner (whose roofline arithmetic is a
           few multiplications), i.e. scheduler + block manager + bookkeeping, at 256 running
           requests on a 100k-block pool. Target: median <= 0.5 ms.
trace:     the whole Azure conversation trace (19,366 requests) through llama-3-8b on h100-80gb.
           Target: <= 30 s of wall time.
"""

from __future__ import annotations

import json
import platform
import statistics
import time
from pathlib import Path

from kvscope.engine import Engine, EngineArgs
from kvscope.engine.config import ConfigError
from kvscope.engine.presets import load_hardware, load_model, load_workload
from kvscope.engine.workload import generate_requests

from .units import format_seconds, table


def bench_scheduler(running: int = 256, num_blocks: int = 100_000, measured_steps: int = 2000) -> dict:
    model, hardware = load_model("llama-3-8b"), load_hardware("h100-80gb")
    args = EngineArgs(num_gpu_blocks_override=num_blocks, max_num_seqs=running, max_model_len=8192)
    engine = Engine(model, hardware, args)
    # Long outputs so every request is still decoding while we measure.
    for i in range(running):
        engine.add_request([(i * 31 + t) % model.vocab_size for t in range(512)], max_tokens=4096)
    while True:  # prefill until all are decoding
        step = engine.step()
        if step.num_prefill_tokens == 0 and step.num_running == running:
            break
    times = []
    clock = time.perf_counter
    for _ in range(measured_steps):
        t0 = clock()
        step = engine.step()
        times.append(clock() - t0)
        assert step.num_running == running
    return {
        "running_requests": running,
        "num_blocks": num_blocks,
        "steps_measured": measured_steps,
        "step_median_s": statistics.median(times),
        "step_p90_s": sorted(times)[int(0.9 * len(times))],
        "target_median_s": 0.5e-3,
    }


def bench_trace() -> dict:
    model, hardware = load_model("llama-3-8b"), load_hardware("h100-80gb")
    spec = load_workload("azure-conv")
    engine = Engine(model, hardware, EngineArgs())
    engine.add_workload(generate_requests(spec, model.vocab_size, seed=0))
    t0 = time.perf_counter()
    summary = engine.run()
    wall = time.perf_counter() - t0
    return {
        "requests": spec.num_requests,
        "completed": summary["completed"],
        "rejected": summary["rejected"],
        "steps": summary["steps"],
        "simulated_duration_s": summary["duration_s"],
        "wall_time_s": wall,
        "target_wall_time_s": 30.0,
    }


def cmd_bench(args) -> int:
    results = {"machine": f"{platform.processor() or platform.machine()}, Python {platform.python_version()}"}
    if args.what in (None, "scheduler"):
        r = results["scheduler"] = bench_scheduler()
        print(table([
            ("running requests", f"{r['running_requests']}"),
            ("pool", f"{r['num_blocks']:,} blocks"),
            ("steps measured", f"{r['steps_measured']:,}"),
            ("step wall time, median", f"{format_seconds(r['step_median_s'])} (target <= 0.5 ms)"),
            ("step wall time, p90", format_seconds(r["step_p90_s"])),
        ], title="Scheduler + block manager overhead (simulated runner)"))
        print()
    if args.what in (None, "trace"):
        r = results["trace"] = bench_trace()
        print(table([
            ("requests", f"{r['requests']:,} ({r['completed']:,} completed, {r['rejected']:,} rejected)"),
            ("engine steps", f"{r['steps']:,}"),
            ("simulated duration", format_seconds(r["simulated_duration_s"])),
            ("wall time", f"{format_seconds(r['wall_time_s'])} (target <= 30 s)"),
        ], title="Azure conversation trace, llama-3-8b on h100-80gb (simulated)"))
    if args.json:
        try:
            Path(args.json).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot write {args.json}: {exc.strerror or exc}") from None
    return 0
