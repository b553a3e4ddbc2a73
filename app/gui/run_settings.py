"""From the window's settings (plain values) to a validated RunConfig, and the live memory math.

Errors come back as {field: reason} so the settings panel can refuse a value in its own field.
"""

from __future__ import annotations

import functools
import os
import stat
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
    default_gpu_memory_utilization,
    resolve_engine_args,
)
from kvscope.app.lab.models.config_json import load_hf_config
from kvscope.app.lab.models.loader import check_random_weights_fit
from kvscope.app.lab.preset_edits import refused_edit, stated_weights_after
from kvscope.app.lab.pool_room import pool_past_memory
from kvscope.app.lab.presets import THIS_MACHINE, load_hardware, load_model, load_workload
from kvscope.app.lab.said_paths import os_error_text, said_path
from kvscope.app.lab.trained_model import TRAINED_MODEL
from kvscope.app.lab.workload import LengthDist, WorkloadSpec, read_trace
from kvscope.engine.memory_math import full_length_reason, plan_memory, require_fit

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
    """errors: field -> reason. unread: the fields ("model", "hardware") refused because the file
    they name could not be read: the editor's boxes still show the model before it, so the reason
    belongs where the file was chosen, not beside a box whose value is not the cause."""

    def __init__(self, errors: dict[str, str], unread: frozenset = frozenset()):
        super().__init__("; ".join(errors.values()))
        self.errors = errors
        self.unread = unread


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
    """The form's engine fields at EngineArgs' defaults; the memory share as the vLLM release modelled
    takes it (the form has no "vLLM's default" of its own to show)."""
    defaults = EngineArgs()
    values = {name: getattr(defaults, name) for name in FORM_ENGINE_FIELDS}
    values["gpu_memory_utilization"] = default_gpu_memory_utilization(defaults.vllm_version)
    return values


def field_of(message: str) -> str:
    for words, field in _FIELD_WORDS:
        if words in message:
            return field
    return "general"


def _base_model(values: dict):
    path = values.get("model_path") or values.get("config_path")
    return load_hf_config(path) if path else load_model(values["model"])


# (path, size, mtime) -> (rows asked for, the reason it was refused or None, the rows read: fewer than
# asked when the whole file was read)
_traces_checked: dict[tuple, tuple[int, str | None, int]] = {}


def trace_reason(path: str, num_requests: int | None = None) -> str | None:
    """Why the engine could not replay the first num_requests rows of the trace at path (None: it
    can), read by the reader the engine build uses, so a file is refused when it is picked, not at
    Apply. A device, pipe or folder is refused from its type before it is opened: a FIFO blocks a
    reader until something writes to it. A file unchanged since it was checked is not read again."""
    return _trace_check(path, num_requests)[0]


def _trace_check(path: str, num_requests: int | None = None) -> tuple[str | None, int]:
    """(trace_reason's answer, how many of the first num_requests rows the file holds)."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return f"trace {said_path(path)}: cannot read: no such file", 0
    except (OSError, ValueError) as exc:
        return f"trace {os_error_text(path, exc)}", 0
    if stat.S_ISDIR(info.st_mode):
        return f"trace {said_path(path)}: is a folder, not a trace CSV file", 0
    if not stat.S_ISREG(info.st_mode):
        return f"trace {said_path(path)}: not a regular file (a device or a pipe); give a trace CSV file", 0
    limit = num_requests or ALL_ROWS
    key = (str(path), info.st_size, info.st_mtime_ns)
    asked, reason, rows = _traces_checked.get(key, (0, None, 0))
    # rows are read in order: a refusal within fewer rows is one within more, a pass over more
    # rows (or the whole file) is one over fewer
    if asked and (reason is not None and limit >= asked or reason is None and (rows < asked or limit <= asked)):
        return reason, min(rows, limit)
    try:
        rows, reason = len(read_trace(path, limit=limit)), None
    except ConfigError as exc:
        rows, reason = 0, str(exc)
    _traces_checked.clear()  # one trace is chosen at a time
    _traces_checked[key] = (limit, reason, rows)
    return reason, rows


def _requests_past_trace(values: dict, workload: WorkloadSpec) -> dict[str, str]:
    """The trace's reason under Workload, or more Requests than it has rows under Requests: a trace
    picked, or the azure-conv preset, replayed its rows and no more without a word (Requests 50,000
    ran azure-conv's 19,366), as `run --requests` refuses."""
    picked = values.get("trace_path")
    reason, rows = _trace_check(workload.trace_path, workload.num_requests)
    if reason:
        return {"workload": reason}
    if rows >= workload.num_requests:
        return {}
    what = f"trace {said_path(picked)}" if picked else f"workload {workload.name}'s trace"
    return {"num_requests": f"Requests {workload.num_requests:,}: {what} holds {rows:,} request{'s' * (rows != 1)} "
                            f"(one a row); give at most {rows:,}"}


_PRESETS = "set it back to preset's (the box's lowest value)"


def _read_elsewhere(values: dict, spec: WorkloadSpec) -> dict[str, str]:
    """Fields the workload's source sets itself, each with why, where the form gives them: a trace's
    rows set arrivals and lengths, a chat's text its prompts and shared prefix, and only a trace has
    a speed-up. Each was taken and read nowhere (`run --trace --arrival-rate` is refused so)."""
    said, name = {}, f"workload {spec.name}"
    given = {key: values.get(key) for key in ("arrival_rate_per_s", "prompt_median", "output_median",
                                              "shared_prefix_fraction")}
    if spec.trace_path is not None:
        rows = f"{name} replays a trace, whose rows give each request's arrival time and token counts"
        for key, shown in (("arrival_rate_per_s", "Arrival rate {:g} req/s"), ("prompt_median", "Prompt length {:,} tokens"),
                           ("output_median", "Output length {:,} tokens")):
            if given[key] is not None:
                said[key] = f"{shown.format(given[key])} would be ignored: {rows}; {_PRESETS}"
    elif (values.get("trace_speedup") or 1) != 1:
        said["trace_speedup"] = (f"Trace speed-up {values['trace_speedup']:g}x would be ignored: {name} has no trace "
                                 "(its requests arrive at its own rate); set it back to 1x, or pick a trace")
    if spec.chat is not None:
        text = f"{name} sends chat text, whose messages are the prompts and whose system prompt is the shared prefix"
        for key, shown in (("prompt_median", "Prompt length {:,} tokens"),
                           ("shared_prefix_fraction", "Shared prefix {:g} %")):
            if given[key] is not None:
                value = given[key] * 100 if key == "shared_prefix_fraction" else given[key]
                said[key] = f"{shown.format(value)} would be ignored: {text}; {_PRESETS}"
    return said


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


@functools.lru_cache(maxsize=1)
def _real_runs_on_cuda() -> bool:
    from kvscope.app.lab.cuda_device import cuda_device_visible

    return cuda_device_visible()


def weights_unused(values: dict) -> str | None:
    """Why the editor's Weights is read nowhere, or None: the real backend on a CPU loads weights in
    fp32 whatever it says (int4 ran fp32 weights, random ones even for a model folder: an edit)."""
    if values.get("backend") != "real" or _real_runs_on_cuda():
        return None
    return "the real backend on this machine's CPU loads weights in fp32; Weights sizes a simulated model's weights"


def _real_weights_edit(edits: dict, errors: dict) -> dict:
    """The model edits the real backend reads: Weights only on CUDA, as bf16 or fp16 (what it loads
    weights at there; int4 or fp8 loaded fp16), refused otherwise; on a CPU not at all (greyed)."""
    dtype = edits.get("weight_dtype")
    if not _real_runs_on_cuda():
        return {k: v for k, v in edits.items() if k != "weight_dtype"}
    if dtype is not None and WEIGHT_DTYPE_BYTES[dtype] != 2:  # the 16-bit ones it loads at
        errors["model"] = (f"weight_dtype {dtype} (Weights): the real backend loads weights at bf16 or fp16 on CUDA, "
                           f"{dtype} only sizes a simulated model's; give bf16 or fp16, or the simulated backend")
    return edits


def _devices_refused(model, hardware, args) -> str | None:
    """Why the model cannot be split over the hardware's devices, said at the editor's Devices box: the
    engine's "tensor_parallel_size 8 cannot split num_attention_heads 28" named a field this window
    has not, and marked the Attention heads box (8x-h100-80gb with qwen2.5-7b), though the devices
    are what the form sets. None when it splits (or fails for another reason, said as before)."""
    def refusal(devices: int) -> str | None:
        try:
            resolve_engine_args(args, model, hardware.replace(gpu_count=devices))
        except ConfigError as exc:
            return str(exc) if str(exc).startswith("tensor_parallel_size ") else None
        return None

    if hardware.gpu_count <= 1 or refusal(hardware.gpu_count) is None:
        return None
    # only a count that divides the query heads can split them (the engine's check): 65,536 devices typed
    # tried every count below, ~3 s of a frozen window at each check of the form
    heads = model.num_attention_heads
    best = next(n for n in range(min(hardware.gpu_count - 1, heads), 0, -1) if heads % n == 0 and refusal(n) is None)
    return (f"gpu_count {hardware.gpu_count} (Devices): the run splits {model.name} over every device, and "
            f"{hardware.gpu_count} cannot split its {model.num_attention_heads} query heads and "
            f"{model.num_key_value_heads} KV heads evenly; give {best} (the most that splits them), or other hardware")


def _pool_past_memory(values: dict, plan) -> dict[str, str]:
    """A KV pool size the device cannot hold beside the weights: 300 GiB on an 80 GB H100 was drawn
    and run as 300 GiB of blocks (`math --kv-cache-memory-bytes` refuses it, in the same words)."""
    past = pool_past_memory(plan) if values.get("kv_cache_memory_bytes") else None
    if past is None:
        return {}
    why, room = past
    most = f"give at most {room // 1024**2:,} MiB, or more memory" if room >= 1024**2 else "give more memory"
    return {"kv_cache_memory_bytes": f"KV pool size {format_bytes(plan.kv_pool_bytes)}: {why}; {most}"}


def _prefix_unusable(values: dict, spec: WorkloadSpec | None, max_model_len: int) -> dict[str, str]:
    """A shared prefix no request can hold, or one longer than the prompts it starts: Shared prefix
    50 % (a 512-token system prompt) with a context of 256 tokens ran with none shared, and with a
    Prompt length of 10 tokens its prompts ran at 513. Said at the field typed, the share first."""
    if spec is None or spec.chat is not None or spec.shared_prefix_fraction <= 0:
        return {}
    prefix, median = spec.shared_prefix_tokens, values.get("prompt_median")
    typed = values.get("shared_prefix_fraction") is not None
    share = f"Shared prefix {spec.shared_prefix_fraction * 100:g} %: its system prompt of {prefix:,} tokens"
    own = f"workload {spec.name}'s shared prefix of {prefix:,} tokens"
    if prefix >= max_model_len:
        if typed:
            return {"shared_prefix_fraction": f"{share} is not shorter than max_model_len {max_model_len:,} tokens, "
                                              "so no request could hold it; give a longer context length, or set "
                                              "Shared prefix back to preset's"}
        return {"max_model_len": f"max_model_len {max_model_len:,} tokens: {own} is not shorter, so no request "
                                 f"could hold it; give more than {prefix:,} tokens"}
    if median and spec.trace_path is None and prefix >= median:
        grown = f"at least half the prompts that start with it would grow to {prefix + 1:,} tokens"
        if typed:
            return {"shared_prefix_fraction": f"{share} is not shorter than the Prompt length, {median:,} tokens, "
                                              f"which counts it: {grown}; give a Prompt length above {prefix:,} "
                                              "tokens, or set Shared prefix back to preset's"}
        return {"prompt_median": f"Prompt length {median:,} tokens: {own} is not shorter, and each prompt counts "
                                 f"it: {grown}; give more than {prefix:,} tokens"}
    return {}


def _pool_edit(plan, hardware, memory_edited: bool, model_edited: str) -> tuple[str, str] | None:
    """(field, the edit as said) when an edit in the model and hardware editor is why the pool cannot
    be built, said at that edit, on its tab: a vocabulary of 9,999,999 (165 GiB of weights), or a
    memory of 100,000 GiB (46 million blocks), or of 19 GiB (a pool short of one 8,192-token request), was
    refused on the Run tab, at the memory share, the KV pool size or max_model_len left at default, out of
    sight. None when the KV pool size set is the cause."""
    if plan.is_set_budget or not (memory_edited or model_edited):
        return None
    memory = f"memory_bytes {format_bytes(hardware.memory_bytes)} per device" if memory_edited else ""
    if not model_edited:
        return "hardware", memory
    return "model", f"the edited {model_edited}{f', with {memory}' if memory else ''}"


def build_run_config(values: dict, model_edits: dict | None = None, hardware_edits: dict | None = None,
                     seed: int = 0) -> RunConfig:
    """Raises SettingsError with the reason for each refused field."""
    errors: dict[str, str] = {}
    model_edited = ""  # the model's fields the editor changed, as said: "vocab_size 9,999,999"

    def attempt(default_field: str, make):
        try:
            return make()
        except ConfigError as exc:
            message = str(exc)
            field = field_of(message)
            errors[field if field != "general" else default_field] = message
            return None

    unread: set[str] = set()

    def read(field: str, load):
        # what a file or preset says is wrong with it is said at the choice of that file, whatever
        # words the reason uses (a folder named traces/ is no workload error)
        try:
            return load()
        except ConfigError as exc:
            errors[field] = str(exc)
            unread.add(field)
            return None

    model = read("model", lambda: _base_model(values))
    if model_edits and values["backend"] == "real":
        model_edits = _real_weights_edit(model_edits, errors)
    if model is not None and model_edits:
        changes = {k: v for k, v in model_edits.items() if k in MODEL_EDIT_FIELDS and getattr(model, k) != v}
        refused = refused_edit(model, changes)
        if refused:
            errors["model"], changes = refused, {}
        model_edited = ", ".join(f"{k} {v:,}" if isinstance(v, int) else f"{k} {v}" for k, v in changes.items())
        changes.update(stated_weights_after(model, changes))
        if changes:
            edited = attempt("model", lambda: model.replace(**changes))
            model = edited.replace(name=f"{model.name} (edited)") if edited else None
    hardware = read("hardware", lambda: load_hardware(values["hardware"]))
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
            # as --memory-gib: a CPU target's pool is then a share of that memory, not the set 1 GiB budget
            changes["memory_is_budget"] = hardware.memory_is_budget or memory_edited
            hardware = attempt("hardware", lambda: hardware.replace(name=f"{hardware.name} (edited)", **changes))
    args = attempt("general", lambda: EngineArgs(**{name: values[name] for name in FORM_ENGINE_FIELDS}, seed=seed))
    workload = attempt("workload", lambda: _workload(values))
    if workload is not None:
        unread_here = _read_elsewhere(values, workload)
        errors.update(unread_here)
        if workload.trace_path is not None and not unread_here:  # the Requests box may now ask for more rows
            errors.update(_requests_past_trace(values, workload))
    backend = values["backend"]
    if backend == "real":
        hardware = attempt("hardware", lambda: load_hardware(THIS_MACHINE))
        memory_edited = False  # the edits are not this machine's
        if model is not None and hardware is not None and not values.get("model_path") \
                and model.name != TRAINED_MODEL.name:
            try:  # llama-3-70b's 263 GiB on a 24 GiB machine: the form spoke of its KV pool, Play failed to build it
                check_random_weights_fit(model, hardware.memory_bytes)
            except ConfigError as exc:
                errors["model"] = str(exc)
    if model is not None and hardware is not None and args is not None:
        def check():
            split = _devices_refused(model, hardware, args)
            if split:
                errors["hardware"] = split
                return
            plan = plan_memory(model, hardware, resolve_engine_args(args, model, hardware))
            try:  # no block, more than the engine builds, or too few for one full-length request
                require_fit(plan)
                too_long = full_length_reason(plan)
                if too_long:
                    raise ConfigError(too_long)
            except ConfigError as exc:
                # the engine's own reason, naming what took the memory: a KV budget below one block
                # is said at the budget, not blamed on the weights at the utilisation
                edit = _pool_edit(plan, hardware, memory_edited, model_edited)
                if edit is not None:
                    errors[edit[0]] = f"{edit[1]}: {exc}"
                    return
                past = _pool_past_memory(values, plan)  # a pool size past the device's memory says so first
                if not past:
                    raise
                errors.update(past)
                return
            shortest = workload.shortest_request_tokens if workload is not None else None
            if shortest is not None and shortest > plan.max_model_len:
                raise ConfigError(f"max_model_len {plan.max_model_len:,} tokens: every request of this workload is "
                                  f"longer (the shortest asks for {shortest:,} tokens, prompt and output), so all "
                                  f"would be rejected")
            errors.update(_prefix_unusable(values, workload, plan.max_model_len))
            errors.update(_pool_past_memory(values, plan))
        attempt("general", check)
    if errors:
        raise SettingsError(errors, frozenset(unread))
    return RunConfig(backend=backend, model=model, hardware=hardware, engine_args=args, workload=workload, seed=seed,
                     model_path=None if model.name.endswith("(edited)") else values.get("model_path"))


def memory_share_unused(values: dict, hardware_edits: dict | None) -> str | None:
    """Why the form's memory utilisation is read nowhere with these values (a CPU target's KV pool is
    a set budget unless its memory was typed), or None."""
    if values.get("kv_cache_memory_bytes"):  # 0.5 or 0.9 built the same pool (`math` refuses the pair)
        return "a KV pool size is given: the pool is that size, and no share of the memory is taken (as vLLM's " \
               "kv_cache_memory_bytes); set KV pool size back to default to size it by this share"
    real = values.get("backend") == "real"
    try:
        hardware = load_hardware(THIS_MACHINE if real else values["hardware"])
    except ConfigError:
        return None
    typed = not real and (hardware_edits or {}).get("memory_bytes", hardware.memory_bytes) != hardware.memory_bytes
    if hardware.kind != "cpu" or hardware.memory_is_budget or typed:
        return None
    return ("on a CPU the KV pool is a set budget (KV pool size, 1 GiB unless given), as in vLLM's CPU backend"
            + ("" if real else "; or type its memory on the 'Model & hardware' tab to take a share of that"))


def _kv_per_token_terms(plan, model) -> str:
    """What KV per token multiplies, as the plan counts it: deepseek-v2-lite's 30.38 KiB (a latent of
    512 + 64 numbers in each of 27 layers) stood beside "2 x 27 layers x 16 KV heads x 192", ten times
    that, and gemma-2-9b's or qwen3-next's beside every layer, linear-attention ones too."""
    if plan.accounting == "lesson":  # every layer, K and V heads
        return f"2 x {model.num_hidden_layers} layers x {model.num_key_value_heads} KV heads x {model.head_dim}"
    layers = model.count_layers("full_attention") + model.count_layers("sliding_attention")
    counted = f"{layers} layers" + ("" if layers == model.num_hidden_layers else f" (of {model.num_hidden_layers})")
    if model.uses_mla:
        return f"{counted} x ({model.kv_lora_rank} + {model.qk_rope_head_dim}) latent"
    return f"2 x {counted} x {model.num_key_value_heads} KV heads x {model.head_dim}"


def hardware_unused(values: dict) -> str | None:
    """Why the form's hardware (and the editor's memory, bandwidth, FLOP/s and devices) is read
    nowhere, or None: the real backend runs on this machine, and h100-80gb's fields, edited or
    not, stood in the form as if it ran there (`run --backend real --hardware h100-80gb` is refused)."""
    if values.get("backend") != "real":
        return None
    return "the real backend runs on this machine; pick the simulated backend to price the run on this hardware"


def seed_unused(config: RunConfig) -> str | None:
    """Why the toolbar's seed changes nothing in this run, or None: a trace sharing no prefix, on the
    simulated backend, ran the same whatever the seed (`run --trace --seed 5` is refused so)."""
    workload = config.workload
    if config.backend == "real" or workload.trace_path is None or workload.shared_prefix_fraction:
        return None
    return (f"workload {workload.name} replays a trace, whose rows give each request's arrival and lengths, and "
            "shares no prefix: the seed draws only the prompts' token ids, which the simulated backend does not read")


def prefix_caching_unused(values: dict) -> str | None:
    """Why prefix caching is read nowhere, or None: a contiguous reservation shares no block, and a
    run with it ticked reported 0 % prefix hits as if the cache had missed (`run` refuses the pair)."""
    if values.get("allocation") != "contiguous":
        return None
    return "contiguous allocation reserves each request its own max_model_len region and shares no block"


def _block_size_raised(plan, chosen: int) -> str:
    """Why a block holds more tokens than Block size says: qwen3-next's blocks of 144 tokens stood beside
    the 16 chosen (1, 8 and 16 all ran 144), unexplained."""
    if plan.block_size == chosen:
        return ""
    return (f" (Block size {chosen} raised so that one block's page holds a linear-attention layer's state, "
            "as vLLM does)")


def memory_preview(config: RunConfig) -> str:
    model, hardware = config.model, config.hardware
    plan = plan_memory(model, hardware, resolve_engine_args(config.engine_args, model, hardware))
    kv_line = f"{_kv_per_token_terms(plan, model)} x {KV_CACHE_DTYPE_BYTES[plan.kv_cache_dtype]} B ({plan.kv_cache_dtype})"
    rows = [
        ("KV per token", f"{format_bytes(plan.kv_bytes_per_token)}", kv_line),
        ("KV per request", f"{format_bytes(plan.kv_bytes_per_sequence)}", f"at {plan.max_model_len:,} tokens"),
        ("weights", format_bytes(plan.weights_bytes), plan.weights_source),
        ("KV pool", format_bytes(plan.kv_pool_bytes), plan.kv_pool_source),
        ("blocks", f"{plan.num_blocks:,}", f"{plan.block_size} tokens, {format_bytes(plan.block_bytes)} each"
                                           + _block_size_raised(plan, config.engine_args.block_size)),
        ("max concurrency", f"{plan.max_concurrent_sequences:.2f} requests", f"of {plan.max_model_len:,} tokens"),
    ]
    where = "this machine" if config.backend == "real" else hardware.name
    body = "".join(f"<tr><td>{a}</td><td align='right'><b>{b}</b></td><td><small>{c}</small></td></tr>" for a, b, c in rows)
    return f"<b>{model.name}</b> on {where}<table cellspacing='4'>{body}</table>"


def values_from_model(model) -> dict:
    return {k: getattr(model, k) for k in MODEL_EDIT_FIELDS}
