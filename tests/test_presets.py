"""Every preset loads and validates; parameter counts match transformers' own models."""

import json

import pytest

from kvscope.app.lab.models.config_json import load_hf_config
from kvscope.engine.config import ConfigError
from kvscope.engine.memory_math import num_parameters, plan_memory
from kvscope.app.lab.presets import (
    load_hardware,
    load_model,
    load_workload,
    preset_names,
    presets_root,
)

REQUIRED = {
    "models": {"llama-2-7b", "llama-3-8b", "llama-3-70b", "mistral-7b", "qwen2.5-7b", "qwen3.6-27b-fp8", "tiny-llama",
               "llama-3.1-8b", "qwen3-14b", "gemma-2-9b", "gemma-3-27b", "gpt-oss-20b", "gpt-oss-120b", "deepseek-v3",
               "deepseek-v2-lite", "qwen3-next-80b-a3b"},
    "hardware": {"h100-80gb", "h100-nvl-94gb", "a100-40gb", "a100-80gb", "l4-24gb", "rtx-4090-24gb", "8x-h100-80gb",
                 "rtx-3090-24gb", "this-machine"},
    "workloads": {"chat", "rag", "agent", "shared-system-prompt", "uniform-short", "azure-conv"},
}


@pytest.mark.parametrize("kind", sorted(REQUIRED))
def test_required_presets_exist_and_cite_a_source(kind):
    names = set(preset_names(kind))
    assert REQUIRED[kind] <= names
    loader = {"models": load_model, "hardware": load_hardware, "workloads": load_workload}[kind]
    for name in names - {"this-machine"}:
        preset = loader(name)
        assert preset.source, f"{kind}/{name} must say where its numbers come from"
        assert preset.description


def test_hardware_presets_have_bandwidth_and_flops_per_dtype():
    for name in REQUIRED["hardware"] - {"this-machine"}:
        hw = load_hardware(name)
        assert hw.memory_bandwidth_bytes_per_s > 1e11
        assert {"fp16", "bf16", "fp32"} <= set(hw.peak_flops)
    assert load_hardware("8x-h100-80gb").gpu_count == 8


# The total torch.cuda.mem_get_info reports, which vLLM applies gpu_memory_utilization to (not the
# nvidia-smi figure: an H100 80GB shows 81,559 MiB there, 79.19 GiB = 81,090 MiB to CUDA).
CUDA_VISIBLE_GIB = {"h100-80gb": 79.19, "8x-h100-80gb": 79.19, "a100-80gb": 79.15, "a100-40gb": 39.50, "l4-24gb": 22.05,
                    "rtx-3090-24gb": 23.58, "rtx-4090-24gb": 23.58, "h100-nvl-94gb": 92.63}


@pytest.mark.parametrize("name, gib", sorted(CUDA_VISIBLE_GIB.items()))
def test_hardware_presets_hold_the_cuda_visible_memory_and_say_where_it_is_from(name, gib):
    hw = load_hardware(name)
    assert hw.memory_bytes / 2**30 == pytest.approx(gib, abs=0.005)
    assert "CUDA-visible" in hw.source and "nvidia-smi" in hw.source


def test_this_machine_is_detected():
    hw = load_hardware("this-machine")
    assert hw.memory_bytes > 2**30
    assert hw.name == "this-machine"


def test_azure_trace_ships_with_its_attribution():
    traces = presets_root() / "traces"
    assert (traces / "azure_conv.csv").is_file()
    attribution = (traces / "ATTRIBUTION.md").read_text()
    assert "CC-BY 4.0" in attribution and "Splitwise" in attribution


@pytest.mark.parametrize("name", ["llama-2-7b", "llama-3-8b", "llama-3-70b", "mistral-7b", "qwen2.5-7b", "qwen3.6-27b-fp8",
                                  "tiny-llama"])
def test_parameter_count_matches_transformers(name):
    """The derived count must equal the real architecture's, built on the meta device (no memory)."""
    from accelerate import init_empty_weights
    from transformers import AutoModelForCausalLM

    from kvscope.app.lab.verify.tiny_model import hf_config_for

    model = load_model(name)
    with init_empty_weights():
        hf_model = AutoModelForCausalLM.from_config(hf_config_for(model))
    assert num_parameters(model) == sum(p.numel() for p in hf_model.parameters())


def test_config_json_loads_like_the_preset(tmp_path):
    preset = load_model("qwen2.5-7b")
    cfg = {
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "num_hidden_layers": 28,
        "num_attention_heads": 28, "num_key_value_heads": 4, "hidden_size": 3584, "intermediate_size": 18944,
        "vocab_size": 152064, "max_position_embeddings": 32768, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    loaded = load_hf_config(tmp_path)
    assert num_parameters(loaded) == num_parameters(preset)
    assert loaded.head_dim == 128 and loaded.weight_dtype == "bf16"


def test_fp8_quantised_config_json_gives_fp8_weights(tmp_path):
    cfg = {"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64, "vocab_size": 100,
           "quantization_config": {"quant_method": "fp8"}}
    path = tmp_path / "q.json"
    path.write_text(json.dumps(cfg))
    assert load_hf_config(path).weight_dtype == "fp8"


@pytest.mark.parametrize("text,match", [
    ("{", "malformed JSON at line 1"),
    ('{"num_hidden_layers": 2}', "missing field"),
    ('{"num_hidden_layers": 2, "num_attention_heads": 6, "num_key_value_heads": 4, "hidden_size": 96, "vocab_size": 10}',
     "must divide"),
    ('{"num_hidden_layers": 0, "num_attention_heads": 4, "hidden_size": 64, "vocab_size": 10}', "greater than 0"),
    ('{"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64, "vocab_size": 10, "torch_dtype": "int3"}',
     "unknown torch_dtype"),
])
def test_bad_config_json_is_a_clear_error(tmp_path, text, match):
    path = tmp_path / "config.json"
    path.write_text(text)
    with pytest.raises(ConfigError, match=match):
        load_hf_config(path)


def test_unknown_preset_lists_the_known_ones():
    with pytest.raises(ConfigError, match="known: .*llama-3-8b"):
        load_model("llama-9")


def test_a_model_preset_drives_a_plan():
    from kvscope.engine.config import EngineArgs, resolve_engine_args

    model, hw = load_model("mistral-7b"), load_hardware("a100-80gb")
    plan = plan_memory(model, hw, resolve_engine_args(EngineArgs(), model, hw))
    assert plan.num_blocks > 0 and plan.max_model_len == 32768


def test_user_presets_save_list_load_and_delete(tmp_path, monkeypatch):
    from kvscope.app.lab.presets import delete_user_preset, save_user_preset, user_preset_names
    import dataclasses

    monkeypatch.setenv("KVSCOPE_CONFIG_DIR", str(tmp_path))
    fields = {k: v for k, v in dataclasses.asdict(load_model("llama-2-7b")).items() if k != "name"}
    fields["num_key_value_heads"] = 8
    save_user_preset("models", "llama-2-7b-gqa8", fields)
    assert "llama-2-7b-gqa8" in preset_names("models") and user_preset_names("models") == ["llama-2-7b-gqa8"]
    assert load_model("llama-2-7b-gqa8").num_key_value_heads == 8
    hw = {k: v for k, v in dataclasses.asdict(load_hardware("h100-80gb")).items() if k != "name"}
    hw["memory_bytes"] = 141 * 2**30
    save_user_preset("hardware", "h200-ish", hw)
    assert load_hardware("h200-ish").peak_flops == load_hardware("h100-80gb").peak_flops
    with pytest.raises(ConfigError, match="built-in"):
        save_user_preset("models", "llama-3-8b", fields)
    with pytest.raises(ConfigError, match="must divide"):
        save_user_preset("models", "broken", {**fields, "num_key_value_heads": 5})
    delete_user_preset("models", "llama-2-7b-gqa8")
    assert "llama-2-7b-gqa8" not in preset_names("models")
    with pytest.raises(ConfigError, match="not one of your presets"):
        delete_user_preset("models", "llama-3-8b")


def test_a_model_named_as_on_hugging_face_or_nearly_right_is_answered_with_the_preset_meant():
    from kvscope.app.lab.presets import load_hardware, load_model, load_workload

    with pytest.raises(ConfigError) as hub:
        load_model("meta-llama/Llama-3.1-8B-Instruct")
    assert "Hugging Face repository name" in str(hub.value) and "Did you mean the preset llama-3.1-8b?" in str(hub.value)
    assert "--model-path DIR" in str(hub.value)
    with pytest.raises(ConfigError) as unknown_owner:
        load_model("someone/some-model")
    assert "Did you mean" not in str(unknown_owner.value)
    for typed, meant, load in (("Llama-3-8B", "llama-3-8b", load_model), ("llama3-8b", "llama-3-8b", load_model),
                               ("h100", "h100-80gb or h100-nvl-94gb", load_hardware), ("chatt", "chat", load_workload)):
        with pytest.raises(ConfigError) as near:
            load(typed)
        assert f"(did you mean {meant}?)" in str(near.value), typed
    with pytest.raises(ConfigError) as far:
        load_model("zzzz")
    assert "did you mean" not in str(far.value)


def test_a_device_or_calibration_that_would_give_astronomical_clocks_is_refused():
    from kvscope.app.lab.presets import hardware_from_dict

    base = {"name": "x", "memory_bytes": 80e9, "memory_bandwidth_bytes_per_s": 3e12, "peak_flops": {"bf16": 1e15}}
    for changes, said in [({"memory_bandwidth_bytes_per_s": 1e-300}, "memory_bandwidth_bytes_per_s must be at least"),
                          ({"peak_flops": {"bf16": 1e-300}}, "peak_flops.bf16 must be at least"),
                          ({"calibration": {"label": "fit", "flops_efficiency": 1e-300}}, "flops_efficiency must be at least"),
                          ({"calibration": {"label": "a\nb\x1b[2J"}}, "one line of text"),
                          ({"name": "a\nb\x1b[2J"}, "one line of printable text")]:
        with pytest.raises(ConfigError, match=said):
            hardware_from_dict({**base, **changes}, "hardware preset x")
    assert hardware_from_dict({**base, "calibration": {"label": "fit", "flops_efficiency": 0.3}}, "h").name == "x"


def test_a_user_preset_that_is_not_a_regular_file_is_named_as_such(tmp_path, monkeypatch):
    import os

    monkeypatch.setenv("KVSCOPE_CONFIG_DIR", str(tmp_path))
    (tmp_path / "presets" / "models").mkdir(parents=True)
    os.mkfifo(tmp_path / "presets" / "models" / "pipe.toml")
    with pytest.raises(ConfigError, match="is not a regular file"):
        load_model("pipe")


def test_a_built_in_preset_read_again_is_its_file_as_it_is_now_and_a_callers_edit_stays_its_own(tmp_path, monkeypatch):
    """Built-in tables are kept parsed (a window read them dozens of times while it opened): an edit
    of the file is read afresh, and a caller that changes the table it got changes no one else's."""
    import os

    import kvscope.app.lab.presets as presets

    (tmp_path / "models").mkdir()
    shipped = presets.presets_root() / "models" / "llama-3-8b.toml"
    copy = tmp_path / "models" / "llama-3-8b.toml"
    copy.write_text(shipped.read_text(encoding="utf-8"), encoding="utf-8")
    monkeypatch.setattr(presets, "presets_root", lambda: tmp_path)
    first = presets.read_toml(copy, "model preset", "model preset")
    first["num_hidden_layers"] = 1
    assert presets.read_toml(copy, "model preset", "model preset")["num_hidden_layers"] == 32
    assert presets.load_model("llama-3-8b").num_hidden_layers == 32
    copy.write_text(copy.read_text(encoding="utf-8").replace("num_hidden_layers = 32", "num_hidden_layers = 40"),
                    encoding="utf-8")
    os.utime(copy, ns=(1, 1))  # a change within the clock's resolution would keep its time: the size differs too
    assert presets.load_model("llama-3-8b").num_hidden_layers == 40
