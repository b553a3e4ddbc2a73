"""One scrape of a vLLM server's /metrics as the attachment keeps it: the gauges at that moment,
the counters and latency histograms over the interval since the scrape before."""

from __future__ import annotations

from dataclasses import dataclass

from kvscope.app.lab.vllm.metrics import EngineMetrics, histogram_delta


@dataclass(frozen=True)
class ObservedPoint:
    """One scrape: the gauges now, the counters and histograms since the previous scrape."""

    time_s: float  # seconds since attaching
    kv_usage: float  # 0 - 1, averaged over DP engines
    num_running: float
    num_waiting: float
    preemptions: float  # since the previous scrape
    prompt_tokens: float
    generation_tokens: float
    interval_s: float  # since the previous scrape (0 for the first)
    prefix_cache_hit_rate: float  # NaN when nothing was queried
    ttft_p50_s: float
    ttft_p99_s: float
    itl_p50_s: float
    itl_p99_s: float
    queue_time_p50_s: float
    queue_time_p99_s: float
    cached_blocks: int  # placed in the map (events), for the memory bar beside kv_usage
    # the histograms' observations since the previous scrape: counts and sums (seconds), for means
    ttft_count: float = 0.0
    ttft_sum_s: float = 0.0
    itl_count: float = 0.0
    itl_sum_s: float = 0.0
    queue_time_count: float = 0.0
    queue_time_sum_s: float = 0.0


def nan_if_none(value) -> float:
    return float("nan") if value is None else float(value)


_SUMMED = {"ttft": "time_to_first_token", "itl": "inter_token_latency", "queue_time": "queue_time"}


def histogram_sums(before: EngineMetrics | None, after: EngineMetrics) -> dict:
    """Each latency histogram's count and sum of the observations between two scrapes."""
    out = {}
    for short, figure in _SUMMED.items():
        now = getattr(after, figure)
        # the first scrape has no window before it; a restart in between makes `now` all new (histogram_delta)
        delta = None if now is None or before is None else histogram_delta(getattr(before, figure), now)
        out[f"{short}_count"] = delta.count if delta is not None else 0.0
        out[f"{short}_sum_s"] = delta.sum if delta is not None else 0.0
    return out
