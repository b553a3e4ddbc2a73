"""A ModelConfig from a Hugging Face config.json: the fields the memory math and the runners need."""

from __future__ import annotations

import json
from pathlib import Path

from kvscope.engine.config import WEIGHT_DTYPE_BYTES, ConfigError, ModelConfig, build_config, normalize_dtype


def _weight_dtype_from_hf(cfg: dict) -> str:
    quant = cfg.get("quantization_config") or {}
    if not isinstance(quant, dict):
        raise ConfigError(f"quantization_config must be an object, got {quant!r}")
    method = str(quant.get("quant_method", "")).lower()
    if method == "fp8":
        return "fp8"
    if method == "bitsandbytes":
        if quant.get("load_in_4bit"):
            return "nf4" if quant.get("bnb_4bit_quant_type", "nf4") == "nf4" else "int4"
        return "int8"
    if method in ("gptq", "awq") and quant.get("bits") == 4:
        return "int4"
    dtype = cfg.get("torch_dtype") or cfg.get("dtype") or "bf16"
    return normalize_dtype(dtype, WEIGHT_DTYPE_BYTES, "torch_dtype")


def model_from_hf_config(cfg: dict, name: str, label: str | None = None) -> ModelConfig:
    """A ModelConfig from the fields of a Hugging Face config.json; errors start with `label`."""
    label = label or f"config {name}"
    if "num_hidden_layers" not in cfg and isinstance(cfg.get("text_config"), dict):
        cfg = {**cfg["text_config"], "quantization_config": cfg.get("quantization_config")}
    missing = [k for k in ("num_hidden_layers", "num_attention_heads", "hidden_size", "vocab_size") if k not in cfg]
    if missing:
        raise ConfigError(f"{label}: missing field(s) {', '.join(missing)}")
    heads = cfg["num_attention_heads"]
    hidden = cfg["hidden_size"]
    head_dim = cfg.get("head_dim") or (hidden // heads if isinstance(hidden, int) and isinstance(heads, int) and heads else 0)
    model_type = str(cfg.get("model_type", "llama"))
    data = {
        "name": name,
        "num_hidden_layers": cfg["num_hidden_layers"],
        "num_attention_heads": heads,
        "num_key_value_heads": cfg.get("num_key_value_heads") or heads,
        "head_dim": head_dim,
        "hidden_size": hidden,
        "intermediate_size": cfg.get("intermediate_size") or 4 * hidden,
        "vocab_size": cfg["vocab_size"],
        "max_position_embeddings": cfg.get("max_position_embeddings") or 4096,
        "tie_word_embeddings": bool(cfg.get("tie_word_embeddings", False)),
        "attention_bias": bool(cfg.get("attention_bias", False)),
        "qk_norm": model_type == "qwen3",
        "model_type": model_type,
        "source": f"config.json ({name})",
    }
    for key in ("num_hidden_layers", "num_attention_heads", "hidden_size", "vocab_size"):
        if isinstance(data[key], bool) or not isinstance(data[key], (int, float)):
            raise ConfigError(f"{label}: {key} must be a whole number, got {data[key]!r}")
    try:
        data["weight_dtype"] = _weight_dtype_from_hf(cfg)
    except ConfigError as exc:
        raise ConfigError(f"{label}: {exc}") from None
    return build_config(ModelConfig, data, label)


def load_hf_config(path: str | Path) -> ModelConfig:
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"config {path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"config {path}: not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"config {path}: malformed JSON at line {exc.lineno}: {exc.msg}") from None
    except (ValueError, OverflowError) as exc:  # numbers JSON allows but Python cannot hold
        raise ConfigError(f"config {path}: {exc}") from None
    if not isinstance(cfg, dict):
        raise ConfigError(f"config {path}: expected a JSON object")
    name = path.parent.name if path.name == "config.json" else path.stem
    return model_from_hf_config(cfg, name or str(path), label=f"config {path}")
