"""`kvscope bench cuda`: the real engine on a CUDA GPU, with and without CUDA graphs for decode
steps, against transformers' continuous batching in its fastest configuration there, and where a
decode step's time goes (GPU busy, attention, host overhead).

Two models: SmolLM2-135M's shape (30 layers) and the tiny model (6 layers), both with seeded
random weights. The trained SmolLM2 is not needed: speed does not depend on the weights' values,
and the weights have no other way onto a GPU machine that reaches no network. Each request makes
exactly its Azure-shaped number of tokens (no end of sequence), so every side does the same work.
`--device cpu` runs the same benchmark without graphs (a dry run of the code path).
"""

from __future__ import annotations

import gc
import importlib.util
import statistics
import time

import torch

from kvscope.engine.config import ConfigError

from kvscope.app.bench.bench import azure_shaped_requests
from kvscope.app.cli.output import table
from kvscope.app.lab.output_path import write_json_output
from kvscope.engine import EngineArgs
from kvscope.engine.units import format_seconds

# the tiny model first: its figures compare with `bench real`'s in the README, and they are in
# even if the larger model runs past the time a GPU check allows
MODELS = ("tiny-llama", "smollm2-135m-instruct")
PROFILED_STEPS = 20
KV_POOL_BYTES = 4 << 30


def _load(name: str, device: str, dtype: str):
    from kvscope.app.lab.presets import load_model
    from kvscope.app.lab.real_backend import load_for_real_backend

    return load_for_real_backend(architecture=load_model(name), device=device, dtype=dtype)


def _engine(loaded, count: int, enforce_eager: bool):
    from kvscope.app.lab.real_backend import create_real_engine

    # A pool the benchmark fills many times over (~180k tokens of SmolLM2), not 90 % of the GPU:
    # the engines run one after the other and a freed pool returns to the allocator lazily.
    args = EngineArgs(max_num_seqs=count, enforce_eager=enforce_eager, kv_cache_memory_bytes=KV_POOL_BYTES)
    return create_real_engine(loaded, args, record_outputs=True)


def _sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_kvscope(loaded, prompts: list, outputs: list, warm_up: list, enforce_eager: bool) -> dict:
    engine = _engine(loaded, len(prompts), enforce_eager)
    runner = engine.runner
    for p, n in zip(warm_up, outputs):  # same lengths, other tokens (no prefix-cache hit): graphs are captured here
        engine.add_request(p, n)
    engine.run()
    capture_s = runner.graphs.capture_time_s if runner.graphs is not None else 0.0
    warm_steps = engine.metrics.steps
    ids = [engine.add_request(p, n) for p, n in zip(prompts, outputs)]
    started = time.perf_counter()
    engine.run()
    _sync(loaded.device)
    wall = time.perf_counter() - started
    made = sum(len(engine.outputs[i]) for i in ids)
    graphs = runner.graphs
    summary = engine.summary()
    result = {"wall_time_s": wall, "output_tokens": made, "throughput_tokens_per_s": made / wall,
              "ttft_p50_s": summary.get("ttft_p50_s"), "steps": engine.metrics.steps - warm_steps,
              "graphs": graphs is not None and graphs.failure is None,
              "graph_failure": graphs.failure if graphs is not None else None,
              "graphs_captured": len(graphs.graphs) if graphs is not None else 0,
              "graph_capture_s": capture_s,
              "graph_capture_in_timed_run_s": (graphs.capture_time_s - capture_s) if graphs is not None else 0.0,
              "graph_replays": graphs.replays if graphs is not None else 0}
    result["decode_step"] = _soft(decode_step_breakdown, engine, prompts, outputs)
    del engine, runner, graphs
    gc.collect()
    if loaded.device.type == "cuda":
        torch.cuda.empty_cache()
    return result


def _soft(function, *args, **kwargs) -> dict:
    """function's figures, or {"error": why}: one part that fails on a GPU (a capture, the
    profiler) leaves the others' figures."""
    try:
        return function(*args, **kwargs)
    except Exception as exc:
        return {"error": _error_text(exc)}


def _error_text(exc: Exception) -> str:
    first_line = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {first_line}"


def _kernel_time_us(prof) -> tuple[float, float]:
    """(all GPU kernels and copies, those launched inside kvscope's attention) in microseconds.
    The profiler also puts each record_function range on the GPU's timeline: not a kernel, kept
    out of the sum (and the attention's fallback if no kernel is linked to its range)."""
    total = attention = attention_span = 0.0
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            if event.name == "kvscope.attention":
                attention_span += event.time_range.elapsed_us()
            else:
                total += event.time_range.elapsed_us()
        elif event.name == "kvscope.attention":
            attention += getattr(event, "device_time_total", 0.0)
    return total, attention or attention_span


def decode_step_breakdown(engine, prompts: list, outputs: list) -> dict:
    """A decode-only step at the benchmark's batch: wall time per step (timed without the
    profiler), GPU busy time and the attention's share of it (from the profiler), host overhead =
    wall - GPU busy. Inside a replayed graph kernels belong to no Python range: attention is then
    not attributed."""
    from torch.profiler import ProfilerActivity, profile
    from transformers import AttentionInterface

    from kvscope.engine.runners.paged_attention import ATTN_IMPLEMENTATION, paged_attention_forward

    device = engine.runner.device
    long_enough = [(p, 4 * PROFILED_STEPS + 8) for p in prompts]
    for p, n in long_enough:
        engine.add_request(p, n)
    while engine.scheduler.waiting or any(r.num_computed_tokens < r.num_prompt_tokens for r in engine.scheduler.running):
        engine.step()
    engine.step()  # the first decode-only step captures its graph
    step_walls = []
    for _ in range(PROFILED_STEPS):  # the median skips a step that captured a graph for a wider table
        started = time.perf_counter()
        engine.step()
        _sync(device)
        step_walls.append(time.perf_counter() - started)
    wall_us = statistics.median(step_walls) * 1e6

    def attributed(module, *args, **kwargs):
        with torch.profiler.record_function("kvscope.attention"):
            return paged_attention_forward(module, *args, **kwargs)

    if device.type != "cuda":  # no GPU time to split: the profiler would only print its start and stop
        engine.run()
        return {"batch": len(prompts), "wall_ms": wall_us / 1e3, "gpu_busy_ms": None, "attention_ms": None,
                "host_overhead_ms": None}  # None, not NaN: --json writes standard JSON
    activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    AttentionInterface.register(ATTN_IMPLEMENTATION, attributed)
    try:
        with profile(activities=activities) as prof:
            for _ in range(PROFILED_STEPS):
                engine.step()
            _sync(device)
    finally:
        AttentionInterface.register(ATTN_IMPLEMENTATION, paged_attention_forward)
    engine.run()
    busy_us, attention_us = _kernel_time_us(prof)
    busy_us /= PROFILED_STEPS
    attention_us /= PROFILED_STEPS
    return {"batch": len(prompts), "wall_ms": wall_us / 1e3, "gpu_busy_ms": busy_us / 1e3,
            "attention_ms": attention_us / 1e3 if attention_us > 0 else None,
            "host_overhead_ms": max(0.0, wall_us - busy_us) / 1e3}


def run_transformers_fastest(loaded, prompts: list, outputs: list, warm_up: list) -> dict:
    """transformers' continuous batching in each configuration this version offers (its paged
    sdpa, with CUDA graphs where it has them, flash attention where installed); the fastest wins."""
    from kvscope.app.bench.bench import as_transformers_loads_it
    from kvscope.app.lab.verify.baselines import run_continuous_batching

    loaded = as_transformers_loads_it(loaded)
    tried = {}
    configs = [("paged sdpa (defaults)", None)]
    import transformers

    if hasattr(transformers, "ContinuousBatchingConfig"):
        configs.append(("paged sdpa + CUDA graphs", {"use_cuda_graph": True}))
    if importlib.util.find_spec("flash_attn") is not None:
        configs.append(("paged flash_attention_2", {"attn_implementation": "flash_attention_2"}))
    for label, config in configs:
        if config and "use_cuda_graph" in config and loaded.device.type != "cuda":
            continue
        try:
            run_continuous_batching(loaded, warm_up, outputs, config)  # warm-up: its graphs and compiles
            tried[label] = run_continuous_batching(loaded, prompts, outputs, config)
        except Exception as exc:  # a configuration this transformers does not run here
            tried[label] = {"error": _error_text(exc)}
    ran = {k: v for k, v in tried.items() if "error" not in v}
    fastest = max(ran, key=lambda k: ran[k]["throughput_tokens_per_s"]) if ran else None
    return {"configurations": tried, "fastest": fastest}


def bench_cuda(count: int = 64, device: str | None = None, dtype: str | None = "bf16", on_model=None) -> dict:
    """dtype: the weights' and KV's precision, bf16 as a GPU serves (None: each model's default on
    the device). on_model(results, name) is called as each model's figures are in."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    import transformers

    results = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
               "torch": torch.__version__, "transformers": transformers.__version__,
               "weights": "seeded random weights: speed does not depend on their values", "models": {}}
    for name in MODELS:
        loaded = _load(name, device, dtype)
        prompts, outputs = azure_shaped_requests(count, loaded.config.vocab_size)
        warm_up, _ = azure_shaped_requests(count, loaded.config.vocab_size, seed=1)
        entry = {"model": loaded.label, "requests": count, "prompt_tokens": sum(map(len, prompts)),
                 "output_tokens": sum(outputs)}
        entry["kvscope_eager"] = _soft(run_kvscope, loaded, prompts, outputs, warm_up, enforce_eager=True)
        if device == "cuda":
            entry["kvscope_graphs"] = _soft(run_kvscope, loaded, prompts, outputs, warm_up, enforce_eager=False)
        entry["transformers"] = run_transformers_fastest(loaded, prompts, outputs, warm_up)
        results["models"][name] = entry
        del loaded
        if device == "cuda":
            torch.cuda.empty_cache()
        if on_model is not None:
            on_model(results, name)
    return results


def _kvscope_row(label: str, r: dict) -> tuple[str, str]:
    if "error" in r:
        return label, f"failed: {r['error']}"
    d = r["decode_step"]
    graphs = ""
    if r["graph_failure"]:
        graphs = f"; graphs failed, ran eagerly: {r['graph_failure']}"
    elif r["graphs_captured"]:
        graphs = (f"; {r['graphs_captured']} graphs, captured in a warm-up run in "
                  f"{format_seconds(r['graph_capture_s'])} (+{format_seconds(r['graph_capture_in_timed_run_s'])} "
                  f"in the timed run), {r['graph_replays']:,} steps replayed in all")
    ttft = "-" if r["ttft_p50_s"] is None else format_seconds(r["ttft_p50_s"])
    text = (f"{r['throughput_tokens_per_s']:,.0f} output tokens/s ({format_seconds(r['wall_time_s'])}, "
            f"{r['steps']} steps, TTFT p50 {ttft}{graphs}); ")
    if "error" in d:
        return label, text + f"decode-step split failed: {d['error']}"
    attention = "not attributed in a graph" if d["attention_ms"] is None else f"{d['attention_ms']:.2f} ms"
    split = (f" = GPU busy {d['gpu_busy_ms']:.2f} ms (attention {attention}) + host {d['host_overhead_ms']:.2f} ms"
             if d["gpu_busy_ms"] is not None else " (no GPU: no split)")
    return label, text + f"decode step at batch {d['batch']}: {d['wall_ms']:.2f} ms wall, median{split}"


def cmd_bench_cuda(args) -> int:
    if args.device not in (None, "cpu", "cuda"):
        raise ConfigError(f"--device is cpu or cuda, not {args.device!r}")
    if args.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda, but torch sees no CUDA GPU here")
    if args.device != "cuda" and not torch.cuda.is_available():  # minutes of silence otherwise
        print(f"no CUDA GPU here: a dry run of the code path on the CPU (no CUDA graphs), {len(MODELS)} models "
              f"({', '.join(MODELS)}), each printed as it finishes; several minutes on a small CPU", flush=True)
    bench_cuda(args.requests, args.device, on_model=lambda results, name: _print_model(results, name, args.json))
    return 0


def _print_model(results: dict, name: str, json_path: str | None) -> None:
    """One model's table, and the JSON so far: a run cut short keeps the models already done."""
    entry = results["models"][name]
    rows = [("model", entry["model"]),
            ("workload", f"{entry['requests']} Azure-shaped requests at once ({entry['prompt_tokens']:,} prompt, "
                         f"{entry['output_tokens']:,} output tokens)"),
            _kvscope_row("kvscope, eager", entry["kvscope_eager"])]
    if "kvscope_graphs" in entry:
        rows.append(_kvscope_row("kvscope, CUDA graphs", entry["kvscope_graphs"]))
    hf = entry["transformers"]
    for label, r in hf["configurations"].items():
        text = (r["error"] if "error" in r else
                f"{r['throughput_tokens_per_s']:,.0f} output tokens/s ({format_seconds(r['wall_time_s'])})")
        rows.append((f"transformers CB, {label}", text + ("  <- fastest" if label == hf["fastest"] else "")))
    if hf["fastest"]:
        best = hf["configurations"][hf["fastest"]]["throughput_tokens_per_s"]
        for key, label in (("kvscope_eager", "eager"), ("kvscope_graphs", "graphs")):
            if key in entry and "error" not in entry[key]:
                rows.append((f"kvscope {label} / transformers' fastest",
                             f"{entry[key]['throughput_tokens_per_s'] / best:.2f}x"))
    print(table(rows, title=f"{name} on {results['device']} (torch {results['torch']}, "
                            f"transformers {results['transformers']}; {results['weights']})"), flush=True)
    print()
    if json_path:
        write_json_output("--json", json_path, results)

