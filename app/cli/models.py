"""`kvscope models`: what the real backend can run — the trained model kvscope ships, the model
presets (random weights of their shape), the models in the local Hugging Face cache, and those
kvscope has built."""

from __future__ import annotations

import os

from kvscope.app.lab.models.loader import discover_cached_models, hf_cache_root
from kvscope.app.lab.presets import load_model, preset_names
from kvscope.app.lab.trained_model import TRAINED_MODEL, find_gguf, is_converted, trained_model_dir
from kvscope.app.lab.verify.tiny_model import cache_dir
from kvscope.engine.config import ConfigError
from kvscope.engine.units import format_bytes
from kvscope.app.cli.output import shown


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("models",
                                   help="models the real backend can run: presets, the local Hugging Face cache")
    parser.set_defaults(func=run)


def _trained_model_state() -> str:
    if is_converted():
        return f"ready in {trained_model_dir()}"
    try:
        return f"converted on first use from {find_gguf()}"
    except ConfigError as exc:
        return f"not installed: {exc}"


def _unusable_cache() -> str | None:
    """Why kvscope's cache folder can hold no model (KVSCOPE_CACHE_DIR, or HOME, naming a file)."""
    from kvscope.app.cli.options import check_cache_variable

    try:
        check_cache_variable()
    except ConfigError as exc:
        return str(exc)
    return None


def run(args) -> int:
    # every line through shown(): the cache folders come from HF_HUB_CACHE, HF_HOME and
    # KVSCOPE_CACHE_DIR, and a folder named with ESC [ 2 J cleared the terminal it was listed on
    def say(text: str = "") -> None:
        print(shown(text, "\n"))

    say(f"trained (real weights and a tokenizer; --backend real --model {TRAINED_MODEL.name}):")
    say(f"  {TRAINED_MODEL.name:<22} {TRAINED_MODEL.description} ({TRAINED_MODEL.licence})")
    say(f"  {'':<22} {_trained_model_state()}")
    say("\npresets (real backend: random weights of this shape, built on first use):")
    for name in preset_names("models"):
        try:
            description = load_model(name).description
        except ConfigError as exc:  # one broken user preset is listed as such; the others still are
            description = f"(invalid: {exc})"
        say(f"  {shown(name):<22} {description}")  # padded by the escaped name's width, as it shows
    cached = discover_cached_models()
    root = hf_cache_root()
    say(f"\nHugging Face cache ({root}):")
    if os.path.exists(root) and not os.path.isdir(root):  # HF_HUB_CACHE or HF_HOME naming a file: not "no models"
        say("  not a folder (HF_HUB_CACHE or HF_HOME names a file): no models can be found there")
    elif not cached:
        say("  no models")
    for m in cached:
        note = "" if m.supported else "  (not supported: kvscope runs Llama, Mistral, Qwen2, Qwen3 with safetensors)"
        say(f"  {m.name:<40} {m.architecture:<22} {format_bytes(m.weights_bytes):<22} {m.path}{note}")
    built = sorted(p for p in (cache_dir() / "models").glob("*")
                   if not p.name.startswith(".") and (p / "config.json").is_file())
    say(f"\nbuilt by kvscope ({cache_dir() / 'models'}):")
    unusable = _unusable_cache()
    if unusable:  # a listing, so said in it: "none yet" said a file there could still hold models
        say(f"  none can be: {unusable}")
    elif not built:
        say("  none yet")
    for p in built:
        say(f"  {p.name}")
    return 0
