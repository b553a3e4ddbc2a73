"""What `kvscope attach --json` writes of an attachment (attachment.py), and the metric series' last
values it holds: plain functions of an Attachment's state, apart from the code that follows a server."""

from __future__ import annotations

import math

from kvscope.app.lab.vllm.metrics import EngineMetrics, latency_percentiles, prefix_cache_hit_rate

# What vLLM's events and metrics cannot tell, shown where the live run shows it.
UNAVAILABLE = {
    "block tables": "vLLM publishes block hashes, never block ids or which request holds a block: the cells are "
                    "placed by kvscope, and no request owns one",
    "requests": "vLLM publishes no per-request state: the requests table stays empty; the metrics count them",
    "batch timeline": "vLLM publishes no batch membership, refill or per-step timing",
    "frees": "a finished request's blocks stay cached and vLLM publishes nothing when it frees them or reuses "
             "a prefix: every stored block is drawn as cached until its BlockRemoved",
    "compute utilisation": "vLLM's metrics have no roofline figure",
}
QUANTILES = (0.5, 0.99)


def window_metrics(attachment) -> dict:
    """The metric series' last values, named as `kvscope run --json` names what means the same;
    counters are the server's totals, percentiles and the hit rate over the attached window."""
    last = attachment.last_metrics.total if attachment.last_metrics is not None else EngineMetrics()
    first = attachment.first_metrics
    # the observations between the first and the last scrape (latency_percentiles sees a restart)
    latency = latency_percentiles(first, last, QUANTILES) if first is not None and first is not last else {}
    names = {"time_to_first_token": "ttft", "inter_token_latency": "itl", "queue_time": "queue_time",
             "e2e_request_latency": "e2e_latency"}
    values = {
        "num_running": last.num_requests_running, "num_waiting": last.num_requests_waiting,
        "kv_usage": last.kv_cache_usage, "peak_running": attachment.peak_running,
        # no peak when no scrape had a usage (the server served none, or none in range)
        "peak_kv_usage": (attachment.peak_kv_usage if any(not math.isnan(p.kv_usage) for p in attachment.points)
                          else None),
        "preemptions": last.num_preemptions_total, "prompt_tokens": last.prompt_tokens_total,
        "output_tokens": last.generation_tokens_total,
        "prefix_cache_queries_tokens": last.prefix_cache_queries_total,
        "prefix_cache_hits_tokens": last.prefix_cache_hits_total,
        "prefix_cache_hit_rate": prefix_cache_hit_rate(None, last),
    }
    for figure, short in names.items():
        for q in QUANTILES:
            values[f"{short}_p{round(q * 100)}_s"] = latency.get(figure, {}).get(q)
    return values

def attach_report(attachment) -> dict:
    """What `kvscope attach --json` writes."""
    server, counts, following = attachment.server, attachment.counts, attachment.subscriber
    subscriber = following.counts if following else None
    map_counts = attachment.prefix_map.counts()
    report = {
        "server": server.url,
        "server_version": server.version,
        "model_names": list(server.model_names),
        "num_gpu_blocks": server.num_gpu_blocks,
        "block_size": server.block_size,
        "data_parallel_engines": len(server.engines),
        "duration_s": attachment.elapsed_s,
        "event_sources": following.sources if following else [],
        "streams": [{"source": s.source, "topic": s.topic, "data_parallel_rank": s.data_parallel_rank}
                    for s in (following.streams if following else [])],
        "events": dict(sorted(counts.events.items())),
        "blocks_stored": counts.blocks_stored,
        "blocks_removed": counts.blocks_removed,
        "batches": subscriber.batches if subscriber else 0,
        "batches_replayed": subscriber.replayed if subscriber else 0,
        "gaps": subscriber.gaps if subscriber else 0,
        "batches_lost": subscriber.missed if subscriber else 0,
        "restarts": subscriber.restarts if subscriber else 0,
        "decode_errors": subscriber.decode_errors if subscriber else 0,
        "duplicates": subscriber.duplicates if subscriber else 0,
        # what the subscriber's bounded queue most likely dropped (in batches_lost too, unless replayed)
        "batches_dropped_by_queue": following.overflow_batches if following else 0,
        "blocks_cached": map_counts.cached_blocks,
        "cells_placed": map_counts.placed_copies,
        "blocks_unplaced": map_counts.unplaced,
        "chains": map_counts.chains,
        "unknown_removals": map_counts.unknown_removals,
        "scrapes": counts.scrapes,
        "scrape_failures": counts.scrape_failures,
        "metric_restarts": counts.metric_restarts,
        "metrics": window_metrics(attachment),
        "metrics_note": "counters (preemptions, prompt_tokens, output_tokens, prefix_cache_*_tokens) are the "
                        "server's totals since it started; percentiles are of the histogram observations "
                        "between the first and the last scrape (null: none observed)",
        "prediction": [figure.as_dict() for figure in attachment.prediction + attachment.latency_prediction(math.inf)],
        "unavailable": UNAVAILABLE,
        "warning": attachment.no_events_reason,
        "warnings": list(attachment.warnings.values()),
    }
    return _finite(report)


def _finite(value):
    """A report with each NaN or infinity as None: JSON has no such numbers."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value
