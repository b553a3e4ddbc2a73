"""Workloads: when requests arrive, how long their prompts are, how much they generate.

A workload is synthetic (an arrival rate and length distributions, optionally a shared system
prompt), a trace replay (arrival times and lengths read from a CSV such as the Azure LLM
inference trace), or chat text (conversations written as data: chat_workload.py). Either way it
yields RequestSpecs lazily, in arrival order, deterministic for a given seed: synthetic token ids,
or the text's own tokens.
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

import numpy as np

from kvscope.app.lab.bounded_reads import packed_kind, read_capped, wide_unicode
from kvscope.app.lab.chat_workload import ChatScript, chat_requests, chat_script_from_dict
from kvscope.app.lab.table_checks import require_text, unknown_fields
from kvscope.engine.checks import real_number, shown, whole_number
from kvscope.engine.config import ConfigError
from kvscope.engine.request import RequestSpec

DIST_KINDS = ("constant", "uniform", "lognormal")
# Bounds of a workload, each far past a real one: what is asked beyond them would allocate
# gigabytes of token ids or run for years of engine clock before anything noticed.
MAX_REQUESTS = 10_000_000
ALL_ROWS = 10**9  # num_requests of a whole-trace replay: every row the file has (up to MAX_REQUESTS)
MAX_REQUEST_TOKENS = 1 << 22  # 4,194,304 prompt or output tokens in one request
MAX_ARRIVAL_RATE = 1e9  # requests per second
MAX_SIGMA = 10.0  # a lognormal's spread: e**10 is a factor of 22,026 either side of the median
MAX_SHARED_PREFIX_TOKENS = 1 << 24  # all shared prefixes together: they are built up front
MAX_TRACE_SPAN_S = 366 * 86400.0  # a trace's last arrival, seconds after its first: a year
MAX_TRACE_BYTES = 1 << 30
MAX_SPEEDUP = 1e9
# Synthetic requests arriving within a minute of engine clock wait together, token ids and all:
# their expected prompt tokens are held to this (~2.4 GB as Python lists), as a server holds its queue.
MAX_TOKENS_AT_ONCE = 1 << 26  # 67,108,864
AT_ONCE_SPAN_S = 60.0
# Below these a run's clock reaches astronomical times (1e-300 req/s: 1e300 s) that say nothing.
MIN_SPEEDUP = 1e-6
MIN_ARRIVAL_RATE = 1e-6  # requests per second: one in 11.6 days


@dataclass(frozen=True)
class LengthDist:
    """A token-length distribution: constant(value), uniform(min, max) or lognormal(median, sigma)."""

    dist: str = "constant"
    value: int = 0
    min: int = 1
    max: int = 1_000_000
    median: float = 0.0
    sigma: float = 0.0

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.dist == "constant":
            out = np.full(n, self.value, dtype=np.int64)
        elif self.dist == "uniform":
            out = rng.integers(self.min, self.max + 1, size=n)
        else:
            out = np.rint(rng.lognormal(math.log(self.median), self.sigma, size=n)).astype(np.int64)
        return np.clip(out, self.min, self.max)

    @property
    def mean(self) -> float:
        """The expected tokens of a sample (before the clip to [min, max], so at most max)."""
        if self.dist == "constant":
            return float(self.smallest)
        if self.dist == "uniform":
            return (self.min + self.max) / 2
        spread = self.median * math.exp(min(self.sigma, 20.0) ** 2 / 2)
        return min(float(self.max), max(float(self.min), spread))  # the clip at min counts too

    @property
    def smallest(self) -> int:
        """The fewest tokens a sample can have."""
        return int(np.clip(self.value, self.min, self.max)) if self.dist == "constant" else self.min



def dist_from_dict(data, label: str) -> LengthDist:
    if isinstance(data, int) and not isinstance(data, bool):
        data = {"dist": "constant", "value": data}
    if not isinstance(data, dict):
        raise ConfigError(f"{label}: expected a whole number of tokens or a table like "
                          f"{{ dist = \"lognormal\", median = 512, sigma = 0.8 }}, got {data!r:.60}")
    said = unknown_fields(data, {"dist", "value", "min", "max", "median", "sigma"})
    if said:
        raise ConfigError(f"{label}: {said}")
    kind = data.get("dist", "constant")
    if kind not in DIST_KINDS:
        raise ConfigError(f"{label}: dist must be one of {', '.join(DIST_KINDS)}, got {kind!r:.60}")
    unused = sorted(set(data) & ({"median", "sigma"} if kind != "lognormal" else set())
                    | (set(data) & {"value"} if kind != "constant" else set()))
    if unused:  # a lognormal's median given to a constant length was dropped without a word
        uses = {"constant": "value", "uniform": "min and max", "lognormal": "median, sigma, min and max"}[kind]
        raise ConfigError(f"{label}: a {kind} length does not use {' or '.join(unused)} (it uses {uses}); "
                          "remove it, or set dist to the distribution meant")
    lo = whole_number(data.get("min", 1), f"{label}: min", 1, MAX_REQUEST_TOKENS)
    hi = whole_number(data.get("max", 1_000_000), f"{label}: max", 1, MAX_REQUEST_TOKENS)
    if hi < lo:
        raise ConfigError(f"{label}: need 1 <= min <= max, got min {lo}, max {hi}")
    if kind == "constant":
        if "value" not in data:
            raise ConfigError(f"{label}: a constant length needs value (a whole number of tokens)")
        value = whole_number(data["value"], f"{label}: constant value", 1, MAX_REQUEST_TOKENS)
        if ("min" in data and value < lo) or ("max" in data and value > hi):  # clipped to min, or max ignored
            bound = f"below min {lo:,}" if value < lo else f"above max {hi:,}"
            raise ConfigError(f"{label}: constant value {value:,} is {bound}, so it would not be the length given; "
                              "a constant length needs only value")
        return LengthDist("constant", value=value, min=max(lo, 1), max=max(hi, value))
    if kind == "uniform":
        if "max" not in data:  # drawn up to the default 1,000,000: prompts past any model's length, never asked for
            raise ConfigError(f"{label}: a uniform length needs max (and min, 1 when not given): the most tokens "
                              "it draws")
        return LengthDist("uniform", min=lo, max=hi)
    median = real_number(data.get("median", 0), f"{label}: lognormal median", -math.inf, MAX_REQUEST_TOKENS)
    sigma = real_number(data.get("sigma", -1), f"{label}: lognormal sigma", -math.inf, MAX_SIGMA)
    if median <= 0 or sigma < 0:
        raise ConfigError(f"{label}: lognormal needs median > 0 and sigma >= 0")
    if not lo <= median <= hi:  # most samples would be clipped to the bound: not the distribution described
        raise ConfigError(f"{label}: lognormal median {shown(median)} is outside min {lo:,} to max {hi:,}; "
                          "give a median between them")
    return LengthDist("lognormal", min=lo, max=hi, median=median, sigma=sigma)


@dataclass(frozen=True, slots=True)  # a trace may hold 10,000,000 rows: 1.9 GB of them with a __dict__ each
class TraceRow:
    arrival_time_s: float
    prompt_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class WorkloadSpec:
    name: str
    description: str = ""
    source: str = ""
    num_requests: int = 1000
    # Poisson arrivals at this many requests per second; 0 means all arrive at once (offline batch).
    arrival_rate_per_s: float = 0.0
    prompt_tokens: LengthDist = field(default_factory=lambda: LengthDist("constant", value=128))
    output_tokens: LengthDist = field(default_factory=lambda: LengthDist("constant", value=128))
    # A share of requests start with one of a few common system prompts of this many tokens.
    shared_prefix_fraction: float = 0.0
    shared_prefix_tokens: int = 0
    num_shared_prefixes: int = 1
    trace_path: str | None = None
    trace_speedup: float = 1.0  # replay a trace this many times faster than it was recorded
    # Chat text: the prompts are these conversations (prompt_tokens and the shared prefix do not
    # apply) and output_tokens caps each answer, which the model may end sooner.
    chat: ChatScript | None = None

    @property
    def is_text(self) -> bool:
        return self.chat is not None

    @property
    def shortest_request_tokens(self) -> int | None:
        """The fewest tokens (prompt + output cap) any of its requests can ask for; None where the
        lengths come from a file (a trace, chat text)."""
        if self.trace_path is not None or self.chat is not None:
            return None
        return self.prompt_tokens.smallest + self.output_tokens.smallest

    def with_overrides(self, **changes) -> "WorkloadSpec":
        import dataclasses

        changes = {k: v for k, v in changes.items() if v is not None}
        spec = dataclasses.replace(self, **changes)
        _validate(spec, f"workload {spec.name}")
        return spec



def _check_tokens_at_once(spec: WorkloadSpec, label: str) -> None:
    if spec.trace_path is not None or spec.chat is not None:
        return  # a trace's rows and chat text are bounded by their files
    rate = spec.arrival_rate_per_s
    # the engine pulls requests as its clock reaches them: those of one minute may wait together
    arriving = spec.num_requests if rate == 0 else min(spec.num_requests, math.ceil(rate * AT_ONCE_SPAN_S))
    total = arriving * spec.prompt_tokens.mean
    if total > MAX_TOKENS_AT_ONCE:
        when = "at once" if rate == 0 else f"within {AT_ONCE_SPAN_S:.0f} s"
        raise ConfigError(f"{label}: {arriving:,} requests arriving {when} with ~{spec.prompt_tokens.mean:,.0f} "
                          f"prompt tokens each would hold {total:,.0f} token ids in memory together (at most "
                          f"{MAX_TOKENS_AT_ONCE:,}); give fewer requests, shorter prompts or a lower arrival rate")


def _validate(spec: WorkloadSpec, label: str) -> None:
    if spec.num_requests < 1:
        raise ConfigError(f"{label}: num_requests must be at least 1, got {shown(spec.num_requests)}")
    if spec.num_requests > MAX_REQUESTS and not (spec.trace_path is not None and spec.num_requests == ALL_ROWS):
        raise ConfigError(f"{label}: num_requests must be at most {MAX_REQUESTS:,}, got {shown(spec.num_requests)}")
    if spec.arrival_rate_per_s < 0 or not math.isfinite(spec.arrival_rate_per_s):
        raise ConfigError(f"{label}: arrival_rate_per_s must be 0 (all at once) or more, got {spec.arrival_rate_per_s}")
    real_number(spec.arrival_rate_per_s, f"{label}: arrival_rate_per_s", 0.0, MAX_ARRIVAL_RATE)
    if 0 < spec.arrival_rate_per_s < MIN_ARRIVAL_RATE:
        raise ConfigError(f"{label}: arrival_rate_per_s must be 0 (all at once) or at least {MIN_ARRIVAL_RATE:g} "
                          f"(one request in {1 / MIN_ARRIVAL_RATE / 86400:.1f} days), got {spec.arrival_rate_per_s:g}")
    if not 0 <= spec.shared_prefix_fraction <= 1:
        raise ConfigError(f"{label}: shared_prefix_fraction must be between 0 and 1")
    if spec.shared_prefix_fraction > 0 and spec.shared_prefix_tokens < 1:
        raise ConfigError(f"{label}: shared_prefix_tokens must be at least 1 when a share of requests use one")
    if spec.num_shared_prefixes < 1:
        raise ConfigError(f"{label}: num_shared_prefixes must be at least 1")
    whole_number(spec.shared_prefix_tokens, f"{label}: shared_prefix_tokens", 0, MAX_REQUEST_TOKENS)
    if spec.shared_prefix_fraction > 0 and spec.num_shared_prefixes * spec.shared_prefix_tokens > MAX_SHARED_PREFIX_TOKENS:
        raise ConfigError(f"{label}: num_shared_prefixes x shared_prefix_tokens must be at most "
                          f"{MAX_SHARED_PREFIX_TOKENS:,} tokens, got {spec.num_shared_prefixes * spec.shared_prefix_tokens:,}")
    if spec.trace_speedup <= 0 or not math.isfinite(spec.trace_speedup):
        raise ConfigError(f"{label}: trace_speedup must be greater than 0, got {spec.trace_speedup}")
    real_number(spec.trace_speedup, f"{label}: trace_speedup", MIN_SPEEDUP, MAX_SPEEDUP)
    if spec.chat is not None and spec.trace_path is not None:
        raise ConfigError(f"{label}: a workload replays a trace or sends chat text, not both")
    _check_tokens_at_once(spec, label)


def refuse_ignored(given: list[str], label: str, because: str, hint: str = "") -> None:
    """Fields the workload's source sets itself (a trace's rows, a chat's text): given beside it they
    would be dropped without a word, so they are refused instead."""
    if given:
        raise ConfigError(f"{label} {because}; {', '.join(given)} would be ignored: leave "
                          f"{'it' if len(given) == 1 else 'them'} out{hint}")


def refuse_ignored_by_trace(given: list[str], label: str) -> None:
    refuse_ignored(given, label, "replays a trace, whose rows give each request's arrival time and token counts",
                   " (a workload file's trace_speedup replays it faster)")


# What a trace's rows set, and a chat's text: given beside them, these are refused.
TRACE_SETS = ("arrival_rate_per_s", "prompt_tokens", "output_tokens")
CHAT_SETS = ("prompt_tokens", "shared_prefix_fraction", "shared_prefix_tokens", "num_shared_prefixes")
CHAT_SAYS = "sends chat text, whose messages are the prompts and whose system prompt is the shared prefix"

_WORKLOAD_KEYS = {
    "name", "description", "source", "num_requests", "arrival_rate_per_s", "prompt_tokens", "output_tokens",
    "shared_prefix_fraction", "shared_prefix_tokens", "num_shared_prefixes", "trace", "trace_speedup", "chat",
}


# A workload TOML's counts and numbers: their type is checked here, their range by _validate.
_NUMBER_FIELDS = ("num_requests", "shared_prefix_tokens", "num_shared_prefixes")
_REAL_FIELDS = ("arrival_rate_per_s", "shared_prefix_fraction", "trace_speedup")


def workload_from_dict(data: dict, label: str, trace_dir=None, fallback_trace_dir=None,
                       whole: bool = True) -> WorkloadSpec:
    """A WorkloadSpec from a workload TOML's table. A relative `trace` is found in trace_dir (the
    file's own folder), else in fallback_trace_dir (the built-in traces) when it is there. whole=False:
    the table changes a preset's fields (a scenario's [base.workload]), so the fields it leaves unread
    are judged with the preset's by refuse_unused once they are merged, not on their own."""
    if not isinstance(data, dict):
        raise ConfigError(f"{label}: expected a table of workload fields, got {data!r:.60}")
    said = unknown_fields(data, _WORKLOAD_KEYS)
    if said:
        raise ConfigError(f"{label}: {said}")
    if "name" not in data:
        raise ConfigError(f"{label}: missing field name")
    kwargs = {k: require_text(data[k], f"{label}: {k}") if k == "name" else _text(data[k], f"{label}: {k}")
              for k in ("name", "description", "source") if k in data}
    for key, text in kwargs.items():  # printed in `run`'s title and tables, as a model preset's are: one line
        if not text.isprintable():
            raise ConfigError(f"{label}: {key} {text[:60]!r} must be one line of printable text (no newline, tab "
                              "or control character)")
    for key in _NUMBER_FIELDS:
        if key in data:
            kwargs[key] = _whole(data[key], f"{label}: {key}")
    for key in _REAL_FIELDS:
        if key in data:
            value = data[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ConfigError(f"{label}: {key} must be a finite number, got {value!r:.60}")
            kwargs[key] = float(value)
    for key in ("prompt_tokens", "output_tokens"):
        if key in data:
            kwargs[key] = dist_from_dict(data[key], f"{label}: {key}")
    if "trace" in data:
        refuse_ignored_by_trace([k for k in TRACE_SETS if k in data], label)
        trace = require_text(data["trace"], f"{label}: trace")
        if "\0" in trace:  # no file name holds one (open() would raise ValueError, not say which field)
            raise ConfigError(f"{label}: trace {trace[:60]!r} holds a NUL character; give the trace CSV's path")
        trace = Path(trace)
        if trace_dir is not None and not trace.is_absolute():
            found = Path(trace_dir) / trace
            if not found.exists() and fallback_trace_dir is not None and (Path(fallback_trace_dir) / trace).exists():
                found = Path(fallback_trace_dir) / trace
            trace = found
        kwargs["trace_path"] = str(trace)
    if "chat" in data:
        refuse_ignored([k for k in CHAT_SETS if k in data], label, CHAT_SAYS)
        kwargs["chat"] = chat_script_from_dict(data["chat"], f"{label}: chat")
    spec = WorkloadSpec(**kwargs)
    _validate(spec, label)
    if whole:
        refuse_unused(data, spec, label)
    return spec


def refuse_unused(data: dict, spec: WorkloadSpec, label: str) -> None:
    """Fields a workload file gives that its other fields leave unread (dropped without a word),
    and a shared prefix no prompt can hold (each prompt using it grew past prompt_tokens)."""
    if "trace_speedup" in data and spec.trace_path is None:
        raise ConfigError(f"{label}: trace_speedup replays a trace faster, but the workload has no trace; "
                          "leave it out, or give trace (a CSV of arrivals)")
    prefix = [k for k in ("shared_prefix_tokens", "num_shared_prefixes") if k in data]
    if prefix and spec.shared_prefix_fraction == 0 and spec.chat is None:
        raise ConfigError(f"{label}: {' and '.join(prefix)} would be ignored: shared_prefix_fraction (the share of "
                          "requests that start with a shared prefix) is 0; set it, or leave them out")
    if spec.shared_prefix_fraction > 0 and spec.chat is None:
        if spec.trace_path is None:
            dist, source = spec.prompt_tokens, "prompt_tokens gives"
            longest = dist.value if dist.dist == "constant" else dist.max
        else:  # each row's prompt grew to the prefix and a token: 100-token rows replayed as 1,001
            longest, source = max(r.prompt_tokens for r in read_trace(spec.trace_path, spec.num_requests)), \
                f"its trace {spec.trace_path} gives"
        if spec.shared_prefix_tokens >= longest:
            raise ConfigError(f"{label}: shared_prefix_tokens ({spec.shared_prefix_tokens:,}) is not shorter than the "
                              f"longest prompt {source} ({longest:,}), which counts the prefix; give "
                              "longer prompts or a shorter prefix")


def _whole(value, what: str) -> int:
    """A whole number (its range is _validate's to check, in the words the workload's fields use)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (
            isinstance(value, float) and not (math.isfinite(value) and value.is_integer())):
        raise ConfigError(f"{what} must be a whole number, got {value!r:.60}")
    return int(value)


def _text(value, what: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{what} must be text, got {value!r:.60}")
    return value


# A time in seconds past this is no offset in seconds (3,169 years) but milliseconds or finer since
# 1970: read as seconds, a trace of 5 s would replay over 83 minutes.
MAX_TRACE_SECONDS = 1e11
_SECONDS_END = re.compile(r"[T ]?[0-9]{2}:?[0-9]{2}:?[0-9]{2}$")  # a date-time's whole seconds, before a fraction
_COUNT = re.compile(r"[ \t]*[+-]?[0-9]+[ \t]*")  # int() also takes 1_000 and other scripts' digits


def _parse_timestamp(text: str) -> tuple[float, str]:
    """(seconds, form): seconds as a number ("seconds"), or an ISO date-time whose fraction may carry
    more than 6 digits, with a zone ("zoned") or without one ("naive", read as UTC: the Azure traces
    are, and the machine's own zone would move a replay's arrivals by its offset and its DST)."""
    text = text.strip()
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        if "_" in text or not text.isascii():  # float() takes 1_0 and other scripts' digits
            raise ValueError(text)
        return seconds, "seconds"
    whole, _, fraction = text.partition(".")
    digits = fraction[: len(fraction) - len(fraction.lstrip("0123456789"))]
    # a fraction belongs to the seconds: after a date or the minutes (2023-11-16.5, 18:15.5), or twice
    # (46.68.5), it was added as seconds to a time that fromisoformat read on its own
    if fraction and (not _SECONDS_END.search(whole) or "." in fraction[len(digits):]):
        raise ValueError(text)
    base = datetime.fromisoformat(whole + fraction[len(digits):])  # a zone after the fraction (+00:00, Z) stays
    # +00:00 and Z agree with a time without a zone (read as UTC); another offset does not
    form = "naive" if base.tzinfo is None else "utc" if not base.utcoffset() else "zoned"
    if base.tzinfo is None:
        base = base.replace(tzinfo=timezone.utc)
    return base.timestamp() + (float("0." + digits) if digits else 0.0), form


_FORMS = {"seconds": "a number of seconds", "zoned": "a date-time with a time zone",
          "naive": "a date-time without a time zone (read as UTC)", "utc": "a date-time in UTC"}
# Forms whose rows cannot be compared: seconds against any date-time (their difference is 1970's
# distance), a time without a zone against one with another zone than UTC (the difference is the zone's)
_CLASHES = {"seconds": ("naive", "utc", "zoned"), "naive": ("seconds", "zoned"), "utc": ("seconds",),
            "zoned": ("seconds", "naive")}


def _count(text: str) -> int:
    if not _COUNT.fullmatch(text):
        raise ValueError(text)
    return int(text)


_COLUMN_NAMES = {
    "arrival": ("TIMESTAMP", "timestamp", "arrival_time_s"),
    "prompt": ("ContextTokens", "prompt_tokens", "input_tokens"),
    "output": ("GeneratedTokens", "output_tokens"),
}


_JSON_START = re.compile(rb"(?:\xef\xbb\xbf)?[ \t\r\n]{0,1024}[\[{]")  # a JSON trace, or JSON Lines: no header row


def read_trace(path: str | Path, limit: int | None = None) -> list[TraceRow]:
    """Rows of a trace CSV, arrival times relative to the first row. Errors name the line."""
    path = Path(path)
    data = read_capped(path, f"trace {path}", MAX_TRACE_BYTES, "trace CSV file")
    packed = packed_kind(data)
    if packed:  # said as "binary data (a NUL byte)", the file's nature not named
        raise ConfigError(f"trace {path}: {packed}-compressed, not CSV text; decompress it first and give the .csv")
    if _JSON_START.match(data):  # was "line 1: no arrival column"
        raise ConfigError(f"trace {path}: JSON, not CSV; kvscope reads a trace as CSV whose first line names its "
                          f"columns ({_COLUMN_NAMES['arrival'][0]},{_COLUMN_NAMES['prompt'][0]},"
                          f"{_COLUMN_NAMES['output'][0]}), one request a line")
    nul = data.find(b"\0")  # binary data (a sparse file of zeros): said at once, not after decoding a GiB
    if nul >= 0:
        if wide := wide_unicode(data):  # a spreadsheet's "Unicode text": every other byte is 0
            raise ConfigError(f"trace {path}: {wide}; save it as CSV in UTF-8")
        line = data.count(b"\n", 0, nul) + 1
        raise ConfigError(f"trace {path} line {line}: binary data (a NUL byte), not CSV text")
    if (limit is None or limit >= ALL_ROWS) and data.count(b"\n") > MAX_REQUESTS + 1:  # before parsing them all
        raise ConfigError(f"trace {path}: more than {MAX_REQUESTS:,} rows; replay the first ones with --requests")
    reader = csv.reader(_text_lines(path, data))
    try:
        return _read_trace_rows(path, reader, limit)
    except csv.Error as exc:  # a field past the csv module's limit, a quote left open
        raise ConfigError(f"trace {path} line {reader.line_num}: not a readable CSV row ({exc})") from None


def _text_lines(path: Path, data: bytes):
    """The file's lines as text, decoded one at a time: the whole file decoded at once (and held
    by a StringIO) would take up to five times its size in memory."""
    start = 3 if data.startswith(b"\xef\xbb\xbf") else 0  # a byte-order mark (Excel's "CSV UTF-8") is not part of the header
    for line_no, line in enumerate(_LINE.finditer(data, start), 1):  # \r\n, \n or an old Mac's \r
        try:
            yield str(line[0], "utf-8")
        except UnicodeDecodeError:
            raise ConfigError(f"trace {path} line {line_no}: not UTF-8 text") from None


_LINE = re.compile(rb"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+")


def _read_trace_rows(path: Path, reader, limit: int | None) -> list[TraceRow]:
    rows: list[TraceRow] = []
    header = next(reader, None)
    # Excel's and LibreOffice's "sep=," line names the separator, not the columns ("no arrival column" was said)
    if header is not None and [cell.strip().lower() for cell in header] == ["sep=", ""] and not (header := next(reader, None)):
        raise ConfigError(f"trace {path}: only a sep=, line (the separator a spreadsheet names), no header and no requests")
    if header is None:
        raise ConfigError(f"trace {path}: the file is empty")
    header_line = reader.line_num  # 2 after a sep=, line
    columns = {}
    for role, names in _COLUMN_NAMES.items():
        found = [i for i, h in enumerate(header) if h.strip() in names]
        if not found:
            separator = next((name for sep, name in ((";", "semicolons"), ("\t", "tabs"), ("|", "bars"))
                              if len(header) == 1 and sep in header[0]), None)
            if separator:  # a spreadsheet's export in a locale whose decimal mark is a comma
                raise ConfigError(f"trace {path} line {header_line}: its columns are separated by {separator}; "
                                  f"kvscope reads comma-separated values (columns {_COLUMN_NAMES['arrival'][0]}, "
                                  f"{_COLUMN_NAMES['prompt'][0]}, {_COLUMN_NAMES['output'][0]})")
            raise ConfigError(
                f"trace {path} line {header_line}: no {role} column; expected one of {', '.join(names)}"
            )
        if len(found) > 1:  # which one is meant cannot be told; the first would be taken without a word
            raise ConfigError(f"trace {path} line {header_line}: {len(found)} {role} columns "
                              f"({', '.join(header[i].strip() for i in found)}); keep one")
        columns[role] = found[0]
    limit = min(limit, ALL_ROWS) if limit is not None else ALL_ROWS
    start = previous = None
    first_of_form: dict[str, int] = {}  # the first line of each form of time
    for row in reader:
        line_no = reader.line_num
        if len(rows) >= limit:
            break
        if not row or all(not c.strip() for c in row):
            continue
        where = f"trace {path} line {line_no}"
        while len(row) > len(header) and not row[-1].strip():  # a trailing comma (a spreadsheet's export) holds nothing
            row = row[:-1]
        if len(row) > len(header):  # a comma inside a number (1,500) would shift the counts that follow
            raise ConfigError(f"{where}: {len(row)} cells where the header names {len(header)}: "
                              f"{','.join(row)[:80]!r} (a comma inside a number? write 1500, not 1,500)")
        try:
            prompt_text, output_text, arrival_text = (row[columns[k]] for k in ("prompt", "output", "arrival"))
        except IndexError:
            raise ConfigError(f"{where}: {len(row)} cells where the header names {len(header)}: "
                              f"{','.join(row)[:80]!r}") from None
        try:
            arrival, form = _parse_timestamp(arrival_text)
        except (ValueError, OverflowError):
            raise ConfigError(f"{where}: {header[columns['arrival']].strip()[:40]} {arrival_text.strip()[:40]!r} is "
                              "neither seconds (12.5) nor an ISO date-time (2023-11-16 18:15:46.68, "
                              "optionally with a zone: +00:00)") from None
        if not math.isfinite(arrival):
            raise ConfigError(f"{where}: arrival time {row[columns['arrival']]!r} is not a finite time")
        if start is None and form == "seconds" and abs(arrival) >= MAX_TRACE_SECONDS:  # later rows: the span says
            raise ConfigError(f"{where}: arrival time {row[columns['arrival']].strip()[:40]!r} is {abs(arrival):.3g} s, "
                              f"past {MAX_TRACE_SECONDS:.0e} s (3,169 years): milliseconds or finer since 1970? "
                              "give seconds (divide by 1,000 for milliseconds)")
        first_of_form.setdefault(form, line_no)
        clash = next((other for other in _CLASHES[form] if other in first_of_form), None)
        if clash is not None:
            raise ConfigError(f"{where}: arrival time {row[columns['arrival']].strip()[:40]!r} is {_FORMS[form]}, "
                              f"but line {first_of_form[clash]}'s is {_FORMS[clash]}; write every row's time the "
                              "same way")
        counts = []
        for role, text in (("prompt", prompt_text), ("output", output_text)):
            try:
                counts.append(_count(text))
            except ValueError:
                raise ConfigError(f"{where}: {header[columns[role]].strip()[:40]} {text.strip()[:40]!r} is not a "
                                  "whole number of tokens written in digits 0-9 (no separators, no decimals)") from None
        prompt, output = counts
        if prompt < 1 or output < 1:
            raise ConfigError(f"{where}: token counts must be at least 1, got {prompt} and {output}")
        whole_number(prompt, f"{where}: prompt tokens", 1, MAX_REQUEST_TOKENS)
        whole_number(output, f"{where}: output tokens", 1, MAX_REQUEST_TOKENS)
        if start is None:
            start = previous = arrival
        if arrival < previous:
            raise ConfigError(f"{where}: arrival time goes backwards (rows must be in arrival order)")
        if arrival - start > MAX_TRACE_SPAN_S:
            raise ConfigError(f"{where}: arrives {arrival - start:,.6g} s after the first row; a trace spans at most "
                              f"{MAX_TRACE_SPAN_S:,.0f} s (a year)")
        previous = arrival
        if len(rows) >= MAX_REQUESTS:
            raise ConfigError(f"trace {path}: more than {MAX_REQUESTS:,} rows; replay the first ones with --requests")
        rows.append(TraceRow(arrival - start, prompt, output))
    if not rows:
        raise ConfigError(f"trace {path}: no requests in the file")
    return rows


class PromptOfLength:
    """A prompt given by its length only, for a request that max_model_len will reject on arrival
    whatever its tokens: a workload of 4,194,304-token prompts then costs no memory before each
    is rejected (as a list of ids, one such prompt is ~150 MB). The engine reads only its len(), and
    would run a request it admitted with no tokens: make one only for a request past max_model_len."""

    __slots__ = ("length",)

    def __init__(self, length: int):
        self.length = length

    def __len__(self) -> int:
        return self.length


def generate_requests(spec: WorkloadSpec, vocab_size: int, seed: int = 0, tokenizer=None,
                      longest_request: int | None = None) -> Iterator[RequestSpec]:
    """The workload's requests in arrival order, with synthetic token ids that depend only on seed
    (and on longest_request: a request past it draws none, so the ids after it differ).
    A chat workload's are its text, tokenized by tokenizer (a ChatTokenizer) when given. A
    synthetic request of more than longest_request tokens (the engine's max_model_len), prompt and
    output, gets no token ids (PromptOfLength): the engine rejects it on arrival whatever they are."""
    if spec.chat is not None:
        return chat_requests(spec, spec.chat, vocab_size, seed, tokenizer)
    return _synthetic_requests(spec, vocab_size, seed, longest_request)


def _synthetic_requests(spec: WorkloadSpec, vocab_size: int, seed: int,
                        longest_request: int | None = None) -> Iterator[RequestSpec]:
    rng = np.random.default_rng(seed)
    if spec.trace_path is not None:
        rows = read_trace(spec.trace_path, limit=spec.num_requests)
        arrivals = np.array([r.arrival_time_s for r in rows]) / spec.trace_speedup
        prompts = np.array([r.prompt_tokens for r in rows])
        outputs = np.array([r.output_tokens for r in rows])
    else:
        n = spec.num_requests
        if spec.arrival_rate_per_s > 0:
            arrivals = np.cumsum(rng.exponential(1.0 / spec.arrival_rate_per_s, size=n))
            arrivals -= arrivals[0]
        else:
            arrivals = np.zeros(n)
        prompts = spec.prompt_tokens.sample(rng, n)
        outputs = spec.output_tokens.sample(rng, n)
    n = len(arrivals)
    uses_prefix = rng.random(n) < spec.shared_prefix_fraction
    prefix_choice = rng.integers(0, spec.num_shared_prefixes, size=n)
    prefix_rng = np.random.default_rng([seed, 1])
    # A prefix as long as max_model_len puts every request that uses it past it: none is made.
    usable = longest_request is None or spec.shared_prefix_tokens < longest_request
    prefixes = [
        prefix_rng.integers(0, vocab_size, size=spec.shared_prefix_tokens).tolist()
        for _ in range(spec.num_shared_prefixes if spec.shared_prefix_fraction > 0 and usable else 0)
    ]
    token_rng = np.random.default_rng([seed, 2])
    for i in range(n):
        prompt_len = int(prompts[i])
        prefix_len = spec.shared_prefix_tokens if uses_prefix[i] else 0
        if longest_request is not None and prefix_len + max(1, prompt_len - prefix_len) + int(outputs[i]) > longest_request:
            yield RequestSpec(i, float(arrivals[i]), PromptOfLength(prefix_len + max(1, prompt_len - prefix_len)),
                              int(outputs[i]))
            continue
        prefix = prefixes[prefix_choice[i]] if uses_prefix[i] else []
        unique = max(1, prompt_len - len(prefix))
        tokens = prefix + token_rng.integers(0, vocab_size, size=unique).tolist()
        yield RequestSpec(i, float(arrivals[i]), tokens, int(outputs[i]), len(prefix))
