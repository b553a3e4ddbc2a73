"""Two to four engine configurations on the identical workload, advanced on one clock.

Every configuration is given the same request list — generated once from one seed, or read once
from one trace — so a difference in the results comes from the setting that differs and from
nothing else. The engines step in lockstep on their own engine clocks, so a window can show their
block maps side by side at the same moment; `run_comparison` simply steps them to the end.

Results carry the metric names of Engine.summary() (what `kvscope run --json` prints), the
configuration's settings, its memory math, the ratio of each key metric to the first
configuration's (the baseline), and its quality cost: what its KV precision and weight
quantisation cost against the model at full precision, measured on the real backend (top-1
agreement and perplexity on English passages for a model with a tokenizer, app/lab/verify/
quality.py; top-1 agreement against transformers' generate() on token prompts for one without),
None on the simulated one, which holds no values to measure.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from kvscope.engine.config import (
    BACKENDS,
    DEFAULT_HARDWARE,
    DEFAULT_BACKEND,
    DEFAULT_MODEL,
    KV_CACHE_DTYPE_BYTES,
    QUANTIZATIONS,
    ConfigError,
    EngineArgs,
    HardwareSpec,
    ModelConfig,
)
from kvscope.engine.engine import Engine, StepResult
from kvscope.app.lab.presets import load_hardware, load_model
from kvscope.app.lab.workload import WorkloadSpec, generate_requests
from kvscope.engine.request import RequestSpec

MIN_CONFIGURATIONS, MAX_CONFIGURATIONS = 2, 4

# The metrics a comparison is read by; each gets a ratio to the baseline.
KEY_METRICS = (
    "throughput_tokens_per_s", "ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "itl_max_s",
    "queue_time_p99_s", "peak_running", "peak_kv_usage", "preemptions", "prefix_cache_hit_rate",
    "mean_fragmentation", "max_concurrent_sequences",
)
# Memory-math quantities a result carries beside the run's metrics.
MEMORY_FIELDS = (
    "kv_cache_dtype", "kv_bytes_per_token", "kv_bytes_per_sequence", "weights_bytes", "kv_pool_bytes",
    "num_blocks", "block_size", "max_model_len", "max_concurrent_sequences",
)
# Parity prompts for the KV quality cost of a model without a tokenizer: two prompts of 16 tokens
# (32 positions) cost about a second on a 2-core CPU, four several times that. The note says how
# many positions it rests on.
QUALITY_PROMPTS = 2
QUALITY_TOKENS = 16
# English passages for a model with a tokenizer: two (~540 tokens) cost SmolLM2-135M a few
# seconds per configuration on a 2-core CPU; `kvscope verify` measures on more.
QUALITY_PASSAGES = 2
SIMULATED_QUALITY_NOTE = "not measured: the simulated backend holds no values"
QUALITY_FIELDS = ("kv_quality_cost", "perplexity", "full_precision_perplexity")


@dataclass(frozen=True)
class Variant:
    """One configuration: a label and every setting, of which a comparison varies a few."""

    label: str
    backend: str = DEFAULT_BACKEND
    model: str = DEFAULT_MODEL
    hardware: str | None = DEFAULT_HARDWARE  # simulated only: the real backend runs on this machine
    memory_bytes: int | None = None  # per device, in place of the hardware preset's
    engine_args: EngineArgs = field(default_factory=EngineArgs)
    # Every request generates exactly this many tokens; prompts and arrivals stay the workload's.
    output_tokens: int | None = None
    device: str | None = None  # real backend: cpu, cuda, cuda:N (default: cuda if present)
    # real backend: the weights quantised on load by bitsandbytes (int8, nf4); None: as on disk.
    # With memory_bytes (a device budget) the memory they free goes to the KV pool.
    quantization: str | None = None

    def __post_init__(self):
        if not isinstance(self.label, str) or not self.label.strip():
            raise ConfigError("a configuration needs a non-empty label")
        if self.backend not in BACKENDS:
            raise ConfigError(f"configuration {self.label!r}: backend must be one of {', '.join(BACKENDS)}, "
                              f"got {self.backend!r}")
        if self.backend == "real" and self.hardware is not None:
            raise ConfigError(f"configuration {self.label!r}: the real backend runs on this machine; "
                              "give it a device budget (memory) or a kv_cache_memory_bytes instead of hardware")
        if self.quantization is not None and (self.backend != "real" or self.quantization not in QUANTIZATIONS):
            raise ConfigError(f"configuration {self.label!r}: quantization is {' or '.join(QUANTIZATIONS)} on the "
                              f"real backend, got {self.quantization!r}{' on the simulated one' if self.backend != 'real' else ''}")
        if self.backend == "simulated" and self.hardware is None:
            raise ConfigError(f"configuration {self.label!r}: the simulated backend needs a hardware preset")
        for name in ("memory_bytes", "output_tokens"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ConfigError(f"configuration {self.label!r}: {name} must be a whole number >= 1, got {value!r}")

    def model_config(self) -> ModelConfig:
        return load_model(self.model)

    def hardware_spec(self) -> HardwareSpec:
        hardware = load_hardware(self.hardware)
        if self.memory_bytes is None:
            return hardware
        return hardware.with_memory(self.memory_bytes)

    def build_engine(self) -> Engine:
        if self.backend == "simulated":
            return Engine(self.model_config(), self.hardware_spec(), self.engine_args)
        from kvscope.app.lab.real_backend import create_real_engine

        return create_real_engine(loaded_model(self.model, self.device, self.quantization), self.engine_args,
                                  memory_bytes=self.memory_bytes)


LABEL_CHARS = 80  # of a configuration's label in an error: a dialog's first line


def configuration_said(label: str) -> str:
    """"configuration 'x'", as an error leads with it: short, escaped by repr (a direction override)."""
    return f"configuration {label if len(label) <= LABEL_CHARS else label[:LABEL_CHARS - 3] + '...'!r}"


def _built(variant: "Variant") -> Engine:
    """The configuration's engine. A refusal names the configuration (of four, one had no room for a
    KV cache, and the message did not say which); any other failure carries its label to whoever
    shows its traceback (configuration_label)."""
    try:
        return variant.build_engine()
    except ConfigError as exc:
        if str(exc).startswith("configuration "):  # Variant's own checks name it
            raise
        raise ConfigError(f"{configuration_said(variant.label)}: {exc}") from exc
    except Exception as exc:
        exc.configuration_label = variant.label
        raise


_LOADED_MODELS: dict = {}


def loaded_model(model: str, device: str | None = None, quantization: str | None = None):
    """A real-backend model, loaded once per process: configurations that share it share its weights."""
    key = (model, device, quantization)
    if key not in _LOADED_MODELS:
        from kvscope.app.lab.real_backend import create_real_engine, load_for_real_backend

        loaded = load_for_real_backend(model, device=device, quantization=quantization)
        # Real step times are measured, and the first forwards of a process pay one-time costs
        # (kernel selection, allocator growth): a throw-away engine pays them, so the first
        # configuration to step is not charged for them.
        warm = create_real_engine(loaded, EngineArgs(num_gpu_blocks_override=64, max_model_len=512))
        for length, max_tokens in ((200, 4), (24, 8), (3, 8)):
            warm.add_request([t % loaded.config.vocab_size for t in range(1, length + 1)], max_tokens)
        warm.run()
        _LOADED_MODELS[key] = loaded
    return _LOADED_MODELS[key]


@dataclass(frozen=True)
class ComparisonWorkload:
    """The one workload every configuration serves, and how its requests are resized.

    Scaling keeps a trace's mix of lengths while shrinking it to what a small model on a CPU
    serves in seconds; `all_at_once` drops the arrival times (an offline batch), so concurrency
    is set by the engine, not by the arrival rate."""

    spec: WorkloadSpec
    seed: int = 0
    prompt_scale: float = 1.0
    output_scale: float = 1.0
    max_output_tokens: int | None = None
    all_at_once: bool = False

    def __post_init__(self):
        for name in ("prompt_scale", "output_scale"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
                raise ConfigError(f"workload: {name} must be in (0, 1], got {value!r}")
        if self.max_output_tokens is not None and self.max_output_tokens < 1:
            raise ConfigError(f"workload: max_output_tokens must be at least 1, got {self.max_output_tokens}")
        if self.seed < 0:
            raise ConfigError(f"workload: seed must be 0 or more, got {self.seed}")

    def replace(self, **changes) -> "ComparisonWorkload":
        return dataclasses.replace(self, **changes)

    def requests(self, vocab_size: int) -> list[RequestSpec]:
        out = []
        for spec in generate_requests(self.spec, vocab_size, seed=self.seed):
            prompt = spec.prompt_token_ids
            if self.prompt_scale != 1:
                prompt = prompt[: max(1, int(len(prompt) * self.prompt_scale))]
            max_tokens = max(1, int(spec.max_tokens * self.output_scale))
            if self.max_output_tokens is not None:
                max_tokens = min(max_tokens, self.max_output_tokens)
            out.append(dataclasses.replace(
                spec, prompt_token_ids=prompt, max_tokens=max_tokens,
                arrival_time_s=0.0 if self.all_at_once else spec.arrival_time_s,
                shared_prefix_tokens=min(spec.shared_prefix_tokens, len(prompt)),
            ))
        return out

    def describe(self) -> dict:
        return {
            "name": self.spec.name, "num_requests": self.spec.num_requests, "seed": self.seed,
            "arrival_rate_per_s": None if self.all_at_once or self.spec.trace_path else self.spec.arrival_rate_per_s,
            "all_at_once": self.all_at_once, "trace": self.spec.trace_path, "prompt_scale": self.prompt_scale,
            "output_scale": self.output_scale, "max_output_tokens": self.max_output_tokens,
        }


@dataclass(frozen=True)
class ComparisonSpec:
    """What to compare: the configurations (the first is the baseline) and their common workload."""

    variants: tuple
    workload: ComparisonWorkload
    title: str = ""

    def __post_init__(self):
        object.__setattr__(self, "variants", tuple(self.variants))
        count = len(self.variants)
        if not MIN_CONFIGURATIONS <= count <= MAX_CONFIGURATIONS:
            raise ConfigError(f"a comparison needs {MIN_CONFIGURATIONS} to {MAX_CONFIGURATIONS} configurations, got {count}")
        labels = [v.label for v in self.variants]
        if len(set(labels)) != count:
            raise ConfigError(f"configuration labels must differ, got {', '.join(labels)}")

    def with_overrides(self, requests: int | None = None, seed: int | None = None) -> "ComparisonSpec":
        workload = self.workload
        if requests is not None:
            workload = workload.replace(spec=workload.spec.with_overrides(num_requests=requests))
        if seed is not None:
            workload = workload.replace(seed=seed)
        return dataclasses.replace(self, workload=workload)


def engine_settings(variant: Variant, engine: Engine) -> dict:
    """The configuration as it ran: every default resolved against its model and hardware."""
    return {"backend": engine.runner.name, "model": engine.model.name, "hardware": engine.hardware.name,
            "memory_bytes": engine.hardware.memory_bytes, "weights": engine.model.weight_dtype,
            "output_tokens": variant.output_tokens, **engine.engine_settings()}


_QUALITY_CACHE: dict = {}
_REFERENCE_CACHE: dict = {}


@dataclass(frozen=True)
class QualityCost:
    """What a configuration's KV precision and weights cost against the model at full precision."""

    cost: float | None  # 1 - top-1 agreement; None where not measured
    note: str  # how it was obtained: "measured: ...", "exact: ...", "not measured: ..."
    perplexity: float | None = None  # on the English passages, where measured on them
    full_precision_perplexity: float | None = None


def _quality_known_without_measuring(engine: Engine) -> QualityCost | None:
    """measure_quality_cost's answer where it needs no measurement, else None."""
    if engine.runner.name != "real":
        return QualityCost(None, SIMULATED_QUALITY_NOTE)
    loaded = engine.runner.loaded
    kv_dtype, weight_dtype = engine.resolved.kv_cache_dtype, loaded.config.weight_dtype
    if loaded.quantization:
        if loaded.tokenizer is None:
            return QualityCost(None, f"not measured: {loaded.config.name} has no tokenizer to read the English "
                                     f"passages that {loaded.quantization} weights are measured on")
        return None
    if kv_dtype in (weight_dtype, "fp32"):
        return QualityCost(0.0, f"exact: the KV cache keeps the model's own {weight_dtype} values")
    if KV_CACHE_DTYPE_BYTES[kv_dtype] >= 2 and loaded.tokenizer is None:
        # A parity run costs seconds; a 16-bit cache is reported as exact (its top-1 agreement
        # is what `kvscope verify` checks), so only 8-bit caches pay for a measurement.
        return QualityCost(0.0, f"reported as exact: {kv_dtype} KV is 16-bit (not measured; `kvscope verify` "
                                "measures it)")
    return None


def kv_quality_is_measured(engine: Engine) -> bool:
    """Whether measure_quality_cost runs the model beside this engine (seconds: worth a status line)."""
    return _quality_known_without_measuring(engine) is None


def _full_precision_scores(loaded, device: str | None):
    """(passages, the unquantised model's scores on them), once per model and device."""
    from kvscope.app.lab.verify import quality

    key = (str(loaded.path), str(loaded.device))
    if key not in _REFERENCE_CACHE:
        full = loaded
        if loaded.quantization:
            from kvscope.app.lab.real_backend import load_for_real_backend

            full = next((m for m in _LOADED_MODELS.values() if m.path == loaded.path and m.device == loaded.device
                         and not m.quantization), None) or load_for_real_backend(model_path=str(loaded.path),
                                                                                  device=device)
        passages = quality.passage_token_ids(full, QUALITY_PASSAGES)
        _REFERENCE_CACHE[key] = passages, quality.score_full_precision(full, passages)
    return _REFERENCE_CACHE[key]


def measure_quality_cost(engine: Engine) -> QualityCost:
    """This engine's quality cost: measured for a narrowed KV cache or quantised weights, exact
    where the KV cache keeps the model's own values."""
    known = _quality_known_without_measuring(engine)
    if known is not None:
        return known
    loaded = engine.runner.loaded
    kv_dtype, weights = engine.resolved.kv_cache_dtype, loaded.quantization or loaded.config.weight_dtype
    key = (str(loaded.path), str(loaded.device), weights, kv_dtype)
    if key in _QUALITY_CACHE:
        return _QUALITY_CACHE[key]
    if loaded.tokenizer is None:
        from kvscope.app.lab.verify.parity import run_parity

        parity = run_parity(loaded, kv_dtype, num_prompts=QUALITY_PROMPTS, max_tokens=QUALITY_TOKENS)
        result = QualityCost(1.0 - parity.top1_agreement, (
            f"measured: top-1 agreement {parity.top1_agreement * 100:.1f} % with {loaded.config.weight_dtype} KV over "
            f"{parity.sequences} prompts x {QUALITY_TOKENS} tokens (transformers' generate() as reference)"))
    else:
        from kvscope.app.lab.verify.quality import measure_quality as measure_on_text

        passages, reference = _full_precision_scores(loaded, str(loaded.device))
        q = measure_on_text(loaded, kv_dtype, reference, passages)
        result = QualityCost(1.0 - q.top1_agreement, (
            f"measured: top-1 agreement {q.top1_agreement * 100:.1f} % and perplexity {q.perplexity:.2f} against the "
            f"full-precision model's {q.full_precision_perplexity:.2f}, on {q.passages} English passages "
            f"({q.tokens:,} tokens)"), q.perplexity, q.full_precision_perplexity)
    _QUALITY_CACHE[key] = result
    return result


@dataclass
class ConfigurationResult:
    label: str
    settings: dict
    metrics: dict  # Engine.summary(): the names `kvscope run --json` prints
    memory: dict  # the configuration's memory math (MEMORY_FIELDS)
    kv_quality_cost: float | None  # 1 - top-1 agreement with the model at full precision
    kv_quality_note: str
    ratios: dict = field(default_factory=dict)  # KEY_METRICS: this configuration's / the baseline's
    perplexity: float | None = None  # on English passages, where measured on them
    full_precision_perplexity: float | None = None

    @property
    def served(self) -> bool:
        """Whether it completed a request: one that served none measured no latency, rate or hit rate."""
        return bool(self.metrics.get("completed"))

    def value(self, name: str):
        """A metric, a memory-math quantity or the quality cost, by name."""
        if name in QUALITY_FIELDS:
            return getattr(self, name)
        if name in self.metrics:
            return self.metrics[name]
        if name in self.memory:
            return self.memory[name]
        raise KeyError(name)

    def to_dict(self) -> dict:
        return {
            "label": self.label, "settings": self.settings, **self.metrics, "memory": self.memory,
            "kv_quality_cost": self.kv_quality_cost, "kv_quality_note": self.kv_quality_note,
            "perplexity": self.perplexity, "full_precision_perplexity": self.full_precision_perplexity,
            "ratios": self.ratios,
        }

    def to_row(self) -> dict:
        # a setting named as a metric is a column of its own: the answer length each request was
        # given (output_tokens, a setting) was overwritten by the tokens the run generated in all
        row = {"label": self.label, **{f"setting_{k}" if k in self.metrics else k: v for k, v in self.settings.items()},
               **self.metrics}
        row.update({f"memory_{k}": v for k, v in self.memory.items()})
        row.update(kv_quality_cost=self.kv_quality_cost, kv_quality_note=self.kv_quality_note,
                   perplexity=self.perplexity, full_precision_perplexity=self.full_precision_perplexity)
        row.update({f"ratio_{k}": self.ratios.get(k) for k in KEY_METRICS})
        return row


def _ratio(value, base) -> float | None:
    if not isinstance(value, (int, float)) or not isinstance(base, (int, float)) or base == 0:
        return None
    if isinstance(value, bool) or not math.isfinite(value) or not math.isfinite(base):
        return None
    return value / base


@dataclass
class ComparisonResult:
    configurations: list  # of ConfigurationResult; the first is the baseline
    workload: dict
    title: str = ""
    wall_time_s: float = 0.0

    @property
    def baseline(self) -> ConfigurationResult:
        return self.configurations[0]

    @property
    def labels(self) -> list[str]:
        return [c.label for c in self.configurations]

    def __getitem__(self, label: str) -> ConfigurationResult:
        for config in self.configurations:
            if config.label == label:
                return config
        raise KeyError(f"no configuration {label!r}; known: {', '.join(self.labels)}")

    def ratio(self, name: str, numerator: str, denominator: str) -> float | None:
        return _ratio(self[numerator].value(name), self[denominator].value(name))

    def served_none(self, labels) -> str:
        """Which of these configurations completed no request, and the usual causes, in one clause."""
        idle = [label for label in dict.fromkeys(labels) if not self[label].served]
        names = ", ".join(f'"{label}"' for label in idle)
        return (f"{names} completed no request ({self[idle[0]].metrics.get('rejected', 0):,} rejected: prompt and "
                f"output longer than max_model_len, or needing more KV blocks than the pool holds)")

    def to_dict(self) -> dict:
        return {
            "title": self.title, "workload": self.workload, "baseline": self.baseline.label,
            "wall_time_s": self.wall_time_s, "configurations": [c.to_dict() for c in self.configurations],
        }

    def to_rows(self) -> list[dict]:
        return [c.to_row() for c in self.configurations]

    def to_csv(self) -> str:
        rows = self.to_rows()
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        return out.getvalue()


class Comparison:
    """One Engine per configuration, fed the identical requests, stepped on one clock.

    A window drives it step by step (`step`, `advance_to`) and draws `engines[i].snapshot()`
    side by side; `run` steps it to the end."""

    def __init__(self, spec: ComparisonSpec, requests: Sequence[RequestSpec] | None = None):
        self.spec = spec
        self.variants = list(spec.variants)
        self.engines = [_built(variant) for variant in self.variants]
        if requests is None:
            # token ids every configuration's model can embed
            vocab = min(engine.model.vocab_size for engine in self.engines)
            requests = spec.workload.requests(vocab)
        self.requests = list(requests)
        if not self.requests:
            raise ConfigError("a comparison needs at least one request")
        self.requests_by_label = {}
        for variant, engine in zip(self.variants, self.engines):
            own = self.requests
            if variant.output_tokens is not None:
                own = [dataclasses.replace(r, max_tokens=variant.output_tokens) for r in own]
            self.requests_by_label[variant.label] = own
            engine.add_workload(iter(own))
        self._finished = [False] * len(self.engines)
        self._quality: dict[int, QualityCost] = {}
        self._started = time.perf_counter()
        self.wall_time_s = 0.0

    @property
    def labels(self) -> list[str]:
        return [v.label for v in self.variants]

    @property
    def done(self) -> bool:
        return all(self._finished)

    @property
    def clock(self) -> float:
        """The shared clock: the engine clock of the configuration furthest behind."""
        behind = [e.clock for e, f in zip(self.engines, self._finished) if not f]
        return min(behind) if behind else max(e.clock for e in self.engines)

    def _advance(self, index: int, clock_s: float, out: list) -> None:
        engine = self.engines[index]
        while not self._finished[index] and engine.clock < clock_s:
            result = engine.step()
            if result is None:
                self._finished[index] = True
            else:
                out.append(result)

    def advance_to(self, clock_s: float) -> dict[str, list[StepResult]]:
        """Step every engine until its clock reaches clock_s (or it has nothing left)."""
        results = {label: [] for label in self.labels}
        for i, label in enumerate(self.labels):
            self._advance(i, clock_s, results[label])
        self.wall_time_s = time.perf_counter() - self._started
        return results

    def step(self, catch_up: bool = False) -> dict[str, list[StepResult]]:
        """The configuration furthest behind takes one step, so the clocks stay within a step of
        each other. Playing, that is one engine step a call: a window gets a frame between any two
        real steps (three real models' first prefills were 12 s without one). catch_up (a Step
        pressed by hand): the others then catch up to its new clock, so every column moves."""
        results = {label: [] for label in self.labels}
        pending = [i for i, f in enumerate(self._finished) if not f]
        if not pending:
            return results
        laggard = min(pending, key=lambda i: self.engines[i].clock)
        result = self.engines[laggard].step()
        if result is None:
            self._finished[laggard] = True
        else:
            results[self.labels[laggard]].append(result)
        if catch_up:
            target = self.engines[laggard].clock
            for i in pending:
                if i != laggard:
                    self._advance(i, target, results[self.labels[i]])
        self.wall_time_s = time.perf_counter() - self._started
        return results

    def run(self, progress: Callable[["Comparison"], None] | None = None) -> ComparisonResult:
        while not self.done:
            self.step()
            if progress is not None:
                progress(self)
        return self.results()

    def snapshots(self) -> list:
        return [engine.snapshot() for engine in self.engines]

    def results(self, measure_quality: bool = True) -> ComparisonResult:
        """The table so far (the final one once `done`). The KV quality cost runs a parity check
        on each real configuration with narrowed KV (a second or two each, then cached)."""
        configs = []
        for i, (variant, engine) in enumerate(zip(self.variants, self.engines)):
            if i not in self._quality and (measure_quality or engine.runner.name != "real"):
                self._quality[i] = measure_quality_cost(engine)
            quality = self._quality.get(i, QualityCost(None, "not measured yet"))
            memory = engine.plan.to_dict()
            configs.append(ConfigurationResult(
                label=variant.label, settings=engine_settings(variant, engine), metrics=engine.summary(),
                memory={k: memory[k] for k in MEMORY_FIELDS}, kv_quality_cost=quality.cost,
                kv_quality_note=quality.note, perplexity=quality.perplexity,
                full_precision_perplexity=quality.full_precision_perplexity,
            ))
        base = configs[0]
        for config in configs:
            config.ratios = {name: _ratio(config.value(name), base.value(name)) for name in KEY_METRICS}
        workload = {**self.spec.workload.describe(), "num_requests": len(self.requests),
                    "prompt_tokens": sum(len(r.prompt_token_ids) for r in self.requests),
                    "output_tokens": sum(r.max_tokens for r in self.requests)}
        return ComparisonResult(configs, workload, self.spec.title, self.wall_time_s)



def run_comparison(scenario_or_spec, requests: int | Sequence[RequestSpec] | None = None, seed: int | None = None,
                   progress: Callable[[Comparison], None] | None = None) -> ComparisonResult:
    """Run every configuration to the end on the identical workload.

    scenario_or_spec: a ComparisonSpec, or anything with a `comparison_spec(requests, seed)`
    method (a Scenario). requests: a number of requests in place of the workload's, or the
    request list itself."""
    explicit = None if requests is None or isinstance(requests, int) else list(requests)
    count = requests if isinstance(requests, int) else None
    if hasattr(scenario_or_spec, "comparison_spec"):
        spec = scenario_or_spec.comparison_spec(requests=count, seed=seed)
    else:
        spec = scenario_or_spec.with_overrides(requests=count, seed=seed)
    return Comparison(spec, explicit).run(progress)
