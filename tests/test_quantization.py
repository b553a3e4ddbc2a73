"""Weights quantised on load by bitsandbytes (int8, nf4) on a CPU: through kvscope's real engine,
against transformers' generate() with the same quantised weights, in the memory plan, and the
one-line errors where bitsandbytes is missing or cannot run."""

from __future__ import annotations

import sys

import pytest
import torch

from kvscope.app.lab.compare import Comparison, ComparisonSpec, ComparisonWorkload, Variant
from kvscope.app.lab.models import loader as model_loader
from kvscope.app.lab.models.loader import load_model_directory
from kvscope.app.lab.presets import load_workload
from kvscope.app.lab.real_backend import create_real_engine
from kvscope.app.lab.verify.baselines import attention_implementation
from kvscope.app.lab.verify.parity import run_parity
from kvscope.app.lab.verify.tiny_model import build_random_model
from kvscope.engine.config import ConfigError, EngineArgs, ModelConfig
from kvscope.engine.memory_math import BNB_NF4_BLOCK, bitsandbytes_weights_bytes
from kvscope.engine.units import MiB
from tests.cli_helper import cli


SHAPE = ModelConfig(name="test-quant", model_type="llama", num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=16, hidden_size=64, intermediate_size=128, vocab_size=512,
                    max_position_embeddings=1024, weight_dtype="fp32")


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Models this small gain nothing from a second thread, and lose much when other processes
    share the cores (the threads wait on each other at every op)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_random_model(SHAPE, tmp_path_factory.mktemp("quant") / "llama")


@pytest.fixture(scope="module")
def loaded(model_dir):
    return {q: load_model_directory(model_dir, device="cpu", quantization=q, random_weights=True)
            for q in (None, "int8", "nf4")}


def _linear_kinds(loaded_model) -> set:
    return {type(m).__name__ for m in loaded_model.hf_model.model.layers.modules() if "Linear" in type(m).__name__}


@pytest.mark.parametrize("quantization, layer", [("int8", "Linear8bitLt"), ("nf4", "Linear4bit")])
def test_quantised_weights_run_through_the_engine_exactly_as_generate_runs_them(loaded, quantization, layer):
    model = loaded[quantization]
    assert _linear_kinds(model) == {layer}  # every linear layer of the decoder is quantised
    assert model.quantization == quantization and f"{quantization} weights" in model.label
    result = run_parity(model, "fp32")
    assert result.weights == quantization
    assert result.exact, result
    assert result.preemptions > 0 and result.prefix_hit_tokens > 0 and result.chunked_prefill_chunks > 0


def test_the_quantised_model_is_not_the_full_precision_one(loaded):
    ids = torch.arange(1, 40)[None]
    logits = {}
    for q, m in loaded.items():
        with attention_implementation(m.hf_model, "sdpa"), torch.inference_mode():
            logits[q] = m.hf_model(input_ids=ids, use_cache=False).logits
    for q in ("int8", "nf4"):
        difference = (logits[q] - logits[None]).abs().max()
        assert 0 < difference < logits[None].abs().max()
    # nf4 keeps 4 bits a weight, int8 8: its logits stray further from full precision
    assert (logits["nf4"] - logits[None]).abs().mean() > (logits["int8"] - logits[None]).abs().mean()


def test_memory_plan_weights_are_what_the_loaded_model_occupies(loaded):
    full = loaded[None].config
    int8, nf4 = loaded["int8"].config, loaded["nf4"].config
    assert int8.weight_dtype == "int8" and nf4.weight_dtype == "nf4"
    assert int8.weights_bytes == bitsandbytes_weights_bytes(SHAPE, "int8", "fp32")
    predicted = bitsandbytes_weights_bytes(SHAPE, "nf4", "fp32")
    linear_weights = 2 * (2 * 64 * 64 + 2 * 32 * 64 + 3 * 128 * 64)
    # on a CPU with AVX512-BF16 bitsandbytes keeps each block's absmax in bf16 (2 bytes, not 4)
    assert nf4.weights_bytes in (predicted, predicted - linear_weights // BNB_NF4_BLOCK * 2)
    assert full.weights_bytes > int8.weights_bytes > nf4.weights_bytes
    # the embeddings, norms and LM head stay fp32: only the linear layers shrink
    untouched = full.weights_bytes - linear_weights * 4
    assert int8.weights_bytes == untouched + linear_weights + 2 * (64 + 32 + 32 + 64 + 128 + 128 + 64) * 4


def test_on_a_device_budget_the_memory_quantisation_frees_joins_the_kv_pool(loaded):
    budget = 8 * MiB
    engines = {q: create_real_engine(m, EngineArgs(kv_cache_dtype="fp32", max_model_len=256), memory_bytes=budget)
               for q, m in loaded.items()}
    plans = {q: e.plan for q, e in engines.items()}
    for q, plan in plans.items():
        assert plan.memory_bytes == budget and plan.weights_bytes == loaded[q].config.weights_bytes
        assert plan.kv_pool_bytes == int(budget * 0.92) - plan.weights_bytes
        assert engines[q].runner.cache.nbytes == plan.num_blocks * plan.block_bytes
    for q in ("int8", "nf4"):
        freed = plans[None].weights_bytes - plans[q].weights_bytes
        assert plans[q].kv_pool_bytes - plans[None].kv_pool_bytes == freed
        assert plans[q].num_blocks > plans[None].num_blocks


def test_a_comparison_with_quantised_weights_admits_more_requests_on_one_budget(model_dir, monkeypatch):
    from kvscope.app.lab import compare

    monkeypatch.setitem(compare._LOADED_MODELS, ("test-quant", None, None),
                        load_model_directory(model_dir, random_weights=True))
    monkeypatch.setitem(compare._LOADED_MODELS, ("test-quant", None, "nf4"),
                        load_model_directory(model_dir, quantization="nf4", random_weights=True))
    args = EngineArgs(kv_cache_dtype="fp32", max_model_len=256, num_gpu_blocks_override=None)
    variants = [Variant(label=label, backend="real", model="test-quant", hardware=None, memory_bytes=1 * MiB,
                        engine_args=args, quantization=q) for label, q in (("fp32", None), ("nf4", "nf4"))]
    workload = ComparisonWorkload(load_workload("uniform-short").with_overrides(num_requests=24), all_at_once=True,
                                  max_output_tokens=2)
    result = Comparison(ComparisonSpec(variants, workload)).run()
    full, nf4 = result["fp32"], result["nf4"]
    assert nf4.settings["weights"] == "nf4" and full.settings["weights"] == "fp32"
    assert nf4.memory["kv_pool_bytes"] - full.memory["kv_pool_bytes"] == \
        full.memory["weights_bytes"] - nf4.memory["weights_bytes"]
    assert nf4.metrics["peak_running"] > full.metrics["peak_running"]
    # a model without a tokenizer cannot read the passages the weights' cost is measured on
    assert nf4.kv_quality_cost is None and nf4.kv_quality_note.startswith("not measured")


def test_quantisation_is_refused_where_it_cannot_apply():
    with pytest.raises(ConfigError, match="quantization is int8 or nf4 on the real backend"):
        Variant(label="x", quantization="nf4")  # simulated
    with pytest.raises(ConfigError, match="quantization is int8 or nf4"):
        Variant(label="x", backend="real", hardware=None, quantization="int4")


def test_missing_bitsandbytes_is_one_clear_sentence(model_dir, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "bitsandbytes", None)  # `import bitsandbytes` raises ImportError
    with pytest.raises(ConfigError, match=r"needs bitsandbytes, which is not installed: pip install"):
        load_model_directory(model_dir, quantization="int8")
    rc, _, err = cli(capsys, "run", "--backend", "real", "--model-path", model_dir, "--quantization", "nf4",
                     "--requests", 2)
    assert rc == 2 and "Traceback" not in err
    assert "needs bitsandbytes, which is not installed" in err.strip().splitlines()[-1]


def test_bitsandbytes_without_a_backend_for_the_device_is_one_clear_sentence(model_dir, monkeypatch):
    import bitsandbytes

    def no_backend(*args, **kwargs):
        raise NotImplementedError("no kernel for the 'cpu' backend")

    monkeypatch.setattr(bitsandbytes.nn, "Linear4bit", no_backend)
    with pytest.raises(ConfigError, match=r"bitsandbytes .* cannot run nf4 weights on cpu: no kernel for the 'cpu'"):
        load_model_directory(model_dir, quantization="nf4")
    model_loader.check_bitsandbytes("int8", torch.device("cpu"))  # int8 still can


def test_verify_command_runs_quantised_weights(model_dir, capsys):
    import json

    rc, out, err = cli(capsys, "verify", "--model-path", model_dir, "--quantization", "all", "--kv-cache-dtype",
                       "fp32", "--prompts", 3, "--max-tokens", 6, "--json", "-")
    assert rc == 0, err
    report = json.loads(out)
    assert [(r["weights"], r["exact"]) for r in report["results"]] == [("fp32", True), ("int8", True), ("nf4", True)]
    assert report["quality"] == []  # random weights without a tokenizer: no English to read


def test_the_weight_quantisation_scenario_compares_three_weights_on_one_device_budget():
    from kvscope.app.lab.scenarios import load_scenario, scenario_from_dict

    scenario = load_scenario("weight-quantization-real")
    assert [c.quantization for c in scenario.configs] == [None, "int8", "nf4"]
    assert len({c.memory_bytes for c in scenario.configs}) == 1 and scenario.configs[0].memory_bytes > 0
    assert {c.engine_args.kv_cache_dtype for c in scenario.configs} == {"fp32"}  # the weights, the one difference
    assert scenario.reveal_from.name == "max_concurrent_sequences"
    data = {"name": "x", "order": 99, "title": "t", "seed_lesson": "seed 004", "claim": "c", "caption": "c. d",
            "question": "q?", "answer": {"kind": "number", "unit": "x"},
            "reveal": {"ratio": "peak_running", "numerator": "a", "denominator": "b"},
            "base": {"backend": "simulated", "hardware": "h100-80gb", "model": "llama-3-8b", "num_requests": 4,
                     "workload": {"preset": "chat"}},
            "configs": [{"label": "a"}, {"label": "b", "quantization": "int8"}]}
    with pytest.raises(ConfigError, match=r"configs\[2\] \(b\)\.quantization: .*on the real backend"):
        scenario_from_dict(data, "scenario file x.toml")
