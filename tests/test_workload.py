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


def test_a_trace_is_read_line_by_line_in_any_line_ending_and_binary_data_is_refused_at_once(tmp_path, monkeypatch):
    import kvscope.app.lab.workload as workload

    header = b"TIMESTAMP,ContextTokens,GeneratedTokens"
    for ending in (b"\n", b"\r\n", b"\r"):
        path = tmp_path / "t.csv"
        path.write_bytes(b"\xef\xbb\xbf" + ending.join([header, b"0,10,1", b"1.5,20,2"]) + ending)
        assert [(r.arrival_time_s, r.prompt_tokens) for r in read_trace(path)] == [(0.0, 10), (1.5, 20)]
    path.write_bytes(header + b"\n0,10,1\n" + b"\0" * 4096)
    with pytest.raises(ConfigError, match="line 3: binary data"):
        read_trace(path)
    path.write_bytes(header + b"\n0,10,1\n\xff\xfe,1,1\n")
    with pytest.raises(ConfigError, match="line 3: not UTF-8 text"):
        read_trace(path)
    monkeypatch.setattr(workload, "MAX_REQUESTS", 3)  # counted before any row is parsed
    path.write_bytes(header + b"\n" + b"0,1,1\n" * 5)
    with pytest.raises(ConfigError, match="more than 3 rows"):
        read_trace(path)
    assert len(read_trace(path, limit=2)) == 2


def test_a_chat_script_that_would_resend_too_much_text_is_refused(tmp_path):
    from kvscope.app.lab.chat_workload import MAX_SENT_CHARS, chat_script_from_dict

    turn = "word " * 9_000  # 45,000 characters
    turns = [{"user": turn, "assistant": turn} for _ in range(99)] + [{"user": turn}]
    with pytest.raises(ConfigError, match="each turn resends the conversation so far"):
        chat_script_from_dict({"system_prompt": "s", "conversations": [{"turns": turns}]}, "chat")
    small = chat_script_from_dict({"system_prompt": "s", "conversations": [{"turns": turns[:3] + [turns[-1]]}]}, "chat")
    assert len(small.conversations[0]) == 4 and MAX_SENT_CHARS > 4 * 8 * len(turn)


def test_requests_past_max_model_len_keep_their_lengths_and_make_no_tokens():
    import dataclasses

    from kvscope.app.lab.workload import LengthDist, PromptOfLength

    spec = dataclasses.replace(load_workload("uniform-short"), num_requests=50, shared_prefix_fraction=0.5,
                               shared_prefix_tokens=4_000, num_shared_prefixes=2,
                               prompt_tokens=LengthDist("uniform", min=1, max=8_000))
    every = list(generate_requests(spec, 32000, seed=3))
    capped = list(generate_requests(spec, 32000, seed=3, longest_request=6_000))
    for full, short in zip(every, capped):
        assert len(short.prompt_token_ids) == len(full.prompt_token_ids)
        too_long = len(full.prompt_token_ids) + full.max_tokens > 6_000
        assert isinstance(short.prompt_token_ids, PromptOfLength) == too_long
    assert any(isinstance(s.prompt_token_ids, PromptOfLength) for s in capped)
    assert not any(isinstance(s.prompt_token_ids, PromptOfLength) for s in every)
