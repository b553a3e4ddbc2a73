"""Text through the engine: the chat workload as data (validated on load), stop tokens that end a
request and free its blocks, answers decoded as they stream, and the trained model answering the
workload's first question through kvscope run."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kvscope.app.lab.chat_workload import hashed_token_ids, messages_for, turn_order
from kvscope.app.lab.presets import load_workload, load_workload_file
from kvscope.app.lab.workload import generate_requests, workload_from_dict
from kvscope.engine import Engine, EngineArgs
from kvscope.engine.config import ConfigError

CHAT = "chat-text"


# -- the workload as data --------------------------------------------------------------------------------
def test_the_chat_workload_is_real_conversations_behind_one_system_prompt():
    spec = load_workload(CHAT)
    script = spec.chat
    assert 24 <= len(script.conversations) <= 40
    assert {len(c) for c in script.conversations} == {1, 2, 3, 4, 5}
    assert spec.num_requests == script.num_turns  # every turn once
    assert script.conversations[0][0].user == "What is the capital of France?"
    users = [turn.user for conversation in script.conversations for turn in conversation]
    assert len(set(users)) == len(users)  # written, not repeated
    assert max(map(len, users)) > 8 * min(map(len, users))  # short questions and long pasted text


def test_turns_arrive_in_conversation_order_with_a_few_conversations_open_at_once():
    script = load_workload(CHAT).chat
    order = turn_order(script)
    assert sorted(order) == [(c, t) for c, conv in enumerate(script.conversations) for t in range(len(conv))]
    for conversation in range(len(script.conversations)):
        turns = [t for c, t in order if c == conversation]
        assert turns == sorted(turns)
    assert order[:script.concurrent_conversations] == [(c, 0) for c in range(script.concurrent_conversations)]


def test_a_later_turn_resends_the_conversation_so_far():
    spec = load_workload(CHAT)
    order = turn_order(spec.chat)
    requests = list(generate_requests(spec, 49152))
    by_turn = dict(zip(order, requests))
    for (conversation, turn), request in by_turn.items():
        if turn:
            earlier = by_turn[(conversation, turn - 1)].prompt_token_ids
            assert request.prompt_token_ids[:len(earlier)] == earlier
    system = hashed_token_ids(messages_for(spec.chat, 0, 0)[:1], 49152)
    assert all(r.prompt_token_ids[:len(system)] == system for r in requests)  # the shared system prompt
    assert all(r.stop_token_ids == frozenset() and r.prompt_text is None for r in requests)  # no tokenizer: ids only


def test_more_requests_than_turns_start_the_conversations_again():
    spec = load_workload(CHAT)
    n = spec.num_requests
    requests = list(generate_requests(spec.with_overrides(num_requests=n + 3), 49152, seed=4))
    assert [r.prompt_token_ids for r in requests[n:]] == [r.prompt_token_ids for r in requests[:3]]
    arrivals = [r.arrival_time_s for r in requests]
    assert arrivals == sorted(arrivals) and arrivals[0] == 0.0


def _chat_table(**conversation_changes):
    conversation = {"turns": [{"user": "Hi", "assistant": "Hello!"}, {"user": "How are you?"}]}
    conversation.update(conversation_changes)
    return {"name": "x", "source": "test", "description": "test",
            "chat": {"system_prompt": "Be brief.", "conversations": [conversation]}}


@pytest.mark.parametrize("change,message", [
    ({"turns": [{"user": "Hi", "assistant": "Hello!"}]}, "the last turn's answer is the model's"),
    ({"turns": [{"user": "Hi"}, {"user": "And?"}]}, "needs the assistant's answer"),
    ({"turns": [{"user": "Hi", "robot": "beep"}]}, "expected { user"),
    ({"turns": []}, "1 to 100"),
    ({"turns": [{"user": ""}]}, "user"),
])
def test_a_bad_conversation_is_one_error_naming_where(change, message):
    with pytest.raises(ConfigError) as raised:
        workload_from_dict(_chat_table(**change), "workload file x.toml")
    text = str(raised.value)
    assert message in text and "conversations[0]" in text and text.startswith("workload file x.toml: chat")


def test_a_chat_workload_file_is_checked_on_load(tmp_path):
    good = tmp_path / "mine.toml"
    good.write_text('name = "mine"\n[chat]\nsystem_prompt = "Be brief."\n'
                    '[[chat.conversations]]\nturns = [{ user = "Why is the sky blue?" }]\n')
    assert load_workload_file(good).chat.num_turns == 1
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "bad"\ntrace = "t.csv"\n[chat]\nsystem_prompt = "x"\n'
                   '[[chat.conversations]]\nturns = [{ user = "Hi" }]\n')
    with pytest.raises(ConfigError, match="a trace or sends chat text, not both"):
        load_workload_file(bad)
    with pytest.raises(ConfigError, match="unknown field.*speaker"):
        workload_from_dict({**_chat_table(), "chat": {"system_prompt": "x", "speaker": 1, "conversations": []}}, "w")


# -- stop tokens end a request and free its blocks --------------------------------------------------------
@pytest.fixture(scope="module")
def tiny():
    from kvscope.app.lab.real_backend import load_for_real_backend

    return load_for_real_backend("tiny-llama")


def _tiny_engine(tiny):
    from kvscope.app.lab.real_backend import create_real_engine

    return create_real_engine(tiny, EngineArgs(kv_cache_memory_bytes=8 * 1024**2, max_model_len=512,
                                               enable_prefix_caching=False), record_outputs=True)


def test_a_stop_token_ends_the_request_and_frees_its_blocks(tiny):
    prompt = list(range(5, 45))
    free = _tiny_engine(tiny)
    first = free.add_request(prompt, 24)
    free.run()
    output = free.outputs[first]  # greedy: the same tokens come again
    assert len(output) == 24
    stop = output[5]
    ends_at = output.index(stop) + 1

    engine = _tiny_engine(tiny)
    request = engine.add_request(prompt, 24, stop_token_ids={stop}, prompt_text="forty tokens")
    seen_holding_blocks = False
    while engine.step() is not None:
        held = engine.requests.get(request)
        seen_holding_blocks |= held is not None and len(held.block_ids) > 0
    assert seen_holding_blocks
    assert engine.outputs[request] == output[:ends_at]  # ended on the stop token, which it keeps
    finished = engine.finished_text_requests[0]
    assert finished.finish_reason == "stop" and finished.block_ids == []
    assert engine.kv.num_free_blocks == engine.kv.num_blocks and engine.kv.usage == 0.0
    assert engine.summary()["output_tokens"] == ends_at
    assert free.finished_text_requests == []  # no prompt text: nothing kept for a reader


def test_without_stop_tokens_the_length_is_exactly_max_tokens():
    from kvscope.app.lab.presets import load_hardware, load_model

    engine = Engine(load_model("llama-3-8b"), load_hardware("h100-80gb"), EngineArgs())
    engine.add_workload(generate_requests(load_workload(CHAT).with_overrides(num_requests=20), 128256))
    summary = engine.run()
    assert summary["completed"] == 20 and summary["output_tokens"] == 20 * 192
    assert summary["prefix_cache_hit_rate"] > 0.3  # hashed words keep the shared prefixes shared


# -- the trained model: text in, text out -----------------------------------------------------------------
@pytest.fixture(scope="module")
def trained():
    from kvscope.app.lab.real_backend import load_for_real_backend
    from kvscope.app.lab.trained_model import TRAINED_MODEL, find_gguf

    try:
        find_gguf()
    except ConfigError as exc:
        pytest.skip(f"the trained model's package is not installed (`make test` installs it): {exc}")
    return load_for_real_backend(TRAINED_MODEL.name)


def test_the_answer_streams_as_text_equal_to_decoding_it_whole(trained):
    from kvscope.app.lab.text_tokenizer import chat_tokenizer_for

    chat = chat_tokenizer_for(trained)
    assert 2 in chat.stop_token_ids  # <|im_end|>, which ends an assistant turn
    text = "Paged KV: naïve résumé, 東京 🚀 — 16 tokens a block."
    ids = chat.encode(text)
    stream = chat.stream()
    pieces = [stream.feed(ids[i:i + 3]) for i in range(0, len(ids), 3)]
    assert "".join(pieces) == stream.text == chat.decode(ids) == text
    assert stream.num_tokens == len(ids)
    ids, rendered = chat.chat_prompt([{"role": "user", "content": "Hi"}])
    assert rendered.endswith("<|im_start|>assistant\n") and chat.decode(ids).endswith("Hi\nassistant\n")


def test_the_capital_of_france_is_paris_through_kvscope_run(tmp_path, trained):
    out = tmp_path / "run.json"
    completed = subprocess.run(
        [sys.executable, "-m", "kvscope.app", "run", "--backend", "real", "--workload", CHAT, "--requests", "1",
         "--max-model-len", "1024", "--kv-cache-memory-bytes", "64e6", "--json", str(out), "--quiet"],
        capture_output=True, text=True)
    assert completed.returncode == 0, completed.stderr
    assert "What is the capital of France?" in completed.stdout and "Paris" in completed.stdout  # the summary shows it
    report = json.loads(out.read_text())
    [answer] = report["requests"]
    assert "What is the capital of France?" in answer["prompt"] and "<|im_start|>system" in answer["prompt"]
    assert "Paris" in answer["output"]
    assert answer["finish_reason"] == "stop" and answer["output_tokens"] < 192  # the model ended it
    assert report["model"] == "smollm2-135m-instruct"


# -- the window's default run --------------------------------------------------------------------------------
def test_the_window_starts_on_the_trained_model_answering_chat_text(monkeypatch):
    from types import SimpleNamespace

    from kvscope.app.cli import gui
    from kvscope.app.gui.run_settings import build_run_config

    args = SimpleNamespace(backend=None, model=None, hardware=None, workload=None, model_path=None)
    monkeypatch.setattr(gui, "trained_model_available", lambda: True)
    values = gui.initial_values(args)
    assert (values["backend"], values["model"], values["workload"]) == ("real", "smollm2-135m-instruct", CHAT)
    config = build_run_config(values)  # the settings form accepts them as they are
    assert config.engine_args.kv_cache_memory_bytes == 40 * 1024**2 and config.engine_args.max_model_len == 768
    assert config.workload.num_requests == 720 and config.workload.arrival_rate_per_s == 4.0
    monkeypatch.setattr(gui, "trained_model_available", lambda: False)  # the package is not installed
    values = gui.initial_values(args)
    assert (values["model"], values["workload"]) == ("tiny-llama", "azure-conv")
    args.model = "smollm2-135m-instruct"
    args.workload = "chat"
    values = gui.initial_values(args)  # named on the command line: its sizing, the workload asked for
    assert values["workload"] == "chat" and values["max_num_batched_tokens"] == 48
