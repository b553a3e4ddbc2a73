"""The nineteenth hostile pass's cases (2026-11-29): the FILES kvscope reads, for scripts/hostile_inputs.py; every name
begins "files19: " (`--only files19` runs them). Real config.json files of checkpoint formats no pass had met, each
found by comparing kvscope's reading with the architecture's own: Ultravox's text_model_id (its language model named,
its shape fetched by vLLM from that model's own config.json); DeciLM-7B's num_key_value_heads_per_layer (a KV head
count per layer); Phi-4-mini-flash's SambaY layout (model_type phi4flash, mb_per_layer: Mamba layers, and a second
half whose attention layers reuse one KV cache); LongCat-Flash (two latent-attention blocks and two dense MLPs a
layer, experts of expert_ffn_hidden_size beside zero experts); LFM2's original full_attn_idxs (its attention layers
among short convolutions, where later files give layer_types); Grok-2's residual_moe (a dense MLP of intermediate_size
beside its experts on every layer); MiniCPM3's latent attention, which vLLM expands and caches per head (its MLA cache
is DeepSeek's, Kimi's and LongCat's alone); and a model folder of Mistral's own format (params.json beside
consolidated.safetensors, no config.json).

Before the fixes: Ultravox v0.5's config.json (Llama 3.1 8B inside) was "missing field(s) num_hidden_layers,
num_attention_heads", the named model not said, and with a text_config of {"model_type": "llama"} beside its
text_model_id it was sized without a word as Llama 2's class defaults: 7.53 B parameters and 32 KV heads (512 KiB of
KV cache a token) for a model of 8.0 B and 8 KV heads (128 KiB), where vLLM reads the named model's file and never
that text_config; DeciLM-7B was sized with a KV head per attention head (32) on every layer, 8.05 B parameters for
7.04, where its layers keep 4, 2 or 1; Phi-4-mini-flash was sized as 32 layers of attention, each with its own KV
cache; LongCat-Flash was sized at 3,251 B parameters for 560 (its 512 experts as ffn_hidden_size wide, 12,288 for
2,048) with half its KV cache (one block a layer); LFM2-1.2B's 6 attention layers of 16 were sized as 16, each with a
KV cache (2.7x); Grok-2 was sized at 217.97 B parameters (63.36 B active) for its 270 B (115 B active), the dense MLP
beside its experts left out; MiniCPM3-4B's KV cache was sized as its 288-wide latent, 35 KiB a token for the 930 KiB
of its 40 heads x 96 that vLLM keeps (26.7x); Ouro-1.4B was sized as its 24 layers, a quarter of the KV cache of its 4
passes over them; a folder of Mistral's format was "config.json: cannot read: no such file" (math) and "missing
config.json" (run), what the folder holds and what to give not said. Every case's expect is the correct behaviour.
"""

from __future__ import annotations

import json
from pathlib import Path

from hostile_fixtures import PYTHON_WORDS, SMALL_LLAMA, config_json_cases, config_shape_cases, pass_cases

NAME = "files19: "  # every case's name starts so: `--only files19` runs this pass's

# Ultravox v0.5's config.json (fixie-ai/ultravox-v0_5-llama-3_1-8b), cut to what is read: its language model named
_ULTRAVOX = {"architectures": ["UltravoxModel"], "model_type": "ultravox", "audio_model_id":
             "openai/whisper-large-v3-turbo", "text_model_id": "meta-llama/Llama-3.1-8B-Instruct", "hidden_size": 4096,
             "vocab_size": 128256, "stack_factor": 8, "projector_act": "swiglu", "torch_dtype": "bfloat16",
             "num_hidden_layers": None, "num_attention_heads": None, "num_key_value_heads": None,
             "intermediate_size": None, "max_position_embeddings": None}  # null: absent, as transformers reads it
_DECILM_KV = [4, 4, 4, 4]  # DeciLM-7B's are [4, 4, 4, 4, 4, 2, 2, 2, 2, 2, 4, 2, ..., 1, 1]: cut to the 4 layers here
_SAMBAY = "lays out Mamba layers and layers that reuse one KV cache (Phi-4-mini-flash's SambaY)"


def nineteenth_file_cases(d: Path, Case, write) -> list:
    return pass_cases(d / "nineteenth", (_config_cases, _shape_cases, _mistral_folder_cases), Case, write)


# -- config.json: refusals and their neighbours ------------------------------------------------------------------

# (what, fields over SMALL_LLAMA, what the refusal must say); None: accepted
_CONFIGS = [
    ("Ultravox's text_model_id (its language model named, no shape given)", _ULTRAVOX,
     ("text_model_id ('meta-llama/Llama-3.1-8B-Instruct') names the language model this one wraps (Ultravox)",
      "give that model's config.json")),
    # was: sized as Llama 2's class defaults (7.53 B, 32 KV heads) for the Llama 3.1 8B vLLM reads by name
    ("Ultravox's text_model_id beside a text_config of its class alone",
     {**_ULTRAVOX, "text_config": {"model_type": "llama", "vocab_size": 128256}},
     ("text_model_id ('meta-llama/Llama-3.1-8B-Instruct') names the language model",
      "a text_config beside it is not read")),
    ("Ultravox's text_model_id null beside a whole text_config",
     {**_ULTRAVOX, "text_model_id": None, "text_config": {**SMALL_LLAMA}}, None),
    # was: a KV head per attention head on every layer (DeciLM-7B: 32 for its 4, 2 or 1)
    ("DeciLM's num_key_value_heads_per_layer",
     {"model_type": "deci", "num_key_value_heads": None, "num_key_value_heads_per_layer": _DECILM_KV},
     ("num_key_value_heads_per_layer ([4, 4, 4, 4]) gives each layer its own KV head count (DeciLM), which kvscope "
      "does not size",)),
    ("Phi-4-mini-flash's model_type phi4flash and mb_per_layer",
     {"model_type": "phi4flash", "mb_per_layer": 2, "mamba_d_state": 16, "sliding_window": 512},
     (f"model_type 'phi4flash' {_SAMBAY}",)),
    ("Phi-4-mini-flash's model_type phi4flash (mb_per_layer left at its class's 2)", {"model_type": "phi4flash"},
     (f"model_type 'phi4flash' {_SAMBAY}",)),
    ("mb_per_layer on another model type", {"mb_per_layer": 2}, (f"mb_per_layer (2) {_SAMBAY}",)),
    ("mb_per_layer 0", {"mb_per_layer": 0}, None),
    # was: Ouro-1.4B's 24 layers, each run 4 times with a KV cache a pass, sized as 24 (a quarter of its cache)
    ("Ouro's total_ut_steps (its layers looped)", {"model_type": "ouro", "total_ut_steps": 4},
     ("total_ut_steps (4) runs every layer that many times over, each pass with a KV cache of its own (Ouro)",)),
    ("total_ut_steps 1 (no loop)", {"model_type": "ouro", "total_ut_steps": 1}, None),
    ("Ouro without total_ut_steps (its class's and vLLM's 4)", {"model_type": "ouro"},
     ("model_type 'ouro' without total_ut_steps runs every layer 4 times over (its class's default)",)),
    ("residual_moe 'yes'", {"residual_moe": "yes"}, ("residual_moe must be true or false, got 'yes'",)),
    # was: 3,251 B parameters for 560 (its experts sized as ffn_hidden_size, not expert_ffn_hidden_size) and half its
    # KV cache (one latent-attention block a layer, where it has two)
    ("LongCat-Flash's two attention blocks a layer (model_type longcat_flash)",
     {"model_type": "longcat_flash", "num_hidden_layers": None, "num_layers": 4, "ffn_hidden_size": 256,
      "expert_ffn_hidden_size": 64, "n_routed_experts": 8, "zero_expert_num": 4, "moe_topk": 2, "kv_lora_rank": 32,
      "q_lora_rank": 48, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16, "intermediate_size": None},
     ("model_type 'longcat_flash' gives each layer two attention blocks, two dense MLPs and experts of "
      "expert_ffn_hidden_size (LongCat-Flash), which kvscope does not size",)),
    # was: LFM2-1.2B's 6 attention layers of 16 sized as 16, each with a KV cache (2.7x)
    ("LFM2's full_attn_idxs (the attention layers among its convolutions)", {"model_type": "lfm2",
     "full_attn_idxs": [1, 3], "conv_L_cache": 3, "block_ff_dim": 384},
     ("full_attn_idxs ([1, 3]) lays out short-convolution layers between the attention layers it lists (LFM2)",)),
    ("LFM2's full_attn_idxs of no layer (every layer a convolution)", {"model_type": "lfm2", "full_attn_idxs": []},
     ("full_attn_idxs ([]) lays out short-convolution layers",)),
    ("LFM2's full_attn_idxs null (every layer attention, its class's default)",
     {"model_type": "lfm2", "full_attn_idxs": None}, None),
]


def _config_cases(f: Path, Case, write) -> list:
    return config_json_cases(f, Case, write, SMALL_LLAMA, _CONFIGS, prefix=NAME)


# -- config.json: read, and the shape math says ------------------------------------------------------------------

# Grok-2's config.json (xai-org/grok-2), cut to what is read: a dense MLP beside its experts on every layer
_GROK2 = {"architectures": ["Grok1ForCausalLM"], "model_type": "git", "vocab_size": 131072, "hidden_size": 8192,
          "intermediate_size": 32768, "moe_intermediate_size": 16384, "max_position_embeddings": 131072,
          "num_experts_per_tok": 2, "num_local_experts": 8, "residual_moe": True, "num_attention_heads": 64,
          "num_key_value_heads": 8, "num_hidden_layers": 64, "head_dim": 128, "torch_dtype": "bfloat16"}
# MiniCPM3-4B's (openbmb/MiniCPM3-4B): latent attention that vLLM caches per head
_MINICPM3 = {"architectures": ["MiniCPM3ForCausalLM"], "model_type": "minicpm3", "hidden_size": 2560,
             "intermediate_size": 6400, "num_hidden_layers": 62, "num_attention_heads": 40, "num_key_value_heads": 40,
             "kv_lora_rank": 256, "q_lora_rank": 768, "qk_nope_head_dim": 64, "qk_rope_head_dim": 32, "v_head_dim": 64,
             "vocab_size": 73448, "max_position_embeddings": 32768, "torch_dtype": "bfloat16", "scale_emb": 12}
_SHAPES = [
    # was: "latent attention (256 + 32 rope per token)", 35 KiB a token for the 930 KiB vLLM caches
    ("MiniCPM3-4B (latent attention vLLM caches per head)", _MINICPM3,
     "62 layers, 40 attention heads, 40 KV heads x head_dim 96"),
    ("MiniCPM3-4B's weights (the latent attention's)", _MINICPM3, "4.07 B parameters x 2 B (bf16)"),
    # was: 217.97 B parameters (63.36 B active) for its 270 B (115 B active): the residual MLP left out
    ("Grok-2 (residual_moe: a dense MLP beside the experts)", _GROK2, "269.51 B parameters"),
]


def _shape_cases(f: Path, Case, write) -> list:
    return config_shape_cases(f, Case, write, _SHAPES, prefix=NAME)


# -- a folder of Mistral's own format ----------------------------------------------------------------------------

_PARAMS = {"dim": 5120, "n_layers": 40, "head_dim": 128, "hidden_dim": 32768, "n_heads": 32, "n_kv_heads": 8,
           "rope_theta": 1000000000.0, "norm_eps": 1e-05, "vocab_size": 131072}  # Mistral Small 3.1's params.json
_SAID = ("no config.json, but a params.json: Mistral's own format (vLLM reads it with --config-format mistral)",
         "give the config.json of the model's Hugging Face release")


def _mistral_folder_cases(f: Path, Case, write) -> list:
    folder = f / "mistral-format"
    write(folder / "params.json", json.dumps(_PARAMS))
    write(folder / "tekken.json", "{}")
    both = f / "mistral-both"  # the releases that hold both formats: config.json is read, params.json passed over
    write(both / "params.json", json.dumps(_PARAMS))
    write(both / "config.json", json.dumps(SMALL_LLAMA))
    return [
        # was: "config .../config.json: cannot read: no such file"
        Case(f"{NAME}math --model-path of a folder of Mistral's format (params.json, no config.json)", "files",
             ["math", "--model-path", str(folder)], must_say=(str(folder), *_SAID), must_not_say=PYTHON_WORDS),
        Case(f"{NAME}math --config of a folder of Mistral's format", "files", ["math", "--config", str(folder)],
             must_say=(str(folder), *_SAID), must_not_say=PYTHON_WORDS),
        # was: "model directory ...: missing config.json"
        Case(f"{NAME}run --backend real of a folder of Mistral's format", "files",
             ["run", "--backend", "real", "--device", "cpu", "--requests", "1", "--model-path", str(folder)],
             must_say=(f"model directory {folder}", *_SAID), must_not_say=PYTHON_WORDS),
        Case(f"{NAME}math --model-path of a folder holding config.json and params.json", "files",
             ["math", "--model-path", str(both)], expect="ok", must_not_say=PYTHON_WORDS),
    ]
