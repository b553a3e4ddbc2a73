"""The eighteenth hostile pass's cases (2026-11-29): the FILES kvscope reads, for scripts/hostile_inputs.py; every name
begins "files18: " (`--only files18` runs them). Real config.json files of checkpoint formats no pass had met: a
multimodal wrapper that keeps its language model's config as llm_config (InternVL 3, Ovis 2, NVLM-D, Nemotron Nano
VL) or language_config (DeepSeek-VL2) where others write text_config; Aria's experts (moe_num_experts, moe_topk, its
class's two shared experts left out of the file); Hunyuan-A13B's MoE fields given as one value per layer (moe_topk,
moe_intermediate_size, num_shared_expert) and its shared MLP; Molmo's intermediate_size, the width of its fused gate
and up projections (two of half that width); Fuyu's Persimmon MLP; MiniCPM's tied embeddings; EmbeddingGemma's
use_bidirectional_attention (an encoder); torchao's and FP-Quant's quantisation; Step3's attention (one KV head for
64 query heads); a Qwen2-VL / Qwen2.5-VL / Qwen3-VL text_config written as its difference from its class (a 72B's
gives no shape at all). And the encodings of the three kinds of text file kvscope reads (JSON, TOML, CSV): UTF-32
with its byte-order mark, UTF-16 and UTF-32 without one; a trace whose first line is a spreadsheet's "sep=,".

Before the fixes: InternVL3-8B, Ovis2-8B and DeepSeek-VL2 were "missing field(s) num_hidden_layers,
num_attention_heads, hidden_size, vocab_size", where vLLM serves their language model (and Nemotron Nano VL's Mamba
layers were never named); Aria (24.87 B parameters in its language model) was "a mixture of experts needs
num_experts, num_experts_per_tok, moe_intermediate_size; missing num_experts_per_tok" of a file that gives moe_topk;
Hunyuan-A13B was "moe_intermediate_size must be a whole number from 0 to 4,194,304, got [3072, ...]", and given as
single numbers "missing num_experts_per_tok" (its moe_topk), as was the dense Hunyuan-7B (num_experts 1, moe_topk
1); Step3 was "missing num_experts_per_tok" (its moe_top_k), its one KV head about to be read as 64; torchao's and
FP-Quant's checkpoints (quant_method torchao, fp_quant; vLLM serves both) were "not one kvscope sizes"; a
Qwen2.5-VL-72B text_config of its class's defaults was "missing field(s) num_hidden_layers, ..."; Molmo-7B-D was
sized at 13.32 B parameters for its 7.6 B language model (Qwen2-7B's, an MLP of 18,944), and Fuyu-8B at 11.81 B for
9.4 (a gated MLP it does not have), and MiniCPM-2B at 3.01 B for 2.72 (an LM head its config class ties to the
embeddings), without a word; EmbeddingGemma was sized as a decoder's KV cache (24 KiB a token) where vLLM runs it as
an encoder that keeps none; a UTF-32 file was said to be "UTF-16 text", and a file of UTF-16 without a byte-order
mark was "malformed JSON at line 1, column 2: Expecting property name enclosed in double quotes" (config.json),
"malformed TOML: Expected '=' after a key" (a workload file) or "line 1: binary data (a NUL byte), not CSV text" (a
trace). Every case's expect is the correct behaviour.
"""

from __future__ import annotations

import json
from pathlib import Path

from hostile_fixtures import PYTHON_WORDS, SMALL_LLAMA, config_json_cases, config_shape_cases, pass_cases

NAME = "files18: "  # every case's name starts so: `--only files18` runs this pass's

_QWEN2_7B = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 3584,
             "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
             "vocab_size": 151674, "max_position_embeddings": 32768, "tie_word_embeddings": False}
_HUNYUAN = {"model_type": "hunyuan_v1_moe", "num_experts": 8, "moe_topk": [2] * 4, "moe_intermediate_size": [64] * 4,
            "num_shared_expert": [1] * 4, "use_mixed_mlp_moe": True}


def eighteenth_file_cases(d: Path, Case, write) -> list:
    return pass_cases(d / "eighteenth", (_config_cases, _shape_cases, _encoding_cases), Case, write)


# -- config.json: refusals and their neighbours ------------------------------------------------------------------

# (what, fields over SMALL_LLAMA, what the refusal must say); None: accepted
_CONFIGS = [
    ("an llm_config that is no table", {"model_type": "internvl_chat", "num_hidden_layers": None, "llm_config": [4]},
     ("llm_config must be a table (the language model's config.json fields), got [4]",)),
    ("Nemotron Nano VL's llm_config of Mamba layers",
     {"model_type": "NemotronH_Nano_VL_V2", "num_hidden_layers": None,
      "llm_config": {**SMALL_LLAMA, "model_type": "nemotron_h", "hybrid_override_pattern": "M*M*"}},
     ("llm_config: hybrid_override_pattern ('M*M*') lays out Mamba layers (Nemotron-H)",)),
    ("an llm_config of another layer count than the top level's",
     {"model_type": "internvl_chat", "llm_config": {**SMALL_LLAMA, "num_hidden_layers": 2}},
     ("num_hidden_layers (4) and text_config.num_hidden_layers (2) give the text model two shapes",)),
    ("Hunyuan's per-layer lists", _HUNYUAN, None),
    ("a moe_topk list of different values", {**_HUNYUAN, "moe_topk": [2, 2, 4, 2]},
     ("moe_topk gives the layers different values ([2, 2, 4, 2]); kvscope sizes one moe_topk for every layer",)),
    ("a moe_intermediate_size list shorter than the layers", {**_HUNYUAN, "moe_intermediate_size": [64] * 3},
     ("moe_intermediate_size gives 3 values, one per layer, but num_hidden_layers is 4",)),
    ("an empty num_shared_expert list", {**_HUNYUAN, "num_shared_expert": []},
     ("num_shared_expert gives 0 values, one per layer, but num_hidden_layers is 4",)),
    ("a moe_topk list of text", {**_HUNYUAN, "moe_topk": ["2"] * 4}, ("moe_topk must be a whole number",)),
    # not Hunyuan's: ERNIE 4.5 VL's [1536, 512] is its text and vision experts' widths, not one per layer
    ("ERNIE 4.5 VL's moe_intermediate_size of two kinds of experts",
     {"model_type": "ernie4_5_moe_vl", "moe_num_experts": 8, "moe_k": 2, "moe_intermediate_size": [64, 32]},
     ("moe_intermediate_size must be a whole number from 0 to 4,194,304, got [64, 32]",)),
    ("EmbeddingGemma's use_bidirectional_attention", {"model_type": "gemma3_text", "use_bidirectional_attention": True},
     ("use_bidirectional_attention is true: an encoder (an embedding model such as EmbeddingGemma), which keeps "
      "no KV cache",)),
    ("use_bidirectional_attention false", {"use_bidirectional_attention": False}, None),
    ("Step3's text_config (share_q_dim, num_attention_groups)",
     {"model_type": "step3_vl", "num_hidden_layers": None, "text_config": {
         **SMALL_LLAMA, "model_type": "step3_text", "num_key_value_heads": None, "num_attention_groups": 1,
         "share_q_dim": 64, "moe_num_experts": 8, "moe_top_k": 2, "moe_intermediate_size": 64}},
     ("text_config: share_q_dim (64) gives Step3's attention a low-rank query and num_attention_groups KV heads, "
      "which kvscope does not size",)),
    ("torchao's IntxWeightOnlyConfig", {"quantization_config": {"quant_method": "torchao", "quant_type": {
        "default": {"_type": "IntxWeightOnlyConfig", "_data": {}}}}},
     ("torchao with quant_type {'default': {'_type': 'IntxWeightOnlyConfig'", "kvscope sizes its Int4, Int8 and "
      "Float8 weights")),
    ("torchao without quant_type", {"quantization_config": {"quant_method": "torchao"}},
     ("torchao with quant_type not given",)),
    ("FP-Quant's forward_dtype bf16", {"quantization_config": {"quant_method": "fp_quant", "forward_dtype": "bf16"}},
     ("fp_quant with forward_dtype 'bf16': kvscope sizes its mxfp4 and nvfp4 weights",)),
    ("use_bidirectional_attention 'yes'", {"use_bidirectional_attention": "yes"},
     ("use_bidirectional_attention must be true or false, got 'yes'",)),
]


def _config_cases(f: Path, Case, write) -> list:
    # was: "missing field(s) ..." of llm_config; "moe_intermediate_size must be a whole number ..., got [64, ...]"
    return config_json_cases(f, Case, write, SMALL_LLAMA, _CONFIGS, prefix=NAME)


# -- config.json: read, and the shape math says ------------------------------------------------------------------

_SHAPES = [  # (what, its config.json, what math must say)
    ("InternVL3-8B (llm_config)",
     {"architectures": ["InternVLChatModel"], "model_type": "internvl_chat", "llm_config": _QWEN2_7B,
      "vision_config": {"model_type": "intern_vit_6b", "hidden_size": 1024, "num_hidden_layers": 24},
      "template": "internvl2_5", "torch_dtype": "bfloat16"},
     "28 layers, 28 attention heads, 4 KV heads x head_dim 128"),
    ("Ovis2-8B (llm_config)",
     {"architectures": ["Ovis"], "model_type": "ovis", "llm_config": _QWEN2_7B, "visual_tokenizer_config": {}},
     "7.61 B parameters"),
    ("DeepSeek-VL2 (language_config)",
     {"architectures": ["DeepseekVLV2ForCausalLM"], "model_type": "deepseek_vl_v2", "language_config": {
         "architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2", "hidden_size": 2560,
         "intermediate_size": 12288, "moe_intermediate_size": 1536, "n_routed_experts": 72, "n_shared_experts": 2,
         "num_experts_per_tok": 6, "first_k_dense_replace": 1, "num_hidden_layers": 30, "num_attention_heads": 32,
         "num_key_value_heads": 32, "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_nope_head_dim": 128,
         "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 129280, "max_position_embeddings": 4096,
         "torch_dtype": "bfloat16"}, "vision_config": {"model_name": "siglip_so400m_patch14_384"}},
     "latent attention (512 + 64 rope per token), 72 experts (6 per token)"),
    ("Aria (moe_num_experts, moe_topk, its class's 2 shared experts)",
     {"architectures": ["AriaForConditionalGeneration"], "model_type": "aria", "text_config": {
         "model_type": "aria_text", "hidden_size": 2560, "intermediate_size": 1664, "moe_num_experts": 64,
         "moe_topk": 6, "num_attention_heads": 20, "num_key_value_heads": 20, "num_hidden_layers": 28,
         "vocab_size": 100352, "max_position_embeddings": 65536, "tie_word_embeddings": False}},
     "24.87 B parameters"),
    ("Hunyuan-A13B (per-layer moe_topk, moe_intermediate_size, num_shared_expert)",
     {"architectures": ["HunYuanMoEV1ForCausalLM"], "model_type": "hunyuan_v1_moe", "hidden_size": 4096,
      "intermediate_size": 3072, "moe_intermediate_size": [3072] * 32, "num_experts": 64, "moe_topk": [8] * 32,
      "num_shared_expert": [1] * 32, "use_mixed_mlp_moe": True, "num_hidden_layers": 32, "num_attention_heads": 32,
      "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 128167, "max_position_embeddings": 32768,
      "tie_word_embeddings": True, "use_cla": False, "cla_share_factor": 2},
     "80.39 B parameters"),
    ("Molmo-7B-D (intermediate_size the fused gate and up width)",
     {"architectures": ["MolmoForCausalLM"], "model_type": "molmo", "embedding_size": 152064, "hidden_size": 3584,
      "intermediate_size": 37888, "max_position_embeddings": 4096, "num_attention_heads": 28, "num_hidden_layers": 28,
      "num_key_value_heads": 4, "qkv_bias": True, "tie_word_embeddings": False, "torch_dtype": "float32",
      "vocab_size": 152064, "weight_tying": False},
     "7.62 B parameters"),
    ("torchao's Int4WeightOnlyConfig", {**SMALL_LLAMA, "quantization_config": {"quant_method": "torchao",
     "quant_type": {"default": {"_type": "Int4WeightOnlyConfig", "_version": 2, "_data": {"group_size": 128}}}}},
     "int4 (0.5 B) but 16-bit embeddings"),
    ("torchao's Float8DynamicActivationFloat8WeightConfig", {**SMALL_LLAMA, "quantization_config": {
        "quant_method": "torchao", "quant_type": {"default": {"_type": "Float8DynamicActivationFloat8WeightConfig"}}}},
     "fp8 (1 B) but 16-bit embeddings"),
    ("FP-Quant's MXFP4", {**SMALL_LLAMA, "quantization_config": {"quant_method": "fp_quant", "forward_dtype": "mxfp4",
                                                                  "hadamard_group_size": 32}},
     "int4 (0.5 B) but 16-bit embeddings"),
    ("a Qwen2.5-VL-72B text_config as transformers 4.52+ writes it (its class's defaults left out)",
     {"architectures": ["Qwen2_5_VLForConditionalGeneration"], "model_type": "qwen2_5_vl", "text_config": {
         "model_type": "qwen2_5_vl_text", "rope_scaling": {"mrope_section": [16, 24, 24], "rope_type": "default"},
         "torch_dtype": "bfloat16"}, "vision_config": {"hidden_size": 1280, "out_hidden_size": 8192}},
     "80 layers, 64 attention heads, 8 KV heads x head_dim 128"),
    ("Hunyuan-7B (a dense model of num_experts 1, moe_topk 1)",
     {"architectures": ["HunYuanDenseV1ForCausalLM"], "model_type": "hunyuan_v1_dense", "hidden_size": 4096,
      "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
      "head_dim": 128, "vocab_size": 128256, "max_position_embeddings": 32768, "num_experts": 1, "moe_topk": 1,
      "use_mixed_mlp_moe": False, "use_cla": False, "tie_word_embeddings": True},
     "32 layers, 32 attention heads, 8 KV heads x head_dim 128\n"),
    ("MiniCPM-2B (tie_word_embeddings left out: its config class ties them)",
     {"architectures": ["MiniCPMForCausalLM"], "model_type": "minicpm", "hidden_size": 2304,
      "intermediate_size": 5760, "max_position_embeddings": 2048, "num_attention_heads": 36, "num_hidden_layers": 40,
      "num_key_value_heads": 36, "vocab_size": 122753, "scale_emb": 12, "dim_model_base": 256, "scale_depth": 1.4,
      "torch_dtype": "bfloat16"},
     "2.72 B parameters"),
    ("Fuyu-8B (a Persimmon's ungated MLP, its shape given at the top level too)",
     {"architectures": ["FuyuForCausalLM"], "model_type": "fuyu", "hidden_size": 4096, "intermediate_size": 16384,
      "num_hidden_layers": 36, "num_attention_heads": 64, "vocab_size": 262144, "max_position_embeddings": 16384,
      "partial_rotary_factor": 0.5, "tie_word_embeddings": False, "text_config": {
          "model_type": "persimmon", "hidden_size": 4096, "intermediate_size": 16384, "num_hidden_layers": 36,
          "num_attention_heads": 64, "vocab_size": 262144, "max_position_embeddings": 16384}},
     "9.40 B parameters"),
]


def _shape_cases(f: Path, Case, write) -> list:
    # was: "missing field(s) num_hidden_layers, ..."; Aria "missing num_experts_per_tok"; Hunyuan's lists refused
    return config_shape_cases(f, Case, write, _SHAPES, prefix=NAME)


# -- UTF-16 and UTF-32 text where UTF-8 is read ------------------------------------------------------------------

_TRACE = ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n"
          "2023-11-16 18:15:50.9951690,396,109\n")
_WORKLOAD = 'name = "wide"\nkind = "synthetic"\n'
_NO_BOM = "UTF-16 or UTF-32 text without a byte-order mark (NUL bytes between its characters)"


def _encoding_cases(f: Path, Case, write) -> list:
    config = json.dumps(SMALL_LLAMA)
    files = [  # (what, argv before the file, file name, bytes, what the refusal must say)
        ("a config.json in UTF-32", ["math", "--config"], "u32/config.json", config.encode("utf-32"), "UTF-32 text"),
        ("a config.json in UTF-16 without a byte-order mark", ["math", "--config"], "u16le/config.json",
         config.encode("utf-16-le"), _NO_BOM),
        ("a config.json in UTF-16 BE without a byte-order mark", ["math", "--config"], "u16be/config.json",
         config.encode("utf-16-be"), _NO_BOM),
        ("a config.json in UTF-32 without a byte-order mark", ["math", "--config"], "u32le/config.json",
         config.encode("utf-32-le"), _NO_BOM),
        ("a trace in UTF-32", ["run", "--requests", "2", "--trace"], "t32.csv", _TRACE.encode("utf-32"),
         "UTF-32 text"),
        ("a trace in UTF-16 without a byte-order mark", ["run", "--requests", "2", "--trace"], "t16le.csv",
         _TRACE.encode("utf-16-le"), _NO_BOM),
        ("a workload file in UTF-16 without a byte-order mark", ["run", "--requests", "2", "--workload"], "w16le.toml",
         _WORKLOAD.encode("utf-16-le"), _NO_BOM),
        ("a workload file in UTF-32", ["run", "--requests", "2", "--workload"], "w32.toml",
         _WORKLOAD.encode("utf-32"), "UTF-32 text"),
    ]
    cases = []
    for what, argv, name, data, said in files:
        path = write(f / "encodings" / name, data)
        cases.append(Case(f"{NAME}{argv[0]} of {what}", "files", [*argv, str(path)],
                          must_say=(str(path), said), must_not_say=PYTHON_WORDS, protected=[str(path)]))
    # Excel's and LibreOffice's "sep=," first line: was "line 1: no arrival column" of a trace that has one
    sep = write(f / "encodings" / "sep.csv", "sep=,\r\n" + _TRACE.replace("\n", "\r\n"))
    cases.append(Case(f"{NAME}run of a trace whose first line is a spreadsheet's sep=,", "files",
                      ["run", "--requests", "2", "--trace", str(sep)], expect="ok", must_not_say=PYTHON_WORDS,
                      protected=[str(sep)]))
    only = write(f / "encodings" / "sep-only.csv", "sep=,\n")
    cases.append(Case(f"{NAME}run of a trace of a sep=, line alone", "files",
                      ["run", "--requests", "2", "--trace", str(only)],
                      must_say=(str(only), "only a sep=, line (the separator a spreadsheet names), no header and no "
                                "requests"), must_not_say=PYTHON_WORDS))
    # a file of NUL bytes is still binary data, not text
    zeros = write(f / "encodings" / "zeros.csv", bytes(64))
    cases.append(Case(f"{NAME}run of a trace of NUL bytes", "files", ["run", "--requests", "2", "--trace", str(zeros)],
                      must_say=("binary data (a NUL byte), not CSV text",), must_not_say=("UTF-16",)))
    return cases
