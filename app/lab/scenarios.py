"""Guided scenarios: a question asked before a comparison runs, and its answer read from the run.

Each scenario (presets/scenarios/*.toml) teaches one claim of the seed lessons: it asks a
question, runs two to four configurations on the identical workload (app/lab/compare.py), and
reveals the answer from what was measured — a metric of one configuration, a ratio between two,
or a memory-math quantity — never from a number written in the file. Files are validated on
load; an error names the file and the field.

The answer's text (format_answer, format_quantity, Reveal.describe) stays here: `kvscope compare
--scenario` prints it as the window does. The verdict on a guess is the window's alone
(app/gui/scenario_verdict.py).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

from kvscope.app.lab.compare import (
    BACKENDS,
    MAX_CONFIGURATIONS,
    MEMORY_FIELDS,
    MIN_CONFIGURATIONS,
    ComparisonResult,
    ComparisonSpec,
    ComparisonWorkload,
    Variant,
)
from kvscope.engine.checks import MAX_BYTES, MAX_SEED, shown
from kvscope.engine.config import ConfigError, EngineArgs, resolve_engine_args
from kvscope.engine.memory_math import plan_memory, require_fit
from kvscope.engine.metrics import MetricsCollector
from kvscope.app.lab.presets import load_hardware, load_model, load_workload, meant_names, presets_root, read_toml
from kvscope.app.lab.table_checks import unknown_fields
from kvscope.app.lab.workload import (CHAT_SAYS, CHAT_SETS, TRACE_SETS, refuse_ignored, refuse_ignored_by_trace,
                                     read_trace, refuse_unused, workload_from_dict)
from kvscope.engine.units import GiB, format_percent

ANSWER_KINDS = ("number", "choice")
REVEAL_KINDS = ("metric", "ratio", "memory", "best")
METRIC_NAMES = frozenset(MetricsCollector().summary()) | {"kv_quality_cost"}
MEMORY_QUANTITIES = frozenset(MEMORY_FIELDS) - {"kv_cache_dtype"}
FRACTION_METRICS = frozenset({
    "peak_kv_usage", "mean_kv_usage", "prefix_cache_hit_rate", "mean_fragmentation", "compute_utilization",
    "kv_quality_cost",
})
# unit -> factor from the quantity's own unit (seconds, fractions, bytes) to the one shown
UNITS_BY_KIND = {
    "ratio": {"x": 1.0},
    "time": {"s": 1.0, "ms": 1e3},
    "fraction": {"%": 100.0},
    "bytes": {"GiB": 1 / GiB, "MiB": 1 / 1024**2, "KiB": 1 / 1024},
    "count": {"requests": 1.0, "sequences": 1.0, "tokens/s": 1.0, "blocks": 1.0, "tokens": 1.0, "steps": 1.0},
}

_TOP_KEYS = {"name", "order", "title", "seed_lesson", "claim", "caption", "question", "answer", "reveal", "base",
             "configs", "playback_speed"}
# A simulated scenario's engine seconds per wall-clock second when the window opens it: chosen so
# that its reveal comes within about 20 s (`kvscope bench scenarios` measures it). The window's
# speed steps in 1-2-5 notches, so a scenario's speed is one of them.
PLAYBACK_SPEEDS = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0)
_ANSWER_KEYS = {"kind", "unit", "choices"}
_REVEAL_KEYS = {"metric", "ratio", "memory", "best", "config", "numerator", "denominator", "highest"}
MAX_MEMORY_GIB = MAX_BYTES / GiB  # 1 EiB, the engine's ceiling on any size in bytes
_BASE_KEYS = {"backend", "model", "hardware", "memory_gib", "quantization", "seed", "num_requests", "min_requests",
              "workload", "engine"}
_CONFIG_KEYS = {"label", "model", "hardware", "memory_gib", "quantization", "engine", "output_tokens"}
_SHAPING_KEYS = {"prompt_scale", "output_scale", "max_output_tokens", "all_at_once"}
_ENGINE_KEYS = {f.name for f in dataclasses.fields(EngineArgs)} - {"seed"}
_BOOL_ENGINE_KEYS = {"enable_prefix_caching", "enable_chunked_prefill"}
_TEXT_ENGINE_KEYS = {f.name for f in dataclasses.fields(EngineArgs) if f.type in (str, "str")}


def scenarios_root():
    return presets_root() / "scenarios"


@dataclass(frozen=True)
class Answer:
    kind: str  # number | choice
    unit: str = ""  # number answers
    choices: tuple = ()  # choice answers: configuration labels


@dataclass(frozen=True)
class Reveal:
    """Where the answer comes from in a ComparisonResult."""

    kind: str  # metric | ratio | memory | best
    name: str  # the metric or memory quantity
    config: str = ""  # metric, memory
    numerator: str = ""  # ratio
    denominator: str = ""  # ratio
    highest: bool = True  # best: the choice whose configuration has the highest value wins
    accounting: str = "vllm"  # memory: the accounting of the configuration's memory math

    def describe(self) -> str:
        words = quantity_words(self.name)
        if self.kind == "ratio":
            return f"{words} of \"{self.numerator}\" / {words} of \"{self.denominator}\", measured"
        if self.kind == "memory":
            how = ("the lesson's formula: memory x utilisation - weights, nothing else held back"
                   if self.accounting == "lesson" else "sized as vLLM sizes its pool")
            return f"{words} of \"{self.config}\", computed by the memory math, {how} (no run needed)"
        if self.kind == "best":
            extreme = "highest" if self.highest else "lowest"  # among the choices offered, not every configuration
            return f"of the choices offered, the one whose configuration has the {extreme} {words}, measured"
        return f"{words} of \"{self.config}\", measured"


@dataclass(frozen=True)
class Scenario:
    name: str
    order: int
    title: str
    seed_lesson: str
    claim: str
    caption: str
    question: str
    answer: Answer
    reveal_from: Reveal
    backend: str
    workload: ComparisonWorkload
    configs: tuple  # of compare.Variant; the first is the baseline
    min_requests: int
    path: str
    playback_speed: float = 1.0

    @property
    def labels(self) -> list[str]:
        return [c.label for c in self.configs]

    @property
    def num_requests(self) -> int:
        return self.workload.spec.num_requests

    @property
    def seed(self) -> int:
        return self.workload.seed

    def comparison_spec(self, requests: int | None = None, seed: int | None = None) -> ComparisonSpec:
        if requests is not None and requests < self.min_requests:
            raise ConfigError(f"scenario {self.name}: needs at least {self.min_requests} requests for its claim to "
                              f"show, got {requests}")
        if seed is not None and not 0 <= seed <= MAX_SEED:
            raise ConfigError(f"seed must be from 0 to {MAX_SEED:,}, got {shown(seed)}")
        return ComparisonSpec(list(self.configs), self.workload, title=self.title).with_overrides(requests, seed)

    def reveal(self, result: ComparisonResult) -> tuple:
        """(the answer, the answer as text with its unit), read from the run."""
        r = self.reveal_from
        if r.kind == "best":
            # a configuration that served no request measured nothing: its 0 tokens/s or 0 preemptions must not win
            served = [label for label in self.answer.choices if result[label].served]
            if not served:
                raise ConfigError(f"scenario {self.name}: {result.served_none(self.answer.choices)}, so no "
                                  f"choice measured {quantity_words(r.name)}")
            values = {label: result[label].value(r.name) for label in self.answer.choices}
            known = {k: v for k, v in values.items() if v is not None and k in served}
            if not known:
                raise ConfigError(f"scenario {self.name}: no configuration measured {r.name}")
            best = (max if r.highest else min)(known, key=known.get)
            # labels hold commas ("Llama 2 7B, fp8 KV"): each value after its label's colon, ";" between them
            measured = "; ".join(f"{label}: {format_quantity(r.name, v) if label in served else 'served no request'}"
                                 for label, v in values.items())
            return best, f"{best} ({quantity_words(r.name)}: {measured})"
        if r.kind != "memory":
            read = (r.numerator, r.denominator) if r.kind == "ratio" else (r.config,)
            if not all(result[label].served for label in read):
                raise ConfigError(f"scenario {self.name}: {result.served_none(read)}, so the run measured no "
                                  f"{quantity_words(r.name)} to reveal the answer from")
        if r.kind == "ratio":
            raw = result.ratio(r.name, r.numerator, r.denominator)
        else:
            raw = result[r.config].value(r.name)
        if raw is None:
            raise ConfigError(f"scenario {self.name}: the run measured no {r.name} to reveal the answer from")
        value = raw * UNITS_BY_KIND[quantity_kind(r)][self.answer.unit]
        return value, format_answer(value, self.answer.unit)

    def to_dict(self) -> dict:
        return {
            "name": self.name, "order": self.order, "title": self.title, "seed_lesson": self.seed_lesson,
            "claim": self.claim, "caption": self.caption, "question": self.question,
            "answer": {"kind": self.answer.kind, "unit": self.answer.unit, "choices": list(self.answer.choices)},
            "reveal": self.reveal_from.describe(), "backend": self.backend, "num_requests": self.num_requests,
            "min_requests": self.min_requests, "seed": self.seed, "configurations": self.labels, "path": self.path,
            "playback_speed": self.playback_speed,
        }


QUANTITY_WORDS = {
    "throughput_tokens_per_s": "output throughput", "peak_running": "peak running requests",
    "peak_kv_usage": "peak KV cache usage", "itl_max_s": "longest pause between tokens",
    "prefix_cache_hit_rate": "prefix cache hit rate", "max_concurrent_sequences": "max concurrent sequences",
    "ttft_p50_s": "median time to first token", "ttft_p99_s": "p99 time to first token",
}


def quantity_words(name: str) -> str:
    return QUANTITY_WORDS.get(name) or name.removesuffix("_s").replace("_", " ")


def quantity_kind(reveal: Reveal) -> str:
    if reveal.kind == "ratio":
        return "ratio"
    name = reveal.name
    if name in FRACTION_METRICS:
        return "fraction"
    if name.endswith("_s"):
        return "time"
    if name.endswith("_bytes") or name.startswith("kv_bytes"):
        return "bytes"
    return "count"


def format_quantity(name: str, value) -> str:
    """A metric or memory quantity in its natural unit, for text beside an answer."""
    if value is None:
        return "-"
    kind = quantity_kind(Reveal("metric", name))
    if kind == "fraction":
        return format_percent(value)
    if kind == "time":
        return format_answer(value * 1e3, "ms") if value < 1 else format_answer(value, "s")
    if kind == "bytes":
        return format_answer(value / GiB, "GiB")
    if float(value).is_integer():
        return f"{int(value):,}"
    return format_answer(value, "").rstrip()


def format_answer(value, unit: str) -> str:
    if isinstance(value, str):
        return value
    if unit == "x":
        return f"{value:.2f}x"
    text = f"{value:,.0f}" if abs(value) >= 100 else f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"
    return f"{text} {unit}"


# -- loading ----------------------------------------------------------------------------------


def scenario_names() -> list[str]:
    """The built-in scenarios, in their order (a window maps keys 1-9 to them)."""
    found = []
    try:
        files = [p for p in scenarios_root().iterdir() if p.name.endswith(".toml")]
    except (FileNotFoundError, NotADirectoryError):
        return []
    for path in files:
        name = path.name[: -len(".toml")]
        try:
            order = read_toml(path, f"scenario file {path}").get("order")
        except ConfigError:
            order = None
        found.append((order if isinstance(order, int) and not isinstance(order, bool) else math.inf, name))
    return [name for _, name in sorted(found)]


def load_scenario(name_or_path) -> Scenario:
    text = str(name_or_path)
    if text.endswith(".toml") or "/" in text or "\\" in text:
        path = Path(text)
        if not path.is_file():
            bare = "/" not in text and "\\" not in text  # `cache-ceiling.toml`: meant as the scenario's name
            meant = meant_names(text[:-len(".toml")], scenario_names(), typed=text) if bare else []
            raise ConfigError(f"scenario file {path}: no such file"
                              + (f" (did you mean the scenario {meant[0]}?)" if meant else ""))
    else:
        path = scenarios_root() / f"{text}.toml"
        if not path.is_file():
            meant = meant_names(text, scenario_names())
            raise ConfigError(f"unknown scenario {text!r}{f' (did you mean {meant[0]}?)' if meant else ''}; "
                              f"known: {', '.join(scenario_names())}")
    label = f"scenario file {path}"
    return scenario_from_dict(read_toml(path, label, "scenario"), label, path)


class _Fields:
    """Reads one TOML table, naming the file and the field in every error."""

    def __init__(self, data, where: str, label: str, allowed: set):
        self.label = label
        self.where = where
        if not isinstance(data, dict):
            raise self.error(f"expected a table, got {data!r}")
        said = unknown_fields(data, allowed)
        if said:
            raise self.error(said)
        self.data = data

    def error(self, message: str, key: str | None = None) -> ConfigError:
        field = f"{self.where}.{key}" if self.where and key else (key or self.where)
        return ConfigError(f"{self.label}: {field}: {message}" if field else f"{self.label}: {message}")

    def text(self, key: str, required: bool = True, default: str = "") -> str:
        if key not in self.data:
            if required:
                raise self.error("missing (a text field)", key)
            return default
        value = self.data[key]
        if not isinstance(value, str) or not value.strip():
            raise self.error(f"must be non-empty text, got {value!r}", key)
        return value.strip()

    def whole(self, key: str, required: bool = True, default=None, minimum: int = 1):
        if key not in self.data:
            if required:
                raise self.error("missing (a whole number)", key)
            return default
        value = self.data[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.error(f"must be a whole number >= {minimum}, got {value!r:.60}", key)
        if value > MAX_SEED:
            raise self.error(f"must be at most {MAX_SEED:,}, got {shown(value)}", key)
        return value

    def number(self, key: str, default=None, maximum: float = math.inf):
        if key not in self.data:
            return default
        value = self.data[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise self.error(f"must be a number greater than 0, got {value!r}", key)
        if value > maximum:
            raise self.error(f"must be at most {maximum:,.0f}, got {value!r}", key)
        return float(value)


MAX_LABEL_CHARS = 80  # a column heading; the longest built-in label has 34 characters


def scenario_from_dict(data: dict, label: str, path: Path | None = None) -> Scenario:
    top = _Fields(data, "", label, _TOP_KEYS)
    name = top.text("name")
    order = top.whole("order")
    answer = _answer(top, data.get("answer"))
    base = _Fields(data.get("base", {}), "base", label, _BASE_KEYS)
    backend = base.text("backend")
    if backend not in BACKENDS:
        raise base.error(f"must be one of {', '.join(BACKENDS)}, got {backend!r}", "backend")
    configs_data = data.get("configs")
    if not isinstance(configs_data, list) or not MIN_CONFIGURATIONS <= len(configs_data) <= MAX_CONFIGURATIONS:
        count = len(configs_data) if isinstance(configs_data, list) else 0
        raise ConfigError(f"{label}: configs: needs {MIN_CONFIGURATIONS} to {MAX_CONFIGURATIONS} [[configs]] "
                          f"tables, got {count}")
    configs = tuple(_config(base, backend, c, i, label) for i, c in enumerate(configs_data))
    labels = [c.label for c in configs]
    if len(set(labels)) != len(labels):
        raise ConfigError(f"{label}: configs: labels must differ, got {', '.join(labels)}")
    twins = next(((a, b) for i, a in enumerate(configs) for b in configs[i + 1:]
                  if backend == "simulated" and dataclasses.replace(a, label=b.label) == b), None)
    if twins:  # the simulated backend runs them step for step alike: every difference revealed was 0, every ratio 1
        raise ConfigError(f"{label}: configs: {twins[0].label!r} and {twins[1].label!r} are the same configuration "
                          "(model, hardware, memory, quantization, engine settings and output_tokens): the simulated "
                          "backend runs them alike; change what the scenario is about in one of them")
    reveal = _reveal(top, data.get("reveal"), answer, labels)
    if reveal.name == "kv_quality_cost" and backend != "real":  # refused only once the whole comparison had run
        raise ConfigError(f"{label}: reveal.{reveal.kind}: kv_quality_cost is measured by the real backend only (the "
                          "simulated one runs no model); reveal another quantity, or set base.backend = \"real\"")
    if reveal.kind == "memory":  # which formula the answer comes from: a run of kvscope math may use the other
        named = next(c for c in configs if c.label == reveal.config)
        reveal = dataclasses.replace(reveal, accounting=named.engine_args.accounting)
    workload = _workload(base, path)
    min_requests = base.whole("min_requests", required=False, default=1)
    if min_requests > workload.spec.num_requests:
        raise base.error(f"({min_requests}) is more than num_requests ({workload.spec.num_requests})", "min_requests")
    speed = top.number("playback_speed", default=1.0)
    if speed not in PLAYBACK_SPEEDS:
        raise top.error(f"must be one of {', '.join(f'{v:g}' for v in PLAYBACK_SPEEDS)}, got {speed!r}",
                        "playback_speed")
    if backend == "real" and speed != 1.0:
        raise top.error("the real backend runs at this machine's speed: leave it out", "playback_speed")
    return Scenario(
        playback_speed=speed,
        name=name, order=order, title=top.text("title"), seed_lesson=top.text("seed_lesson"),
        claim=top.text("claim"), caption=top.text("caption"), question=top.text("question"), answer=answer,
        reveal_from=reveal, backend=backend, workload=workload, configs=configs, min_requests=min_requests,
        path=str(path) if path is not None else "",
    )


def _answer(top: _Fields, data) -> Answer:
    if data is None:
        raise top.error("missing [answer] table", "answer")
    fields = _Fields(data, "answer", top.label, _ANSWER_KEYS)
    kind = fields.text("kind")
    if kind not in ANSWER_KINDS:
        raise fields.error(f"must be one of {', '.join(ANSWER_KINDS)}, got {kind!r}", "kind")
    if kind == "choice":
        choices = data.get("choices")
        if (not isinstance(choices, list) or len(choices) < 2
                or not all(isinstance(c, str) and c.strip() for c in choices)):
            raise fields.error("a choice answer needs a list of at least two configuration labels", "choices")
        if len({c.strip() for c in choices}) != len(choices):  # one label twice: a choice of fewer than two
            raise fields.error(f"names a label twice ({', '.join(map(repr, choices))}); each choice is another "
                               "configuration", "choices")
        if "unit" in data:  # shown with a number only: dropped without a word
            raise fields.error("a choice answer is a configuration's label, which has no unit; leave unit out", "unit")
        return Answer("choice", "", tuple(c.strip() for c in choices))
    if "choices" in data:
        raise fields.error("only a choice answer has choices", "choices")
    unit = fields.text("unit")
    known = sorted({u for units in UNITS_BY_KIND.values() for u in units})
    if unit not in known:
        raise fields.error(f"must be one of {', '.join(known)}, got {unit!r}", "unit")
    return Answer("number", unit)


def _reveal(top: _Fields, data, answer: Answer, labels: list[str]) -> Reveal:
    if data is None:
        raise top.error("missing [reveal] table", "reveal")
    fields = _Fields(data, "reveal", top.label, _REVEAL_KEYS)
    kinds = [k for k in REVEAL_KINDS if k in data]
    if len(kinds) != 1:
        raise fields.error("give exactly one of: metric (with config), ratio (with numerator and denominator), "
                           "memory (with config), best (for a choice answer)")
    kind = kinds[0]
    name = fields.text(kind)
    uses = {"metric": {"config"}, "memory": {"config"}, "ratio": {"numerator", "denominator"}, "best": {"highest"}}
    unread = sorted(set(data) - set(REVEAL_KINDS) - uses[kind])
    if unread:  # another kind's field (highest beside a ratio, config beside best): ignored without a word
        raise fields.error(f"a {kind} reveal does not read {' or '.join(unread)} (it reads "
                           f"{' and '.join(sorted(uses[kind]))}); leave {'it' if len(unread) == 1 else 'them'} out",
                           unread[0])
    allowed = MEMORY_QUANTITIES if kind == "memory" else METRIC_NAMES | MEMORY_QUANTITIES
    if name not in allowed:
        raise fields.error(f"unknown quantity {name!r}; known: {', '.join(sorted(allowed))}", kind)

    def config_label(key: str) -> str:
        value = fields.text(key)
        if value not in labels:
            raise fields.error(f"no configuration labelled {value!r}; the configs are: {', '.join(labels)}", key)
        return value

    if kind == "best":
        if answer.kind != "choice":
            raise fields.error("best reveals a choice answer; use metric, ratio or memory for a number", "best")
        for choice in answer.choices:
            if choice not in labels:
                raise ConfigError(f"{top.label}: answer.choices: {choice!r} is not a configuration label; "
                                  f"the configs are: {', '.join(labels)}")
        highest = data.get("highest", True)
        if not isinstance(highest, bool):
            raise fields.error(f"must be true or false, got {highest!r}", "highest")
        reveal = Reveal("best", name, highest=highest)
    elif answer.kind == "choice":
        raise fields.error("a choice answer is revealed by best = METRIC", kind)
    elif kind == "ratio":
        reveal = Reveal("ratio", name, numerator=config_label("numerator"), denominator=config_label("denominator"))
        if reveal.numerator == reveal.denominator:  # a configuration over itself: 1.00x, whatever ran
            raise fields.error(f"is {reveal.numerator!r}, the numerator too: a ratio of one configuration to itself "
                               "is always 1; name another configuration", "denominator")
    else:
        reveal = Reveal(kind, name, config=config_label("config"))
    if answer.kind == "number":
        quantity = quantity_kind(reveal)
        units = UNITS_BY_KIND[quantity]
        if answer.unit not in units:
            raise ConfigError(f"{top.label}: answer.unit: {name} is a {quantity} quantity; "
                              f"its unit is one of {', '.join(units)}, got {answer.unit!r}")
    return reveal


def _workload(base: _Fields, path: Path | None) -> ComparisonWorkload:
    data = base.data.get("workload")
    if data is None:
        raise base.error("missing [base.workload] table", "workload")
    if not isinstance(data, dict):
        raise base.error(f"expected a table, got {data!r}", "workload")
    where = f"{base.label}: base.workload"
    if "num_requests" in data:  # replaced by base.num_requests without a word
        raise base.error("base.num_requests sets how many requests every configuration serves, so this one would be "
                         "ignored; give the count once, as base.num_requests", "workload.num_requests")
    fields = dict(data)
    shaping = {k: fields.pop(k) for k in _SHAPING_KEYS if k in fields}
    preset = fields.pop("preset", None)
    try:
        if preset is not None:
            if not isinstance(preset, str):
                raise ConfigError(f"preset must be a workload preset name, got {preset!r}")
            spec = load_workload(preset)
            if "trace" in fields and spec.trace_path is None:  # the preset's rate and lengths were dropped unsaid
                raise ConfigError(f"a trace's rows would replace the arrival rate and token lengths of preset "
                                  f"{preset!r}; give the trace without a preset, or a preset that replays a trace")
            if spec.trace_path is not None:
                refuse_ignored_by_trace([k for k in TRACE_SETS if k in fields], f"preset {preset!r}")
            if spec.chat is not None:
                refuse_ignored([k for k in CHAT_SETS if k in fields], f"preset {preset!r}", CHAT_SAYS)
            if fields:
                # judged with the preset's fields: trace_speedup on a trace preset, a shared prefix's length on
                # a preset that shares one, were refused as unread; prompts shorter than its prefix were run
                override = workload_from_dict({"name": spec.name, **fields}, where,
                                              trace_dir=path.parent if path else None, whole=False)
                field_names = {"trace": "trace_path"}
                spec = dataclasses.replace(spec, **{field_names.get(k, k): getattr(override, field_names.get(k, k))
                                                   for k in fields})
                refuse_unused(fields, spec, where)
        else:
            spec = workload_from_dict({"name": "scenario workload", **fields}, where,
                                      trace_dir=path.parent if path else None)
        num_requests = base.whole("num_requests")
        spec = spec.with_overrides(num_requests=num_requests)
        if spec.trace_path is not None:  # past its rows the trace's 19,366 ran for minutes, the count not said
            rows = len(read_trace(spec.trace_path, limit=num_requests))
            if rows < num_requests:
                raise base.error(f"({num_requests:,}) is more than the {rows:,} requests its workload's trace holds "
                                 f"(one a row); give at most {rows:,}", "num_requests")
    except ConfigError as exc:
        message = str(exc)
        raise ConfigError(message if message.startswith(base.label) else f"{where}: {message}") from None
    shape = _Fields(shaping, "base.workload", base.label, _SHAPING_KEYS)
    max_output = shape.whole("max_output_tokens", required=False)
    all_at_once = shaping.get("all_at_once", False)
    if not isinstance(all_at_once, bool):
        raise shape.error(f"must be true or false, got {all_at_once!r}", "all_at_once")
    if all_at_once and "arrival_rate_per_s" in data:  # the rate given beside it was dropped without a word
        raise shape.error("all_at_once sends every request at time 0, so arrival_rate_per_s would be ignored; "
                          "give one of them", "arrival_rate_per_s")
    try:
        return ComparisonWorkload(
            spec=spec, seed=base.whole("seed", required=False, default=0, minimum=0),
            prompt_scale=shape.number("prompt_scale", 1.0), output_scale=shape.number("output_scale", 1.0),
            max_output_tokens=max_output, all_at_once=all_at_once,
        )
    except ConfigError as exc:  # the fields' own errors carry the file and field already
        message = str(exc)
        raise ConfigError(message if message.startswith(base.label) else f"{base.label}: base.{message}") from None


def _engine_overrides(table, where: str, label: str) -> dict:
    fields = _Fields(table, where, label, _ENGINE_KEYS)
    for key in _BOOL_ENGINE_KEYS & set(table):
        if not isinstance(table[key], bool):
            raise fields.error(f"must be true or false, got {table[key]!r}", key)
    # vllm_version = 0.10 (a TOML number, not "0.10") was read as 0.1, vLLM's first release
    for key in sorted(_TEXT_ENGINE_KEYS & set(table)):
        if not isinstance(table[key], str):
            raise fields.error(f"must be text in quotes (as a TOML number 0.10 is 0.1), got {shown(table[key])}", key)
    return dict(table)


def _config(base: _Fields, backend: str, data, index: int, label: str) -> Variant:
    where = f"configs[{index + 1}]"
    fields = _Fields(data, where, label, _CONFIG_KEYS)
    name = fields.text("label")
    if len(name) > MAX_LABEL_CHARS or not name.isprintable():  # a column heading and a table cell: one line
        raise fields.error(f"must be one line of at most {MAX_LABEL_CHARS} characters, got {name!r:.80}", "label")
    where = f"configs[{index + 1}] ({name})"
    fields.where = where

    def pick(key: str):
        return fields.data.get(key, base.data.get(key))

    model_name = pick("model")
    if not isinstance(model_name, str):
        raise fields.error("missing: set model in [base] or in the configuration", "model")
    hardware_name = pick("hardware")
    memory_gib = fields.number("memory_gib", base.number("memory_gib", maximum=MAX_MEMORY_GIB), maximum=MAX_MEMORY_GIB)
    if backend == "real" and hardware_name is not None:
        raise fields.error("the real backend runs on this machine: size its KV pool with memory_gib (a device "
                           "budget) or engine.kv_cache_memory_bytes, not hardware", "hardware")
    quantization = pick("quantization")
    if backend == "simulated" and not isinstance(hardware_name, str):
        raise fields.error("missing: the simulated backend needs a hardware preset (in [base] or here)", "hardware")
    engine = {**_engine_overrides(base.data.get("engine", {}), "base.engine", label),
              **_engine_overrides(data.get("engine", {}), f"{where}.engine", label)}
    try:
        model = load_model(model_name)
    except ConfigError as exc:
        raise fields.error(str(exc), "model") from None
    try:
        args = EngineArgs(**engine)
        if backend == "simulated":
            hardware = load_hardware(hardware_name)
            if memory_gib is not None:
                hardware = hardware.with_memory(int(memory_gib * GiB))
        else:
            from kvscope.app.lab.this_machine import detect_this_machine

            hardware = detect_this_machine(use_cuda=False)
            if memory_gib is not None:
                hardware = hardware.with_memory(int(memory_gib * GiB))
        plan = plan_memory(model, hardware, resolve_engine_args(args, model, hardware))
        if backend == "simulated":
            require_fit(plan)
    except (ConfigError, TypeError) as exc:
        raise fields.error(str(exc)) from None
    output_tokens = fields.whole("output_tokens", required=False)  # its own error names it, outside the try
    try:
        return Variant(
            label=name, backend=backend, model=model_name, hardware=hardware_name if backend == "simulated" else None,
            memory_bytes=int(memory_gib * GiB) if memory_gib is not None else None, engine_args=args,
            output_tokens=output_tokens, quantization=quantization,
        )
    except ConfigError as exc:
        raise fields.error(str(exc), "quantization") from None
