"""kvscope's memory math beside what an attached vLLM server reports: predicted, observed, error.

The server's cache configuration (vllm:cache_config_info) gives its block size, KV dtype, the
memory it gave the KV cache (kv_cache_memory_bytes, from vLLM 0.10), the block count it got and
the concurrency it logs (kv_cache_max_concurrency: sequences of max_model_len tokens). With the
model's shape (a config.json, or a kvscope preset) kvscope's own accounting (memory_math.py,
vLLM's layer groups, the server's version) predicts the same figures:
- num_gpu_blocks from the KV memory (or from the device memory when a --hardware preset says what
  the server ran on); a num_gpu_blocks_override on the server forces the count, so that row has
  no error to give;
- max concurrency from the server's own block count and kvscope's blocks per sequence: this
  checks the layer-group math even when the block count was forced.
Latencies, from the same plan and kvscope's step cost model (engine/cost_model.py, the simulated
engine's; its calibration, when the hardware preset has one, labels the rows): for the load the
server's metrics show over a window -- requests running, the tokens its KV cache holds, the prompt
tokens it prefills a second -- the decode step time (the inter-token latency) and the time to
first token (the observed queue time plus the mean prompt's prefill in one step beside the running
decodes; kvscope predicts the prefill, not the queue). Observed: the histograms' means over the
same window.
Whatever cannot be predicted is a row with its reason, never a number made up.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from kvscope.engine.config import (DEFAULT_VLLM_VERSION, ConfigError, EngineArgs, HardwareSpec, ModelConfig,
                                   default_gpu_memory_utilization, parse_vllm_version, resolve_engine_args)
from kvscope.app.lab.calibration import calibration_note
from kvscope.engine.cost_model import StepCostModel
from kvscope.engine.memory_math import plan_memory
from kvscope.engine.units import format_bytes, format_seconds

MAX_MODEL_LEN_LABELS = ("max_model_len",)  # not in cache_config_info today; read if a version adds it


@dataclass(frozen=True)
class PredictedFigure:
    name: str  # "num_gpu_blocks", "max_concurrency"
    unit: str
    predicted: float | None
    observed: float | None
    note: str = ""  # how the prediction was made, or why there is none
    calibration: str = ""  # the cost model's calibration label, for predicted latencies

    @property
    def error(self) -> float | None:
        """(predicted - observed) / observed; None where either is missing or the count was forced."""
        if self.predicted is None or not self.observed or "forced" in self.note:
            return None
        error = (self.predicted - self.observed) / self.observed
        return error if math.isfinite(error) else None

    def as_dict(self) -> dict:
        return {"name": self.name, "unit": self.unit, "predicted": self.predicted, "observed": self.observed,
                "error": self.error, "note": self.note, "calibration": self.calibration}


def _label(cache_config: dict, name: str) -> str | None:
    value = cache_config.get(name)
    return None if value in (None, "None", "") else value


def _int_label(cache_config: dict, name: str) -> int | None:
    """A label read as a whole number; None where the server wrote none (int(float("inf")) would raise
    OverflowError, and 1e300 is no count of bytes or blocks either)."""
    value = _float_label(cache_config, name)
    return int(value) if value is not None and abs(value) < _MOST_LABEL else None


def _float_label(cache_config: dict, name: str) -> float | None:
    """A label read as a number; None where it is none, or is not finite ("nan", "inf", "1e999")."""
    value = _label(cache_config, name)
    try:
        number = float(value) if value is not None else None
    except (ValueError, TypeError):
        return None
    return number if number is not None and math.isfinite(number) else None


_MOST_LABEL = float(1 << 62)  # past any count of bytes, blocks or tokens a server has

# The labels the plan is sized by: (least, most, whole, what they hold). Given, each is in range or nothing
# is planned from it: kv_cache_memory_bytes="1e300" was said as "sized its cache from GPU memory", "1.5"
# planned 0 blocks (error -100 %), num_gpu_blocks_override="0" said "forced ... override 0", and
# gpu_memory_utilization="0" was planned as 0.9.
_SIZING_LABELS = {"kv_cache_memory_bytes": (1, _MOST_LABEL, True, f"a whole number of bytes from 1 to {_MOST_LABEL:,.0f}"),
                  "num_gpu_blocks_override": (1, _MOST_LABEL, True, f"a whole number of blocks from 1 to {_MOST_LABEL:,.0f}"),
                  "gpu_memory_utilization": (0, 1, False, "a share of memory above 0 and at most 1")}


def unusable_label(cache_config: dict) -> str | None:
    """Why a sizing label the server gave cannot be planned from; None when each is usable or absent."""
    for name, (least, most, whole, what) in _SIZING_LABELS.items():
        text = _label(cache_config, name)
        number = _float_label(cache_config, name)
        if text is not None and (number is None or not (least < number <= most if least == 0 else
                                                          least <= number <= most) or (whole and number % 1)):
            shown = text if len(str(text)) <= 24 else str(text)[:21] + "..."
            return f"the server's vllm:cache_config_info has {name}={shown!r}, which is not {what}"
    return None


def observed_max_model_len(cache_config: dict) -> int | None:
    """The server's max_model_len: kv_cache_size_tokens / kv_cache_max_concurrency, as vLLM logs them."""
    for name in MAX_MODEL_LEN_LABELS:
        if (value := _int_label(cache_config, name)) is not None:
            return value
    tokens, concurrency = _int_label(cache_config, "kv_cache_size_tokens"), _float_label(
        cache_config, "kv_cache_max_concurrency")
    if tokens and concurrency:
        length = tokens / concurrency  # a concurrency of 1e-300 makes it inf
        return round(length) if 0 < length < _MOST_LABEL else None
    return None


def modelled_vllm_version(version: str) -> str:
    """The release whose accounting kvscope applies for `version`: itself, or for a release newer
    than any kvscope models (a live server may be), the newest it does."""
    return DEFAULT_VLLM_VERSION if parse_vllm_version(version) > parse_vllm_version(DEFAULT_VLLM_VERSION) else version


def _version(version: str) -> str:
    """The release a server's version names, as vLLM's tags write it ("0.33.1+cpu", "v0.8.5", "0.11.0rc2.dev5"
    -> 0.33.1, 0.8.5, 0.11.0); "" when it names none. Its digits were picked out of the dotted parts: "v0.8.5"
    was release 8.5 (planned as 0.33, "the newest"), "0.x.5" was 0.5 (V0's accounting)."""
    try:
        parse_vllm_version(version)  # the grammar of the --vllm-version flag: a release, or not one
    except ConfigError:
        return ""
    return re.match(r"[vV]?([0-9]+\.[0-9]+(?:\.[0-9]+)?)", version.strip())[1]


def _stand_in(version: str, modelled: str) -> str:
    """Why the accounting is not the server's own release's (99.1 was planned as 0.33 without a word)."""
    if not _version(version):
        return f" (the server's version {version!r} names no release)"
    if parse_vllm_version(_version(version)) != parse_vllm_version(modelled):
        return f" (the newest kvscope models; the server reports {version})"
    return ""


def server_plan(cache_config: dict, version: str, model: ModelConfig, hardware: HardwareSpec | None):
    """kvscope's memory plan of the server's cache: its block size, KV dtype, KV memory (or the
    hardware's memory x gpu_memory_utilization), vLLM's accounting of its version. ConfigError
    when kvscope cannot plan it."""
    if (why := unusable_label(cache_config)) is not None:
        raise ConfigError(why)
    block_size = _int_label(cache_config, "block_size") or 16
    kv_memory = _int_label(cache_config, "kv_cache_memory_bytes")
    dtype = _label(cache_config, "cache_dtype") or "auto"
    utilization = _float_label(cache_config, "gpu_memory_utilization")  # None: vLLM's default for its version
    if hardware is None:  # only the KV budget is read from it: a placeholder device that holds it
        if kv_memory is None:
            raise ConfigError("the server sized its cache from GPU memory and no hardware was given")
        hardware = HardwareSpec(name="the server", memory_bytes=max(kv_memory, 1), memory_bandwidth_bytes_per_s=1e12,
                                peak_flops={"bf16": 1e15})
    args = EngineArgs(block_size=block_size, kv_cache_dtype=dtype, max_model_len=observed_max_model_len(cache_config),
                      # split over the hardware's devices, as `kvscope math` plans it (None): at 1, 8x-h100-80gb planned
                      # llama-3-70b on one GPU and predicted 0 blocks beside the server's thousands
                      kv_cache_memory_bytes=kv_memory, gpu_memory_utilization=utilization, tensor_parallel_size=None,
                      vllm_version=modelled_vllm_version(_version(version) or EngineArgs().vllm_version))
    return plan_memory(model, hardware, resolve_engine_args(args, model, hardware))


def predict(cache_config: dict, version: str, model: ModelConfig | None, hardware: HardwareSpec | None = None,
            observed_blocks: int | None = None) -> list[PredictedFigure]:
    observed_blocks = observed_blocks or _int_label(cache_config, "num_gpu_blocks")
    observed_concurrency = _float_label(cache_config, "kv_cache_max_concurrency")
    if observed_concurrency is not None and not 1e-9 < observed_concurrency < _MOST_LABEL:
        observed_concurrency = None  # 1e-300 sequences is no server's; an error against it is 10**300 %
    kv_memory = _int_label(cache_config, "kv_cache_memory_bytes")
    override = _int_label(cache_config, "num_gpu_blocks_override")
    utilization = _float_label(cache_config, "gpu_memory_utilization") or default_gpu_memory_utilization(
        modelled_vllm_version(_version(version) or EngineArgs().vllm_version))
    where = "from kv_cache_memory_bytes"
    why = "no model shape: pass --model-path DIR (its config.json) or --model PRESET" if model is None else \
        unusable_label(cache_config) or ("the server sized its cache from GPU memory: pass --hardware PRESET (what "
                                         "it runs on)" if kv_memory is None and hardware is None else None)
    if why is None:
        if hardware is not None and kv_memory is None:
            split = f" (tensor parallel {hardware.gpu_count})" if hardware.gpu_count > 1 else ""
            # a CPU's pool is a set budget, no share of its memory: said as one ("this-machine x 0.9" was not it)
            where = f"from {hardware.name}'s KV budget (a CPU's, as vLLM's VLLM_CPU_KVCACHE_SPACE)" if \
                hardware.kind == "cpu" and not hardware.memory_is_budget else \
                f"from {hardware.name}{split} x gpu_memory_utilization {utilization:g}"
        try:
            plan = server_plan(cache_config, version, model, hardware)
        except ConfigError as exc:
            why = f"kvscope cannot plan {model.name} with the server's settings: {exc}"
        else:
            if plan.num_blocks < 1:  # the server runs: 0 blocks, "error -100.0 %", was a model or hardware not its own
                why = (f"{model.name} leaves no room for a KV cache {where} ({format_bytes(plan.weights_bytes)} of "
                       f"weights), yet the server runs: give the --model and --hardware it serves on")
    if why is not None:
        return [PredictedFigure("num_gpu_blocks", "blocks", None, observed_blocks, why),
                PredictedFigure("max_concurrency", "sequences", None, observed_concurrency, why)]
    blocks_note = f"{model.name}, vLLM {plan.vllm_version} accounting{_stand_in(version, plan.vllm_version)}, {where}"
    if override is not None:
        blocks_note = f"forced: the server runs with num_gpu_blocks_override {override}; kvscope's math for " \
                      f"{model.name} gives {plan.num_blocks:,} {where}"
    concurrency = observed_blocks / plan.blocks_per_sequence if observed_blocks and plan.blocks_per_sequence else None
    concurrency_note = (f"the server's {observed_blocks:,} blocks / {plan.blocks_per_sequence:,} blocks per "
                        f"sequence of {plan.max_model_len:,} tokens") if concurrency is not None else \
        "the server reports no block count"
    return [PredictedFigure("num_gpu_blocks", "blocks", float(plan.num_blocks), observed_blocks, blocks_note),
            PredictedFigure("max_concurrency", "sequences", concurrency, observed_concurrency, concurrency_note)]


# -- latencies ------------------------------------------------------------------------------------------

LATENCY_WINDOW_S = 30.0  # the window's latency rows: the load of the last half minute
MAX_STEP_S = 60.0  # a decode step the fixed point pushes past this: the server cannot keep up


@dataclass(frozen=True)
class ObservedLoad:
    """The server's load and latencies over a window of scrapes (attachment.ObservedPoint)."""

    seconds: float
    engines: int
    num_running: float  # mean of the gauge, all engines together
    kv_tokens: float  # mean tokens one engine's KV cache holds: usage x num_gpu_blocks x block_size
    prompt_tokens_per_s: float  # all engines
    generation_tokens_per_s: float
    new_requests: float  # first tokens in the window (the TTFT histogram's count)
    prompt_tokens: float
    ttft_mean_s: float | None
    itl_mean_s: float | None
    queue_time_mean_s: float | None

    @classmethod
    def of_points(cls, points, engines: int, num_gpu_blocks: int, block_size: int,
                  window_s: float = LATENCY_WINDOW_S) -> "ObservedLoad | None":
        """The scrapes of the last window_s seconds (each counts what happened since the one before);
        None when there is no interval to measure yet."""
        if not points:
            return None
        start = points[-1].time_s - window_s
        window = [p for p in points if p.interval_s > 0 and p.time_s >= start]
        if not window:
            return None
        seconds = sum(p.interval_s for p in window)

        def mean(name):
            values = [getattr(p, name) for p in window if not math.isnan(getattr(p, name))]
            return sum(values) / len(values) if values else 0.0

        def total(name):
            return sum(v for p in window if not math.isnan(v := getattr(p, name)))

        def ratio(name):
            count = total(f"{name}_count")
            return total(f"{name}_sum_s") / count if count > 0 else None

        return cls(seconds, max(engines, 1), mean("num_running"), mean("kv_usage") * num_gpu_blocks * block_size,
                   total("prompt_tokens") / seconds, total("generation_tokens") / seconds, total("ttft_count"),
                   total("prompt_tokens"), ratio("ttft"), ratio("itl"), ratio("queue_time"))


class LatencyModel:
    """kvscope's step cost model of the server (or why there is none), predicting its latencies."""

    NAMES = (("inter_token_latency", "decode step"), ("time_to_first_token", "prefill"))

    def __init__(self, cost: StepCostModel | None, why: str = "", calibration: str = ""):
        self.cost = cost
        self.why = why
        self.calibration = calibration

    @classmethod
    def for_server(cls, server, model: ModelConfig | None, hardware: HardwareSpec | None) -> "LatencyModel":
        if model is None:
            return cls(None, "no model shape: pass --model-path DIR (its config.json) or --model PRESET")
        if hardware is None:
            return cls(None, "no hardware: pass --hardware PRESET (what the server runs on); the step cost model "
                             "needs its FLOP/s and memory bandwidth")
        try:
            plan = server_plan(server.cache_config, server.version, model, hardware)
        except ConfigError as exc:
            return cls(None, f"kvscope cannot plan {model.name} with the server's settings: {exc}")
        return cls(StepCostModel(model, hardware, plan), calibration=hardware.calibration["label"])

    def predict(self, load: ObservedLoad | None) -> list[PredictedFigure]:
        """The inter-token latency and TTFT kvscope predicts for the load, beside the observed means."""
        itl_observed = None if load is None else load.itl_mean_s
        ttft_observed = None if load is None else load.ttft_mean_s
        if self.cost is None or load is None:
            why = self.why or "no scrape interval yet"
            return [PredictedFigure("inter_token_latency", "s", None, itl_observed, why),
                    PredictedFigure("time_to_first_token", "s", None, ttft_observed, why)]
        label = calibration_note(self.cost.calibration)
        running = load.num_running / load.engines
        prompt_rate = load.prompt_tokens_per_s / load.engines
        prompt_len = load.prompt_tokens / load.new_requests if load.new_requests > 0 else 0.0
        # the window's length as time is said everywhere: whole seconds said a 0.3 s attach as "the last 0 s"
        window = f"over the last {format_seconds(load.seconds)}; {label}"
        if running < 0.5:
            itl = PredictedFigure("inter_token_latency", "s", None, itl_observed,
                                  f"no request was running {window}", self.calibration)
        else:
            step = self._decode_step(running, prompt_rate, prompt_len, load.kv_tokens)
            itl = PredictedFigure(
                "inter_token_latency", "s", step, itl_observed,
                (f"a decode step of {running:,.1f} running requests per engine over {load.kv_tokens:,.0f} KV tokens, "
                 f"prefilling {prompt_rate:,.0f} prompt tokens/s beside them, " if step is not None else
                 f"the step cost model does not settle: at {prompt_rate:,.0f} prompt tokens/s per engine the "
                 "server would fall behind, ") + window, self.calibration)
        if load.new_requests <= 0:
            ttft = PredictedFigure("time_to_first_token", "s", None, ttft_observed,
                                   f"no request got its first token {window}", self.calibration)
        else:
            queue = load.queue_time_mean_s or 0.0
            prefill, _, _ = self.cost.cost(running + prompt_len, running + 1, load.kv_tokens + prompt_len ** 2 / 2,
                                           load.kv_tokens, running + 1)
            ttft = PredictedFigure(
                "time_to_first_token", "s", queue + prefill, ttft_observed,
                f"the mean prompt ({prompt_len:,.0f} tokens) prefilled in one step beside {running:,.1f} running "
                f"requests ({prefill * 1000:,.2f} ms) plus the observed mean queue time ({queue * 1000:,.2f} ms): "
                f"kvscope predicts the prefill, not the queue; {window}", self.calibration)
        return [itl, ttft]

    def _decode_step(self, running: float, prompt_rate: float, prompt_len: float, kv_tokens: float) -> float | None:
        """The step time t where a step of the running decodes plus the prompt tokens that arrive in t
        costs t (a fixed point); None where it grows without bound."""
        step = 0.0
        for _ in range(100):
            prefill = prompt_rate * step
            new, _, _ = self.cost.cost(running + prefill, running, kv_tokens + prefill * prompt_len / 2, kv_tokens,
                                       running)
            if new > MAX_STEP_S:
                return None
            if abs(new - step) <= 1e-9 + 1e-6 * new:
                return new
            step = new
        return None
