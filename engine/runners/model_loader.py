"""Loading a local Hugging Face model for the real runner: offline, safetensors, no remote code.

A model directory holds config.json, *.safetensors and, optionally, a tokenizer. Pickled
weights (*.bin) load only when the caller passes allow_pickle. Models already in the local
Hugging Face cache are discovered so the user can pick one without typing a path.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from kvscope.engine.config import WEIGHT_DTYPE_BYTES, ConfigError, ModelConfig
from kvscope.engine.units import GiB
from kvscope.engine.hf_config import model_from_hf_config

SUPPORTED_ARCHITECTURES = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
}
QUANTIZATIONS = ("int8", "nf4")
_TORCH_DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


@dataclass
class LoadedModel:
    hf_model: object  # a transformers PreTrainedModel, in eval mode
    tokenizer: object | None
    config: ModelConfig  # weights_bytes is what the loaded weights really occupy
    path: Path
    device: object  # torch.device
    random_weights: bool = False
    quantization: str | None = None

    @property
    def label(self) -> str:
        kind = "random weights" if self.random_weights else "weights from disk"
        quant = f", {self.quantization}" if self.quantization else ""
        return f"{self.config.name} ({kind}{quant}, {self.config.weight_dtype} on {self.device})"


def _read_config(path: Path) -> dict:
    config_file = path / "config.json"
    if not path.is_dir():
        raise ConfigError(f"model directory {path}: no such directory")
    if not config_file.is_file():
        raise ConfigError(f"model directory {path}: missing config.json")
    try:
        return json.loads(config_file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"model directory {path}: config.json is malformed at line {exc.lineno}: {exc.msg}") from None


def check_model_directory(path: str | Path, allow_pickle: bool = False) -> dict:
    """The parsed config.json if the directory holds a loadable, supported model; else a ConfigError."""
    path = Path(path)
    cfg = _read_config(path)
    archs = cfg.get("architectures") or []
    supported = [a for a in archs if a in SUPPORTED_ARCHITECTURES]
    if not supported:
        names = ", ".join(archs) or f"model_type {cfg.get('model_type')!r}"
        raise ConfigError(
            f"model directory {path}: unsupported architecture {names}; kvscope runs "
            f"{', '.join(SUPPORTED_ARCHITECTURES)}"
        )
    if cfg.get("auto_map"):
        raise ConfigError(f"model directory {path}: needs remote code (auto_map), which kvscope never runs")
    has_safetensors = any(path.glob("*.safetensors"))
    has_pickle = any(path.glob("*.bin"))
    if not has_safetensors:
        if has_pickle and not allow_pickle:
            raise ConfigError(
                f"model directory {path}: only pickled *.bin weights, which can run arbitrary code when loaded; "
                "convert them to safetensors, or pass --allow-pickle if you trust the source"
            )
        if not has_pickle:
            raise ConfigError(f"model directory {path}: no weights (*.safetensors) found")
    index = path / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = set(json.loads(index.read_text())["weight_map"].values())
        except (json.JSONDecodeError, KeyError):
            raise ConfigError(f"model directory {path}: model.safetensors.index.json is malformed") from None
        missing = sorted(s for s in shards if not (path / s).is_file())
        if missing:
            raise ConfigError(f"model directory {path}: missing weight shard(s) {', '.join(missing)}")
    return cfg


def resolve_device(requested: str | None):
    import torch

    if requested:
        try:
            device = torch.device(requested)
        except RuntimeError as exc:
            raise ConfigError(f"unknown device {requested!r}: {exc}") from None
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ConfigError(f"device {requested!r} asked for, but this machine has no CUDA device")
        return device
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _available_bytes(device) -> int:
    import torch

    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return free
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_weights_fit(model: ModelConfig, device, dtype: str) -> None:
    """Refuse, before allocating anything, a model whose weights cannot fit on the device."""
    from kvscope.engine.memory_math import num_parameters

    expected = num_parameters(model) * WEIGHT_DTYPE_BYTES[dtype]
    available = _available_bytes(device)
    if expected > available:
        raise ConfigError(
            f"{model.name} needs about {expected / GiB:.1f} GiB for its weights as {dtype}, "
            f"but {device} has {available / GiB:.1f} GiB"
        )


def load_model_directory(path: str | Path, device: str | None = None, dtype: str | None = None,
                         quantization: str | None = None, allow_pickle: bool = False,
                         random_weights: bool = False, name: str | None = None) -> LoadedModel:
    import torch
    from transformers import AutoModelForCausalLM

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    path = Path(path)
    cfg = check_model_directory(path, allow_pickle)
    dev = resolve_device(device)
    model_config = model_from_hf_config(cfg, name or path.name)
    if dtype is None:
        dtype = "fp32" if dev.type == "cpu" else ("bf16" if model_config.weight_dtype == "bf16" else "fp16")
    if dtype not in _TORCH_DTYPES:
        raise ConfigError(f"weights can load as {', '.join(_TORCH_DTYPES)}; got {dtype!r}")
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise ConfigError(f"unknown quantization {quantization!r}; choose {', '.join(QUANTIZATIONS)}")

    check_weights_fit(model_config, dev, quantization or dtype)

    kwargs = dict(local_files_only=True, trust_remote_code=False, use_safetensors=not allow_pickle or None,
                  dtype=getattr(torch, _TORCH_DTYPES[dtype]))
    if quantization:
        kwargs["quantization_config"] = _bitsandbytes_config(quantization, dev, dtype)
        kwargs["device_map"] = {"": dev}
    try:
        hf_model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    except Exception as exc:  # corrupt or mismatched weights raise many kinds (SafetensorError among them)
        first_line = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise ConfigError(f"model directory {path}: cannot load: {first_line}") from None
    if not quantization:
        hf_model.to(dev)
    hf_model.eval()
    # Parameters only: buffers such as rotary frequencies are bytes, not weights, and leaving them
    # out keeps this figure equal to the one `kvscope math` derives from the config.
    weights = sum(p.numel() * p.element_size() for p in hf_model.parameters())
    loaded_config = model_config.replace(weight_dtype=quantization or dtype, weights_bytes=int(weights),
                                         weights_source="the loaded model's parameters, measured",
                                         source=f"local model directory {path}")
    return LoadedModel(hf_model, _tokenizer(path), loaded_config, path, dev, random_weights, quantization)


def _bitsandbytes_config(quantization: str, device, dtype: str):
    try:
        import bitsandbytes  # noqa: F401
        from transformers import BitsAndBytesConfig
    except ImportError:
        raise ConfigError("weight quantisation needs bitsandbytes: pip install 'kvscope[quantization]'") from None
    if device.type != "cuda":
        raise ConfigError(f"bitsandbytes {quantization} needs a CUDA device on this platform; this run is on {device}")
    import torch

    if quantization == "nf4":
        return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                  bnb_4bit_compute_dtype=getattr(torch, _TORCH_DTYPES[dtype]))
    return BitsAndBytesConfig(load_in_8bit=True)


def _tokenizer(path: Path):
    if not any((path / f).is_file() for f in ("tokenizer.json", "tokenizer.model", "tokenizer_config.json")):
        return None
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(path, local_files_only=True, trust_remote_code=False)
    except (OSError, ValueError):
        return None


def hf_cache_root() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    home = Path(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface")
    return home / "hub"


@dataclass(frozen=True)
class CachedModel:
    name: str  # org/name as on the Hub
    path: Path  # the snapshot directory
    architecture: str
    weights_bytes: int
    supported: bool


def discover_cached_models(root: Path | None = None) -> list[CachedModel]:
    """Models in the local Hugging Face cache (models--org--name/snapshots/<revision>/)."""
    root = root or hf_cache_root()
    found = []
    if not root.is_dir():
        return found
    for repo in sorted(root.glob("models--*")):
        snapshots = sorted((repo / "snapshots").glob("*/config.json"), key=lambda p: p.stat().st_mtime)
        if not snapshots:
            continue
        snapshot = snapshots[-1].parent
        try:
            cfg = json.loads(snapshots[-1].read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
        arch = ",".join(cfg.get("architectures") or []) or str(cfg.get("model_type", "?"))
        size = sum(p.stat().st_size for p in snapshot.glob("*.safetensors"))
        name = repo.name[len("models--"):].replace("--", "/")
        found.append(CachedModel(name, snapshot, arch, size, arch in SUPPORTED_ARCHITECTURES and size > 0))
    return found
