"""Typed prompts at the host level: a prompt submitted to the live engine session becomes a request
whose answer streams back in the frames (only what changed), and a prompt the engine cannot take
is refused with the reason."""

from __future__ import annotations

import pytest

from kvscope.app.host.protocol import SUBMIT_PROMPT, decode_frame, encode_frame
from kvscope.app.host.session import EngineSession, RunConfig
from kvscope.app.lab.presets import load_hardware, load_model, load_workload
from kvscope.engine import EngineArgs
from kvscope.engine.config import ConfigError


def test_the_simulated_backend_refuses_a_typed_prompt_and_says_why():
    session = EngineSession()
    session.handle("apply", (RunConfig("simulated", load_model("llama-3-8b"), load_hardware("h100-80gb"), EngineArgs(),
                                       load_workload("chat-text").with_overrides(num_requests=4)), False))
    info = session.take_frame().engine_info
    assert "simulated backend" in info.no_text_reason
    session.handle(SUBMIT_PROMPT, "What is the capital of France?")
    frame = session.take_frame()
    assert "simulated backend" in frame.prompt_refused and frame.submitted_request_id is None
    assert session.engine.requests == {} and not session.engine._pending  # nothing was added


def test_before_any_engine_a_prompt_is_refused():
    session = EngineSession()
    session.handle(SUBMIT_PROMPT, "Hello?")
    assert "apply the settings" in session.take_frame().prompt_refused


@pytest.fixture(scope="module")
def live():
    from kvscope.app.lab.trained_model import TRAINED_MODEL, find_gguf

    try:
        find_gguf()
    except ConfigError as exc:
        pytest.skip(f"the trained model's package is not installed (`make test` installs it): {exc}")
    session = EngineSession()
    args = EngineArgs(kv_cache_memory_bytes=48 * 1024**2, max_model_len=512, max_num_batched_tokens=128,
                      max_num_seqs=128)  # vLLM refuses a token budget below max_num_seqs
    workload = load_workload("chat-text").with_overrides(num_requests=1)
    session.handle("apply", (RunConfig("real", load_model(TRAINED_MODEL.name), load_hardware("this-machine"), args,
                                       workload), False))
    frame = session.take_frame()
    assert frame.error is None, frame.error
    return session, frame.engine_info


def run_until_done(session, limit_steps: int = 400) -> list:
    frames = []
    while session.playing and session.engine.step_count < limit_steps:
        session.advance(0.05)
        frames.append(session.take_frame())
    frames.append(session.take_frame())
    return frames


def test_a_typed_prompt_longer_than_the_context_is_refused_with_the_reason(live):
    session, info = live
    assert info.no_text_reason is None  # the trained model reads and writes text
    session.handle(SUBMIT_PROMPT, "Please read this. " * 200)
    frame = session.take_frame()
    assert frame.submitted_request_id is None
    assert "max_model_len" in frame.prompt_refused and "512" in frame.prompt_refused
    session.handle(SUBMIT_PROMPT, "   ")
    assert session.take_frame().prompt_refused == "the prompt is empty"


def test_a_typed_prompt_streams_its_answer_in_the_frames(live):
    session, _ = live
    session.handle(SUBMIT_PROMPT, "What is the capital of France?")
    frame = session.take_frame()
    typed = frame.submitted_request_id
    assert typed is not None and frame.prompt_refused is None and session.playing
    frames = run_until_done(session)
    texts = [f.texts[typed] for f in frames if typed in f.texts]
    assert texts[0].prompt.endswith("What is the capital of France?<|im_end|>\n<|im_start|>assistant\n")
    assert texts[0].typed and all(t.prompt is None for t in texts[1:])  # the prompt travels once
    outputs = [t.output for t in texts]
    assert all(later.startswith(earlier) for earlier, later in zip(outputs, outputs[1:]))  # it grows
    assert texts[-1].finish_reason == "stop" and "Paris" in texts[-1].output
    assert [t.finish_reason for t in texts[:-1]] == [None] * (len(texts) - 1)
    # the workload's own request (the same question, behind the workload's system prompt) came too
    [other] = {request_id for f in frames for request_id in f.texts} - {typed}
    workload_texts = [f.texts[other] for f in frames if other in f.texts]
    assert "Paris" in workload_texts[-1].output and not workload_texts[-1].typed
    system = "<|im_start|>system\nYou are a helpful assistant for a small community library."
    assert texts[0].prompt.startswith(system) and workload_texts[0].prompt.startswith(system)  # typed ones share it
    assert session.engine.kv.usage == 0.0  # both finished: their blocks are free (cached for reuse)
    # once finished, a request's text is not sent again, and frames of a finished run are idle
    assert not any(typed in f.texts for f in frames[frames.index(next(f for f in frames if typed in f.texts
                                                                         and f.texts[typed].finish_reason)) + 1:])
    decoded = decode_frame(*_pipe(encode_frame(frames[0])))
    assert decoded.texts.keys() == frames[0].texts.keys()


def _pipe(messages):
    first, *buffers = messages
    queue = iter(buffers)
    return first, lambda: next(queue)
