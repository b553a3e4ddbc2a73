"""engine/config.py is the one home of every default and list of choices: the command line, the
window's settings form and the runners read them there, and nothing else spells them out."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from kvscope.engine.config import (
    ALLOCATIONS,
    BACKENDS,
    BLOCK_SIZES,
    DEFAULT_BACKEND,
    KV_CACHE_DTYPE_ALIASES,
    KV_CACHE_DTYPE_BYTES,
    KV_CACHE_DTYPES,
    KV_CACHE_PRECISIONS,
    SCHEDULINGS,
    WEIGHT_DTYPE_BYTES,
    ConfigError,
    EngineArgs,
)

ROOT = Path(__file__).resolve().parents[1]
DTYPE_NAMES = set(KV_CACHE_DTYPE_BYTES) | set(WEIGHT_DTYPE_BYTES)


def dtype_lists_outside_the_engine() -> list[str]:
    """Literal lists of precisions in app/ and widgets/: a tuple, list or set naming two or more,
    or a table (dict) keyed by four or more (a dict of a few, like FLOP/s per dtype, is data)."""
    found = []
    for folder in ("app", "widgets"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
                    items, least = node.elts, 2
                elif isinstance(node, ast.Dict):
                    items, least = [k for k in node.keys if k is not None], 4
                else:
                    continue
                names = {i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)}
                if len(names & DTYPE_NAMES) >= least:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} {sorted(names & DTYPE_NAMES)}")
    return found


def test_no_precision_list_is_written_outside_the_engine():
    """Adding a KV precision touches engine/ only: config.py (its bytes) and the real runner's storage."""
    assert dtype_lists_outside_the_engine() == []


def test_the_kv_precision_lists_derive_from_one_table():
    assert KV_CACHE_DTYPES == ("auto", *KV_CACHE_DTYPE_BYTES)
    assert set(KV_CACHE_PRECISIONS) == set(KV_CACHE_DTYPE_BYTES) - set(KV_CACHE_DTYPE_ALIASES)
    for alias, precision in KV_CACHE_DTYPE_ALIASES.items():
        assert KV_CACHE_DTYPE_BYTES[alias] == KV_CACHE_DTYPE_BYTES[precision]


def test_every_kv_precision_has_a_storage_type_in_the_real_runner():
    pytest.importorskip("torch")
    from kvscope.engine.runners.paged_cache import STORAGE_DTYPES

    assert set(STORAGE_DTYPES) == set(KV_CACHE_PRECISIONS)
    for precision in KV_CACHE_PRECISIONS:
        assert STORAGE_DTYPES[precision].itemsize == KV_CACHE_DTYPE_BYTES[precision]


def test_the_engine_refuses_a_value_outside_a_fixed_choice():
    for field, choices in (("scheduling", SCHEDULINGS), ("allocation", ALLOCATIONS)):
        for value in choices:
            assert getattr(EngineArgs(**{field: value}), field) == value
        with pytest.raises(ConfigError, match=f"{field} must be .*got 'nope'"):
            EngineArgs(**{field: "nope"})


def test_every_engine_argument_says_whether_it_has_a_flag():
    for field in dataclasses.fields(EngineArgs):
        meta = field.metadata
        assert {"help", "flags", "default_text", "choices", "unit"} <= set(meta), field.name
        if meta["flags"] is not None:
            assert meta["help"], f"{field.name} has a flag but no help"
        if meta["choices"]:
            assert field.default in meta["choices"], field.name


def test_the_settings_form_offers_the_engine_lists_and_starts_at_its_defaults():
    from kvscope.app.gui.run_settings import FORM_ENGINE_FIELDS, engine_defaults, settings_choices, weight_dtype_choices

    choices = settings_choices()
    assert [v for v, _ in choices["kv_cache_dtype"]] == list(KV_CACHE_DTYPES)
    assert [v for v, _ in choices["block_size"]] == list(BLOCK_SIZES)
    assert [v for v, _ in choices["scheduling"]] == list(SCHEDULINGS)
    assert [v for v, _ in choices["allocation"]] == list(ALLOCATIONS)
    assert sorted(v for v, _ in choices["backend"]) == sorted(BACKENDS)
    assert choices["backend"][0][0] == "real"  # the window starts on it
    assert weight_dtype_choices() == tuple(WEIGHT_DTYPE_BYTES)
    defaults = EngineArgs()
    resolved_share = {"gpu_memory_utilization": 0.92}  # vLLM 0.33's (EngineArgs leaves it to the version)
    assert engine_defaults() == {name: getattr(defaults, name) for name in FORM_ENGINE_FIELDS} | resolved_share
    assert EngineArgs().block_size in BLOCK_SIZES  # the form can show the default


def test_the_settings_panel_shows_and_returns_every_choice_it_is_given(qtbot):
    from kvscope.app.gui.run_settings import settings_choices, weight_dtype_choices
    from kvscope.widgets.preset_editor import PresetEditor
    from kvscope.widgets.settings_panel import CHOICE_FIELDS, SettingsPanel

    choices = settings_choices()
    assert set(CHOICE_FIELDS) == set(choices)
    panel = SettingsPanel(choices)
    qtbot.addWidget(panel)
    for field, pairs in choices.items():
        combo = panel.fields[field]
        assert [combo.itemText(i) for i in range(combo.count())] == [label for _, label in pairs]
        for value, _ in pairs:
            panel.set_values({field: value})
            assert panel.values()[field] == value
    panel.set_values({"kv_cache_dtype": "fp8", "scheduling": "static"})
    panel.set_values({"kv_cache_dtype": "int3"})  # not offered: the choice stays as it was
    assert panel.values()["kv_cache_dtype"] == "fp8" and panel.values()["scheduling"] == "static"
    editor = PresetEditor(weight_dtype_choices())
    qtbot.addWidget(editor)
    assert [editor.weight_dtype.itemText(i) for i in range(editor.weight_dtype.count())] == list(WEIGHT_DTYPE_BYTES)


def default_backends_written_in_app() -> list[str]:
    """A backend name given as a default in app/: a `default=` keyword, or the fallback of a `.get("backend", ...)`."""
    found = []
    for path in sorted((ROOT / "app").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            fallbacks = [k.value for k in node.keywords if k.arg == "default"]
            if (isinstance(node.func, ast.Attribute) and node.func.attr == "get" and len(node.args) == 2
                    and isinstance(node.args[0], ast.Constant) and node.args[0].value == "backend"):
                fallbacks.append(node.args[1])
            found += [f"{path.relative_to(ROOT)}:{node.lineno}" for value in fallbacks
                      if isinstance(value, ast.Constant) and value.value in BACKENDS]
    return found


def test_the_default_backend_is_written_once_in_the_engine_config():
    import argparse

    from kvscope.app.cli.options import add_backend_options

    assert DEFAULT_BACKEND in BACKENDS
    assert default_backends_written_in_app() == []
    parser = argparse.ArgumentParser()
    add_backend_options(parser)
    assert parser.parse_args([]).backend == DEFAULT_BACKEND
    assert f"(default {DEFAULT_BACKEND})" in " ".join(parser.format_help().split())


def test_the_memory_share_defaults_to_the_vllm_release_modelled():
    """vLLM raised --gpu-memory-utilization's default to 0.92 in 0.21, as it began holding back its
    CUDA-graph estimate (PR 38284): at 0.9 the default plan's KV pool was 12 % short on the L4."""
    from kvscope.app.lab.presets import load_hardware, load_model
    from kvscope.engine.config import default_gpu_memory_utilization, resolve_engine_args
    from kvscope.engine.memory_math import plan_memory

    assert [default_gpu_memory_utilization(v) for v in ("0.2", "0.20.1", "0.21", "0.33")] == [0.9, 0.9, 0.92, 0.92]
    model, hardware = load_model("llama-3-8b"), load_hardware("l4-24gb")
    for version, share in (("0.19", 0.9), ("0.33", 0.92)):
        resolved = resolve_engine_args(EngineArgs(vllm_version=version), model, hardware)
        assert resolved.gpu_memory_utilization == share
        assert plan_memory(model, hardware, resolved).gpu_memory_utilization == share
    typed = resolve_engine_args(EngineArgs(gpu_memory_utilization=0.5), model, hardware)
    assert typed.gpu_memory_utilization == 0.5  # a share given is kept, whatever the release
