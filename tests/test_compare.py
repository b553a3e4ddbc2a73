"""Comparisons: configurations on the identical workload, stepped on one clock, and `kvscope compare`.

Engine-side cases use small simulated comparisons (fractions of a second); the CLI cases run the
built-in simulated scenarios at reduced request counts. The real-backend claims are in
test_scenarios.py.
"""

from __future__ import annotations

import csv
import io
import json

import pytest

from kvscope.app.lab.compare import (
    KEY_METRICS,
    SIMULATED_QUALITY_NOTE,
    Comparison,
    ComparisonSpec,
    ComparisonWorkload,
    Variant,
    run_comparison,
)
from kvscope.engine.config import ConfigError, EngineArgs
from kvscope.engine.metrics import MetricsCollector
from kvscope.app.lab.presets import load_workload
from kvscope.app.lab.scenarios import load_scenario, scenario_names
from cli_helper import cli

SUMMARY_KEYS = set(MetricsCollector().summary())  # what `kvscope run --json` prints


def chat_workload(requests: int = 40, seed: int = 0, **shaping) -> ComparisonWorkload:
    return ComparisonWorkload(load_workload("chat").with_overrides(num_requests=requests, arrival_rate_per_s=20.0),
                              seed=seed, **shaping)


def kv_dtype_spec(requests: int = 40, seed: int = 0) -> ComparisonSpec:
    """Llama 2 7B and Llama 3 8B (different vocabularies) on a small pool, fp16 vs fp8 KV."""
    small = dict(gpu_memory_utilization=0.3, max_model_len=4096)
    h100 = "h100-80gb"  # 30 % of an 80 GB card: llama-2-7b's weights do not fit 30 % of the default 24 GB L4
    return ComparisonSpec([
        Variant("llama-2-7b fp16", model="llama-2-7b", hardware=h100, engine_args=EngineArgs(kv_cache_dtype="fp16", **small)),
        Variant("llama-3-8b fp16", model="llama-3-8b", hardware=h100, engine_args=EngineArgs(kv_cache_dtype="fp16", **small)),
        Variant("llama-3-8b fp8", model="llama-3-8b", hardware=h100, engine_args=EngineArgs(kv_cache_dtype="fp8", **small)),
    ], chat_workload(requests, seed))


def assert_one_line_error(rc, err, *fragments):
    assert rc == 2, err
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("kvscope: error: "), err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


# -- the identical workload ------------------------------------------------------------------------


def test_every_configuration_gets_the_identical_requests():
    comparison = Comparison(kv_dtype_spec())
    lengths = {label: [len(r.prompt_token_ids) for r in reqs] for label, reqs in comparison.requests_by_label.items()}
    first = lengths["llama-2-7b fp16"]
    assert len(first) == 40 and len(set(first)) > 10
    assert all(v == first for v in lengths.values())
    # token ids fit the smallest vocabulary among the models compared (Llama 2's 32,000)
    assert max(max(r.prompt_token_ids) for r in comparison.requests) < 32000
    result = comparison.run()
    for key in ("completed", "rejected", "prompt_tokens", "output_tokens"):
        assert len({c.metrics[key] for c in result.configurations}) == 1, key
    assert result.workload["prompt_tokens"] == sum(first)


def test_an_output_override_changes_only_the_answer_lengths():
    spec = ComparisonSpec([Variant("as the workload"), Variant("32 each", output_tokens=32)], chat_workload(20))
    comparison = Comparison(spec)
    own, short = comparison.requests_by_label["as the workload"], comparison.requests_by_label["32 each"]
    assert [r.prompt_token_ids for r in own] == [r.prompt_token_ids for r in short]
    assert [r.arrival_time_s for r in own] == [r.arrival_time_s for r in short]
    assert {r.max_tokens for r in short} == {32} and len({r.max_tokens for r in own}) > 5


def test_scaling_and_all_at_once_keep_the_trace_shape():
    trace = load_workload("azure-conv").with_overrides(num_requests=32)
    full = ComparisonWorkload(trace).requests(32000)
    small = ComparisonWorkload(trace, prompt_scale=0.125, output_scale=0.25, max_output_tokens=20,
                               all_at_once=True).requests(32000)
    assert [len(s.prompt_token_ids) for s in small] == [max(1, len(f.prompt_token_ids) // 8) for f in full]
    assert [s.max_tokens for s in small] == [min(20, max(1, f.max_tokens // 4)) for f in full]
    assert {s.arrival_time_s for s in small} == {0.0} and full[-1].arrival_time_s > 0
    assert all(s.prompt_token_ids == f.prompt_token_ids[:len(s.prompt_token_ids)] for s, f in zip(small, full))


def test_same_seed_same_results_and_another_seed_another_workload():
    a, b = run_comparison(kv_dtype_spec(30)), run_comparison(kv_dtype_spec(30))
    assert [c.metrics for c in a.configurations] == [c.metrics for c in b.configurations]
    c = run_comparison(kv_dtype_spec(30), seed=1)
    assert c.workload["prompt_tokens"] != a.workload["prompt_tokens"]
    assert c.workload["seed"] == 1


def test_an_explicit_request_list_or_count():
    spec = kv_dtype_spec(40)
    requests = chat_workload(40).requests(32000)[:12]
    given = run_comparison(spec, requests=requests)
    assert given.workload["num_requests"] == 12
    assert given.workload["prompt_tokens"] == sum(len(r.prompt_token_ids) for r in requests)
    counted = run_comparison(spec, requests=15).baseline.metrics
    assert counted["completed"] + counted["rejected"] == 15


# -- one clock ---------------------------------------------------------------------------------------


def test_step_keeps_the_engines_on_one_clock_and_ends_where_run_ends():
    stepped = Comparison(kv_dtype_spec())
    longest_step = 0.0
    while not stepped.done:
        results = stepped.step()
        assert set(results) == set(stepped.labels)
        for steps in results.values():
            longest_step = max([longest_step] + [s.duration_s for s in steps])
        clocks = [e.clock for e, finished in zip(stepped.engines, stepped._finished) if not finished]
        if clocks:  # the configurations still running are within one step of each other
            assert max(clocks) - min(clocks) <= longest_step + 1e-9
    whole = run_comparison(kv_dtype_spec())
    assert [c.metrics for c in stepped.results().configurations] == [c.metrics for c in whole.configurations]


def test_a_step_by_hand_moves_every_configuration_and_a_played_step_one():
    """Step (Right) moves every column: the configuration furthest behind steps and the others
    catch up to its clock. Playing, each call is one engine step, so a window gets a frame
    between any two (real steps take seconds)."""
    played = Comparison(kv_dtype_spec())
    moved = [label for label, steps in played.step().items() if steps]
    assert len(moved) == 1
    by_hand = Comparison(kv_dtype_spec())
    results = by_hand.step(catch_up=True)
    assert all(results[label] for label in by_hand.labels)
    target = max(e.clock for e in by_hand.engines)
    assert all(e.clock > 0 for e in by_hand.engines) and by_hand.clock <= target


def test_advance_to_brings_every_engine_to_the_clock():
    comparison = Comparison(kv_dtype_spec())
    results = comparison.advance_to(1.0)
    assert all(results[label] for label in comparison.labels)
    for engine, steps in zip(comparison.engines, results.values()):
        assert engine.clock >= 1.0
        assert engine.clock - 1.0 <= steps[-1].duration_s  # stopped at the first step past the clock
        assert steps[0].start_time_s < 1.0
    assert comparison.clock >= 1.0 and not comparison.done
    comparison.advance_to(1e9)
    assert comparison.done
    assert comparison.step() == {label: [] for label in comparison.labels}


# -- results -----------------------------------------------------------------------------------------


def test_results_carry_the_run_metric_names_settings_memory_and_ratios():
    result = run_comparison(kv_dtype_spec())
    base, gqa, fp8 = result.configurations
    assert SUMMARY_KEYS <= set(base.metrics) and "itl_max_s" in base.metrics
    assert base.settings["model"] == "llama-2-7b" and gqa.settings["model"] == "llama-3-8b"
    assert (gqa.settings["kv_cache_dtype"], fp8.settings["kv_cache_dtype"]) == ("fp16", "fp8")
    assert all(base.ratios[k] in (1.0, None) for k in KEY_METRICS)
    assert fp8.ratios["max_concurrent_sequences"] == pytest.approx(
        fp8.memory["max_concurrent_sequences"] / base.memory["max_concurrent_sequences"])
    assert fp8.memory["kv_bytes_per_token"] * 2 == gqa.memory["kv_bytes_per_token"]
    assert gqa.memory["kv_bytes_per_token"] * 4 == base.memory["kv_bytes_per_token"]  # GQA 32 -> 8 KV heads
    assert result.ratio("peak_running", "llama-3-8b fp8", "llama-3-8b fp16") == fp8.metrics["peak_running"] / gqa.metrics["peak_running"]
    for config in result.configurations:  # the simulated backend holds no values: nothing to measure
        assert config.kv_quality_cost is None and config.kv_quality_note == SIMULATED_QUALITY_NOTE


def test_to_dict_and_to_csv_hold_one_entry_per_configuration():
    result = run_comparison(kv_dtype_spec(20))
    data = json.loads(json.dumps(result.to_dict()))
    assert data["baseline"] == "llama-2-7b fp16"
    assert [c["label"] for c in data["configurations"]] == result.labels
    for entry in data["configurations"]:
        assert SUMMARY_KEYS <= set(entry)
        assert {"settings", "memory", "ratios", "kv_quality_cost", "kv_quality_note"} <= set(entry)
    rows = list(csv.DictReader(io.StringIO(result.to_csv())))
    assert [r["label"] for r in rows] == result.labels
    assert float(rows[2]["peak_running"]) == result.configurations[2].metrics["peak_running"]
    assert rows[1]["kv_cache_dtype"] == "fp16" and "ratio_peak_running" in rows[0]


@pytest.mark.parametrize("variants, fragment", [
    ([Variant("only one")], "2 to 4 configurations"),
    ([Variant(str(i)) for i in range(5)], "2 to 4 configurations"),
    ([Variant("same"), Variant("same")], "labels must differ"),
])
def test_a_comparison_needs_two_to_four_distinct_configurations(variants, fragment):
    with pytest.raises(ConfigError, match=fragment):
        ComparisonSpec(variants, chat_workload())


@pytest.mark.parametrize("kwargs, fragment", [
    (dict(label=" "), "non-empty label"),
    (dict(label="x", backend="quantum"), "backend must be one of"),
    (dict(label="x", backend="real", hardware="h100-80gb"), "runs on this machine"),
    (dict(label="x", output_tokens=0), "output_tokens"),
])
def test_a_variant_refuses_settings_that_cannot_work(kwargs, fragment):
    with pytest.raises(ConfigError, match=fragment):
        Variant(**kwargs)


def test_workload_shaping_is_validated():
    with pytest.raises(ConfigError, match="prompt_scale"):
        chat_workload(prompt_scale=2.0)
    with pytest.raises(ConfigError, match="max_output_tokens"):
        chat_workload(max_output_tokens=0)


# -- kvscope scenarios / kvscope compare ---------------------------------------------------------------


def test_scenarios_lists_every_scenario_in_order(capsys):
    rc, out, err = cli(capsys, "scenarios")
    assert rc == 0, err
    positions = [out.index(f" {name} ") for name in scenario_names()]
    assert positions == sorted(positions) and len(positions) >= 9
    for name in scenario_names():
        assert load_scenario(name).question in out
    rc, out, _ = cli(capsys, "scenarios", "--json")
    entries = json.loads(out)
    assert [e["name"] for e in entries] == scenario_names()
    assert all(e["question"] and e["configurations"] and e["answer"]["kind"] for e in entries)


def test_compare_prints_the_question_the_table_and_the_answer(capsys):
    rc, out, err = cli(capsys, "compare", "--scenario", "prefix-caching", "--requests", 50)
    assert rc == 0, err
    scenario = load_scenario("prefix-caching")
    assert scenario.title in out and scenario.question in out
    assert out.index("Question:") < out.index("prefix cache hit rate") < out.index("Answer:")
    table_line = next(line for line in out.splitlines() if line.startswith("output throughput"))
    assert table_line.count("tokens/s") == 2 and "x)" in table_line  # a unit in every cell, a ratio to the baseline
    answer = next(line for line in out.splitlines() if line.startswith("Answer:"))
    assert " %" in answer and "prefix cache hit rate" in answer
    assert "engine clock" in err  # the progress line goes to stderr


def test_compare_json_holds_one_object_per_configuration(capsys, tmp_path):
    target = tmp_path / "out.json"
    rc, out, err = cli(capsys, "compare", "--scenario", "qwen-h100-nvl", "--requests", 10, "--json", target, "--quiet")
    assert rc == 0 and err == ""
    report = json.loads(target.read_text())
    assert report["scenario"]["name"] == "qwen-h100-nvl"
    assert [c["label"] for c in report["configurations"]] == ["fp8 KV (the deployment)", "bf16 KV",
                                                              "fp8 KV, what vLLM allocates"]
    for config in report["configurations"]:
        assert SUMMARY_KEYS <= set(config)
        assert config["completed"] == 10
        assert {"kv_cache_dtype", "max_model_len", "max_num_seqs", "scheduling", "allocation"} <= set(config["settings"])
    assert report["answer"]["value"] == pytest.approx(2.70, abs=0.005)
    assert report["answer"]["text"] == "2.70 sequences"


def test_compare_json_to_stdout_is_pure_json(capsys):
    rc, out, err = cli(capsys, "compare", "--scenario", "qwen-h100-nvl", "--requests", 10, "--json", "-")
    assert rc == 0
    assert json.loads(out)["answer"]["unit"] == "sequences"
    assert "Question:" in err  # the readable report moves to stderr


def test_compare_csv(capsys, tmp_path):
    target = tmp_path / "out.csv"
    rc, _, err = cli(capsys, "compare", "--scenario", "chunked-prefill", "--requests", 40, "--csv", target, "--quiet")
    assert rc == 0, err
    rows = list(csv.DictReader(target.open()))
    assert [r["label"] for r in rows] == load_scenario("chunked-prefill").labels
    assert {"enable_chunked_prefill", "itl_max_s", "throughput_tokens_per_s", "ratio_itl_max_s"} <= set(rows[0])
    assert float(rows[0]["itl_max_s"]) > float(rows[1]["itl_max_s"])


def test_unknown_scenario_lists_the_known_ones(capsys):
    rc, out, err = cli(capsys, "compare", "--scenario", "nope")
    line = assert_one_line_error(rc, err, "unknown scenario 'nope'", "known:")
    assert all(name in line for name in scenario_names())
    assert out == ""


@pytest.mark.parametrize("make_target, fragment", [
    (lambda tmp: tmp / "missing" / "out.json", "folder does not exist"),
    (lambda tmp: tmp, "is a folder"),
])
def test_an_unwritable_output_fails_before_the_run(capsys, tmp_path, make_target, fragment):
    rc, out, err = cli(capsys, "compare", "--scenario", "prefix-caching", "--json", make_target(tmp_path))
    assert_one_line_error(rc, err, "--json", fragment)
    assert out == ""


def test_too_few_requests_for_the_claim_is_refused(capsys):
    rc, out, err = cli(capsys, "compare", "--scenario", "gqa-and-fp8", "--requests", 10)
    assert_one_line_error(rc, err, "gqa-and-fp8", "at least 300 requests")


def test_an_invalid_scenario_file_names_the_field(capsys, tmp_path):
    path = tmp_path / "bad.toml"
    text = load_scenario("prefix-caching").path
    path.write_text(open(text).read().replace("enable_prefix_caching = false", "enable_prefix_caching = \"no\""))
    rc, _, err = cli(capsys, "compare", "--scenario", path)
    assert_one_line_error(rc, err, str(path), "configs[1] (prefix caching off).engine.enable_prefix_caching",
                          "true or false")


def test_a_compare_table_counts_one_thing_in_the_singular():
    from kvscope.app.cli.compare import _count

    assert _count(1, "preemptions") == "1 preemption" and _count(2, "preemptions") == "2 preemptions"
    assert _count(0, "requests") == "0 requests" and _count(1_000, "steps") == "1,000 steps"
    assert _count(None, "steps") == "-"


def test_the_compare_table_shows_the_kv_pool_even_when_every_configuration_has_the_same(capsys):
    from cli_helper import cli

    rc, out, err = cli(capsys, "compare", "--scenario", "prefix-caching", "--requests", "50", "--quiet")
    assert rc == 0, err
    pool = next(line for line in out.splitlines() if line.startswith("KV pool"))
    assert pool.count("blocks") == 2  # one cell per configuration, the budget both share
