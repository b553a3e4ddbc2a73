"""`kvscope bench`: the benchmarks whose figures README.md records.

scheduler: wall time of Engine.step() with the simulated runner (whose roofline arithmetic is a
           few multiplications), i.e. scheduler + block manager + bookkeeping, at 256 running
           requests on a 100k-block pool. Target: median <= 0.5 ms.
trace:     the whole Azure conversation trace (19,366 requests) through llama-3-8b on h100-80gb.
           Target: <= 30 s of wall time.
real:      kvscope's real engine against transformers generate() in static batches and
           transformers' own continuous batching, same model, prompts and output lengths, same
           machine, one run: the trained model (SmolLM2-135M-Instruct) on the chat-text workload,
           its answers ending where the model ends them (targets on a 2-core CPU: >= 3x static,
           >= 2x continuous); without the trained model installed, the tiny model on the Azure
           trace's shape (>= 3x continuous, >= 1.5x static). Also >= 85% of step wall time inside
           the model forward at batch >= 16. Then the window's default run (app/lab/chat_defaults.py)
           headless: engine steps per second and seconds until the KV pool is full (targets
           >= 5 steps/s, <= 15 s).
"""

from __future__ import annotations

import platform
import statistics
import time

from kvscope.app.lab.output_path import write_json_output
from kvscope.engine import Engine, EngineArgs
from kvscope.engine.config import ConfigError
from kvscope.app.lab.presets import load_hardware, load_model, load_workload
from kvscope.app.lab.workload import generate_requests

from kvscope.engine.units import format_seconds
from kvscope.app.cli.output import counted, table


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
    if len(rows) < count:  # ran the whole trace and still printed the count asked for
        raise ConfigError(f"--requests {count:,}: the Azure conversation trace holds {len(rows):,} requests; "
                          f"give at most {len(rows):,}")
    rng = np.random.default_rng(seed)
    prompts = [rng.integers(0, vocab_size, max(4, r.prompt_tokens // 8)).tolist() for r in rows]
    outputs = [max(4, min(256, r.output_tokens // 4)) for r in rows]
    return prompts, outputs


def chat_text_requests(count: int, chat) -> tuple[list, list]:
    """The chat-text workload's first `count` requests, all at once: prompts as the chat template
    makes them, answers capped at the workload's max_tokens (the model ends most sooner)."""
    spec = load_workload("chat-text").with_overrides(num_requests=count, arrival_rate_per_s=0.0)
    specs = list(generate_requests(spec, 0, tokenizer=chat))
    return [s.prompt_token_ids for s in specs], [s.max_tokens for s in specs]


def bench_real(count: int = 64, static_batch_size: int = 16, device: str | None = None,
               kv_cache_dtype: str = "auto") -> dict:
    from kvscope.app.lab.chat_defaults import trained_model_available
    from kvscope.app.lab.real_backend import load_for_real_backend
    from kvscope.app.lab.text_tokenizer import chat_tokenizer_for
    from kvscope.app.lab.trained_model import TRAINED_MODEL

    if trained_model_available():
        loaded = load_for_real_backend(TRAINED_MODEL.name, device=device)
        chat = chat_tokenizer_for(loaded)
        prompts, caps = chat_text_requests(count, chat)
        result = compare_with_transformers(loaded, prompts, caps, static_batch_size, kv_cache_dtype, chat.stop_token_ids)
        result.update(workload=f"{counted(count, 'chat-text request')} (real conversations), all at once; answers "
                               f"end on the model's end of sequence (at most {max(caps)} tokens), the baselines make "
                               "as many",
                      targets={"static": 3.0, "continuous": 2.0})
        from kvscope.app.lab.chat_defaults import live_chat_dtype

        window_loaded = load_for_real_backend(TRAINED_MODEL.name, device=device, dtype=live_chat_dtype())
        result["live"] = bench_live(window_loaded, chat_tokenizer_for(window_loaded))
        return result
    loaded = load_for_real_backend("tiny-llama", device=device)
    prompts, outputs = azure_shaped_requests(count, loaded.config.vocab_size)
    result = compare_with_transformers(loaded, prompts, outputs, static_batch_size, kv_cache_dtype)
    result.update(workload=f"{count} Azure conversation requests, prompts / 8, outputs / 4, all at once",
                  targets={"static": 1.5, "continuous": 3.0})
    return result


def as_transformers_loads_it(loaded):
    """The model with transformers' own layers for the baselines: kvscope's runner packs a CPU
    model's linear layers for oneDNN in place (engine/runners/packed_linear.py), which would speed
    up the baselines too and hide what a transformers user gets; such a model is loaded again."""
    from kvscope.app.lab.models.loader import load_model_directory
    from kvscope.engine.runners.packed_linear import PackedLinear

    if not any(isinstance(m, PackedLinear) for m in loaded.hf_model.modules()):
        return loaded
    dtype = loaded.config.weight_dtype if loaded.quantization is None else None
    return load_model_directory(loaded.path, str(loaded.device), dtype, loaded.quantization,
                                random_weights=loaded.random_weights, name=loaded.config.name)


def compare_with_transformers(loaded, prompts: list, max_tokens: list, static_batch_size: int, kv_cache_dtype: str,
                              stop_token_ids=frozenset()) -> dict:
    """kvscope's engine, then transformers' static generate() and continuous batching, on the same
    prompts; the baselines make exactly as many tokens per request as the engine did."""
    from kvscope.app.lab.verify.baselines import run_continuous_batching, run_static_generate
    from kvscope.app.lab.real_backend import create_real_engine

    count = len(prompts)
    engine = create_real_engine(loaded, EngineArgs(kv_cache_dtype=kv_cache_dtype, max_num_seqs=count),
                                record_outputs=True)
    engine.add_request(prompts[0][:8], 2)  # warm-up, as each baseline gets
    engine.run()
    runner = engine.runner
    warm_forward, warm_steps = runner.forward_time_s, engine.metrics.steps
    ids = [engine.add_request(p, n, stop_token_ids=stop_token_ids) for p, n in zip(prompts, max_tokens)]
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
    outputs = [len(engine.outputs[i]) for i in ids]  # where the model ended each answer (or max_tokens)
    ours = {"wall_time_s": wall, "output_tokens": sum(outputs), "throughput_tokens_per_s": sum(outputs) / wall,
            "ended_by_the_model": sum(n < cap for n, cap in zip(outputs, max_tokens)),
            "steps": engine.metrics.steps - warm_steps, "peak_running": engine.metrics.peak_running,
            "forward_share_at_batch_16_plus": big_step_forward / big_step_wall if big_step_wall else None,
            "forward_time_s": runner.forward_time_s - warm_forward}
    loaded = as_transformers_loads_it(loaded)
    run_static_generate(loaded, [prompts[0][:8]], [2], 1)  # warm-up
    static = run_static_generate(loaded, prompts, outputs, static_batch_size)
    run_continuous_batching(loaded, [prompts[0][:8]], [2])  # warm-up
    continuous = run_continuous_batching(loaded, prompts, outputs)
    return {
        "model": loaded.label, "requests": count, "prompt_tokens": sum(len(p) for p in prompts),
        "prefix_cache_hit_rate": engine.summary()["prefix_cache_hit_rate"],
        "static_batch_size": static_batch_size, "kvscope": ours, "hf_static_generate": static,
        "hf_continuous_batching": continuous,
        "speedup_vs_static": ours["throughput_tokens_per_s"] / static["throughput_tokens_per_s"],
        "speedup_vs_continuous": ours["throughput_tokens_per_s"] / continuous["throughput_tokens_per_s"],
    }


def bench_live(loaded, chat, seconds: float = 30.0, engine_settings: dict | None = None) -> dict:
    """The window's default run (app/lab/chat_defaults.py), headless in this process with the window's
    one compute thread: engine steps per second, and when the KV pool is first full (no block left
    that neither holds a running request's tokens nor a cached prefix). Timed in wall seconds and in
    this process's CPU seconds: with one thread, CPU time is what the wall time would be on a core
    of its own, so a machine loaded by others still gives the unloaded figure."""
    import torch

    from kvscope.app.lab.chat_defaults import LIVE_CHAT_ENGINE, LIVE_CHAT_WORKLOAD, LIVE_CHAT_WORKLOAD_SETTINGS
    from kvscope.app.lab.real_backend import create_real_engine
    from kvscope.engine.snapshot import BLOCK_FREE

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the window's engine process runs (process_tuning.leave_a_core_to_the_window)
    try:
        settings = {**LIVE_CHAT_ENGINE, **(engine_settings or {})}
        engine = create_real_engine(loaded, EngineArgs(**settings))
        spec = load_workload(LIVE_CHAT_WORKLOAD).with_overrides(**LIVE_CHAT_WORKLOAD_SETTINGS)
        engine.add_workload(generate_requests(spec, loaded.config.vocab_size, tokenizer=chat))
        full_after = full_after_cpu = None
        started, cpu_started = time.perf_counter(), time.process_time()
        while (elapsed := time.perf_counter() - started) < seconds and engine.step() is not None:
            if full_after is None and not (engine.snapshot().block_state == BLOCK_FREE).any():
                full_after, full_after_cpu = time.perf_counter() - started, time.process_time() - cpu_started
        cpu = time.process_time() - cpu_started
        steps = engine.step_count
    finally:
        torch.set_num_threads(threads)
    return {"settings": {**settings, **LIVE_CHAT_WORKLOAD_SETTINGS}, "num_blocks": engine.plan.num_blocks,
            "seconds": elapsed, "steps": steps, "steps_per_s": steps / elapsed, "full_after_s": full_after,
            "cpu_seconds": cpu, "steps_per_cpu_s": steps / cpu, "full_after_cpu_s": full_after_cpu,
            "peak_kv_usage": engine.metrics.summary()["peak_kv_usage"], "completed": engine.metrics.completed,
            "preemptions": engine.scheduler.num_preemptions, "targets": {"steps_per_s": 5.0, "full_after_s": 15.0}}


def cmd_bench(args) -> int:
    if args.what == "soak":
        from kvscope.app.bench.bench_soak import cmd_soak

        return cmd_soak(args)
    results = {"machine": f"{platform.processor() or platform.machine()}, Python {platform.python_version()}"}
    if getattr(args, "against_vllm", False):
        from kvscope.app.bench.bench_vs_vllm import bench_against_vllm, print_against_vllm

        print_against_vllm(results.setdefault("real_vs_vllm", bench_against_vllm(args.requests, args.device)))
        if args.json:
            write_json_output("--json", args.json, results)
        return 0
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
            ("workload", f"{r['workload']} ({r['prompt_tokens']:,} prompt, {k['output_tokens']:,} output tokens)"),
            ("kvscope engine", f"{k['throughput_tokens_per_s']:,.1f} output tokens/s ({format_seconds(k['wall_time_s'])}, "
                               f"{k['steps']} steps, peak batch {k['peak_running']}, {k['ended_by_the_model']} answers "
                               f"ended by the model, prefix cache hit rate {r['prefix_cache_hit_rate'] * 100:.1f} %)"),
            ("transformers generate, static", f"{st['throughput_tokens_per_s']:,.1f} output tokens/s "
                                              f"({format_seconds(st['wall_time_s'])}, batches of {r['static_batch_size']}, "
                                              f"{st['generated_tokens']:,} tokens generated for {st['output_tokens']:,} wanted)"),
            ("transformers continuous batching", f"{cb['throughput_tokens_per_s']:,.1f} output tokens/s "
                                                 f"({format_seconds(cb['wall_time_s'])})"),
            ("speed-up vs static", f"{r['speedup_vs_static']:.2f}x (target >= {r['targets']['static']:g}x)"),
            ("speed-up vs continuous", f"{r['speedup_vs_continuous']:.2f}x (target >= {r['targets']['continuous']:g}x)"),
            ("step time in the model forward", "-" if share is None else
             f"{share * 100:.1f} % at batch >= 16 (target >= 85 %)"),
        ], title="Real engine vs transformers (same model, same machine, one run)"))
        print()
        if "live" in r:
            live = r["live"]
            full = ("not within the run" if live["full_after_s"] is None else
                    f"{live['full_after_s']:.1f} s wall, {live['full_after_cpu_s']:.1f} s of CPU time")
            print(table([
                ("settings", ", ".join(f"{k} {v:,}" for k, v in live["settings"].items()) + f" ({live['num_blocks']} blocks)"),
                ("engine steps", f"{live['steps_per_s']:.1f} steps/s wall over {live['seconds']:.0f} s; "
                                 f"{live['steps_per_cpu_s']:.1f} per CPU second (target >= 5)"),
                ("KV pool full after", f"{full} (target <= 15 s); peak in use {live['peak_kv_usage'] * 100:.0f} %"),
                ("requests", f"{live['completed']} completed, {live['preemptions']} preemptions"),
            ], title="The window's default run, headless with its one compute thread"))
            print()
    gui_part = getattr(args, "part", "both") if args.what == "gui" else None
    if gui_part in ("cost", "both"):
        from kvscope.app.bench.bench_gui import COST_ROUNDS, bench_cost, gui_cost_split_rows

        r = results["gui_cost"] = bench_cost(COST_ROUNDS if args.rounds is None else args.rounds)
        low, high = r["median_interval"]
        print(table([
            ("headless", f"{r['headless_steps_per_s']:,.0f} engine steps/s"),
            ("with the window", f"{r['window_steps_per_s']:,.0f} engine steps/s ({r['frames_drawn']} frames drawn, "
                                f"{r['frames_per_s']:.1f} frames/s)"),
            ("cost of the window", f"{r['cost'] * 100:.1f} %, median of the rounds; {r['interval_level'] * 100:.0f} % "
                                   f"interval {low * 100:.1f} to {high * 100:.1f} % (target <= {r['target_cost'] * 100:g} %: "
                                   + ("met in this run" if high <= r["target_cost"] else "missed in this run"
                                      if low > r["target_cost"] else "not told apart from it; more --rounds narrow "
                                      "the interval") + ")"),
            ("rounds", f"middle half {r['middle_half'][0] * 100:.1f} % to {r['middle_half'][1] * 100:.1f} % "
                       f"(all {min(r['round_costs']) * 100:.1f} % to {max(r['round_costs']) * 100:.1f} %); "
                       f"over all of them {r['pooled_cost'] * 100:.1f} %"),
            *gui_cost_split_rows(r),
        ], title=f"What the window costs the engine (chat workload at maximum speed, the same {r['steps']:,} steps "
                 f"on each side in {r['rounds']} alternating rounds of {r['round_s']:g} s)"))
        print()
    if gui_part in ("frame", "both"):
        from kvscope.app.bench.bench_gui import bench_frame

        r = results["gui_frame"] = bench_frame()
        print(table([
            ("pool / running", f"{r['blocks']:,} blocks / {r['running']:,} requests"),
            ("frame, median", f"{r['frame_median_ms']:.1f} ms (target <= {r['target_median_ms']:g} ms): snapshot "
                              f"{r['snapshot_median_ms']:.1f} ms + views and repaint {r['render_median_ms']:.1f} ms"),
            ("frame, mean / p90", f"{r['frame_mean_ms']:.1f} / {r['frame_p90_ms']:.1f} ms (the plots, the memory bar, "
                                  "the status line and the tables are redrawn at 4 - 20 Hz, so some frames hold them)"),
        ], title="One frame of the window (simulated llama-3-8b on h100-80gb)"))
        print()
    if gui_part == "fast":
        from kvscope.app.bench.bench_gui import FAST_FRAME_INTERVAL_S, bench_fast_frame

        r = results["gui_fast"] = bench_fast_frame()
        print(table([
            ("between frames", f"{FAST_FRAME_INTERVAL_S * 1000:.0f} ms of engine work: {r['steps_per_frame_median']:,.0f} "
                               "steps (median), 400 of them for the timeline"),
            ("window side, median", f"{r['window_median_ms']:.1f} ms a frame (decode, every view, repaint); "
                                    f"mean {r['window_mean_ms']:.1f} ms, p90 {r['window_p90_ms']:.1f} ms"),
            ("plots after a long run", f"{r['long_run_plots_median_ms']:.1f} ms a frame to update the live plots "
                                       f"holding {r['long_run_points']:,} points (ten minutes at maximum speed)"),
        ], title="A frame at maximum speed (simulated llama-3-8b on h100-80gb, chat)"))
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
