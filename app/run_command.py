"""`kvscope run`: a workload through the engine, headless, with progress and a summary."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from kvscope.engine import Engine
from kvscope.engine.config import ConfigError
from kvscope.engine.presets import load_workload, load_workload_file
from kvscope.engine.workload import WorkloadSpec, generate_requests

from . import options
from .cli import math_rows
from .units import format_percent, format_seconds, table

ALL_ROWS = 10**9


def workload_from_args(args) -> WorkloadSpec:
    if args.trace:
        if not Path(args.trace).exists():
            raise ConfigError(f"trace {args.trace}: no such file")
        spec = WorkloadSpec(name=Path(args.trace).stem, description=f"trace replay of {args.trace}",
                            trace_path=args.trace, num_requests=ALL_ROWS)
    elif args.workload.endswith(".toml"):
        spec = load_workload_file(args.workload)
    else:
        spec = load_workload(args.workload)
    return spec.with_overrides(num_requests=args.requests, arrival_rate_per_s=args.arrival_rate)


def build_engine(args) -> tuple[Engine, WorkloadSpec]:
    model = options.model_from_args(args)
    hardware = options.hardware_from_args(args)
    engine = Engine(model, hardware, options.engine_args_from_args(args))
    spec = workload_from_args(args)
    engine.add_workload(generate_requests(spec, model.vocab_size, seed=args.seed))
    return engine, spec


class Progress:
    """One status line on stderr: rewritten in place on a terminal, a line every few seconds otherwise."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.tty = sys.stderr.isatty()
        self.interval = 0.25 if self.tty else 5.0
        self.started = time.monotonic()
        self.last = self.started

    def __call__(self, engine: Engine, step, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self.last < self.interval:
            return
        self.last = now
        m = engine.metrics
        line = (f"step {engine.step_count:,}  engine clock {engine.clock:,.1f} s  completed {m.completed:,}  "
                f"rejected {m.rejected:,}  running {len(engine.scheduler.running)}  waiting {len(engine.scheduler.waiting)}  "
                f"KV {format_percent(engine.kv.usage)}  wall {now - self.started:.1f} s")
        if self.tty:
            print("\r" + line.ljust(120), end="", file=sys.stderr, flush=True)
        else:
            print(line, file=sys.stderr, flush=True)

    def done(self) -> None:
        if self.enabled and self.tty:
            print(file=sys.stderr)


def summary_rows(summary: dict) -> list[tuple[str, str]]:
    s = summary
    return [
        ("requests completed", f"{s['completed']:,}"),
        ("requests rejected", f"{s['rejected']:,}"),
        ("preemptions", f"{s['preemptions']:,}"),
        ("engine steps", f"{s['steps']:,}"),
        ("duration (engine clock)", format_seconds(s["duration_s"])),
        ("output throughput", f"{s['throughput_tokens_per_s']:,.1f} tokens/s"),
        ("total throughput", f"{s['total_throughput_tokens_per_s']:,.1f} tokens/s (prompt + output)"),
        ("TTFT p50 / p99", f"{format_seconds(s['ttft_p50_s'])} / {format_seconds(s['ttft_p99_s'])}"),
        ("time per output token p50 / p99", f"{format_seconds(s['tpot_p50_s'])} / {format_seconds(s['tpot_p99_s'])}"),
        ("queue time p50 / p99", f"{format_seconds(s['queue_time_p50_s'])} / {format_seconds(s['queue_time_p99_s'])}"),
        ("end-to-end latency p50 / p99", f"{format_seconds(s['e2e_latency_p50_s'])} / {format_seconds(s['e2e_latency_p99_s'])}"),
        ("KV cache usage peak / mean", f"{format_percent(s['peak_kv_usage'])} / {format_percent(s['mean_kv_usage'])}"),
        ("peak running requests", f"{s['peak_running']:,}"),
        ("prefix cache hit rate", format_percent(s["prefix_cache_hit_rate"])),
        ("fragmentation (mean)", f"{format_percent(s['mean_fragmentation'])} of allocated slots unused"),
        ("compute utilisation", f"{format_percent(s['compute_utilization'])} of busy time at the compute roofline"),
    ]


def run_report(engine: Engine, spec: WorkloadSpec, args, summary: dict, wall_s: float) -> dict:
    a = engine.args
    return {
        **summary,
        "wall_time_s": wall_s,
        "model": engine.model.name,
        "hardware": engine.hardware.name,
        "workload": spec.name,
        "backend": engine.runner.name,
        "seed": args.seed,
        "engine_args": {
            "block_size": a.block_size,
            "gpu_memory_utilization": a.gpu_memory_utilization,
            "max_model_len": engine.resolved.max_model_len,
            "max_num_seqs": a.max_num_seqs,
            "max_num_batched_tokens": engine.resolved.max_num_batched_tokens,
            "kv_cache_dtype": engine.resolved.kv_cache_dtype,
            "enable_prefix_caching": a.enable_prefix_caching,
            "enable_chunked_prefill": a.enable_chunked_prefill,
            "tensor_parallel_size": engine.resolved.tensor_parallel_size,
            "scheduling": a.scheduling,
            "allocation": a.allocation,
        },
        "num_blocks": engine.plan.num_blocks,
        "kv_pool_bytes": engine.plan.kv_pool_bytes,
    }


def cmd_run(args) -> int:
    # Say what is wrong with the output path before a long run, not after it.
    if args.json and args.json != "-":
        out = Path(args.json)
        if out.is_dir():
            raise ConfigError(f"--json {args.json}: is a folder; give a file name")
        if not out.resolve().parent.is_dir():
            raise ConfigError(f"--json {args.json}: the folder does not exist")
    if args.seed < 0:
        raise ConfigError(f"--seed must be 0 or more, got {args.seed}")
    engine, spec = build_engine(args)
    progress = Progress(enabled=not args.quiet)
    started = time.monotonic()
    summary = engine.run(on_step=lambda step: progress(engine, step))
    progress(engine, None, force=True)
    progress.done()
    wall = time.monotonic() - started
    report = run_report(engine, spec, args, summary, wall)
    if args.json != "-":
        print(table(math_rows(engine.plan, engine.model, engine.hardware), title="Memory"))
        print()
        rows = summary_rows(summary) + [("wall time", f"{wall:.2f} s ({engine.runner.name} backend)")]
        print(table(rows, title=f"Run: {spec.name} on {engine.model.name} / {engine.hardware.name}"))
    if args.json:
        text = json.dumps(report, indent=2)
        if args.json == "-":
            print(text)
        else:
            try:
                Path(args.json).write_text(text + "\n", encoding="utf-8")
            except OSError as exc:
                raise ConfigError(f"cannot write {args.json}: {exc.strerror or exc}") from None
    return 0
