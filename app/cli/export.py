"""`kvscope export FILE`: a recording described, or converted for other tools.

    kvscope export run.kvrec                        what the recording holds, in a paragraph
    kvscope export run.kvrec --perfetto trace.json  a Chrome/Perfetto trace (ui.perfetto.dev)
    kvscope export run.kvrec --csv steps.csv        the per-step series, one row per engine step

A recording of an attached vLLM server (`kvscope attach --record`) is described too, and --csv
writes its metric series, one row per scrape; it has no engine steps, so --perfetto refuses it.
A missing, truncated or corrupt recording ends in one line on stderr and exit code 2.
"""

from __future__ import annotations

import os
import re
import stat
import sys
from pathlib import Path

from kvscope.engine.config import ConfigError
from kvscope.app.lab.recording import Recording
from kvscope.app.lab.export import write_series_csv
from kvscope.app.cli.output import counted, shown
from kvscope.app.lab.output_path import atomic_output, check_distinct_outputs, check_file_output
from kvscope.app.lab.said_paths import said_path
from kvscope.app.lab.workload import ALL_ROWS
from kvscope.engine.units import format_bytes, format_percent, format_seconds


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("export", help="convert a recorded run (.kvrec) for other tools")
    parser.add_argument("file", metavar="FILE", help="a recording written by `kvscope run --record`")
    parser.add_argument("--perfetto", metavar="OUT", help="a Chrome/Perfetto trace JSON (open it at ui.perfetto.dev)")
    parser.add_argument("--csv", metavar="OUT", help="the per-step series as CSV")
    parser.set_defaults(func=run)


def describe(recording: Recording) -> str:
    """One paragraph: the run's configuration, its extent and outcome, and the file."""
    h = recording.header  # its tables are tables (recording/schema.py); what they hold is only shown
    model, hardware, plan = h.get("model", {}), h.get("hardware", {}), h.get("plan", {})
    args, workload = h.get("engine_args", {}), h.get("workload") or {}
    resolved = h.get("resolved") if isinstance(h.get("resolved"), dict) else {}
    max_num_seqs = _count(resolved.get("max_num_seqs"), 0) or _count(args.get("max_num_seqs"), 0)  # 0: not said
    label = h.get("label") or model.get("name", "?") + " on " + hardware.get("name", "?")
    backend = h.get("backend", "?")
    if not re.search(rf"\b{re.escape(str(backend))}\b", str(label)):  # "llama-3-8b (simulated on l4-24gb)" says it
        label = f"{label} ({backend} backend)"
    steps = recording.num_steps
    series = recording.series()
    finished = recording.finished_requests()
    summary = recording.summary if isinstance(recording.summary, dict) else {}
    completed = _count(summary.get("completed"), len(finished["request_id"]))
    preemptions = _count(summary.get("preemptions"), int(series["preemptions"].sum()))
    peak_kv = float(series["kv_usage"].max()) if recording.num_steps else 0.0
    requests = f" ({counted(workload['num_requests'], 'request')})" if isinstance(workload.get("num_requests"), int) and \
        workload["num_requests"] < ALL_ROWS else ""  # a whole trace has no count to print
    text = (
        f"{recording.path.name}: the {workload.get('name', '?')} workload{requests} through "
        f"{label}, with "
        f"{recording.num_blocks:,} KV blocks of {recording.block_size} tokens "
        f"({format_bytes(_count(plan.get('block_bytes'), 0))} each, {plan.get('kv_cache_dtype', '?')}), "
        f"max_num_seqs {f'{max_num_seqs:,}' if max_num_seqs else '?'}, {args.get('scheduling', '?')} scheduling, "
        f"{args.get('allocation', '?')} allocation, prefix caching {'on' if _prefix_caching(args) else 'off'}. "
        f"It holds {counted(steps, 'engine step')} over {format_seconds(recording.duration_s)} of engine clock: "
        f"{counted(completed, 'request')} completed, {counted(preemptions, 'preemption')}, KV cache usage peaking at "
        f"{format_percent(peak_kv)}. Recorded {h.get('created', '?')} by kvscope {h.get('kvscope_version', '?')} "
        f"(recording format {'.'.join(str(v) for v in h.get('format_version', []))}); "
        f"{format_bytes(recording.file_size)}."
    )
    if recording.note:
        text += f" Note: {recording.note}."
    return text


def _prefix_caching(args: dict) -> bool:
    """Whether the run cached prefixes: a contiguous reservation shares no blocks, whatever the flag said."""
    return bool(args.get("enable_prefix_caching")) and args.get("allocation") != "contiguous"


def _count(value, default: int) -> int:
    """A count from the file, or default when the file holds something else there."""
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def run(args) -> int:
    outputs = [(flag, path) for flag, path in (("--perfetto", args.perfetto), ("--csv", args.csv)) if path]
    for flag, path in outputs:
        check_file_output(flag, path, "an export", {"recording": args.file})
    check_distinct_outputs(dict(outputs))
    from kvscope.app.lab.recording.records import is_attached, read_header

    if is_attached(read_header(args.file)):
        return export_attached(args)
    with Recording.open(args.file) as recording:
        if recording.warning:
            print(f"kvscope: warning: {shown(recording.warning)}", file=sys.stderr)
        if not outputs:
            print(shown(describe(recording)))  # the file's name, as typed, may hold ESC
            return 0
        if args.perfetto:
            from kvscope.app.lab.export.perfetto import write_perfetto

            stats = _written("--perfetto", args.perfetto, lambda partial: write_perfetto(recording, partial))
            print(f"Perfetto trace written to {shown(args.perfetto)} ({_size_said(args.perfetto)}"
                  f"{counted(stats.num_events, 'event')}, {counted(stats.steps_exported, 'step')}, "
                  f"{counted(stats.requests_exported, 'request track')}): "
                  "open it at https://ui.perfetto.dev")
            if stats.requests_left_out or stats.steps_left_out:
                print(f"kvscope: note: to keep the trace openable, {counted(stats.requests_left_out, 'request')} and "
                      f"{counted(stats.steps_left_out, 'step')} were left out (the trace's otherData says which)",
                      file=sys.stderr)
        if args.csv:
            rows = _written("--csv", args.csv, lambda partial: write_series_csv(recording, partial))
            print(f"per-step CSV written to {shown(args.csv)} ({_size_said(args.csv)}{rows:,} row{'s' if rows != 1 else ''})")
    return 0


def _written(flag: str, path: str, write):
    """write(partial)'s result, the file written whole (atomic_output). A write that fails, on a full
    disk or /dev/full, names the flag and the path: `cannot write the output` named neither, as if the
    standard output had failed, when it was the --perfetto file."""
    try:
        with atomic_output(path) as partial:
            return write(partial)
    except OSError as exc:
        raise ConfigError(f"{flag} {said_path(path)}: cannot write: {exc.strerror or exc}") from None


def export_attached(args) -> int:
    """An attached server's recording: described, or its metric series as CSV (one row per scrape)."""
    import csv

    from kvscope.app.lab.recording.attached_reader import AttachedRecording

    if args.perfetto:
        raise ConfigError(f"--perfetto: {Path(args.file).name} is a recording of an attached vLLM server, which "
                          "publishes no engine steps to trace; --csv writes its metric series")
    recording = AttachedRecording.open(args.file)
    if recording.warning:
        print(f"kvscope: warning: {shown(recording.warning)}", file=sys.stderr)
    series = recording.series()
    if not args.csv:
        info = recording.info
        print(shown(f"{recording.path.name}: an attached vLLM server, {info['version']} at {info['url']} serving "
              f"{', '.join(info['model_names']) or 'an unknown model'} with {info['num_gpu_blocks']:,} KV blocks of "
              f"{info['block_size']} tokens per engine ({len(info['engines'])} engine(s)). It holds "
              f"{counted(recording.num_steps, 'tick')} over {format_seconds(recording.duration_s)}: "
              f"{counted(sum(recording.event_counts().values()), 'KV event')} in "
              f"{recording.num_batches:,} batch{'' if recording.num_batches == 1 else 'es'}, "
              f"{counted(len(series['time_s']), 'scrape')} of /metrics. "
              f"Recorded {recording.header.get('created', '?')} by "
              f"kvscope {recording.header.get('kvscope_version', '?')} (recording format "
              f"{'.'.join(str(v) for v in recording.header['format_version'])}); {format_bytes(recording.file_size)}."
              + (f" Note: {recording.note}." if recording.note else "")))  # what the server said, shown
        return 0
    def write(partial):
        with open(partial, "w", newline="") as out:
            writer = csv.writer(out)
            writer.writerow(list(series))
            writer.writerows(zip(*(values.tolist() for values in series.values())))

    _written("--csv", args.csv, write)
    print(f"metric series CSV written to {shown(args.csv)} ({_size_said(args.csv)}"
          f"{counted(len(series['time_s']), 'row')}, one per scrape)")
    return 0


def _size_said(path) -> str:
    """"12.3 KiB, " for a file; nothing for a device or a pipe (/dev/null keeps no bytes to count)."""
    try:
        info = os.stat(path)
    except OSError:
        return ""
    return f"{format_bytes(info.st_size)}, " if stat.S_ISREG(info.st_mode) else ""
