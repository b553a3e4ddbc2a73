"""From the window's settings (plain values) to a validated RunConfig, and the live memory math.

Errors come back as {field: reason} so the settings panel can refuse a value in its own field.
"""

from __future__ import annotations

from pathlib import Path

from kvscope.engine.config import (
    ALLOCATIONS,
    BACKENDS,
    BLOCK_SIZES,
    KV_CACHE_DTYPE_BYTES,
    KV_CACHE_DTYPES,
    SCHEDULINGS,
    WEIGHT_DTYPE_BYTES,
    ConfigError,
    EngineArgs,
    resolve_engine_args,
)
from kvscope.app.lab.models.config_json import load_hf_config
from kvscope.app.lab.presets import THIS_MACHINE, load_hardware, load_model, load_workload
from kvscope.app.lab.workload import LengthDist, WorkloadSpec
from kvscope.engine.memory_math import full_length_reason, plan_memory

from kvscope.app.host.session import RunConfig
from kvscope.engine.units import format_bytes

ALL_ROWS = 10**9
# The engine arguments the settings form holds, by EngineArgs' names.
FORM_ENGINE_FIELDS = ("max_model_len", "kv_cache_dtype", "block_size", "gpu_memory_utilization",
                      "kv_cache_memory_bytes", "max_num_seqs", "max_num_batched_tokens", "enable_prefix_caching",
                      "enable_chunked_prefill", "scheduling", "allocation")
BACKEND_LABELS = {"real": "real (runs here)", "simulated": "simulated (roofline)"}
MODEL_EDIT_FIELDS = ("num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim", "hidden_size",
                     "intermediate_size", "vocab_size", "weight_dtype")
# Which field a ConfigError is about, by the words its message uses.
_FIELD_WORDS = [
    ("max_num_batched_tokens", "max_num_batched_tokens"),
    ("max_model_len", "max_model_len"),
    ("tensor_parallel", "hardware"),
    ("num_key_value_heads", "model"),
    ("num_attention_heads", "model"),
    ("gpu_memory_utilization", "gpu_memory_utilization"),
    ("kv_cache_memory_bytes", "kv_cache_memory_bytes"),
    ("no room for a KV cache", "gpu_memory_utilization"),
    ("block_size", "block_size"),
    ("max_num_seqs", "max_num_seqs"),
    ("trace", "workload"),
    ("num_requests", "num_requests"),
    ("arrival_rate", "arrival_rate_per_s"),
    ("workload", "workload"),
    ("model", "model"),
    ("hardware", "hardware"),
]


class SettingsError(Exception):
    def __init__(self, errors: dict[str, str]):
        super().__init__("; ".join(errors.values()))
        self.errors = errors


def settings_choices() -> dict[str, list[tuple]]:
    """The settings form's lists, (value, label) each, from the engine's config: the only place
    they are written. The real backend comes first, as the window starts on it."""
    return {
        "backend": [(b, BACKEND_LABELS.get(b, b)) for b in sorted(BACKENDS, key=lambda b: b != "real")],
        "kv_cache_dtype": [(d, d) for d in KV_CACHE_DTYPES],
        "block_size": [(size, f"{size} tokens") for size in BLOCK_SIZES],
        "scheduling": [(name, name) for name in SCHEDULINGS],
        "allocation": [(name, name) for name in ALLOCATIONS],
    }


def weight_dtype_choices() -> tuple[str, ...]:
    """The weight precisions the model editor offers."""
    return tuple(WEIGHT_DTYPE_BYTES)


def engine_defaults() -> dict:
    """The form's engine fields at EngineArgs' defaults."""
    defaults = EngineArgs()
    return {name: getattr(defaults, name) for name in FORM_ENGINE_FIELDS}


def field_of(message: str) -> str:
    for words, field in _FIELD_WORDS:
        if words in message:
            return field
    return "general"


def _base_model(values: dict):
    if values.get("model_path"):
        return load_hf_config(values["model_path"])
    if values.get("config_path"):
        return load_hf_config(values["config_path"])
    return load_model(values["model"])


def _workload(values: dict) -> WorkloadSpec:
    if values.get("trace_path"):
        spec = WorkloadSpec(name=Path(values["trace_path"]).stem, trace_path=values["trace_path"], num_requests=ALL_ROWS)
    else:
        spec = load_workload(values["workload"])
    changes = {"num_requests": values.get("num_requests"), "arrival_rate_per_s": values.get("arrival_rate_per_s"),
               "trace_speedup": values.get("trace_speedup")}
    if values.get("prompt_median"):
        base = spec.prompt_tokens
        changes["prompt_tokens"] = LengthDist("lognormal", min=1, max=max(base.max, values["prompt_median"] * 8),
                                              median=float(values["prompt_median"]), sigma=base.sigma or 0.5)
    if values.get("output_median"):
        base = spec.output_tokens
        changes["output_tokens"] = LengthDist("lognormal", min=1, max=max(base.max, values["output_median"] * 8),
                                              median=float(values["output_median"]), sigma=base.sigma or 0.5)
    fraction = values.get("shared_prefix_fraction")
    if fraction is not None:
        changes["shared_prefix_fraction"] = fraction
        if fraction > 0 and spec.shared_prefix_tokens < 1:
            changes["shared_prefix_tokens"] = 512
    return spec.with_overrides(**changes)


def build_run_config(values: dict, model_edits: dict | None = None, hardware_edits: dict | None = None,
                     seed: int = 0) -> RunConfig:
    """Raises SettingsError with the reason for each refused field."""
    errors: dict[str, str] = {}

    def attempt(default_field: str, make):
        try:
            return make()
        except ConfigError as exc:
            message = str(exc)
            field = field_of(message)
            errors[field if field != "general" else default_field] = message
            return None

    model = attempt("model", lambda: _base_model(values))
    if model is not None and model_edits:
        changes = {k: v for k, v in model_edits.items() if k in MODEL_EDIT_FIELDS and getattr(model, k) != v}
        if changes.get("weight_dtype") and model.weights_bytes is not None:
            changes["weights_bytes"] = None
        if changes:
            edited = attempt("model", lambda: model.replace(**changes))
            model = edited.replace(name=f"{model.name} (edited)") if edited else None
    hardware = attempt("hardware", lambda: load_hardware(values["hardware"]))
    memory_edited = False
    if hardware is not None and hardware_edits:
        flops = dict(hardware.peak_flops)
        flops16 = hardware_edits.get("flops_16bit")
        if flops16 and abs(flops16 - hardware.flops_for("fp16")) > 1e9:
            scale = flops16 / hardware.flops_for("fp16")
            flops = {k: v * scale for k, v in flops.items()}
        changes = {"memory_bytes": hardware_edits.get("memory_bytes", hardware.memory_bytes),
                   "memory_bandwidth_bytes_per_s": hardware_edits.get("memory_bandwidth_bytes_per_s",
                                                                      hardware.memory_bandwidth_bytes_per_s),
                   "peak_flops": flops, "gpu_count": hardware_edits.get("gpu_count", hardware.gpu_count)}
        if any(getattr(hardware, k) != v for k, v in changes.items()):
            memory_edited = changes["memory_bytes"] != hardware.memory_bytes
            hardware = attempt("hardware", lambda: hardware.replace(name=f"{hardware.name} (edited)", **changes))
    args = attempt("general", lambda: EngineArgs(**{name: values[name] for name in FORM_ENGINE_FIELDS}, seed=seed))
    workload = attempt("workload", lambda: _workload(values))
    backend = values["backend"]
    if backend == "real":
        hardware = attempt("hardware", lambda: load_hardware(THIS_MACHINE))
        memory_edited = False  # the edits are not this machine's
    if model is not None and hardware is not None and args is not None:
        def check():
            plan = plan_memory(model, hardware, resolve_engine_args(args, model, hardware))
            if not plan.fits:
                no_room = f"no room for a KV cache: the weights ({format_bytes(plan.weights_bytes)}) fill the usable memory"
                if memory_edited:  # said at the memory the user typed, on the tab it was typed on
                    errors["hardware"] = f"memory_bytes {format_bytes(hardware.memory_bytes)} per device: {no_room}"
                    return
                raise ConfigError(no_room)
            too_long = full_length_reason(plan)
            if too_long:
                raise ConfigError(too_long)
            shortest = workload.shortest_request_tokens if workload is not None else None
            if shortest is not None and shortest > plan.max_model_len:
                raise ConfigError(f"max_model_len {plan.max_model_len:,} tokens: every request of this workload is "
                                  f"longer (the shortest asks for {shortest:,} tokens, prompt and output), so all "
                                  f"would be rejected")
        attempt("general", check)
    if errors:
        raise SettingsError(errors)
    return RunConfig(backend=backend, model=model, hardware=hardware, engine_args=args, workload=workload, seed=seed,
                     model_path=None if model.name.endswith("(edited)") else values.get("model_path"))


def memory_preview(config: RunConfig) -> str:
    model, hardware = config.model, config.hardware
    plan = plan_memory(model, hardware, resolve_engine_args(config.engine_args, model, hardware))
    kv_line = (f"2 x {model.num_hidden_layers} layers x {model.num_key_value_heads} KV heads x {model.head_dim} x "
               f"{KV_CACHE_DTYPE_BYTES[plan.kv_cache_dtype]}"
               f" B ({plan.kv_cache_dtype})")
    rows = [
        ("KV per token", f"{format_bytes(plan.kv_bytes_per_token)}", kv_line),
        ("KV per request", f"{format_bytes(plan.kv_bytes_per_sequence)}", f"at {plan.max_model_len:,} tokens"),
        ("weights", format_bytes(plan.weights_bytes), plan.weights_source),
        ("KV pool", format_bytes(plan.kv_pool_bytes), plan.kv_pool_source),
        ("blocks", f"{plan.num_blocks:,}", f"{plan.block_size} tokens, {format_bytes(plan.block_bytes)} each"),
        ("max concurrency", f"{plan.max_concurrent_sequences:.2f} requests", f"of {plan.max_model_len:,} tokens"),
    ]
    where = "this machine" if config.backend == "real" else hardware.name
    body = "".join(f"<tr><td>{a}</td><td align='right'><b>{b}</b></td><td><small>{c}</small></td></tr>" for a, b, c in rows)
    return f"<b>{model.name}</b> on {where}<table cellspacing='4'>{body}</table>"


def values_from_model(model) -> dict:
    return {k: getattr(model, k) for k in MODEL_EDIT_FIELDS}
