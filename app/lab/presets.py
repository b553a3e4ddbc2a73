"""Loading and validating presets: the TOML files in presets/ (a config.json is read by app/lab/models/config_json.py).

Presets are found through importlib.resources, so a source checkout, an installed wheel and a
frozen bundle all resolve them the same way.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import json
import os
import stat
import sys
import unicodedata
from importlib import resources
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

from kvscope.app.lab.bounded_reads import (MAX_JSON_DEPTH, nesting_depth, read_capped, refuse_outsized_whole,
                                          refuse_toml_dates, unholdable_number, wide_unicode)
from kvscope.app.lab.output_path import file_in_place_of_a_folder, write_text_atomic
from kvscope.app.lab.said_paths import said_path
from kvscope.app.lab.workload import WorkloadSpec, workload_from_dict
from kvscope.app.lab.table_checks import build_config, unknown_fields
from kvscope.engine.config import COMPUTE_DTYPES, WEIGHT_DTYPE_BYTES, ConfigError, HardwareSpec, ModelConfig, normalize_dtype

KINDS = ("models", "hardware", "workloads")
THIS_MACHINE = "this-machine"
MAX_TOML_BYTES = 4 * 1024**2  # a preset or scenario is a few KiB

_MODEL_KEYS = {
    "name", "description", "source", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
    "head_dim", "hidden_size", "intermediate_size", "vocab_size", "max_position_embeddings", "max_model_len_limit",
    "max_position_embeddings_given",
    "tie_word_embeddings", "attention_bias", "qk_norm", "gated_mlp", "model_type", "weight_dtype", "weights_bytes", "weights_source",
    "layer_types", "sliding_window", "linear_state_bytes", "kv_lora_rank", "qk_rope_head_dim", "q_lora_rank",
    "v_head_dim", "num_experts", "num_experts_per_tok", "moe_intermediate_size", "shared_expert_intermediate_size",
    "num_dense_layers",
}
_HARDWARE_KEYS = {
    "name", "description", "source", "memory_bytes", "memory_bandwidth_bytes_per_s", "peak_flops",
    "gpu_count", "interconnect_bandwidth_bytes_per_s", "kind", "calibration",
}


def presets_root():
    return resources.files("kvscope.presets")


def user_presets_root() -> Path:
    """Where a user's own presets live ($KVSCOPE_CONFIG_DIR, else ~/.config/kvscope), listed beside the built-in ones."""
    given = os.environ.get("KVSCOPE_CONFIG_DIR")
    if given:  # named on purpose: a folder that cannot be one is said, not skipped without a word
        check_folder_variable("KVSCOPE_CONFIG_DIR", given)
        return Path(given) / "presets"
    xdg = os.environ.get("XDG_CONFIG_HOME")
    if xdg and os.path.isabs(xdg):  # the XDG rule: a relative one is ignored
        check_folder_variable("XDG_CONFIG_HOME", xdg)
        return Path(xdg) / "kvscope" / "presets"
    return Path.home() / ".config" / "kvscope" / "presets"


def check_folder_variable(variable: str, given: str, holds: str = "the folder that holds presets/") -> None:
    """A variable naming one of kvscope's folders: what it names must be a folder or not exist yet.
    Path() drops a trailing '/', and os.path.exists() says False of `file.txt/` and `file.txt/sub`,
    so the path is looked up as typed."""
    said = f"{variable}={said_path(given)}"
    if not given.strip():
        raise ConfigError(f"{said}: blank; name {holds}, or unset it")
    try:
        mode = os.stat(given).st_mode
    except FileNotFoundError:
        return  # made when it is first written to
    except NotADirectoryError:
        blocking = file_in_place_of_a_folder(Path(given))  # Path(): `file.txt/` is file.txt itself
        raise ConfigError(f"{said}: {said_path(blocking) if blocking else 'a part of the path'} is a file, not a "
                          f"folder; name {holds}, or unset it") from None
    except (OSError, ValueError) as exc:  # a symlink loop, a name too long, a folder that cannot be searched
        raise ConfigError(f"{said}: {getattr(exc, 'strerror', None) or exc}; name {holds}, or unset it") from None
    if not stat.S_ISDIR(mode):
        raise ConfigError(f"{said}: not a folder; name {holds}, or unset it")


def _names_in(folder) -> list[str]:
    try:
        return sorted(p.name[: -len(".toml")] for p in folder.iterdir() if p.name.endswith(".toml"))
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:  # a folder that cannot be read: its presets would vanish without a word
        raise ConfigError(f"presets folder {said_path(folder)}: cannot list it: {exc.strerror or exc}") from None


def builtin_preset_names(kind: str) -> list[str]:
    return _names_in(presets_root() / kind)


def user_preset_names(kind: str) -> list[str]:
    return _names_in(user_presets_root() / kind)


def preset_names(kind: str) -> list[str]:
    names = builtin_preset_names(kind)
    names += [n for n in user_preset_names(kind) if n not in names]
    if kind == "hardware":
        names.append(THIS_MACHINE)
    return names


# What marks each kind of kvscope TOML file, and where it is given: a scenario given as a workload file was
# said as eleven "unknown fields" of the workload, a hardware preset given as a config.json as malformed JSON
_FILE_KINDS = {
    "scenario": ({"configs", "reveal", "answer"}, "`kvscope compare --scenario FILE`"),
    "workload": ({"trace", "prompt_tokens", "arrival_rate_per_s", "chat", "shared_prefix_fraction"},
                 "`kvscope run --workload FILE`"),
    "model preset": ({"num_hidden_layers", "num_attention_heads"}, "--model NAME, saved in the presets' models folder"),
    "hardware preset": ({"peak_flops", "memory_bandwidth_bytes_per_s"},
                        "--hardware NAME, saved in the presets' hardware folder"),
}


def file_kind(table) -> str | None:
    """Which kind of kvscope TOML file a table is, when its fields say one kind only; else None."""
    kinds = [kind for kind, (marks, _) in _FILE_KINDS.items() if isinstance(table, dict) and marks & set(table)]
    return kinds[0] if len(kinds) == 1 else None


def refuse_another_kind(table, kind: str, label: str) -> None:
    other = file_kind(table)
    if other is not None and other != kind:
        marks = sorted(_FILE_KINDS[other][0] & set(table))
        raise ConfigError(f"{label}: a kvscope {other} file ({', '.join(marks[:3])}), not a {kind} file; give it as "
                          f"{_FILE_KINDS[other][1]}")


# Built-in presets and scenarios, parsed and checked, by (file, its change time and size): a window
# reads each of them many times over (its scenarios menu alone, ten scenarios naming models and
# hardware, took ~0.2 s of the ~0.6 s a window took to open). The user's own files are read afresh.
_BUILT_IN_TABLES: dict[tuple, dict] = {}


def _built_in_key(path) -> tuple | None:
    if not isinstance(path, Path):
        return None
    try:
        inside = path.is_relative_to(Path(str(presets_root())))
        facts = path.stat() if inside else None
    except (OSError, ValueError):
        return None
    return (str(path), facts.st_mtime_ns, facts.st_size) if facts else None


def read_toml(path, label: str, kind: str | None = None) -> dict:
    key = _built_in_key(path)
    if key is not None and (key, kind) in _BUILT_IN_TABLES:
        return copy.deepcopy(_BUILT_IN_TABLES[key, kind])
    table = _read_toml(path, label, kind)
    if key is not None:
        _BUILT_IN_TABLES[key, kind] = copy.deepcopy(table)
    return table


def _read_toml(path, label: str, kind: str | None = None) -> dict:
    if isinstance(path, Path) or not hasattr(path, "open"):
        data = read_capped(path, label, MAX_TOML_BYTES, "TOML file")
    else:  # a packaged preset (importlib.resources): ours, small
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise ConfigError(f"{label}: cannot read: {exc.strerror or exc}") from None
    try:
        table = tomllib.loads(data.decode("utf-8-sig"))  # a byte-order mark (Windows editors) is not TOML
    except tomllib.TOMLDecodeError as exc:
        if wide := wide_unicode(data):  # without a byte-order mark it decodes as UTF-8, NULs between its letters
            raise ConfigError(f"{label}: {wide}; TOML is UTF-8: save it as UTF-8") from None
        raise ConfigError(f"{label}: malformed TOML: {exc}") from None
    except UnicodeDecodeError as exc:
        if wide := wide_unicode(data):  # an editor's "Unicode": TOML is UTF-8 only
            raise ConfigError(f"{label}: {wide}; TOML is UTF-8: save it as UTF-8") from None
        raise ConfigError(f"{label}: not UTF-8 text (byte {exc.start:,})") from None
    except RecursionError:
        raise ConfigError(f"{label}: nested deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError as exc:  # TOMLDecodeError is one too, caught above: a number Python will not hold
        raise unholdable_number(label, exc) from None
    if nesting_depth(table) > MAX_JSON_DEPTH:
        raise ConfigError(f"{label}: nested deeper than {MAX_JSON_DEPTH} levels")
    refuse_outsized_whole(table, label)  # 10**400 as a rate: the checks' float compare would raise OverflowError
    refuse_toml_dates(table, label)
    if kind is not None:
        refuse_another_kind(table, kind, label)
    return table


# A file name holds 255 bytes; a preset is written through a temporary file beside it whose name
# adds some 23 (".NAME.toml.XXXXXXXX.partial"), so a longer name failed as "File name too long"
MAX_NAME_BYTES = 200
MAX_NAME_SHOWN = 60  # a refused name is quoted this far in the message, not 10,000 characters of it
NAME_RULE = "a preset name uses letters, digits, '-', '_' and '.', and does not start with '.'"


def is_preset_name(name) -> bool:
    """The one rule for a preset's name, saved or loaded: a file name in its folder, no path, and
    not hidden ('.', '..' and '.x' are the folder, its parent or a file a listing skips)."""
    return (isinstance(name, str) and bool(name) and not name.startswith(".")
            and all(c.isalnum() or c in "-_." for c in name))


def check_preset_name(name, kind: str = "models") -> str:
    """A preset name is a file name in its folder: letters, digits, '-', '_', '.' (no path, not empty)."""
    singular = {"models": "model", "hardware": "hardware", "workloads": "workload"}.get(kind, kind)
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"an empty {singular} preset name; give one of: {', '.join(preset_names(kind))}")
    if not is_preset_name(name):
        _refuse_a_file_path(name, kind, singular)
        if kind == "models" and "/" in name and not name.startswith(("/", ".")):
            meant = _did_you_mean(name, kind)
            raise ConfigError(f"model {name!r} is a Hugging Face repository name, not a preset (kvscope reads no "
                              f"model hub). {f'Did you mean the preset {meant}? ' if meant else ''}For any other model "
                              f"give its downloaded folder (--model-path DIR) or its config.json (--config FILE)")
        _refuse_a_workload_path(name, kind)
        meant = _did_you_mean(name, kind)
        raise ConfigError(f"{singular} preset {name!r}: {NAME_RULE}{f' (did you mean {meant}?)' if meant else ''}; "
                          f"known: {', '.join(preset_names(kind))}")
    return name


def _refuse_a_file_path(name: str, kind: str, singular: str) -> None:
    """--model and --hardware take a preset's name, not a file: `--model presets/models/llama-3-8b.toml` was
    "a Hugging Face repository name", `--model ./config.json` "a preset name uses letters, digits ..."
    (--config is not named: gui, attach, verify and calibrate have none)."""
    if kind not in ("models", "hardware") or not (name.lower().endswith((".toml", ".json")) or _exists(name)):
        return
    where = f"its .toml in {user_presets_root() / kind} is listed by `kvscope presets` and named without .toml"
    other = "the model's folder with --model-path DIR, or " if kind == "models" else ""  # every --model has it
    raise ConfigError(f"{singular} {name!r:.80}: a path, and --{singular} takes a preset's name ({where}); give "
                      f"{other}a preset: {', '.join(preset_names(kind))}")


def _refuse_a_workload_path(name: str, kind: str) -> None:
    """--workload takes a preset's name or a .toml file: a path without .toml is said as that, not
    as a preset name with odd characters."""
    if kind == "workloads" and name.lower().endswith(".csv"):  # a trace: what replays one was not said
        raise ConfigError(f"workload {name!r:.80}: a trace CSV, not a workload; replay it with `kvscope run --trace "
                          f"FILE`, or from a workload .toml file holding trace = \"{Path(name).name[:60]}\"")
    if kind == "workloads" and ("/" in name or os.sep in name or _exists(name)):
        raise ConfigError(f"workload {name!r}: a path, and a workload file's name ends in .toml; give a workload "
                          f".toml file or a preset: {', '.join(preset_names(kind))}")


def _exists(path: str) -> bool:
    try:
        return os.path.lexists(path)
    except (OSError, ValueError):
        return False


def _did_you_mean(name: str, kind: str) -> str:
    """The presets a name seems to mean -- it differs from one in case, a Hugging Face owner, an
    -Instruct / -hf suffix, a typo or two, or is the start of a few -- as "llama-3.1-8b" or "a or
    b"; "" when none is close."""
    return " or ".join(meant_names(name.rsplit("/", 1)[-1], preset_names(kind), ("-instruct", "-chat", "-hf", "-base"),
                                   typed=name))


def meant_names(wanted: str, names: list[str], suffixes: tuple = (), typed: str | None = None) -> list[str]:
    """The names `wanted` seems to mean: one that differs only in case, width (full-width letters),
    an invisible character or '_' and spaces for '-' first; else those it starts (up to three),
    else difflib's closest. Never the name as typed (`typed`, else `wanted`) itself."""
    forms: dict[str, str] = {}
    for name in names:
        forms.setdefault(_comparable(name), name)
    form = _comparable(wanted)
    for suffix in suffixes:
        if form.endswith(suffix) and form[:-len(suffix)] in forms:
            form = form[:-len(suffix)]
    if form in forms:
        close = [forms[form]]
    else:
        close = [name for key, name in forms.items() if key.startswith(form)] if len(form) >= 3 else []
        if not 0 < len(close) <= 3:
            close = [forms[key] for key in difflib.get_close_matches(form, list(forms), n=1, cutoff=0.8)]
    return [name for name in close if name != (wanted if typed is None else typed)]


def _comparable(name: str) -> str:
    """A name as a reader would compare it: "Llama 3_8B" and "ｌｌａｍａ-3-8b" are llama-3-8b."""
    text = unicodedata.normalize("NFKC", name)
    text = "".join(c for c in text if unicodedata.category(c) != "Cf")  # zero-width spaces, direction marks
    return "-".join(text.lower().replace("_", " ").split())


def _preset_file(kind: str, name: str):
    check_preset_name(name, kind)
    path = presets_root() / kind / f"{name}.toml"
    if not path.is_file():
        path = user_presets_root() / kind / f"{name}.toml"
    if not path.is_file() and (path.exists() or path.is_symlink()):  # listed by name, so named as what it is
        raise ConfigError(f"{kind} preset {name!r}: {path} is not a regular file (a folder, a device, a pipe or "
                          "a broken link); make it a TOML file or remove it")
    if not path.is_file():
        _refuse_a_workload_path(name, kind)
        known = ", ".join(preset_names(kind))
        singular = {"models": "model", "hardware": "hardware", "workloads": "workload"}[kind]
        meant = _did_you_mean(name, kind)
        raise ConfigError(f"unknown {singular} preset {name!r}{f' (did you mean {meant}?)' if meant else ''}; "
                          f"known: {known}")
    return path


def _refuse_a_name_apart_from_the_file(data: dict, name: str, label: str) -> None:
    """A model or hardware preset is known by its file's name: a name field that says another (a copy of
    a preset, its name left as it was) titled every table, recording and comparison with the other."""
    if "name" in data and data["name"] != name:
        raise ConfigError(f"{label}: its name field is {data['name']!r:.60}, not {name!r}, the name of its file; "
                          "make them the same, or leave name out")


def preset_file(kind: str, name: str) -> Path | None:
    """The file a preset name is read from (built-in or the user's); None where the name names none."""
    try:
        return _preset_file(kind, name)
    except ConfigError:
        return None


def _check_keys(data: dict, allowed: set, label: str) -> None:
    said = unknown_fields(data, allowed, list_allowed=False)
    if said:
        raise ConfigError(f"{label}: {said}")


def model_from_dict(data: dict, label: str, default_name: str | None = None) -> ModelConfig:
    """A ModelConfig from a preset's table (types and required fields checked by build_config);
    default_name names it when the table does not (a user preset is named by its file)."""
    _check_keys(data, _MODEL_KEYS, label)
    given = {"max_position_embeddings_given": "max_position_embeddings" in data}  # unless the preset says
    if data.get("max_position_embeddings_given") is True and "max_position_embeddings" not in data:
        # the default 4,096 positions were then held against --max-model-len as if the preset gave them
        raise ConfigError(f"{label}: max_position_embeddings_given is true, but max_position_embeddings is not "
                          "given; give the model's positions, or leave max_position_embeddings_given out")
    # it says where weights_bytes is from; a preset the window saved writes the default beside none
    source = data.get("weights_source", _DEFAULT_WEIGHTS_SOURCE)
    if source != _DEFAULT_WEIGHTS_SOURCE and data.get("weights_bytes") is None:
        raise ConfigError(f"{label}: weights_source says where weights_bytes comes from, but weights_bytes is not "
                          "given (the weights are then sized from the shape); give weights_bytes, or leave it out")
    model = build_config(ModelConfig, {**given, **_named(data, default_name)}, label)
    _refuse_weights_below_two_bits(model, label)
    if model.num_experts is not None and model.num_dense_layers == model.num_hidden_layers:
        # a file's experts that no layer runs (--layers may still cut a model to its dense layers)
        raise ConfigError(f"{label}: num_dense_layers ({model.num_dense_layers}) makes every layer dense: no layer "
                          f"is left for its {model.num_experts} experts; give fewer dense layers, or leave the "
                          "mixture-of-experts fields out")
    return model


_DEFAULT_WEIGHTS_SOURCE = next(f.default for f in dataclasses.fields(ModelConfig) if f.name == "weights_source")
MIN_WEIGHT_BITS = 2  # below the 4-bit formats (mxfp4 is 4.25 bits) with room for layouts the shape overcounts


def _refuse_weights_below_two_bits(model: ModelConfig, label: str) -> None:
    """weights_bytes is the checkpoint's size: 1 byte for 8 billion parameters left the whole memory to the KV pool."""
    if model.weights_bytes is None:
        return
    from kvscope.engine.memory_math import num_parameters

    parameters = num_parameters(model)
    if model.weights_bytes * 8 < parameters * MIN_WEIGHT_BITS:
        raise ConfigError(f"{label}: weights_bytes ({model.weights_bytes:,}) is less than {MIN_WEIGHT_BITS} bits for "
                          f"each of the {parameters:,} parameters its shape has; give the checkpoint's size in "
                          "bytes, or leave it out to size the weights from the shape")


def hardware_from_dict(data: dict, label: str, default_name: str | None = None) -> HardwareSpec:
    _check_keys(data, _HARDWARE_KEYS, label)
    _check_peak_flops_names(data.get("peak_flops"), label)
    spec = build_config(HardwareSpec, _named(data, default_name), label)
    if spec.memory_bytes < MIN_DEVICE_MEMORY:  # 24 (GiB meant) ran as 24 bytes: "does not fit", the unit not said
        raise ConfigError(f"{label}: memory_bytes is {spec.memory_bytes:,} bytes, less than any device's "
                          f"({MIN_DEVICE_MEMORY // 1024**2} MiB); it counts bytes: 24 GiB is 25769803776 "
                          "(24 * 1024**3)")
    if isinstance(data.get("calibration"), dict) and data["calibration"].keys() <= {"label", "source"} \
            and data["calibration"]:  # the datasheet peaks ran under the label, said as if they had been fitted
        raise ConfigError(f"{label}: calibration gives a label but no figure, so nothing is calibrated; give the "
                          "figures it labels (flops_efficiency, bandwidth_efficiency, overhead_s, ...), or leave "
                          "[calibration] out")
    return spec


MIN_DEVICE_MEMORY = 1024**2  # bytes: memory_bytes below a MiB is a size in GiB or GB, written without its unit
# Weights of these types compute in a wider one (HardwareSpec.flops_for): a rate given for them is never read
_COMPUTED_WIDER = {"int4": "int8, then fp8 or 16-bit", "nf4": "16-bit (bitsandbytes dequantises them)"}


def _check_peak_flops_names(table, label: str) -> None:
    """peak_flops names each type once and only types whose rate is read: bf16 beside bfloat16 (one
    type) kept the second without a word, and an int4 or nf4 rate was never used."""
    if not isinstance(table, dict):
        return  # HardwareSpec says what peak_flops must be
    seen: dict = {}
    for key in table:
        try:
            kind = normalize_dtype(key, WEIGHT_DTYPE_BYTES, "peak_flops dtype")
        except ConfigError:
            continue  # HardwareSpec names the unknown type
        if kind in seen:
            raise ConfigError(f"{label}: peak_flops gives {seen[kind]!r:.40} and {key!r:.40}, one type ({kind}) twice; "
                              "keep one")
        seen[kind] = key
        if kind in _COMPUTED_WIDER:
            raise ConfigError(f"{label}: peak_flops.{kind} is never read: {kind} weights compute at the rate of "
                              f"{_COMPUTED_WIDER[kind]}; leave it out and give those")
    if seen and not seen.keys() & set(COMPUTE_DTYPES):  # a bf16 model's math ran at the fp8 rate, 2x the true one
        raise ConfigError(f"{label}: peak_flops gives no 16- or 32-bit rate (only {', '.join(seen.values())[:60]}), "
                          "so a bf16 model's math would run at a narrower type's rate; give bf16 (or fp16, fp32)")


def _named(data: dict, default_name: str | None) -> dict:
    named = {"name": default_name, **data} if default_name is not None else dict(data)
    for field in ("name", "description", "source"):  # shown in tables and titles: one line, no escape codes
        if isinstance(named.get(field), str) and not named[field].isprintable():
            raise ConfigError(f"{field} {named[field][:60]!r}: must be one line of printable text (no newline, tab "
                              "or control character)")
    return named


def load_model(name: str) -> ModelConfig:
    path, label = _preset_file("models", name), f"model preset {name}"
    data = read_toml(path, label, "model preset")
    _refuse_a_name_apart_from_the_file(data, name, label)
    return model_from_dict(data, label, default_name=name)


def load_hardware(name: str) -> HardwareSpec:
    if name == THIS_MACHINE:
        from kvscope.app.lab.this_machine import detect_this_machine

        return detect_this_machine()
    path, label = _preset_file("hardware", name), f"hardware preset {name}"
    data = read_toml(path, label, "hardware preset")
    _refuse_a_name_apart_from_the_file(data, name, label)
    return hardware_from_dict(data, label, default_name=name)


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(str(value))  # a JSON string is a valid TOML basic string


def save_user_preset(kind: str, name: str, fields: dict) -> Path:
    """Write a user preset (validated first: what is saved always loads)."""
    if kind not in ("models", "hardware"):
        raise ConfigError(f"cannot save a {kind} preset")
    if not name:
        raise ConfigError("a preset needs a name: letters, digits, '-', '_' and '.'")
    if not is_preset_name(name):  # what loading would refuse is never saved
        shown = repr(name) if len(name) <= MAX_NAME_SHOWN else f"{name[:MAX_NAME_SHOWN]!r}..."
        raise ConfigError(f"{NAME_RULE}, got {shown}")
    if len(name.encode()) > MAX_NAME_BYTES:  # the file system's limit, said before it refuses the file
        raise ConfigError(f"a preset name has at most {MAX_NAME_BYTES} bytes (it names a file), "
                          f"got {len(name.encode()):,}")
    if name in builtin_preset_names(kind) or name == THIS_MACHINE:
        raise ConfigError(f"{name!r} is a built-in preset; choose another name")
    _refuse_a_name_apart_only_in_case(kind, name)
    # memory_is_budget says how one run got its memory (--memory-gib), not what the hardware is
    data = {**{k: v for k, v in fields.items() if v is not None and k != "memory_is_budget"}, "name": name}
    (model_from_dict if kind == "models" else hardware_from_dict)(data, f"preset {name}")
    folder = user_presets_root() / kind
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # read-only, or a file where the folder goes
        raise ConfigError(f"preset {name}: cannot make the folder {said_path(folder)}: {exc.strerror or exc}; "
                          "your presets live there (KVSCOPE_CONFIG_DIR, else ~/.config/kvscope)") from None
    path = folder / f"{name}.toml"
    lines = [f"{key} = {_toml_value(value)}" for key, value in data.items() if not isinstance(value, dict)]
    lines += [f"\n[{key}]\n" + "\n".join(f"{k} = {_toml_value(v)}" for k, v in value.items())
              for key, value in data.items() if isinstance(value, dict)]
    write_text_atomic(f"preset {name}", path, "\n".join(lines) + "\n")  # a failed save keeps the old preset
    return path


def _refuse_a_name_apart_only_in_case(kind: str, name: str) -> None:
    """A name that differs from another preset's only in case: where the file system ignores case
    (macOS, Windows) "My-GPU.toml" is the file "my-gpu.toml", so saving it replaced that preset, and a
    built-in's name ("L4-24GB") was never read at all (the built-in is looked up first)."""
    folded = name.casefold()
    for other in builtin_preset_names(kind) + ([THIS_MACHINE] if kind == "hardware" else []):
        if other.casefold() == folded:
            raise ConfigError(f"{name!r} differs from the built-in preset {other!r} only in case, and on a file "
                              "system that ignores case it names the same file; choose another name")
    for other in user_preset_names(kind):
        if other != name and other.casefold() == folded:
            raise ConfigError(f"{name!r} differs from your preset {other!r} only in case, and on a file system that "
                              f"ignores case saving it would replace that one; save it as {other!r} to replace it, "
                              "or choose another name")


def delete_user_preset(kind: str, name: str) -> None:
    if name not in user_preset_names(kind):
        raise ConfigError(f"{name!r} is not one of your presets")
    path = user_presets_root() / kind / f"{name}.toml"
    try:
        path.unlink()
    except OSError as exc:  # a read-only folder
        raise ConfigError(f"preset {name}: cannot delete {said_path(path)}: {exc.strerror or exc}") from None


def load_workload(name: str) -> WorkloadSpec:
    if isinstance(name, str) and name.lower().endswith(".toml"):  # `gui --workload mine.toml`: "give a .toml file"
        stem = Path(name).stem
        raise ConfigError(f"workload {name!r:.80}: a workload file, where a preset's name is read (`kvscope run "
                          f"--workload` reads a file); save it as {user_presets_root() / 'workloads' / Path(name).name}"
                          f" with name = {stem!r:.60} in it, and give the name {stem!r:.60}")
    path = _preset_file("workloads", name)
    label = f"workload preset {name}"
    builtin = presets_root() / "traces"
    if isinstance(path, Path) and path.parent == user_presets_root() / "workloads":  # the user's own
        data = read_toml(path, label, "workload")
        spec = workload_from_dict(data, label, trace_dir=path.parent, fallback_trace_dir=builtin)
        if spec.name != name:  # a copy of chat.toml saved as my-chat.toml: every run and table titled it chat
            raise ConfigError(f"{label}: its name field is {spec.name!r:.60}, not {name!r}, the name of its file; "
                              "make them the same")
        return _refuse_requests_past_rows(data, spec, label)
    # ours: num_requests is its rows
    return workload_from_dict(read_toml(path, label, "workload"), label, trace_dir=builtin)


def load_workload_file(path: str | Path) -> WorkloadSpec:
    path = Path(path)
    label = f"workload file {path}"
    data = read_toml(path, label, "workload")
    return _refuse_requests_past_rows(data, workload_from_dict(data, label, trace_dir=path.parent), label)


def _refuse_requests_past_rows(data: dict, spec: WorkloadSpec, label: str) -> WorkloadSpec:
    """A workload file's num_requests beside its trace: past the trace's rows the run replayed the rows
    there were and said "requests completed 3" of the 50 asked for (as --requests past them is refused)."""
    if spec.trace_path is None or "num_requests" not in data:
        return spec
    from kvscope.app.lab.workload import read_trace

    rows = len(read_trace(spec.trace_path, limit=spec.num_requests))  # a bad row is said here, as the run would
    if rows < spec.num_requests:
        raise ConfigError(f"{label}: num_requests ({spec.num_requests:,}) is more than the {rows:,} request"
                          f"{'' if rows == 1 else 's'} its trace {said_path(spec.trace_path)} holds (one a row); give "
                          f"at most {rows:,}, or leave num_requests out to replay them all")
    return spec
