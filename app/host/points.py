"""Plot points: the one format in which the live run, a replay and a comparison hand the window
their time series.

A frame carries its points as one numpy record array of POINT_DTYPE (one row per point, a
column per field): it crosses the pipe as a single buffer, however many points a fast run made,
and the window reads a column by name. Each point is the state after a step and what happened
since the previous point of the same run, so points may be thinned (the live run keeps one per
2 ms of wall time) without losing a token or a preemption.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class SeriesPoint(NamedTuple):
    """One point, as the producers build it before a frame packs them (see point_array)."""

    time_s: float  # engine clock at the end of the step
    kv_usage: float  # share of the KV blocks held by requests, 0..1
    num_running: int
    num_waiting: int
    output_tokens: int  # since the previous point
    compute_utilization: float  # compute-bound time / step time, since the previous point (0..1)
    preemptions: int  # since the previous point


POINT_FIELDS = SeriesPoint._fields
POINT_DTYPE = np.dtype([("time_s", np.float64), ("kv_usage", np.float64), ("num_running", np.int64),
                        ("num_waiting", np.int64), ("output_tokens", np.int64),
                        ("compute_utilization", np.float64), ("preemptions", np.int64)])
assert POINT_DTYPE.names == POINT_FIELDS


def point_array(points=()) -> np.ndarray:
    """Points (SeriesPoints, plain tuples in POINT_FIELDS order, or a record array already) as one
    record array of POINT_DTYPE."""
    if isinstance(points, np.ndarray) and points.dtype == POINT_DTYPE:
        return points
    return np.array([tuple(p) for p in points], dtype=POINT_DTYPE)


def step_point(result, output_tokens: int, compute_s: float, busy_s: float, preemptions: int) -> SeriesPoint:
    """The point after a step (an engine StepResult), with the output tokens, compute-bound
    seconds, busy seconds and preemptions counted since the previous point."""
    return SeriesPoint(result.start_time_s + result.duration_s, result.kv_usage, result.num_running,
                       result.num_waiting, output_tokens, compute_s / busy_s if busy_s > 0 else 0.0, preemptions)
