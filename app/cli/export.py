"""`kvscope export FILE`: a recording described, or converted for other tools.

    kvscope export run.kvrec                        what the recording holds, in a paragraph
    kvscope export run.kvrec --perfetto trace.json  a Chrome/Perfetto trace (ui.perfetto.dev)
    kvscope export run.kvrec --csv steps.csv        the per-step series, one row per engine step

A missing, truncated or corrupt recording ends in one line on stderr and exit code 2.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import numpy as np

from kvscope.engine.config import ConfigError
from kvscope.app.lab.recording import Recording

from kvscope.app.cli import options
from kvscope.app.cli.run import ALL_ROWS
from kvscope.engine.units import format_bytes, format_percent, format_seconds

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


def write_series_csv(recording: Recording, path) -> int:
    """The per-step series as CSV, a header row with units in the column names; returns the rows written."""
    series = recording.series()
    columns = [np.arange(recording.num_steps) if key is None else series[key] for _, key in CSV_COLUMNS]
    with open(path, "w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out)
        writer.writerow([name for name, _ in CSV_COLUMNS])
        writer.writerows(zip(*(column.tolist() for column in columns)))
    return recording.num_steps


def describe(recording: Recording) -> str:
    """One paragraph: the run's configuration, its extent and outcome, and the file."""
    h = recording.header
    model, hardware, plan = h.get("model", {}), h.get("hardware", {}), h.get("plan", {})
    args, workload = h.get("engine_args", {}), h.get("workload") or {}
    series = recording.series()
    finished = recording.finished_requests()
    summary = recording.summary or {}
    completed = summary.get("completed", len(finished["request_id"]))
    preemptions = summary.get("preemptions", int(series["preemptions"].sum()))
    peak_kv = float(series["kv_usage"].max()) if recording.num_steps else 0.0
    requests = f" ({workload['num_requests']:,} requests)" if isinstance(workload.get("num_requests"), int) and \
        workload["num_requests"] < ALL_ROWS else ""  # a whole trace has no count to print
    text = (
        f"{recording.path.name}: the {workload.get('name', '?')} workload{requests} through "
        f"{h.get('label') or model.get('name', '?') + ' on ' + hardware.get('name', '?')} ({h.get('backend', '?')} "
        "backend), with "
        f"{recording.num_blocks:,} KV blocks of {recording.block_size} tokens "
        f"({format_bytes(plan.get('block_bytes', 0))} each, {plan.get('kv_cache_dtype', '?')}), "
        f"max_num_seqs {args.get('max_num_seqs', '?')}, {args.get('scheduling', '?')} scheduling, "
        f"{args.get('allocation', '?')} allocation, prefix caching {'on' if args.get('enable_prefix_caching') else 'off'}. "
        f"It holds {recording.num_steps:,} engine steps over {format_seconds(recording.duration_s)} of engine clock: "
        f"{completed:,} requests completed, {preemptions:,} preemptions, KV cache usage peaking at "
        f"{format_percent(peak_kv)}. Recorded {h.get('created', '?')} by kvscope {h.get('kvscope_version', '?')} "
        f"(recording format {'.'.join(str(v) for v in h.get('format_version', []))}); "
        f"{format_bytes(recording.file_size)}."
    )
    if recording.note:
        text += f" Note: {recording.note}."
    return text


def cmd_export(args) -> int:
    outputs = [(flag, path) for flag, path in (("--perfetto", args.perfetto), ("--csv", args.csv)) if path]
    for flag, path in outputs:
        options.check_output_path(flag, path)
    with Recording.open(args.file) as recording:
        if recording.warning:
            print(f"kvscope: warning: {recording.warning}", file=sys.stderr)
        if not outputs:
            print(describe(recording))
            return 0
        try:
            if args.perfetto:
                from kvscope.app.lab.perfetto import write_perfetto

                stats = write_perfetto(recording, args.perfetto)
                size = Path(args.perfetto).stat().st_size
                print(f"Perfetto trace written to {args.perfetto} ({format_bytes(size)}, {stats.num_events:,} events, "
                      f"{stats.steps_exported:,} steps, {stats.requests_exported:,} request tracks): "
                      "open it at https://ui.perfetto.dev")
                if stats.requests_left_out or stats.steps_left_out:
                    print(f"kvscope: note: to keep the trace openable, {stats.requests_left_out:,} requests and "
                          f"{stats.steps_left_out:,} steps were left out (the trace's otherData says which)",
                          file=sys.stderr)
            if args.csv:
                rows = write_series_csv(recording, args.csv)
                size = Path(args.csv).stat().st_size
                print(f"per-step CSV written to {args.csv} ({format_bytes(size)}, {rows:,} rows)")
        except OSError as exc:
            raise ConfigError(f"cannot write {exc.filename or 'the output'}: {exc.strerror or exc}") from None
    return 0
