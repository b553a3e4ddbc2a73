"""The real backend as the application builds it: which model to load (a local folder, or a preset's
shape with random weights built once) and an Engine sized from this machine's real memory."""

from __future__ import annotations

import torch

from kvscope.app.lab.models.loader import check_weights_fit, load_model_directory, resolve_device
from kvscope.app.lab.presets import load_model
from kvscope.app.lab.this_machine import detect_this_machine
from kvscope.app.lab.trained_model import TRAINED_MODEL, ensure_trained_model
from kvscope.app.lab.verify.tiny_model import ensure_random_model
from kvscope.engine.config import DEFAULT_REAL_MODEL, ConfigError, EngineArgs, ModelConfig, resolve_engine_args
from kvscope.engine.engine import Engine
from kvscope.engine.runners.loaded_model import LoadedModel
from kvscope.engine.runners.real import profile_cuda_reserve, real_runner_factory


def load_for_real_backend(model_preset: str | None = None, model_path: str | None = None, device: str | None = None,
                          dtype: str | None = None, quantization: str | None = None, allow_pickle: bool = False,
                          architecture: ModelConfig | None = None, progress=None) -> LoadedModel:
    """A local model directory; the trained model kvscope ships (converted on first use); or a
    preset's shape with random weights (built once, then cached).

    `architecture` (an edited preset) takes precedence over model_preset and builds a random model
    of exactly that shape."""
    if model_path is not None:
        return load_model_directory(model_path, device, dtype, quantization, allow_pickle)
    model_preset = model_preset or DEFAULT_REAL_MODEL
    if architecture is None and model_preset == TRAINED_MODEL.name:
        directory = ensure_trained_model(progress)
        try:
            return load_model_directory(directory, device, dtype, quantization)
        except ConfigError as exc:
            if str(directory) not in str(exc):  # the device, the memory: not the copy's fault
                raise
            # kvscope wrote that folder: what it can do about a damaged one is the user's next step
            raise ConfigError(f"{exc}; it is kvscope's converted copy of {TRAINED_MODEL.name}: delete {directory} "
                              "and kvscope converts it again") from None
    shape = architecture or load_model(model_preset)
    check_weights_fit(shape, resolve_device(device), "fp32")  # random weights are built in fp32
    directory = ensure_random_model(shape)
    return load_model_directory(directory, device, dtype, quantization, random_weights=True, name=shape.name)


def create_real_engine(loaded: LoadedModel, args: EngineArgs, record_outputs: bool = False,
                       memory_bytes: int | None = None):
    """An Engine whose KV pool is sized from this machine's real memory and lives in paged tensors.

    memory_bytes: a device budget in place of the device's own memory. The weights as loaded (so
    quantised ones take less), what is held back and the KV pool then share it, on a CPU too: the
    memory quantisation frees goes to the KV pool."""
    hardware = detect_this_machine(use_cuda=loaded.device.type == "cuda")
    if loaded.device.type == "cuda":
        props = torch.cuda.get_device_properties(loaded.device)
        hardware = hardware.replace(memory_bytes=props.total_memory, gpu_count=1)
        if args.reserve_bytes == 0 and args.kv_cache_memory_bytes is None:
            budget = resolve_engine_args(args, loaded.config, hardware).max_num_batched_tokens
            # measured here rather than estimated as vLLM's accounting would: the profile replaces it
            args = args.replace(accounting="lesson", reserve_bytes=profile_cuda_reserve(loaded, budget))
    if memory_bytes is not None:
        hardware = hardware.with_memory(memory_bytes)
        if loaded.device.type != "cuda":  # no CUDA context or graphs to hold back: the lesson's formula
            args = args.replace(accounting="lesson")
    if args.tensor_parallel_size not in (None, 1):
        raise ConfigError("the real backend runs on one device; tensor parallelism is simulated only")
    return Engine(loaded.config, hardware, args.replace(tensor_parallel_size=1),
                  runner_factory=real_runner_factory(loaded), record_outputs=record_outputs)
