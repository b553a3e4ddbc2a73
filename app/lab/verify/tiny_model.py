"""Small models built locally from a preset: random weights from a fixed seed, saved as
safetensors with a config.json, so the real backend runs out of the box with no download.

Built once into the user's cache directory ($KVSCOPE_CACHE_DIR, else ~/.cache/kvscope) and
loaded from there like any local model. The tests build one of each supported family this way.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from kvscope.engine.config import ModelConfig

HF_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")


def cache_dir() -> Path:
    return Path(os.environ.get("KVSCOPE_CACHE_DIR") or Path.home() / ".cache" / "kvscope")


def make_cache_folder(folder: Path) -> Path:
    """A folder inside kvscope's cache, made if missing; a cache that cannot hold one (KVSCOPE_CACHE_DIR
    a file, /dev/null, a read-only place) is a ConfigError naming it, not a traceback from mkdir."""
    from kvscope.engine.config import ConfigError

    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        given = os.environ.get("KVSCOPE_CACHE_DIR")
        where = f"KVSCOPE_CACHE_DIR={given}" if given else f"the kvscope cache {cache_dir()}"
        raise ConfigError(f"cannot make the folder {folder} ({exc.strerror or exc}): {where} must be a folder "
                          "kvscope can write, or unset") from None
    return folder


def hf_config_for(model: ModelConfig):
    """A transformers config of the model's family with the preset's fields."""
    from transformers import AutoConfig

    fields = dict(
        num_hidden_layers=model.num_hidden_layers, num_attention_heads=model.num_attention_heads,
        num_key_value_heads=model.num_key_value_heads, head_dim=model.head_dim, hidden_size=model.hidden_size,
        intermediate_size=model.intermediate_size, vocab_size=model.vocab_size,
        max_position_embeddings=model.max_position_embeddings, tie_word_embeddings=model.tie_word_embeddings,
    )
    if model.model_type in ("llama", "qwen3"):
        fields["attention_bias"] = model.attention_bias
    return AutoConfig.for_model(model.model_type, **fields)


def _fingerprint(model: ModelConfig, seed: int) -> str:
    fields = {k: getattr(model, k) for k in (
        "model_type", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim", "hidden_size",
        "intermediate_size", "vocab_size", "max_position_embeddings", "tie_word_embeddings", "attention_bias")}
    fields.update(seed=seed)
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:10]


def build_random_model(model: ModelConfig, directory: Path, seed: int = 0) -> Path:
    """Write config.json + model.safetensors of a random-weight model of this shape."""
    import torch
    from transformers import AutoModelForCausalLM

    config = hf_config_for(model)
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        hf_model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    finally:
        torch.random.set_rng_state(generator_state)
    directory.mkdir(parents=True, exist_ok=True)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_model.save_pretrained(directory, safe_serialization=True)
    return directory


def ensure_random_model(model: ModelConfig, seed: int = 0, root: Path | None = None) -> Path:
    """The directory of this shape's random model, building it on first use (atomically)."""
    if model.model_type not in HF_MODEL_TYPES:
        from kvscope.engine.config import ConfigError

        raise ConfigError(f"cannot build a {model.model_type!r} model; supported: {', '.join(HF_MODEL_TYPES)}")
    root = root or cache_dir() / "models"
    target = root / f"{model.name}-{_fingerprint(model, seed)}"
    if (target / "config.json").is_file() and any(target.glob("*.safetensors")):
        return target
    make_cache_folder(root)
    staging = Path(tempfile.mkdtemp(prefix=".building-", dir=root))
    try:
        build_random_model(model, staging, seed)
        try:
            staging.rename(target)
        except OSError:  # another process finished first
            pass
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target
