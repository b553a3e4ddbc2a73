"""Guided scenarios: every file loads, every comparison runs, and each one's claim holds in the
measured result — three of them on the real backend (the tiny model on this machine).

Scenarios run at their smallest request count (min_requests) to keep the suite fast; the claims
are the seeds' (see each TOML's comments for why its sizes show them).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest

from kvscope.app.lab.compare import run_comparison
from kvscope.engine.config import ConfigError
from kvscope.engine.units import GiB
from kvscope.app.lab.scenarios import load_scenario, scenario_names, scenarios_root
from kvscope.app.gui.scenario_verdict import guess_verdict

SEED_CLAIMS = {  # every seed claim the brief names, and the scenario that teaches it
    "the cache is the ceiling": "cache-ceiling",
    "the benchmark trap": "benchmark-trap",
    "static vs continuous batching": "static-vs-continuous",
    "contiguous reservation vs paged blocks": "paged-vs-contiguous",
    "prefix caching with a shared system prompt": "prefix-caching",
    "GQA and fp8 KV": "gqa-and-fp8",
    "fp8 KV on the real backend": "fp8-kv-real",
    "chunked prefill": "chunked-prefill",
    "Qwen3.6-27B-FP8 on an H100 NVL": "qwen-h100-nvl",
}


@functools.lru_cache(maxsize=None)
def run_small(name: str):
    scenario = load_scenario(name)
    return scenario, run_comparison(scenario, requests=scenario.min_requests)


@pytest.fixture(scope="module")
def real_runs():
    """The three real-backend scenarios, each run once (a few seconds each on a 2-core CPU)."""
    return {name: run_small(name) for name in ("static-vs-continuous", "paged-vs-contiguous", "fp8-kv-real")}


# -- the files ---------------------------------------------------------------------------------------


def test_every_scenario_file_loads_and_is_complete():
    files = sorted(p.name[:-5] for p in scenarios_root().iterdir() if p.name.endswith(".toml"))
    assert sorted(scenario_names()) == files
    assert set(SEED_CLAIMS.values()) <= set(files)
    for name in files:
        s = load_scenario(name)
        assert s.name == name
        assert 2 <= len(s.configs) <= 4 and len(set(s.labels)) == len(s.labels)
        assert s.question.endswith("?") and s.caption.count(". ") >= 1 and s.seed_lesson.startswith("seed 00")
        assert 1 <= s.min_requests <= s.num_requests
        assert s.answer.kind in ("number", "choice")


def test_scenarios_have_distinct_orders_for_keys_1_to_9():
    orders = [load_scenario(n).order for n in scenario_names()]
    assert orders == sorted(orders) and len(set(orders)) == len(orders)
    assert orders[:9] == list(range(1, 10))


def test_answers_are_revealed_from_the_run_never_written_in_the_file():
    for name in scenario_names():
        text = Path(load_scenario(name).path).read_text()
        reveal = text.split("[reveal]", 1)[1].split("[", 1)[0]
        assert not re.search(r"=\s*[\d.]+\s*$", reveal, re.M), f"{name}: a number in [reveal]"


# -- each claim, measured ----------------------------------------------------------------------------


def test_cache_ceiling_33_sequences_and_max_num_seqs_does_not_move_it():
    scenario, result = run_small("cache-ceiling")
    value, text = scenario.reveal(result)
    base = result["max_num_seqs 64"]
    assert base.memory["kv_bytes_per_token"] == 512 * 1024  # 0.5 MiB per token
    assert base.memory["kv_bytes_per_sequence"] == 2 * GiB  # 2 GiB per 4K sequence
    assert value == pytest.approx(33.72, abs=0.01) and text == "33.7 sequences"  # "~33" in seed 004
    raised = result["max_num_seqs 256"]
    assert raised.metrics["peak_running"] == base.metrics["peak_running"]  # the flag is not the ceiling
    assert 33 <= base.metrics["peak_running"] <= 36 and base.metrics["peak_kv_usage"] == pytest.approx(1.0, abs=0.01)
    assert base.metrics["compute_utilization"] < 0.6  # compute had headroom; memory did not
    assert 1.8 <= result.ratio("peak_running", "fp8 KV, max_num_seqs 256", "max_num_seqs 64") <= 2.2


def test_benchmark_trap_short_outputs_hide_the_ceiling():
    scenario, result = run_small("benchmark-trap")
    bench, real = result["benchmark: 32-token answers"], result["real traffic: agent-length answers"]
    assert bench.metrics["peak_kv_usage"] < 0.05 and bench.metrics["preemptions"] == 0
    assert real.metrics["peak_kv_usage"] > 0.99 and real.metrics["preemptions"] > 0
    value, text = scenario.reveal(result)
    assert value > 99 and text.endswith(" %")


def test_prefix_caching_on_hits_the_shared_prompt_and_cuts_ttft():
    scenario, result = run_small("prefix-caching")
    off, on = result["prefix caching off"], result["prefix caching on"]
    assert off.metrics["prefix_cache_hit_rate"] == 0
    assert on.metrics["prefix_cache_hit_rate"] > 0.5
    assert on.metrics["ttft_p50_s"] < 0.7 * off.metrics["ttft_p50_s"]
    assert scenario.reveal(result)[0] == pytest.approx(on.metrics["prefix_cache_hit_rate"] * 100)


def test_gqa_admits_4x_and_fp8_2x():
    scenario, result = run_small("gqa-and-fp8")
    mha, gqa = "Llama 2 7B (MHA), fp16 KV", "Llama 3 8B (GQA), fp16 KV"
    assert result[gqa].memory["kv_bytes_per_token"] * 4 == result[mha].memory["kv_bytes_per_token"]
    assert 3.5 <= result.ratio("peak_running", gqa, mha) <= 4.2  # 4x per token, less Llama 3's larger weights
    assert 1.8 <= result.ratio("peak_running", "Llama 2 7B, fp8 KV", mha) <= 2.2
    assert 1.8 <= result.ratio("peak_running", "Llama 3 8B (GQA), fp8 KV", gqa) <= 2.2
    value, text = scenario.reveal(result)
    assert value == gqa and "101" in text  # at 0.92 (98 at 0.9); vLLM's accounting: 7 GiB of the pool profile a 65,536-token step


def test_chunked_prefill_removes_the_decode_stall():
    scenario, result = run_small("chunked-prefill")
    off, on = result["chunked prefill off"], result["chunked prefill on, 512-token steps"]
    assert off.metrics["itl_max_s"] > 5 * on.metrics["itl_max_s"]
    assert off.metrics["tpot_p99_s"] > on.metrics["tpot_p99_s"]
    value, text = scenario.reveal(result)
    assert value == pytest.approx(off.metrics["itl_max_s"] * 1000) and text.endswith(" ms")


def test_qwen_on_h100_nvl_is_the_seeds_2_7_requests():
    scenario, result = run_small("qwen-h100-nvl")
    fp8, bf16 = result["fp8 KV (the deployment)"], result["bf16 KV"]
    assert fp8.memory["kv_bytes_per_token"] == 128 * 1024 and bf16.memory["kv_bytes_per_token"] == 256 * 1024
    assert fp8.memory["kv_bytes_per_sequence"] == 16 * GiB  # a 128K-token request
    value, text = scenario.reveal(result)
    assert round(value, 2) == 2.70 and text == "2.70 sequences"  # seed 004: "≈ 2.7 full-128K requests"
    assert bf16.memory["max_concurrent_sequences"] == pytest.approx(value / 2)
    assert fp8.metrics["peak_kv_usage"] < 0.25  # RAG prompts use a sliver of a 128K budget


# -- the three real-backend claims -------------------------------------------------------------------


def test_real_continuous_batching_beats_static_batches(real_runs):
    scenario, result = real_runs["static-vs-continuous"]
    static, same_size = result["static batches of 8"], result["continuous, 8 at a time"]
    grown = result["continuous, up to 32"]
    assert {c.settings["backend"] for c in (static, same_size, grown)} == {"real"}
    assert static.metrics["output_tokens"] == same_size.metrics["output_tokens"] == grown.metrics["output_tokens"]
    # A static batch runs for its longest answer: ~1.7x the steps on these Azure lengths (the
    # schedule is deterministic, so this holds however busy the machine is).
    assert static.metrics["steps"] >= 1.5 * same_size.metrics["steps"]
    assert grown.metrics["peak_running"] > 8 == static.metrics["peak_running"]
    # The grown batch shares each step's fixed cost among more tokens: the same tokens in far fewer
    # steps (deterministic). The throughput it buys is timed on this machine and moves with load
    # (2026-11-27: 2.4 - 2.7x quiet, 1.35x with three jobs on the two cores, where an earlier bar of
    # 1.5x failed). So is the same-size batch's gain over static batches (1.4 - 1.5x quiet): both
    # are `kvscope compare`'s and `kvscope bench scenarios`'s to report, not a test's.
    assert grown.metrics["steps"] * 2 <= same_size.metrics["steps"]
    assert scenario.reveal(result)[0] == pytest.approx(result.ratio("throughput_tokens_per_s", "continuous, up to 32",
                                                                    "static batches of 8"))


def test_real_paged_admits_3x_the_requests_of_contiguous_reservation(real_runs):
    scenario, result = real_runs["paged-vs-contiguous"]
    contiguous, paged = result["contiguous reservation"], result["paged"]
    assert contiguous.settings["max_model_len"] == 4096
    assert contiguous.metrics["peak_running"] == 2  # the budget holds two 4,096-token reservations
    assert paged.metrics["peak_running"] >= 3 * contiguous.metrics["peak_running"]
    assert contiguous.metrics["mean_fragmentation"] > 0.5 > paged.metrics["mean_fragmentation"]
    assert scenario.reveal(result)[0] >= 3


def test_real_fp8_kv_admits_about_twice_fp16_and_its_cost_is_measured(real_runs):
    scenario, result = real_runs["fp8-kv-real"]
    fp16, fp8 = result["fp16 KV"], result["fp8_e4m3 KV"]
    assert fp16.memory["kv_pool_bytes"] == fp8.memory["kv_pool_bytes"]
    assert fp8.memory["num_blocks"] == 2 * fp16.memory["num_blocks"]
    value, text = scenario.reveal(result)
    assert 1.6 <= value <= 2.4 and text.endswith("x")
    # the quality cost is measured against the model at full precision, never a constant
    assert fp8.kv_quality_note.startswith("measured") and 0 < fp8.kv_quality_cost < 0.5
    # 16-bit KV is measured too, on the same passages: it costs no more than fp8
    assert fp16.kv_quality_note.startswith("measured") and fp16.kv_quality_cost <= fp8.kv_quality_cost


# -- reveal and guesses ------------------------------------------------------------------------------


def test_guess_verdict_says_how_close_a_guess_came():
    scenario, result = run_small("qwen-h100-nvl")
    assert "close" in guess_verdict(scenario, 2.6, result)
    assert "63 % low" in guess_verdict(scenario, "1 sequence", result)
    far = guess_verdict(scenario, "8", result)
    assert "196 % high" in far and "3 times the answer" in far
    with pytest.raises(ConfigError, match="a number"):
        guess_verdict(scenario, "lots", result)


def test_the_verdict_says_whether_the_answer_was_measured_or_computed():
    computed, result = run_small("qwen-h100-nvl")  # the memory math: no run needed
    assert "the memory math computes" in guess_verdict(computed, 2.6, result)
    assert "computed" in computed.reveal_from.describe() and "measured" not in computed.reveal_from.describe()
    measured, result = run_small("gqa-and-fp8")
    assert "the run measured" in guess_verdict(measured, "1", result)
    # the answer is the better of the two choices asked about; a third configuration (Llama 3 8B with
    # fp8) runs more than either, and "the configuration with the highest ..." contradicted its row
    assert measured.reveal_from.describe().startswith("of the choices offered, the one whose configuration has the highest")


def test_every_simulated_scenario_s_speed_is_a_window_notch():
    from kvscope.app.gui.menus import SPEEDS

    notches = {value for _, value in SPEEDS}
    for name in scenario_names():
        scenario = load_scenario(name)
        assert scenario.playback_speed in notches
        assert scenario.backend == "simulated" or scenario.playback_speed == 1.0


def test_guess_verdict_on_a_choice():
    scenario, result = run_small("gqa-and-fp8")
    assert guess_verdict(scenario, "Llama 3 8B (GQA), fp16 KV", result).startswith("Right")
    assert guess_verdict(scenario, "1", result).startswith("Not this time")  # the first choice, by number
    with pytest.raises(ConfigError, match="choose one of"):
        guess_verdict(scenario, "Llama 4", result)


# -- validation: clear errors that name the file and the field ----------------------------------------

VALID = """
name = "tiny"
order = 1
title = "A title"
seed_lesson = "seed 000"
claim = "A claim"
caption = "One. Two."
question = "How many?"

[answer]
kind = "number"
unit = "requests"

[reveal]
metric = "peak_running"
config = "a"

[base]
backend = "simulated"
model = "llama-3-8b"
hardware = "h100-80gb"
num_requests = 10

[base.workload]
preset = "chat"

[[configs]]
label = "a"

[[configs]]
label = "b"
engine = { kv_cache_dtype = "fp8" }
"""


def write(tmp_path, text: str) -> Path:
    path = tmp_path / "scenario.toml"
    path.write_text(text)
    return path


def test_a_valid_file_loads_by_path_and_runs(tmp_path):
    scenario = load_scenario(write(tmp_path, VALID))
    result = run_comparison(scenario)
    assert result.labels == ["a", "b"] and result["a"].metrics["completed"] + result["a"].metrics["rejected"] == 10


@pytest.mark.parametrize("old, new, fragments", [
    ('question = "How many?"\n', "", ["question", "missing"]),
    ('order = 1', 'order = 1\ncolour = "red"', ["unknown field(s) colour"]),
    ('engine = { kv_cache_dtype = "fp8" }', 'engine = { kv_cache_dtype = "fp7" }',
     ["configs[2] (b)", "kv_cache_dtype", "fp7"]),
    ('engine = { kv_cache_dtype = "fp8" }', 'engine = { max_num_seqs = 0 }', ["configs[2] (b)", "max_num_seqs"]),
    ('engine = { kv_cache_dtype = "fp8" }', 'engine = { block_sise = 16 }', ["configs[2] (b).engine", "block_sise"]),
    ('config = "a"', 'config = "c"', ["reveal.config", "no configuration labelled 'c'", "a, b"]),
    ('metric = "peak_running"', 'metric = "peak_runing"', ["reveal.metric", "unknown quantity"]),
    ('unit = "requests"', 'unit = "ms"', ["answer.unit", "peak_running", "requests"]),
    ('unit = "requests"', 'unit = "parsecs"', ["answer.unit", "parsecs"]),
    ('kind = "number"', 'kind = "essay"', ["answer.kind", "essay"]),
    ('backend = "simulated"', 'backend = "real"', ["configs[1] (a).hardware", "real backend runs on this machine"]),
    ('model = "llama-3-8b"', 'model = "llama-9"', ["configs[1] (a).model", "unknown model preset 'llama-9'"]),
    ('preset = "chat"', 'preset = "chat"\nprompt_scale = 3', ["base.workload", "prompt_scale"]),
    ('preset = "chat"', 'preset = "chat"\nprompt_tokens = { dist = "gamma" }', ["base.workload", "prompt_tokens", "gamma"]),
    ('num_requests = 10', 'num_requests = 10\nmin_requests = 20', ["base.min_requests", "more than num_requests"]),
    ('[[configs]]\nlabel = "b"\nengine = { kv_cache_dtype = "fp8" }', "", ["configs", "2 to 4", "got 1"]),
    ('label = "b"', 'label = "a"', ["labels must differ"]),
    ('name = "tiny"', 'name = "tiny', ["malformed TOML"]),
    ('order = 1', 'order = 1\nplayback_speed = 3', ["playback_speed", "one of 1, 2, 5, 10, 20, 50", "3"]),
    ('order = 1', 'order = 1\nplayback_speed = "fast"', ["playback_speed", "a number"]),
])
def test_an_invalid_file_names_the_file_and_the_field(tmp_path, old, new, fragments):
    assert old in VALID
    path = write(tmp_path, VALID.replace(old, new, 1))
    with pytest.raises(ConfigError) as err:
        load_scenario(path)
    message = str(err.value)
    assert message.startswith(f"scenario file {path}"), message
    for fragment in fragments:
        assert fragment in message, message


def test_unknown_name_and_too_few_requests():
    with pytest.raises(ConfigError, match="unknown scenario 'nope'; known: cache-ceiling"):
        load_scenario("nope")
    with pytest.raises(ConfigError, match="at least 14 requests"):
        load_scenario("paged-vs-contiguous").comparison_spec(requests=5)


# -- a run that served nothing answers nothing --------------------------------------------------------


def _scenario_copy(tmp_path, name: str, edits: dict):
    text = Path(load_scenario(name).path).read_text().replace(f'name = "{name}"', f'name = "{name}-edited"')
    for old, new in edits.items():
        assert old in text
        text = text.replace(old, new)
    path = tmp_path / f"{name}-edited.toml"
    path.write_text(text)
    return load_scenario(str(path))


def test_a_configuration_that_served_no_request_reveals_no_answer(tmp_path):
    """Before: every request over max_model_len, and "Answer: 0.00 %" from a hit rate nothing measured."""
    scenario = _scenario_copy(tmp_path, "prefix-caching", {
        "engine = { enable_prefix_caching = true }": "engine = { enable_prefix_caching = true, max_model_len = 512 }"})
    result = run_comparison(scenario, requests=scenario.min_requests)
    assert result["prefix caching on"].metrics["completed"] == 0
    assert result["prefix caching off"].metrics["completed"] == scenario.min_requests  # the neighbour served
    with pytest.raises(ConfigError, match=r'"prefix caching on" completed no request \(50 rejected.*no prefix cache'):
        scenario.reveal(result)


def test_a_choice_that_served_no_request_cannot_win(tmp_path):
    """Before: asked for the lowest, the choice that admitted nothing (0 running) won."""
    scenario = _scenario_copy(tmp_path, "gqa-and-fp8", {
        "highest = true": "highest = false",
        'engine = { kv_cache_dtype = "fp8" }': 'engine = { kv_cache_dtype = "fp8", max_model_len = 2048 }'})
    result = run_comparison(scenario, requests=scenario.min_requests)
    best, text = scenario.reveal(result)
    assert best == "Llama 3 8B (GQA), fp16 KV"
    assert "Llama 2 7B, fp8 KV: served no request" in text


def test_a_trace_added_to_a_synthetic_preset_is_refused_and_to_a_trace_preset_taken(tmp_path):
    """Before: the trace's rows silently replaced shared-system-prompt's rate, lengths and shared prompts."""
    from kvscope.app.lab.presets import presets_root

    trace = presets_root() / "traces" / "azure_conv.csv"
    with pytest.raises(ConfigError, match="a trace's rows would replace the arrival rate and token lengths of "
                                          "preset 'shared-system-prompt'"):
        _scenario_copy(tmp_path, "prefix-caching", {
            'preset = "shared-system-prompt"': f'preset = "shared-system-prompt"\ntrace = "{trace}"'})
    replayed = _scenario_copy(tmp_path, "prefix-caching", {
        'preset = "shared-system-prompt"': f'preset = "azure-conv"\ntrace = "{trace}"'})
    assert str(replayed.workload.spec.trace_path) == str(trace)
