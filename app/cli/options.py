"""Command-line options shared by the commands, and turning them into engine inputs.

A preset gives the starting point; any explicit flag overrides the field it names. The engine's
flags are generated from EngineArgs (its fields' help, defaults and choices), so a new engine
argument gets its flag, with the same name as vLLM's, without an edit here.
"""

from __future__ import annotations

import argparse
import dataclasses
import decimal
import math
import re
import typing

from kvscope.engine.config import (
    BACKENDS,
    DEFAULT_BACKEND,
    COMPUTE_DTYPES,
    DEFAULT_HARDWARE,
    DEFAULT_MODEL,
    QUANTIZATIONS,
    WEIGHT_DTYPE_BYTES,
    ConfigError,
    EngineArgs,
    HardwareSpec,
    ModelConfig,
    normalize_dtype,
)
from kvscope.app.lab.models.config_json import load_hf_config
from kvscope.app.lab.presets import load_hardware, load_model
from kvscope.engine.checks import MAX_BYTES, MAX_DEVICES, real_number, whole_number
from kvscope.engine.checks import shown as said_value

from kvscope.engine.units import GiB, format_bytes, format_parameters

# EngineArgs' flag groups (a field's metadata names its group), as their titles read in --help.
ENGINE_FLAG_GROUPS = {"engine": "engine (vLLM's names)", "scheduler": "scheduler (vLLM's names)"}


# Said by `run` and `gui` alike: a model folder is real weights, which only the real backend runs.
MODEL_PATH_NEEDS_REAL = "--model-path loads real weights: use it with --backend real"


# How a number flag is written, said in each refusal of one: what was typed and what would be taken.
NUMBER_FORMS = "decimal digits, such as 16, 0.9 or 80e9"
UNIT_ADVICE = {"%": "a share is given as a fraction, such as 0.9 for 90 %"}
SMALLEST_NUMBER = 1e-300  # nearer 0 a float loses digits (1e-320 is held as 9.99989e-321), then is 0


def number(text: str) -> float:
    """Accepts 80e9, 81920, 0.5, 1_000 (and other scripts' digits, as float() does); the engine's
    validation says whether the value makes sense."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"no value given; give a number in {NUMBER_FORMS}")
    try:
        value = float(text)
    except ValueError:
        hexadecimal = text.strip().lower().lstrip("+-").startswith("0x")
        unit = re.fullmatch(r"\s*[-+]?(?:\d[\d_]*\.?\d*|\.\d+)(?:e[-+]?\d+)?\s*([a-z%]*/?[a-z]+|%)\s*", text,
                            re.IGNORECASE)
        if re.fullmatch(r"\s*[-+]?\d[\d,]*,\d*(?:\.\d*)?\s*", text):  # `--requests 1,000` was "give decimal digits"
            raise argparse.ArgumentTypeError(f"not a number: {text!r}; a comma is read neither as a thousands separator "
                                             "nor as a decimal point: write 1000 (or 1_000), and 0.9 with a point")
        # `--memory-gib 24GiB`, `--duration 10s`, `--arrival-rate 5/s` were "give decimal digits"; "1e" is an
        # exponent left out
        if unit and not hexadecimal and unit[1].lower() != "e":
            raise argparse.ArgumentTypeError(f"not a number: {text!r}, a number with a unit ({unit[1]}) typed after "
                                             "it; " + UNIT_ADVICE.get(unit[1], "give the number alone, in the unit "
                                                                       "the flag's name or its --help names")) from None
        raise argparse.ArgumentTypeError(f"not a number: {text!r}; give a number in {NUMBER_FORMS}"
                                         + (" (hexadecimal is not read)" if hexadecimal else "")) from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"not a finite number: {text!r}; give a number in {NUMBER_FORMS}")
    if (value == 0 and _written_value(text) not in (None, 0)) or 0 < abs(value) < SMALLEST_NUMBER:
        # 1e-400 is 0.0 as a float: --arrival-rate 1e-400 (one request in eons) ran all at once
        raise argparse.ArgumentTypeError(f"too close to 0 for a number to hold: {text!r}; give 0 or a number "
                                         "of at least 1e-300")
    return value


def _written_value(text: str) -> decimal.Decimal | None:
    try:
        return decimal.Decimal(text.strip())
    except (decimal.InvalidOperation, ValueError):
        return None


def _exact_whole(text: str) -> int | None:
    """The text's value as an exact int when it writes a whole number ("42", "8e9", "2.0"), read as
    a decimal so that 9223372036854775807 stays itself and 16.0000000000000001 is not 16; None when
    it is no whole number (fractions, NaN; past a float's range number() has refused it already)."""
    try:
        value = decimal.Decimal(text.strip())
    except (decimal.InvalidOperation, ValueError):
        return None
    if not value.is_finite() or (value and value.adjusted() > 400) or value != value.to_integral_value():
        return None
    return int(value)


def whole(text: str) -> int:
    number(text)  # says "not a number" / "not a finite number" first
    value = _exact_whole(text)
    if value is None:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}; give a whole number such as 16 or 8e9")
    return value


def byte_count(text: str) -> float:
    """A size in bytes or a count of parameters, written as people do (80e9, 16.5e9): a whole number,
    since int() would silently drop a fraction (--weights-bytes 1.5 was 1 byte, 0.5 was none)."""
    value = number(text)
    if _exact_whole(text) is None:
        raise argparse.ArgumentTypeError(f"not a whole number (a count of bytes or parameters): {text!r}; give "
                                         "one such as 16e9")
    return value


def bounded(low: float, high: float, whole_only: bool = False, low_open: bool = False):
    """An argparse type: a number (80e9, -1, 0.5) within [low, high] ((low, high] when low_open),
    refused with the bound it crosses: "argument --quit-after: must be 0 or more, got -1"."""
    def parse(text: str):
        value = number(text)
        exact = _exact_whole(text)
        if exact is not None and (whole_only or abs(exact) < 10**18):
            value = exact  # "-1" is said back as -1, not -1.0; a 19-digit seed is not rounded
        try:
            if whole_only:
                return whole_number(value, "", int(low), int(high))
            return real_number(value, "", low, high, low_open=low_open)
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(str(exc).strip()) from None
    parse.__name__ = "whole number" if whole_only else "number"  # how argparse names the type in its errors
    return parse


def _positive_flag(flag: str, value: float | None, high: float = MAX_BYTES) -> None:
    if value is not None:
        real_number(_whole_as_int(value), flag, 0.0, high, low_open=True)


def _whole_as_int(value: float):
    """A whole float said as the int typed: `--reserve-bytes -1` was "got -1.0", `--weights-bytes 0`
    "got 0.0" (past 10**18 a float is said in its exponent, not in 19 digits it was not typed with)."""
    return int(value) if isinstance(value, float) and value.is_integer() and abs(value) < 1e18 else value


def add_model_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("model")
    source = group.add_mutually_exclusive_group()
    source.add_argument("--model", metavar="PRESET", help=f"model preset (default {DEFAULT_MODEL}; see `kvscope presets`)")
    source.add_argument("--config", metavar="FILE", help="a Hugging Face config.json (or the directory holding it)")
    source.add_argument("--model-path", metavar="DIR",
                        help="a local Hugging Face model directory (config.json + *.safetensors); real backend")
    group.add_argument("--layers", type=whole, help="layers (config.json's num_hidden_layers); default: the model's")
    group.add_argument("--attention-heads", type=whole, help="query heads (num_attention_heads); default: the model's")
    group.add_argument("--kv-heads", type=whole, help="KV heads (num_key_value_heads); default: the model's")
    group.add_argument("--head-dim", type=whole, help="elements per head (head_dim); default: the model's")
    group.add_argument("--weights-bytes", type=byte_count, help="weights size in bytes, such as 16e9 (default: derived from the model's shape)")
    group.add_argument("--params", type=byte_count, help="parameter count as a number, such as 8e9 for 8B; with "
                       "--weight-dtype gives the weights size")
    group.add_argument("--weight-dtype", help=f"weight precision: {', '.join(WEIGHT_DTYPE_BYTES)}")


def add_hardware_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("hardware")
    group.add_argument("--hardware", metavar="PRESET", help=f"hardware preset (default {DEFAULT_HARDWARE}; this-machine detects)")
    memory = group.add_mutually_exclusive_group()
    memory.add_argument("--memory-bytes", type=byte_count, help="memory per device in bytes, such as 80e9 (default: the hardware preset's)")
    memory.add_argument("--memory-gib", type=number, help="memory per device in GiB (default: the hardware preset's)")


def engine_flag_fields(group: str | None = None) -> list[dataclasses.Field]:
    """The EngineArgs fields that have a flag, in their order; of one flag group if given."""
    return [f for f in dataclasses.fields(EngineArgs)
            if f.metadata["flags"] is not None and (group is None or f.metadata["flags"] == group)]


def flag_name(field: dataclasses.Field) -> str:
    return "--" + field.name.replace("_", "-")


def _value_type(field: dataclasses.Field) -> type:
    """The field's type without its None (int | None -> int)."""
    hint = typing.get_type_hints(EngineArgs)[field.name]
    return next((t for t in typing.get_args(hint) if t is not type(None)), hint)


def _flag_help(field: dataclasses.Field) -> str:
    meta, default = field.metadata, field.default
    said = meta["default_text"]
    if said is None:
        value = ("on" if default else "off") if isinstance(default, bool) else \
            f"{default:g}" if isinstance(default, float) else default
        said = f"default {value}"
    return f"{meta['help']} ({said})" if said else meta["help"]


def add_engine_arg_flags(parser: argparse.ArgumentParser, group: str, leave_out: tuple = ()) -> None:
    """One flag per EngineArgs field of the group, named, typed, defaulted and explained by the field;
    none for the fields in leave_out (a command they would change nothing in)."""
    flags = parser.add_argument_group(ENGINE_FLAG_GROUPS[group])
    for field in engine_flag_fields(group):
        if field.name in leave_out:
            continue
        kind = _value_type(field)
        options = {"default": field.default, "help": _flag_help(field)}
        if kind is bool:
            options["action"] = argparse.BooleanOptionalAction
        elif field.metadata["choices"]:
            options["choices"] = field.metadata["choices"]
        elif kind is int and field.metadata["unit"] != "bytes":
            options["type"] = whole
        elif kind in (int, float):  # bytes are whole, written as 80e9 (reads better than 80000000000)
            options["type"] = byte_count if field.metadata["unit"] == "bytes" else number
        flags.add_argument(flag_name(field), **options)


def add_engine_options(parser: argparse.ArgumentParser) -> None:
    add_engine_arg_flags(parser, "engine")


def add_scheduler_options(parser: argparse.ArgumentParser, leave_out: tuple = ()) -> None:
    add_engine_arg_flags(parser, "scheduler", leave_out)


def add_backend_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("backend")
    group.add_argument("--backend", choices=BACKENDS, default=DEFAULT_BACKEND,
                       help="simulated: roofline cost model of --hardware; real: a transformers model running on "
                            f"this machine over the paged KV pool (default {DEFAULT_BACKEND})")
    group.add_argument("--device", help="real backend: cpu, cuda or cuda:N (default: cuda if present, else cpu)")
    group.add_argument("--dtype", choices=COMPUTE_DTYPES,
                       help="real backend: weight dtype (default fp32 on CPU; on CUDA as vLLM's --dtype auto: a float16 "
                            "checkpoint fp16, bf16 or float32 ones bf16 from compute capability 8.0, else fp16)")
    group.add_argument("--quantization", choices=QUANTIZATIONS, help="real backend: bitsandbytes weight quantisation")
    group.add_argument("--allow-pickle", action="store_true",
                       help="real backend: allow pickled *.bin weights (they can run code when loaded)")


def model_from_args(args, default_model: str = DEFAULT_MODEL) -> ModelConfig:
    explicit_geometry = any(v is not None for v in (args.layers, args.kv_heads, args.head_dim))
    if getattr(args, "model_path", None):
        model = load_hf_config(model_folder(args.model_path))
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
            max_position_embeddings_given=False,
        )
    if args.params is not None and args.weights_bytes is not None:
        raise ConfigError("--params and --weights-bytes both give the weights' size; give one of them")
    if args.kv_heads is not None and model.uses_mla:
        raise ConfigError(f"--kv-heads: {model.name} uses multi-head latent attention, which caches one latent "
                          "vector per token and layer, not K/V heads; its size is the config's kv_lora_rank")
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
        changes["weights_source"] = f"--params {format_parameters(args.params)} x {WEIGHT_DTYPE_BYTES[dtype]:g} B ({dtype})"
    elif changes.get("weight_dtype", model.weight_dtype) != model.weight_dtype and model.weights_bytes is not None:
        changes["weights_bytes"] = None  # a given checkpoint size no longer applies at another precision
    if args.weights_bytes is not None:
        _positive_flag("--weights-bytes", args.weights_bytes)
        changes["weights_bytes"] = int(args.weights_bytes)
        changes["weights_source"] = "--weights-bytes"
    return model.replace(**changes) if changes else model


def model_folder(path: str, takes_config: bool = True) -> str:
    """--model-path as a folder: `math --model-path /missing` was "config /missing: cannot read: no such
    file", and a file there was read as a config.json, though the flag names a model's folder."""
    import os
    import stat

    from kvscope.app.lab.said_paths import said_path

    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise ConfigError(f"model directory {said_path(path)}: no such directory") from None
    except (OSError, ValueError):  # a name too long, a NUL: the reader says it
        return path
    if not stat.S_ISDIR(mode):
        # `attach` has no --config to send the file to: its folder is what to give
        raise ConfigError(f"--model-path {said_path(path)}: not a folder; " + (
            "give a model's folder (config.json and its weights), or a config.json itself with --config" if takes_config
            else "give the served model's folder, the one holding its config.json (only that file is read)"))
    return path


def hardware_from_args(args) -> HardwareSpec:
    _positive_flag("--memory-bytes", args.memory_bytes)
    _positive_flag("--memory-gib", args.memory_gib, MAX_BYTES / GiB)
    memory = args.memory_bytes if args.memory_bytes is not None else (
        args.memory_gib * GiB if args.memory_gib is not None else None)
    if memory is not None and memory < 1:  # int() made it 0 bytes, said as the preset's memory_bytes
        # the least rounded up (9.3e-10 was "give at least 9.3e-10" of --memory-gib 9.3e-10, under a byte)
        raise ConfigError(f"--memory-gib {typed_float(args.memory_gib)} is less than one byte of memory; give at least "
                          f"{math.ceil(1e12 / GiB) / 1e12:g} (1 byte), or the device's memory such as 24")
    hardware = load_hardware(args.hardware or DEFAULT_HARDWARE)
    if memory is not None:
        hardware = hardware.with_memory(int(memory))
    changes = {}
    tp = getattr(args, "tensor_parallel_size", None)
    if tp is not None and tp > MAX_DEVICES:  # before it sizes the node below (EngineArgs says the rest)
        whole_number(tp, "--tensor-parallel-size", 1, MAX_DEVICES)
    if tp is not None and tp > hardware.gpu_count and args.hardware is None:
        changes["gpu_count"] = tp  # no preset named: assume as many devices as asked for
    return hardware.replace(**changes) if changes else hardware


def _whole_bytes(field: dataclasses.Field, value: float) -> int:
    """A size given as a number (80e9), checked before int() drops its sign: a size that defaults
    to 0 may be 0; one that defaults to None (derive it) must be more when given."""
    if field.default == 0:
        real_number(_whole_as_int(value), flag_name(field), 0.0, MAX_BYTES)
    else:
        _positive_flag(flag_name(field), value)
    return int(value)


# The field each flag sets, where the two are named apart (an EngineArgs field and its flag share a
# name): the engine and the loaders name the field ("workload chat: num_requests must be at least 1").
FIELD_OF_FLAG = {"layers": "num_hidden_layers", "attention_heads": "num_attention_heads",
                 "kv_heads": "num_key_value_heads", "head_dim": "head_dim", "requests": "num_requests",
                 "arrival_rate": "arrival_rate_per_s", "weights_bytes": "weights_bytes"}


def said_with_flags(message: str, args) -> str:
    """A refusal that names a field the user set by a flag, led by that flag as typed: "engine:
    max_model_len must be greater than 0" is "--max-model-len 0: engine: max_model_len ..." after
    `--max-model-len 0`. A field that came from a file or a default is left as the file names it."""
    typed = getattr(args, "given_flags", frozenset())
    # a one-word field ("accounting") is also an English word in messages: only snake_case names are fields
    fields = {**{f.name: f.name for f in engine_flag_fields() if "_" in f.name}, **FIELD_OF_FLAG}
    named = []
    for dest in sorted(typed):
        field, value = fields.get(dest), getattr(args, dest, None)
        flag = "--" + dest.replace("_", "-")
        if field and value is not None and flag not in message and re.search(rf"(?<![\w.-]){field}(?![\w-])", message):
            # a 309-digit value (--requests 1e308) as the checks say it, not 412 characters of digits and commas
            named.append(f"{flag} {said_value(value)}" if isinstance(value, int) and not isinstance(value, bool) else
                         f"{flag} {typed_float(value)}" if isinstance(value, float) else f"{flag} {value}")
    return f"{', '.join(named)}: {message}" if named else message


def typed_float(value: float) -> str:
    """A float flag's value as short as :g writes it where that is the value itself, else every digit
    it holds: `--gpu-memory-utilization 1.0000000001` was said as "--gpu-memory-utilization 1: ... must
    be in (0, 1]", a refusal of a value in range."""
    short = f"{value:g}"
    return short if float(short) == value else repr(value)


def refuse_kv_budget_beyond_memory(plan, args) -> None:
    """--kv-cache-memory-bytes sets the pool whatever the device holds (as in vLLM, which then fails to
    allocate it): `math --kv-cache-memory-bytes 1e12` on a 24 GB L4 said a 931 GiB pool and 931 concurrent
    sequences, and `run` ran on it."""
    from kvscope.app.lab.pool_room import pool_past_memory

    budget = getattr(args, "kv_cache_memory_bytes", None)
    past = pool_past_memory(plan) if budget is not None else None
    if past is None:
        return
    why, room = past
    raise ConfigError(f"--kv-cache-memory-bytes {budget:g}: a {format_bytes(plan.kv_pool_bytes)} KV pool: {why}; "
                      + (f"give at most {room:,} bytes, or more memory" if room >= 1 else "give more memory"))


# What only vLLM's accounting reads, by the command that would ignore it under --accounting lesson
# (memory x utilization - weights - reserve: no release, no CUDA graphs, no profiled activation).
# `math` sizes nothing else, so its scheduler flags feed only vLLM's activation peak; `run` schedules
# with them, and its real backend on CUDA runs eagerly under --enforce-eager.
LESSON_IGNORES = {
    "math": ("vllm_version", "enforce_eager", "max_num_seqs", "max_num_batched_tokens", "enable_chunked_prefill"),
    "run": ("vllm_version", "enforce_eager"),
    "run --backend real": ("vllm_version",),
}


def refuse_what_the_lesson_ignores(args, reader: str) -> None:
    """--accounting lesson with a flag only vLLM's accounting reads (--vllm-version 0.5) ran the
    lesson's formula without a word: the flag was taken and changed nothing."""
    if getattr(args, "accounting", None) != "lesson":
        return
    given = getattr(args, "given_flags", frozenset())
    ignored = [f"--{dest.replace('_', '-')}" for dest in LESSON_IGNORES[reader] if dest in given]
    if ignored:
        one = len(ignored) == 1
        raise ConfigError(f"{', '.join(ignored)} {'is' if one else 'are'} read by vLLM's accounting only; "
                          "--accounting lesson sizes the KV pool as memory x utilization - weights - reserve and "
                          f"would ignore {'it' if one else 'them'}: drop {'it' if one else 'them'}, or use "
                          "--accounting vllm")


def engine_args_from_args(args, **extra) -> EngineArgs:
    """EngineArgs from the flags the command has; a field without a flag here keeps its default."""
    given = {}
    for field in engine_flag_fields():
        if not hasattr(args, field.name):
            continue
        value = getattr(args, field.name)
        if field.metadata["unit"] == "bytes" and value is not None:
            value = _whole_bytes(field, value)
        given[field.name] = value
    if isinstance(given.get("vllm_version"), str):  # read as that release, so said as it: "vLLM 0.19 ", not
        given["vllm_version"] = given["vllm_version"].strip()  # "vLLM 0.19  allocates"
    if getattr(args, "seed", None) is not None:
        given["seed"] = args.seed
    typed = getattr(args, "given_flags", frozenset())
    if given.get("kv_cache_memory_bytes") is not None and "gpu_memory_utilization" in typed:
        # the default 0.9 cannot be told from a typed 0.9 in EngineArgs, so this is said here, not there
        raise ConfigError("--gpu-memory-utilization sizes the KV cache as a share of the device's memory, and "
                          "--kv-cache-memory-bytes sizes that cache itself (the share is then not applied): give "
                          "one of them")
    return EngineArgs(**given, **extra)


# A model folder holds a config.json, its weights and tokenizer files, sharded weights a few hundred
# at most: past this many entries the rest are not looked at (the folder is not walked for minutes).
MODEL_FOLDER_FILES_CHECKED = 4096


def model_input_files(model: str | None, model_path: str | None, default_model: str | None = None) -> dict:
    """The files a command reads for its model, by what they are, for check_output_path's inputs:
    every file of a --model-path folder (an output onto its weights or tokenizer would destroy
    them, not only onto config.json), else the preset file --model (or the default) names."""
    import itertools
    import os

    from kvscope.app.lab.presets import preset_file

    if model_path:
        try:
            with os.scandir(model_path) as entries:
                files = [e.path for e in itertools.islice(entries, MODEL_FOLDER_FILES_CHECKED) if e.is_file()]
        except OSError:  # not a folder, or unreadable: the command says so when it loads it
            files = [os.path.join(model_path, "config.json")]
        return {f"file {os.path.basename(f)} of the --model-path folder": f for f in files}
    name = model or default_model
    path = preset_file("models", name) if name else None
    return {"model preset": str(path)} if path else {}


# Past this many stored profiles the rest are not looked at (one per machine and device kind is usual).
CALIBRATION_PROFILES_CHECKED = 64


def calibration_profile_files(hardware: str | None) -> dict:
    """The calibration profiles `kvscope calibrate` stored, for check_output_path's inputs, when the
    command runs on --hardware this-machine: its times rest on one, and `run --hardware this-machine
    --json PROFILE` replaced minutes of measuring with the run's report (every later command then
    refused the profile)."""
    if hardware != "this-machine":
        return {}
    import itertools

    from kvscope.app.lab.verify.tiny_model import cache_dir

    try:
        found = list(itertools.islice((cache_dir() / "calibration").glob("*.json"), CALIBRATION_PROFILES_CHECKED))
    except OSError:
        return {}
    return {f"calibration profile {path.stem} of --hardware this-machine": str(path) for path in found}


def check_scenario_path(value: str) -> None:
    """A scenario given as a path (app/lab/scenarios.py reads it as one when it ends in .toml or holds
    a slash) that exists but is no regular file is said as what it is: the loader says "no such
    file" of a folder or a pipe. A path the system cannot look up raises OSError (said by main)."""
    import os
    import stat

    if not (value.endswith(".toml") or "/" in value or "\\" in value):
        return
    try:
        mode = os.stat(value).st_mode
    except FileNotFoundError:
        return  # the loader's "no such file" is right
    except NotADirectoryError:
        raise ConfigError(f"scenario file {value}: a part of the path before the name is a file, not a "
                          "folder") from None
    if stat.S_ISDIR(mode):
        raise ConfigError(f"scenario file {value}: is a folder; give a scenario .toml file or a name "
                          "(`kvscope scenarios`)")
    if not stat.S_ISREG(mode):
        raise ConfigError(f"scenario file {value}: not a regular file (a device or a pipe); give a scenario "
                          ".toml file")


def check_real_device(device: str | None) -> None:
    """--device for the real backend, refused before a model is loaded (`kvscope: loading ...` then
    the refusal was two lines), in the words the window's own check uses (resolve_device)."""
    from kvscope.app.lab.models.loader import resolve_device

    # a name other than cpu and cuda, CUDA where there is none, or cuda:N past the devices there are
    resolve_device(device, "--device")


def model_shape(model: str, model_path: str | None):
    """The shape the real backend will load, read before `loading ...`: the folder's config.json, or the preset."""
    return load_hf_config(model_folder(model_path)) if model_path else load_model(model)


def check_real_model(model: str | None, model_path: str | None, allow_pickle: bool = False,
                     fit_on: str | None | bool = False) -> None:
    """The preset or model folder the real backend is to load, checked before the command says
    `loading NAME ...`: a refusal after that line (a mistyped preset, no such folder) was two lines.
    fit_on (a --device, None for the default): a preset built at random fits there, as the loader checks
    (`verify` and `calibrate --model llama-3-8b` said "needs about 29.9 GiB" after `loading ...`)."""
    if model_path:
        from kvscope.app.lab.models.loader import check_model_directory

        check_model_directory(model_path, allow_pickle)  # config.json and weights there, not read yet
    else:
        if model:
            shape = load_model(model)
            if fit_on is not False:
                from kvscope.app.lab.models.loader import check_weights_fit, resolve_device
                from kvscope.app.lab.trained_model import TRAINED_MODEL

                if model != TRAINED_MODEL.name:  # random weights, built in fp32
                    check_weights_fit(shape, resolve_device(fit_on, "--device"), "fp32")
        check_cache_variable()  # the weights are built (or converted) there on first use
        from kvscope.app.lab.verify.tiny_model import cache_dir, make_cache_folder

        # a folder where none can be made (KVSCOPE_CACHE_DIR=/proc/self) failed after `loading ...`
        make_cache_folder(cache_dir() / "models")


def check_cache_variable() -> None:
    """KVSCOPE_CACHE_DIR, where models are built and profiles stored, said wrong before the work
    that writes there (a file there failed only once the model was built)."""
    import os

    from kvscope.app.lab.presets import check_folder_variable

    given = os.environ.get("KVSCOPE_CACHE_DIR")
    if given:
        check_folder_variable("KVSCOPE_CACHE_DIR", given, "the folder kvscope builds models in")
        return
    # unset: ~/.cache/kvscope, where HOME=/etc/passwd (a file) failed only after `loading ...`
    from pathlib import Path

    from kvscope.app.lab.output_path import file_in_place_of_a_folder
    from kvscope.app.lab.said_paths import said_path

    default = Path(os.path.expanduser("~")) / ".cache" / "kvscope"
    blocking = file_in_place_of_a_folder(default) if not default.is_dir() else None
    if blocking is not None:
        raise ConfigError(f"the kvscope cache {said_path(default)} (HOME/.cache/kvscope, KVSCOPE_CACHE_DIR being "
                          f"unset): {said_path(blocking)} is a file, not a folder; set KVSCOPE_CACHE_DIR to a folder "
                          "kvscope can write, or HOME to your home folder")
