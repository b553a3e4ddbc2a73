"""`kvscope compare --scenario NAME`: a scenario's question, its configurations run side by side on
the identical workload, and the answer."""

from __future__ import annotations

import json
import sys

from kvscope.app.lab.presets import preset_file
from kvscope.app.lab.scenarios import load_scenario
from kvscope.app.lab.output_path import check_distinct_outputs, check_output_path, write_text_atomic
from kvscope.engine.checks import MAX_SEED, whole_number
from kvscope.engine.config import ConfigError

from kvscope.app.cli import combinations, options
from kvscope.app.cli.lessons import readable_lesson
from kvscope.app.cli.run import Progress, fewer_than_100, status
from kvscope.engine.units import GiB, format_bytes, format_percent, format_seconds
from kvscope.app.cli.output import counted, table


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("compare",
                                   help="run a scenario's configurations on the identical workload, side by side")
    parser.add_argument("--scenario", metavar="NAME", required=True, help="a scenario name (`kvscope scenarios`)")
    parser.add_argument("--requests", type=options.whole, help="override the scenario's number of requests")
    parser.add_argument("--seed", type=options.whole, help="override the scenario's random seed")
    parser.add_argument("--json", metavar="OUT",
                        help="write one object per configuration as JSON to OUT ('-' for stdout)")
    parser.add_argument("--csv", metavar="OUT", help="write the results table as CSV to OUT")
    parser.add_argument("--quiet", action="store_true", help="no progress line")
    parser.set_defaults(func=run)


class ComparisonProgress(Progress):
    """One status line on stderr for all configurations together."""

    def __call__(self, comparison, force: bool = False) -> None:  # type: ignore[override]
        if self.due(force):
            total = len(comparison.requests)
            done = "  ".join(f"{label}: {engine.metrics.completed:,}/{total:,}"
                             for label, engine in zip(comparison.labels, comparison.engines))
            self.show(f"engine clock {comparison.clock:,.2f} s  completed {done}")


def _write(flag: str, path: str, text: str) -> None:
    if path == "-":
        print(text, end="" if text.endswith("\n") else "\n")
        return
    write_text_atomic(flag, path, text if text.endswith("\n") else text + "\n")


def _count(value, units: str) -> str:
    """A count with its unit, singular for one: "1 preemption", "2 preemptions"."""
    return "-" if value is None else counted(value, units[:-1])


def _rate(value) -> str:
    return "-" if value is None else f"{value:,.1f} tokens/s"


def _few(config, requests: str) -> str:
    """A p99 of under 100 requests says how many it rests on (see run.fewer_than_100)."""
    few = fewer_than_100(config.metrics.get(requests), why=False)
    return f" {few}" if few else ""


def _quality(config) -> str:
    cost = config.kv_quality_cost
    if cost is None:
        return "not measured (simulated)"
    how = config.kv_quality_note.split(":", 1)[0]  # measured | exact | reported as exact
    return f"{format_percent(cost)} top-1 disagreement ({how})"


# (row label, how a configuration's cell reads, the metric whose ratio to the baseline is shown)
METRIC_ROWS = (
    ("requests completed / rejected", lambda c: f"{c.metrics['completed']:,} / {c.metrics['rejected']:,} requests", None),
    ("output throughput", lambda c: _rate(c.metrics["throughput_tokens_per_s"]), "throughput_tokens_per_s"),
    ("TTFT p50", lambda c: format_seconds(c.metrics["ttft_p50_s"]), "ttft_p50_s"),
    ("TTFT p99", lambda c: format_seconds(c.metrics["ttft_p99_s"]) + _few(c, "completed"), "ttft_p99_s"),
    ("time per output token p50", lambda c: format_seconds(c.metrics["tpot_p50_s"]), "tpot_p50_s"),
    ("time per output token p99", lambda c: format_seconds(c.metrics["tpot_p99_s"]) + _few(c, "tpot_requests"),
     "tpot_p99_s"),
    ("longest pause between tokens", lambda c: format_seconds(c.metrics["itl_max_s"]), "itl_max_s"),
    ("queue time p99", lambda c: format_seconds(c.metrics["queue_time_p99_s"]) + _few(c, "completed"),
     "queue_time_p99_s"),
    ("peak running requests", lambda c: _count(c.metrics["peak_running"], "requests"), "peak_running"),
    ("KV cache usage peak", lambda c: format_percent(c.metrics["peak_kv_usage"]), "peak_kv_usage"),
    ("preemptions", lambda c: _count(c.metrics["preemptions"], "preemptions"), "preemptions"),
    ("prefix cache hit rate", lambda c: format_percent(c.metrics["prefix_cache_hit_rate"]), "prefix_cache_hit_rate"),
    ("fragmentation (mean)", lambda c: f"{format_percent(c.metrics['mean_fragmentation'])} of slots unused",
     "mean_fragmentation"),
    ("compute utilisation", lambda c: format_percent(c.metrics["compute_utilization"]), None),
    ("engine steps", lambda c: _count(c.metrics["steps"], "steps"), None),
    ("duration (engine clock)", lambda c: format_seconds(c.metrics["duration_s"]), None),
    ("KV quality cost", _quality, None),
)
SETTING_ROWS = (
    ("backend", lambda s: s["backend"]),
    ("model", lambda s: s["model"]),
    ("hardware", lambda s: f"{s['hardware']}, {s['memory_bytes'] / GiB:.2f} GiB"),
    ("KV cache dtype", lambda s: s["kv_cache_dtype"]),
    ("scheduling", lambda s: s["scheduling"]),
    ("allocation", lambda s: s["allocation"]),
    ("prefix caching", lambda s: "on" if s["enable_prefix_caching"] else "off"),
    ("chunked prefill", lambda s: "on" if s["enable_chunked_prefill"] else "off"),
    ("max_model_len", lambda s: f"{s['max_model_len']:,} tokens"),
    ("max_num_seqs", lambda s: f"{s['max_num_seqs']:,} requests"),
    ("token budget per step", lambda s: f"{s['max_num_batched_tokens']:,} tokens"),
    ("answer length", lambda s: "the workload's" if s["output_tokens"] is None else f"{s['output_tokens']:,} tokens each"),
)
MAX_CONCURRENT = "max concurrent at max_model_len"
MEMORY_ROWS = (
    ("KV per token", lambda m: format_bytes(m["kv_bytes_per_token"])),
    ("KV pool", lambda m: f"{format_bytes(m['kv_pool_bytes'])}, {m['num_blocks']:,} blocks"),
    (MAX_CONCURRENT, lambda m: f"{m['max_concurrent_sequences']:,.2f} sequences"),
)


def results_table(result) -> str:
    """Configurations side by side: a column each, every number with its unit, ratios to the first."""
    configs = result.configurations
    rows: list[tuple[str, list[str]]] = []
    for label, cell in SETTING_ROWS:
        cells = [cell(c.settings) for c in configs]
        if label in ("backend", "model", "hardware") or len(set(cells)) > 1:
            rows.append((label, cells))
    for label, cell in MEMORY_ROWS:
        cells = [cell(c.memory) for c in configs]
        if label in (MAX_CONCURRENT, "KV pool") or len(set(cells)) > 1:  # the pool: what every question is about
            ratio_cells = [cells[0]] + [
                text + (f" ({c.ratios['max_concurrent_sequences']:.2f}x)"
                        if label == MAX_CONCURRENT and c.ratios.get("max_concurrent_sequences") else "")
                for text, c in zip(cells[1:], configs[1:])
            ]
            rows.append((label, ratio_cells))
    for label, cell, metric in METRIC_ROWS:
        cells = []
        for i, config in enumerate(configs):
            text = cell(config)
            ratio = config.ratios.get(metric) if metric else None
            if i and ratio is not None:
                text += f" ({ratio:.2f}x)"
            cells.append(text)
        rows.append((label, cells))
    header = ("", [c.label for c in configs])
    label_width = max(len(label) for label, _ in rows)
    widths = [max(len(header[1][i]), *(len(cells[i]) for _, cells in rows)) for i in range(len(configs))]
    lines = []
    for label, cells in [header] + rows:
        lines.append(f"{label:<{label_width}}  " + "  ".join(f"{c:<{w}}" for c, w in zip(cells, widths)).rstrip())
        if label == "" and cells is header[1]:
            lines.append("-" * len(lines[-1]))
    return "\n".join(lines)


def compare_report(scenario, result, answer) -> dict:
    value, text = answer
    return {
        "scenario": {**scenario.to_dict(), "from_the_lesson": readable_lesson(scenario.seed_lesson)},
        "answer": {"value": value, "text": text, "unit": scenario.answer.unit or None,
                   "from": scenario.reveal_from.describe()},
        **result.to_dict(),
    }


def input_files(scenario) -> dict:
    """Every file the comparison reads, by what it is: the scenario file, the trace, and the model,
    hardware and workload presets its configurations name (built-in or the user's), as `run` has them."""
    given = {"scenario file": scenario.path, "trace": scenario.workload.spec.trace_path,
             "workload preset": preset_file("workloads", scenario.workload.spec.name)}
    for config in scenario.configs:
        given[f"model preset {config.model}"] = preset_file("models", config.model)
        if config.hardware:
            given[f"hardware preset {config.hardware}"] = preset_file("hardware", config.hardware)
    return {what: str(path) for what, path in given.items() if path}


def run(args) -> int:
    options.check_scenario_path(args.scenario)  # a folder or a pipe is said as one, not "no such file"
    scenario = load_scenario(args.scenario)
    inputs = input_files(scenario)
    check_output_path("--json", args.json, inputs)
    check_output_path("--csv", args.csv, inputs)
    check_distinct_outputs({"--json": args.json, "--csv": args.csv})
    if args.seed is not None:
        whole_number(args.seed, "--seed", 0, MAX_SEED)
    if args.requests is not None and args.requests < scenario.min_requests:  # the flag named, as --seed is
        raise ConfigError(f"--requests {args.requests:,}: scenario {scenario.name} needs at least "
                          f"{scenario.min_requests:,} requests for its claim to show; give {scenario.min_requests:,} "
                          "or more, or leave --requests out")
    to_stdout = "-" in (args.json, args.csv)
    say = (lambda *a, **k: print(*a, file=sys.stderr, **k)) if to_stdout else print
    spec = scenario.comparison_spec(requests=args.requests, seed=args.seed)  # validates before any loading
    combinations.refuse_requests_past_trace(spec.workload.spec, args.requests,
                                            f"scenario {scenario.name}'s trace {spec.workload.spec.trace_path}",
                                            (scenario.num_requests, f"scenario {scenario.name}'s"))

    say(table([
        ("from the lesson", readable_lesson(scenario.seed_lesson)),
        ("claim", scenario.claim),
        ("configurations", "; ".join(scenario.labels)),
        ("workload", f"{spec.workload.spec.name}: {counted(spec.workload.spec.num_requests, 'request')}, seed "
                     f"{spec.workload.seed}; the same requests for every configuration"),
    ], title=scenario.title))
    say()
    say(scenario.caption)
    say()
    unit = f" (answer in {scenario.answer.unit})" if scenario.answer.kind == "number" else \
        " (" + " or ".join(f"\"{c}\"" for c in scenario.answer.choices) + ")"
    say(f"Question: {scenario.question}{unit}")
    say()
    if scenario.backend == "real" and not args.quiet:
        status(f"loading {', '.join(sorted({c.model for c in scenario.configs}))} for the real backend ...")

    from kvscope.app.lab.compare import Comparison, kv_quality_is_measured

    comparison = Comparison(spec)
    progress = ComparisonProgress(enabled=not args.quiet)
    while not comparison.done:
        comparison.step()
        progress(comparison)
    progress(comparison, force=True)
    progress.done()
    if not args.quiet and any(kv_quality_is_measured(e) for e in comparison.engines):
        status("measuring the quality cost (top-1 agreement, perplexity) against the model at full precision ...")
    result = comparison.results()
    say(results_table(result))
    say(f"wall time {result.wall_time_s:.2f} s ({scenario.backend} backend)")
    say()
    answer = scenario.reveal(result)  # after the table, which shows why when the run answers nothing
    say(f"Answer: {answer[1]}  ({scenario.reveal_from.describe()})")
    if args.json:
        _write("--json", args.json, json.dumps(compare_report(scenario, result, answer), indent=2))
    if args.csv:
        _write("--csv", args.csv, result.to_csv())
    return 0
