"""`kvscope bench cuda` without a GPU: its decode-step split runs as a dry run on the CPU, says there
is no split, and its figures stay standard JSON (NaN was written where no GPU time exists)."""

from __future__ import annotations

import json

import kvscope.app.bench.bench_cuda as bench_cuda
from kvscope.app.lab.presets import load_model
from kvscope.app.lab.real_backend import create_real_engine, load_for_real_backend
from kvscope.engine import EngineArgs


def test_the_decode_step_split_on_a_cpu_is_measured_wall_time_and_no_made_up_gpu_figures(monkeypatch):
    monkeypatch.setattr(bench_cuda, "PROFILED_STEPS", 2)
    loaded = load_for_real_backend(architecture=load_model("tiny-llama"), device="cpu", dtype="fp32")
    engine = create_real_engine(loaded, EngineArgs(max_num_seqs=2, kv_cache_memory_bytes=16 << 20),
                                record_outputs=True)
    split = bench_cuda.decode_step_breakdown(engine, [[1, 2, 3, 4], [5, 6, 7]], [3, 3])
    assert split["batch"] == 2 and split["wall_ms"] > 0
    assert split["gpu_busy_ms"] is None and split["host_overhead_ms"] is None and split["attention_ms"] is None
    json.dumps(split, allow_nan=False)  # --json's file is read by strict parsers
    run = {"throughput_tokens_per_s": 10.0, "wall_time_s": 1.0, "steps": 3, "ttft_p50_s": 0.1, "graph_failure": None,
           "graphs_captured": 0, "decode_step": split}
    label, text = bench_cuda._kvscope_row("kvscope, eager", run)
    assert text.endswith("ms wall, median (no GPU: no split)")
    assert not engine.has_unfinished_requests()  # the split's requests ran to their end
