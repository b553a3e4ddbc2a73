"""A user preset saved from the window's preset editor: the preset it was edited from, with the
edits on top and a note of where it came from."""

from __future__ import annotations

from pathlib import Path

from kvscope.app.lab.presets import load_hardware, load_model, save_user_preset


def edited_preset_fields(kind: str, base_name: str, edits: dict) -> dict:
    """The fields of preset ``base_name`` ("models" or "hardware") with the editor's ``edits``.

    A model whose weight dtype changed drops its stated weight size (it is computed again); the
    hardware editor gives one 16-bit FLOP/s figure, and every precision's peak scales with it."""
    base = load_model(base_name) if kind == "models" else load_hardware(base_name)
    fields = {k: v for k, v in base.__dict__.items() if k != "name"}
    edits = dict(edits)
    if kind == "hardware":
        scale = edits.pop("flops_16bit") / base.flops_for("fp16")
        fields["peak_flops"] = {k: v * scale for k, v in base.peak_flops.items()}
    fields.update(edits)
    fields["source"] = f"edited from {base.name} in kvscope"
    if kind == "models" and fields["weight_dtype"] != base.weight_dtype:
        fields["weights_bytes"] = None
    return fields


def save_edited_preset(kind: str, name: str, base_name: str, edits: dict) -> Path:
    """Save the edited preset as the user's preset ``name``; ConfigError says why it cannot be."""
    return save_user_preset(kind, name, edited_preset_fields(kind, base_name, edits))
