"""The seventeenth hostile pass's cases (2026-11-29): the FILES kvscope reads, for scripts/hostile_inputs.py; every
name begins "files17: " (`--only files17` runs them). Real config.json files of architectures and checkpoint
formats no pass had met: a multimodal text_config that transformers wrote as its difference from the text
model's config class (llava-1.5-7b gives no layer count, llava-v1.6-mistral no width, Gemma 3 4B no heads nor
vocabulary, Gemma 3 27B no vocabulary nor sliding_window_pattern), or that gives no model_type; EXAONE 4's
sliding_window_pattern "LLLG"; Nemotron-NAS's block_configs; compressed-tensors' older compression_config;
NVIDIA ModelOpt's quant_method modelopt and its hf_quant_config.json beside config.json (and over BF16
weights); Snowflake Arctic's residual MLP (use_residual) and moe_layer_frequency; Granite 4.0 (layer_types
"attention", "mamba") and LFM2 ("conv"); Llama 3.2 Vision's cross_attention_layers; Cohere 2 without its
sliding_window_pattern; Apertus and Arcee's ungated MLPs; PLaMo 2's Mamba layers; Phi-3-small's
ff_intermediate_size; Llama 4's layer_types of chunked_attention; AMD Quark and Intel AutoRound quantisation;
Qwen2.5-Omni's thinker_config.

Before the fixes: each text_config was "missing field(s) num_hidden_layers, num_attention_heads, hidden_size" (or
num_attention_heads, vocab_size) where transformers and vLLM read the class's defaults; once read, Gemma 3's
layers were sized as all full attention (its class's pattern of 6 left out: the KV cache 5x too big at 131,072
tokens), and a Gemma 3 text_config without model_type as a Llama (no window, an untied head of 1.4 B
parameters); EXAONE-4.0-32B was "sliding_window_pattern must be a whole number from 0 to 65,536, got 'LLLG'";
Llama-3.3-Nemotron-Super-49B (block_configs) was sized with a KV head per attention head on every layer (8x,
its attention-free layers given a cache too); an int8 checkpoint's compression_config was dropped (its weights
sized as bf16, 2x) and a folder's int8 weights refused as "no quantization_config"; quant_method modelopt was
"not one kvscope sizes" and a folder whose hf_quant_config.json says FP8 was sized as bf16 (2x); Arctic (480 B)
was 473 B, and a moe_layer_frequency of 2 put experts on every layer (twice its weights), as did DeepSeek's
moe_layer_freq of 2; num_experts_per_tok 0 was "missing num_experts_per_tok"; a top-level shape beside a
text_config of another (Qwen2.5-VL's files give both) was read without a word where vLLM reads the text_config;
Granite 4.0 Micro was "layer_types[0] is 'attention'; each layer is one of full_attention, ..." (its MLP,
shared_intermediate_size, dropped), and Granite 4.0-H's "mamba" and LFM2's "conv" layers were said as wrong names;
Llama 3.2 Vision's cross-attention layers were sized as text self-attention (its KV cache 25% too big), and a Cohere
2 config.json without sliding_window_pattern as every other layer sliding (its class's default is 3 of 4);
Apertus-8B and Arcee AFM-4.5B were sized with a gated MLP they do not have (10.87 B for 8.05 B, 6.32 B for 4.62 B),
PLaMo 2 (mamba_enabled) as attention on every layer; Phi-3-small's MLP (ff_intermediate_size) as 4 x hidden_size
(8.2 B for 7.4 B); Llama 4's layer_types of chunked_attention (transformers 4.54+ writes them) were refused as
"layer_types[0] is 'chunked_attention'" where its attention_chunk_size is sized as full attention, as vLLM does;
AMD Quark's and Intel AutoRound's checkpoints were "quant_method ... is not one kvscope sizes" (vLLM serves both);
Qwen2.5-Omni's was "missing field(s) num_hidden_layers, ..." (vLLM serves its thinker_config.text_config).
Every case's expect is the correct behaviour.
"""

from __future__ import annotations

import json
from pathlib import Path

from hostile_fixtures import PYTHON_WORDS, SMALL_LLAMA, config_json_cases, config_shape_cases, pass_cases

NAME = "files17: "  # every case's name starts so: `--only files17` runs this pass's

_EXAONE = {"model_type": "exaone4", "sliding_window": 64, "sliding_window_pattern": "LLLG",
           "layer_types": ["sliding_attention"] * 3 + ["full_attention"]}
_BLOCKS = [{"attention": {"n_heads_in_group": 2, "no_op": False}, "ffn": {"ffn_mult": 2.0}},
           {"attention": {"n_heads_in_group": None, "no_op": True}, "ffn": {"ffn_mult": 1.0}}] * 2
_DEEPSEEK = {"model_type": "deepseek_v2", "n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 64}
_W8A8 = {"quant_method": "compressed-tensors", "format": "int-quantized",
         "config_groups": {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 8, "type": "int"}}}}


def seventeenth_file_cases(d: Path, Case, write) -> list:
    return pass_cases(d / "seventeenth", (_config_cases, _shape_cases, _aside_cases), Case, write)


# -- config.json: refusals and their neighbours ------------------------------------------------------------------

# (what, fields over SMALL_LLAMA, what the refusal must say); None: accepted
_CONFIGS = [
    ("EXAONE 4's sliding_window_pattern 'LLLG'", _EXAONE, None),
    ("EXAONE 4's pattern 'LLLG' without layer_types", {**_EXAONE, "layer_types": None}, None),
    ("a sliding_window_pattern of other letters", {**_EXAONE, "sliding_window_pattern": "LLXG"},
     ("sliding_window_pattern must be a whole number of layers or letters L (sliding window) and G (full "
      "attention) like 'LLLG', got 'LLXG'",)),
    ("a sliding_window_pattern of letters layer_types contradicts", {**_EXAONE, "sliding_window_pattern": "LG"},
     ("layer_types and sliding_window_pattern ('LG') say different layers",)),
    ("Nemotron-NAS's block_configs", {"model_type": "nemotron-nas", "num_key_value_heads": None,
                                      "block_configs": _BLOCKS},
     ("block_configs", "gives each layer its own attention and MLP (Nemotron-NAS, DeciLM)")),
    ("a compression_config that is no table", {"compression_config": [8]}, ("compression_config must be a table",)),
    ("ModelOpt's quant_algo W4A8_AWQ", {"quantization_config": {"quant_method": "modelopt", "quant_algo": "W4A8_AWQ"}},
     ("modelopt with quant_algo 'W4A8_AWQ': kvscope sizes its FP8 and NVFP4 weights",)),
    ("num_experts_per_tok 0", {"num_experts": 8, "num_experts_per_tok": 0, "moe_intermediate_size": 64},
     ("num_experts_per_tok must be at least 1 (the experts each token runs), got 0",)),
    ("DeepSeek's moe_layer_freq 0", {**_DEEPSEEK, "moe_layer_freq": 0}, ("moe_layer_freq must be at least 1",)),
    ("DeepSeek's moe_layer_freq 2", {**_DEEPSEEK, "moe_layer_freq": 2}, None),
    ("a text_config of another layer count than the top level's",
     {"model_type": "qwen2_vl", "text_config": {**SMALL_LLAMA, "num_hidden_layers": 2}},
     ("num_hidden_layers (4) and text_config.num_hidden_layers (2) give the text model two shapes",)),
    ("a text_config alike the top level", {"model_type": "qwen2_vl", "text_config": SMALL_LLAMA}, None),
    ("Granite 4.0-H's layer_types of mamba and attention", {"model_type": "granitemoehybrid",
                                                             "layer_types": ["mamba", "attention"] * 2},
     ("layer_types lays out Mamba layers (Granite 4.0-H), which kvscope does not size",)),
    ("LFM2's layer_types of conv", {"model_type": "lfm2", "layer_types": ["conv", "full_attention"] * 2},
     ("layer_types lays out short-convolution layers (LFM2), which kvscope does not size",)),
    ("Llama 3.2 Vision's cross_attention_layers", {"model_type": "mllama_text_model", "cross_attention_layers": [1, 3]},
     ("cross_attention_layers ([1, 3]) has cross-attention layers, whose KV cache holds the image's tokens",)),
    ("PLaMo 2's mamba_enabled", {"model_type": "plamo2", "mamba_enabled": True, "mamba_step": 2},
     ("mamba_enabled (True) lays out Mamba layers (PLaMo 2), which kvscope does not size",)),
    ("mamba_enabled false", {"mamba_enabled": False}, None),
    ("Llama 4's layer_types of chunked_attention", {"model_type": "llama4_text", "attention_chunk_size": 64,
                                                     "layer_types": ["chunked_attention"] * 3 + ["full_attention"]},
     None),
    ("Quark weights of dtype bfp16", {"quantization_config": {"quant_method": "quark", "global_quant_config": {
        "weight": {"dtype": "bfp16"}}}}, ("quark with global_quant_config.weight {'dtype': 'bfp16'}",)),
    ("a text_config of an unknown model type without its fields", {
        "model_type": "somevlm", "num_hidden_layers": None, "text_config": {"model_type": "somelm"}},
     ("text_config: missing field(s) num_hidden_layers",)),
]


def _config_cases(f: Path, Case, write) -> list:
    # was: 'LLLG' "must be a whole number"; block_configs sized as 4 KV heads on every layer
    return config_json_cases(f, Case, write, SMALL_LLAMA, _CONFIGS, prefix=NAME)


# -- config.json: read, and the shape math says ------------------------------------------------------------------

_SHAPES = [  # (what, its config.json, what math must say)
    ("llava-1.5-7b (a text_config of LlamaConfig's defaults)",
     {"model_type": "llava", "text_config": {"max_position_embeddings": 4096, "model_type": "llama",
                                             "torch_dtype": "float16", "vocab_size": 32064}, "vocab_size": 32064},
     "32 layers, 32 attention heads, 32 KV heads x head_dim 128"),
    ("llava-v1.6-mistral-7b (MistralConfig's defaults)",
     {"model_type": "llava_next", "text_config": {"intermediate_size": 14336, "max_position_embeddings": 32768,
                                                  "model_type": "mistral", "num_key_value_heads": 8,
                                                  "sliding_window": None, "vocab_size": 32064}},
     "32 layers, 32 attention heads, 8 KV heads x head_dim 128"),
    ("gemma-3-4b-it (Gemma3TextConfig's defaults)",
     {"model_type": "gemma3", "text_config": {"hidden_size": 2560, "intermediate_size": 10240,
                                              "model_type": "gemma3_text", "num_hidden_layers": 34,
                                              "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
                                              "sliding_window": 1024}},
     "34 layers (5 full attention, 29 sliding window), 8 attention heads, 4 KV heads x head_dim 256"),
    ("a Gemma 3 text_config without model_type",
     {"model_type": "gemma3", "text_config": {"head_dim": 128, "hidden_size": 5376, "intermediate_size": 21504,
                                              "num_attention_heads": 32, "num_hidden_layers": 62,
                                              "num_key_value_heads": 16, "sliding_window": 1024}},
     "27.01 B parameters"),
    ("compressed-tensors' compression_config (int8 weights)", {**SMALL_LLAMA, "compression_config": _W8A8},
     "int8 (1 B) but 16-bit embeddings"),
    ("ModelOpt's quant_method modelopt (NVFP4)",
     {**SMALL_LLAMA, "quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4"}},
     "int4 (0.5 B) but 16-bit embeddings"),
    ("Granite 4.0 Micro (layer_types 'attention', shared_intermediate_size)",
     {"model_type": "granitemoehybrid", "hidden_size": 2560, "intermediate_size": 8192,
      "layer_types": ["attention"] * 40, "max_position_embeddings": 131072, "num_attention_heads": 40,
      "num_experts_per_tok": 0, "num_hidden_layers": 40, "num_key_value_heads": 8, "num_local_experts": 0,
      "shared_intermediate_size": 8192, "tie_word_embeddings": True, "vocab_size": 100352},
     "3.40 B parameters"),
    ("Cohere 2 without sliding_window_pattern (its class's 4)",
     {**SMALL_LLAMA, "model_type": "cohere2", "num_hidden_layers": 8, "sliding_window": 64},
     "8 layers (2 full attention, 6 sliding window)"),
    ("Apertus-8B (an ungated xIELU MLP)",
     {"model_type": "apertus", "hidden_size": 4096, "intermediate_size": 21504, "num_hidden_layers": 32,
      "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 131072, "max_position_embeddings": 65536,
      "tie_word_embeddings": False}, "8.05 B parameters"),
    ("Phi-3-small (ff_intermediate_size)",
     {"model_type": "phi3small", "ff_intermediate_size": 14336, "hidden_size": 4096, "max_position_embeddings": 8192,
      "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "tie_word_embeddings": True,
      "vocab_size": 100352}, "7.39 B parameters"),
    ("AMD Quark's fp8_e4m3 weights", {**SMALL_LLAMA, "quantization_config": {
        "quant_method": "quark", "global_quant_config": {"weight": {"dtype": "fp8_e4m3"}}}},
     "fp8 (1 B) but 16-bit embeddings"),
    ("Intel AutoRound's 4-bit weights", {**SMALL_LLAMA, "quantization_config": {
        "quant_method": "auto-round", "bits": 4, "group_size": 128}}, "int4 (0.5 B) but 16-bit embeddings"),
    ("Qwen2.5-Omni-7B (thinker_config.text_config)",
     {"model_type": "qwen2_5_omni", "thinker_config": {"text_config": {
         "model_type": "qwen2_5_omni_text", "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
         "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064,
         "max_position_embeddings": 32768}}}, "28 layers, 28 attention heads, 4 KV heads x head_dim 128"),
    ("Snowflake Arctic (use_residual)",
     {"model_type": "arctic", "hidden_size": 7168, "intermediate_size": 4864, "max_position_embeddings": 4096,
      "num_attention_heads": 56, "num_hidden_layers": 35, "num_key_value_heads": 8, "num_local_experts": 128,
      "num_experts_per_tok": 2, "moe_layer_frequency": 1, "use_residual": True, "vocab_size": 32000},
     "478.58 B parameters"),
]


def _shape_cases(f: Path, Case, write) -> list:
    # was: "text_config: missing field(s) ..."; compression_config and modelopt sized as bf16 or refused; 473 B
    return config_shape_cases(f, Case, write, _SHAPES, prefix=NAME)


# -- ModelOpt's hf_quant_config.json beside config.json --------------------------------------------------------

def _aside_cases(f: Path, Case, write) -> list:
    fp8 = {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8"}}
    files = [  # (what, hf_quant_config.json, what math must say; refuse: the refusal's words)
        ("saying FP8", json.dumps(fp8), "ok", "fp8 (1 B) but 16-bit embeddings"),  # was: bf16, 2x
        ("of a list", "[1]", "refuse", 'expected ModelOpt\'s {"quantization": {"quant_algo": "FP8", ...}}, got [1]'),
    ]
    header = json.dumps({"w.weight": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 8]}}).encode()
    bf16 = write(f / "aside" / "bf16" / "model.safetensors", len(header).to_bytes(8, "little") + header + bytes(8))
    write(bf16.parent / "config.json", json.dumps(SMALL_LLAMA))
    write(bf16.parent / "hf_quant_config.json", json.dumps(fp8))
    cases = [Case(f"{NAME}math --config of a folder whose hf_quant_config.json says FP8 over BF16 weights", "files",
                  ["math", "--config", str(bf16.parent)],  # was: sized at a byte each
                  must_say=("stored as modelopt (F8_E4M3 or U8 tensors), but the weight files hold only BF16",),
                  must_not_say=PYTHON_WORDS, protected=[str(bf16)])]
    for i, (what, data, expect, said) in enumerate(files):
        folder = f / "aside" / f"a{i}"
        write(folder / "config.json", json.dumps(SMALL_LLAMA))
        aside = write(folder / "hf_quant_config.json", data)
        cases.append(Case(f"{NAME}math --config of a folder whose hf_quant_config.json is {what}", "files",
                          ["math", "--config", str(folder)], expect=expect,
                          must_say=(said,) if expect == "ok" else (str(aside), said), must_not_say=PYTHON_WORDS,
                          protected=[str(aside)]))
    return cases
