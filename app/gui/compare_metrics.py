"""What the comparison page shows of a ComparisonResult: the results table's rows (METRIC_ROWS,
result_rows) and the plots a scenario's asked quantity gets when no standard plot shows it."""

from __future__ import annotations

import math
from dataclasses import dataclass


from kvscope.app.lab.scenarios import quantity_words
from kvscope.widgets.results_table import ResultRow


@dataclass(frozen=True)
class AskedPlot:
    """The plot a scenario's answer gets where the three standard plots (KV usage, running requests,
    output tokens) do not show it: the value measured so far, read from each results update."""

    title: str
    unit: str
    scale: float  # from the metric's unit to the plot's
    tip: str
    # a measured peak: the reveal shows the moment it last grew, named so in the block maps' numbers;
    # "" keeps the KV pool's fullest moment (a value known before the run, or one that only settles)
    moment: str = ""
    # known before any step (the memory math): drawn from the run's start, not from the first results
    # update (at maximum speed that came at 22.7 s of a 27.4 s run, and the line was a stub or nothing)
    computed: bool = False


ASKED_PLOTS = {
    "itl_max_s": AskedPlot("Longest pause between tokens so far", "ms", 1e3,
                           "the longest a request mid-answer has waited for its next token, as the run measured it so "
                           "far:\na whole prompt prefilled in one step stalls every answer being written",
                           moment="the pause grew"),
    "prefix_cache_hit_rate": AskedPlot("Prompt tokens from the prefix cache so far", "%", 100.0,
                                       "share of the prompt tokens so far served from cached blocks instead of "
                                       "computed", moment="the hit rate grew"),
    "throughput_tokens_per_s": AskedPlot("Output throughput so far", "tokens/s", 1.0,
                                         "output tokens generated per second of engine time so far, from the first "
                                         "arrival"),
    "max_concurrent_sequences": AskedPlot("Full-length requests that fit (memory math)", "sequences", 1.0,
                                          "KV pool / KV per request at max_model_len: computed from the configuration "
                                          "before any step, drawn across the run beside the requests that do run",
                                          computed=True),
}


def asked_plot(reveal) -> AskedPlot | None:
    """The asked plot of a scenario's answer (a scenarios.Reveal), or None where a standard plot shows it.
    A ratio is drawn as the ratio: one curve, in the numerator's colour."""
    plot = ASKED_PLOTS.get(reveal.name)
    if plot is None or reveal.kind != "ratio":
        return plot
    words = quantity_words(reveal.name)
    measured = reveal.name != "max_concurrent_sequences"
    return AskedPlot(f"{words[:1].upper()}{words[1:]} ratio" + (" so far" if measured else " (memory math)"), "x",
                     1.0, f"{words} of \"{reveal.numerator}\" / {words} of \"{reveal.denominator}\""
                     + (", as measured so far" if measured else ", computed before any step"), plot.moment,
                     computed=not measured)


def asked_values(reveal, plot: AskedPlot, result) -> list[float | None]:
    """Per configuration of a ComparisonResult, its point of the asked plot now (in the plot's unit);
    None where it has none (a ratio is drawn once, on its numerator; a value not yet measured)."""
    if reveal.kind == "ratio":
        ratio = result.ratio(reveal.name, reveal.numerator, reveal.denominator)
        return [ratio if label == reveal.numerator else None for label in result.labels]
    return [config_number(config, reveal.name, plot.scale) for config in result.configurations]


def config_number(config, key: str, scale: float = 1.0) -> float | None:
    """One configuration's finite number under key, in the shown unit (times scale); None where it
    has none (not measured, not a number)."""
    try:
        value = config.value(key)
    except KeyError:
        return None
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    value = value * scale if scale != 1.0 else value
    return value if math.isfinite(value) else None


def building_text(spec) -> str:
    """What the comparison page says until its process has built every configuration: a real model
    each takes a minute or more on a loaded CPU, and the page under the question stayed blank."""
    variants = getattr(spec, "variants", ())
    real = sum(variant.backend == "real" for variant in variants)
    if not real:
        return f"Building {len(variants) or 'the'} configurations ..."
    return (f"Building {len(variants)} configurations: {real} of them run a real model on this machine, loaded in "
            "the comparison's own process (the first time up to a minute or two); the columns appear when they "
            "are ready.")


# (result key, row name, unit, scale to the unit, better, decimals, tooltip)
METRIC_ROWS = (
    ("throughput_tokens_per_s", "Output throughput", "tokens/s", 1.0, "higher", 0,
     "output tokens generated per second of engine time, first arrival to last finish"),
    ("ttft_p50_s", "TTFT p50", "ms", 1e3, "lower", 1, "time to first token, median over the finished requests"),
    ("ttft_p99_s", "TTFT p99", "ms", 1e3, "lower", 1, "time to first token, 99th percentile"),
    ("tpot_p50_s", "Time per output token p50", "ms", 1e3, "lower", 2,
     "time between a request's output tokens after the first, median"),
    ("tpot_p99_s", "Time per output token p99", "ms", 1e3, "lower", 2, "time per output token, 99th percentile"),
    ("itl_max_s", "Longest pause between tokens", "ms", 1e3, "lower", 1,
     "the longest a request mid-answer waited for its next token: a whole prompt prefilled in one step stalls it"),
    ("peak_running", "Peak concurrency", "requests", 1.0, "higher", 0, "most requests running in one step"),
    ("max_concurrent_sequences", "Full-length requests that fit (memory math)", "sequences", 1.0, "higher", 1,
     "KV pool / KV per sequence at max_model_len: how many requests of max_model_len tokens fit at once; "
     "shorter requests fit more of them (compare Peak concurrency, measured)"),
    ("peak_kv_usage", "Peak KV cache usage", "%", 100.0, "", 1, "largest share of KV blocks held by requests"),
    ("mean_fragmentation", "Fragmentation", "% of slots", 100.0, "lower", 1,
     "allocated KV token slots holding no token, averaged over busy time"),
    ("preemptions", "Preemptions", "count", 1.0, "lower", 0, "requests evicted from the batch to free KV blocks"),
    ("prefix_cache_hit_rate", "Prefix cache hit rate", "% of tokens", 100.0, "higher", 1,
     "prompt tokens served from the prefix cache instead of recomputed"),
    ("kv_quality_cost", "Quality cost: tokens that differ", "%", 100.0, "lower", 1,
     "share of next-token predictions that differ from the model at full precision (1 - top-1 agreement) on "
     "English passages, measured on the real backend; the simulated backend holds no values, so it is not "
     "measured there"),
    ("perplexity", "Perplexity on English passages", "", 1.0, "lower", 2,
     "exp(mean negative log-likelihood) of the passages' tokens; the full-precision model's is in the note"),
    ("completed", "Requests completed", "requests", 1.0, "", 0, "requests that finished"),
)


def result_rows(result) -> list[ResultRow]:
    """The results table's rows from an engine.compare.ComparisonResult."""
    rows = []
    configs = result.configurations
    for key, name, unit, scale, better, decimals, tip in METRIC_ROWS:
        values = [config_number(config, key, scale) for config in configs]
        notes = tuple(c.kv_quality_note for c in configs) if key == "kv_quality_cost" else ()
        rows.append(ResultRow(name, unit, tuple(values), better, decimals, tip, notes))
    return rows
