"""The older field names of a config.json read as the standard ones, and the KV head count as vLLM takes it.

GPT-2, GPT-J and GPTBigCode (StarCoder 1) write n_layer, n_head, n_embd (n_inner for the MLP); Bloom n_layer,
n_head (n_embed in its oldest files); MPT and DBRX n_layers, n_heads, d_model; the RefinedWeb Falcons n_layer,
n_head; ChatGLM num_layers, padded_vocab_size, ffn_hidden_size, kv_channels. transformers reads them through
each config class's attribute_map, and vLLM serves these models: they were refused as "missing field(s)".
Each is read as its standard name when that is absent; both given and different is refused, naming both.

The KV head count follows vLLM (ModelConfig.get_total_num_kv_heads): multi_query (GPTBigCode, Falcon without
new_decoder_architecture) is one KV head; MPT and DBRX give theirs as attn_config.kv_n_heads; then the first
of n_head_kv, num_kv_heads, num_key_value_heads, multi_query_group_num (ChatGLM); else one per attention head.
A StarCoder's 48 heads were sized as 48 KV heads where vLLM keeps 1: its KV cache 48x too big.
"""

from __future__ import annotations

from kvscope.engine.checks import ConfigError, ceiling, shown, whole_number

# standard name -> the older names that say it, in the order they are looked at
ALIASES = {
    "num_hidden_layers": ("n_layer", "n_layers", "num_layers"),
    "num_attention_heads": ("n_head", "n_heads"),
    "hidden_size": ("n_embd", "n_embed", "d_model"),
    # ffn_dim: OPT's and XGLM's; ff_intermediate_size: Phi-3-small's (read as 4 x hidden_size, 8.2 B for 7.4 B)
    "intermediate_size": ("n_inner", "ffn_hidden_size", "ffn_dim", "ff_intermediate_size"),
    "vocab_size": ("padded_vocab_size",),
    "head_dim": ("kv_channels",),
    # ERNIE 4.5's MoE (transformers' Ernie4_5_MoeConfig): read as a dense model, its 64 experts were left out
    "num_experts": ("moe_num_experts",),
    # moe_topk: Aria's and Hunyuan's (read as absent: "missing num_experts_per_tok" of a file that gives it)
    "num_experts_per_tok": ("moe_k", "moe_topk"),
    "n_shared_experts": ("moe_num_shared_experts", "num_shared_experts"),  # num_shared_experts: Ling's (bailing_moe)
    "decoder_sparse_step": ("moe_layer_frequency",),  # Arctic's: every n-th layer holds the experts, as Qwen-MoE's
}
# model types whose intermediate_size is the gate and up projections' width together (their fused matrix), each half
# of it, as vLLM builds them: Molmo-7B-D's 37,888 (Qwen2-7B's MLP of 18,944) was sized at 13.32 B parameters for 7.6
_FUSED_MLP_WIDTH = {"qwen", "molmo"}
_SIZES = ("num_hidden_layers", "num_attention_heads", "hidden_size", "intermediate_size", "vocab_size", "head_dim")
KV_HEAD_FIELDS = ("n_head_kv", "num_kv_heads", "num_key_value_heads", "multi_query_group_num")
# the config classes whose multi_query is true when config.json leaves it out (transformers' and vLLM's default)
_MULTI_QUERY_BY_DEFAULT = {"gpt_bigcode", "falcon", "RefinedWebModel", "RefinedWeb"}
_FALCONS = {"falcon", "RefinedWebModel", "RefinedWeb"}
# model types whose config class ties the LM head to the embeddings when config.json does not say (transformers'
# defaults, which vLLM reads): Gemma 2 2B's file leaves it out, and its 256,000 x 2,304 head was sized as a
# second matrix of 590 M parameters the model does not have
TIED_BY_DEFAULT = {"gemma", "gemma2", "gemma3", "gemma3_text", "gpt2", "gpt_bigcode", "gpt_neo", "gpt-sw3",
                   "openai-gpt", "ctrl", "xglm", "biogpt", "bloom", "falcon", "RefinedWeb", "RefinedWebModel", "mpt",
                   "opt", "starcoder2", "cohere", "cohere2", "ernie4_5", "ernie4_5_moe", "jetmoe", "smollm3",
                   "minicpm3", "granite_swa",
                   # MiniCPM 1 / 2's (openbmb's MiniCPMConfig): MiniCPM-2B's file leaves it out, 3.01 B for 2.72;
                   # JAIS's config class keeps PretrainedConfig's default (tied), as GPT-2's
                   "minicpm", "jais"}
# transformers writes a multimodal model's text_config as its difference from the text model's config class
# (to_diff_dict): fields left at that class's defaults are absent (llava-1.5-7b's text_config gives no layer
# count, Gemma 3 4B's no heads, llava-v1.6-mistral's no width). transformers, and vLLM through it, read them as
# those defaults; they were refused as "missing field(s)". model_type -> its config class's defaults
_LLAMA = {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
          "num_attention_heads": 32, "max_position_embeddings": 2048}
_GEMMA2 = {"vocab_size": 256000, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
           "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "max_position_embeddings": 8192,
           "sliding_window": 4096}
_QWEN2_VL_72B = {"vocab_size": 152064, "hidden_size": 8192, "intermediate_size": 29568, "num_hidden_layers": 80,
                 "num_attention_heads": 64, "num_key_value_heads": 8, "max_position_embeddings": 32768}
TEXT_CONFIG_DEFAULTS = {
    "llama": _LLAMA,
    "mistral": {**_LLAMA, "intermediate_size": 14336, "num_key_value_heads": 8, "max_position_embeddings": 131072,
                "sliding_window": 4096},
    "qwen2": {**_LLAMA, "vocab_size": 151936, "intermediate_size": 22016, "max_position_embeddings": 32768},
    "gemma": {"vocab_size": 256000, "hidden_size": 3072, "intermediate_size": 24576, "num_hidden_layers": 28,
              "num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 256, "max_position_embeddings": 8192},
    "gemma2": _GEMMA2,
    "gemma3_text": {**_GEMMA2, "vocab_size": 262208, "max_position_embeddings": 131072},
    # transformers 4.52+ writes Qwen2-VL's and Qwen2.5-VL's text model as a text_config, a difference from these
    # (Qwen2-VL-72B's shape): a 72B fine-tune saved so gives no width, layers nor heads ("missing field(s) ...")
    "qwen2_vl_text": _QWEN2_VL_72B,
    "qwen2_5_vl_text": _QWEN2_VL_72B,
    "qwen3_vl_text": {"vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 22016, "num_hidden_layers": 32,
                      "num_attention_heads": 32, "num_key_value_heads": 32, "head_dim": 128,
                      "max_position_embeddings": 128000},
}
# a wrapper's text model when its text_config does not say (transformers' LlavaConfig, Gemma3Config, ... build
# that class): a Gemma 3 text_config without model_type was read as a Llama (no window layout, an untied head)
_TEXT_MODEL_OF = {"llava": "llama", "llava_next": "llama", "vipllava": "llama", "llava_next_video": "llama",
                  "llava_onevision": "qwen2", "mistral3": "mistral", "paligemma": "gemma", "gemma3": "gemma3_text",
                  "aria": "aria_text", "qwen2_vl": "qwen2_vl_text", "qwen2_5_vl": "qwen2_5_vl_text",
                  "qwen3_vl": "qwen3_vl_text"}


# where a multimodal wrapper keeps its language model's config besides text_config (vLLM serves that model):
# InternVL's, NVLM-D's, Ovis' and Nemotron Nano VL's llm_config, DeepSeek-VL2's language_config, Qwen2.5-Omni's
# thinker_config.text_config; each was "missing field(s) num_hidden_layers, ..." of the top level
WRAPPED_TEXT_CONFIGS = ("llm_config", "language_config")


def wrapped_text_config(cfg: dict, label: str) -> tuple:
    """(where, the table) of a wrapper's language model config kept under another name than text_config; (None,
    None) where there is none, or config.json gives a text_config itself."""
    named = cfg.get("text_model_id") if isinstance(cfg, dict) else None
    if named is not None:  # Ultravox: vLLM builds its text model from that model's own config.json, fetched by
        # name; the file has no shape ("missing field(s)"), or a text_config of {"model_type": "llama"} that was
        # sized as Llama 2's class defaults (7.5 B, 32 KV heads) for a Llama 3.1 8B (8 KV heads: its KV cache 4x)
        raise ConfigError(f"{label}: text_model_id ({shown(named)}) names the language model this one wraps "
                          "(Ultravox), whose shape vLLM reads from that model's own config.json, not from this file "
                          "(a text_config beside it is not read); give that model's config.json")
    if not isinstance(cfg, dict) or cfg.get("text_config") is not None:
        return None, None
    thinker = cfg.get("thinker_config")
    if isinstance(thinker, dict) and isinstance(thinker.get("text_config"), dict):
        return "thinker_config.text_config", thinker["text_config"]
    for key in WRAPPED_TEXT_CONFIGS:
        if cfg.get(key) is not None and not isinstance(cfg[key], dict):
            raise ConfigError(f"{label}: {key} must be a table (the language model's config.json fields), got "
                              f"{shown(cfg[key])}")
        if cfg.get(key) is not None:
            return key, cfg[key]
    return None, None


def text_config_of(cfg: dict) -> dict:
    """A wrapper's text_config with the fields it leaves at its text model's config-class defaults filled in."""
    text = cfg["text_config"]
    kind = text.get("model_type") or _TEXT_MODEL_OF.get(str(cfg.get("model_type")))
    return {**TEXT_CONFIG_DEFAULTS.get(str(kind), {}), **text, **({"model_type": kind} if kind else {})}


def refuse_text_config_apart(cfg: dict, label: str) -> None:
    """config.json's own shape beside a text_config giving another (Qwen2.5-VL's files give both, alike): the top
    level was read without a word, where transformers and vLLM read the text_config."""
    text = cfg["text_config"]
    for key in (*_SIZES, "num_key_value_heads"):
        if cfg.get(key) is not None and text.get(key) is not None and cfg[key] != text[key]:
            raise ConfigError(f"{label}: {key} ({shown(cfg[key])}) and text_config.{key} ({shown(text[key])}) give "
                              "the text model two shapes (vLLM reads the text_config's); keep the one it has")


# config.json fields this module reads, for config_fields' type checks
NAME_FIELDS = {**{old: "whole" for olds in ALIASES.values() for old in olds},
               **dict.fromkeys(KV_HEAD_FIELDS, "whole"), "expansion_ratio": "whole", "multi_query": "flag",
               "new_decoder_architecture": "flag", "attn_config": "table", "ffn_config": "table",
               "moe_layer_start_index": "whole", "moe_layer_interval": "whole", "interleave_moe_layer_step": "whole",
               "intermediate_size_mlp": "whole", "moe_layers": "list", "use_residual": "flag", "residual_moe": "flag",
               "moe_layer_freq": "whole", "shared_intermediate_size": "whole"}


def standard_names(cfg: dict, label: str) -> dict:
    """cfg with each standard field an older name gives filled in (MPT's expansion_ratio x d_model as the MLP,
    DBRX's ffn_config as its experts); two names of one field giving different values are refused."""
    out = dict(cfg)
    for name, olds in ALIASES.items():
        given = {key: cfg[key] for key in (name, *olds) if cfg.get(key) is not None}
        if len(set(given.values())) > 1:  # the standard name was taken, the other dropped without a word
            said = " and ".join(f"{key} ({shown(value)})" for key, value in given.items())
            raise ConfigError(f"{label}: {said} are two names of one field ({name}) and give different values; "
                              "keep the one the model has")
        for key in olds if name in _SIZES else ():  # a 0 or a billion was said of the standard name, not given
            if key in given:
                whole_number(given[key], f"{label}: {key}", 1, ceiling(name))
        if given:
            out[name] = next(iter(given.values()))
    ratio, hidden = cfg.get("expansion_ratio"), out.get("hidden_size")
    if ratio is not None and out.get("intermediate_size") is None and isinstance(hidden, int) and hidden:
        # MPT: the MLP is expansion_ratio x d_model wide; a ratio past the ceiling was said as intermediate_size
        out["intermediate_size"] = whole_number(ratio, f"{label}: expansion_ratio (the MLP's width / d_model)", 1,
                                                max(1, ceiling("intermediate_size") // hidden)) * hidden
    if str(cfg.get("model_type")) == "dbrx":
        out.update(_dbrx_experts(cfg, label))
    if str(cfg.get("model_type")) == "arctic" and cfg.get("use_residual") and out.get("hidden_size"):
        # Arctic's dense residual MLP (hidden_size wide) beside the experts of each of their layers: left out, the
        # 480 B model was sized at 473 B
        out.setdefault("shared_expert_intermediate_size", out["hidden_size"])
    if cfg.get("residual_moe") is True and out.get("moe_intermediate_size") and out.get("intermediate_size"):
        # Grok-2's dense MLP (intermediate_size wide) beside its experts (moe_intermediate_size) on every layer, as
        # vLLM builds it: left out, the 270 B model was sized at 218 B (115 B active at 64)
        out.setdefault("shared_expert_intermediate_size", out["intermediate_size"])
    if str(cfg.get("model_type")) in ("granitemoehybrid", "granitemoeshared") and cfg.get("shared_intermediate_size"):
        # Granite's shared_mlp, on every layer: the whole MLP of Granite 4.0 Micro (no experts), beside the experts
        # of the others; its experts' intermediate_size was sized as the dense MLP and the shared one left out
        experts = cfg.get("num_local_experts") or cfg.get("num_experts")
        out["shared_expert_intermediate_size" if experts else "intermediate_size"] = cfg["shared_intermediate_size"]
    if str(cfg.get("model_type")) == "aria_text" and (out.get("num_experts") or 0) > 0:
        # Aria's experts are intermediate_size wide and its moe_num_shared_experts (its class's default 2, which
        # the file leaves out) shared ones alike, as transformers and vLLM build them: refused before as missing
        # num_experts_per_tok (moe_topk)
        out.setdefault("moe_intermediate_size", out.get("intermediate_size"))
        out.setdefault("n_shared_experts", 2)
    if str(cfg.get("model_type")).startswith("hunyuan") and out.get("num_experts") == 1:
        # Hunyuan's dense models (Hunyuan-7B) give num_experts 1 and moe_topk 1: vLLM builds a dense MLP, not an
        # expert; read as one, they were "missing num_experts_per_tok" (moe_topk) or "1 experts (1 per token)"
        out = {k: v for k, v in out.items() if k not in ("num_experts", "num_experts_per_tok")}
    if str(cfg.get("model_type")).startswith("hunyuan") and (out.get("num_experts") or 0) > 1 \
            and cfg.get("use_mixed_mlp_moe", True) and isinstance(out.get("intermediate_size"), int):
        # Hunyuan's shared MLP beside the experts: num_shared_expert x intermediate_size wide, as vLLM builds it
        out.setdefault("shared_expert_intermediate_size", cfg.get("num_shared_expert", 1) * out["intermediate_size"])
    if str(cfg.get("model_type")) in _FUSED_MLP_WIDTH and isinstance(out.get("intermediate_size"), int):
        out["intermediate_size"] //= 2  # Qwen (1)'s and Molmo's MLP: half its intermediate_size wide, as vLLM builds it
    if any(cfg.get(key) is not None for key in ("moe_layer_start_index", "moe_layer_end_index", "moe_layer_interval")):
        out["mlp_only_layers"] = _ernie_dense_layers(out, label)
    if str(cfg.get("model_type")) == "llama4_text" or cfg.get("interleave_moe_layer_step") is not None:
        out.update(_llama4_layers(out, label))
    return out


def _llama4_layers(cfg: dict, label: str) -> dict:
    """Llama 4's MoE as transformers and vLLM build it: every interleave_moe_layer_step-th layer (or those
    moe_layers names) holds the experts of intermediate_size and a shared one alike; the others a dense MLP
    of intermediate_size_mlp. Read as experts on every layer and no shared one, Maverick was sized at 778 B
    parameters for its 400 B."""
    layers, width = cfg.get("num_hidden_layers"), cfg.get("intermediate_size")
    if not isinstance(layers, int) or not (cfg.get("num_local_experts") or cfg.get("num_experts")):
        return {}
    step = whole_number(cfg.get("interleave_moe_layer_step", 1), f"{label}: interleave_moe_layer_step", 1, layers)
    moe = cfg.get("moe_layers")
    if moe is None:
        moe = range(step - 1, layers, step)
    for n in moe:
        whole_number(n, f"{label}: moe_layers (layer numbers from 0 to {layers - 1:,})", 0, layers - 1)
    out = {"moe_intermediate_size": cfg.get("moe_intermediate_size", width),
           "shared_expert_intermediate_size": cfg.get("shared_expert_intermediate_size", width),
           "mlp_only_layers": [i for i in range(layers) if i not in set(moe)]}
    if not moe:  # said as mlp_only_layers, a field the file does not have
        raise ConfigError(f"{label}: moe_layers is empty: no layer holds the {cfg.get('num_local_experts') or 0:,} "
                          "experts; name the layers that do, or leave moe_layers out (every "
                          "interleave_moe_layer_step-th)")
    if cfg.get("intermediate_size_mlp") is not None:
        out["intermediate_size"] = cfg["intermediate_size_mlp"]
    return out


def _ernie_dense_layers(cfg: dict, label: str) -> list:
    """The dense layers of ERNIE 4.5's MoE: a layer holds the experts when (i + 1) % moe_layer_interval is 0 and
    moe_layer_start_index <= i <= moe_layer_end_index (-1: the last layer), as transformers builds it."""
    layers = cfg.get("num_hidden_layers")
    if not isinstance(layers, int) or cfg.get("mlp_only_layers") is not None:
        return cfg.get("mlp_only_layers")  # the layer count's own check says it; both given: mlp_only_layers'
    start, interval = cfg.get("moe_layer_start_index", 1), cfg.get("moe_layer_interval", 1)
    end = cfg.get("moe_layer_end_index", -1)
    end = whole_number(end, f"{label}: moe_layer_end_index (a layer number, or -1 for the last)", -1, layers - 1)
    end = layers - 1 if end == -1 else end
    if interval < 1:
        raise ConfigError(f"{label}: moe_layer_interval must be at least 1 (every interval-th layer holds the "
                          f"experts), got {interval}")
    dense = [i for i in range(layers) if not (start <= i <= end and (i + 1) % interval == 0)]
    if len(dense) == layers and cfg.get("num_experts"):  # else said as mlp_only_layers, a field the file lacks
        raise ConfigError(f"{label}: moe_layer_start_index ({start:,}), moe_layer_end_index ({end:,}) and "
                          f"moe_layer_interval ({interval:,}) leave no layer of the {layers:,} for the experts")
    return dense


def _dbrx_experts(cfg: dict, label: str) -> dict:
    """DBRX's ffn_config (moe_num_experts, moe_top_k, ffn_hidden_size) as the expert fields config_json reads:
    read as a dense model of 4 x d_model its 16 experts' weights were left out."""
    ffn = cfg.get("ffn_config") or {}
    fields = {"moe_num_experts": "num_local_experts", "moe_top_k": "num_experts_per_tok",
              "ffn_hidden_size": "moe_intermediate_size"}
    out = {}
    for key, name in fields.items():
        if ffn.get(key) is not None:
            out[name] = whole_number(ffn[key], f"{label}: ffn_config.{key}", 1, ceiling(name))
    if "num_local_experts" in out:
        out.setdefault("intermediate_size", out.get("moe_intermediate_size"))
    return {k: v for k, v in out.items() if v is not None}


def tied_embeddings(cfg: dict) -> bool:
    """Whether the LM head is the embedding matrix: as config.json says, else its model type's default."""
    return bool(cfg.get("tie_word_embeddings", str(cfg.get("model_type")) in TIED_BY_DEFAULT))


def kv_heads(cfg: dict, heads, label: str):
    """The KV head count vLLM keeps for cfg (read after standard_names); heads: the attention heads."""
    model_type = str(cfg.get("model_type", ""))
    new_falcon = model_type in _FALCONS and (cfg.get("new_decoder_architecture") is True
                                             or model_type == "RefinedWeb")  # the 40B's own type: vLLM sets it
    multi_query = cfg.get("multi_query", model_type in _MULTI_QUERY_BY_DEFAULT)
    if multi_query is True and not new_falcon:
        return 1  # multi-query attention: one KV head for all of them
    if model_type in ("mpt", "dbrx"):
        given = (cfg.get("attn_config") or {}).get("kv_n_heads")
        return heads if given is None else whole_number(given, f"{label}: attn_config.kv_n_heads", 1,
                                                        ceiling("num_key_value_heads"))
    given = {key: cfg[key] for key in KV_HEAD_FIELDS if cfg.get(key) is not None}
    if len(set(given.values())) > 1:  # vLLM takes the first; the others were never looked at
        said = " and ".join(f"{key} ({shown(value)})" for key, value in given.items())
        raise ConfigError(f"{label}: {said} give different numbers of KV heads; keep the one the model has")
    for key, value in given.items():  # a 0 was said as num_key_value_heads, a field the file may not have
        whole_number(value, f"{label}: {key}", 1, ceiling("num_key_value_heads"))
    return next(iter(given.values()), heads)
