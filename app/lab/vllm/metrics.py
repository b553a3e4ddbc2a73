"""A vLLM server's Prometheus /metrics, read into the series an attach window draws, and fetched.

vLLM (vllm/v1/metrics/loggers.py) labels each series with `model_name` and `engine` (the DP index).
ServerMetrics holds every engine apart and their total: counts and histograms summed, the KV cache
usage averaged (each engine has its own pool of the same size). Names changed across versions, so
each figure lists the names it is read from, newest first (`gpu_cache_usage_perc` and
`gpu_prefix_cache_*` up to 0.10, `time_per_output_token_seconds` before `inter_token_latency`).

Latency figures are histograms of everything since the server started. What happened lately is
the difference of two scrapes, bucket by bucket (histogram_delta), and its percentiles are
interpolated within a bucket as Prometheus's histogram_quantile does (histogram_quantile).
"""

from __future__ import annotations

import io
import math
import time
from dataclasses import dataclass, field, fields

from prometheus_client.parser import text_fd_to_metric_families

from kvscope.app.lab.bounded_reads import is_one_line, load_json
from kvscope.app.lab.vllm.http_fetch import (
    DEFAULT_TIMEOUT_S,
    MetricsError,
    ServerUnreachable,
    fetch_text,
    server_url,
    short_label,
)
from kvscope.engine.config import ConfigError

# The errors and server_url are the HTTP module's, named here too: callers catch them beside parse_metrics's.
__all__ = ["DEFAULT_TIMEOUT_S", "EngineMetrics", "Histogram", "MetricsError", "ServerMetrics", "ServerUnreachable",
           "counter_delta", "fetch_metrics", "fetch_text", "fetch_version", "histogram_delta", "histogram_quantile",
           "is_ascii_whole", "latency_percentiles", "parse_metrics", "prefix_cache_hit_rate", "restarted_between",
           "server_url"]

MAX_ENGINES = 1024  # DP engines one exposition may label (`kvscope attach --data-parallel-size` takes 256)
DEFAULT_QUANTILES = (0.5, 0.9, 0.99)
# A server's texts kvscope shows and records: each one printable line, few enough for a recording
MAX_VERSION_CHARS = 200
MAX_MODEL_NAME_CHARS = 512
MAX_MODEL_NAMES = 4096  # a base model and its LoRA adapters

# figure -> the sample names it is read from, newest first
SCALAR_SOURCES = {
    "num_requests_running": ("vllm:num_requests_running",),
    "num_requests_waiting": ("vllm:num_requests_waiting",),
    "kv_cache_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),  # fraction 0 - 1
    "num_preemptions_total": ("vllm:num_preemptions_total",),
    "prefix_cache_queries_total": ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
    "prefix_cache_hits_total": ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
    "prompt_tokens_total": ("vllm:prompt_tokens_total",),
    "generation_tokens_total": ("vllm:generation_tokens_total",),
}
HISTOGRAM_SOURCES = {  # all in seconds
    "time_to_first_token": ("vllm:time_to_first_token_seconds",),
    "inter_token_latency": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
    "queue_time": ("vllm:request_queue_time_seconds",),
    "e2e_request_latency": ("vllm:e2e_request_latency_seconds",),
}
CACHE_CONFIG_INFO = "vllm:cache_config_info"
_AVERAGED = {"kv_cache_usage"}
# What a sample may hold; one outside is ignored (the figure is then not served) and named in
# ServerMetrics.rejected: a fraction is 0 - 1, counts and counters are finite and never negative.
_FRACTION_SLACK = 1e-9  # float rounding of 1 - free / total
_RANGES = {"kv_cache_usage": (0.0, 1.0, "a fraction from 0 to 1")}
# whole, and at most a float's exact integers: preemptions 1e300 printed 301 digits, 3.5 was said as 4
_COUNT_RANGE = (0.0, float(2**53), "a whole count from 0 to 2^53")


@dataclass(frozen=True)
class Histogram:
    upper_bounds: tuple[float, ...]  # ascending, the last one +inf
    cumulative_counts: tuple[float, ...]  # observations <= each bound
    count: float
    sum: float
    created: float | None = None  # when the server made it (its `_created` sample): a new value is a restart

    def mean(self) -> float | None:
        return self.sum / self.count if self.count > 0 else None


@dataclass(frozen=True)
class EngineMetrics:
    """One engine's figures (or all engines' total); None where the server does not serve one."""

    num_requests_running: float | None = None
    num_requests_waiting: float | None = None
    kv_cache_usage: float | None = None  # fraction 0 - 1
    num_preemptions_total: float | None = None
    prefix_cache_queries_total: float | None = None  # tokens
    prefix_cache_hits_total: float | None = None  # tokens
    prompt_tokens_total: float | None = None
    generation_tokens_total: float | None = None
    time_to_first_token: Histogram | None = None
    inter_token_latency: Histogram | None = None
    queue_time: Histogram | None = None
    e2e_request_latency: Histogram | None = None
    created: float | None = None  # the earliest `_created` of its vllm: series: a new value is a restart


@dataclass(frozen=True)
class ServerMetrics:
    total: EngineMetrics
    engines: dict[str, EngineMetrics]  # by the `engine` label (the DP index)
    cache_config: dict[str, dict[str, str]] = field(default_factory=dict)  # engine -> cache_config_info labels
    model_names: tuple[str, ...] = ()
    rejected: tuple[str, ...] = ()  # samples ignored as out of range: "vllm:kv_cache_usage_perc -1e+308 (...)"

    @property
    def block_size(self) -> int | None:
        """Tokens per block, from cache_config_info."""
        return self._cache_config_int("block_size")

    @property
    def num_gpu_blocks(self) -> int | None:
        """Blocks in each engine's KV cache pool, from cache_config_info."""
        return self._cache_config_int("num_gpu_blocks")

    def _cache_config_int(self, name: str) -> int | None:
        value = self.cache_config_label(name)
        return int(value) if value is not None and is_ascii_whole(value) else None

    def cache_config_label(self, name: str) -> str | None:
        """A cache_config_info label as served (the first engine that has it), None when none has."""
        for labels in self.cache_config.values():
            if labels.get(name) is not None:
                return labels[name]
        return None


def is_ascii_whole(text: str) -> bool:
    """ASCII decimal digits only: "12", not "²", "١٢", "-12", "12.5" or "NaN" (str.isdigit takes the first two)."""
    return bool(text) and text.isascii() and text.isdigit()


# -- parsing ------------------------------------------------------------------------------------------


def parse_metrics(text: str, source: str = "the exposition", deadline: float | None = None,
                  timeout_s: float | None = None) -> ServerMetrics:
    """Read a Prometheus text exposition; `source` (a URL, a file) names it in error messages.
    deadline (time.monotonic()): MetricsError once it passes, saying the timeout_s it was given.

    The fetch is bounded by its deadline, the parse was not: the 16 MiB a fetch may bring took 7 s
    to parse (a 50 KB exposition takes milliseconds), and a scrape a second held the attach's
    frames that long each time."""
    too_slow = _TooSlow(source, len(text), timeout_s) if deadline is not None else None
    try:
        samples = [sample for family in text_fd_to_metric_families(_timed_lines(text, deadline, too_slow))
                   for sample in family.samples]
    except _TooSlow as exc:
        raise exc.error() from None
    except ValueError as exc:
        # the parser's message quotes the server's text: shortened and escaped
        raise MetricsError(f"{source} is not a Prometheus exposition: {short_label(exc, 200)}") from None
    by_name: dict[str, list] = {}
    for sample in samples:
        by_name.setdefault(sample.name, []).append(sample)
    rejected: list[str] = []
    _drop_repeats(by_name, rejected)
    if not any(name.startswith("vllm:") for name in by_name):
        raise MetricsError(f"{source} has no vllm: metric; is it a vLLM server's /metrics?")

    # each engine's samples gathered once: filtered from every sample per engine, 1,024 engines of
    # 150 series each (9 MB) took 38 s a scrape
    by_engine: dict[str, dict[str, list]] = {}
    for name, group in by_name.items():
        if name.startswith("vllm:"):
            for sample in group:
                by_engine.setdefault(sample.labels.get("engine", "0"), {}).setdefault(name, []).append(sample)
    if len(by_engine) > MAX_ENGINES:
        raise MetricsError(f"{source} names {len(by_engine):,} engines; a vLLM server has at most "
                           f"{MAX_ENGINES:,} (its data-parallel ranks)")
    engines = {engine: _engine_metrics(by_engine[engine], engine, rejected)
               for engine in sorted(by_engine, key=_engine_order)}
    cache_config = {s.labels.get("engine", "0"): {k: v for k, v in s.labels.items() if k != "engine"}
                    for s in by_name.get(CACHE_CONFIG_INFO, [])}
    model_names = tuple(sorted({s.labels["model_name"] for name, group in by_name.items() if name.startswith("vllm:")
                                for s in group if is_one_line(s.labels.get("model_name"), MAX_MODEL_NAME_CHARS)}))
    if len(model_names) > MAX_MODEL_NAMES:  # they only name the model: passed over, not kept by the thousand
        model_names = ()
    return ServerMetrics(_total(list(engines.values())), engines, cache_config, model_names, tuple(rejected))


class _TooSlow(Exception):
    """The parse passed its deadline (not a ValueError: the parser's own errors are those)."""

    def __init__(self, source: str, size: int, timeout_s: float | None):
        super().__init__(source)
        self.source, self.size, self.timeout_s = source, size, timeout_s

    def error(self) -> MetricsError:
        within = f"the {self.timeout_s:g} s timeout (--timeout)" if self.timeout_s is not None else "its deadline"
        return MetricsError(f"{self.source}: an exposition of {self.size:,} characters could not be read within "
                            f"{within}; a vLLM server's is about 50 KB (a longer --timeout reads a larger one)")


# About 0.1 s of parsing: an exposition of fewer lines (vLLM's has hundreds) is read whole however
# little of the deadline its fetch left, as before the parse had one.
_LINES_BETWEEN_CHECKS = 4096


def _timed_lines(text: str, deadline: float | None, too_slow: _TooSlow | None):
    lines = io.StringIO(text)
    if deadline is None:
        yield from lines
        return
    for number, line in enumerate(lines):
        if number and number % _LINES_BETWEEN_CHECKS == 0 and time.monotonic() > deadline:
            raise too_slow
        yield line


def _drop_repeats(by_name: dict[str, list], rejected: list[str]) -> None:
    """A vllm: series (its name and labels) given again: its first sample is kept, the rest named in
    `rejected`. An engine's samples are summed over the labels that set them apart (model names),
    so a repeat would be added in: 3 running requests shown as 6, a KV usage of 0.7 as 1."""
    for name, group in by_name.items():
        if not name.startswith("vllm:"):
            continue
        first: dict = {}
        for sample in group:
            key = tuple(sorted(sample.labels.items()))
            if key in first:
                shown = ",".join(f"{k}={short_label(v)}" for k, v in key if k != "engine")
                rejected.append(_rejected(name, sample.labels.get("engine", "0"), sample.value,
                                          f"{{{shown}}} given again, after {first[key].value:g}: the first kept"))
            else:
                first[key] = sample
        if len(first) < len(group):
            group[:] = first.values()


def _in_range(value: float, figure: str) -> bool:
    low, high, _ = _RANGES.get(figure, _COUNT_RANGE)
    slack = _FRACTION_SLACK if figure in _RANGES else 0.0
    return math.isfinite(value) and low - slack <= value <= high + slack and (figure in _RANGES or value == int(value))


def _rejected(name: str, engine: str, value, why: str) -> str:
    """A sample ignored, as the warning line names it: its labels (the server's text) short and escaped."""
    where = f"{{engine={short_label(engine)}}}" if engine != "0" else ""
    shown = f"{value:g}" if isinstance(value, float) else short_label(value)
    return f"{name}{where} {shown} ({why})"


def _engine_metrics(by_name: dict[str, list], engine: str, rejected: list[str]) -> EngineMetrics:
    """One engine's figures from its own samples (by_name holds only those labelled `engine`)."""
    values = {}
    for figure, names in SCALAR_SOURCES.items():
        for name in names:
            matching = [s.value for s in by_name.get(name, [])]
            if matching:
                bad = [v for v in matching if not _in_range(v, figure)]
                if bad:
                    rejected.append(_rejected(name, engine, bad[0], _RANGES.get(figure, _COUNT_RANGE)[2]))
                else:
                    total = float(sum(matching))
                    values[figure] = min(max(total, 0.0), 1.0) if figure in _RANGES else total
                break
    queries, hits = values.get("prefix_cache_queries_total"), values.get("prefix_cache_hits_total")
    if queries is not None and hits is not None and hits > queries:
        rejected.append(_rejected("prefix cache hits", engine, hits, f"more than the {queries:g} tokens queried"))
        del values["prefix_cache_queries_total"], values["prefix_cache_hits_total"]
    for figure, names in HISTOGRAM_SOURCES.items():
        for name in names:
            histogram = _histogram(by_name, name, engine, rejected)
            if histogram is not None:
                values[figure] = histogram
                break
    created = []
    for name, group in by_name.items():
        if name.startswith("vllm:") and name.endswith("_created"):
            for s in group:
                if math.isfinite(s.value) and s.value >= 0:
                    created.append(s.value)
                else:
                    rejected.append(_rejected(name, engine, s.value, "a creation time, finite and 0 or more"))
    return EngineMetrics(**values, created=min(created) if created else None)


def _histogram(by_name: dict[str, list], name: str, engine: str, rejected: list[str]) -> Histogram | None:
    """One engine's histogram; None when it is not served, or (named in `rejected`) when a bucket
    bound, a count or the sum is not a number one can hold."""
    buckets: dict[float, float] = {}
    for sample in by_name.get(f"{name}_bucket", []):
        try:
            bound = float(sample.labels["le"])
        except (KeyError, ValueError):
            rejected.append(_rejected(f"{name}_bucket", engine, sample.labels.get("le"), "its le is not a bound"))
            return None
        if not bound >= 0:  # NaN too: a latency bound is seconds
            rejected.append(_rejected(f"{name}_bucket", engine, sample.labels["le"], "its le is not seconds"))
            return None
        if not _in_range(sample.value, "bucket"):  # a count of observations, as the message says
            rejected.append(_rejected(f"{name}_bucket{{le={sample.labels['le']}}}", engine, sample.value,
                                      _COUNT_RANGE[2]))
            return None
        buckets[bound] = buckets.get(bound, 0.0) + sample.value
    if not buckets:
        return None

    def summed(suffix):
        return float(sum(s.value for s in by_name.get(f"{name}{suffix}", [])))

    count, total = summed("_count"), summed("_sum")
    for suffix, value, fits, what in (("_count", count, _in_range(count, "count"), _COUNT_RANGE[2]),
                                      ("_sum", total, math.isfinite(total) and total >= 0, "finite and 0 or more")):
        if not fits:
            rejected.append(_rejected(f"{name}{suffix}", engine, value, what))
            return None
    bounds = sorted(buckets)
    counts = tuple(buckets[b] for b in bounds)
    if any(later < earlier for earlier, later in zip(counts, counts[1:])):
        rejected.append(_rejected(f"{name}_bucket", engine, "counts", "they go down from one bound to the next"))
        return None
    created = [s.value for s in by_name.get(f"{name}_created", []) if math.isfinite(s.value) and s.value >= 0]
    return Histogram(tuple(bounds), counts, count, total, min(created) if created else None)


def _total(engines: list[EngineMetrics]) -> EngineMetrics:
    if len(engines) == 1:
        return engines[0]
    values = {}
    for f in fields(EngineMetrics):
        present = [getattr(e, f.name) for e in engines if getattr(e, f.name) is not None]
        if not present:
            continue
        if isinstance(present[0], Histogram):
            values[f.name] = _sum_histograms(present)
        elif f.name == "created":
            values[f.name] = max(present)  # any engine restarting restarts the total
        else:
            values[f.name] = sum(present) / len(present) if f.name in _AVERAGED else sum(present)
    return EngineMetrics(**values)


def _sum_histograms(histograms: list[Histogram]) -> Histogram:
    buckets: dict[float, float] = {}
    for histogram in histograms:
        for bound, count in zip(histogram.upper_bounds, histogram.cumulative_counts):
            buckets[bound] = buckets.get(bound, 0.0) + count
    bounds = sorted(buckets)
    created = [h.created for h in histograms if h.created is not None]
    return Histogram(tuple(bounds), tuple(buckets[b] for b in bounds), sum(h.count for h in histograms),
                     sum(h.sum for h in histograms), max(created) if created else None)


def _engine_order(engine: str):
    """Numbered engines in numeric order, compared as text (int() refuses more than 4,300 digits)."""
    digits = engine.lstrip("0") or "0"
    return (0, len(digits), digits, engine) if is_ascii_whole(engine) else (1, 0, engine, engine)


# -- between two scrapes ------------------------------------------------------------------------------


def restarted_between(before: EngineMetrics, after: EngineMetrics) -> bool:
    """Whether the server restarted between two scrapes: its series were created anew, or a counter
    went down."""
    if before.created != after.created:
        return True
    return any(getattr(after, name) < getattr(before, name) for name in SCALAR_SOURCES
               if name.endswith("_total") and getattr(after, name) is not None and getattr(before, name) is not None)


def counter_delta(before: float | None, after: float | None) -> float | None:
    """What a counter counted between two scrapes; a counter that went down was reset by a restart,
    so everything it holds now came after."""
    if after is None:
        return None
    if before is None or after < before:
        return after
    return after - before


def histogram_delta(before: Histogram | None, after: Histogram) -> Histogram:
    """The observations between two scrapes, bucket by bucket. A restart in between (a new creation
    time, or a count that went down) means all of `after` came since."""
    if (before is None or before.upper_bounds != after.upper_bounds or after.count < before.count
            or before.created != after.created):
        return after
    counts = tuple(a - b for a, b in zip(after.cumulative_counts, before.cumulative_counts))
    if any(c < 0 for c in counts):
        return after
    return Histogram(after.upper_bounds, counts, after.count - before.count, after.sum - before.sum, after.created)


def histogram_quantile(histogram: Histogram | None, quantile: float) -> float | None:
    """The q-quantile, interpolated linearly within its bucket as Prometheus does; one in the +Inf
    bucket is reported as the highest finite bound. None when nothing was observed."""
    if histogram is None or not 0.0 <= quantile <= 1.0:
        return None
    total = histogram.cumulative_counts[-1] if histogram.cumulative_counts else 0.0
    if total <= 0:
        return None
    rank = quantile * total
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in zip(histogram.upper_bounds, histogram.cumulative_counts):
        if count >= rank and count > lower_count:
            if math.isinf(bound):
                return lower_bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (count - lower_count)
        lower_bound, lower_count = bound, count
    return lower_bound


def latency_percentiles(before: EngineMetrics | None, after: EngineMetrics,
                        quantiles=DEFAULT_QUANTILES) -> dict[str, dict[float, float | None]]:
    """Seconds, per latency histogram and quantile, of what happened between two scrapes
    (before None: since the server started)."""
    if before is not None and restarted_between(before, after):
        before = None
    result = {}
    for figure in HISTOGRAM_SOURCES:
        now = getattr(after, figure)
        delta = None if now is None else histogram_delta(None if before is None else getattr(before, figure), now)
        result[figure] = {q: histogram_quantile(delta, q) for q in quantiles}
    return result


def prefix_cache_hit_rate(before: EngineMetrics | None, after: EngineMetrics) -> float | None:
    """Hit tokens over queried tokens between two scrapes (before None: since the server started)."""
    if before is not None and restarted_between(before, after):
        before = None
    queries = counter_delta(None if before is None else before.prefix_cache_queries_total,
                            after.prefix_cache_queries_total)
    hits = counter_delta(None if before is None else before.prefix_cache_hits_total, after.prefix_cache_hits_total)
    if not queries or hits is None:
        return None
    return hits / queries


def fetch_metrics(address: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> ServerMetrics:
    """The server's metrics, fetched and parsed within timeout_s for both together."""
    url = f"{server_url(address)}/metrics"
    deadline = time.monotonic() + timeout_s
    return parse_metrics(fetch_text(url, timeout_s), source=url, deadline=deadline, timeout_s=timeout_s)


def fetch_version(address: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> str:
    """The server's vLLM version, from GET /version ({"version": "0.33.0"})."""
    url = f"{server_url(address)}/version"
    text = fetch_text(url, timeout_s)
    try:
        version = load_json(text, url)["version"]
        if not isinstance(version, str):
            raise TypeError(version)
    except (ConfigError, KeyError, TypeError):  # ConfigError: not JSON, or JSON nested thousands deep
        raise MetricsError(f"{url} did not answer {{\"version\": ...}}: {text[:80]!r}") from None
    if not is_one_line(version, MAX_VERSION_CHARS):  # printed and recorded: a newline or ESC would be too
        raise MetricsError(f"{url} answered version {version[:60]!r}{'...' if len(version) > 60 else ''} "
                           f"({len(version):,} characters), not one line of at most {MAX_VERSION_CHARS} printable "
                           "characters as vLLM's (\"0.32.0\")")
    return version
