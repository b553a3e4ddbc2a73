"""Serving metrics as dashboards name them: TTFT, time per output token, queue time, throughput,
KV cache usage, prefix cache hit rate, preemptions, fragmentation."""

from __future__ import annotations

import numpy as np

from kvscope.engine.request import Request


def percentile(values, q: float) -> float | None:
    """The q-th percentile of a list or array; None when there is nothing to take it of."""
    return float(np.percentile(values, q)) if len(values) else None


class _ArrayOfList:
    """A float array that follows a list only ever appended to, converting just the new items:
    the window asks for a summary every half second, and converting every finished request's
    latency again each time grew to tens of milliseconds an hour into a run."""

    __slots__ = ("buffer", "size")

    def __init__(self):
        self.buffer = np.empty(1024)
        self.size = 0

    def of(self, values: list) -> np.ndarray:
        if len(values) < self.size:  # not the list this followed: start again
            self.size = 0
        new = len(values) - self.size
        if new:
            if len(values) > len(self.buffer):
                grown = np.empty(max(2 * len(self.buffer), len(values)))
                grown[:self.size] = self.buffer[:self.size]
                self.buffer = grown
            self.buffer[self.size:len(values)] = values[self.size:]
            self.size = len(values)
        return self.buffer[:self.size]


class MetricsCollector:
    def __init__(self):
        self.completed = 0
        self.rejected = 0
        self.first_rejection: str | None = None  # "request 3: <the engine's reason>", for a user asking why
        self.preemptions = 0
        self.prompt_tokens = 0  # of completed requests
        self.output_tokens = 0  # generated, over completed requests
        self.first_arrival: float | None = None
        self.last_finish = self.last_arrival = 0.0  # the run lasts till both: a rejection ends at its arrival
        self.ttft: list[float] = []
        self.queue_time: list[float] = []
        self.e2e: list[float] = []
        self.tpot: list[float] = []
        self.finish_times: list[float] = []  # aligned with ttft, e2e and queue_time
        self.steps = 0
        self.sampled_tokens = 0  # every token sampled, finished requests or not
        self.busy_time = 0.0  # virtual seconds the device spent in steps
        self.compute_time = 0.0  # of which the compute-bound floor
        self.peak_kv_usage = 0.0
        self.peak_running = 0
        self.kv_usage_time = 0.0  # integral of usage over busy time, for the mean
        self.fragmentation_time = 0.0  # integral of unused/allocated slots over busy time
        # A request already generating gets its next token at the end of each step it is in, so
        # the longest step that carried decode tokens is the longest wait between two of a
        # request's consecutive tokens: the stall a long unchunked prompt causes.
        self.itl_max: float | None = None
        self._arrays = {name: _ArrayOfList() for name in ("ttft", "tpot", "e2e", "queue_time")}

    def _p50_p99(self, name: str) -> tuple[float | None, float | None]:
        values = self._arrays[name].of(getattr(self, name))
        if not len(values):
            return None, None
        return tuple(float(v) for v in np.percentile(values, (50, 99)))

    def on_arrival(self, time_s: float) -> None:
        self.first_arrival = time_s if self.first_arrival is None else self.first_arrival
        self.last_arrival = max(self.last_arrival, time_s)

    def on_step(self, duration: float, compute: float, kv_usage: float, running: int,
                unused_slots: int, allocated_slots: int, decode_tokens: int = 0, sampled_tokens: int = 0) -> None:
        self.steps += 1
        self.sampled_tokens += sampled_tokens
        if decode_tokens and (self.itl_max is None or duration > self.itl_max):
            self.itl_max = duration
        self.busy_time += duration
        self.compute_time += compute
        if kv_usage > self.peak_kv_usage:
            self.peak_kv_usage = kv_usage
        if running > self.peak_running:
            self.peak_running = running
        self.kv_usage_time += kv_usage * duration
        if allocated_slots:
            self.fragmentation_time += unused_slots / allocated_slots * duration

    def on_finish(self, req: Request) -> None:
        self.completed += 1
        self.prompt_tokens += req.num_prompt_tokens
        outputs = req.num_output_tokens
        self.output_tokens += outputs
        self.last_finish = max(self.last_finish, req.finish_time)
        ttft = req.first_token_time - req.arrival_time
        e2e = req.finish_time - req.arrival_time
        self.ttft.append(ttft)
        self.finish_times.append(req.finish_time)
        self.e2e.append(e2e)
        self.queue_time.append(req.first_scheduled_time - req.arrival_time)
        if outputs > 1:
            self.tpot.append((req.finish_time - req.first_token_time) / (outputs - 1))

    def summary(self, prefix_queried_tokens: int = 0, prefix_hit_tokens: int = 0) -> dict:
        span = max(self.last_finish, self.last_arrival) - (self.first_arrival or 0.0)
        busy = self.busy_time or float("nan")
        ttft, tpot, e2e, queue_time = (self._p50_p99(name) for name in ("ttft", "tpot", "e2e", "queue_time"))
        return {
            "completed": self.completed,
            "rejected": self.rejected,
            "preemptions": self.preemptions,
            "steps": self.steps,
            "duration_s": span,
            "prompt_tokens": self.prompt_tokens,
            "output_tokens": self.output_tokens,
            "throughput_tokens_per_s": self.output_tokens / span if span > 0 else 0.0,
            "total_throughput_tokens_per_s": (self.prompt_tokens + self.output_tokens) / span if span > 0 else 0.0,
            "requests_per_s": self.completed / span if span > 0 else 0.0,
            "ttft_p50_s": ttft[0],
            "ttft_p99_s": ttft[1],
            "tpot_p50_s": tpot[0],
            "tpot_p99_s": tpot[1],
            "tpot_requests": len(self.tpot),  # of 2 tokens or more: one token has no time between tokens
            "itl_max_s": self.itl_max,
            "e2e_latency_p50_s": e2e[0],
            "e2e_latency_p99_s": e2e[1],
            "queue_time_p50_s": queue_time[0],
            "queue_time_p99_s": queue_time[1],
            "peak_kv_usage": self.peak_kv_usage,
            "mean_kv_usage": self.kv_usage_time / busy if self.busy_time else 0.0,
            "peak_running": self.peak_running,
            "prefix_cache_hit_rate": prefix_hit_tokens / prefix_queried_tokens if prefix_queried_tokens else 0.0,
            "mean_fragmentation": self.fragmentation_time / busy if self.busy_time else 0.0,
            "compute_utilization": self.compute_time / busy if self.busy_time else 0.0,
            "busy_time_s": self.busy_time,
        }
