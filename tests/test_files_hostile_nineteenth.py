"""The nineteenth hostile pass over the files kvscope reads: real config.json files of checkpoint formats not met
before. Ultravox's text_model_id (its language model named, not given); DeciLM-7B's KV head count per layer;
Phi-4-mini-flash's SambaY layout (model_type phi4flash, mb_per_layer); LongCat-Flash's two attention blocks a
layer; LFM2's full_attn_idxs; Grok-2's residual_moe (a dense MLP beside its experts); MiniCPM3's latent attention, which
vLLM caches per head; Ouro's looped layers; a model folder of Mistral's
own format (params.json, no config.json). Each test failed before its fix; the consistent neighbours beside them pass.
scripts/hostile_inputs_nineteenth_files.py runs them through the command line."""

from __future__ import annotations

import json

import pytest

from kvscope.app.lab.models.config_json import load_hf_config, model_from_hf_config
from kvscope.app.lab.models.loader import check_model_directory
from kvscope.engine.config import ConfigError
from kvscope.engine.kv_layout import kv_bytes_per_token_of
from kvscope.engine.memory_math import kv_bytes_per_token, num_parameters

from test_files_hostile_thirteenth import BASE

# Ultravox v0.5's config.json (fixie-ai/ultravox-v0_5-llama-3_1-8b), cut to the fields kvscope reads
ULTRAVOX = {"architectures": ["UltravoxModel"], "model_type": "ultravox", "audio_model_id":
            "openai/whisper-large-v3-turbo", "text_model_id": "meta-llama/Llama-3.1-8B-Instruct", "hidden_size": 4096,
            "vocab_size": 128256, "stack_factor": 8, "torch_dtype": "bfloat16"}
# DeciLM-7B's (Deci/DeciLM-7B)
DECILM_7B = {"architectures": ["DeciLMForCausalLM"], "model_type": "deci", "hidden_size": 4096,
             "intermediate_size": 14336, "max_position_embeddings": 8192, "num_attention_heads": 32,
             "num_hidden_layers": 32, "num_key_value_heads_per_layer": [4, 4, 4, 4, 4, 2, 2, 2, 2, 2, 4, 2, 2, 2, 2, 2]
             + [1] * 16, "rope_scaling": {"type": "dynamic", "factor": 2.0}, "vocab_size": 32000}
# Phi-4-mini-flash-reasoning's (microsoft/Phi-4-mini-flash-reasoning)
PHI4_FLASH = {"architectures": ["Phi4FlashForCausalLM"], "model_type": "phi4flash", "hidden_size": 2560,
              "intermediate_size": 10240, "num_hidden_layers": 32, "num_attention_heads": 40,
              "num_key_value_heads": 20, "vocab_size": 200064, "max_position_embeddings": 262144,
              "sliding_window": 512, "mb_per_layer": 2, "mamba_d_state": 16, "mamba_expand": 2, "mamba_d_conv": 4,
              "tie_word_embeddings": True}
PARAMS = {"dim": 5120, "n_layers": 40, "head_dim": 128, "hidden_dim": 32768, "n_heads": 32, "n_kv_heads": 8,
          "vocab_size": 131072}  # Mistral Small 3.1's params.json


def read(cfg: dict):
    return model_from_hf_config(cfg, "m", label="config c.json")


def refused(cfg: dict, *said: str) -> str:
    with pytest.raises(ConfigError) as caught:
        read(cfg)
    text = str(caught.value)
    assert text.startswith("config c.json: ") and all(s in text for s in said), text
    return text


# -- Ultravox: its language model given by name ------------------------------------------------------------------

def test_ultravox_text_model_id_is_said_not_missing_fields():
    # was: "missing field(s) num_hidden_layers, num_attention_heads", the named model not said
    text = refused(ULTRAVOX, "text_model_id ('meta-llama/Llama-3.1-8B-Instruct') names the language model this one "
                             "wraps (Ultravox)", "give that model's config.json")
    assert "missing field" not in text


def test_ultravox_text_config_beside_text_model_id_is_not_sized():
    # was: sized as Llama 2's class defaults, 7.53 B parameters and 32 KV heads, for the Llama 3.1 8B (8 KV heads)
    # vLLM reads by name, never this text_config
    refused({**ULTRAVOX, "text_config": {"model_type": "llama", "vocab_size": 128256}},
            "text_model_id ('meta-llama/Llama-3.1-8B-Instruct')", "a text_config beside it is not read")


def test_ultravox_without_text_model_id_reads_its_text_config():
    model = read({**ULTRAVOX, "text_model_id": None, "text_config": {**BASE, "num_key_value_heads": 2}})
    assert (model.num_hidden_layers, model.num_key_value_heads) == (BASE["num_hidden_layers"], 2)


# -- layouts kvscope does not size -------------------------------------------------------------------------------

def test_decilm_kv_heads_per_layer_are_refused():
    # was: a KV head per attention head (32) on every layer, 8.05 B parameters for 7.04
    refused(DECILM_7B, "num_key_value_heads_per_layer ([4, 4, 4, 4, 4, 2,", "gives each layer its own KV head count "
            "(DeciLM), which kvscope does not size")


@pytest.mark.parametrize("fields", [{}, {"mb_per_layer": None}], ids=["as released", "mb_per_layer left out"])
def test_phi4_flash_is_refused(fields):
    # was: 32 layers of attention, each with its own KV cache, where half are Mamba and the rest share one
    refused({**PHI4_FLASH, **fields}, "model_type 'phi4flash' lays out Mamba layers and layers that reuse one KV "
                                      "cache (Phi-4-mini-flash's SambaY)")


def test_mb_per_layer_elsewhere_is_refused_and_0_is_read():
    refused({**BASE, "mb_per_layer": 2}, "mb_per_layer (2) lays out Mamba layers")
    assert read({**BASE, "mb_per_layer": 0}).num_hidden_layers == BASE["num_hidden_layers"]


# LongCat-Flash-Chat's (meituan-longcat/LongCat-Flash-Chat)
LONGCAT = {"architectures": ["LongcatFlashForCausalLM"], "model_type": "longcat_flash", "vocab_size": 131072,
           "hidden_size": 6144, "ffn_hidden_size": 12288, "expert_ffn_hidden_size": 2048, "num_layers": 28,
           "num_attention_heads": 64, "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64,
           "qk_nope_head_dim": 128, "v_head_dim": 128, "n_routed_experts": 512, "zero_expert_num": 256, "moe_topk": 12,
           "max_position_embeddings": 131072}
# LFM2-1.2B's as first released (LiquidAI/LFM2-1.2B): full_attn_idxs, no layer_types
LFM2 = {"architectures": ["Lfm2ForCausalLM"], "model_type": "lfm2", "block_ff_dim": 12288, "conv_L_cache": 3,
        "full_attn_idxs": [2, 5, 8, 10, 12, 14], "hidden_size": 2048, "max_position_embeddings": 128000,
        "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8, "vocab_size": 65536}


def test_longcat_flash_is_refused():
    # was: 3,251 B parameters for 560, and one latent block a layer where it has two (half its KV cache)
    refused(LONGCAT, "model_type 'longcat_flash' gives each layer two attention blocks, two dense MLPs and experts of "
                     "expert_ffn_hidden_size (LongCat-Flash), which kvscope does not size")


@pytest.mark.parametrize("layers", [[2, 5, 8, 10, 12, 14], []], ids=["6 of 16", "none"])
def test_lfm2_full_attn_idxs_is_refused(layers):
    # was: 16 attention layers, each with a KV cache, for LFM2-1.2B's 6 (or none)
    refused({**LFM2, "full_attn_idxs": layers}, f"full_attn_idxs ({layers}) lays out short-convolution layers between "
                                                "the attention layers it lists (LFM2)")


def test_lfm2_without_full_attn_idxs_is_all_attention():
    assert read({**LFM2, "full_attn_idxs": None}).num_hidden_layers == 16  # its class's default: every layer


# Grok-2's (xai-org/grok-2)
GROK2 = {"architectures": ["Grok1ForCausalLM"], "model_type": "git", "vocab_size": 131072, "hidden_size": 8192,
         "intermediate_size": 32768, "moe_intermediate_size": 16384, "max_position_embeddings": 131072,
         "num_experts_per_tok": 2, "num_local_experts": 8, "residual_moe": True, "num_attention_heads": 64,
         "num_key_value_heads": 8, "num_hidden_layers": 64, "head_dim": 128}


def test_grok2_residual_moe_counts_its_dense_mlp():
    # was: 217.97 B (63.36 B active) for its published 270 B (115 B active)
    model = read(GROK2)
    assert model.shared_expert_intermediate_size == 32768
    assert (round(num_parameters(model) / 1e9, 2), round(num_parameters(model, active=True) / 1e9, 2)) == \
        (269.51, 114.9)
    assert read({**GROK2, "residual_moe": False}).shared_expert_intermediate_size == 0
    refused({**GROK2, "residual_moe": "yes"}, "residual_moe must be true or false, got 'yes'")


# MiniCPM3-4B's (openbmb/MiniCPM3-4B)
MINICPM3 = {"architectures": ["MiniCPM3ForCausalLM"], "model_type": "minicpm3", "hidden_size": 2560,
            "intermediate_size": 6400, "num_hidden_layers": 62, "num_attention_heads": 40, "num_key_value_heads": 40,
            "kv_lora_rank": 256, "q_lora_rank": 768, "qk_nope_head_dim": 64, "qk_rope_head_dim": 32, "v_head_dim": 64,
            "vocab_size": 73448, "max_position_embeddings": 32768, "torch_dtype": "bfloat16"}


def test_minicpm3_latent_attention_is_cached_per_head():
    # was: a latent of 256 + 32 a token and layer (35,712 B a token) where vLLM's MiniCPM3Attention expands it and
    # caches every head's key and value (40 x 96, the value padded to the key's width): 952,320 B
    model = read(MINICPM3)
    assert (model.uses_mla, model.num_key_value_heads, model.head_dim) == (False, 40, 96)
    assert kv_bytes_per_token(model, "bf16") == 2 * 62 * 40 * 96 * 2 == 952_320
    # DeepSeek's own type (tied as MiniCPM3's class ties): the latent, as vLLM's MLA backend caches it
    latent = read({**MINICPM3, "model_type": "deepseek_v2", "tie_word_embeddings": True})
    assert latent.uses_mla and kv_bytes_per_token_of(latent, "bf16", 1, False) == 62 * (256 + 32) * 2
    # the weights stay the latent attention's: not the 5.67 B of 40 heads x 96 projections
    assert model.weights_bytes == num_parameters(latent) * 2 and round(num_parameters(latent) / 1e9, 2) == 4.07


def test_minicpm3_in_float32_is_left_to_be_served_in_16_bits():
    # a fixed weights size keeps as_served from serving a float32 checkpoint in 16 bits on a GPU: its weights are
    # counted instead (the per-head projections, 5.67 B), its KV cache still per head
    model = read({**MINICPM3, "torch_dtype": "float32"})
    assert (model.weights_bytes, model.weight_dtype, model.num_key_value_heads) == (None, "fp32", 40)


def test_ouro_looped_layers_are_refused_and_one_pass_is_read():
    # was: Ouro-1.4B's 24 layers sized once, where each runs 4 times with a KV cache a pass
    refused({**BASE, "model_type": "ouro", "total_ut_steps": 4}, "total_ut_steps (4) runs every layer that many "
            "times over, each pass with a KV cache of its own (Ouro)")
    assert read({**BASE, "model_type": "ouro", "total_ut_steps": 1}).num_hidden_layers == BASE["num_hidden_layers"]
    # left out: vLLM's OuroAttention (and its config class) take 4
    refused({**BASE, "model_type": "ouro"}, "model_type 'ouro' without total_ut_steps runs every layer 4 times over "
            "(its class's default), each pass with a KV cache of its own")


# -- a folder of Mistral's own format ----------------------------------------------------------------------------

SAID = "no config.json, but a params.json: Mistral's own format (vLLM reads it with --config-format mistral)"


def test_mistral_format_folder_is_named_for_math(tmp_path):
    (tmp_path / "params.json").write_text(json.dumps(PARAMS))
    with pytest.raises(ConfigError, match=r"^config .*: " + SAID.replace("(", r"\(").replace(")", r"\)")):
        load_hf_config(tmp_path)  # was: "config .../config.json: cannot read: no such file"


def test_mistral_format_folder_is_named_for_the_real_backend(tmp_path):
    (tmp_path / "params.json").write_text(json.dumps(PARAMS))
    with pytest.raises(ConfigError) as caught:
        check_model_directory(tmp_path)  # was: "model directory ...: missing config.json"
    assert str(caught.value).startswith(f"model directory {tmp_path}: {SAID}")


def test_a_folder_with_both_formats_reads_config_json(tmp_path):
    (tmp_path / "params.json").write_text(json.dumps(PARAMS))
    (tmp_path / "config.json").write_text(json.dumps(BASE))
    assert load_hf_config(tmp_path).num_hidden_layers == BASE["num_hidden_layers"]
