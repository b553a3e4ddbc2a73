"""A user preset saved from the window's preset editor: the model or hardware it was edited from
(a preset, or a model's config.json or folder), with the edits on top and a note of where it came
from."""

from __future__ import annotations

from pathlib import Path

from kvscope.app.lab.models.config_json import load_hf_config
from kvscope.app.lab.presets import load_hardware, load_model, save_user_preset
from kvscope.engine.config import ConfigError
from kvscope.engine.memory_math import num_parameters
from kvscope.engine.units import format_parameters


def _base(kind: str, base_name: str, model_file: str | None):
    """The model or hardware the editor's fields were read from, and what the saved preset's
    source says it came from: the file, when the model was opened from one (its name is only the
    folder's, and a preset of that name may be another model altogether)."""
    if kind == "models" and model_file:
        return load_hf_config(model_file), str(model_file)
    base = load_model(base_name) if kind == "models" else load_hardware(base_name)
    return base, base.name


def refused_edit(model, changes: dict) -> str | None:
    """Why an edit of the model's shape cannot be taken, said at its box: the KV heads of a model with
    multi-head latent attention were taken and read nowhere (its KV is one latent a token, as `math
    --kv-heads` refuses), and the layers of a model whose config lists each layer's kind were refused
    as "give one of full_attention, ... per layer", a list this editor has no field for."""
    if "num_key_value_heads" in changes and model.uses_mla:
        return (f"num_key_value_heads {changes['num_key_value_heads']:,}: {model.name} uses multi-head latent "
                f"attention, which caches one latent vector a token and layer ({model.kv_lora_rank} + "
                f"{model.qk_rope_head_dim} numbers), not K/V heads; give {model.num_key_value_heads:,} back")
    if "num_hidden_layers" in changes and model.layer_types:
        kinds = ", ".join(f"{model.layer_types.count(kind):,} {kind}" for kind in dict.fromkeys(model.layer_types))
        return (f"num_hidden_layers {changes['num_hidden_layers']:,}: {model.name} names each of its "
                f"{model.num_hidden_layers:,} layers' attention ({kinds}), which this editor cannot lay out for "
                f"another count; give {model.num_hidden_layers:,} back, or open a config.json whose layer_types "
                "list that many")
    return None


SHAPE_FIELDS = ("num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim", "hidden_size",
                "intermediate_size", "vocab_size")


def stated_weights_after(model, changes: dict) -> dict:
    """What an edit does to a checkpoint size the model states (gpt-oss-20b's 14.02 GiB as vLLM
    loads it): at another precision it is computed again; a shape edit scales it by the parameters
    the edit adds or takes away. qwen3.6-27b-fp8 edited to hidden_size 4096 still weighed its
    stated ~27 GiB, the checkpoint of the shape it no longer had."""
    if model.weights_bytes is None or not changes:
        return {}
    if "weight_dtype" in changes:
        return {"weights_bytes": None}
    shape = {k: v for k, v in changes.items() if k in SHAPE_FIELDS}
    try:
        before, after = num_parameters(model), num_parameters(model.replace(**shape))
    except (ConfigError, ArithmeticError, TypeError, ValueError):  # refused with its reason where it is built
        return {}
    if not shape or after == before or before <= 0:
        return {}
    return {"weights_bytes": max(1, round(model.weights_bytes * after / before)),
            "weights_source": f"{model.weights_source}; scaled to the edited shape's parameters "
                              f"({format_parameters(before)} to {format_parameters(after)} parameters)"}


def edited_preset_fields(kind: str, base_name: str, edits: dict, model_file: str | None = None) -> dict:
    """The fields of preset ``base_name`` ("models" or "hardware") -- or, for a model, of the
    config.json or model folder ``model_file`` when given -- with the editor's ``edits``.

    A model whose weight dtype changed drops its stated weight size (it is computed again); the
    hardware editor gives one 16-bit FLOP/s figure, and every precision's peak scales with it."""
    base, origin = _base(kind, base_name, model_file)
    fields = {k: v for k, v in base.__dict__.items() if k != "name"}
    edits = dict(edits)
    if kind == "hardware":
        scale = edits.pop("flops_16bit") / base.flops_for("fp16")
        fields["peak_flops"] = {k: v * scale for k, v in base.peak_flops.items()}
    else:
        refused = refused_edit(base, {k: v for k, v in edits.items() if getattr(base, k, v) != v})
        if refused:  # saved, it was a preset whose KV heads nothing reads, or refused in the engine's words
            raise ConfigError(refused)
    fields.update(edits)
    fields["source"] = f"edited from {origin} in kvscope"
    if kind == "models":
        fields.update(stated_weights_after(base, {k: v for k, v in edits.items() if getattr(base, k, v) != v}))
    return fields


def save_edited_preset(kind: str, name: str, base_name: str, edits: dict, model_file: str | None = None) -> Path:
    """Save the edited preset as the user's preset ``name``; ConfigError says why it cannot be."""
    return save_user_preset(kind, name, edited_preset_fields(kind, base_name, edits, model_file))
