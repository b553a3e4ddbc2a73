"""The twelfth hostile pass over the files kvscope reads: fields each valid alone that say two things
(a config.json's two dtypes or two expert counts, a trace time's fraction after its minutes, a scenario's
ratio of a configuration to itself, a hardware preset's bf16 given twice), fields another field leaves
unread, a scenario's changes to a preset judged with the preset's own fields, and a model folder's
config.json checked against its weights' dtypes. Each refusal test
failed before its fix; the consistent neighbours beside them pass.
scripts/hostile_inputs_twelfth_files.py runs them through the command line."""

from __future__ import annotations

import json

import pytest

from kvscope.app.lab.models.config_json import model_from_hf_config
from kvscope.app.lab.presets import hardware_from_dict, load_hardware, load_model, load_workload_file, model_from_dict
from kvscope.app.lab.scenarios import load_scenario, scenarios_root
from kvscope.app.lab.workload import dist_from_dict, read_trace
from kvscope.engine.config import ConfigError

BASE = {"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "hidden_size": 128, "intermediate_size": 256, "vocab_size": 1000, "max_position_embeddings": 512}
LINEAR = {"layer_types": ["linear_attention", "full_attention"], "linear_num_key_heads": 2,
          "linear_num_value_heads": 2, "linear_key_head_dim": 8, "linear_value_head_dim": 8,
          "linear_conv_kernel_dim": 4}


# -- config.json ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fields, said", [
    # sized as 0 bytes of shared experts
    ({"model_type": "deepseek_v2", "n_routed_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 2},
     "n_shared_experts (2) are experts of moe_intermediate_size, which it does not give"),
    # the latent dropped, its rope part with it: a full KV cache
    ({"kv_lora_rank": 0, "qk_rope_head_dim": 64, "qk_nope_head_dim": 64}, "kv_lora_rank is 0 beside qk_rope_head_dim"),
    ({**LINEAR, "mamba_ssm_dtype": "int4"}, "mamba_ssm_dtype 'int4' is not a type a recurrent state is kept in"),
    ({"quantization_config": {"quant_method": "bitsandbytes", "load_in_4bit": True, "load_in_8bit": True}},
     "sets both load_in_4bit and load_in_8bit"),
    ({"torch_dtype": "float32", "dtype": "bfloat16"}, "torch_dtype 'float32' and dtype 'bfloat16'"),
    ({"num_experts": 8, "num_local_experts": 16, "num_experts_per_tok": 2},
     "num_experts (8) and num_local_experts (16) give different expert counts"),
    ({"hidden_size": 130}, "hidden_size (130) is not a whole number of num_attention_heads (4)"),
])
def test_a_config_json_whose_fields_say_two_things_is_refused_naming_them(fields, said):
    with pytest.raises(ConfigError) as caught:
        model_from_hf_config({**BASE, **fields}, "m", label="config c.json")
    assert said in str(caught.value) and str(caught.value).startswith("config c.json"), caught.value


def test_the_config_json_neighbours_that_agree_stay_accepted():
    auto = model_from_hf_config({**BASE, **LINEAR, "mamba_ssm_dtype": "auto"}, "m")  # vLLM's word: refused before
    plain = model_from_hf_config({**BASE, **LINEAR}, "m")
    assert auto.linear_state_bytes == plain.linear_state_bytes
    wide = model_from_hf_config({**BASE, **LINEAR, "mamba_ssm_dtype": "float32"}, "m")
    assert wide.linear_state_bytes > plain.linear_state_bytes
    assert model_from_hf_config({**BASE, "torch_dtype": "bfloat16", "dtype": "bf16"}, "m").weight_dtype == "bf16"
    assert model_from_hf_config({**BASE, "hidden_size": 130, "head_dim": 32}, "m").head_dim == 32
    assert model_from_hf_config({**BASE, "num_experts": 8, "num_local_experts": 8, "num_experts_per_tok": 2,
                                 "moe_intermediate_size": 64}, "m").num_experts == 8
    deepseek = model_from_hf_config({**BASE, "model_type": "deepseek_v2", "n_routed_experts": 8,
                                     "num_experts_per_tok": 2, "n_shared_experts": 2, "moe_intermediate_size": 64},
                                    "m")
    assert deepseek.shared_expert_intermediate_size == 128
    assert model_from_hf_config({**BASE, "kv_lora_rank": None, "qk_rope_head_dim": None}, "m").kv_lora_rank is None
    assert model_from_hf_config({**BASE, "quantization_config": {"quant_method": "bitsandbytes", "load_in_4bit": True}},
                                "m").weight_dtype == "nf4"


def test_transformers_5s_rope_parameters_stretch_the_positions_as_rope_scaling_does():
    """rope_parameters (transformers 5's name for rope_scaling) was not read: a yarn factor of 4 on 512
    positions left 512, and --max-model-len 2048 was refused as past them."""
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 512, "rope_theta": 1e4}
    for field in ("rope_parameters", "rope_scaling"):
        assert model_from_hf_config({**BASE, field: yarn}, "m").longest_context == 2048
    default = {"rope_type": "default", "rope_theta": 1e4}  # what transformers 5 writes of a model not stretched
    assert model_from_hf_config({**BASE, "rope_parameters": default}, "m").longest_context == 512


def test_a_text_config_takes_the_whole_models_dtype_and_keeps_its_own_quantization():
    """A multimodal config.json: float32 at the top was sized as bf16, and text_config's own
    quantization_config was replaced by the top level's absent one."""
    text = dict(BASE)
    assert model_from_hf_config({"torch_dtype": "float32", "text_config": text}, "m").weight_dtype == "fp32"
    assert model_from_hf_config({"dtype": "float16", "text_config": text}, "m").weight_dtype == "fp16"
    assert model_from_hf_config({"torch_dtype": "float32", "text_config": {**text, "torch_dtype": "bfloat16"}},
                                "m").weight_dtype == "bf16"  # the text model's own wins
    inner = {**text, "quantization_config": {"quant_method": "fp8"}}
    assert model_from_hf_config({"text_config": inner}, "m").weight_dtype == "fp8"
    top = {"quant_method": "bitsandbytes", "load_in_8bit": True}
    assert model_from_hf_config({"quantization_config": top, "text_config": inner}, "m").weight_dtype == "int8"
    assert model_from_hf_config({"text_config": text}, "m").weight_dtype == "bf16"


def test_a_model_preset_given_as_a_config_json_says_what_to_give(tmp_path, monkeypatch):
    """It was "malformed JSON at line 1, column 1: Expecting value", nothing to give instead."""
    from kvscope.app.lab.models.config_json import load_hf_config
    from kvscope.app.lab.presets import presets_root

    monkeypatch.setenv("KVSCOPE_CONFIG_DIR", str(tmp_path))
    preset = tmp_path / "mine.toml"
    preset.write_text((presets_root() / "models" / "llama-3-8b.toml").read_text())
    with pytest.raises(ConfigError) as caught:
        load_hf_config(preset)
    said = str(caught.value)
    assert "mine.toml: a kvscope model preset (TOML)" in said and f"{tmp_path}/presets/models/NAME.toml" in said, said
    other = tmp_path / "notes.toml"
    other.write_text('title = "not a model"\n')
    with pytest.raises(ConfigError, match=r"notes\.toml: malformed JSON at line 1"):
        load_hf_config(other)


def _folder(path, dtype: str, quantization=None):
    """A model folder of one tensor of 4 elements of dtype, its config.json saying quantization."""
    import struct

    path.mkdir()
    nbytes = {"F32": 16, "F8_E4M3": 4}[dtype]
    header = json.dumps({"model.embed_tokens.weight": {"dtype": dtype, "shape": [2, 2], "data_offsets": [0, nbytes]}})
    (path / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header.encode() + bytes(nbytes))
    cfg = {**BASE, "architectures": ["LlamaForCausalLM"]}
    if quantization:
        cfg["quantization_config"] = quantization
    (path / "config.json").write_text(json.dumps(cfg))
    return path


def test_a_model_folder_whose_config_says_fp8_over_f32_weights_is_refused(tmp_path):
    """math --model-path sized the F32 weights at a byte each; the real backend ran them as fp32."""
    from kvscope.app.lab.models.config_json import load_hf_config
    from kvscope.app.lab.models.loader import check_model_directory

    lying = _folder(tmp_path / "lying", "F32", {"quant_method": "fp8"})
    # the folder's config.json named (`--config lying/config.json`) was sized as fp8 beside the same F32 weights
    for read, given in ((load_hf_config, lying), (check_model_directory, lying),
                        (load_hf_config, lying / "config.json")):
        with pytest.raises(ConfigError, match=r"lying: config\.json's quantization_config says its weights are "
                                              r"stored as fp8 .* hold only F32"):
            read(given)
    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / "config.json").write_text((lying / "config.json").read_text())
    assert load_hf_config(alone / "config.json").weight_dtype == "fp8"  # a config.json alone is sized as it says
    stored = _folder(tmp_path / "stored", "F8_E4M3", {"quant_method": "fp8"})
    assert load_hf_config(stored).weight_dtype == "fp8" and check_model_directory(stored)
    plain = _folder(tmp_path / "plain", "F32")
    assert load_hf_config(plain).weight_dtype == "bf16" and check_model_directory(plain)


# -- traces --------------------------------------------------------------------------------------------------

HEAD = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


@pytest.mark.parametrize("when", ["2023-11-16 18:15:46.68.5", "2023-11-16 18:15.5", "2023-11-16.5",
                                  "2023-11-16 18:15:46.68+05:00.5"])
def test_a_trace_time_whose_fraction_follows_no_seconds_is_refused_naming_the_line(tmp_path, when):
    """"46.68.5" was read as 47.18 s; "18:15.5" as 18:15:00.5; "2023-11-16.5" as midnight and 0.5 s."""
    path = tmp_path / "t.csv"
    path.write_text(f"{HEAD}2023-11-16 18:15:40,100,10\n{when},100,10\n")
    with pytest.raises(ConfigError) as caught:
        read_trace(path)
    assert "line 3" in str(caught.value) and repr(when) in str(caught.value), caught.value


def test_fractions_after_the_seconds_stay_read(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(f"{HEAD}2023-11-16 18:15:46.5,100,10\n20231116T181547.25,100,10\n"
                    "2023-11-16T18:15:48.125Z,100,10\n2023-11-16 18:15:49,100,10\n")
    assert [r.arrival_time_s for r in read_trace(path)] == [0.0, 0.75, 1.625, 2.5]


# -- workloads -----------------------------------------------------------------------------------------------

def test_a_uniform_length_without_max_is_refused():
    """{ dist = "uniform" } drew 1 to 1,000,000 tokens: every request past any model's length."""
    with pytest.raises(ConfigError, match=r"prompt_tokens: a uniform length needs max"):
        dist_from_dict({"dist": "uniform"}, "w: prompt_tokens")
    with pytest.raises(ConfigError, match=r"a uniform length needs max"):
        dist_from_dict({"dist": "uniform", "min": 8}, "w: prompt_tokens")
    assert dist_from_dict({"dist": "uniform", "max": 64}, "w").max == 64


def test_a_workload_files_num_requests_past_its_traces_rows_is_refused(tmp_path):
    """num_requests = 50 on a 3-row trace ran the 3 and said "requests completed 3"."""
    (tmp_path / "three.csv").write_text(f"{HEAD}0,100,10\n1,100,10\n2,100,10\n")
    past = tmp_path / "past.toml"
    past.write_text('name = "past"\ntrace = "three.csv"\nnum_requests = 50\n')
    with pytest.raises(ConfigError) as caught:
        load_workload_file(past)
    assert "past.toml: num_requests (50) is more than the 3 requests its trace" in str(caught.value), caught.value
    for count in ("num_requests = 3\n", ""):
        every = tmp_path / "every.toml"
        every.write_text(f'name = "every"\ntrace = "three.csv"\n{count}')
        assert len(read_trace(load_workload_file(every).trace_path)) == 3


def test_a_user_workload_preset_whose_name_field_is_another_presets_is_refused(tmp_path, monkeypatch):
    """A copy of chat.toml saved as my-chat.toml, its name left: every run and table titled it chat."""
    from kvscope.app.lab.presets import load_workload, presets_root

    monkeypatch.setenv("KVSCOPE_CONFIG_DIR", str(tmp_path))
    folder = tmp_path / "presets" / "workloads"
    folder.mkdir(parents=True)
    (folder / "my-chat.toml").write_text((presets_root() / "workloads" / "chat.toml").read_text())
    with pytest.raises(ConfigError, match=r"workload preset my-chat: its name field is 'chat', not 'my-chat'"):
        load_workload("my-chat")
    (folder / "my-chat.toml").write_text('name = "my-chat"\nnum_requests = 3\nprompt_tokens = 8\n')
    assert load_workload("my-chat").name == "my-chat" and load_workload("chat").name == "chat"
    (folder / "broken.toml").write_text('name = "w"\ntrace = 5\n')  # what is wrong inside is said first
    with pytest.raises(ConfigError, match=r"trace must be non-empty text"):
        load_workload("broken")


# -- scenarios -----------------------------------------------------------------------------------------------

def _scenario(tmp_path, name: str, old: str, new: str):
    text = (scenarios_root() / f"{name}.toml").read_text()
    assert old in text
    path = tmp_path / "s.toml"
    path.write_text(text.replace(old, new, 1))
    return load_scenario(str(path))


PRESET = 'preset = "shared-system-prompt"'


def test_a_scenarios_changes_to_a_preset_are_judged_with_the_presets_fields(tmp_path):
    """shared_prefix_tokens on a preset that shares a prefix was refused as unread (the change alone has
    fraction 0), trace_speedup on a trace preset as "no trace"; prompts shorter than the preset's
    prefix, judged alone, ran."""
    shorter = _scenario(tmp_path, "prefix-caching", PRESET, PRESET + "\nshared_prefix_tokens = 512")
    assert shorter.workload.spec.shared_prefix_tokens == 512 and shorter.workload.spec.shared_prefix_fraction == 0.9
    faster = _scenario(tmp_path, "prefix-caching", PRESET, 'preset = "azure-conv"\ntrace_speedup = 10')
    assert faster.workload.spec.trace_speedup == 10 and faster.workload.spec.trace_path.endswith("azure_conv.csv")
    with pytest.raises(ConfigError, match=r"base\.workload: shared_prefix_tokens \(1,024\) is not shorter than the "
                                          r"longest prompt prompt_tokens gives \(64\)"):
        _scenario(tmp_path, "prefix-caching", PRESET, PRESET + "\nprompt_tokens = 64")


@pytest.mark.parametrize("name, old, new, said", [
    ("prefix-caching", "engine = { enable_prefix_caching = true }",
     "engine = { enable_prefix_caching = true, vllm_version = 0.10 }",
     r"configs\[2\] \(prefix caching on\)\.engine\.vllm_version: must be text in quotes"),
    ("static-vs-continuous", "num_requests = 96", "num_requests = 30000",
     r"base\.num_requests: \(30,000\) is more than the 19,366 requests its workload's trace holds"),
    ("paged-vs-contiguous", 'denominator = "contiguous reservation"', 'denominator = "paged"',
     r"reveal\.denominator: is 'paged', the numerator too"),
    ("gqa-and-fp8", 'choices = ["Llama 2 7B, fp8 KV", "Llama 3 8B (GQA), fp16 KV"]',
     'choices = ["Llama 2 7B, fp8 KV", "Llama 2 7B, fp8 KV"]', r"answer\.choices: names a label twice"),
    ("paged-vs-contiguous", 'denominator = "contiguous reservation"',
     'denominator = "contiguous reservation"\nhighest = false', r"reveal\.highest: a ratio reveal does not read highest"),
    ("gqa-and-fp8", "highest = true", 'highest = true\nconfig = "Llama 2 7B, fp8 KV"',
     r"reveal\.config: a best reveal does not read config"),
    ("gqa-and-fp8", 'kind = "choice"', 'kind = "choice"\nunit = "GiB"',
     r"answer\.unit: a choice answer is a configuration's label, which has no unit"),
    # replaced by base.num_requests without a word
    ("prefix-caching", PRESET, PRESET + "\nnum_requests = 80", r"base\.workload\.num_requests: base\.num_requests sets"),
    # refused only after the whole comparison had run, the file not named
    ("prefix-caching", 'metric = "prefix_cache_hit_rate"', 'metric = "kv_quality_cost"',
     r"reveal\.metric: kv_quality_cost is measured by the real backend only"),
])
def test_a_scenario_field_that_says_nothing_or_the_wrong_thing_is_refused(tmp_path, name, old, new, said):
    with pytest.raises(ConfigError, match=said) as caught:
        _scenario(tmp_path, name, old, new)
    assert "s.toml" in str(caught.value), caught.value


def test_the_scenarios_fields_given_as_meant_stay_accepted(tmp_path):
    quoted = _scenario(tmp_path, "prefix-caching", "engine = { enable_prefix_caching = true }",
                       'engine = { enable_prefix_caching = true, vllm_version = "0.10" }')
    assert quoted.configs[1].engine_args.vllm_version == "0.10"
    assert _scenario(tmp_path, "static-vs-continuous", "num_requests = 96", "num_requests = 19366").num_requests == 19366
    assert _scenario(tmp_path, "gqa-and-fp8", "highest = true", "highest = false").reveal_from.highest is False
    for name in ("paged-vs-contiguous", "gqa-and-fp8", "prefix-caching", "static-vs-continuous", "fp8-kv-real",
                 "weight-quantization-real"):
        load_scenario(name)


# -- hardware and model presets ------------------------------------------------------------------------------

L4 = {"memory_bytes": 24 * 1024**3, "memory_bandwidth_bytes_per_s": 300e9}


@pytest.mark.parametrize("flops, said", [
    ({"bf16": 121e12, "bfloat16": 1e13}, "peak_flops gives 'bf16' and 'bfloat16', one type (bf16) twice"),
    ({"fp16": 121e12, "half": 1e13}, "one type (fp16) twice"),
    ({"bf16": 121e12, "int4": 1e6}, "peak_flops.int4 is never read"),
    ({"bf16": 121e12, "nf4": 1e6}, "peak_flops.nf4 is never read"),
])
def test_a_peak_flops_rate_given_twice_or_never_read_is_refused(flops, said):
    """bfloat16 beside bf16 replaced it without a word; an int4 or nf4 rate was never looked up."""
    with pytest.raises(ConfigError) as caught:
        hardware_from_dict({**L4, "peak_flops": flops}, "hardware preset h", default_name="h")
    assert said in str(caught.value) and "hardware preset h" in str(caught.value), caught.value


def test_peak_flops_of_each_type_once_stay_accepted():
    spec = hardware_from_dict({**L4, "peak_flops": {"bfloat16": 1e14, "fp8": 2e14, "int8": 2e14}}, "h", "h")
    assert spec.peak_flops == {"bf16": 1e14, "fp8": 2e14, "int8": 2e14} and spec.flops_for("int4") == 2e14
    for name in ("l4-24gb", "h100-80gb", "8x-h100-80gb", "a100-40gb"):
        load_hardware(name)


LLAMA = dict(num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=2, head_dim=64, hidden_size=512,
             intermediate_size=1024, vocab_size=1000, max_position_embeddings=4096)


def test_a_model_presets_stated_weights_that_say_nothing_or_too_little_are_refused():
    """weights_source without weights_bytes was dropped; 1 byte of weights left the memory to the KV pool."""
    with pytest.raises(ConfigError, match=r"preset x: weights_source says where weights_bytes comes from, but "
                                          r"weights_bytes is not given"):
        model_from_dict({**LLAMA, "weights_source": "measured on disk"}, "preset x", "x")
    with pytest.raises(ConfigError, match=r"preset x: weights_bytes \(1\) is less than 2 bits for each of the"):
        model_from_dict({**LLAMA, "weights_bytes": 1}, "preset x", "x")


def test_a_model_preset_saying_its_positions_were_given_without_them_is_refused():
    """The default 4,096 positions were held against --max-model-len as if the preset gave them."""
    with pytest.raises(ConfigError, match=r"preset x: max_position_embeddings_given is true, but "
                                          r"max_position_embeddings is not given"):
        model_from_dict({**{k: v for k, v in LLAMA.items() if k != "max_position_embeddings"},
                         "max_position_embeddings_given": True}, "preset x", "x")
    assert model_from_dict({**LLAMA, "max_position_embeddings_given": False}, "p", "x").longest_context == 4096
    assert model_from_dict({**LLAMA, "max_position_embeddings_given": True}, "p", "x").max_position_embeddings_given


def test_stated_weights_of_four_bits_and_a_preset_the_window_saved_stay_accepted():
    from kvscope.engine.memory_math import num_parameters

    params = num_parameters(model_from_dict(dict(LLAMA), "p", "x"))
    assert model_from_dict({**LLAMA, "weights_bytes": params // 2, "weights_source": "disk"}, "p", "x").weights_bytes
    # a preset saved from the window writes every field: the default weights_source beside no weights_bytes
    saved = {k: v for k, v in load_model("llama-3-8b").__dict__.items() if v is not None and k != "name"}
    assert "weights_source" in saved and "weights_bytes" not in saved
    assert model_from_dict(saved, "p", "x").weights_bytes is None
    for name in ("gpt-oss-120b", "gpt-oss-20b", "qwen3.6-27b-fp8", "gemma-3-27b", "deepseek-v3"):
        load_model(name)


# -- calibration profiles ------------------------------------------------------------------------------------

def test_a_calibration_profile_giving_a_key_twice_is_refused(tmp_path):
    from kvscope.app.lab.calibration import read_profile

    path = tmp_path / "p.json"
    path.write_text('{"format": "kvscope-calibration", "version": 1, "calibration": {"label": "fit", '
                    '"flops_efficiency": 0.5, "flops_efficiency": 0.01}}')
    with pytest.raises(ConfigError, match=r"p\.json: the key 'flops_efficiency' is given twice in one object "
                                          r"\(0\.5, then 0\.01\)"):
        read_profile(path)
    path.write_text(json.dumps({"format": "kvscope-calibration", "version": 1,
                                "calibration": {"label": "fit", "flops_efficiency": 0.5}}))
    assert read_profile(path)["calibration"]["flops_efficiency"] == 0.5
