"""Command-line options shared by the commands, and turning them into engine inputs.

A preset gives the starting point; any explicit flag overrides the field it names.
"""

from __future__ import annotations

import argparse
from pathlib import Path
import math

from kvscope.engine.config import (
    KV_CACHE_DTYPE_BYTES,
    WEIGHT_DTYPE_BYTES,
    ConfigError,
    EngineArgs,
    HardwareSpec,
    ModelConfig,
    normalize_dtype,
)
from kvscope.app.lab.presets import load_hardware, load_model
from kvscope.engine.hf_config import load_hf_config
from kvscope.engine.units import GiB

DEFAULT_MODEL = "llama-3-8b"
DEFAULT_HARDWARE = "h100-80gb"


def number(text: str) -> float:
    """Accepts 80e9, 81920, 0.5; the engine's validation says whether the value makes sense."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"not a finite number: {text!r}")
    return value


def whole(text: str) -> int:
    value = number(text)
    if value != int(value):
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}")
    return int(value)


def _positive_flag(flag: str, value: float | None) -> None:
    if value is not None and value <= 0:
        raise ConfigError(f"{flag} must be greater than 0, got {value:g}")


def add_model_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("model")
    source = group.add_mutually_exclusive_group()
    source.add_argument("--model", metavar="PRESET", help=f"model preset (default {DEFAULT_MODEL}; see `kvscope presets`)")
    source.add_argument("--config", metavar="FILE", help="a Hugging Face config.json (or the directory holding it)")
    source.add_argument("--model-path", metavar="DIR",
                        help="a local Hugging Face model directory (config.json + *.safetensors); real backend")
    group.add_argument("--layers", type=whole, help="num_hidden_layers")
    group.add_argument("--attention-heads", type=whole, help="num_attention_heads")
    group.add_argument("--kv-heads", type=whole, help="num_key_value_heads")
    group.add_argument("--head-dim", type=whole, help="head_dim")
    group.add_argument("--weights-bytes", type=number, help="weights size in bytes (overrides the derived size)")
    group.add_argument("--params", type=number, help="parameter count; with --weight-dtype gives the weights size")
    group.add_argument("--weight-dtype", help=f"weight precision: {', '.join(WEIGHT_DTYPE_BYTES)}")


def add_hardware_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("hardware")
    group.add_argument("--hardware", metavar="PRESET", help=f"hardware preset (default {DEFAULT_HARDWARE}; this-machine detects)")
    memory = group.add_mutually_exclusive_group()
    memory.add_argument("--memory-bytes", type=number, help="memory per device, bytes")
    memory.add_argument("--memory-gib", type=number, help="memory per device, GiB")


def add_engine_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("engine (vLLM's names)")
    group.add_argument("--kv-cache-dtype", default="auto",
                       help=f"KV precision: auto (the model's), {', '.join(KV_CACHE_DTYPE_BYTES)}")
    group.add_argument("--gpu-memory-utilization", type=number, default=0.9, help="share of device memory to use (default 0.9)")
    group.add_argument("--max-model-len", type=whole, help="longest prompt + output, tokens (default: the model's)")
    group.add_argument("--block-size", type=whole, default=16, help="tokens per KV block (default 16)")
    group.add_argument("--tensor-parallel-size", type=whole, help="devices the model is split over (default: all the hardware has)")
    group.add_argument("--reserve-bytes", type=number, default=0, help="memory held back per device for activations (default 0)")
    group.add_argument("--kv-cache-memory-bytes", type=number,
                       help="size the KV pool directly, bytes per device (default on a CPU: 1 GiB)")


def add_backend_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("backend")
    group.add_argument("--backend", choices=("simulated", "real"), default="simulated",
                       help="simulated: roofline cost model of --hardware; real: a transformers model running on "
                            "this machine over the paged KV pool (default simulated)")
    group.add_argument("--device", help="real backend: cpu, cuda or cuda:N (default: cuda if present, else cpu)")
    group.add_argument("--dtype", choices=("fp32", "fp16", "bf16"),
                       help="real backend: weight dtype (default fp32 on CPU, the model's 16-bit type on CUDA)")
    group.add_argument("--quantization", choices=("int8", "nf4"), help="real backend: bitsandbytes weight quantisation")
    group.add_argument("--allow-pickle", action="store_true",
                       help="real backend: allow pickled *.bin weights (they can run code when loaded)")


def add_scheduler_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("scheduler (vLLM's names)")
    group.add_argument("--max-num-seqs", type=whole, default=256, help="most requests running at once (default 256)")
    group.add_argument("--max-num-batched-tokens", type=whole, help="token budget per step (default 8192)")
    group.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=True,
                       help="reuse KV blocks of identical prefixes (default on)")
    group.add_argument("--enable-chunked-prefill", action=argparse.BooleanOptionalAction, default=True,
                       help="split long prompts over steps, mixed with decodes (default on)")
    group.add_argument("--scheduling", choices=("continuous", "static"), default="continuous",
                       help="continuous (iteration-level) or static batching (default continuous)")
    group.add_argument("--allocation", choices=("paged", "contiguous"), default="paged",
                       help="paged blocks on demand, or a contiguous max_model_len reservation (default paged)")


def model_from_args(args, default_model: str = DEFAULT_MODEL) -> ModelConfig:
    explicit_geometry = any(v is not None for v in (args.layers, args.kv_heads, args.head_dim))
    if getattr(args, "model_path", None):
        model = load_hf_config(args.model_path)
    elif args.config:
        model = load_hf_config(args.config)
    elif args.model or not explicit_geometry:
        model = load_model(args.model or default_model)
    else:
        missing = [f for f, v in (("--layers", args.layers), ("--kv-heads", args.kv_heads), ("--head-dim", args.head_dim)) if v is None]
        if missing:
            raise ConfigError(f"without --model or --config, give {', '.join(missing)} too")
        if args.weights_bytes is None and args.params is None:
            raise ConfigError("without --model or --config, give --weights-bytes, or --params with --weight-dtype")
        heads = args.attention_heads or args.kv_heads
        model = ModelConfig(
            name="custom", num_hidden_layers=args.layers, num_attention_heads=heads,
            num_key_value_heads=args.kv_heads, head_dim=args.head_dim, hidden_size=heads * args.head_dim,
            intermediate_size=4 * heads * args.head_dim, vocab_size=32000, source="command-line flags",
        )
    changes = {}
    for flag, field in (("layers", "num_hidden_layers"), ("attention_heads", "num_attention_heads"),
                        ("kv_heads", "num_key_value_heads"), ("head_dim", "head_dim")):
        value = getattr(args, flag)
        if value is not None:
            changes[field] = value
    if args.weight_dtype:
        changes["weight_dtype"] = normalize_dtype(args.weight_dtype, WEIGHT_DTYPE_BYTES, "weight dtype")
    if args.params is not None:
        _positive_flag("--params", args.params)
        dtype = changes.get("weight_dtype", model.weight_dtype)
        changes["weights_bytes"] = int(args.params * WEIGHT_DTYPE_BYTES[dtype])
    elif changes.get("weight_dtype", model.weight_dtype) != model.weight_dtype and model.weights_bytes is not None:
        changes["weights_bytes"] = None  # a given checkpoint size no longer applies at another precision
    if args.weights_bytes is not None:
        _positive_flag("--weights-bytes", args.weights_bytes)
        changes["weights_bytes"] = int(args.weights_bytes)
    return model.replace(**changes) if changes else model


def hardware_from_args(args) -> HardwareSpec:
    _positive_flag("--memory-bytes", args.memory_bytes)
    _positive_flag("--memory-gib", args.memory_gib)
    memory = args.memory_bytes if args.memory_bytes is not None else (
        args.memory_gib * GiB if args.memory_gib is not None else None)
    hardware = load_hardware(args.hardware or DEFAULT_HARDWARE)
    if memory is not None:
        hardware = hardware.with_memory(int(memory))
    changes = {}
    tp = getattr(args, "tensor_parallel_size", None)
    if tp is not None and tp > hardware.gpu_count and args.hardware is None:
        changes["gpu_count"] = tp  # no preset named: assume as many devices as asked for
    return hardware.replace(**changes) if changes else hardware


def engine_args_from_args(args, **extra) -> EngineArgs:
    if args.reserve_bytes < 0:
        raise ConfigError(f"--reserve-bytes must be 0 or more, got {args.reserve_bytes:g}")
    _positive_flag("--kv-cache-memory-bytes", args.kv_cache_memory_bytes)
    return EngineArgs(
        block_size=args.block_size,
        gpu_memory_utilization=args.gpu_memory_utilization,
        max_model_len=args.max_model_len,
        kv_cache_dtype=args.kv_cache_dtype,
        tensor_parallel_size=args.tensor_parallel_size,
        reserve_bytes=int(args.reserve_bytes),
        kv_cache_memory_bytes=None if args.kv_cache_memory_bytes is None else int(args.kv_cache_memory_bytes),
        max_num_seqs=getattr(args, "max_num_seqs", 256),
        max_num_batched_tokens=getattr(args, "max_num_batched_tokens", None),
        enable_prefix_caching=getattr(args, "enable_prefix_caching", True),
        enable_chunked_prefill=getattr(args, "enable_chunked_prefill", True),
        scheduling=getattr(args, "scheduling", "continuous"),
        allocation=getattr(args, "allocation", "paged"),
        seed=getattr(args, "seed", 0),
        **extra,
    )


def check_output_path(flag: str, path: str | None) -> None:
    """An output that cannot be written fails now, in one line naming the flag, not after a long
    run. '-' (stdout) and no path pass."""
    if not path or path == "-":
        return
    out = Path(path)
    if out.is_dir():
        raise ConfigError(f"{flag} {path}: is a folder; give a file name")
    folder = out.resolve().parent
    if not folder.is_dir():
        raise ConfigError(f"{flag} {path}: the folder does not exist ({folder})")
    existed = out.exists()
    try:  # opening it is the only test that knows about read-only mounts, quotas and odd file systems
        with open(out, "ab"):
            pass
    except OSError as exc:
        raise ConfigError(f"{flag} {path}: cannot write it: {exc.strerror or exc}") from None
    if not existed:
        out.unlink()
