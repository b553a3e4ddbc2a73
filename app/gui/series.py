"""The run's time series, grown frame by frame from the session's plot points, as the live plots
want them: numpy arrays keyed by name."""

from __future__ import annotations

import numpy as np

from kvscope.app.host.points import POINT_FIELDS, point_array

THROUGHPUT_WINDOW_S = 1.0  # output tokens per second over the last second of engine time

STEP_KEYS = POINT_FIELDS  # preemptions summed since the start, output tokens per point
FINISH_KEYS = ("finish_time_s",)  # per finished request
# per request, from its first token on: the latency plot draws a TTFT while its request still runs
FIRST_TOKEN_KEYS = ("first_token_time_s", "ttft_s", "queue_time_s")


class _Growing:
    """A float64 array with amortised appends."""

    def __init__(self):
        self.data = np.zeros(1024)
        self.size = 0

    def extend(self, values) -> None:
        values = np.asarray(values, dtype=np.float64)
        need = self.size + len(values)
        if need > len(self.data):
            grown = np.zeros(max(need, 2 * len(self.data)))
            grown[: self.size] = self.data[: self.size]
            self.data = grown
        self.data[self.size:need] = values
        self.size = need

    def view(self) -> np.ndarray:
        return self.data[: self.size]


class RunSeries:
    def __init__(self):
        self.columns = {key: _Growing() for key in (*STEP_KEYS, *FINISH_KEYS, *FIRST_TOKEN_KEYS,
                                                    "cumulative_output", "throughput_tokens_per_s")}
        self.total_output = 0
        self.total_preemptions = 0

    def add_points(self, points) -> None:
        """Plot points from a frame (host/points.py: a POINT_DTYPE array, or SeriesPoints): one per
        step, or fewer when steps come faster than they can be drawn."""
        points = point_array(points)
        c = self.columns
        for key in ("time_s", "kv_usage", "num_running", "num_waiting", "compute_utilization"):
            c[key].extend(points[key])
        outputs = points["output_tokens"].astype(np.float64)
        c["output_tokens"].extend(outputs)
        c["cumulative_output"].extend(self.total_output + np.cumsum(outputs))
        self.total_output += int(outputs.sum())
        preemptions = np.cumsum(points["preemptions"]) + self.total_preemptions
        c["preemptions"].extend(preemptions)
        self.total_preemptions = int(preemptions[-1]) if len(preemptions) else self.total_preemptions
        self._extend_throughput()

    def add_finished(self, finished) -> None:
        self.columns["finish_time_s"].extend([row[0] for row in finished])

    def add_first_tokens(self, first_tokens) -> None:
        """(first_token_time_s, ttft_s, queue_time_s) rows, one per request as its first token came."""
        for key, values in zip(FIRST_TOKEN_KEYS, zip(*first_tokens)):
            self.columns[key].extend(values)

    def throughput(self) -> np.ndarray:
        """Output tokens per second over the trailing THROUGHPUT_WINDOW_S of engine time, at every step."""
        return self.columns["throughput_tokens_per_s"].view()

    def _extend_throughput(self) -> None:
        """Computes the new points' throughput only: a trailing window never changes once the
        clock has passed it (over the whole run this was ~1 ms of every frame)."""
        out = self.columns["throughput_tokens_per_s"]
        t = self.columns["time_s"].view()
        cum = self.columns["cumulative_output"].view()
        if out.size == 1 and len(t) > 1:
            out.size = 0  # a lone first point was divided by its own span; from two on, by the window
        first = out.size
        if first == len(t):
            return
        new_t = t[first:]
        start = np.searchsorted(t, new_t - THROUGHPUT_WINDOW_S, side="left")
        before = np.where(start > 0, cum[np.maximum(start - 1, 0)], 0.0)
        t_before = np.where(start > 0, t[np.maximum(start - 1, 0)], t[0] - THROUGHPUT_WINDOW_S)
        span = np.maximum(new_t - np.maximum(t_before, new_t - THROUGHPUT_WINDOW_S), 1e-9)
        out.extend((cum[first:] - before) / np.maximum(span, THROUGHPUT_WINDOW_S if len(t) > 1 else span))

    def arrays(self) -> dict:
        out = {key: self.columns[key].view() for key in (*STEP_KEYS, *FINISH_KEYS, *FIRST_TOKEN_KEYS)}
        out["throughput_tokens_per_s"] = self.throughput()  # computed as points arrive
        return out
