"""The seventeenth hostile pass over the files kvscope reads: real config.json files of architectures and
checkpoint formats not met before. A multimodal text_config written as its difference from the text model's
config class (llava-1.5-7b, llava-v1.6-mistral, Gemma 3 4B / 27B), or without its model_type; EXAONE 4's
sliding_window_pattern of letters; Nemotron-NAS's block_configs; compressed-tensors' older compression_config;
NVIDIA ModelOpt's quant_method and hf_quant_config.json; Snowflake Arctic's residual MLP and
moe_layer_frequency. Each refusal test failed before its fix; the consistent neighbours beside them pass.
scripts/hostile_inputs_seventeenth_files.py runs them through the command line."""

from __future__ import annotations

import json

import pytest

from kvscope.app.lab.models.config_json import load_hf_config, model_from_hf_config
from kvscope.engine.config import ConfigError
from kvscope.engine.memory_math import num_parameters

from cli_helper import cli
from test_files_hostile_thirteenth import BASE, refused

# real configs, cut to the fields kvscope reads (each as its Hugging Face release writes it)
LLAVA_15_7B = {"model_type": "llava", "text_config": {
    "architectures": ["LlamaForCausalLM"], "max_position_embeddings": 4096, "model_type": "llama",
    "torch_dtype": "float16", "vocab_size": 32064}, "torch_dtype": "float16", "vocab_size": 32064}
LLAVA_NEXT_MISTRAL = {"model_type": "llava_next", "text_config": {
    "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mistral", "num_key_value_heads": 8,
    "sliding_window": None, "torch_dtype": "bfloat16", "vocab_size": 32064}, "torch_dtype": "float16"}
GEMMA3_4B = {"model_type": "gemma3", "text_config": {
    "hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text", "num_hidden_layers": 34,
    "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "sliding_window": 1024}, "torch_dtype": "bfloat16"}
GEMMA3_27B = {"model_type": "gemma3", "text_config": {
    "head_dim": 128, "hidden_size": 5376, "intermediate_size": 21504, "model_type": "gemma3_text",
    "num_attention_heads": 32, "num_hidden_layers": 62, "num_key_value_heads": 16, "query_pre_attn_scalar": 168,
    "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "sliding_window": 1024}, "torch_dtype": "bfloat16"}
EXAONE4_32B = {"model_type": "exaone4", "head_dim": 128, "hidden_size": 5120, "intermediate_size": 27392,
               "layer_types": ["sliding_attention"] * 3 + ["full_attention"], "max_position_embeddings": 131072,
               "num_attention_heads": 40, "num_hidden_layers": 4, "num_key_value_heads": 8, "sliding_window": 4096,
               "sliding_window_pattern": "LLLG", "tie_word_embeddings": False, "vocab_size": 102400}
ARCTIC = {"model_type": "arctic", "hidden_size": 7168, "intermediate_size": 4864, "max_position_embeddings": 4096,
          "num_attention_heads": 56, "num_hidden_layers": 35, "num_key_value_heads": 8, "num_local_experts": 128,
          "num_experts_per_tok": 2, "moe_layer_frequency": 1, "parallel_attn_mlp_res": True, "use_residual": True,
          "vocab_size": 32000, "tie_word_embeddings": False}
CT_W8A8 = {"quant_method": "compressed-tensors", "format": "int-quantized", "config_groups": {"group_0": {
    "targets": ["Linear"], "weights": {"num_bits": 8, "type": "int", "strategy": "channel"}}}}


def read(cfg: dict):
    return model_from_hf_config(cfg, "m", label="config c.json")


# -- a multimodal text_config written as a diff from its config class -------------------------------------------

@pytest.mark.parametrize("cfg, shape", [
    (LLAVA_15_7B, (32, 32, 32, 128, 4096, 11008, 32064, 4096)),  # LlamaConfig's defaults
    (LLAVA_NEXT_MISTRAL, (32, 32, 8, 128, 4096, 14336, 32064, 32768)),  # MistralConfig's
    (GEMMA3_4B, (34, 8, 4, 256, 2560, 10240, 262208, 131072)),  # Gemma3TextConfig's
    # no model_type in the text_config: Gemma3Config builds a gemma3_text model (was read as a Llama)
    ({**GEMMA3_27B, "text_config": {k: v for k, v in GEMMA3_27B["text_config"].items() if k != "model_type"}},
     (62, 32, 16, 128, 5376, 21504, 262208, 131072)),
])
def test_a_text_config_reads_its_config_class_defaults(cfg, shape):
    """Refused as "text_config: missing field(s) num_hidden_layers, ..." (vLLM serves each)."""
    m = read(cfg)
    assert (m.num_hidden_layers, m.num_attention_heads, m.num_key_value_heads, m.head_dim, m.hidden_size,
            m.intermediate_size, m.vocab_size, m.max_position_embeddings) == shape


def test_gemma3_text_config_lays_out_five_windows_to_a_full_layer_and_ties_its_head():
    """Gemma 3 27B's text_config gives no sliding_window_pattern (its class's default is 6): every layer was
    sized as full attention, a KV cache 5x too big at 131,072 tokens; without a model_type its head was untied."""
    for cfg in (GEMMA3_27B, {**GEMMA3_27B, "text_config": {
            k: v for k, v in GEMMA3_27B["text_config"].items() if k != "model_type"}}):
        m = read(cfg)
        assert (m.count_layers("full_attention"), m.count_layers("sliding_attention")) == (10, 52)
        assert m.tie_word_embeddings and m.sliding_window == 1024
        assert round(num_parameters(m) / 1e9, 2) == 27.01  # the text model of gemma-3-27b-it
    assert round(num_parameters(read(GEMMA3_4B)) / 1e9, 2) == 3.88
    top = read({**GEMMA3_27B["text_config"], "vocab_size": 262208})  # a gemma3_text config.json of its own
    assert top.count_layers("full_attention") == 10


def test_a_given_field_still_wins_over_the_default():
    m = read({**LLAVA_15_7B, "text_config": {**LLAVA_15_7B["text_config"], "num_hidden_layers": 40,
                                             "hidden_size": 5120, "num_attention_heads": 40}})
    assert (m.num_hidden_layers, m.hidden_size, m.head_dim) == (40, 5120, 128)
    assert read({**LLAVA_NEXT_MISTRAL}).layer_types == ()  # sliding_window null: no window, not the default 4,096


def test_a_text_config_of_an_unknown_type_still_needs_its_fields():
    with pytest.raises(ConfigError, match=r"text_config: missing field\(s\) num_hidden_layers"):
        read({"model_type": "somevlm", "text_config": {"model_type": "somelm", "vocab_size": 10}})


# -- EXAONE 4's sliding_window_pattern of letters ---------------------------------------------------------------

def test_exaone4_pattern_of_letters_is_its_layout():
    """'LLLG' was "sliding_window_pattern must be a whole number from 0 to 65,536" (the real config.json)."""
    m = read(EXAONE4_32B)
    assert m.layer_types == ("sliding_attention",) * 3 + ("full_attention",)
    alone = read({k: v for k, v in EXAONE4_32B.items() if k != "layer_types"})  # the letters alone lay it out
    assert alone.layer_types == m.layer_types


@pytest.mark.parametrize("pattern, said", [
    ("LLXG", "sliding_window_pattern must be a whole number of layers or letters L (sliding window) and G (full "
             "attention) like 'LLLG', got 'LLXG'"),
    ("", "sliding_window_pattern must be a whole number of layers or letters L"),
    ("LLGG", "layer_types and sliding_window_pattern ('LLGG') say different layers"),
])
def test_exaone4_pattern_that_is_no_layout_is_refused(pattern, said):
    assert said in refused({**EXAONE4_32B, "sliding_window_pattern": pattern})


# -- Nemotron-NAS ---------------------------------------------------------------------------------------------

def test_nemotron_nas_block_configs_are_refused_by_name():
    """Sized with 64 KV heads on every layer (its n_heads_in_group 8 keeps 8, its no_op layers none)."""
    blocks = [{"attention": {"n_heads_in_group": 8, "no_op": False}, "ffn": {"ffn_mult": 2.625}},
              {"attention": {"n_heads_in_group": None, "no_op": True}, "ffn": {"ffn_mult": 1.3125}}]
    said = refused({"model_type": "nemotron-nas", "num_key_value_heads": None, "num_hidden_layers": 2,
                    "block_configs": blocks})
    assert "block_configs" in said and "gives each layer its own attention and MLP (Nemotron-NAS, DeciLM)" in said


# -- quantisation written elsewhere -------------------------------------------------------------------------------

def test_compression_config_is_read_as_quantization_config():
    """llm-compressor's older name: its int8 weights were sized as bf16 (2x)."""
    assert read({**BASE, "compression_config": CT_W8A8}).weight_dtype == "int8"
    assert read({**BASE, "compression_config": CT_W8A8, "quantization_config": {"quant_method": "fp8"}}
                ).weight_dtype == "fp8"  # vLLM reads quantization_config first
    assert "compression_config must be a table" in refused({"compression_config": [8]})


@pytest.mark.parametrize("algo, kind", [("FP8", "fp8"), ("FP8_PER_CHANNEL_PER_TOKEN", "fp8"), ("NVFP4", "int4")])
def test_modelopt_quant_algo_sizes_its_weights(algo, kind):
    """quant_method modelopt was "not one kvscope sizes"."""
    assert read({**BASE, "quantization_config": {"quant_method": "modelopt", "quant_algo": algo}}).weight_dtype == kind


def test_modelopt_algo_it_does_not_size_is_named():
    said = refused({"quantization_config": {"quant_method": "modelopt", "quant_algo": "W4A8_AWQ"}})
    assert "modelopt with quant_algo 'W4A8_AWQ': kvscope sizes its FP8 and NVFP4 weights" in said


def test_hf_quant_config_json_beside_config_json(tmp_path):
    """NVIDIA's FP8 checkpoints say their quantisation in hf_quant_config.json, which vLLM reads: sized bf16."""
    (tmp_path / "config.json").write_text(json.dumps(BASE))
    assert load_hf_config(tmp_path).weight_dtype == "bf16"  # none beside it: as config.json says
    aside = tmp_path / "hf_quant_config.json"
    aside.write_text(json.dumps({"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "FP8"}}))
    assert load_hf_config(tmp_path).weight_dtype == "fp8"
    for data, said in (([1], "expected ModelOpt's"), ({"quantization": {"quant_algo": "INT3"}}, "quant_algo 'INT3'")):
        aside.write_text(json.dumps(data))
        with pytest.raises(ConfigError, match="hf_quant_config.json") as caught:
            load_hf_config(tmp_path)
        assert said in str(caught.value)


# -- Snowflake Arctic -------------------------------------------------------------------------------------------

def test_arctic_counts_its_residual_mlp_and_its_expert_layers():
    """480 B was 473 B (the residual MLP left out); moe_layer_frequency 2 put experts on every layer."""
    assert round(num_parameters(read(ARCTIC)) / 1e9, 1) == 478.6
    assert round(num_parameters(read({**ARCTIC, "use_residual": False})) / 1e9, 1) == 473.2
    every_other = read({**ARCTIC, "moe_layer_frequency": 2})
    assert every_other.num_dense_layers == 18 and round(num_parameters(every_other) / 1e9, 1) == 236.7


# -- through the command line -----------------------------------------------------------------------------------

@pytest.mark.parametrize("cfg, said", [
    (GEMMA3_4B, "34 layers (5 full attention, 29 sliding window), 8 attention heads, 4 KV heads x head_dim 256"),
    (LLAVA_15_7B, "32 layers, 32 attention heads, 32 KV heads x head_dim 128"),
    ({**BASE, "compression_config": CT_W8A8}, "int8 (1 B) but 16-bit embeddings"),
])
def test_math_config_of_real_files(tmp_path, capsys, cfg, said):
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    rc, out, err = cli(capsys, "math", "--config", tmp_path)
    assert rc == 0 and said in out, err


# -- experts and a text_config that say two things ---------------------------------------------------------------

DEEPSEEK = {"model_type": "deepseek_v2", "n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 64}


@pytest.mark.parametrize("fields, said", [
    ({"num_experts": 8, "num_experts_per_tok": 0, "moe_intermediate_size": 64},
     "num_experts_per_tok must be at least 1 (the experts each token runs), got 0"),  # was "missing ..."
    ({**DEEPSEEK, "moe_layer_freq": 0}, "moe_layer_freq must be at least 1"),
    ({**DEEPSEEK, "moe_layer_freq": 8, "first_k_dense_replace": 1}, "moe_layer_freq makes all 4 layers dense"),
    ({"model_type": "qwen2_vl", "text_config": {**BASE, "num_hidden_layers": 2}},
     "num_hidden_layers (4) and text_config.num_hidden_layers (2) give the text model two shapes"),
])
def test_experts_and_text_config_that_say_two_things_are_refused(fields, said):
    assert said in refused(fields)


@pytest.mark.parametrize("fields, dense", [
    ({**DEEPSEEK, "moe_layer_freq": 1, "first_k_dense_replace": 1}, 1),
    ({**DEEPSEEK, "moe_layer_freq": 2}, 2),  # layers 0 and 2 hold the experts (vLLM: i % freq == 0); was 0
    ({**DEEPSEEK, "moe_layer_freq": 2, "first_k_dense_replace": 1}, 3),  # layer 2 alone
])
def test_deepseek_moe_layer_freq_leaves_dense_layers(fields, dense):
    assert read({**BASE, **fields}).num_dense_layers == dense


def test_a_text_config_alike_the_top_level_is_read():
    assert read({**BASE, "model_type": "qwen2_vl", "text_config": dict(BASE)}).num_hidden_layers == 4


# -- Granite 4.0 and LFM2's layer_types --------------------------------------------------------------------------

GRANITE_MICRO = {"model_type": "granitemoehybrid", "hidden_size": 2560, "intermediate_size": 8192,
                 "layer_types": ["attention"] * 40, "max_position_embeddings": 131072, "num_attention_heads": 40,
                 "num_experts_per_tok": 0, "num_hidden_layers": 40, "num_key_value_heads": 8,
                 "num_local_experts": 0, "shared_intermediate_size": 8192, "tie_word_embeddings": True,
                 "vocab_size": 100352}


def test_granite_micro_is_forty_full_attention_layers():
    """Refused as "layer_types[0] is 'attention'; each layer is one of full_attention, ..." (vLLM serves it)."""
    m = read(GRANITE_MICRO)
    assert m.count_layers("full_attention") == 40 and m.num_experts is None
    assert round(num_parameters(m) / 1e9, 2) == 3.40


def test_granite_shared_mlp_beside_experts():
    """shared_intermediate_size was dropped: the shared MLP on every layer left out."""
    cfg = {**BASE, "model_type": "granitemoeshared", "intermediate_size": 64, "num_local_experts": 8,
           "num_experts_per_tok": 2, "shared_intermediate_size": 256}
    m = read(cfg)
    assert (m.moe_intermediate_size, m.shared_expert_intermediate_size) == (64, 256)


@pytest.mark.parametrize("kinds, said", [
    (["mamba", "attention"] * 2, "layer_types lays out Mamba layers (Granite 4.0-H), which kvscope does not size"),
    (["conv", "full_attention"] * 2, "layer_types lays out short-convolution layers (LFM2), which kvscope does not"),
])
def test_layer_types_of_recurrent_layers_are_named(kinds, said):
    assert said in refused({"layer_types": kinds})


# -- Llama 3.2 Vision; Cohere 2's default pattern ------------------------------------------------------------------

def test_llama_vision_cross_attention_layers_are_refused_by_name():
    """Its 8 cross-attention layers (the image's KV) were sized as text self-attention."""
    said = refused({"model_type": "mllama_text_model", "cross_attention_layers": [1, 3]})
    assert "cross_attention_layers ([1, 3]) has cross-attention layers" in said and "Llama 3.2 Vision" in said


def test_cohere2_without_its_pattern_slides_three_layers_of_four():
    """Cohere2Config's sliding_window_pattern is 4: it was read as every other layer sliding."""
    m = read({**BASE, "model_type": "cohere2", "num_hidden_layers": 8, "sliding_window": 64})
    assert m.layer_types == ("sliding_attention",) * 3 + ("full_attention",) + ("sliding_attention",) * 3 + (
        "full_attention",)
    given = read({**BASE, "model_type": "cohere2", "num_hidden_layers": 8, "sliding_window": 64,
                  "sliding_window_pattern": 2})  # a pattern given is taken
    assert given.count_layers("full_attention") == 4


# -- ungated MLPs, PLaMo 2's Mamba layers ---------------------------------------------------------------------------

@pytest.mark.parametrize("cfg, billions", [
    (dict(model_type="apertus", hidden_size=4096, intermediate_size=21504, num_hidden_layers=32, num_attention_heads=32,
          num_key_value_heads=8, vocab_size=131072, max_position_embeddings=65536), 8.05),  # was 10.87
    (dict(model_type="arcee", hidden_size=2560, intermediate_size=18432, num_hidden_layers=36, num_attention_heads=20,
          num_key_value_heads=4, head_dim=128, vocab_size=128004, max_position_embeddings=65536), 4.62),  # was 6.32
])
def test_ungated_mlps_of_apertus_and_arcee(cfg, billions):
    assert round(num_parameters(read({**cfg, "tie_word_embeddings": False})) / 1e9, 2) == billions


def test_plamo2_mamba_layers_are_refused_and_a_switched_off_mamba_is_not():
    assert "mamba_enabled (True) lays out Mamba layers (PLaMo 2)" in refused({"mamba_enabled": True, "mamba_step": 2})
    assert read({**BASE, "mamba_enabled": False}).num_hidden_layers == 4


def _safetensors(path, dtype: str, width: int) -> None:
    """A safetensors file of one 4-element tensor of dtype (width bytes an element)."""
    header = json.dumps({"w.weight": {"dtype": dtype, "shape": [4], "data_offsets": [0, 4 * width]}}).encode()
    path.write_bytes(len(header).to_bytes(8, "little") + header + bytes(4 * width))


def test_hf_quant_config_json_over_unquantised_weights_is_refused(tmp_path):
    """FP8 said beside BF16 weights: sized at a byte each, where the files hold two."""
    (tmp_path / "config.json").write_text(json.dumps(BASE))
    (tmp_path / "hf_quant_config.json").write_text(json.dumps({"quantization": {"quant_algo": "FP8"}}))
    _safetensors(tmp_path / "model.safetensors", "F8_E4M3", 1)
    assert load_hf_config(tmp_path).weight_dtype == "fp8"
    (tmp_path / "model.safetensors").unlink()
    _safetensors(tmp_path / "model.safetensors", "BF16", 2)
    with pytest.raises(ConfigError, match=r"stored as modelopt \(F8_E4M3 or U8 tensors\), but the weight files hold "
                                          r"only BF16"):
        load_hf_config(tmp_path)


# -- Phi-3-small's MLP; Llama 4's layer_types -----------------------------------------------------------------------

def test_phi3_small_ff_intermediate_size_is_its_mlp():
    """Read as 4 x hidden_size: 8.2 B parameters for 7.4 B."""
    cfg = {"model_type": "phi3small", "ff_intermediate_size": 14336, "hidden_size": 4096,
           "max_position_embeddings": 8192, "num_attention_heads": 32, "num_hidden_layers": 32,
           "num_key_value_heads": 8, "tie_word_embeddings": True, "vocab_size": 100352}
    assert round(num_parameters(read(cfg)) / 1e9, 2) == 7.39
    assert "intermediate_size (256) and ff_intermediate_size (512) are two names of one field" in refused(
        {"ff_intermediate_size": 512})


def test_llama4_layer_types_of_chunked_attention_are_full_attention():
    """transformers 4.54+ writes them: refused as "layer_types[0] is 'chunked_attention'"."""
    m = read({**BASE, "model_type": "llama4_text", "attention_chunk_size": 8192,
              "layer_types": ["chunked_attention"] * 3 + ["full_attention"]})
    assert m.count_layers("full_attention") == 4
    assert "layer_types[0] is 'local'" in refused({"layer_types": ["local"] * 4})  # other names still refused


# -- AMD Quark and Intel AutoRound -----------------------------------------------------------------------------------

@pytest.mark.parametrize("quant, kind", [
    ({"quant_method": "quark", "global_quant_config": {"weight": {"dtype": "fp8_e4m3", "qscheme": "per_tensor"}}},
     "fp8"),
    ({"quant_method": "quark", "global_quant_config": {"weight": [{"dtype": "fp4", "group_size": 32}]}}, "int4"),
    ({"quant_method": "auto-round", "bits": 4, "group_size": 128, "packing_format": "auto_round:auto_gptq"}, "int4"),
])
def test_quark_and_auto_round_are_sized(quant, kind):
    """Each was "quant_method ... is not one kvscope sizes" (vLLM serves them)."""
    assert read({**BASE, "quantization_config": quant}).weight_dtype == kind


@pytest.mark.parametrize("quant, said", [
    ({"quant_method": "quark", "global_quant_config": {"weight": {"dtype": "bfp16"}}},
     "quark with global_quant_config.weight {'dtype': 'bfp16'}: kvscope sizes its weights of dtype fp8_e4m3"),
    ({"quant_method": "quark"}, "quark with global_quant_config.weight not given"),
    ({"quant_method": "auto-round", "bits": 2}, "auto-round with bits 2: kvscope sizes 4- and 8-bit weights"),
])
def test_quark_and_auto_round_weights_it_does_not_size_are_named(quant, said):
    assert said in refused({"quantization_config": quant})


def test_qwen_omni_thinker_text_config_is_read():
    """Was "missing field(s) num_hidden_layers, num_attention_heads, hidden_size, vocab_size"."""
    text = dict(model_type="qwen2_5_omni_text", hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                num_attention_heads=28, num_key_value_heads=4, vocab_size=152064, max_position_embeddings=32768)
    omni = {"model_type": "qwen2_5_omni", "thinker_config": {"text_config": text}, "talker_config": {"hidden_size": 8}}
    m = read(omni)
    assert (m.num_hidden_layers, m.num_key_value_heads) == (28, 4) and round(num_parameters(m) / 1e9, 2) == 7.62
    with pytest.raises(ConfigError, match=r"^config c.json: thinker_config.text_config: num_attention_heads must be "
                                          "greater than 0"):
        read({**omni, "thinker_config": {"text_config": {**text, "num_attention_heads": 0}}})


@pytest.mark.parametrize("model_type", ["llama", "mistral", "qwen2", "gemma", "gemma2", "gemma3_text",
                                        # the eighteenth pass's (transformers imported once, here)
                                        "qwen2_vl_text", "qwen2_5_vl_text", "qwen3_vl_text"])
def test_the_text_config_defaults_are_transformers_own(model_type):
    """config_names keeps the text models' config-class defaults by hand (reading them from transformers would
    import it, seconds, for `kvscope math`): they must be the ones transformers fills a text_config with."""
    from transformers import CONFIG_MAPPING

    from kvscope.app.lab.models.config_names import TEXT_CONFIG_DEFAULTS

    theirs = CONFIG_MAPPING[model_type]().to_dict()
    assert {key: theirs.get(key) for key in TEXT_CONFIG_DEFAULTS[model_type]} == TEXT_CONFIG_DEFAULTS[model_type]
