"""`kvscope bench`: the benchmarks whose figures README.md records.

scheduler: wall time of Engine.step() with the simulated runner (whose roofline arithmetic is a
           few multiplications), i.e. scheduler + block manager + bookkeeping, at 256 running
           requests on a 100k-block pool. Target: median <= 0.5 ms.
trace:     the whole Azure conversation trace (19,366 requests) through llama-3-8b on h100-80gb.
           Target: <= 30 s of wall time.
real:      kvscope's real engine against transformers generate() in static batches and
           transformers' own continuous batching, on the Azure trace's shape scaled to the tiny
           model, same model and machine, one run. Targets on a 2-core CPU: >= 3x continuous,
           >= 1.5x static, >= 85% of step wall time inside the model forward at batch >= 16.
"""

from __future__ import annotations

import platform
import statistics
import time

from kvscope.app.lab.output_path import write_json_output
from kvscope.engine import Engine, EngineArgs
from kvscope.app.lab.presets import load_hardware, load_model, load_workload
from kvscope.app.lab.workload import generate_requests

from kvscope.engine.units import format_seconds
from kvscope.app.cli.output import table


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


def azure_shaped_requests(count: int, vocab_size: int, seed: int = 0) -> tuple[list, list]:
    """The first `count` Azure conversation requests, prompts / 8 and outputs / 4 (at most 256):
    the trace's mix of lengths at a size the tiny model serves in seconds."""
    import numpy as np

    from kvscope.app.lab.workload import read_trace

    rows = read_trace(load_workload("azure-conv").trace_path, limit=count)
    rng = np.random.default_rng(seed)
    prompts = [rng.integers(0, vocab_size, max(4, r.prompt_tokens // 8)).tolist() for r in rows]
    outputs = [max(4, min(256, r.output_tokens // 4)) for r in rows]
    return prompts, outputs


def bench_real(count: int = 64, static_batch_size: int = 16, device: str | None = None,
               kv_cache_dtype: str = "auto") -> dict:
    from kvscope.app.lab.verify.baselines import run_continuous_batching, run_static_generate
    from kvscope.app.lab.real_backend import create_real_engine, load_for_real_backend

    loaded = load_for_real_backend("tiny-llama", device=device)
    prompts, outputs = azure_shaped_requests(count, loaded.config.vocab_size)
    engine = create_real_engine(loaded, EngineArgs(kv_cache_dtype=kv_cache_dtype, max_num_seqs=count))
    engine.add_request(prompts[0][:8], 2)  # warm-up, as each baseline gets
    engine.run()
    runner = engine.runner
    warm_forward, warm_steps = runner.forward_time_s, engine.metrics.steps
    for p, n in zip(prompts, outputs):
        engine.add_request(p, n)
    big_step_wall = big_step_forward = 0.0
    t0 = time.perf_counter()
    while True:
        before_forward = runner.forward_time_s
        s0 = time.perf_counter()
        step = engine.step()
        elapsed = time.perf_counter() - s0
        if step is None:
            break
        if len(step.request_ids) >= 16:
            big_step_wall += elapsed
            big_step_forward += runner.forward_time_s - before_forward
    wall = time.perf_counter() - t0
    ours = {"wall_time_s": wall, "output_tokens": sum(outputs), "throughput_tokens_per_s": sum(outputs) / wall,
            "steps": engine.metrics.steps - warm_steps, "peak_running": engine.metrics.peak_running,
            "forward_share_at_batch_16_plus": big_step_forward / big_step_wall if big_step_wall else None,
            "forward_time_s": runner.forward_time_s - warm_forward}
    run_static_generate(loaded, [prompts[0][:8]], [2], 1)  # warm-up
    static = run_static_generate(loaded, prompts, outputs, static_batch_size)
    run_continuous_batching(loaded, [prompts[0][:8]], [2])  # warm-up
    continuous = run_continuous_batching(loaded, prompts, outputs)
    return {
        "model": loaded.label, "requests": count, "prompt_tokens": sum(len(p) for p in prompts),
        "static_batch_size": static_batch_size, "kvscope": ours, "hf_static_generate": static,
        "hf_continuous_batching": continuous,
        "speedup_vs_static": ours["throughput_tokens_per_s"] / static["throughput_tokens_per_s"],
        "speedup_vs_continuous": ours["throughput_tokens_per_s"] / continuous["throughput_tokens_per_s"],
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
    if args.what in (None, "real"):
        r = results["real"] = bench_real(args.requests, device=args.device)
        k, st, cb = r["kvscope"], r["hf_static_generate"], r["hf_continuous_batching"]
        share = k["forward_share_at_batch_16_plus"]
        print(table([
            ("model", r["model"]),
            ("workload", f"{r['requests']} Azure conversation requests, prompts / 8, outputs / 4 "
                         f"({r['prompt_tokens']:,} prompt, {k['output_tokens']:,} output tokens), all at once"),
            ("kvscope engine", f"{k['throughput_tokens_per_s']:,.1f} output tokens/s ({format_seconds(k['wall_time_s'])}, "
                               f"{k['steps']} steps, peak batch {k['peak_running']})"),
            ("transformers generate, static", f"{st['throughput_tokens_per_s']:,.1f} output tokens/s "
                                              f"({format_seconds(st['wall_time_s'])}, batches of {r['static_batch_size']}, "
                                              f"{st['generated_tokens']:,} tokens generated for {st['output_tokens']:,} wanted)"),
            ("transformers continuous batching", f"{cb['throughput_tokens_per_s']:,.1f} output tokens/s "
                                                 f"({format_seconds(cb['wall_time_s'])})"),
            ("speed-up vs static", f"{r['speedup_vs_static']:.2f}x (target >= 1.5x)"),
            ("speed-up vs continuous", f"{r['speedup_vs_continuous']:.2f}x (target >= 3x)"),
            ("step time in the model forward", "-" if share is None else
             f"{share * 100:.1f} % at batch >= 16 (target >= 85 %)"),
        ], title="Real engine vs transformers (same model, same machine, one run)"))
        print()
    if args.what in ("gui",):
        from kvscope.app.bench.bench_gui import bench_cost, bench_frame

        r = results["gui_cost"] = bench_cost()
        print(table([
            ("headless", f"{r['headless_steps_per_s']:,.0f} engine steps/s"),
            ("with the window", f"{r['window_steps_per_s']:,.0f} engine steps/s ({r['frames_drawn']} frames drawn, "
                                f"{r['frames_per_s']:.1f} frames/s)"),
            ("cost of the window", f"{r['cost'] * 100:.1f} %, median of the rounds (target <= 10 %)"),
            ("rounds", f"{min(r['round_costs']) * 100:.1f} % to {max(r['round_costs']) * 100:.1f} %; "
                       f"over all of them {r['pooled_cost'] * 100:.1f} %"),
        ], title=f"What the window costs the engine (chat workload at maximum speed, {r['seconds']:.0f} s each "
                 f"in {r['rounds']} alternating rounds)"))
        print()
        r = results["gui_frame"] = bench_frame()
        print(table([
            ("pool / running", f"{r['blocks']:,} blocks / {r['running']:,} requests"),
            ("frame, median", f"{r['frame_median_ms']:.1f} ms (target <= 16 ms): snapshot {r['snapshot_median_ms']:.1f} ms "
                              f"+ views and repaint {r['render_median_ms']:.1f} ms"),
            ("frame, p90", f"{r['frame_p90_ms']:.1f} ms"),
        ], title="One frame of the window (simulated llama-3-8b on h100-80gb)"))
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
        write_json_output("--json", args.json, results)
    return 0
