"""The thirteenth hostile pass over the files kvscope reads: a config.json's rope tables (a factor
given as text, 0 or a list; rope_scaling and rope_parameters stretching differently; Gemma 3's factor,
already in its positions; transformers 5's table per layer type), its fields that say one fact twice
(experts_per_token beside num_experts_per_tok, shared_expert_intermediate_size beside n_shared_experts,
layer_types beside full_attention_interval, sliding_window_pattern or use_sliding_window) or that were
not read (decoder_sparse_step), a calibration profile that is a folder or a link to nothing, a scenario
whose configurations are one configuration, a shared prefix no trace row holds, a hardware calibration of
a label alone, and named chat templates none of which is the default. Each refusal test failed before its
fix; the consistent neighbours beside them pass.
scripts/hostile_inputs_thirteenth_files.py runs them through the command line."""

from __future__ import annotations

import pytest

from kvscope.app.lab.models.config_json import model_from_hf_config
from kvscope.app.lab.scenarios import load_scenario
from kvscope.engine.config import ConfigError

from test_files_hostile_twelfth import _scenario

BASE = {"model_type": "llama", "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
        "hidden_size": 128, "intermediate_size": 256, "vocab_size": 1000, "max_position_embeddings": 512}
LINEAR = {"linear_num_key_heads": 2, "linear_num_value_heads": 2, "linear_key_head_dim": 8,
          "linear_value_head_dim": 8, "linear_conv_kernel_dim": 4}
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 512}
MOE = {"num_experts": 8, "moe_intermediate_size": 64}
DEEPSEEK = {"model_type": "deepseek_v2", "n_routed_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 2,
            "moe_intermediate_size": 64}
EVERY_OTHER = ["linear_attention", "full_attention"] * 2


def refused(fields: dict) -> str:
    with pytest.raises(ConfigError) as caught:
        model_from_hf_config({**BASE, **fields}, "m", label="config c.json")
    said = str(caught.value)
    assert said.startswith("config c.json: ") and "\n" not in said, said
    return said


# -- rope tables -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fields, said", [
    # each was read as no stretch at all: --max-model-len 2048 refused as past the 512 positions
    ({"rope_scaling": {**YARN, "factor": "4"}}, "rope_scaling.factor must be a number greater than 0"),
    ({"rope_scaling": {**YARN, "factor": 0}}, "rope_scaling.factor must be a number greater than 0"),
    ({"rope_scaling": {**YARN, "factor": -4.0}}, "rope_scaling.factor must be a number greater than 0"),
    ({"rope_parameters": {**YARN, "factor": True}}, "rope_parameters.factor must be a number greater than 0"),
    ({"rope_scaling": [4.0, 512]}, "rope_scaling must be a table, got [4.0, 512]"),
    ({"rope_scaling": "yarn"}, "rope_scaling must be a table"),
    ({"rope_scaling": {**YARN, "original_max_position_embeddings": "512"}},
     "rope_scaling.original_max_position_embeddings must be a whole number"),
    ({"rope_parameters": {"full_attention": {**YARN, "factor": "4"}, "sliding_attention": {"rope_type": "default"}}},
     "rope_parameters.full_attention.factor must be a number greater than 0"),
    # rope_scaling's 1,024 was taken without a word
    ({"rope_scaling": {"rope_type": "linear", "factor": 2.0},
      "rope_parameters": {"rope_type": "linear", "factor": 8.0}},
     "rope_scaling stretches max_position_embeddings (512) to 1,024 positions, rope_parameters (its newer name) to "
     "4,096"),
])
def test_a_rope_table_that_cannot_say_how_far_it_stretches_is_refused_naming_the_field(fields, said):
    assert said in refused(fields)


def test_the_rope_tables_given_as_meant_stretch_as_vllm_derives_them():
    assert model_from_hf_config({**BASE, "rope_scaling": YARN}, "m").longest_context == 2048
    assert model_from_hf_config({**BASE, "rope_scaling": {**YARN, "factor": 4}}, "m").longest_context == 2048
    both = model_from_hf_config({**BASE, "rope_scaling": YARN, "rope_parameters": {**YARN, "rope_theta": 1e4}}, "m")
    assert both.longest_context == 2048  # the two names saying the same stretch
    plain = {"rope_scaling": {"rope_type": "default", "rope_theta": 1e4}, "rope_parameters": {"rope_theta": 1e4}}
    assert model_from_hf_config({**BASE, **plain}, "m").longest_context == 512
    assert model_from_hf_config({**BASE, "rope_scaling": None}, "m").longest_context == 512


def test_transformers_5s_rope_parameters_per_layer_type_stretch_as_vllm_reads_them():
    """{"full_attention": {yarn x4}, "sliding_attention": {default}}: read as no stretch (512)."""
    nested = {"full_attention": {**YARN, "rope_theta": 1e6}, "sliding_attention": {"rope_type": "default"}}
    assert model_from_hf_config({**BASE, "rope_parameters": nested}, "m").longest_context == 2048
    flat = {"full_attention": {"rope_type": "default"}, "sliding_attention": {"rope_type": "default"}}
    assert model_from_hf_config({**BASE, "rope_parameters": flat}, "m").longest_context == 512


def test_gemma_3s_rope_factor_does_not_stretch_its_positions_again():
    """Gemma 3's 131,072 positions are its stretched length (vLLM skips the factor for gemma3 model
    types): its linear factor of 8 allowed and sized 1,048,576 tokens, which vLLM refuses to start with."""
    gemma = {**BASE, "max_position_embeddings": 131072, "head_dim": 32, "sliding_window": 64,
             "sliding_window_pattern": 2, "rope_scaling": {"rope_type": "linear", "factor": 8.0}}
    assert model_from_hf_config({**gemma, "model_type": "gemma3_text"}, "m").longest_context == 131072
    whole = {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
             "text_config": {**gemma, "model_type": "gemma3_text"}}
    assert model_from_hf_config(whole, "m").longest_context == 131072
    # the neighbour: another model type's linear factor still stretches
    assert model_from_hf_config({**gemma, "model_type": "llama"}, "m").longest_context == 1048576


# -- fields that say one fact twice -----------------------------------------------------------------------------

@pytest.mark.parametrize("fields, said", [
    # num_experts_per_tok (2) was taken
    ({**MOE, "num_experts_per_tok": 2, "experts_per_token": 4},
     "num_experts_per_tok (2) and experts_per_token (4) give different numbers of experts a token runs"),
    # 999 replaced by 2 x 64 = 128
    ({**DEEPSEEK, "shared_expert_intermediate_size": 999},
     "shared_expert_intermediate_size (999) is not n_shared_experts x moe_intermediate_size (2 x 64 = 128)"),
    # the interval's 3 linear layers and 1 full were dropped for layer_types' 2 and 2
    ({**LINEAR, "full_attention_interval": 4, "layer_types": EVERY_OTHER},
     "layer_types and full_attention_interval (4) say different layers (full_attention_interval gives 3 "
     "linear_attention, 1 full_attention, layer_types 2 linear_attention, 2 full_attention)"),
    ({"sliding_window": 64, "sliding_window_pattern": 4, "layer_types": ["sliding_attention", "full_attention"] * 2},
     "layer_types and sliding_window_pattern (4) say different layers"),
    ({"sliding_window": 64, "use_sliding_window": False, "layer_types": ["sliding_attention", "full_attention"] * 2},
     "use_sliding_window is false, but layer_types lists 2 sliding_attention layers"),
])
def test_a_config_json_saying_one_fact_two_ways_is_refused_naming_both(fields, said):
    assert said in refused(fields)


def test_the_config_json_fields_that_agree_stay_accepted():
    gpt_oss = model_from_hf_config({**BASE, **MOE, "num_experts_per_tok": 4, "experts_per_token": 4}, "m")
    assert gpt_oss.num_experts_per_tok == 4  # gpt-oss's config.json gives both, alike
    assert model_from_hf_config({**BASE, **MOE, "experts_per_token": 4}, "m").num_experts_per_tok == 4
    deepseek = model_from_hf_config({**BASE, **DEEPSEEK, "shared_expert_intermediate_size": 128}, "m")
    assert deepseek.shared_expert_intermediate_size == 128
    qwen_next = model_from_hf_config({**BASE, **LINEAR, "full_attention_interval": 2, "layer_types": EVERY_OTHER}, "m")
    assert qwen_next.layer_types == tuple(EVERY_OTHER)
    gemma = ["sliding_attention", "full_attention"] * 2
    assert model_from_hf_config({**BASE, "sliding_window": 64, "sliding_window_pattern": 2, "layer_types": gemma},
                                "m").layer_types == tuple(gemma)
    qwen = {"sliding_window": 4096, "use_sliding_window": False, "layer_types": ["full_attention"] * 4}
    assert model_from_hf_config({**BASE, **qwen}, "m").sliding_window is None  # Qwen3's own config.json
    window = {"sliding_window": 64, "use_sliding_window": True, "layer_types": gemma}
    assert model_from_hf_config({**BASE, **window}, "m").sliding_window == 64


# -- calibration profiles ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("what, make, said", [
    ("a folder", lambda p, t: p.mkdir(), "is a folder, not a file"),
    ("a link to nothing", lambda p, t: p.symlink_to(t / "gone.json"), "is a link that leads nowhere, not a file"),
])
def test_a_calibration_profile_that_is_no_file_is_refused_not_skipped(tmp_path, monkeypatch, what, make, said):
    """The datasheet peaks were used without a word, as if `kvscope calibrate` had never run here."""
    from kvscope.app.lab.calibration import load_stored_calibration, profile_path

    monkeypatch.setenv("KVSCOPE_CACHE_DIR", str(tmp_path))
    path = profile_path("cpu-test-4cores")
    path.parent.mkdir(parents=True)
    assert load_stored_calibration("cpu-test-4cores") is None  # the neighbour: none stored, none used
    make(path, tmp_path)
    with pytest.raises(ConfigError) as caught:
        load_stored_calibration("cpu-test-4cores")
    assert str(caught.value).startswith(f"calibration profile {path}: {said}"), caught.value
    assert "run `kvscope calibrate` again" in str(caught.value)


# -- scenarios --------------------------------------------------------------------------------------------------

def test_a_simulated_scenario_whose_configurations_are_one_configuration_is_refused(tmp_path):
    """Both prefix caching on: the comparison ran, revealed a hit rate, and every difference was 0."""
    with pytest.raises(ConfigError) as caught:
        _scenario(tmp_path, "prefix-caching", "engine = { enable_prefix_caching = false }",
                  "engine = { enable_prefix_caching = true }")
    assert "'prefix caching off' and 'prefix caching on' are the same configuration" in str(caught.value)
    assert str(tmp_path / "s.toml") in str(caught.value) and "\n" not in str(caught.value)
    # the neighbours: the scenario as shipped, and one differing only in output_tokens
    shipped = load_scenario("prefix-caching")
    assert [c.label for c in shipped.configs] == ["prefix caching off", "prefix caching on"]
    longer = _scenario(tmp_path, "prefix-caching", "engine = { enable_prefix_caching = false }",
                       "engine = { enable_prefix_caching = true }\noutput_tokens = 64")
    assert longer.configs[0].output_tokens == 64


# -- workloads ------------------------------------------------------------------------------------------------

def test_a_shared_prefix_no_trace_row_can_hold_is_refused(tmp_path):
    """A trace of 100-token prompts with a 1,000-token shared prefix replayed every row as 1,001 tokens."""
    from kvscope.app.lab.presets import load_workload_file

    (tmp_path / "rows.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n0,100,10\n1,60,10\n")
    path = tmp_path / "w.toml"
    path.write_text('name = "w"\ntrace = "rows.csv"\nshared_prefix_fraction = 0.5\nshared_prefix_tokens = 100\n')
    with pytest.raises(ConfigError) as caught:
        load_workload_file(path)
    assert "shared_prefix_tokens (100) is not shorter than the longest prompt its trace" in str(caught.value)
    assert "rows.csv gives (100)" in str(caught.value)
    path.write_text('name = "w"\ntrace = "rows.csv"\nshared_prefix_fraction = 0.5\nshared_prefix_tokens = 99\n')
    assert load_workload_file(path).shared_prefix_tokens == 99  # the neighbour: a prefix the longest row holds


# -- hardware presets -----------------------------------------------------------------------------------------

def test_a_hardware_calibration_of_a_label_alone_is_refused():
    """[calibration] label = "fitted on our H100" and no figure: the datasheet peaks ran, and the summary
    said "simulated times: fitted on our H100" as if they had been fitted."""
    from kvscope.app.lab.presets import hardware_from_dict

    base = {"memory_bytes": 80 * 1024**3, "memory_bandwidth_bytes_per_s": 3e12, "peak_flops": {"bf16": 1e15}}
    for table in ({"label": "fitted on our H100"}, {"label": "fitted", "source": "our lab"}):
        with pytest.raises(ConfigError, match=r"^hw: calibration gives a label but no figure"):
            hardware_from_dict({**base, "calibration": table}, "hw", default_name="h")
    fitted = hardware_from_dict({**base, "calibration": {"label": "fitted", "flops_efficiency": 0.5}}, "hw", "h")
    assert fitted.calibration["flops_efficiency"] == 0.5 and fitted.calibration["label"] == "fitted"
    assert hardware_from_dict(base, "hw", "h").calibration["label"] == "datasheet peaks, uncalibrated"


def test_qwen_moes_decoder_sparse_step_leaves_the_other_layers_dense():
    """decoder_sparse_step 2 (every second layer holds the experts, as transformers builds Qwen2-MoE) was
    not read: every layer was sized with 8 experts; a step of 0 (transformers divides by it) was read as 1."""
    qwen = {**BASE, "model_type": "qwen2_moe", **MOE, "num_experts_per_tok": 2}
    assert model_from_hf_config({**qwen, "decoder_sparse_step": 2}, "m").num_dense_layers == 2
    assert model_from_hf_config({**qwen, "decoder_sparse_step": 2, "mlp_only_layers": [0, 1]},
                                "m").num_dense_layers == 3  # layers 0, 1 and 2: the union
    assert "decoder_sparse_step must be at least 1" in refused({**qwen, "decoder_sparse_step": 0})
    assert "decoder_sparse_step makes all 4 layers dense" in refused({**qwen, "decoder_sparse_step": 5})
    # the neighbour: Qwen's own configs give 1, every layer sparse
    assert model_from_hf_config({**qwen, "decoder_sparse_step": 1}, "m").num_dense_layers == 0


# -- tokenizer files ------------------------------------------------------------------------------------------

def test_named_chat_templates_without_a_default_are_refused_naming_them():
    """tokenizer_config.json's chat_template as a list of named templates, none of them "default"
    (transformers reads it as {name: template}): said as "must be the template's text, got NoneType"."""
    from types import SimpleNamespace

    from kvscope.app.lab.text_tokenizer import chat_tokenizer_for

    def loaded(template):
        tokenizer = SimpleNamespace(chat_template=template, eos_token_id=2, special_tokens_map={})
        return SimpleNamespace(tokenizer=tokenizer, hf_model=None, path=None, config=SimpleNamespace(name="m"))

    with pytest.raises(ConfigError) as caught:
        chat_tokenizer_for(loaded({"tool_use": "{{ messages }}", "rag": "{{ messages }}"}))
    said = str(caught.value)
    assert "names its templates ('tool_use', 'rag') but none 'default'" in said and "NoneType" not in said, said
    plain = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    assert chat_tokenizer_for(loaded({"default": plain, "tool_use": plain})).template is not None
