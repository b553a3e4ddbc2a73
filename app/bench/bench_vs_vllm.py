"""`kvscope bench real --against-vllm`: kvscope's real engine against vLLM's own CPU build.

The same trained model (SmolLM2-135M-Instruct, fp32), the same 64 Azure-shaped requests as the
issue measured (prompts / 8, outputs / 4, all at once, exact lengths: end-of-sequence ignored on
both sides), the same block size (32: vLLM's CPU kernels need a multiple of 32), prefix caching on,
max_num_seqs = the request count, vLLM's CPU token budget of 2,048 per step. kvscope runs twice:
on one compute thread, as vLLM computes by default (it keeps the other core for its API server),
and on every core, as kvscope runs by default; the ratio at equal threads is the one that says whose
engine is faster. vLLM runs first and its server is stopped before kvscope runs: an idle vLLM worker spins on
a core and would slow whatever runs beside it. transformers' continuous batching then serves the
same requests, so the speed-up over it comes from the same run.
"""

from __future__ import annotations

import os
import sys
import time

from kvscope.engine import EngineArgs
from kvscope.engine.config import ConfigError
from kvscope.engine.units import format_seconds
from kvscope.app.cli.output import table

VLLM_CPU_BLOCK_SIZE = 32
VLLM_CPU_SERVER_TOKEN_BUDGET = 2048  # vLLM's max_num_batched_tokens default for its API server on a CPU
# vLLM's CPU build computes on one core by default (it keeps the other for its API server). One
# thread is also what a loaded machine needs: measured here under load, a 2-thread fp32 GEMM of a
# decode step took 12x the time of a 1-thread one, its threads waiting on each other at every barrier.
COMPUTE_THREADS = 1


def vllm_compute_cores() -> str:
    """Which cores vLLM's CPU build computes on, as this process's environment leaves it."""
    import os

    bind = os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "auto")
    return "1 core, 1 kept for its API server (its default)" if bind == "auto" else f"cores {bind} (VLLM_CPU_OMP_THREADS_BIND)"


def run_kvscope_exact(loaded, prompts: list, outputs: list, block_size: int = VLLM_CPU_BLOCK_SIZE,
                      threads: int = COMPUTE_THREADS) -> dict:
    """kvscope's engine on the requests, each making exactly its output length: output tokens/s
    and TTFT p50 in wall seconds from the moment all requests were added, as a client would see."""
    import statistics

    import torch

    from kvscope.app.lab.real_backend import create_real_engine

    args = EngineArgs(max_num_seqs=len(prompts), block_size=block_size, enable_prefix_caching=True,
                      max_num_batched_tokens=VLLM_CPU_SERVER_TOKEN_BUDGET)
    engine = create_real_engine(loaded, args, record_outputs=True)
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    threads = torch.get_num_threads()  # what torch took, as the result reports it
    try:
        engine.add_request(prompts[0][:8], 2)  # warm-up, as vLLM's side gets
        engine.run()
        warm_steps = engine.metrics.steps
        ids = [engine.add_request(p, n) for p, n in zip(prompts, outputs)]
        first_token: dict[int, float] = {}
        t0 = time.perf_counter()
        while engine.step() is not None:
            now = time.perf_counter() - t0
            for i in ids:
                if i not in first_token:
                    req = engine.requests.get(i)
                    if i in engine.outputs or (req is not None and req.first_token_time is not None):
                        first_token[i] = now
        wall = time.perf_counter() - t0
    finally:
        torch.set_num_threads(previous)
    made = sum(len(engine.outputs[i]) for i in ids)
    if made != sum(outputs):
        raise ConfigError(f"kvscope made {made} output tokens where {sum(outputs)} were asked for")
    return {"engine": "kvscope", "block_size": block_size, "threads": threads, "requests": len(prompts), "output_tokens": made,
            "wall_time_s": wall, "throughput_tokens_per_s": made / wall,
            "ttft_p50_s": statistics.median(first_token.values()), "steps": engine.metrics.steps - warm_steps,
            "forward_time_s": engine.runner.forward_time_s, "packed_layers": engine.runner.packed_layers,
            "packing_time_s": engine.runner.packing_time_s}


def bench_against_vllm(count: int = 64, device: str | None = None) -> dict:
    if device not in (None, "cpu"):  # before the imports below (torch, transformers): refused in 17 s, not at once
        raise ConfigError(f"--against-vllm compares with vLLM's CPU build: it runs on the CPU, not {device}")
    from kvscope.app.bench.bench import as_transformers_loads_it, azure_shaped_requests
    from kvscope.app.lab.chat_defaults import trained_model_available
    from kvscope.app.lab.real_backend import load_for_real_backend
    from kvscope.app.lab.trained_model import TRAINED_MODEL, trained_model_dir
    from kvscope.app.lab.verify.baselines import run_continuous_batching
    from kvscope.app.lab.vllm.cpu_server import serve_bench_requests

    if not trained_model_available():
        raise ConfigError(f"--against-vllm serves the trained model, which is not installed: "
                          f"{TRAINED_MODEL.install_command}")
    loaded = load_for_real_backend(TRAINED_MODEL.name, device="cpu", dtype="fp32")
    prompts, outputs = azure_shaped_requests(count, loaded.config.vocab_size)
    progress = lambda message: print(message, file=sys.stderr, flush=True)  # noqa: E731
    vllm = serve_bench_requests(prompts, outputs, model=trained_model_dir(), block_size=VLLM_CPU_BLOCK_SIZE,
                                dtype="float32", progress=progress)
    progress(f"vLLM: {vllm['throughput_tokens_per_s']:.1f} output tokens/s, TTFT p50 {vllm['ttft_p50_s']:.1f} s; "
             f"stopped. kvscope's engine on the same requests ...")
    ours = run_kvscope_exact(loaded, prompts, outputs)
    progress(f"kvscope, 1 thread: {ours['throughput_tokens_per_s']:.1f} output tokens/s, TTFT p50 {ours['ttft_p50_s']:.1f} s")
    cores = os.cpu_count() or 1
    all_cores = run_kvscope_exact(loaded, prompts, outputs, threads=cores) if cores > 1 else ours
    progress(f"kvscope, {cores} threads: {all_cores['throughput_tokens_per_s']:.1f} output tokens/s, "
             f"TTFT p50 {all_cores['ttft_p50_s']:.1f} s")
    progress("transformers' continuous batching on the same requests ...")
    loaded = as_transformers_loads_it(loaded)
    run_continuous_batching(loaded, [prompts[0][:8]], [2])  # warm-up
    continuous = run_continuous_batching(loaded, prompts, outputs)
    import torch

    continuous = {**continuous, "threads": torch.get_num_threads()}
    return {"model": loaded.label, "requests": count, "prompt_tokens": sum(len(p) for p in prompts),
            "output_tokens": sum(outputs), "vllm": vllm, "kvscope": ours,
            "hf_continuous_batching": continuous, "kvscope_all_cores": all_cores,
            "vllm_compute_cores": vllm_compute_cores(),
            "all_cores_throughput_ratio": all_cores["throughput_tokens_per_s"] / vllm["throughput_tokens_per_s"],
            "all_cores_ttft_p50_ratio": all_cores["ttft_p50_s"] / vllm["ttft_p50_s"],
            "speedup_vs_continuous": ours["throughput_tokens_per_s"] / continuous["throughput_tokens_per_s"],
            "all_cores_speedup_vs_continuous": all_cores["throughput_tokens_per_s"] / continuous["throughput_tokens_per_s"],
            "throughput_ratio": ours["throughput_tokens_per_s"] / vllm["throughput_tokens_per_s"],
            "ttft_p50_ratio": ours["ttft_p50_s"] / vllm["ttft_p50_s"]}


def print_against_vllm(r: dict) -> None:
    k, v, c, a = r["kvscope"], r["vllm"], r["hf_continuous_batching"], r["kvscope_all_cores"]
    kvscope_row = lambda run: (f"{run['throughput_tokens_per_s']:,.1f} output tokens/s ({format_seconds(run['wall_time_s'])}, "  # noqa: E731
                               f"{run['steps']} steps), TTFT p50 {format_seconds(run['ttft_p50_s'])}")
    rows = [
        ("model", f"{r['model']}, fp32, block size {k['block_size']}, prefix caching on"),
        ("workload", f"{r['requests']} Azure-shaped requests all at once, exact lengths "
                     f"({r['prompt_tokens']:,} prompt, {r['output_tokens']:,} output tokens)"),
        (v["engine"], f"{v['throughput_tokens_per_s']:,.1f} output tokens/s ({format_seconds(v['wall_time_s'])}), "
                      f"TTFT p50 {format_seconds(v['ttft_p50_s'])}; computing on {r['vllm_compute_cores']}; "
                      f"server start {format_seconds(v['server_start_s'])}"),
        (f"kvscope engine, {k['threads']} thread", kvscope_row(k)),
    ]
    if a is not k:
        rows.append((f"kvscope engine, {a['threads']} threads", kvscope_row(a)))
    rows += [
        ("kvscope warm-up", f"{k['packed_layers']} linear layers packed for oneDNN in "
                            f"{format_seconds(k['packing_time_s'])} (no compilation); vLLM compiles at each start"),
        ("kvscope / vLLM, throughput", f"{r['throughput_ratio']:.2f}x with kvscope on {k['threads']} thread"
                                       + (f", {r['all_cores_throughput_ratio']:.2f}x on {a['threads']}" if a is not k else "")
                                       + " (target >= 1.0x at equal compute threads)"),
        ("kvscope / vLLM, TTFT p50", f"{r['ttft_p50_ratio']:.2f}x with kvscope on {k['threads']} thread"
                                     + (f", {r['all_cores_ttft_p50_ratio']:.2f}x on {a['threads']}" if a is not k else "")
                                     + " (target <= 1.0x at equal compute threads)"),
        ("transformers continuous batching", f"{c['throughput_tokens_per_s']:,.1f} output tokens/s "
                                             f"({format_seconds(c['wall_time_s'])}, torch's {c['threads']} threads); kvscope "
                                             f"{r['speedup_vs_continuous']:.2f}x of it on {k['threads']} thread"
                                             + (f", {r['all_cores_speedup_vs_continuous']:.2f}x on {a['threads']}" if a is not k else "")),
    ]
    print(table(rows, title="Real engine vs vLLM's CPU build (same model, requests and machine, one run; vLLM stopped first)"))
    print()
