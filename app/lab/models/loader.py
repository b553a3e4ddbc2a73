"""Loading a local Hugging Face model for the real runner: offline, safetensors, no remote code.

A model directory holds config.json, *.safetensors and, optionally, a tokenizer. Pickled
weights (*.bin) load only when the caller passes allow_pickle. Models already in the local
Hugging Face cache are discovered so the user can pick one without typing a path.
Weights quantise on load (int8, nf4) through bitsandbytes wherever it has a backend (CUDA; the
CPU from 0.48), probed first on one small layer so that elsewhere the user reads one sentence.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

from kvscope.app.lab.bounded_reads import load_json, read_capped
from kvscope.app.lab.models.config_fields import checked_hf_fields, with_compression_config
from kvscope.app.lab.models.config_json import MAX_CONFIG_BYTES, model_from_hf_config, refuse_mistral_folder
from kvscope.app.lab.models.config_names import WRAPPED_TEXT_CONFIGS
from kvscope.app.lab.models.safetensors_header import safetensors_header
from kvscope.app.lab.table_checks import require_table
from kvscope.engine.checks import shown
from kvscope.engine.config import COMPUTE_DTYPES, QUANTIZATIONS, WEIGHT_DTYPE_BYTES, ConfigError, ModelConfig
from kvscope.engine.runners.loaded_model import LoadedModel
from kvscope.engine.units import GiB

SUPPORTED_ARCHITECTURES = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
}
SUPPORTED_MODEL_TYPES = tuple(SUPPORTED_ARCHITECTURES.values())
MAX_INDEX_BYTES = 64 * 1024**2  # model.safetensors.index.json: a few MiB for the largest models
NAMES_LISTED = 5  # of the parameters that do not match, the first few by name
_TORCH_DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


def _read_config(path: Path) -> dict:
    config_file = path / "config.json"
    if path.is_file():
        raise ConfigError(f"model directory {path}: is a file; give the directory that holds config.json and the "
                          "weights")
    if not path.is_dir():  # a FIFO or a device exists too: "no such directory" named the wrong cause
        said = "not a directory (a pipe or a device)" if path.exists() else "no such directory"
        raise ConfigError(f"model directory {path}: {said}")
    if not config_file.is_file():
        refuse_mistral_folder(path, f"model directory {path}")
        raise ConfigError(f"model directory {path}: missing config.json")
    label = f"model directory {path}: config.json"
    cfg = load_json(read_capped(config_file, label, MAX_CONFIG_BYTES, "config.json"), label, unique_keys=True)
    if not isinstance(cfg, dict):
        raise ConfigError(f"{label}: expected a JSON object of model fields, got {shown(cfg)}")
    return with_compression_config(cfg)


def _architecture(cfg: dict, path: Path) -> str:
    """The supported model type the directory holds, from `architectures` (or, when config.json
    has none, from `model_type`, as transformers itself picks the class)."""
    cfg = checked_hf_fields(cfg, f"model directory {path}: config.json")
    archs = cfg.get("architectures")
    if archs:
        supported = [a for a in archs if a in SUPPORTED_ARCHITECTURES]
        if not supported:
            raise ConfigError(f"model directory {path}: unsupported architecture {', '.join(archs)}; kvscope runs "
                              f"{', '.join(SUPPORTED_ARCHITECTURES)}")
        return SUPPORTED_ARCHITECTURES[supported[0]]
    model_type = cfg.get("model_type")
    if model_type in SUPPORTED_MODEL_TYPES:
        return model_type
    said = f"model_type {model_type!r}" if model_type else "no model_type"
    raise ConfigError(f"model directory {path}: config.json has no architectures and {said}; kvscope runs "
                      f"{', '.join(SUPPORTED_ARCHITECTURES)} (model_type {', '.join(SUPPORTED_MODEL_TYPES)})")


def _index_map(path: Path) -> dict:
    """model.safetensors.index.json's weight_map: tensor name -> the shard file (a plain file name in
    the directory) that holds it."""
    label = f"model directory {path}: model.safetensors.index.json"
    index = load_json(read_capped(path / "model.safetensors.index.json", label, MAX_INDEX_BYTES,
                                  "safetensors index"), label, unique_keys=True)
    weight_map = require_table(require_table(index, label).get("weight_map"), f"{label}: weight_map",
                               '{"model.embed_tokens.weight": "model-00001-of-00002.safetensors", ...}')
    for shard in weight_map.values():
        if not isinstance(shard, str) or not shard or Path(shard).name != shard or shard in (".", ".."):
            raise ConfigError(f"{label}: weight_map names a shard {shown(shard)}; each must be a file name in the "
                              "model directory")
        if not shard.endswith(".safetensors"):  # config.json read as weights: "its header length says 8,243,..."
            raise ConfigError(f"{label}: weight_map names a shard {shown(shard)}; each is a .safetensors file")
    return weight_map


def check_model_directory(path: str | Path, allow_pickle: bool = False) -> dict:
    """The parsed config.json if the directory holds a loadable, supported model; else a ConfigError."""
    path = Path(path)
    cfg = _read_config(path)
    _architecture(cfg, path)
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
    shards, index = ["model.safetensors"], None
    if (path / "model.safetensors.index.json").exists():
        index = _index_map(path)
        shards = sorted(set(index.values()))
        missing = [s for s in shards if not (path / s).exists()]
        if missing:
            raise ConfigError(f"model directory {path}: missing weight shard(s) {', '.join(missing)}")
    # A pipe named model.safetensors blocked the weights' check (and the load) on open, for ever
    for name in sorted({*shards, *(p.name for p in path.glob("*.safetensors"))}):
        if (path / name).is_symlink() and not (path / name).exists():  # transformers: "no file named ... found"
            raise ConfigError(f"model directory {path}: weight file {name} is a link that leads nowhere (to a missing "
                              "file, or round a loop of links); link it to the weights, or copy them there")
        if (path / name).exists() and not (path / name).is_file():
            raise ConfigError(f"model directory {path}: weight file {name} is not a regular file (a folder, a pipe "
                              "or a device); the weights are *.safetensors files")
    _check_generation_config(path, cfg)
    if has_safetensors:
        _check_weight_files(path, [s for s in shards if (path / s).is_file()], index,
                            cfg.get("quantization_config") or None)
    return cfg


# safetensors dtypes of whole numbers: an unquantised model's parameter stored as one is cast to a
# float on load (an I32 holding a float's bits becomes 1e9-sized weights) and the model runs on nonsense
_WHOLE_NUMBER_DTYPES = {"BOOL", "U8", "I8", "I16", "U16", "I32", "U32", "I64", "U64"}


MAX_GENERATION_CONFIG_BYTES = 1024**2  # a few hundred bytes: the ids that end an answer, sampling defaults


def _check_generation_config(path: Path, cfg: dict) -> None:
    """generation_config.json, when there is one, a JSON object whose eos_token_id (the ids that end an
    answer, which kvscope stops on) is an id or a list of ids of the model's vocabulary. transformers
    skips a malformed file without a word and keeps any id: an answer then never ended where the model ends it."""
    if not (path / "generation_config.json").is_file():  # a pipe there is passed over, as transformers does
        return
    label = f"model directory {path}: generation_config.json"
    data = load_json(read_capped(path / "generation_config.json", label, MAX_GENERATION_CONFIG_BYTES,
                                 "generation_config.json"), label, unique_keys=True)
    require_table(data, label)
    eos = data.get("eos_token_id")
    if eos is None:
        return
    vocab = cfg.get("vocab_size")
    vocab = vocab if isinstance(vocab, int) and not isinstance(vocab, bool) and vocab > 0 else None
    ids = eos if isinstance(eos, list) and eos else [eos]
    for token in ids:
        if isinstance(token, bool) or not isinstance(token, int) or token < 0 or (vocab and token >= vocab):
            span = f"0 to {vocab - 1:,} (config.json vocab_size {vocab:,})" if vocab else "0 or more"
            raise ConfigError(f"{label}: eos_token_id must be a token id, or a list of them, from {span}; got "
                              f"{shown(eos)}")


# A checkpoint config.json says is stored quantised by these methods holds tensors of these dtypes
# (fp8: the weights; gptq and awq: int32-packed qweight; mxfp4: uint8 blocks)
_STORED_AS = {"fp8": ("F8_E4M3", "F8_E5M2", "F8_E4M3FNUZ", "F8_E5M2FNUZ"), "gptq": ("I32",), "awq": ("I32",),
              "auto-round": ("I32",),
              "mxfp4": ("U8",), "fbgemm_fp8": ("F8_E4M3",), "modelopt": ("F8_E4M3", "U8")}  # modelopt's NVFP4: U8


def _check_weight_files(path: Path, shards: list, index: dict | None, quantization) -> None:
    """Each weight file's header whole (safetensors_header), every tensor the index places in a shard
    there, and, for a model config.json does not say is quantised, every parameter stored as floats;
    for one stored quantised (fp8, gptq, awq, mxfp4), some tensor stored as that method stores them."""
    quantized = bool(quantization)
    method = str(quantization.get("quant_method", "")).lower() if isinstance(quantization, dict) else ""
    dtypes = set()
    for shard in shards:
        label = f"model directory {path}: {shard}"
        header = safetensors_header(path / shard, f"model directory {path}: cannot load {shard}")
        if index is not None:
            absent = sorted(name for name, where in index.items() if where == shard and name not in header)
            if absent:
                raise ConfigError(f"model directory {path}: model.safetensors.index.json: weight_map places "
                                  f"{len(absent):,} tensor(s) in {shard} that it does not hold ({_names(absent)})")
        if not quantized:
            _check_float_weights(header, label)
        dtypes |= {entry.get("dtype") for entry in header.values()}
    _refuse_unquantised_storage(path, method, dtypes if shards else None)


def check_quantised_storage(path: Path, cfg: dict) -> None:
    """For `math --model-path`, which reads config.json alone: a folder whose config.json says its weights
    are stored quantised (fp8, gptq, awq, mxfp4) holds tensors of that kind in its *.safetensors files."""
    quantization = cfg.get("quantization_config")
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else \
        next((cfg[k] for k in WRAPPED_TEXT_CONFIGS if isinstance(cfg.get(k), dict)), {})
    aside = next((n for n in ("quantize_config.json", "quant_config.json") if (path / n).is_file()), None)
    if aside and not quantization and not text.get("quantization_config"):  # AutoGPTQ's and AutoAWQ's older files
        raise ConfigError(f"model directory {path}: {aside} says its weights are quantised, but config.json has no "
                          "quantization_config, where transformers reads it (and vLLM, unless given --quantization); "
                          "sized as 16-bit the weights would be 2 - 4x off: copy its fields into config.json as "
                          "quantization_config, with quant_method")
    method = str(quantization.get("quant_method", "")).lower() if isinstance(quantization, dict) else ""
    files = sorted(path.glob("*.safetensors")) if method in _STORED_AS else []
    if not files:
        return  # no weights there to compare (a config.json alone is sized as it says)
    dtypes = set()
    for file in files:
        header = safetensors_header(file, f"model directory {path}: cannot read {file.name}")
        dtypes |= {entry.get("dtype") for entry in header.values()}
    _refuse_unquantised_storage(path, method, dtypes)


def _refuse_unquantised_storage(path: Path, method: str, dtypes: set | None) -> None:
    if method in _STORED_AS and dtypes is not None and not dtypes & set(_STORED_AS[method]):
        # an fp8 config.json over F32 weights: math sized them at a byte each, the run loaded them as floats
        raise ConfigError(f"model directory {path}: config.json's quantization_config says its weights are stored as "
                          f"{method} ({' or '.join(_STORED_AS[method])} tensors), but the weight files hold only "
                          f"{', '.join(sorted(d for d in dtypes if d))}: these weights are not quantised; remove "
                          "quantization_config from config.json, or give the quantised checkpoint")


def _check_float_weights(header: dict, label: str) -> None:
    """Each parameter of a weight file holds floats (its header says its dtype)."""
    for name, entry in header.items():
        dtype = entry.get("dtype")
        # parameters only: older checkpoints keep buffers of whole numbers beside them (GPT-NeoX's
        # boolean `attention.bias` mask, position_ids), which load as they are
        if dtype in _WHOLE_NUMBER_DTYPES and name.endswith(".weight"):
            raise ConfigError(f"{label}: tensor {shown(name)} is stored as {dtype} (whole numbers), but config.json "
                              "has no quantization_config: the weights of a model kvscope runs are floats (F32, F16, "
                              "BF16); this file is not this model's weights, or is quantised in a way it does not say")


def _names(keys) -> str:
    keys = sorted(k if isinstance(k, str) else k[0] for k in keys)
    more = f" and {len(keys) - NAMES_LISTED:,} more" if len(keys) > NAMES_LISTED else ""
    return ", ".join(keys[:NAMES_LISTED]) + more


def check_weights_match(path: Path, loading_info: dict) -> None:
    """The weights on disk must be exactly the parameters config.json describes: a parameter
    transformers would newly initialise (missing), ignore (unexpected) or could not load (another
    shape) means the directory and its config disagree, and a run would use random numbers."""
    problems = []
    for key, words in (("missing_keys", "missing from the weights"), ("unexpected_keys", "not in the model"),
                       ("mismatched_keys", "of another shape than config.json says")):
        keys = loading_info.get(key) or ()
        if keys:
            problems.append(f"{len(keys):,} parameter(s) {words} ({_names(keys)})")
    if problems:
        raise ConfigError(f"model directory {path}: its weights do not match its config.json: {'; '.join(problems)}")


def check_device_name(requested: str | None, label: str = "device") -> int | None:
    """The device's name, in kvscope's words before torch reads it (torch's own for `tpu` lists 20
    device types, of which the real backend runs on two); its N of cuda:N or cpu:N, None if none.
    label names where it was given."""
    import re

    from kvscope.app.lab.presets import meant_names

    if not requested:  # none given: CUDA where there is one
        return None
    form = re.fullmatch(r"(cpu|cuda)(?::(.*))?", requested, re.DOTALL)
    if form is None:  # the paged runner is written and tested for these two
        meant = meant_names(requested, ["cpu", "cuda"])
        raise ConfigError(f"{label} {requested!r}: the real backend runs on cpu or cuda (cuda:N), not "
                          f"{requested.split(':', 1)[0]}" + (f" (did you mean {meant[0]}?)" if meant else ""))
    # no leading zero: torch refuses "cuda:01" with its own message
    if form[2] is not None and not re.fullmatch(r"0|[1-9][0-9]{0,5}", form[2]):
        raise ConfigError(f"{label} {requested!r}: the N of {form[1]}:N numbers a device, 0 for the first, "
                          f"not {form[2]!r}")
    return None if form[2] is None else int(form[2])


def resolve_device(requested: str | None, label: str = "device"):
    """The torch device the real backend runs on: `requested` (cpu, cuda, cuda:N), or CUDA where
    there is one. ConfigError, naming `label`, for any other name or a device this machine lacks."""
    index = check_device_name(requested, label)
    import torch

    if not requested:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if requested.startswith("cpu"):
        if index:  # torch takes cpu:5 as the one CPU there is
            raise ConfigError(f"{label} {requested!r}: the CPU is one device, cpu (or cpu:0)")
        return torch.device(requested)
    if not torch.cuda.is_available():
        raise ConfigError(f"{label} {requested!r} asked for, but this machine has no CUDA device")
    count = torch.cuda.device_count()
    if index is not None and index >= count:  # before torch.device: it keeps N in 8 bits (cuda:256 is cuda:0)
        raise ConfigError(f"{label} {requested!r}: this machine has {count} CUDA device(s), cuda:0 to cuda:{count - 1}")
    return torch.device(requested)


def served_dtype(checkpoint_dtype: str, device) -> str:
    """The dtype the weights load in when none is asked for, as vLLM's --dtype auto picks it: float32 on
    a CPU; on a GPU a float16 checkpoint stays float16, and bf16 or float32 ones compute in bf16 where the
    GPU has it (compute capability 8.0 on), else in float16. Quantised checkpoints compute in float16."""
    if device.type == "cpu":
        return "fp32"
    if checkpoint_dtype == "fp16" or checkpoint_dtype not in COMPUTE_DTYPES:
        return "fp16"
    if device.type != "cuda":
        return "bf16" if checkpoint_dtype == "bf16" else "fp16"
    import torch

    return "bf16" if torch.cuda.get_device_capability(device) >= (8, 0) else "fp16"


def _available_bytes(device) -> int:
    if device.type == "cuda":
        import torch

        free, _ = torch.cuda.mem_get_info(device)
        return free
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_weights_fit(model: ModelConfig, device, dtype: str, quantization: str | None = None,
                      available: int | None = None) -> None:
    """Refuse, before allocating anything, a model whose weights cannot fit on the device (`device`
    may be words, with `available` its bytes: the window, which imports no torch, names this machine)."""
    from kvscope.engine.memory_math import bitsandbytes_weights_bytes, num_parameters

    if quantization:
        expected = bitsandbytes_weights_bytes(model, quantization, dtype)
    else:
        expected = num_parameters(model) * WEIGHT_DTYPE_BYTES[dtype]
    available = _available_bytes(device) if available is None else available
    if expected > available:
        raise ConfigError(
            f"{model.name} needs about {expected / GiB:.1f} GiB for its weights as {quantization or dtype}, "
            f"but {device} has {available / GiB:.1f} GiB"
        )


def check_random_weights_fit(model: ModelConfig, memory_bytes: int) -> None:
    """A preset the real backend builds with random weights, in fp32, in this machine's memory, checked
    without torch (the window's process, `gui` before its window): llama-3-70b's 263 GiB on a 24 GiB
    machine failed only once Play built it."""
    try:
        check_weights_fit(model, "this machine", "fp32", available=memory_bytes)
    except ConfigError as exc:
        raise ConfigError(f"{exc}: the real backend builds a preset's weights at random, in fp32; pick a smaller "
                          "model, or a model folder") from None


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
        dtype = served_dtype(model_config.weight_dtype, dev)
    if dtype not in _TORCH_DTYPES:
        raise ConfigError(f"weights can load as {', '.join(_TORCH_DTYPES)}; got {dtype!r}")
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise ConfigError(f"unknown quantization {quantization!r}; choose {', '.join(QUANTIZATIONS)}")

    check_weights_fit(model_config, dev, dtype, quantization)
    tokenizer = _tokenizer(path)  # before the weights: a damaged tokenizer is said in a second, not after a load
    check_tokenizer_fits(tokenizer, model_config, path)

    # ignore_mismatched_sizes: a parameter of another shape is reported, by name, by check_weights_match
    kwargs = dict(local_files_only=True, trust_remote_code=False, use_safetensors=not allow_pickle or None,
                  dtype=getattr(torch, _TORCH_DTYPES[dtype]), ignore_mismatched_sizes=True)
    if quantization:
        kwargs["quantization_config"] = _bitsandbytes_config(quantization, dev, dtype)
        kwargs["device_map"] = {"": dev}
    verbosity = hf_logging.get_verbosity()
    # transformers logs a LOAD REPORT table (30 lines, colour codes) of missing or unexpected weights:
    # check_weights_match says the same in the one line a refusal is
    hf_logging.set_verbosity_error()
    try:
        hf_model, loading_info = AutoModelForCausalLM.from_pretrained(path, output_loading_info=True, **kwargs)
    except Exception as exc:  # corrupt or mismatched weights raise many kinds (SafetensorError among them)
        raise ConfigError(f"model directory {path}: cannot load: {_first_line(exc)}") from None
    finally:
        hf_logging.set_verbosity(verbosity)
    check_weights_match(path, loading_info)
    if not quantization:
        hf_model.to(dev)
    hf_model.eval()
    source = "the loaded model's parameters, measured"
    if quantization:  # on an AVX512-BF16 CPU nf4 weights are repacked (absmax to bf16) on their first forward
        with torch.inference_mode():
            hf_model(input_ids=torch.zeros((1, 2), dtype=torch.long, device=dev), use_cache=False)
        source = (f"the loaded model's parameters and {quantization} scales, measured (linear layers {quantization}; "
                  f"embeddings, norms and LM head {dtype})")
    loaded_config = model_config.replace(weight_dtype=quantization or dtype, weights_bytes=measured_weights_bytes(hf_model),
                                         weights_source=source, source=f"local model directory {path}")
    return LoadedModel(hf_model, tokenizer, loaded_config, path, dev, random_weights, quantization)


def measured_weights_bytes(hf_model) -> int:
    """Bytes the weights occupy: the parameters and the scales bitsandbytes keeps beside quantised
    ones. Buffers (rotary frequencies) are not weights: without them an unquantised model's figure
    is the one `kvscope math` derives from its config."""
    import torch

    sizes = {}
    for module in hf_model.modules():
        params = list(module.parameters(recurse=False))
        state = getattr(module, "state", None)  # int8: its scales move here on the first forward
        tensors = [*params, getattr(state, "CB", None), getattr(state, "SCB", None)]
        for param in params:
            tensors.append(getattr(param, "SCB", None))
            quant = getattr(param, "quant_state", None)
            while quant is not None:  # nf4: absmax and code (a nested state holds its own again)
                tensors += [quant.absmax, quant.code, getattr(quant, "offset", None)]
                quant = getattr(quant, "state2", None)
        sizes.update({(t.data_ptr(), t.nbytes): t.nbytes for t in tensors if torch.is_tensor(t)})
    return int(sum(sizes.values()))


def _first_line(exc: Exception) -> str:
    return ((str(exc).splitlines() or [""])[0] or type(exc).__name__)[:300]


def check_bitsandbytes(quantization: str, device, dtype: str = "fp32") -> None:
    """A one-line ConfigError unless bitsandbytes can run `quantization` on `device`: one small
    layer is quantised there and multiplied, as the model's will be."""
    import torch

    # bitsandbytes warns on every int8 matmul of a non-fp16 input (each layer, each step on a CPU)
    # and, on import, of an optional kernel package it does without: nothing a user can act on.
    logging.getLogger("bitsandbytes").setLevel(logging.ERROR)
    try:
        import bitsandbytes as bnb
    except ImportError:
        raise ConfigError("weight quantisation needs bitsandbytes, which is not installed: "
                          "pip install 'kvscope[quantization]'") from None
    except Exception as exc:  # a broken native library raises at import on some platforms
        raise ConfigError(f"bitsandbytes is installed but does not load: {_first_line(exc)}") from None
    compute_dtype = getattr(torch, _TORCH_DTYPES[dtype])
    try:
        layer = (bnb.nn.Linear4bit(64, 64, bias=False, compute_dtype=compute_dtype, quant_type="nf4")
                 if quantization == "nf4" else bnb.nn.Linear8bitLt(64, 64, bias=False, has_fp16_weights=False))
        with torch.inference_mode():
            layer.to(device).eval()(torch.ones((2, 64), dtype=compute_dtype, device=device))
    except Exception as exc:  # a missing backend raises NotImplementedError, RuntimeError or worse
        raise ConfigError(f"bitsandbytes {getattr(bnb, '__version__', '?')} cannot run {quantization} weights on "
                          f"{device}: {_first_line(exc)} (its CPU backend needs 0.48 or newer)") from None


def _bitsandbytes_config(quantization: str, device, dtype: str):
    from transformers import BitsAndBytesConfig

    check_bitsandbytes(quantization, device, dtype)
    if quantization == "int8":
        return BitsAndBytesConfig(load_in_8bit=True)
    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=_TORCH_DTYPES[dtype])


# tokenizer.json of the largest vocabularies (Gemma's 256,000 tokens and merges) is about 35 MB
MAX_TOKENIZER_BYTES = 256 * 1024**2
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json")


def _tokenizer(path: Path):
    """The folder's tokenizer, or None when it has none. Its JSON files are read first, bounded and
    depth-capped, each a JSON object, so that transformers never parses a file nested 100,000 deep
    nor meets a list where it indexes a table (a TypeError from inside it); any other failure to
    load is a ConfigError naming the files, not a model run silently without its tokenizer."""
    for name in (*_TOKENIZER_FILES, "tokenizer.model"):  # a folder of that name read as "no tokenizer" unsaid
        if (path / name).exists() and not (path / name).is_file():
            kind = "a folder" if (path / name).is_dir() else "not a regular file"
            raise ConfigError(f"model directory {path}: {name} is {kind}; the tokenizer's files must be files")
    if not any((path / f).is_file() for f in ("tokenizer.json", "tokenizer.model", "tokenizer_config.json")):
        return None
    present = [f for f in _TOKENIZER_FILES if (path / f).exists()]
    for name in present:
        label = f"model directory {path}: {name}"
        # a key twice with two values (eos_token, chat_template): the last was taken without a word; tokenizer.json's
        # vocabulary is left as the tokenizers library reads it
        data = load_json(read_capped(path / name, label, MAX_TOKENIZER_BYTES, name), label,
                         unique_keys=name != "tokenizer.json")
        if not isinstance(data, dict):
            raise ConfigError(f"{label}: expected a JSON object of the tokenizer's fields, got {shown(data)}")
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(path, local_files_only=True, trust_remote_code=False)
    except Exception as exc:  # noqa: BLE001 - a damaged tokenizer file raises anything from inside transformers
        if isinstance(exc, ImportError) or "install" in str(exc).lower():
            return None  # a library it needs (sentencepiece) is not here: the model runs, without text, as before
        files = ", ".join(present or ["tokenizer.model"])
        raise ConfigError(f"model directory {path}: its tokenizer ({files}) cannot load: {_first_line(exc)}") from None


def check_tokenizer_fits(tokenizer, model: ModelConfig, path: Path) -> None:
    """Every id the tokenizer can give must have a row in the model's embedding: a prompt holding
    a larger one fails inside the first forward (an IndexError) instead of being refused here."""
    if tokenizer is None:
        return
    try:
        ids = [i for i in tokenizer.get_vocab().values() if isinstance(i, int)]
    except Exception as exc:  # noqa: BLE001 - a tokenizer object of a kind kvscope has not met
        raise ConfigError(f"model directory {path}: its tokenizer cannot list its vocabulary: {_first_line(exc)}") \
            from None
    largest = max(ids, default=-1)
    if largest >= model.vocab_size:
        raise ConfigError(f"model directory {path}: its tokenizer has ids up to {largest:,}, but the model's "
                          f"vocabulary (config.json vocab_size) holds {model.vocab_size:,} (ids 0 to "
                          f"{model.vocab_size - 1:,}): the tokenizer is not this model's")


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
        # The cache's files are links into its blobs: an interrupted download leaves some dangling.
        dated = [(st.st_mtime, p) for p in (repo / "snapshots").glob("*/config.json") if (st := _stat(p))]
        if not dated:
            continue
        snapshot = _main_snapshot(repo) or max(dated)[1].parent  # the one transformers loads, else the newest
        try:
            cfg = load_json(read_capped(snapshot / "config.json", "", MAX_CONFIG_BYTES, "config.json"), "")
        except ConfigError:
            continue  # listed models are the readable ones; loading one names what is wrong
        if not isinstance(cfg, dict):
            continue
        archs = cfg.get("architectures")
        arch = ",".join(a for a in archs if isinstance(a, str)) if isinstance(archs, list) else ""
        arch = arch or str(cfg.get("model_type", "?"))
        shards = [_stat(p) for p in snapshot.glob("*.safetensors")]
        size = sum(st.st_size for st in shards if st)
        complete = size > 0 and all(shards) and _indexed_shards_there(snapshot)  # a shard missing: it cannot load
        name = repo.name[len("models--"):].replace("--", "/")
        found.append(CachedModel(name, snapshot, arch, size, arch in SUPPORTED_ARCHITECTURES and complete))
    return found


def _main_snapshot(repo: Path) -> Path | None:
    """The snapshot refs/main names (what from_pretrained loads): the newest config.json's was listed, an older
    revision downloaded later (a pinned one) in place of main."""
    try:
        revision = (repo / "refs" / "main").read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    snapshot = repo / "snapshots" / revision
    return snapshot if re.fullmatch(r"[0-9a-f]{40}", revision) and _stat(snapshot / "config.json") else None


def _indexed_shards_there(snapshot: Path) -> bool:
    """Every shard the index names is in the snapshot: one never downloaded was listed as loadable, its
    weights summed without it."""
    if not (snapshot / "model.safetensors.index.json").exists():
        return True
    try:
        return all(_stat(snapshot / shard) for shard in set(_index_map(snapshot).values()))
    except ConfigError:
        return False


def _stat(path: Path):
    try:
        return path.stat()
    except OSError:  # a dangling link, a file removed meanwhile
        return None
