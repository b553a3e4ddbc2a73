"""The engine's behaviour: continuous vs static batching, preemption, rejection, prefix caching,
chunked prefill, contiguous reservation, determinism, snapshots."""

import numpy as np
import pytest

from kvscope.engine import Engine, EngineArgs, EventKind
from kvscope.app.lab.presets import load_hardware, load_model, load_workload
from kvscope.engine.snapshot import BLOCK_CACHED, BLOCK_FREE, BLOCK_RESERVED, BLOCK_USED
from kvscope.app.lab.workload import generate_requests

MODEL = load_model("llama-3-8b")
H100 = load_hardware("h100-80gb")


def engine(**kw):
    return Engine(MODEL, H100, EngineArgs(**kw))


def run_workload(name, requests=200, seed=0, rate=None, **kw):
    """rate: arrivals per second (0: all at once); None keeps the workload's own."""
    e = engine(**kw)
    spec = load_workload(name).with_overrides(num_requests=requests, arrival_rate_per_s=rate)
    e.add_workload(generate_requests(spec, MODEL.vocab_size, seed=seed))
    steps = []
    summary = e.run(on_step=steps.append)
    return e, summary, steps


def events_of(steps, kind):
    return [ev for s in steps for ev in s.events if ev.kind == kind]


def test_same_seed_same_run_different_seed_different_run():
    _, a, steps_a = run_workload("chat", requests=100, seed=7)
    _, b, steps_b = run_workload("chat", requests=100, seed=7)
    _, c, _ = run_workload("chat", requests=100, seed=8)
    assert a == b
    assert [s.request_ids for s in steps_a] == [s.request_ids for s in steps_b]
    assert [s.duration_s for s in steps_a] == [s.duration_s for s in steps_b]
    assert a != c


def test_every_request_completes_with_exactly_its_requested_output():
    e, summary, steps = run_workload("chat", requests=150)
    spec = load_workload("chat").with_overrides(num_requests=150)
    wanted = sum(r.max_tokens for r in generate_requests(spec, MODEL.vocab_size, seed=0))
    assert summary["completed"] == 150 and summary["rejected"] == 0
    assert summary["output_tokens"] == wanted
    assert len(events_of(steps, EventKind.FINISHED)) == 150


def test_preempted_requests_recompute_and_still_finish_exactly():
    # 40 blocks of 16 tokens: far less than 32 requests of ~600 tokens need at once.
    e = engine(num_gpu_blocks_override=40, max_model_len=640, max_num_seqs=32)
    rng = np.random.default_rng(0)
    for _ in range(32):
        e.add_request(rng.integers(0, 1000, 100).tolist(), max_tokens=int(rng.integers(50, 500)))
    requests = {rid: req for _, rid, req in e._pending}  # not arrived yet: still in the pending heap
    max_tokens = {rid: req.max_tokens for rid, req in requests.items()}
    outputs = {}

    def watch(step):
        for rid in step.request_ids:
            req = requests[rid]
            if req.token_ids:
                outputs[rid] = len(req.token_ids) - req.num_prompt_tokens

    steps = []
    summary = e.run(on_step=lambda s: (steps.append(s), watch(s)))
    assert summary["preemptions"] > 0
    assert len(events_of(steps, EventKind.PREEMPTED)) == summary["preemptions"]
    assert summary["completed"] == 32
    assert summary["output_tokens"] == sum(max_tokens.values())
    assert all(outputs[rid] >= max_tokens[rid] - 1 for rid in max_tokens)
    # preemption gives every block back: nothing is held at the end
    assert e.kv.num_free_blocks == e.kv.num_blocks


def test_newest_request_is_preempted_first():
    e = engine(num_gpu_blocks_override=12, max_model_len=190, max_num_seqs=8)
    for i in range(3):
        e.add_request(list(range(i * 100, i * 100 + 30)), max_tokens=150)
    steps = []
    e.run(on_step=steps.append)
    preempted = events_of(steps, EventKind.PREEMPTED)
    assert preempted and preempted[0].request_id == 2


def test_impossible_requests_are_rejected_at_submission_with_a_reason():
    e = engine(max_model_len=1024, num_gpu_blocks_override=50)
    e.add_request(list(range(1000)), max_tokens=100)  # 1,100 tokens > max_model_len
    e.add_request(list(range(10)), max_tokens=10)
    steps = []
    summary = e.run(on_step=steps.append)
    rejected = events_of(steps, EventKind.REJECTED)
    assert [ev.request_id for ev in rejected] == [0]
    assert "exceed max_model_len 1024" in rejected[0].detail
    assert summary["rejected"] == 1 and summary["completed"] == 1

    small = engine(max_model_len=4096, num_gpu_blocks_override=10)  # 160 token slots in all
    small.add_request(list(range(500)), max_tokens=10)
    steps = []
    small.run(on_step=steps.append)
    assert "more than the whole pool of 10" in events_of(steps, EventKind.REJECTED)[0].detail


def test_a_workload_of_only_rejected_requests_ends():
    e = engine(max_model_len=64)
    for _ in range(5):
        e.add_request(list(range(100)), max_tokens=5, arrival_time=1.0)
    summary = e.run(max_steps=100)
    assert summary["rejected"] == 5 and not e.has_unfinished_requests()


def test_continuous_batching_beats_static_on_variable_lengths():
    _, cont, _ = run_workload("chat", requests=300, rate=0.0, max_num_seqs=32)
    _, stat, _ = run_workload("chat", requests=300, rate=0.0, max_num_seqs=32, scheduling="static")
    assert cont["completed"] == stat["completed"] == 300
    assert cont["throughput_tokens_per_s"] > 1.5 * stat["throughput_tokens_per_s"]


def test_static_batching_admits_nobody_until_the_whole_batch_is_done():
    e = engine(max_num_seqs=4, scheduling="static")
    for i in range(8):
        e.add_request(list(range(i, i + 20)), max_tokens=10 if i % 2 else 100)
    steps = []
    e.run(on_step=steps.append)
    admitted_at = {ev.request_id: s.step for s in steps for ev in s.events if ev.kind == EventKind.ADMITTED}
    finished_at = {ev.request_id: s.step for s in steps for ev in s.events if ev.kind == EventKind.FINISHED}
    first_batch_done = max(finished_at[r] for r in range(4))
    assert all(admitted_at[r] > first_batch_done for r in range(4, 8))
    # while the long members run, the short ones' slots stay empty
    assert min(s.num_running for s in steps if 0 < s.step <= first_batch_done) == 2


def test_prefix_caching_reuses_shared_system_prompts():
    _, on, steps_on = run_workload("shared-system-prompt", requests=100)
    _, off, _ = run_workload("shared-system-prompt", requests=100, enable_prefix_caching=False)
    assert on["prefix_cache_hit_rate"] > 0.5
    assert off["prefix_cache_hit_rate"] == 0.0
    hits = events_of(steps_on, EventKind.PREFIX_HIT)
    assert hits and all(ev.value >= 1024 - 16 for ev in hits[:10])
    assert on["ttft_p50_s"] < off["ttft_p50_s"]  # the shared tokens are not recomputed


def test_cached_blocks_are_evicted_lru_when_new_blocks_are_needed():
    e = engine(num_gpu_blocks_override=8, max_model_len=128)
    e.add_request(list(range(64)), max_tokens=1)  # 4 full blocks cached after it finishes
    e.run()
    snap = e.snapshot()
    assert snap.count(BLOCK_CACHED) == 4
    e.add_request(list(range(1000, 1100)), max_tokens=1)  # needs 7 blocks: evicts 3 cached ones
    steps = []
    e.run(on_step=steps.append)
    evicted = events_of(steps, EventKind.EVICTED)
    assert len(evicted) == 3
    assert all(ev.request_id == 0 for ev in evicted)  # the last owner is named


def test_chunked_prefill_splits_long_prompts_and_mixes_them_with_decodes():
    e = engine(max_num_batched_tokens=512, max_num_seqs=256)  # vLLM refuses a budget below max_num_seqs
    e.add_request(list(range(50)), max_tokens=100)
    e.step()
    e.add_request(list(range(5000, 7000)), max_tokens=10)  # 2,000-token prompt, budget 512
    mixed = [e.step() for _ in range(4)]
    for step in mixed:
        assert step.num_tokens <= 512
        assert step.is_prefill == [False, True]  # one decode, one prompt chunk, every step
    assert [s.num_new_tokens[1] for s in mixed] == [511, 511, 511, 467]


def test_without_chunked_prefill_a_prompt_runs_whole_and_stalls_decodes():
    e = engine(enable_chunked_prefill=False, max_num_batched_tokens=8192)
    e.add_request(list(range(50)), max_tokens=100)
    e.step()
    e.add_request(list(range(5000, 7000)), max_tokens=10)
    step = e.step()
    assert step.num_new_tokens == [1, 2000]
    assert step.duration_s > 5 * e.step().duration_s  # the decode waited for the whole prompt


def test_contiguous_reservation_fits_fewer_requests_and_wastes_slots():
    kw = dict(requests=200, rate=0.0, max_model_len=8192, num_gpu_blocks_override=4096)
    _, paged, _ = run_workload("chat", **kw)
    _, contiguous, _ = run_workload("chat", allocation="contiguous", **kw)
    assert paged["peak_running"] >= 3 * contiguous["peak_running"]
    assert contiguous["mean_fragmentation"] > 0.5 > 0.05 > paged["mean_fragmentation"]


def test_idle_engine_jumps_to_the_next_arrival():
    e = engine()
    e.add_request(list(range(10)), max_tokens=2, arrival_time=100.0)
    step = e.step()
    assert step.start_time_s == 100.0
    kinds = [ev.kind for ev in step.events]
    assert kinds[0] == EventKind.ARRIVED and EventKind.ADMITTED in kinds
    assert all(ev.time_s == 100.0 for ev in step.events)


def test_snapshot_shows_a_known_allocation():
    e = engine(num_gpu_blocks_override=10, max_model_len=128)
    rid = e.add_request(list(range(40)), max_tokens=5)
    e.step()  # 40 prompt tokens computed: blocks of 16, 16, 8
    snap = e.snapshot()
    used = np.flatnonzero(snap.block_state == BLOCK_USED)
    assert len(used) == 3 and set(snap.block_owner[used]) == {rid}
    assert sorted(snap.block_fill[used].tolist()) == [8, 16, 16]
    assert snap.count(BLOCK_FREE) == 7
    assert snap.requests["request_id"].tolist() == [rid]
    assert snap.requests["num_blocks"][0] == 3
    assert snap.num_running == 1 and snap.kv_usage == pytest.approx(0.3)


def test_snapshot_marks_shared_prefix_blocks_with_their_ref_count():
    e = engine(num_gpu_blocks_override=20, max_model_len=128)
    prefix = list(range(32))
    e.add_request(prefix + [900], max_tokens=20)
    e.step()
    e.add_request(prefix + [901], max_tokens=20)
    e.step()
    snap = e.snapshot()
    shared = np.flatnonzero(snap.block_ref_cnt == 2)
    assert len(shared) == 2 and all(snap.block_hash[shared] != 0)


def test_snapshot_of_contiguous_allocation_shows_the_unfilled_reservation():
    e = engine(num_gpu_blocks_override=64, max_model_len=256, allocation="contiguous")
    e.add_request(list(range(20)), max_tokens=5)
    e.step()
    snap = e.snapshot()
    assert snap.count(BLOCK_USED) == 2  # 20 tokens
    assert snap.count(BLOCK_RESERVED) == 14  # the rest of the 256-token reservation


def test_big_models_run_tensor_parallel_on_the_simulated_node():
    e = Engine(load_model("llama-3-70b"), load_hardware("8x-h100-80gb"), EngineArgs())
    spec = load_workload("chat").with_overrides(num_requests=50)
    e.add_workload(generate_requests(spec, e.model.vocab_size, seed=0))
    summary = e.run()
    assert summary["completed"] == 50
    assert 0.005 < summary["tpot_p50_s"] < 0.1  # a few weights-reads per token on 8 GPUs


def test_kv_cache_is_the_ceiling_long_outputs_fill_it_short_ones_do_not():
    """Seed 000's trap: uniform short outputs never fill the pool; realistic long ones hit the wall."""
    _, short, _ = run_workload("uniform-short", requests=400, num_gpu_blocks_override=2000)
    _, long, _ = run_workload("agent", requests=100, rate=5.0, num_gpu_blocks_override=2000)
    assert short["peak_kv_usage"] < 0.5 and short["preemptions"] == 0
    assert long["peak_kv_usage"] > 0.9
    assert long["compute_utilization"] < 0.5  # the cache is full while compute has headroom


def test_summaries_taken_while_running_agree_with_percentiles_of_everything_so_far():
    """The summary converts only the latencies new since the last one (the window asks twice a
    second): every summary along the way must equal one computed from scratch."""
    e = engine()
    spec = load_workload("chat").with_overrides(num_requests=150)
    e.add_workload(generate_requests(spec, MODEL.vocab_size, seed=3))
    checked = 0
    sampled = 0
    while (result := e.step()) is not None:
        sampled += result.num_output_tokens
        if result.step % 97 == 0 or e.metrics.completed == 150:
            summary = e.summary()
            m = e.metrics
            for key, values in (("ttft", m.ttft), ("tpot", m.tpot), ("e2e_latency", m.e2e),
                                ("queue_time", m.queue_time)):
                for q in (50, 99):
                    expected = float(np.percentile(values, q)) if values else None
                    assert summary[f"{key}_p{q}_s"] == expected
            checked += 1
    assert checked > 5 and e.metrics.completed == 150
    assert e.metrics.sampled_tokens == sampled == e.metrics.output_tokens


def test_a_request_first_in_line_is_admitted_before_those_already_waiting():
    engine = Engine(MODEL, H100, EngineArgs(max_num_seqs=1, kv_cache_memory_bytes=1 << 30))
    queued = [engine.add_request(list(range(10 * i, 10 * i + 40)), max_tokens=4, arrival_time=0.0) for i in range(3)]
    engine.step()  # the first is running, two wait
    typed = engine.add_request(list(range(500, 540)), max_tokens=4, first_in_line=True)
    admitted = []
    while engine.has_unfinished_requests():
        admitted += [ev.request_id for ev in engine.step().events if ev.kind == EventKind.ADMITTED]
    assert admitted == [typed, queued[1], queued[2]]
