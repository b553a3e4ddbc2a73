"""A recorded run's per-step series as CSV: one row per engine step, the unit in each column's name.

`kvscope export run.kvrec --csv steps.csv` writes it; anything holding a Recording may.
"""

from __future__ import annotations

import csv

import numpy as np

# (CSV column, series key): the unit is in the column's name
CSV_COLUMNS = (
    ("step_index", None),
    ("engine_step", "step"),
    ("start_time_s", "start_time_s"),
    ("end_time_s", "time_s"),
    ("duration_s", "duration_s"),
    ("batch_size_requests", "batch_size"),
    ("num_tokens", "num_tokens"),
    ("num_prefill_tokens", "num_prefill_tokens"),
    ("output_tokens", "output_tokens"),
    ("kv_usage_fraction", "kv_usage"),
    ("num_running_requests", "num_running"),
    ("num_waiting_requests", "num_waiting"),
    ("compute_utilization_fraction", "compute_utilization"),
    ("preemptions", "preemptions"),
    ("unused_slots_tokens", "unused_slots"),
)


def write_series_csv(recording, path) -> int:
    """The per-step series as CSV, a header row with units in the column names; returns the rows written."""
    series = recording.series()
    columns = [np.arange(recording.num_steps) if key is None else series[key] for _, key in CSV_COLUMNS]
    with open(path, "w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out)
        writer.writerow([name for name, _ in CSV_COLUMNS])
        writer.writerows(zip(*(column.tolist() for column in columns)))
    return recording.num_steps
