"""A ModelConfig from a Hugging Face config.json: the fields the memory math and the runners need.

Besides the dense shape it reads today's layouts: per-layer types (``layer_types``, or the older
spellings of the same fact: Gemma 2's alternation, Gemma 3's ``sliding_window_pattern``, the
``full_attention_interval`` of Qwen3-Next / Qwen3.5 hybrids, Mistral's every-layer window),
multi-head latent attention (``kv_lora_rank``, ``qk_rope_head_dim``) and expert counts.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from kvscope.app.lab.bounded_reads import load_json, read_capped
from kvscope.app.lab.models.config_fields import (
    ENCODER_DECODER,
    ENCODER_ONLY,
    RECURRENT_ONLY,
    checked_hf_fields,
    per_layer_type,
    with_compression_config,
)
from kvscope.app.lab.models.config_names import (
    kv_heads,
    refuse_text_config_apart,
    standard_names,
    text_config_of,
    tied_embeddings,
    wrapped_text_config,
)
from kvscope.app.lab.said_paths import os_error_text
from kvscope.engine.checks import MAX_BYTES, ceiling, shown, whole_number
from kvscope.app.lab.table_checks import build_config
from kvscope.engine.config import COMPUTE_DTYPES, WEIGHT_DTYPE_BYTES, ConfigError, ModelConfig, normalize_dtype

MAX_CONFIG_BYTES = 16 * 1024**2  # a config.json is a few KiB; one with a vocabulary inside, a few MiB

# model_type -> how its layers alternate when config.json has no layer_types
_EVERY_OTHER_SLIDING = {"gemma2"}  # even layers slide (Gemma 2: (i + 1) % 2)
# model_type -> the sliding_window_pattern its config class takes when config.json leaves it out (Gemma 3 27B's
# text_config does): read as all full attention, and Cohere 2's as every other layer sliding (its class: 3 of 4)
_DEFAULT_PATTERN = {"gemma3": 6, "gemma3_text": 6, "cohere2": 4}
_ALL_SLIDING = {"mistral", "mixtral", "starcoder2"}  # a sliding_window, when set, applies to every layer
# model_type -> an MLP of an up and a down projection, no gate (vLLM's model files: c_fc / fc1 / dense_h_to_4h):
# counted as three matrices, a StarCoder's weights were 43.6 GB for about 31
_UNGATED_MLP = {"gpt2", "gptj", "gpt_neo", "gpt_neox", "gpt_bigcode", "codegen", "falcon", "RefinedWeb",
                "RefinedWebModel", "mpt", "opt", "bloom", "phi", "starcoder2", "xglm", "persimmon", "nemotron",
                "apertus", "arcee", "fuyu"}  # Apertus' xIELU and Arcee AFM's ReLU^2: Apertus-8B was sized at 10.9 B;
# Fuyu's text model is a Persimmon (its config.json gives the shape at the top level too): Fuyu-8B was 11.81 B for 9.4


def modelopt_dtype(algo, where: str) -> str:
    """The weights' kind a ModelOpt quant_algo stores them as; `where` names the table that gives it."""
    kind = "fp8" if str(algo).upper().startswith("FP8") else "int4" if str(algo).upper() == "NVFP4" else None
    if kind is None:
        raise ConfigError(f"{where}: modelopt with quant_algo {shown(algo)}: kvscope sizes its FP8 and NVFP4 weights")
    return kind


# the weights' part of torchao's config names (Int8DynamicActivationInt4WeightConfig: int4 weights; the older
# int4_weight_only) -> the weights' kind
_TORCHAO_WEIGHTS = re.compile(r"(int4|int8|float8)_?weight")
_TORCHAO_KINDS = {"int4": "int4", "int8": "int8", "float8": "fp8"}


def _torchao_dtype(quant_type) -> str:
    """The weights' kind of torchao's quant_type: its "default" config's _type as transformers writes it
    ({"default": {"_type": "Int4WeightOnlyConfig", ...}}), or the older name ("int4_weight_only")."""
    kind = quant_type.get("default") if isinstance(quant_type, dict) else None
    name = kind.get("_type") if isinstance(kind, dict) else quant_type
    found = _TORCHAO_WEIGHTS.search(name.lower()) if isinstance(name, str) else None
    if found is None:
        said = "not given" if quant_type is None else shown(quant_type)
        raise ConfigError(f"quantization_config: torchao with quant_type {said}: kvscope sizes its Int4, "
                          'Int8 and Float8 weights ({"default": {"_type": "Int4WeightOnlyConfig", ...}})')
    return _TORCHAO_KINDS[found[1]]


def _weight_dtype_from_hf(cfg: dict) -> str:
    mlx = cfg.get("quantization")
    if isinstance(mlx, dict) and "bits" in mlx and not cfg.get("quantization_config"):  # sized as 16-bit weights
        raise ConfigError(f"quantization gives {shown(mlx.get('bits'))}-bit weights in MLX's own form (mlx-lm's "
                          "checkpoints), which vLLM and transformers do not load; give the config.json of the "
                          "model's Hugging Face release")
    quant = cfg.get("quantization_config") or {}
    if not isinstance(quant, dict):
        raise ConfigError(f"quantization_config must be an object, got {quant!r}")
    method = str(quant.get("quant_method", "")).lower()
    if method in ("fp8", "fbgemm_fp8", "mxfp4"):  # fbgemm_fp8: Meta's Llama 3.1 FP8 checkpoints, refused before
        return "int4" if method == "mxfp4" else "fp8"
    if method == "modelopt":  # NVIDIA's ModelOpt checkpoints (nvidia/...-FP8, -FP4), as vLLM reads them: refused
        return modelopt_dtype(quant.get("quant_algo"), "quantization_config")
    if quant.get("load_in_4bit") and quant.get("load_in_8bit"):  # sized as 4-bit without a word; transformers refuses
        raise ConfigError("quantization_config sets both load_in_4bit and load_in_8bit; bitsandbytes loads one of "
                          "them: keep the one the weights are")
    if quant.get("bnb_4bit_quant_type", "nf4") not in ("nf4", "fp4") and quant.get("load_in_4bit"):
        # "fp5" was sized as int4 without a word; bitsandbytes knows these two
        raise ConfigError(f"quantization_config.bnb_4bit_quant_type is {shown(quant['bnb_4bit_quant_type'])}; "
                          "bitsandbytes' 4-bit types are nf4 and fp4")
    if method == "bitsandbytes":
        if not quant.get("load_in_4bit") and not quant.get("load_in_8bit"):  # sized as 8-bit; transformers refuses
            raise ConfigError("quantization_config: bitsandbytes with neither load_in_4bit nor load_in_8bit true, so "
                              "how many bits its weights are cannot be told; set the one the weights are")
        if quant.get("load_in_4bit"):
            return "nf4" if quant.get("bnb_4bit_quant_type", "nf4") == "nf4" else "int4"
        return "int8"
    if method == "quark":  # AMD Quark checkpoints (amd/...-FP8-KV, -MXFP4), as vLLM reads them: refused before
        weight = (quant.get("global_quant_config") or {}).get("weight")
        weight = weight[0] if isinstance(weight, list) and weight else weight  # a list: the first scheme's
        # fp8_e4m3, int8 / uint8, and the 4-bit int4, uint4, fp4 and mxfp4
        bits = re.fullmatch(r"(mx)?(fp|u?int)([48])(_e\dm\d)?", str(weight.get("dtype")).lower()) \
            if isinstance(weight, dict) else None
        if bits:
            return "int4" if bits[3] == "4" else "fp8" if bits[2] == "fp" else "int8"
        said = "not given" if weight is None else shown(weight)
        raise ConfigError(f"quantization_config: quark with global_quant_config.weight {said}: kvscope sizes "
                          'its weights of dtype fp8_e4m3, int8, int4 or fp4 ({"dtype": "fp8_e4m3", ...})')
    if method == "fp_quant":  # FP-Quant's MXFP4 / NVFP4 checkpoints, as vLLM reads them: refused before
        forward = str(quant.get("forward_dtype", "mxfp4")).lower()
        if forward not in ("mxfp4", "nvfp4"):
            raise ConfigError(f"quantization_config: fp_quant with forward_dtype {shown(quant.get('forward_dtype'))}: "
                              "kvscope sizes its mxfp4 and nvfp4 weights")
        return "int4"
    if method == "torchao":  # torchao's checkpoints (pytorch/...-INT4, -FP8), as vLLM reads them: refused before
        return _torchao_dtype(quant.get("quant_type"))
    if method in ("gptq", "awq", "auto-round"):  # auto-round: Intel's AutoRound, packed as GPTQ's
        bits = quant.get("bits", quant.get("w_bit") if method == "awq" else None)  # AutoAWQ's w_bit, as vLLM reads
        if method == "awq" and quant.get("w_bit", bits) != bits:  # it; "bits None" was said of a file giving w_bit 4
            raise ConfigError(f"quantization_config: bits ({shown(bits)}) and w_bit ({shown(quant['w_bit'])}) are two "
                              "names of AWQ's weight bits and give different values; keep the one the weights are")
        if bits in (4, 8) and not isinstance(bits, bool):
            return "int4" if bits == 4 else "int8"
        raise ConfigError(f"quantization_config: {method} with bits {bits!r}: kvscope sizes 4- and 8-bit weights")
    if method == "compressed-tensors":  # llm-compressor checkpoints: the weights' bits and kind
        weights = next((g.get("weights") or {} for g in (quant.get("config_groups") or {}).values()
                        if isinstance(g, dict)), {})
        if not isinstance(weights, dict):
            raise ConfigError(f"quantization_config.config_groups: a group's weights must be a table like "
                              f'{{"num_bits": 4, "type": "int"}}, got {shown(weights)}')
        bits, kind = weights.get("num_bits"), weights.get("type")
        if bits == 8:
            return "fp8" if kind == "float" else "int8"
        if bits == 4:
            return "int4"
        if bits not in (None, 16):  # 2- or 3-bit weights sized as 16-bit ones would be 5 - 8x off
            raise ConfigError(f"quantization_config: compressed-tensors weights of {bits!r:.20} bits: kvscope sizes "
                              "4-, 8- and 16-bit weights")
    if quant and not method:  # as transformers reads it: only bitsandbytes' old configs may leave it out
        if quant.get("load_in_4bit") or quant.get("load_in_8bit"):
            return "nf4" if quant.get("load_in_4bit") and quant.get("bnb_4bit_quant_type", "nf4") == "nf4" \
                else "int4" if quant.get("load_in_4bit") else "int8"
        raise ConfigError("quantization_config has no quant_method, so how its weights are stored cannot be told "
                          "(sized as 16-bit they may be 2 - 4x off); give quant_method (fp8, mxfp4, bitsandbytes, "
                          "gptq, awq, compressed-tensors)")
    if quant and method not in ("", "compressed-tensors"):  # sized as 16-bit weights it would be 2 - 4x off, silently
        raise ConfigError(f"quantization_config: quant_method {quant.get('quant_method')!r} is not one kvscope sizes "
                          "(fp8, fbgemm_fp8, mxfp4, modelopt, quark, bitsandbytes, gptq, awq, auto-round, "
                          "compressed-tensors, fp_quant, torchao)")
    dtype = cfg.get("torch_dtype") or cfg.get("dtype") or "bf16"
    kind = normalize_dtype(dtype, WEIGHT_DTYPE_BYTES, "torch_dtype")
    if cfg.get("torch_dtype") and cfg.get("dtype"):  # transformers' new name beside its old one: torch_dtype was taken
        other = normalize_dtype(cfg["dtype"], WEIGHT_DTYPE_BYTES, "dtype")
        if other != kind:
            raise ConfigError(f"torch_dtype {cfg['torch_dtype'][:40]!r} and dtype {cfg['dtype'][:40]!r} (its newer "
                              "name) say different types for the weights; keep the one they are stored in")
    return kind


def _layer_types(cfg: dict, model_type: str, layers) -> list | None:
    """layer_types as config.json gives it, or as its older fields imply; None: all full attention.
    Llama 4's attention_chunk_size (chunked local attention in three layers of four) is full attention
    here as in vLLM, which sizes those layers as full ones unless its hybrid allocator is allowed them
    (VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1: "a latency regression", off by default)."""
    if not isinstance(layers, int) or isinstance(layers, bool):
        return cfg.get("layer_types")  # the layer count's own check reports it
    if cfg.get("layer_types") is not None:
        _refuse_older_layout_fields(cfg, cfg["layer_types"], layers)
        return cfg["layer_types"]
    interval = cfg.get("full_attention_interval")
    if interval is not None:  # Qwen3-Next / Qwen3.5: every interval-th layer is full attention
        if isinstance(interval, bool) or not isinstance(interval, int) or interval < 1:
            raise ConfigError(f"full_attention_interval must be a whole number of layers > 0, got {interval!r}")
        return ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(layers)]
    if not cfg.get("sliding_window") or cfg.get("use_sliding_window") is False:
        return None
    pattern = cfg.get("sliding_window_pattern", _DEFAULT_PATTERN.get(model_type))
    if isinstance(pattern, str):  # EXAONE 4's letters, repeated: L a sliding layer, G a full one
        return ["sliding_attention" if pattern[i % len(pattern)] == "L" else "full_attention" for i in range(layers)]
    if pattern is not None:  # Gemma 3: pattern - 1 sliding layers, then one full
        if isinstance(pattern, bool) or not isinstance(pattern, int) or pattern < 1:
            raise ConfigError(f"sliding_window_pattern must be a whole number of layers > 0, got {pattern!r}")
        return ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(layers)]
    if model_type in _EVERY_OTHER_SLIDING:
        return ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers)]
    if model_type in _ALL_SLIDING:
        return ["sliding_attention"] * layers
    if cfg.get("use_sliding_window") is True:  # Qwen2 / Qwen3: the layers from max_window_layers on slide
        first = cfg.get("max_window_layers")
        if first is None:  # every layer was sized as full attention, the flag dropped without a word
            raise ConfigError("use_sliding_window is true, but max_window_layers (how many of the first layers keep "
                              "full attention; the rest slide) is not given; give it, or use_sliding_window false")
        return ["sliding_attention" if i >= first else "full_attention" for i in range(layers)]
    return None


def _refuse_older_layout_fields(cfg: dict, given: list, layers: int) -> None:
    """layer_types beside an older field that says the same fact otherwise (Gemma 3's sliding_window_pattern,
    Qwen3-Next's full_attention_interval, use_sliding_window false): they must agree, the older was dropped."""
    if len(given) != layers:
        return  # the layer count's own check says it
    older = {k: cfg[k] for k in ("full_attention_interval", "sliding_window_pattern") if cfg.get(k) is not None}
    if cfg.get("use_sliding_window") is True and cfg.get("max_window_layers") is not None:
        older["max_window_layers"] = cfg["max_window_layers"]
    for key, value in older.items():
        implied = _layer_types({"sliding_window": 1, "use_sliding_window": True, key: value}, "", layers)
        if implied != given:
            raise ConfigError(f"layer_types and {key} ({shown(value)}) say different layers ({key} gives "
                              f"{_layout(implied)}, layer_types {_layout(given)}); keep the one the model has")
    if cfg.get("use_sliding_window") is False and "sliding_attention" in given:
        raise ConfigError(f"use_sliding_window is false, but layer_types lists {given.count('sliding_attention'):,} "
                          "sliding_attention layers; keep the one the model has")


def _layout(types: list) -> str:
    """How many layers of each type a layout has, as a message says it."""
    return ", ".join(f"{types.count(t)} {t}" for t in dict.fromkeys(types))


def _linear_state_bytes(cfg: dict, weight_dtype: str) -> int:
    """One Gated DeltaNet layer's state per request, as vLLM sizes it: a conv state of
    (2 x key + value dims) x (kernel - 1) in the model's dtype and a recurrent state of
    value heads x value dim x key dim in mamba_ssm_dtype (the model's dtype when not given)."""
    fields = ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
              "linear_conv_kernel_dim")
    missing = [f for f in fields if not isinstance(cfg.get(f), int) or isinstance(cfg.get(f), bool)]
    if missing:
        raise ConfigError(f"linear_attention layers need {', '.join(missing)} (whole numbers) to size their state")
    for f in fields:  # a 0 sized the state as 0 bytes (a kernel of 0: as -4), said as a field the file does not have
        whole_number(cfg[f], f, 2 if f == "linear_conv_kernel_dim" else 1, ceiling(f, MAX_BYTES))
    k_heads, v_heads, k_dim, v_dim, kernel = (cfg[f] for f in fields)
    model_bytes = 2 if weight_dtype not in ("fp32",) else 4
    ssm_dtype = cfg.get("mamba_ssm_dtype")
    if ssm_dtype and ssm_dtype.lower() != "auto":  # auto (vLLM's word): the model's dtype
        # the state is kept in a float type: int4 or nf4 sized it at half a byte an element, as no runtime keeps it
        try:
            ssm_bytes = WEIGHT_DTYPE_BYTES[normalize_dtype(ssm_dtype, dict.fromkeys(COMPUTE_DTYPES), "")]
        except ConfigError:
            raise ConfigError(f"mamba_ssm_dtype {ssm_dtype[:40]!r} is not a type a recurrent state is kept in; give "
                              "float32, float16, bfloat16 or auto (the model's)") from None
    else:
        ssm_bytes = model_bytes
    conv = (2 * k_heads * k_dim + v_heads * v_dim) * (kernel - 1) * model_bytes
    return int(conv + v_heads * v_dim * k_dim * ssm_bytes)


def _experts(cfg: dict, model_type: str) -> dict:
    counts = {k: cfg[k] for k in ("num_experts", "n_routed_experts", "num_local_experts") if cfg.get(k)}
    if len(set(counts.values())) > 1:  # the first was taken without a word
        raise ConfigError(f"{' and '.join(f'{k} ({v:,})' for k, v in counts.items())} give different expert counts; "
                          "keep the one the model has")
    count = next(iter(counts.values()), None)
    if not count:
        return {}
    for key in ("num_experts_per_tok", "experts_per_token"):
        if cfg.get(key) == 0:  # read as absent: "missing num_experts_per_tok", of a file that gives it
            raise ConfigError(f"{key} must be at least 1 (the experts each token runs), got 0")
    per_token = cfg.get("num_experts_per_tok") or cfg.get("experts_per_token")
    if cfg.get("experts_per_token") and per_token != cfg["experts_per_token"]:  # gpt-oss gives both, alike
        raise ConfigError(f"num_experts_per_tok ({per_token:,}) and experts_per_token ({cfg['experts_per_token']:,}) "
                          "give different numbers of experts a token runs; keep the one the model has")
    # Mixtral and gpt-oss give the expert MLP as intermediate_size and have no dense layers
    size = _given_or(cfg, "moe_intermediate_size", cfg.get("intermediate_size"))
    shared = cfg.get("shared_expert_intermediate_size") or 0
    if cfg.get("n_shared_experts"):  # DeepSeek: n shared experts of moe_intermediate_size
        if not cfg.get("moe_intermediate_size"):  # they were sized as 0 bytes, the experts as intermediate_size
            raise ConfigError(f"n_shared_experts ({cfg['n_shared_experts']:,}) are experts of moe_intermediate_size, "
                              "which it does not give; give moe_intermediate_size (a whole number > 0)")
        shared = cfg["n_shared_experts"] * cfg["moe_intermediate_size"]
        if cfg.get("shared_expert_intermediate_size") and cfg["shared_expert_intermediate_size"] != shared:
            # shared_expert_intermediate_size was replaced by n_shared_experts x moe_intermediate_size, silently
            raise ConfigError(f"shared_expert_intermediate_size ({cfg['shared_expert_intermediate_size']:,}) is not "
                              f"n_shared_experts x moe_intermediate_size ({cfg['n_shared_experts']:,} x "
                              f"{cfg['moe_intermediate_size']:,} = {shared:,}), the size of the shared experts "
                              "they give; keep the one the model has")
    dense = cfg.get("first_k_dense_replace") or 0
    layers = cfg.get("num_hidden_layers")
    if isinstance(layers, int) and dense > layers:  # said as num_dense_layers, a field the file does not have
        raise ConfigError(f"first_k_dense_replace ({dense:,}) is more than num_hidden_layers ({layers:,})")
    step = cfg.get("decoder_sparse_step")
    if step == 0:  # transformers divides by it
        raise ConfigError("decoder_sparse_step must be at least 1 (every step-th layer holds the experts), got 0")
    freq = cfg.get("moe_layer_freq", 1)  # DeepSeek: layer i past first_k_dense_replace holds experts if i % freq == 0
    if freq == 0:  # vLLM divides by it
        raise ConfigError("moe_layer_freq must be at least 1 (every freq-th layer holds the experts), got 0")
    if isinstance(cfg.get("mlp_only_layers"), list) or (step or 1) > 1 or freq > 1:  # these layers: a dense MLP
        numbers = set(cfg.get("mlp_only_layers") or ())  # [0, 0, 0] is one dense layer, not three
        if isinstance(layers, int) and freq > 1:  # read as experts on every layer: the experts' weights freq x
            numbers |= {i for i in range(layers) if i < dense or i % freq}
        past = sorted(n for n in numbers if isinstance(layers, int) and n >= layers)
        if past:
            raise ConfigError(f"mlp_only_layers names layer {past[0]:,}, but num_hidden_layers is {layers:,} "
                              f"(layers 0 to {layers - 1:,})")
        if isinstance(layers, int):  # only every step-th layer is sparse: a step of 2 was read as all of them
            numbers |= {i for i in range(layers) if (i + 1) % (step or 1)}
        dense = max(dense, len(numbers))
    if isinstance(layers, int) and dense == layers:  # said as num_dense_layers, a field the file does not have
        field = "first_k_dense_replace" if (cfg.get("first_k_dense_replace") or 0) == layers else \
            "decoder_sparse_step" if (step or 1) > layers else "moe_layer_freq" if freq > 1 else "mlp_only_layers"
        raise ConfigError(f"{field} makes all {layers:,} layers dense: no layer is left for its {count} experts; "
                          "give fewer dense layers, or no experts for a dense model")
    return {"num_experts": count, "num_experts_per_tok": per_token, "moe_intermediate_size": size,
            "shared_expert_intermediate_size": shared, "num_dense_layers": dense}


# vLLM takes a model's length from the smallest of these its config gives (GPT-2's n_positions, MPT's
# max_seq_len, ChatGLM's seq_length...): read as max_position_embeddings alone, a model without it got 4,096
LENGTH_FIELDS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "max_target_positions",
                 "max_sequence_length", "max_seq_length", "seq_len", "model_max_length")


def _given_or(cfg: dict, key: str, default):
    return default if cfg.get(key) is None else cfg[key]


def _rope_scaled_positions(scaling, positions, where: str) -> int | None:
    """vLLM's derived max_model_len when rope_scaling stretches the positions: its factor times
    max_position_embeddings (yarn: times original_max_position_embeddings). llama3, longrope and su
    scaling are in max_position_embeddings already, mrope stretches nothing. None: not stretched."""
    if not isinstance(scaling, dict) or isinstance(positions, bool) or not isinstance(positions, int):
        return None
    if per_layer_type(scaling):  # one table per type of layer, read as vLLM reads them: the last factor stands
        stretched = [n for kind, table in scaling.items()
                     if (n := _rope_scaled_positions(table, positions, f"{where}.{kind}"))]
        return stretched[-1] if stretched else None
    kind, factor = scaling.get("rope_type", scaling.get("type")), scaling.get("factor")
    if (kind in ("su", "longrope", "llama3", "mrope") or isinstance(factor, bool)
            or not isinstance(factor, (int, float)) or not factor < math.inf):
        return None
    if factor < 1:  # read as no stretch; vLLM multiplies by it, a shorter length than the positions
        raise ConfigError(f"{where}.factor is {shown(factor)}, below 1: rope scaling stretches the positions by it "
                          f"(1 or more; 1 is none), it does not shrink them")
    if factor == 1:
        return None
    base = scaling.get("original_max_position_embeddings") if kind == "yarn" else None
    if isinstance(base, bool) or not isinstance(base, int) or base <= 0:
        base = positions
    return int(min(base * factor, ceiling("max_model_len_limit")))  # a float product: 1e308 x 512 is inf


def _stretched_positions(cfg: dict, positions, label: str) -> int | None:
    """The positions rope_scaling (or rope_parameters, its transformers 5 name) stretches to; both given
    and stretching to different lengths is refused (rope_scaling's was taken without a word)."""
    if "gemma3" in str(cfg.get("model_type", "")):  # its 131,072 positions are stretched already (vLLM's rule):
        return None  # the linear factor of 8 stretched them to 1,048,576, which vLLM refuses
    old, new = (_rope_scaled_positions(cfg.get(key), positions, f"{label}: {key}")
                for key in ("rope_scaling", "rope_parameters"))
    if cfg.get("rope_scaling") is not None and cfg.get("rope_parameters") is not None and old != new:
        raise ConfigError(f"{label}: rope_scaling stretches max_position_embeddings ({shown(positions)}) to "
                          f"{shown(old or positions)} positions, rope_parameters (its newer name) to "
                          f"{shown(new or positions)}; keep the one the model was trained with")
    return old if cfg.get("rope_scaling") is not None else new


def model_from_hf_config(cfg: dict, name: str, label: str | None = None) -> ModelConfig:
    """A ModelConfig from the fields of a Hugging Face config.json; errors start with `label`."""
    label = label or f"config {name}"
    cfg = with_compression_config(cfg)
    where, wrapped = wrapped_text_config(cfg, label)
    if wrapped is not None:  # Qwen2.5-Omni's thinker_config.text_config, InternVL's llm_config, DeepSeek-VL2's
        # language_config: vLLM serves that text model; it was "missing field(s)" of the top level
        cfg = {**cfg, "text_config": wrapped}
    where = where or "text_config"
    if isinstance(cfg, dict) and cfg.get("num_hidden_layers") is None and isinstance(cfg.get("text_config"), dict):
        # (a null num_hidden_layers is absent, as below) the whole model's dtype and quantisation, where the text
        # model does not give its own: a float32 checkpoint was sized as bf16, and a text_config's own
        # quantization_config was dropped
        text = text_config_of(cfg)
        cfg = {**{k: cfg[k] for k in ("torch_dtype", "dtype") if cfg.get(k) is not None}, **text,
               "quantization_config": _given_or(cfg, "quantization_config", text.get("quantization_config"))}
        label = f"{label}: {where}"  # its fields are read: "num_attention_heads" alone sent the user to the top
    elif isinstance(cfg, dict) and isinstance(cfg.get("text_config"), dict):
        refuse_text_config_apart(cfg, label)
    cfg = checked_hf_fields(cfg, label)  # every field read below has its type, numbers in range
    model_type = cfg.get("model_type")
    if model_type in RECURRENT_ONLY:  # said as "missing field(s) num_attention_heads"
        raise ConfigError(f"{label}: {RECURRENT_ONLY[model_type]} (model_type {shown(model_type)}): it has no "
                          "attention layers and keeps no KV cache; kvscope sizes the KV cache of attention models "
                          "(Llama, Qwen, Mistral, DeepSeek, ...)")
    if cfg.get("is_encoder_decoder") or model_type in ENCODER_ONLY or model_type in ENCODER_DECODER:
        # said as missing fields, or sized
        kind = "an encoder-only" if model_type in ENCODER_ONLY and not cfg.get("is_encoder_decoder") \
            else "an encoder-decoder"
        raise ConfigError(f"{label}: {kind} model (model_type {shown(cfg.get('model_type', '?'))}); kvscope sizes the "
                          "KV cache of decoder-only models (Llama, Qwen, Mistral, DeepSeek, ...)")
    if cfg.get("use_bidirectional_attention") is True:  # EmbeddingGemma: sized as a decoder's KV cache, where vLLM
        # runs its layers as an encoder's (every token attends to every other, one forward a request) and keeps none
        raise ConfigError(f"{label}: use_bidirectional_attention is true: an encoder (an embedding model such as "
                          "EmbeddingGemma), which keeps no KV cache; kvscope sizes the KV cache of decoder-only "
                          "models (Llama, Qwen, Mistral, DeepSeek, ...)")
    cfg = standard_names(cfg, label)  # GPT-2's n_layer, MPT's d_model, ... as transformers' attribute_map reads them
    missing = [k for k in ("num_hidden_layers", "num_attention_heads", "hidden_size", "vocab_size") if k not in cfg]
    if missing and {"n_layers", "dim", "n_heads"} <= set(cfg):  # said as missing fields, the file's kind not named
        raise ConfigError(f"{label}: a params.json of Meta's or Mistral's own format (n_layers, dim, n_heads), not a "
                          "Hugging Face config.json; give the config.json of the model's Hugging Face release")
    if missing:
        from kvscope.app.lab.presets import meant_names  # imported when needed, as table_checks does

        given = [str(k) for k in cfg][:1000]  # "Num_Hidden_Layers" or "num_hidden_layers ": the field, misspelt
        near = [f"{meant[0]!r} for {k}" for k in missing if (meant := meant_names(k, given))]
        raise ConfigError(f"{label}: missing field(s) {', '.join(missing)}"
                          + (f" (it has {', '.join(near)}: field names are exact)" if near else ""))
    heads = cfg["num_attention_heads"]
    hidden = cfg["hidden_size"]
    model_type = str(cfg.get("model_type", "llama"))
    # absent (or null): hidden_size / heads, as transformers derives it; a 0 given is refused, not read as absent
    head_dim = _given_or(cfg, "head_dim",
                         hidden // heads if isinstance(hidden, int) and isinstance(heads, int) and heads else 0)
    if cfg.get("head_dim") is None and cfg.get("kv_lora_rank") is None and isinstance(hidden, int) \
            and isinstance(heads, int) and heads and hidden % heads:  # the floor was taken: 130 / 4 heads as 32 each
        raise ConfigError(f"{label}: hidden_size ({hidden:,}) is not a whole number of num_attention_heads "
                          f"({heads:,}), and head_dim, the width of one, is not given; give head_dim")
    lengths = {k: cfg[k] for k in LENGTH_FIELDS if cfg.get(k) is not None}
    shortest = min(lengths, key=lengths.get) if lengths else None  # vLLM's: the smallest given; each said by name,
    # not as max_position_embeddings (seq_length 0 was "max_position_embeddings must be greater than 0")
    positions = whole_number(lengths[shortest], f"{label}: {shortest}", 1, ceiling("max_position_embeddings")) \
        if lengths else 2048  # vLLM's default max_model_len for a config.json without one (it warns); any is allowed
    data = {
        "name": name,
        "num_hidden_layers": cfg["num_hidden_layers"],
        "num_attention_heads": heads,
        # as vLLM counts them (multi_query: 1); none given: as many as the attention heads
        "num_key_value_heads": kv_heads(cfg, heads, label),
        "head_dim": head_dim,
        "hidden_size": hidden,
        # absent (or null): 4 x hidden_size; a 0 given is refused, not sized as an MLP the file does not have
        "intermediate_size": _given_or(cfg, "intermediate_size", 4 * hidden if isinstance(hidden, int) else 0),
        "vocab_size": cfg["vocab_size"],
        "max_position_embeddings": positions,
        "max_position_embeddings_given": bool(lengths),
        # transformers 5 writes rope_scaling as rope_parameters: its yarn factor was read as no stretch at all
        "max_model_len_limit": _stretched_positions(cfg, positions, label),
        "tie_word_embeddings": tied_embeddings(cfg),  # absent: its config class's default (Gemma's: tied)
        "attention_bias": bool(cfg.get("attention_bias", False)),
        "qk_norm": model_type in ("qwen3", "qwen3_moe"),
        "gated_mlp": model_type not in _UNGATED_MLP,
        "model_type": model_type,
        "source": f"config.json ({name})",
    }
    for key in ("num_hidden_layers", "num_attention_heads", "hidden_size", "vocab_size"):
        if isinstance(data[key], bool) or not isinstance(data[key], (int, float)):
            raise ConfigError(f"{label}: {key} must be a whole number, got {data[key]!r}")
    try:
        data["weight_dtype"] = _weight_dtype_from_hf(cfg)
        if cfg.get("kv_lora_rank") == 0 and cfg.get("qk_rope_head_dim"):  # read as no latent: qk_rope_head_dim dropped
            raise ConfigError("kv_lora_rank is 0 beside qk_rope_head_dim: multi-head latent attention caches a latent "
                              "of kv_lora_rank per token; give it (a whole number > 0), or leave both out (null) for "
                              "a model without it")
        if cfg.get("kv_lora_rank"):  # multi-head latent attention
            absent = [k for k in ("qk_nope_head_dim", "qk_rope_head_dim") if not cfg.get(k)]
            if absent:  # their sum is the head_dim: a 0 was said as "head_dim must be greater than 0", a field not given
                raise ConfigError(f"kv_lora_rank (multi-head latent attention) needs {' and '.join(absent)} "
                                  "(whole numbers > 0): the attention head is qk_nope_head_dim + qk_rope_head_dim")
            data.update(kv_lora_rank=cfg["kv_lora_rank"], qk_rope_head_dim=cfg.get("qk_rope_head_dim"),
                        q_lora_rank=cfg.get("q_lora_rank"), v_head_dim=cfg.get("v_head_dim"),
                        head_dim=(cfg.get("qk_nope_head_dim") or 0) + (cfg.get("qk_rope_head_dim") or 0))
        types = _layer_types(cfg, model_type, data["num_hidden_layers"])
        if types is not None:
            data["layer_types"] = types
            if isinstance(types, list) and "sliding_attention" in types:
                data["sliding_window"] = cfg.get("sliding_window")
            if isinstance(types, list) and "linear_attention" in types:
                data["linear_state_bytes"] = _linear_state_bytes(cfg, data["weight_dtype"])
        data.update(_experts(cfg, model_type))
    except ConfigError as exc:
        raise ConfigError(f"{label}: {exc}") from None
    except (TypeError, AttributeError) as exc:  # inside a table config_fields does not describe field by field
        raise ConfigError(f"{label}: a field has an unexpected type ({exc})") from None
    if model_type in _LATENT_CACHED_PER_HEAD and data.get("kv_lora_rank"):
        data = _cached_per_head(data, label)
    return build_config(ModelConfig, data, label)


_LATENT_CACHED_PER_HEAD = {"minicpm3"}  # vLLM's MLA cache is DeepSeek's, Kimi's, LongCat's: MiniCPM3's caches its
# 40 heads x 96 (930 KiB a token), sized before as the latent (35 KiB)


def _cached_per_head(data: dict, label: str) -> dict:
    """data as vLLM caches it, its weights the latent attention's (as heads they would be 1.6 B more for 4.07 B); a
    float32 checkpoint's are left to be counted, as a fixed size would keep a GPU from serving them in 16 bits."""
    from kvscope.engine.memory_math import weights_bytes

    size, said = weights_bytes(build_config(ModelConfig, data, label))
    fixed = {"weights_bytes": size, "weights_source": f"{said}; its latent attention's keys and values cached per "
             "head, as vLLM does"} if data.get("weight_dtype") != "fp32" else {}
    return {**data, "kv_lora_rank": None, "qk_rope_head_dim": None, "q_lora_rank": None, "v_head_dim": None,
            "num_key_value_heads": data["num_attention_heads"], **fixed}


def _preset_kind(data: bytes) -> str | None:
    """Which kind of kvscope TOML file the bytes are (a model or hardware preset, ...), or None."""
    from kvscope.app.lab.presets import file_kind, tomllib  # tomli on Python 3.10

    try:
        return file_kind(tomllib.loads(data.decode("utf-8-sig")))
    except (UnicodeDecodeError, ValueError, RecursionError):  # TOMLDecodeError is a ValueError
        return None


# the first bytes of the weights files a model folder holds beside its config.json
_WEIGHTS_MAGIC = ((b"GGUF", "a GGUF file (llama.cpp weights)"), (b"PK\x03\x04", "a zip archive (PyTorch's .bin and "
                  ".pt weights are one)"), (b"\x80\x02", "pickled PyTorch weights"))


def _head(path: Path) -> bytes:
    try:
        if path.is_file():  # a regular file: a pipe or a device is never opened here
            with open(path, "rb") as handle:
                return handle.read(16)
    except OSError:
        pass
    return b""


def _refuse_weights_file(path: Path, head: bytes) -> None:
    """A weights file named where its config.json belongs was said as "malformed JSON at line 1, column 1"."""
    kind = next((what for magic, what in _WEIGHTS_MAGIC if head.startswith(magic)), None)
    if kind is None and head[4:9] == b"\0\0\0\0{" and int.from_bytes(head[:8], "little") > 1:
        kind = "a safetensors weights file"  # an 8-byte header length (under 4 GiB), then the header's JSON
    if kind:
        raise ConfigError(f"config {path}: {kind}, not a config.json; give the config.json beside the weights, or "
                          "the folder that holds it")


def _with_modelopt_file(folder: Path, cfg: dict) -> dict:
    """cfg with ModelOpt's hf_quant_config.json read as its quantization_config when config.json has none, as vLLM
    reads it (NVIDIA's FP8 and NVFP4 checkpoints keep it there): its FP8 weights were sized as 16-bit ones."""
    aside = folder / "hf_quant_config.json"
    if cfg.get("quantization_config") is not None or not aside.is_file():
        return cfg
    label = f"config {aside}"
    quant = load_json(read_capped(aside, label, MAX_CONFIG_BYTES, "hf_quant_config.json"), label, unique_keys=True)
    if not isinstance(quant, dict) or not isinstance(quant.get("quantization"), dict):
        raise ConfigError(f'{label}: expected ModelOpt\'s {{"quantization": {{"quant_algo": "FP8", ...}}}}, got '
                          f"{shown(quant)}")
    modelopt_dtype(quant["quantization"].get("quant_algo"), f"{label}: quantization")
    return {**cfg, "quantization_config": {"quant_method": "modelopt", **quant["quantization"]}}


def refuse_mistral_folder(folder: Path, label: str) -> None:
    """A folder of Mistral's own format (params.json, no config.json): was "cannot read: no such file"."""
    if (folder / "params.json").is_file() and not (folder / "config.json").exists():
        raise ConfigError(f"{label}: no config.json, but a params.json: Mistral's own format (vLLM reads it with "
                          "--config-format mistral), which kvscope does not read; give the config.json of the "
                          "model's Hugging Face release")


def load_hf_config(path: str | Path) -> ModelConfig:
    path = Path(path)
    try:
        is_folder = path.is_dir()
    except (OSError, ValueError) as exc:  # a name over 255 bytes (ENAMETOOLONG), a NUL in it
        raise ConfigError(f"config {os_error_text(path, exc)}") from None
    if is_folder:
        refuse_mistral_folder(path, f"config {path}")
        path = path / "config.json"
    try:
        data = read_capped(path, f"config {path}", MAX_CONFIG_BYTES, "config.json")
    except ConfigError:  # a weights file of gigabytes named: said as too big for a config.json, what it is not said
        _refuse_weights_file(path, _head(path))
        raise
    _refuse_weights_file(path, data[:16])
    try:
        cfg = load_json(data, f"config {path}", unique_keys=True)
    except ConfigError:
        kind = _preset_kind(data)  # said as "malformed JSON at line 1, column 1", what to give instead not said
        if kind == "model preset":
            from kvscope.app.lab.presets import user_presets_root

            folder = user_presets_root() / "models"
            raise ConfigError(f"config {path}: a kvscope model preset (TOML), not a Hugging Face config.json (JSON); "
                              f"save it as {folder}/NAME.toml and give --model NAME, or give a config.json") from None
        if kind:
            raise ConfigError(f"config {path}: a kvscope {kind} file (TOML), not a Hugging Face config.json (JSON) "
                              "of a model's shape; give the model's config.json") from None
        raise
    if not isinstance(cfg, dict):
        raise ConfigError(f"config {path}: expected a JSON object")
    cfg = with_compression_config(cfg)
    name = path.parent.name if path.name == "config.json" else path.stem
    if path.name == "config.json":
        cfg = _with_modelopt_file(path.parent, cfg)
    model = model_from_hf_config(cfg, name or str(path), label=f"config {path}")
    # a model folder, or its config.json named: weights it says are quantised must be (fp8 over F32 was sized at
    # a byte each); a config.json alone in its folder is sized as it says
    if path.name == "config.json":
        from kvscope.app.lab.models.loader import check_quantised_storage

        check_quantised_storage(path.parent, cfg)
    return model
