"""The fifteenth hostile pass's cases (2026-11-29): the FILES kvscope reads, for scripts/hostile_inputs.py. A
config.json of older field names, as transformers' attribute_map reads them (GPT-2, GPT-J and StarCoder's n_layer,
n_head, n_embd, n_inner; Bloom's n_embed; MPT's n_layers, n_heads, d_model, expansion_ratio; the RefinedWeb
Falcons' n_layer, n_head, n_head_kv; ChatGLM's num_layers, padded_vocab_size, multi_query_group_num; DBRX's
n_layers and ffn_config experts), or two names of one field that disagree; the KV heads vLLM keeps (Falcon-7B's
multi_query, Falcon-40B's num_kv_heads, MPT's attn_config.kv_n_heads); ERNIE 4.5's expert fields (moe_num_experts,
moe_k, ...); Qwen (1)'s MLP; RecurrentGemma's block_types; Mamba, RWKV, a T5 without is_encoder_decoder, XLNet;
Gemma 2's config.json leaving tie_word_embeddings out; Llama 4 Maverick's interleave_moe_layer_step; Meta's
fbgemm_fp8 and AutoAWQ's w_bit; an empty and a gzip-compressed config.json.

Before the fixes: every older-named config was "missing field(s) num_hidden_layers, num_attention_heads,
hidden_size" (vLLM serves them all); Falcon-7B was sized with 71 KV heads for vLLM's 1 and Falcon-40B with 128 for
8 (the KV cache 71x and 16x too big); num_kv_heads beside a different num_key_value_heads was dropped; ERNIE-4.5-
21B-A3B was sized as a dense model of 3.5 B parameters, Qwen-7B at 16 B (its MLP at twice vLLM's width), Gemma 2
2B at 3.20 B for 2.61 B (an untied LM head it does not have), Llama 4 Maverick at 778 B for 400 B (experts on
every layer, no shared one); fbgemm_fp8 was "not one kvscope sizes", w_bit 4 "awq with bits None"; RecurrentGemma
was sized as 26 full-attention layers; Mamba, RWKV and T5 were "missing field(s) num_attention_heads"; a null
num_hidden_layers beside a text_config was "missing field(s)", n_head_kv 0 "num_key_value_heads must be greater
than 0" and seq_length 0 "max_position_embeddings must be greater than 0" (fields the file did not have), a
model_max_length of transformers' no-limit 1e30 refused as past its ceiling; the empty file "malformed JSON at
line 1, column 1: Expecting value", the compressed one "not UTF-8 text (byte 1)". Every case's expect is the correct behaviour.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from hostile_fixtures import PYTHON_WORDS, SMALL_LLAMA, config_json_cases, pass_cases

NAME = "files15: "  # every case's name starts so: `--only files15` runs this pass's


def fifteenth_file_cases(d: Path, Case, write) -> list:
    makers = (_config_cases, _shape_cases, _empty_cases)
    return pass_cases(d / "fifteenth", makers, Case, write)


# -- config.json: refusals and their neighbours ------------------------------------------------------------------

_NO_HEADS = {"num_attention_heads": None, "num_key_value_heads": None}
# (what, fields over SMALL_LLAMA, what the refusal must say); None: accepted
_CONFIGS = [
    ("n_layer 8 beside num_hidden_layers 4", {"n_layer": 8},
     ("num_hidden_layers (4) and n_layer (8) are two names of one field (num_hidden_layers)",)),
    ("n_layer 4 beside num_hidden_layers 4", {"n_layer": 4}, None),
    ("num_kv_heads 1 beside num_key_value_heads 2", {"num_kv_heads": 1},
     ("num_kv_heads (1) and num_key_value_heads (2) give different numbers of KV heads",)),
    ("n_layer as text", {"n_layer": "4"}, ("n_layer must be a whole number",)),
    ("RecurrentGemma's block_types", {"model_type": "recurrent_gemma", "block_types": ["recurrent", "attention"]},
     ("block_types", "lays out recurrent layers (RecurrentGemma)", "which kvscope does not size")),
    ("block_types of attention alone", {"block_types": ["attention"]}, None),
    ("a Mamba model", {"model_type": "mamba", **_NO_HEADS, "state_size": 16},
     ("a Mamba state-space model (model_type 'mamba'): it has no attention layers and keeps no KV cache",)),
    ("an RWKV model", {"model_type": "rwkv", **_NO_HEADS}, ("an RWKV recurrent model",)),
    ("T5 without is_encoder_decoder", {"model_type": "t5", **_NO_HEADS, "num_heads": 4},
     ("an encoder-decoder model (model_type 't5')",)),
    ("XLNet's n_layer and d_model", {"model_type": "xlnet", "n_layer": 4, "d_model": 128},
     ("an encoder-only model (model_type 'xlnet')",)),
    ("ERNIE's experts left no layer", {"model_type": "ernie4_5_moe", "moe_num_experts": 8, "moe_k": 2,
                                       "moe_intermediate_size": 64, "moe_layer_start_index": 4},
     ("moe_layer_start_index (4)", "leave no layer of the 4 for the experts")),
    ("n_head_kv 0 in place of num_key_value_heads", {"num_key_value_heads": None, "n_head_kv": 0},
     ("n_head_kv must be greater than 0, got 0",)),
    ("n_layer 0 in place of num_hidden_layers", {"num_hidden_layers": None, "n_layer": 0},
     ("n_layer must be greater than 0, got 0",)),
    ("Llama 4's moe_layers empty", {"model_type": "llama4_text", "num_local_experts": 4, "num_experts_per_tok": 1,
                                    "moe_layers": []}, ("moe_layers is empty: no layer holds the 4 experts",)),
    ("Llama 4's moe_layers [1, 3]", {"model_type": "llama4_text", "num_local_experts": 4, "num_experts_per_tok": 1,
                                     "moe_layers": [1, 3]}, None),
    ("seq_length 0 beside max_position_embeddings", {"seq_length": 0}, ("seq_length must be greater than 0, got 0",)),
    ("model_max_length of transformers' no-limit int(1e30)", {"model_max_length": 1000000000000000019884624838656},
     None),
    ("ERNIE's experts from layer 1", {"model_type": "ernie4_5_moe", "moe_num_experts": 8, "moe_k": 2,
                                      "moe_intermediate_size": 64, "moe_layer_start_index": 1}, None),
]


def _config_cases(f: Path, Case, write) -> list:
    # was: the older name dropped, block_types sized as full attention, "missing field(s) num_attention_heads"
    return config_json_cases(f, Case, write, SMALL_LLAMA, _CONFIGS, prefix=NAME)


# -- config.json: read, and the shape math says --------------------------------------------------------------------

_GONE = {"num_hidden_layers": None, "num_attention_heads": None, "num_key_value_heads": None, "hidden_size": None,
         "intermediate_size": None, "vocab_size": None, "max_position_embeddings": None, "architectures": None}
_SHAPES = [  # (what, its config.json, what math must say)
    ("StarCoder (n_layer, n_head, n_embd; multi_query)",
     {"model_type": "gpt_bigcode", "multi_query": True, "n_embd": 6144, "n_head": 48, "n_inner": 24576, "n_layer": 40,
      "n_positions": 8192, "vocab_size": 49152}, "40 layers, 48 attention heads, 1 KV heads x head_dim 128"),
    ("GPT-2 (n_layer, n_head, n_embd)",
     {"model_type": "gpt2", "n_embd": 768, "n_head": 12, "n_layer": 12, "n_positions": 1024, "vocab_size": 50257},
     "12 layers, 12 attention heads, 12 KV heads x head_dim 64"),
    ("MPT-7B (n_layers, n_heads, d_model)",
     {"model_type": "mpt", "attn_config": {"alibi": True}, "d_model": 4096, "expansion_ratio": 4, "max_seq_len": 2048,
      "n_heads": 32, "n_layers": 32, "vocab_size": 50432}, "32 layers, 32 attention heads, 32 KV heads x head_dim 128"),
    ("Falcon-7B (multi_query)",
     {"model_type": "falcon", "hidden_size": 4544, "multi_query": True, "new_decoder_architecture": False,
      "num_attention_heads": 71, "num_hidden_layers": 32, "vocab_size": 65024},
     "32 layers, 71 attention heads, 1 KV heads x head_dim 64"),
    ("Falcon-40B (num_kv_heads)",
     {"model_type": "falcon", "hidden_size": 8192, "new_decoder_architecture": True, "num_attention_heads": 128,
      "num_hidden_layers": 60, "num_kv_heads": 8, "vocab_size": 65024},
     "60 layers, 128 attention heads, 8 KV heads x head_dim 64"),
    ("RefinedWeb 40B (n_layer, n_head, n_head_kv)",
     {"model_type": "RefinedWeb", "hidden_size": 8192, "n_head": 128, "n_head_kv": 8, "n_layer": 60,
      "vocab_size": 65024}, "60 layers, 128 attention heads, 8 KV heads x head_dim 64"),
    ("ChatGLM3 (num_layers, multi_query_group_num)",
     {"model_type": "chatglm", "ffn_hidden_size": 13696, "hidden_size": 4096, "kv_channels": 128,
      "multi_query_group_num": 2, "num_attention_heads": 32, "num_layers": 28, "padded_vocab_size": 65024,
      "seq_length": 8192}, "28 layers, 32 attention heads, 2 KV heads x head_dim 128"),
    ("ERNIE-4.5-21B-A3B (moe_num_experts, moe_k)",
     dict(model_type="ernie4_5_moe", hidden_size=2560, intermediate_size=12288, num_attention_heads=20,
          num_key_value_heads=4, num_hidden_layers=28, vocab_size=103424, tie_word_embeddings=True, head_dim=128,
          max_position_embeddings=131072, moe_num_experts=64, moe_num_shared_experts=2, moe_layer_start_index=1,
          moe_intermediate_size=1536, moe_k=6, moe_layer_interval=1), "21.83 B parameters"),
    ("Qwen-7B (model_type qwen, intermediate_size 22016)",
     dict(model_type="qwen", hidden_size=4096, intermediate_size=22016, kv_channels=128, num_attention_heads=32,
          num_hidden_layers=32, seq_length=8192, max_position_embeddings=32768, vocab_size=151936),
     "7.72 B parameters"),
    ("Gemma 2 2B (no tie_word_embeddings)",
     {"model_type": "gemma2", "head_dim": 256, "hidden_size": 2304, "intermediate_size": 9216,
      "max_position_embeddings": 8192, "num_attention_heads": 8, "num_hidden_layers": 26, "num_key_value_heads": 4,
      "sliding_window": 4096, "vocab_size": 256000}, "2.61 B parameters"),
    ("Llama 4 Maverick (interleave_moe_layer_step 2)",
     {"model_type": "llama4", "text_config": {
         "model_type": "llama4_text", "attention_chunk_size": 8192, "head_dim": 128, "hidden_size": 5120,
         "intermediate_size": 8192, "intermediate_size_mlp": 16384, "max_position_embeddings": 1048576,
         "num_attention_heads": 40, "num_hidden_layers": 48, "num_key_value_heads": 8, "num_local_experts": 128,
         "num_experts_per_tok": 1, "interleave_moe_layer_step": 2, "vocab_size": 202048}}, "400.71 B parameters"),
    ("Meta's Llama 3.1 FP8 (quant_method fbgemm_fp8)",
     {**SMALL_LLAMA, "quantization_config": {"quant_method": "fbgemm_fp8", "activation_scale_ub": 1200.0}},
     "but 16-bit embeddings"),
    ("AutoAWQ's w_bit 4", {**SMALL_LLAMA, "quantization_config": {"quant_method": "awq", "w_bit": 4,
                                                                   "q_group_size": 128, "version": "GEMM"}},
     "int4 (0.5 B) but 16-bit embeddings"),
]


def _shape_cases(f: Path, Case, write) -> list:
    # was: "missing field(s) ..." for the older names; Falcon's 71 and 128 KV heads; ERNIE's 3.5 B, Qwen's 16 B,
    # Gemma's 3.20 B, Maverick's 778 B parameters; fbgemm_fp8 and w_bit refused
    cases = []
    for i, (what, cfg, said) in enumerate(_SHAPES):
        path = write(f / "shapes" / f"s{i}" / "config.json", json.dumps({**_GONE, **cfg}))
        cases.append(Case(f"{NAME}math --config of {what}", "structure", ["math", "--config", str(path)],
                          expect="ok", must_say=(said,), must_not_say=PYTHON_WORDS))
    return cases


# -- config.json files holding no JSON -------------------------------------------------------------------------

def _empty_cases(f: Path, Case, write) -> list:
    files = {  # was: "malformed JSON at line 1, column 1: Expecting value"; "not UTF-8 text (byte 1)"
        "an empty config.json": (b"", "empty (0 bytes), no JSON in it"),
        "a config.json of blanks": (b" \n\n", "empty (only blanks in its 3 bytes)"),
        "a gzip-compressed config.json": (gzip.compress(json.dumps(SMALL_LLAMA).encode()),
                                          "gzip-compressed, not JSON text; decompress it first"),
    }
    cases = []
    for i, (what, (data, said)) in enumerate(files.items()):
        path = write(f / "empty" / f"e{i}" / "config.json", data)
        cases.append(Case(f"{NAME}math --config given {what}", "files", ["math", "--config", str(path.parent)],
                          must_say=(str(path), said), must_not_say=PYTHON_WORDS, protected=[str(path)]))
    return cases
