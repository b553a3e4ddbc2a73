"""The real runner: a Hugging Face causal LM executes every step over the paged KV pool.

One forward per step over the packed batch (prompt chunks and decode tokens together, no
padding). New K/V land in the PagedKVCache at the slots of the blocks the block manager gave
out; attention reads each request's blocks through its block table. Greedy sampling. On a CPU
the linear layers run on weights packed once for oneDNN (packed_linear.py). Step times are
measured, and the roofline of this machine gives each step's compute and memory floors.
"""

from __future__ import annotations

import inspect
import time

import torch

from kvscope.engine.config import ConfigError, EngineArgs, HardwareSpec, ModelConfig, resolve_engine_args
from kvscope.engine.memory_math import MemoryPlan
from kvscope.engine.scheduler import ScheduledBatch
from kvscope.engine.runners.base import NO_TOKEN, ExecuteResult, StepOutOfMemory
from kvscope.engine.runners.decode_graphs import DecodeGraphs
from kvscope.engine.runners.loaded_model import LoadedModel
from kvscope.engine.runners.packed_linear import onednn_packing_available, pack_linear_layers
from kvscope.engine.runners.paged_attention import ATTN_IMPLEMENTATION, build_step_metadata
from kvscope.engine.runners.paged_cache import PagedKVCache
from kvscope.engine.runners.simulated import SimulatedRunner


def keep_freed_memory_for_reuse() -> None:
    """On glibc, large blocks are mmap'd and returned to the OS on free, so every step's big
    activations page-fault in afresh (a third of a CPU prefill step, measured). Raising the mmap
    and trim thresholds lets freed memory be reused, as a caching allocator would on a GPU."""
    import ctypes
    import sys

    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc (musl): nothing to tune
        return
    m_trim_threshold, m_mmap_threshold = -1, -3
    libc.mallopt(m_mmap_threshold, 1 << 30)
    libc.mallopt(m_trim_threshold, (1 << 31) - 1)


class RealRunner:
    name = "real"

    def __init__(self, loaded: LoadedModel, hardware: HardwareSpec, plan: MemoryPlan, args: EngineArgs):
        model = loaded.config
        self.loaded = loaded
        self.hf_model = loaded.hf_model
        self.device = loaded.device
        self.block_size = plan.block_size
        # CUDA graphs pad a decode batch with rows that write to one scratch block past the pool
        capture_graphs = self.device.type == "cuda" and not args.enforce_eager
        try:
            self.cache = PagedKVCache(model.num_hidden_layers, plan.num_blocks + capture_graphs, plan.block_size,
                                      model.num_key_value_heads, model.head_dim, plan.kv_cache_dtype, self.device)
        except (torch.OutOfMemoryError, RuntimeError) as exc:
            raise ConfigError(f"cannot allocate the KV pool of {plan.num_blocks:,} blocks on {self.device}: "
                              f"{str(exc).splitlines()[0]}") from None
        self.hf_model.set_attn_implementation(ATTN_IMPLEMENTATION)
        self.packed_layers = 0
        self.packing_time_s = 0.0  # kvscope's warm-up: there is no compilation to wait for
        if self.device.type == "cpu":
            keep_freed_memory_for_reuse()
            packing_started = time.perf_counter()
            if onednn_packing_available(self.hf_model.dtype):
                self.packed_layers = pack_linear_layers(self.hf_model)
            self.packing_time_s = time.perf_counter() - packing_started
        params = inspect.signature(self.hf_model.forward).parameters
        self.cache_argument = "cache" if "cache" in params else "past_key_values"
        self.graphs = None
        if capture_graphs:
            max_batch = resolve_engine_args(args, model, hardware).max_num_seqs
            self.graphs = DecodeGraphs(self.hf_model, self.cache, plan.block_size, plan.num_blocks, max_batch,
                                       self.cache_argument)
        self.roofline = SimulatedRunner(model, hardware, plan, args)
        self.forward_time_s = 0.0  # inside the model forward, summed over steps
        self.step_time_s = 0.0  # whole execute(), summed over steps
        # For parity checks: the logits behind every sampled token, per request id.
        self.recorded_logits: dict[int, list] | None = None

    def execute(self, batch: ScheduledBatch) -> ExecuteResult:
        started = time.perf_counter()
        # parity checks record logits, which leave no graph: they run eagerly
        graphed = self.graphs is not None and self.recorded_logits is None
        shape = self.graphs.shape_for(batch) if graphed else None
        if shape is not None:
            with torch.inference_mode():
                tokens = self.graphs.run(batch, *shape)
            if tokens is not None:
                return self._finish(batch, started, started, tokens.tolist(), list(range(len(batch.requests))))
        meta = build_step_metadata(batch, self.block_size, self.device)
        meta.cache = self.cache
        self.cache.step = meta
        forward_started = time.perf_counter()
        try:
            with torch.inference_mode():
                out = self.hf_model(
                    input_ids=meta.input_ids, position_ids=meta.position_ids, use_cache=True,
                    logits_to_keep=meta.sample_index, kvscope_step=meta, **{self.cache_argument: self.cache},
                )
                logits = out.logits[0]
                tokens = logits.argmax(-1).tolist()  # waits for the device
                if self.recorded_logits is not None:
                    for entry, row in zip(meta.sample_entries, logits.float().cpu()):
                        self.recorded_logits.setdefault(batch.requests[entry].request_id, []).append(row)
                return self._finish(batch, started, forward_started, tokens, meta.sample_entries)
        except torch.OutOfMemoryError as exc:
            raise StepOutOfMemory(str(exc).splitlines()[0]) from None
        finally:
            self.cache.step = None

    def _finish(self, batch: ScheduledBatch, started: float, forward_started: float, tokens: list,
                sample_entries: list) -> ExecuteResult:
        """The step's result from its greedy tokens, one per entry in sample_entries."""
        finished = time.perf_counter()
        self.forward_time_s += finished - forward_started
        sampled = [NO_TOKEN] * len(batch.requests)
        for entry, token in zip(sample_entries, tokens):
            sampled[entry] = token
        duration = finished - started
        self.step_time_s += duration
        _, compute, memory = self.roofline.cost(batch.num_tokens, len(tokens), batch.attention_pairs, batch.kv_read_tokens)
        return ExecuteResult(duration, sampled, compute, memory)


def real_runner_factory(loaded: LoadedModel):
    def make(model: ModelConfig, hardware: HardwareSpec, plan: MemoryPlan, args: EngineArgs) -> RealRunner:
        return RealRunner(loaded, hardware, plan, args)

    return make


def profile_cuda_reserve(loaded: LoadedModel, num_tokens: int) -> int:
    """Bytes a step needs beyond the weights and the KV pool: the activation peak of a forward over
    num_tokens tokens, plus what others (CUDA context, other processes) already hold."""
    device = loaded.device
    model = loaded.hf_model
    torch.cuda.synchronize(device)
    free_before, total = torch.cuda.mem_get_info(device)
    torch_before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    previous = model.config._attn_implementation
    model.set_attn_implementation("sdpa")
    try:
        with torch.inference_mode():
            ids = torch.zeros((1, num_tokens), dtype=torch.long, device=device)
            model(input_ids=ids, use_cache=False, logits_to_keep=1)
        torch.cuda.synchronize(device)
    finally:
        model.set_attn_implementation(previous)
    activation_peak = torch.cuda.max_memory_allocated(device) - torch_before
    non_torch = (total - free_before) - torch.cuda.memory_reserved(device)
    torch.cuda.empty_cache()
    return int(activation_peak + max(0, non_torch))
