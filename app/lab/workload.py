"""Workloads: when requests arrive, how long their prompts are, how much they generate.

A workload is either synthetic (an arrival rate and length distributions, optionally a shared
system prompt) or a trace replay (arrival times and lengths read from a CSV such as the Azure
LLM inference trace). Either way it yields RequestSpecs lazily, in arrival order, with
deterministic synthetic token ids for a given seed.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Iterator

import numpy as np

from kvscope.engine.config import ConfigError
from kvscope.engine.request import RequestSpec

DIST_KINDS = ("constant", "uniform", "lognormal")


@dataclass(frozen=True)
class LengthDist:
    """A token-length distribution: constant(value), uniform(min, max) or lognormal(median, sigma)."""

    dist: str = "constant"
    value: int = 0
    min: int = 1
    max: int = 1_000_000
    median: float = 0.0
    sigma: float = 0.0

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.dist == "constant":
            out = np.full(n, self.value, dtype=np.int64)
        elif self.dist == "uniform":
            out = rng.integers(self.min, self.max + 1, size=n)
        else:
            out = np.rint(rng.lognormal(math.log(self.median), self.sigma, size=n)).astype(np.int64)
        return np.clip(out, self.min, self.max)



def dist_from_dict(data, label: str) -> LengthDist:
    if isinstance(data, int) and not isinstance(data, bool):
        data = {"dist": "constant", "value": data}
    if not isinstance(data, dict):
        raise ConfigError(f"{label}: expected a table like {{ dist = \"lognormal\", median = 512, sigma = 0.8 }}")
    unknown = set(data) - {"dist", "value", "min", "max", "median", "sigma"}
    if unknown:
        raise ConfigError(f"{label}: unknown field(s) {', '.join(sorted(unknown))}")
    kind = data.get("dist", "constant")
    if kind not in DIST_KINDS:
        raise ConfigError(f"{label}: dist must be one of {', '.join(DIST_KINDS)}, got {kind!r}")
    values = {}
    for key in ("value", "min", "max", "median", "sigma"):
        if key in data:
            v = data[key]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ConfigError(f"{label}: {key} must be a number, got {v!r}")
            values[key] = v
    lo, hi = int(values.get("min", 1)), int(values.get("max", 1_000_000))
    if lo < 1 or hi < lo:
        raise ConfigError(f"{label}: need 1 <= min <= max, got min {lo}, max {hi}")
    if kind == "constant":
        value = values.get("value", 0)
        if value < 1 or value != int(value):
            raise ConfigError(f"{label}: constant value must be a whole number >= 1, got {value}")
        return LengthDist("constant", value=int(value), min=max(lo, 1), max=max(hi, int(value)))
    if kind == "uniform":
        return LengthDist("uniform", min=lo, max=hi)
    median, sigma = values.get("median", 0), values.get("sigma", -1)
    if median <= 0 or sigma < 0:
        raise ConfigError(f"{label}: lognormal needs median > 0 and sigma >= 0")
    return LengthDist("lognormal", min=lo, max=hi, median=float(median), sigma=float(sigma))


@dataclass(frozen=True)
class TraceRow:
    arrival_time_s: float
    prompt_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class WorkloadSpec:
    name: str
    description: str = ""
    source: str = ""
    num_requests: int = 1000
    # Poisson arrivals at this many requests per second; 0 means all arrive at once (offline batch).
    arrival_rate_per_s: float = 0.0
    prompt_tokens: LengthDist = field(default_factory=lambda: LengthDist("constant", value=128))
    output_tokens: LengthDist = field(default_factory=lambda: LengthDist("constant", value=128))
    # A share of requests start with one of a few common system prompts of this many tokens.
    shared_prefix_fraction: float = 0.0
    shared_prefix_tokens: int = 0
    num_shared_prefixes: int = 1
    trace_path: str | None = None
    trace_speedup: float = 1.0  # replay a trace this many times faster than it was recorded

    def with_overrides(self, **changes) -> "WorkloadSpec":
        import dataclasses

        changes = {k: v for k, v in changes.items() if v is not None}
        spec = dataclasses.replace(self, **changes)
        _validate(spec, f"workload {spec.name}")
        return spec



MAX_REQUESTS = 10_000_000


def _validate(spec: WorkloadSpec, label: str) -> None:
    if spec.num_requests < 1:
        raise ConfigError(f"{label}: num_requests must be at least 1, got {spec.num_requests}")
    if spec.num_requests > MAX_REQUESTS and spec.trace_path is None:
        raise ConfigError(f"{label}: num_requests must be at most {MAX_REQUESTS:,}, got {spec.num_requests:,}")
    if spec.arrival_rate_per_s < 0 or not math.isfinite(spec.arrival_rate_per_s):
        raise ConfigError(f"{label}: arrival_rate_per_s must be 0 (all at once) or more, got {spec.arrival_rate_per_s}")
    if not 0 <= spec.shared_prefix_fraction <= 1:
        raise ConfigError(f"{label}: shared_prefix_fraction must be between 0 and 1")
    if spec.shared_prefix_fraction > 0 and spec.shared_prefix_tokens < 1:
        raise ConfigError(f"{label}: shared_prefix_tokens must be at least 1 when a share of requests use one")
    if spec.num_shared_prefixes < 1:
        raise ConfigError(f"{label}: num_shared_prefixes must be at least 1")
    if spec.trace_speedup <= 0 or not math.isfinite(spec.trace_speedup):
        raise ConfigError(f"{label}: trace_speedup must be greater than 0, got {spec.trace_speedup}")


_WORKLOAD_KEYS = {
    "name", "description", "source", "num_requests", "arrival_rate_per_s", "prompt_tokens", "output_tokens",
    "shared_prefix_fraction", "shared_prefix_tokens", "num_shared_prefixes", "trace", "trace_speedup",
}


def workload_from_dict(data: dict, label: str, trace_dir=None) -> WorkloadSpec:
    unknown = set(data) - _WORKLOAD_KEYS
    if unknown:
        raise ConfigError(f"{label}: unknown field(s) {', '.join(sorted(unknown))}")
    if "name" not in data:
        raise ConfigError(f"{label}: missing field name")
    kwargs = {k: data[k] for k in ("name", "description", "source") if k in data}
    for key, cast in (
        ("num_requests", int),
        ("arrival_rate_per_s", float),
        ("shared_prefix_fraction", float),
        ("shared_prefix_tokens", int),
        ("num_shared_prefixes", int),
        ("trace_speedup", float),
    ):
        if key in data:
            value = data[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ConfigError(f"{label}: {key} must be a number, got {value!r}")
            kwargs[key] = cast(value)
    for key in ("prompt_tokens", "output_tokens"):
        if key in data:
            kwargs[key] = dist_from_dict(data[key], f"{label}: {key}")
    if "trace" in data:
        trace = data["trace"]
        kwargs["trace_path"] = str(trace_dir / trace) if trace_dir is not None else str(trace)
    spec = WorkloadSpec(**kwargs)
    _validate(spec, label)
    return spec


def _parse_timestamp(text: str) -> float:
    """Seconds as a number, or an ISO date-time whose fraction may carry more than 6 digits."""
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    whole, _, fraction = text.partition(".")
    base = datetime.fromisoformat(whole)
    return base.timestamp() + (float("0." + fraction) if fraction else 0.0)


_COLUMN_NAMES = {
    "arrival": ("TIMESTAMP", "timestamp", "arrival_time_s"),
    "prompt": ("ContextTokens", "prompt_tokens", "input_tokens"),
    "output": ("GeneratedTokens", "output_tokens"),
}


def read_trace(path: str | Path, limit: int | None = None) -> list[TraceRow]:
    """Rows of a trace CSV, arrival times relative to the first row. Errors name the line."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"trace {path}: is a folder, not a CSV file")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"trace {path}: cannot read: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ConfigError(f"trace {path} line {line}: not UTF-8 text") from None
    return _read_trace_rows(path, io.StringIO(text, newline=""), limit)


def _read_trace_rows(path: Path, handle, limit: int | None) -> list[TraceRow]:
    rows: list[TraceRow] = []
    reader = csv.reader(handle)
    header = next(reader, None)
    if header is None:
        raise ConfigError(f"trace {path}: the file is empty")
    columns = {}
    for role, names in _COLUMN_NAMES.items():
        found = [i for i, h in enumerate(header) if h.strip() in names]
        if not found:
            raise ConfigError(
                f"trace {path} line 1: no {role} column; expected one of {', '.join(names)}"
            )
        columns[role] = found[0]
    start = previous = None
    for line_no, row in enumerate(reader, start=2):
        if limit is not None and len(rows) >= limit:
            break
        if not row or all(not c.strip() for c in row):
            continue
        try:
            arrival = _parse_timestamp(row[columns["arrival"]])
            prompt = int(row[columns["prompt"]])
            output = int(row[columns["output"]])
        except (ValueError, IndexError, OverflowError):
            raise ConfigError(f"trace {path} line {line_no}: cannot read row {','.join(row)!r}") from None
        if not math.isfinite(arrival):
            raise ConfigError(f"trace {path} line {line_no}: arrival time {row[columns['arrival']]!r} is not a finite time")
        if prompt < 1 or output < 1:
            raise ConfigError(
                f"trace {path} line {line_no}: token counts must be at least 1, got {prompt} and {output}"
            )
        if start is None:
            start = previous = arrival
        if arrival < previous:
            raise ConfigError(f"trace {path} line {line_no}: arrival time goes backwards (rows must be in arrival order)")
        previous = arrival
        rows.append(TraceRow(arrival - start, prompt, output))
    if not rows:
        raise ConfigError(f"trace {path}: no requests in the file")
    return rows


def generate_requests(spec: WorkloadSpec, vocab_size: int, seed: int = 0) -> Iterator[RequestSpec]:
    """The workload's requests in arrival order, with synthetic token ids that depend only on seed."""
    rng = np.random.default_rng(seed)
    if spec.trace_path is not None:
        rows = read_trace(spec.trace_path, limit=spec.num_requests)
        arrivals = np.array([r.arrival_time_s for r in rows]) / spec.trace_speedup
        prompts = np.array([r.prompt_tokens for r in rows])
        outputs = np.array([r.output_tokens for r in rows])
    else:
        n = spec.num_requests
        if spec.arrival_rate_per_s > 0:
            arrivals = np.cumsum(rng.exponential(1.0 / spec.arrival_rate_per_s, size=n))
            arrivals -= arrivals[0]
        else:
            arrivals = np.zeros(n)
        prompts = spec.prompt_tokens.sample(rng, n)
        outputs = spec.output_tokens.sample(rng, n)
    n = len(arrivals)
    uses_prefix = rng.random(n) < spec.shared_prefix_fraction
    prefix_choice = rng.integers(0, spec.num_shared_prefixes, size=n)
    prefix_rng = np.random.default_rng([seed, 1])
    prefixes = [
        prefix_rng.integers(0, vocab_size, size=spec.shared_prefix_tokens).tolist()
        for _ in range(spec.num_shared_prefixes if spec.shared_prefix_fraction > 0 else 0)
    ]
    token_rng = np.random.default_rng([seed, 2])
    for i in range(n):
        prompt_len = int(prompts[i])
        prefix = prefixes[prefix_choice[i]] if uses_prefix[i] else []
        unique = max(1, prompt_len - len(prefix))
        tokens = prefix + token_rng.integers(0, vocab_size, size=unique).tolist()
        yield RequestSpec(i, float(arrivals[i]), tokens, int(outputs[i]), len(prefix))
