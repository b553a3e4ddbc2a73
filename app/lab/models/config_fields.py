"""The config.json fields kvscope reads, and the type each must have before config_json reads it.

A Hugging Face config.json is someone else's file: any field may hold a list where a number
belongs, a number past any model, or a table nested a thousand deep. `checked_hf_fields` checks
each field kvscope reads against this table (other fields are never looked at), so that
config_json's arithmetic only ever sees numbers in range, text and tables of the right shape.
null counts as absent, as transformers reads it.
"""

from __future__ import annotations

import sys

from kvscope.engine.checks import (
    MAX_BYTES,
    ConfigError,
    ceiling,
    shown,
    whole_number,
)

from kvscope.app.lab.models.config_names import NAME_FIELDS
from kvscope.app.lab.table_checks import require_table

WHOLE, TEXT, FLAG, TABLE, LIST, FACTOR = "whole", "text", "flag", "table", "list", "factor"

HF_FIELDS = {
    # the dense shape
    "num_hidden_layers": WHOLE, "num_attention_heads": WHOLE, "num_key_value_heads": WHOLE, "head_dim": WHOLE,
    "hidden_size": WHOLE, "intermediate_size": WHOLE, "vocab_size": WHOLE, "max_position_embeddings": WHOLE,
    "n_positions": WHOLE, "max_seq_len": WHOLE, "seq_length": WHOLE, "max_target_positions": WHOLE,
    "max_sequence_length": WHOLE, "max_seq_length": WHOLE, "seq_len": WHOLE, "model_max_length": WHOLE,
    "tie_word_embeddings": FLAG, "attention_bias": FLAG, "model_type": TEXT, "architectures": LIST,
    "torch_dtype": TEXT, "dtype": TEXT, "quantization_config": TABLE, "compression_config": TABLE,
    "text_config": TABLE, "auto_map": TABLE,
    # how far rope scaling stretches the positions (transformers 5 names the table rope_parameters)
    "rope_scaling": TABLE, "rope_parameters": TABLE,
    # layer layouts
    "layer_types": LIST, "sliding_window": WHOLE, "use_sliding_window": FLAG, "sliding_window_pattern": WHOLE,
    "full_attention_interval": WHOLE, "linear_num_key_heads": WHOLE, "linear_num_value_heads": WHOLE,
    "linear_key_head_dim": WHOLE, "linear_value_head_dim": WHOLE, "linear_conv_kernel_dim": WHOLE,
    "mamba_ssm_dtype": TEXT, "max_window_layers": WHOLE, "is_encoder_decoder": FLAG,
    "use_bidirectional_attention": FLAG,
    # multi-head latent attention
    "kv_lora_rank": WHOLE, "qk_rope_head_dim": WHOLE, "q_lora_rank": WHOLE, "v_head_dim": WHOLE,
    "qk_nope_head_dim": WHOLE,
    # mixture of experts
    "num_experts": WHOLE, "n_routed_experts": WHOLE, "num_local_experts": WHOLE, "num_experts_per_tok": WHOLE,
    "experts_per_token": WHOLE, "moe_intermediate_size": WHOLE, "shared_expert_intermediate_size": WHOLE,
    "n_shared_experts": WHOLE, "first_k_dense_replace": WHOLE, "mlp_only_layers": LIST, "decoder_sparse_step": WHOLE,
    # Hunyuan's shared MLP, num_shared_expert x intermediate_size wide
    "num_shared_expert": WHOLE, "use_mixed_mlp_moe": FLAG,
    # older names of the fields above (GPT-2's n_layer, MPT's d_model, ...) and the KV head counts vLLM reads
    **NAME_FIELDS,
}
# fields that change which layers hold a KV cache, or add a cache, in ways kvscope does not size (given, not 0 or
# false): read as attention with a cache of its own on every layer, a Jamba's KV cache was 8x too big, its Mamba
# state unsized, DeepSeek V3.2's indexer cache left out
UNSIZED_LAYOUTS = {
    "hybrid_override_pattern": "lays out Mamba layers (Nemotron-H)",
    "attn_layer_period": "lays out Mamba layers (Jamba)",
    "attn_layer_indices": "lays out Mamba layers (Bamba)",
    "layers_block_type": "lays out Mamba layers (Zamba)",
    "mamba_d_ssm": "sizes Mamba state-space layers (Falcon-H1)",
    "attn_type_list": "lays out lightning-attention layers (MiniMax)",
    "linear_attn_config": "lays out delta-attention layers (Kimi)",
    "num_kv_shared_layers": "has layers reuse an earlier layer's KV cache (Gemma 3n)",
    "use_cla": "has layers share one KV cache (cross-layer attention)",
    "index_topk": "keeps an indexer's key cache beside the latent one (DeepSeek sparse attention)",
    "block_types": "lays out recurrent layers (RecurrentGemma)",
    "mamba_enabled": "lays out Mamba layers (PLaMo 2)",  # every mamba_step-th layer attention: its KV cache 2x
    # Nemotron-NAS / DeciLM: a KV head count per layer (n_heads_in_group), layers without attention (no_op); sized
    # with a KV head per attention head on every layer, Llama-3.3-Nemotron-Super-49B's KV cache was 8x too big
    "block_configs": "gives each layer its own attention and MLP (Nemotron-NAS, DeciLM)",
    # LFM2's original config.json (no layer_types): 6 attention layers of 16, sized as 16 with a KV cache each
    "full_attn_idxs": "lays out short-convolution layers between the attention layers it lists (LFM2)",
    # Ouro's looped layers: all of them run total_ut_steps times, each pass caching its own keys and values (Ouro-1.4B's
    # 24 layers x 4: its KV cache sized at a quarter)
    "total_ut_steps": "runs every layer that many times over, each pass with a KV cache of its own (Ouro)",
    # DeciLM-7B: a KV head count per layer (4, 2 or 1), sized as one KV head per attention head (32) on every layer
    "num_key_value_heads_per_layer": "gives each layer its own KV head count (DeciLM)",
    # Phi-4-mini-flash (SambaY): every mb_per_layer-th layer Mamba, the second half's attention layers reusing one
    # KV cache; sized as 32 layers of attention, each with its own cache
    "mb_per_layer": "lays out Mamba layers and layers that reuse one KV cache (Phi-4-mini-flash's SambaY)",
    # Step3's text model: one KV head (num_attention_groups) for its 64 query heads, the query low-rank; read as a
    # KV head per query head it was "missing num_experts_per_tok" (its moe_top_k), and would be 64x too big
    "share_q_dim": "gives Step3's attention a low-rank query and num_attention_groups KV heads",
    # Llama 3.2 Vision's text model: 8 of its 40 layers attend to the image, their KV cache the image's tokens
    "cross_attention_layers": "has cross-attention layers, whose KV cache holds the image's tokens, not the text's "
                              "(Llama 3.2 Vision)",
}
# model types whose config class lays out such layers by default (Phi4FlashConfig's mb_per_layer is 2), or whose
# layer holds more than one attention block: LongCat-Flash's two latent-attention blocks, two dense MLPs and experts of
# expert_ffn_hidden_size beside zero experts were read as one block and experts of ffn_hidden_size (3,251 B for 560 B,
# half its KV cache)
UNSIZED_MODEL_TYPES = {"phi4flash": UNSIZED_LAYOUTS["mb_per_layer"],
                       "longcat_flash": "gives each layer two attention blocks, two dense MLPs and experts of "
                                        "expert_ffn_hidden_size (LongCat-Flash)"}
UNSIZED = ("which kvscope does not size (it sizes full, sliding-window, latent and Gated DeltaNet attention layers, a "
           "KV cache of its own on each): its KV memory would be sized wrong")
# layer_types' names of layers without attention (Granite 4.0-H's, LFM2's); "attention" (Granite 4.0's) and
# "chunked_attention" (Llama 4's) are read as full-attention layers
RECURRENT_LAYERS = {"mamba": "Mamba layers (Granite 4.0-H)", "conv": "short-convolution layers (LFM2)"}
# ... unless they say every layer is attention (MiniMax-M2's attn_type_list of 1s)
_ALL_ATTENTION = {"attn_type_list": lambda v: isinstance(v, list) and all(x == 1 for x in v),
                  "layers_block_type": lambda v: isinstance(v, list) and all(x == "attention" for x in v),
                  "hybrid_override_pattern": lambda v: isinstance(v, str) and set(v) <= {"*"},
                  "attn_layer_period": lambda v: v == 1, "total_ut_steps": lambda v: v == 1,
                  "block_types": lambda v: isinstance(v, list) and all(x == "attention" for x in v)}
# encoders: their config.json has a decoder's fields (BERT's num_hidden_layers, num_attention_heads, ...), and a
# KV cache was sized for a model that keeps none (vLLM serves them for embeddings, one forward a request)
ENCODER_ONLY = {"bert", "roberta", "xlm-roberta", "camembert", "electra", "albert", "distilbert", "deberta",
                "deberta-v2", "mpnet", "modernbert", "nomic_bert", "ernie", "xlm", "esm", "xlnet", "flaubert", "funnel"}
# encoder-decoders whose config.json may leave is_encoder_decoder out (their class's default is true): said as
# "missing field(s) num_attention_heads" once T5's num_layers and d_model were read
ENCODER_DECODER = {"t5", "mt5", "umt5", "longt5", "switch_transformers", "bart", "mbart", "marian", "pegasus",
                   "pegasus_x", "m2m_100", "nllb-moe", "led", "plbart", "blenderbot", "blenderbot-small", "fsmt",
                   "prophetnet", "bigbird_pegasus", "whisper", "speech_to_text", "seamless_m4t", "mvp"}
# models of recurrent layers alone: no attention, no KV cache (said as "missing field(s) num_attention_heads")
RECURRENT_ONLY = {"mamba": "a Mamba state-space model", "mamba2": "a Mamba-2 state-space model",
                  "falcon_mamba": "a Mamba state-space model (Falcon Mamba)", "rwkv": "an RWKV recurrent model",
                  "xlstm": "an xLSTM recurrent model"}
# quantization_config's own fields that config_json reads
QUANTIZATION_FIELDS = {"quant_method": TEXT, "load_in_4bit": FLAG, "load_in_8bit": FLAG,
                       "bnb_4bit_quant_type": TEXT, "bits": WHOLE, "w_bit": WHOLE, "config_groups": TABLE}
# rope_scaling's (and rope_parameters') fields that config_json reads: a factor of "4" or a list, an
# original_max_position_embeddings of "512", were read as no stretch at all, without a word
ROPE_FIELDS = {"rope_type": TEXT, "type": TEXT, "factor": FACTOR, "original_max_position_embeddings": WHOLE}
NO_LENGTH = int(1e30)  # transformers' VERY_LARGE_INTEGER: a model_max_length of no limit (a tokenizer's, copied)
MAX_ROPE_FACTOR = sys.float_info.max  # any finite factor: the positions it stretches to are held to kvscope's ceiling
# fields Hunyuan's config.json may give as one value per layer (Hunyuan-A13B's moe_topk, moe_intermediate_size and
# num_shared_expert lists, which vLLM reads layer by layer): refused as "must be a whole number, got [3072, ...]"
PER_LAYER_LISTS = ("moe_intermediate_size", "moe_topk", "num_shared_expert")
# counts that size a list kvscope builds (one entry per layer): bounded before anything is built
_SIZING = {"n_shared_experts": 1 << 16, "num_shared_expert": 1 << 16, "full_attention_interval": 1 << 16,
           "sliding_window_pattern": 1 << 16,
           "decoder_sparse_step": 1 << 16}


def per_layer_type(rope: dict) -> bool:
    """Whether a rope table holds one table per type of layer (transformers 5's rope_parameters of Gemma 3:
    {"full_attention": {...}, "sliding_attention": {...}}); a table of one rope has no table inside."""
    return bool(rope) and all(isinstance(value, dict) for value in rope.values())


def _checked(table: dict, kinds: dict, label: str, where: str = "") -> dict:
    out = dict(table)
    for key, kind in kinds.items():
        value = table.get(key)
        if value is None:
            out.pop(key, None)
            continue
        what = f"{label}: {where}{key}"
        if kind == WHOLE:
            out[key] = whole_number(value, what, 0, _SIZING.get(key, ceiling(key, MAX_BYTES)))
        elif kind == TEXT and not isinstance(value, str):
            raise ConfigError(f"{what} must be text, got {shown(value)}")
        elif kind == FLAG and not isinstance(value, bool):
            raise ConfigError(f"{what} must be true or false, got {shown(value)}")
        elif kind == FACTOR and not (isinstance(value, (int, float)) and not isinstance(value, bool)
                                     and 0 < value <= MAX_ROPE_FACTOR):  # "4", 0 or -4 stretched nothing, silently
            raise ConfigError(f"{what} must be a number greater than 0 (how many times the positions are "
                              f"stretched), got {shown(value)}")
        elif kind == TABLE:
            require_table(value, what)
        elif kind == LIST and not isinstance(value, list):
            raise ConfigError(f"{what} must be a list, got {shown(value)}")
    return out


def _one_per_model(cfg: dict, label: str) -> dict:
    """cfg with each of PER_LAYER_LISTS given as one value per layer read as that value, when every layer has the
    same; layers of different sizes are refused (kvscope sizes one MoE shape for every layer)."""
    lists = {key: cfg[key] for key in PER_LAYER_LISTS if isinstance(cfg.get(key), list)}
    if not lists or not str(cfg.get("model_type", "")).startswith("hunyuan"):  # vLLM reads them per layer for
        # Hunyuan's alone (ERNIE 4.5 VL's moe_intermediate_size [1536, 512] is its text and vision experts'): the
        # field's own check says the others
        return cfg
    layers = cfg.get("num_hidden_layers")
    out = dict(cfg)
    for key, values in lists.items():
        if isinstance(layers, int) and not isinstance(layers, bool) and len(values) != layers:
            raise ConfigError(f"{label}: {key} gives {len(values):,} values, one per layer, but num_hidden_layers is "
                              f"{shown(layers)}; give one value for each layer, or one number for all of them")
        if not values or any(value != values[0] or isinstance(value, bool) for value in values):
            raise ConfigError(f"{label}: {key} gives the layers different values ({shown(values)}); kvscope sizes "
                              f"one {key} for every layer: give one number, or a list of one value repeated")
        out[key] = values[0]  # its type and range are checked as the field's own below
    return out


def with_compression_config(cfg):
    """cfg with compressed-tensors' older compression_config read as quantization_config when that is absent, as
    vLLM reads it (llm-compressor's 2024 checkpoints): left out, their int8 and fp8 weights were sized as 16-bit."""
    older = cfg.get("compression_config") if isinstance(cfg, dict) else None
    if isinstance(older, dict) and cfg.get("quantization_config") is None:
        return {**cfg, "quantization_config": older}
    return cfg


def checked_hf_fields(cfg, label: str) -> dict:
    """cfg with each field kvscope reads checked for its type (whole numbers within their
    ceilings, as ints), nulls dropped; a ConfigError naming the field otherwise."""
    if isinstance(cfg, dict) and cfg.get("model_max_length") == NO_LENGTH:  # transformers' "no limit", as vLLM's
        cfg = {k: v for k, v in cfg.items() if k != "model_max_length"}   # smallest length reads it: absent
    pattern = cfg.get("sliding_window_pattern") if isinstance(cfg, dict) else None
    if isinstance(pattern, str):  # EXAONE 4's "LLLG" (L: a sliding layer, G: a full one) was refused as not a number
        if not pattern or len(pattern) > _SIZING["sliding_window_pattern"] or set(pattern) - {"L", "G"}:
            raise ConfigError(f"{label}: sliding_window_pattern must be a whole number of layers or letters L "
                              f"(sliding window) and G (full attention) like 'LLLG', got {shown(pattern)}")
        cfg = {k: v for k, v in cfg.items() if k != "sliding_window_pattern"}
    cfg = _checked(_one_per_model(require_table(cfg, f"{label}: config.json"), label), HF_FIELDS, label)
    if isinstance(pattern, str):
        cfg["sliding_window_pattern"] = pattern
    if cfg.get("model_type") == "ouro" and cfg.get("total_ut_steps") is None:  # vLLM's (and its class's) default
        raise ConfigError(f"{label}: model_type 'ouro' without total_ut_steps runs every layer 4 times over (its "
                          f"class's default), each pass with a KV cache of its own, {UNSIZED}")
    if cfg.get("model_type") in UNSIZED_MODEL_TYPES:  # their config class's layout, when the file leaves it out
        raise ConfigError(f"{label}: model_type {shown(cfg['model_type'])} {UNSIZED_MODEL_TYPES[cfg['model_type']]}, "
                          f"{UNSIZED}")
    unsized = next((key for key in UNSIZED_LAYOUTS
                    if (cfg.get(key) or cfg.get(key) == [] and key == "full_attn_idxs")  # []: every layer a conv
                    and not _ALL_ATTENTION.get(key, lambda v: False)(cfg[key])), None)
    if unsized:
        raise ConfigError(f"{label}: {unsized} ({shown(cfg[unsized])}) {UNSIZED_LAYOUTS[unsized]}, {UNSIZED}")
    if "quantization_config" in cfg:
        cfg["quantization_config"] = _checked(cfg["quantization_config"], QUANTIZATION_FIELDS, label,
                                              "quantization_config.")
    for key in ("rope_scaling", "rope_parameters"):
        if key in cfg and per_layer_type(cfg[key]):  # transformers 5: a table for each type of layer
            cfg[key] = {kind: _checked(table, ROPE_FIELDS, label, f"{key}.{kind}.") for kind, table in cfg[key].items()}
        elif key in cfg:
            cfg[key] = _checked(cfg[key], ROPE_FIELDS, label, f"{key}.")
    for key in ("architectures", "layer_types"):
        if key in cfg and not all(isinstance(item, str) for item in cfg[key]):
            raise ConfigError(f"{label}: {key} must be a list of names, got {shown(cfg[key])}")
    if "layer_types" in cfg:  # Granite 4.0's "attention" and "mamba", LFM2's "conv": said as a file's wrong names
        recurrent = [kind for kind in dict.fromkeys(cfg["layer_types"]) if kind in RECURRENT_LAYERS]
        if recurrent:
            raise ConfigError(f"{label}: layer_types lays out {' and '.join(RECURRENT_LAYERS[k] for k in recurrent)}, "
                              f"{UNSIZED}")
        # Llama 4's chunked local attention is sized as full attention, as vLLM sizes it (and its attention_chunk_size
        # here) unless its hybrid allocator is allowed them: transformers 4.54+'s layer_types of it were refused
        cfg["layer_types"] = ["full_attention" if kind in ("attention", "chunked_attention") else kind
                              for kind in cfg["layer_types"]]
    if "mlp_only_layers" in cfg:  # layer numbers: a list of names was counted as that many dense layers
        for item in cfg["mlp_only_layers"]:
            whole_number(item, f"{label}: mlp_only_layers (layer numbers)", 0, ceiling("num_hidden_layers"))
    return cfg
