"""Figures the command line prints, checked against what their labels say (an audit of the numbers)."""

from kvscope.engine import Engine, EngineArgs
from kvscope.app.lab.presets import load_hardware, load_model

MODEL = load_model("llama-3-8b")
H100 = load_hardware("h100-80gb")


def test_a_run_whose_requests_are_all_rejected_lasts_from_first_to_last_arrival():
    """compare printed "engine clock 6.59 s" on its progress line and "duration (engine clock) 0 s"
    in its table when every request was rejected: the run spans its arrivals, rejected or not."""
    e = Engine(MODEL, H100, EngineArgs(max_model_len=64))
    for arrival in (1.0, 2.5, 4.0):
        e.add_request(list(range(100)), max_tokens=5, arrival_time=arrival)
    summary = e.run(max_steps=100)
    assert summary["rejected"] == 3 and summary["completed"] == 0
    assert summary["duration_s"] == 3.0
    assert e.clock - 1.0 == summary["duration_s"]


def test_a_rejection_after_the_last_finish_still_counts_in_the_duration():
    e = Engine(MODEL, H100, EngineArgs(max_model_len=256))
    e.add_request(list(range(10)), max_tokens=2, arrival_time=0.0)
    e.add_request(list(range(300)), max_tokens=5, arrival_time=50.0)  # rejected, long after the first ended
    summary = e.run(max_steps=100)
    assert summary["completed"] == 1 and summary["rejected"] == 1
    assert summary["duration_s"] == 50.0
    assert summary["throughput_tokens_per_s"] == 2 / 50.0


def test_compare_groups_the_thousands_of_max_concurrent_as_math_does():
    """compare printed "1704.75 sequences" where math printed "1,704.75" for the same pool."""
    from kvscope.app.cli.compare import MAX_CONCURRENT, MEMORY_ROWS
    cell = dict(MEMORY_ROWS)[MAX_CONCURRENT]
    assert cell({"max_concurrent_sequences": 1704.75}) == "1,704.75 sequences"


def test_one_of_a_thing_is_said_in_the_singular(tmp_path, capsys):
    """export said "1 requests completed, 1 preemptions"; compare's workload line "1 requests";
    run's answers "Answers: 1 requests": one counting helper says them all."""
    from kvscope.app.cli.main import main
    from kvscope.app.cli.output import counted
    assert (counted(1, "request"), counted(0, "request"), counted(1_200, "step")) == \
        ("1 request", "0 requests", "1,200 steps")
    recording = tmp_path / "one.kvrec"
    assert main(["run", "--requests", "1", "--quiet", "--record", str(recording)]) == 0
    capsys.readouterr()
    assert main(["export", str(recording)]) == 0
    text = capsys.readouterr().out
    assert "(1 request)" in text and "1 request completed, 0 preemptions" in text


def test_a_p99_of_fewer_than_100_requests_says_how_many_it_rests_on(capsys):
    """run printed "TTFT p50 / p99  109.0 ms / 109.0 ms" for one request, a p99 that is its only value."""
    from kvscope.app.cli.main import main
    assert main(["run", "--requests", "20", "--quiet"]) == 0
    rows = {line[:33].strip(): line[33:] for line in capsys.readouterr().out.splitlines()}
    assert rows["TTFT p50 / p99"].endswith("(of 20 requests: a p99 of under 100 is near their largest)")
    assert rows["time per output token p50 / p99"].endswith("(of 20 requests)")
    assert main(["run", "--requests", "1", "--workload", "chat", "--quiet", "--json", "-"]) == 0
    import json
    report = json.loads(capsys.readouterr().out)
    assert report["tpot_requests"] == 1 and report["completed"] == 1
    assert main(["run", "--requests", "100", "--quiet"]) == 0
    assert "(of " not in capsys.readouterr().out


def test_compare_csv_keeps_the_answer_length_setting_apart_from_the_tokens_generated():
    """The CSV's one output_tokens column, among the settings, held the run's total (30,720 tokens)
    and the setting (32 tokens each answer in benchmark-trap) was lost."""
    import csv
    import io
    from kvscope.app.lab.compare import Comparison, ComparisonSpec, ComparisonWorkload, Variant
    from kvscope.app.lab.presets import load_workload
    workload = ComparisonWorkload(load_workload("chat").with_overrides(num_requests=5, arrival_rate_per_s=20.0))
    result = Comparison(ComparisonSpec([Variant("as the workload"), Variant("4 each", output_tokens=4)],
                                       workload)).run()
    rows = list(csv.DictReader(io.StringIO(result.to_csv())))
    assert [r["setting_output_tokens"] for r in rows] == ["", "4"]
    assert rows[1]["output_tokens"] == "20" == str(result.configurations[1].metrics["output_tokens"])


def test_a_share_short_of_all_or_above_none_does_not_round_to_all_or_none():
    """compare printed "KV cache usage peak 100.0 %" for a pool with 2 of 13,192 blocks free (0.99985),
    beside a configuration whose pool was full; a hit rate of 0.04 % read "0.0 %", as none."""
    from kvscope.engine.units import format_percent
    assert format_percent(0.99985) == "over 99.9 %" and format_percent(1.0) == "100.0 %"
    assert format_percent(0.0004) == "under 0.1 %" and format_percent(0.0) == "0.0 %"
    assert format_percent(0.0005) == "0.1 %" and format_percent(0.5) == "50.0 %"


def test_verify_and_a_scenario_answer_say_shares_the_same_way():
    """verify said "tokens equal to generate()'s 100.0 %" for 2,999 of 3,000 tokens, and a scenario's
    answer text rounded a share on its own."""
    from types import SimpleNamespace
    from kvscope.app.cli.verify import _parity_table
    from kvscope.app.lab.scenarios import format_quantity
    assert format_quantity("peak_kv_usage", 0.99985) == "over 99.9 %"
    result = SimpleNamespace(weights="fp32", kv_cache_dtype="fp16", exact=False, identical_sequences=3, sequences=4,
                             token_agreement=2_999 / 3_000, top1_agreement=0.9996, max_logit_diff=0.01, preemptions=0,
                             prefix_hit_tokens=0, chunked_prefill_chunks=0)
    text = _parity_table(result)
    assert "tokens equal to generate()'s         over 99.9 %" in text and "100.0 %" not in text


def test_attach_says_blocks_whole_and_one_chain_and_engine_in_the_singular(server, publisher, capsys):
    """attach printed "num_gpu_blocks predicted / observed 5,461.00 / 12.00 blocks", "5 in 1 chains",
    "1 engine(s)" and "error +0.0%" (every other share has its space before %)."""
    from attach_fixtures import play_script
    from kvscope.app.cli.main import main
    http, pub = server(), publisher()
    play_script(pub)
    assert main(["attach", http.url, "--kv-events", pub.endpoint, "--replay", pub.replay_endpoint,
                 "--duration", "2", "--model", "tiny-llama"]) == 0
    rows = {line[:42].strip(): line[42:] for line in capsys.readouterr().out.splitlines() if len(line) > 42}
    # tiny-llama's float32 served in bf16 on the GPU the server is taken for: 10,922 blocks (5,461 in fp32)
    assert rows["num_gpu_blocks predicted / observed"].startswith("10,922 / 12 blocks  (")
    assert rows["cache"] == "12 blocks x 32 tokens per engine, 1 engine"
    assert rows["blocks cached at the end"] == "5 in 1 chain"
    assert ", error +0.0 %  (" in rows["max_concurrency predicted / observed"]


def test_math_says_a_token_held_whole_on_every_device_when_the_per_sequence_figure_counts_every_copy(capsys):
    """math for DeepSeek-V3 on 8 GPUs printed "KV per token 68.62 KiB" and "KV per sequence 85.78 GiB at
    163,840 tokens" (8 copies of the latent): 68.62 KiB x 163,840 is 10.72 GiB, and nothing said why."""
    import json
    from kvscope.app.cli.main import main
    from kvscope.engine.units import format_bytes
    assert main(["math", "--model", "deepseek-v3", "--hardware", "8x-h100-80gb", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    all_copies = plan["kv_bytes_per_token_per_device"] * 8
    assert plan["kv_bytes_per_sequence"] == all_copies * plan["max_model_len"]
    assert main(["math", "--model", "deepseek-v3", "--hardware", "8x-h100-80gb"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("KV per token"))
    assert row.endswith(f"each of the 8 devices stores {format_bytes(plan['kv_bytes_per_token'])} of it "
                        f"(replicated, not split): {format_bytes(all_copies)} a token in all")
    assert main(["math", "--model", "llama-3-70b", "--hardware", "8x-h100-80gb"]) == 0  # split: nothing to add
    assert "replicated" not in capsys.readouterr().out


def test_run_says_its_time_weighted_means_are_over_the_steps_not_the_whole_run(capsys):
    """run printed "KV cache usage peak / mean 29.0 % / 6.8 %" for a run of 532 s whose steps took 213 s:
    the mean is over the steps (over the run it is 2.7 %), and the row did not say so."""
    import json
    from kvscope.app.cli.main import main
    from kvscope.engine.units import format_seconds
    args = ["run", "--requests", "20", "--arrival-rate", "0.05", "--quiet"]
    assert main(args + ["--json", "-"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["busy_time_s"] < 0.5 * s["duration_s"]
    assert main(args) == 0
    rows = {line[:33].strip(): line[33:] for line in capsys.readouterr().out.splitlines()}
    span = f"the mean over the {format_seconds(s['busy_time_s'])} of steps, not the {format_seconds(s['duration_s'])} run"
    assert rows["KV cache usage peak / mean"].endswith(f"({span})")
    assert rows["fragmentation (mean)"].endswith(span)
