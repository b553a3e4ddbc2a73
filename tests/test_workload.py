"""Workloads: synthetic generation is deterministic and shaped as declared; traces parse, and a
bad row is reported with its line number."""

import numpy as np
import pytest

from kvscope.engine.config import ConfigError
from kvscope.app.lab.presets import load_workload, load_workload_file, read_toml
from kvscope.app.lab.workload import generate_requests, read_trace


def test_azure_trace_reads_in_full_with_relative_arrivals():
    rows = read_trace(load_workload("azure-conv").trace_path)
    assert len(rows) == 19366
    assert rows[0].arrival_time_s == 0.0
    assert rows[0].prompt_tokens == 374 and rows[0].output_tokens == 44
    assert 3400 < rows[-1].arrival_time_s < 3600  # one hour of traffic
    assert np.median([r.prompt_tokens for r in rows]) == 1020


def test_trace_replay_keeps_lengths_and_speedup_compresses_time():
    spec = load_workload("azure-conv").with_overrides(num_requests=50)
    normal = list(generate_requests(spec, 32000))
    fast = list(generate_requests(spec.with_overrides(trace_speedup=10.0), 32000))
    assert len(normal) == 50
    assert [len(r.prompt_token_ids) for r in normal][:4] == [374, 396, 879, 91]
    assert [r.max_tokens for r in normal][:4] == [44, 109, 55, 16]
    assert fast[-1].arrival_time_s == pytest.approx(normal[-1].arrival_time_s / 10)


@pytest.mark.parametrize("row,line", [("2023-11-16 18:15:50.0,abc,10", 3), ("2023-11-16 18:15:50.0,12", 3),
                                      ("not-a-time,12,10", 3), ("2023-11-16 18:15:50.0,0,10", 3)])
def test_a_bad_trace_row_names_its_line(tmp_path, row, line):
    path = tmp_path / "trace.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n" + row + "\n")
    with pytest.raises(ConfigError, match=f"line {line}"):
        read_trace(path)


def test_trace_without_the_needed_columns_says_which(tmp_path):
    path = tmp_path / "trace.csv"
    path.write_text("time,in,out\n1,2,3\n")
    with pytest.raises(ConfigError, match="no arrival column"):
        read_trace(path)


def test_synthetic_workload_is_deterministic_per_seed_and_follows_its_rate():
    spec = load_workload("chat").with_overrides(num_requests=400)
    a = list(generate_requests(spec, 32000, seed=1))
    b = list(generate_requests(spec, 32000, seed=1))
    c = list(generate_requests(spec, 32000, seed=2))
    assert [r.prompt_token_ids for r in a] == [r.prompt_token_ids for r in b]
    assert [r.max_tokens for r in a] != [r.max_tokens for r in c]
    rate = len(a) / a[-1].arrival_time_s
    assert 3.0 < rate < 5.0  # the preset's 4 requests per second
    prompts = [len(r.prompt_token_ids) for r in a]
    assert 800 < np.median(prompts) < 1300


def test_shared_prefix_share_and_content():
    spec = load_workload("shared-system-prompt").with_overrides(num_requests=500)
    reqs = list(generate_requests(spec, 32000, seed=0))
    with_prefix = [r for r in reqs if r.shared_prefix_tokens]
    assert 0.85 < len(with_prefix) / len(reqs) < 0.95
    starts = {tuple(r.prompt_token_ids[:1024]) for r in with_prefix}
    assert len(starts) == 2  # two distinct system prompts


def test_uniform_short_is_uniform():
    reqs = list(generate_requests(load_workload("uniform-short").with_overrides(num_requests=20), 32000))
    assert {len(r.prompt_token_ids) for r in reqs} == {128}
    assert {r.max_tokens for r in reqs} == {32}


def test_workload_file_validation(tmp_path):
    bad = tmp_path / "w.toml"
    bad.write_text('name = "x"\nprompt_tokens = { dist = "lognormal", median = -1, sigma = 1 }\n')
    with pytest.raises(ConfigError, match="median > 0"):
        load_workload_file(bad)
    bad.write_text('name = "x"\nnum_requests = 0\n')
    with pytest.raises(ConfigError, match="num_requests must be at least 1"):
        load_workload_file(bad)
    bad.write_text('name = "x"\nprompt_tokns = 5\n')
    with pytest.raises(ConfigError, match="unknown field"):
        load_workload_file(bad)
    bad.write_text('name = "x\n')
    with pytest.raises(ConfigError, match="malformed TOML"):
        read_toml(bad, "w")
