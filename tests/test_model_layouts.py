"""Today's attention layouts read from config.json (the fields as published), and one clear error
for every bad or contradictory layer field."""

import pytest

from kvscope.app.lab.models.config_json import model_from_hf_config
from kvscope.app.lab.presets import load_model
from kvscope.engine.config import ConfigError, ModelConfig

BASE = {"hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 8, "num_attention_heads": 16,
        "num_key_value_heads": 4, "head_dim": 128, "vocab_size": 32000, "torch_dtype": "bfloat16"}


def read(cfg: dict, name: str = "model") -> ModelConfig:
    return model_from_hf_config(cfg, name)


def test_gpt_oss_layer_types_and_window():
    oss = read({"model_type": "gpt_oss", "hidden_size": 2880, "intermediate_size": 2880, "num_hidden_layers": 24,
                "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64, "vocab_size": 201088,
                "sliding_window": 128, "layer_types": ["sliding_attention", "full_attention"] * 12,
                "num_local_experts": 32, "num_experts_per_tok": 4, "quantization_config": {"quant_method": "mxfp4"}})
    assert oss.count_layers("sliding_attention") == oss.count_layers("full_attention") == 12
    assert oss.sliding_window == 128
    assert (oss.num_experts, oss.num_experts_per_tok, oss.moe_intermediate_size) == (32, 4, 2880)
    assert oss.weight_dtype == "int4"  # MXFP4 experts


def test_gemma_2_alternates_and_gemma_3_repeats_its_pattern():
    gemma2 = read({**BASE, "model_type": "gemma2", "num_hidden_layers": 42, "sliding_window": 4096})
    assert gemma2.layer_types[:2] == ("sliding_attention", "full_attention") and gemma2.count_layers(
        "sliding_attention") == 21
    gemma3 = read({"model_type": "gemma3", "text_config": {
        **BASE, "model_type": "gemma3_text", "num_hidden_layers": 62, "sliding_window": 1024,
        "sliding_window_pattern": 6}})
    assert gemma3.count_layers("full_attention") == 10 and gemma3.count_layers("sliding_attention") == 52
    assert gemma3.layer_types[5] == "full_attention" and gemma3.sliding_window == 1024


def test_a_window_that_is_switched_off_or_unknown_is_no_layout():
    qwen2 = read({**BASE, "model_type": "qwen2", "sliding_window": 131072, "use_sliding_window": False})
    assert qwen2.layer_types == () and qwen2.sliding_window is None
    mistral = read({**BASE, "model_type": "mistral", "sliding_window": 4096})  # Mistral 7B v0.1: every layer
    assert mistral.count_layers("sliding_attention") == 8


def test_qwen_hybrids_from_full_attention_interval():
    qwen35 = read({**BASE, "model_type": "qwen3_5_text", "hidden_size": 5120, "num_hidden_layers": 64,
                   "num_attention_heads": 24, "head_dim": 256, "full_attention_interval": 4,
                   "linear_num_key_heads": 16, "linear_num_value_heads": 48, "linear_key_head_dim": 128,
                   "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "mamba_ssm_dtype": "float32"})
    assert qwen35.count_layers("full_attention") == 16 and qwen35.layer_types[3] == "full_attention"
    # conv (2 x 16 x 128 + 48 x 128) x 3 x 2 B + recurrent 48 x 128 x 128 x 4 B
    assert qwen35.linear_state_bytes == 3_207_168
    assert qwen35.linear_state_bytes == load_model("qwen3.6-27b-fp8").linear_state_bytes
    next80 = read({**BASE, "model_type": "qwen3_next", "num_hidden_layers": 48, "num_key_value_heads": 2,
                   "head_dim": 256, "full_attention_interval": 4, "linear_num_key_heads": 16,
                   "linear_num_value_heads": 32, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
                   "linear_conv_kernel_dim": 4, "num_experts": 512, "num_experts_per_tok": 10,
                   "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512})
    assert next80.linear_state_bytes == 1_097_728 == load_model("qwen3-next-80b-a3b").linear_state_bytes
    assert next80.count_layers("linear_attention") == 36


def test_deepseek_latent_attention_and_experts():
    v3 = read({"model_type": "deepseek_v3", "hidden_size": 7168, "intermediate_size": 18432,
               "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_attention_heads": 128,
               "num_key_value_heads": 128, "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8,
               "first_k_dense_replace": 3, "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_nope_head_dim": 128,
               "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 129280, "torch_dtype": "bfloat16",
               "quantization_config": {"quant_method": "fp8"}}, "deepseek-v3")
    preset = load_model("deepseek-v3")
    for field in ("kv_lora_rank", "qk_rope_head_dim", "q_lora_rank", "v_head_dim", "head_dim", "num_experts",
                  "num_experts_per_tok", "moe_intermediate_size", "shared_expert_intermediate_size",
                  "num_dense_layers", "weight_dtype"):
        assert getattr(v3, field) == getattr(preset, field), field
    assert v3.uses_mla and v3.head_dim == 192


def test_mixtral_experts_are_its_intermediate_size_and_compressed_tensors_fp8_is_fp8():
    mixtral = read({**BASE, "model_type": "mixtral", "num_local_experts": 8, "num_experts_per_tok": 2})
    assert mixtral.moe_intermediate_size == mixtral.intermediate_size and mixtral.num_dense_layers == 0
    fp8 = read({**BASE, "quantization_config": {"quant_method": "compressed-tensors", "config_groups": {
        "group_0": {"weights": {"num_bits": 8, "type": "float"}}}}})
    assert fp8.weight_dtype == "fp8"


def test_every_new_preset_loads_with_its_layout():
    assert load_model("gemma-3-27b").count_layers("sliding_attention") == 52
    assert load_model("gpt-oss-120b").count_layers("full_attention") == 18
    assert load_model("qwen3-next-80b-a3b").count_layers("full_attention") == 12
    assert load_model("deepseek-v3").uses_mla
    assert load_model("llama-3.1-8b").layer_types == ()


# -- one clear error per bad or contradictory field --------------------------------------------------


def model(**fields) -> ModelConfig:
    return ModelConfig(name="m", num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2, head_dim=64,
                       hidden_size=512, intermediate_size=1024, vocab_size=1000, **fields)


@pytest.mark.parametrize("fields, message", [
    ({"layer_types": ["full_attention"] * 3}, "layer_types lists 3 layers but num_hidden_layers is 4"),
    ({"layer_types": ["full_attention"] * 3 + ["chunked_attention"]},
     r"layer_types\[3\] is 'chunked_attention'; each layer is one of full_attention, sliding_attention, "
     "linear_attention"),
    ({"layer_types": "full_attention"}, "layer_types must be a list"),
    ({"layer_types": ["sliding_attention", "full_attention"] * 2}, "sliding_window is missing: layer_types has 2 "
                                                                     "sliding_attention layers"),
    ({"sliding_window": 4096}, "sliding_window is set but no layer is sliding_attention"),
    ({"layer_types": ["linear_attention"] * 3 + ["full_attention"]}, "linear_state_bytes is missing"),
    ({"linear_state_bytes": 1000}, "linear_state_bytes is set but no layer is linear_attention"),
    ({"layer_types": ["linear_attention"] * 4, "linear_state_bytes": 1000}, "no attention layer"),
    ({"kv_lora_rank": 512}, "kv_lora_rank is set without qk_rope_head_dim"),
    ({"kv_lora_rank": 512, "qk_rope_head_dim": 64}, r"qk_rope_head_dim \(64\) must be less than head_dim \(64\)"),
    ({"num_experts": 8}, "missing num_experts_per_tok, moe_intermediate_size"),
    ({"num_experts": 8, "num_experts_per_tok": 16, "moe_intermediate_size": 256}, "num_experts_per_tok \\(16\\) is more"),
    ({"num_dense_layers": 1}, "describe a mixture of experts"),
    ({"num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 256, "num_dense_layers": 5},
     r"num_dense_layers \(5\) is more than num_hidden_layers \(4\)"),
    ({"sliding_window": 0, "layer_types": ["sliding_attention"] * 4}, "sliding_window must be greater than 0"),
])
def test_bad_layer_fields_get_one_clear_error(fields, message):
    with pytest.raises(ConfigError, match=message) as raised:
        model(**fields)
    assert str(raised.value).startswith("model 'm': ") and "\n" not in str(raised.value)


def test_config_json_layout_errors_name_the_file_and_field():
    with pytest.raises(ConfigError, match=r"^config q35: linear_attention layers need linear_num_value_heads"):
        read({**BASE, "full_attention_interval": 4, "linear_num_key_heads": 16, "linear_key_head_dim": 128,
              "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4}, "q35")
    with pytest.raises(ConfigError, match="full_attention_interval must be a whole number of layers > 0, got 0"):
        read({**BASE, "full_attention_interval": 0})
    # (chunked_attention, Llama 4's, is sized as full attention since the seventeenth pass: a name no model has)
    with pytest.raises(ConfigError, match=r"^config m: layer_types\[1\] is 'local_attention'"):
        read({**BASE, "num_hidden_layers": 2, "layer_types": ["full_attention", "local_attention"]}, "m")


def test_llama_4s_chunked_local_attention_is_sized_as_full_attention_as_vllm_does_by_default():
    """vLLM turns its hybrid allocator off for chunked local attention unless an environment variable
    allows it, so every Llama 4 layer holds the whole context: 48 layers x 8 KV heads x 128 x 2 x 2 B."""
    from kvscope.app.lab.models.config_json import model_from_hf_config
    from kvscope.engine.memory_math import kv_bytes_per_token

    text = {"model_type": "llama4_text", "attention_chunk_size": 8192, "head_dim": 128, "hidden_size": 5120,
            "intermediate_size": 8192, "intermediate_size_mlp": 16384, "max_position_embeddings": 10485760,
            "num_attention_heads": 40, "num_hidden_layers": 48, "num_key_value_heads": 8, "num_local_experts": 16,
            "num_experts_per_tok": 1, "vocab_size": 202048}
    model = model_from_hf_config({"model_type": "llama4", "torch_dtype": "bfloat16", "text_config": text}, "scout")
    assert set(model.layer_types) <= {"full_attention"}  # () for all full attention
    assert kv_bytes_per_token(model, "bf16") == 2 * 48 * 8 * 128 * 2


def test_an_mlp_without_a_gate_is_counted_as_its_two_matrices():
    """GPT-2, StarCoder, Falcon, OPT, ... project up and down, with no gate: counted as three matrices,
    GPT-2 small came to 152 M parameters (it has 124.4 M) and StarCoder's weights to 43.6 GB (about 31)."""
    from kvscope.engine.memory_math import activation_peak_bytes, num_parameters

    gpt2 = model_from_hf_config({"model_type": "gpt2", "n_layer": 12, "n_head": 12, "n_embd": 768, "n_positions": 1024,
                                 "vocab_size": 50257, "torch_dtype": "float32"}, "gpt2")
    assert not gpt2.gated_mlp and abs(num_parameters(gpt2) / 124_439_808 - 1) < 0.01  # position embeddings, biases
    starcoder = model_from_hf_config({"model_type": "gpt_bigcode", "n_layer": 40, "n_head": 48, "n_embd": 6144,
                                      "n_inner": 24576, "n_positions": 8192, "vocab_size": 49152,
                                      "multi_query": True}, "starcoder")
    assert starcoder.num_key_value_heads == 1 and abs(num_parameters(starcoder) / 15.5e9 - 1) < 0.01
    llama = model_from_hf_config({"model_type": "llama", "num_hidden_layers": 12, "num_attention_heads": 12,
                                  "hidden_size": 768, "intermediate_size": 3072, "vocab_size": 50257,
                                  "torch_dtype": "float32"}, "llama")
    assert llama.gated_mlp and num_parameters(llama) - num_parameters(gpt2) == 12 * 768 * 3072 + 50257 * 768
    # vLLM's profiled MLP peak: gate/up and their product (3 x I) gated, up and its activation (2 x I) not
    mlp_peak = activation_peak_bytes(llama, 1, 8192, 1) - activation_peak_bytes(gpt2, 1, 8192, 1)
    assert mlp_peak == 8192 * 3072 * 4  # one I-wide fp32 tensor a token fewer
