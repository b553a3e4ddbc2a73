"""What a recording's header and records must hold before the reader uses them (docs/recording-format.md).

A recording is a file someone may have damaged, edited or forged: a list where the header has a
table, a step number that is text, an event kind past the known ones, an array of the wrong
length. The reader checks each record's fields and arrays against the format here, once, when it
first decodes it, so every later use (a seek, an export, a replay) reads consistent data, and
anything else is a RecordingError naming the record and the field.
"""

from __future__ import annotations

import numpy as np

from kvscope.app.lab.recording.format import (
    BLOCK_FIELDS,
    DELTAS,
    EVENT_COLUMNS,
    FINISHED_COLUMNS,
    FORMAT_MAJOR,
    SNAPSHOT_COLUMNS,
    STEP_COLUMNS,
    STEPS,
    RecordingError,
)
from kvscope.app.lab.bounded_reads import MAX_JSON_DEPTH, escaped, outsized_whole
from kvscope.engine.checks import (MAX_BLOCK_SIZE, MAX_BYTES, MAX_NUM_BLOCKS, ConfigError, real_number, shown,
                                   whole_number)
from kvscope.engine.snapshot import REQUEST_DTYPE

MAX_EVENT_KINDS = 256
MAX_STEPS = 1 << 40  # a step number or count: a trillion steps is decades of engine time
_HEADER_TABLES = ("model", "hardware", "engine_args", "resolved", "plan", "run")
_HEADER_TEXTS = ("format", "kvscope_version", "created", "label", "backend", "allocation")


def whole(value, what: str, low: int = 0, high: int = MAX_STEPS) -> int:
    """checks.whole_number, failing as a RecordingError (the file is at fault, not a setting)."""
    try:
        return whole_number(value, what, low, high)
    except ConfigError as exc:
        raise RecordingError(f"{exc}: the file is corrupt") from None


def _number(value, what: str) -> float:
    try:
        return real_number(value, what, -1e300, 1e300)
    except ConfigError as exc:
        raise RecordingError(f"{exc}: the file is corrupt") from None
    except OverflowError:  # a whole number past any float (10**400): real_number's compare raises this
        raise _corrupt(f"{what} must be a number from -1e300 to 1e300, got {shown(value)}") from None


def _corrupt(message: str) -> RecordingError:
    return RecordingError(f"{message}: the file is corrupt")


def check_header(header, name: str, file_version: tuple) -> dict:
    """The HEADER record's fields, of the types the format gives them; returns the header."""
    if not isinstance(header, dict):
        raise _corrupt(f"{name}: the header is not a table of fields")
    version = header.get("format_version", list(file_version))
    if (not isinstance(version, list) or not version
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in version)):
        raise _corrupt(f"{name}: the header's format_version must be a list of whole numbers like "
                       f"[{FORMAT_MAJOR}, 0], got {shown(version)}")
    if version[0] > FORMAT_MAJOR:
        raise RecordingError(f"{name} uses recording format {version}, newer than this kvscope reads "
                             f"({FORMAT_MAJOR}.x): open it with a newer kvscope")
    if version[0] != file_version[0]:  # the two records of one write cannot disagree
        raise _corrupt(f"{name}: the header's format_version {version} is not the file's "
                       f"{file_version[0]}.{file_version[1]}")
    whole(header.get("block_size"), f"{name}: the header's block_size", 1, MAX_BLOCK_SIZE)
    whole(header.get("num_blocks"), f"{name}: the header's num_blocks", 1, MAX_NUM_BLOCKS)
    kinds = header.get("event_kinds", [])
    if not isinstance(kinds, list) or len(kinds) > MAX_EVENT_KINDS or not all(isinstance(k, str) for k in kinds):
        raise _corrupt(f"{name}: the header's event_kinds must be a list of event names, got {shown(kinds)}")
    for key in _HEADER_TABLES:
        if key in header and not isinstance(header[key], dict):
            raise _corrupt(f"{name}: the header's {key} must be a table, got {shown(header[key])}")
    if header.get("workload") is not None and not isinstance(header["workload"], dict):
        raise _corrupt(f"{name}: the header's workload must be a table or null, got {shown(header['workload'])}")
    for key in _HEADER_TEXTS:
        if key in header and not isinstance(header[key], str):
            raise _corrupt(f"{name}: the header's {key} must be text, got {shown(header[key])}")
    for key in ("model", "hardware", "workload"):  # each table's name is shown: `export` joins them as text
        table = header.get(key)
        if isinstance(table, dict) and table.get("name") is not None and not isinstance(table["name"], str):
            raise _corrupt(f"{name}: the header's {key}.name must be text, got {shown(table['name'])}")
    outsized = outsized_whole(header)  # the replay rebuilds the model and hardware from it: 10**400 has no float
    if outsized is not None:
        raise _corrupt(f"{name}: the header's {outsized[0][:80]} is {shown(outsized[1])}, past the 64-bit range")
    plan = header.get("plan")
    if isinstance(plan, dict) and plan.get("block_bytes") is not None:  # shown in KiB: 10**400 is no float
        whole(plan["block_bytes"], f"{name}: the header's plan.block_bytes", 0, MAX_BYTES)
    # absent, the format_version is the file's (`export` shows it, and read it as header["format_version"])
    return printable_texts({**header, "format_version": version})


def printable_texts(value, depth: int = 0):
    """value (a header, a note) with every text in it shown escaped where it holds a newline or a
    control character: a label with ESC[2J would clear the terminal `kvscope export` prints it on. Only
    what is shown changes; a file kvscope wrote holds none (a model folder's name may, and is kept)."""
    if isinstance(value, str):
        return escaped(value)
    if depth > MAX_JSON_DEPTH:  # load_json bounds the nesting already
        return value
    if isinstance(value, dict):
        return {printable_texts(k, depth + 1): printable_texts(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [printable_texts(v, depth + 1) for v in value]
    return value


def check_index_head(head: dict | None, name: str) -> dict | None:
    """The index record's summary (a table) and note (text), which `export` shows, escaped as above."""
    if head is None:
        return None
    if head.get("summary") is not None and not isinstance(head["summary"], dict):
        raise _corrupt(f"{name}: the index's summary must be a table, got {shown(head['summary'])}")
    if head.get("note") is not None and not isinstance(head["note"], str):
        raise _corrupt(f"{name}: the index's note must be text, got {shown(head['note'])}")
    return {**head, **{k: printable_texts(head[k]) for k in ("summary", "note") if head.get(k) is not None}}


def _length(arrays: dict, name: str, expected: int, what: str) -> np.ndarray:
    values = arrays.get(name)
    if values is None:
        raise _corrupt(f"{what} has no {name} array")
    if len(values) != expected:
        raise _corrupt(f"{what}: {name} has {len(values):,} entries, expected {expected:,}")
    return values


def _counts(arrays: dict, name: str, expected: int, what: str) -> int:
    """A per-step count array: its length, no negative count; returns their sum."""
    values = _length(arrays, name, expected, what)
    if values.dtype.kind not in "iub" or (len(values) and int(values.min()) < 0):
        raise _corrupt(f"{what}: {name} must hold counts (whole numbers, 0 or more)")
    return int(values.sum())


def _in_range(arrays: dict, name: str, high: int, what: str) -> None:
    values = arrays[name]
    if high < 1 and len(values):
        raise _corrupt(f"{what}: {name} holds {len(values):,} values where none can be (the header names none)")
    if values.dtype.kind not in "iub" or (len(values) and (int(values.min()) < 0 or int(values.max()) >= high)):
        raise _corrupt(f"{what}: {name} must hold whole numbers from 0 to {high - 1:,}")


def check_keyframe(head: dict, arrays: dict, num_blocks: int, what: str) -> tuple:
    """A KEYFRAME: an array per block field of num_blocks entries, request columns of one length;
    returns its scalars (time_s, step, kv_usage, num_running, num_waiting)."""
    for field in BLOCK_FIELDS:
        values = arrays.get(field)
        if values is None or len(values) != num_blocks:
            raise _corrupt(f"{what} has no {field} array for {num_blocks:,} blocks")
    requests = _length(arrays, "request.request_id", len(arrays.get("request.request_id", ())), what)
    for name in REQUEST_DTYPE.names:
        if f"request.{name}" in arrays:
            _length(arrays, f"request.{name}", len(requests), what)
    return (_number(head.get("time_s"), f"{what}: time_s"), whole(head.get("step"), f"{what}: step", -1),
            _number(head.get("kv_usage"), f"{what}: kv_usage"), whole(head.get("num_running"), f"{what}: num_running"),
            whole(head.get("num_waiting"), f"{what}: num_waiting"))


def check_record(record_type: int, head: dict, arrays: dict, num_steps: int, num_blocks: int, num_kinds: int,
                 what: str) -> None:
    """A STEPS or DELTAS record of num_steps steps: every table it must have, of consistent
    lengths, with indices inside the pool and event kinds the header names. Other types pass."""
    if record_type == STEPS:
        _check_steps(head, arrays, num_steps, num_kinds, what, num_blocks)
    elif record_type == DELTAS:
        _check_deltas(arrays, num_steps, num_blocks, what)


# A step's series as the engine writes them. Forged past these they were exported as they came: a
# NaN start time was a traceback in the Perfetto export and "nan" cells in the CSV, a kv_usage of 5
# a pool 500 % full, a clock that ran backwards a timeline folded over itself.
_STEP_SECONDS = ("start_time_s", "duration_s", "compute_time_s", "memory_time_s")
_STEP_COUNTS = ("num_running", "num_waiting", "num_tokens", "num_prefill_tokens", "unused_slots", "num_preemptions",
                "num_output_tokens")
_IN_ORDER = ("step.step", "step.start_time_s")  # a repeated step number is an out-of-memory step's; none goes back


def _series(arrays: dict, name: str, what: str, high: float = np.inf) -> None:
    """A per-step series of finite numbers from 0 to high."""
    values = arrays[name]
    if not len(values):
        return
    if values.dtype.kind == "f":
        bad = ~np.isfinite(values) | (values < 0) | (values > high)
    else:
        bad = (values < 0) | (values > high) if values.dtype.kind in "iu" else np.ones(len(values), bool)
    if bad.any():
        at = int(np.argmax(bad))
        span = f"from 0 to {high:g}" if np.isfinite(high) else "0 or more"
        raise _corrupt(f"{what}: {name} must hold finite numbers {span}; its entry {at:,} is {values[at]!s:.24}")
    if name in _IN_ORDER and len(values) > 1 and (np.diff(values) < 0).any():
        at = int(np.argmax(np.diff(values) < 0)) + 1
        raise _corrupt(f"{what}: {name} goes backwards at entry {at:,} ({values[at - 1]!s:.24} then "
                       f"{values[at]!s:.24}); a recording's steps are in order")


def _check_steps(head: dict, arrays: dict, num_steps: int, num_kinds: int, what: str, num_blocks: int) -> None:
    for name, _ in STEP_COLUMNS:
        _length(arrays, f"step.{name}", num_steps, what)
    for name in ("step", *_STEP_SECONDS, *_STEP_COUNTS):
        _series(arrays, f"step.{name}", what)
    _series(arrays, "step.kv_usage", what, 1.0)
    batch = _counts(arrays, "step.batch_size", num_steps, what)
    events = _counts(arrays, "step.num_events", num_steps, what)
    for name in ("batch.request_id", "batch.num_new_tokens", "batch.is_prefill"):
        _length(arrays, name, batch, what)
    for name, _ in EVENT_COLUMNS:
        _length(arrays, f"event.{name}", events, what)
    _series(arrays, "event.time_s", what)  # the engine's clock when it happened (a NaN was exported as one)
    _length(arrays, "event.blocks", _counts(arrays, "event.num_blocks", events, what), what)
    _in_range(arrays, "event.kind", num_kinds, what)
    # an event's blocks are the pool's (a block 10**9 or -5 was exported and replayed as it came); its
    # request is one of the run's, or -1 for the engine's own (out of memory), as a batch's are the run's
    _in_range(arrays, "event.blocks", num_blocks, what)
    _series(arrays, "batch.request_id", what)
    _series(arrays, "batch.num_new_tokens", what)
    if len(arrays["event.request_id"]) and int(arrays["event.request_id"].min()) < -1:
        raise _corrupt(f"{what}: event.request_id must hold request ids (0 or more), or -1 for the engine's own events")
    details = head.get("event_details", {})
    if not isinstance(details, dict) or not all(isinstance(v, str) for v in details.values()):
        raise _corrupt(f"{what}: event_details must be a table of texts")
    finished = len(arrays.get("finished.request_id", ()))
    for name, _ in FINISHED_COLUMNS:
        if f"finished.{name}" in arrays:
            _length(arrays, f"finished.{name}", finished, what)
            if name.endswith("_s"):  # seconds the engine measured: a NaN TTFT was exported as one
                _series(arrays, f"finished.{name}", what)


def delta_limits(num_steps: int, num_blocks: int) -> dict:
    """What a DELTAS record's block arrays may declare, checked before they are decoded: a block's
    field changes at most once a step, so a chunk holds at most num_steps x num_blocks changes of
    it (a 200 KB file claimed 40,000,000 of them for a pool of 42 blocks: 560 MB, read as true)."""
    most = num_steps * num_blocks
    why = f"the {most:,} changes {num_steps:,} step(s) can make to a pool of {num_blocks:,} blocks"
    limits = {f"{field}.{part}": (most, why) for field in BLOCK_FIELDS for part in ("index", "value")}
    limits.update({f"{field}.counts": (num_steps, f"one count per step ({num_steps:,})") for field in BLOCK_FIELDS})
    return limits


def _check_deltas(arrays: dict, num_steps: int, num_blocks: int, what: str) -> None:
    for field in BLOCK_FIELDS:
        changed = _counts(arrays, f"{field}.counts", num_steps, what)
        if num_steps and int(arrays[f"{field}.counts"].max()) > num_blocks:
            raise _corrupt(f"{what}: {field}.counts must hold counts of at most {num_blocks:,} (the pool's blocks, "
                           "each changed at most once a step)")
        _length(arrays, f"{field}.index", changed, what)
        _length(arrays, f"{field}.value", changed, what)
        _in_range(arrays, f"{field}.index", num_blocks, what)
    for name, _ in SNAPSHOT_COLUMNS:
        _length(arrays, f"snapshot.{name}", num_steps, what)
        _series(arrays, f"snapshot.{name}", what, 1.0 if name == "kv_usage" else np.inf)
    upserts = _counts(arrays, "upsert.counts", num_steps, what)
    order = _length(arrays, "upsert.order", upserts, what)
    for name in REQUEST_DTYPE.names:
        _fits(_length(arrays, f"upsert.{name}", upserts, what), REQUEST_DTYPE[name], f"upsert.{name}", what)
    if upserts and not np.array_equal(np.sort(order), np.arange(upserts)):
        raise _corrupt(f"{what}: upsert.order must hold each of 0 to {upserts - 1:,} once")
    _length(arrays, "removed.request_id", _counts(arrays, "removed.counts", num_steps, what), what)
    for name in ("entry.num_computed_tokens", "entry.num_tokens"):
        if name not in arrays:
            raise _corrupt(f"{what} has no {name} array")
        _fits(arrays[name], np.dtype(np.int32), name, what)


def _fits(values: np.ndarray, dtype: np.dtype, name: str, what: str) -> None:
    """Integer values that the request table's column (dtype) can hold."""
    if dtype.kind not in "iu" or not len(values):
        return
    info = np.iinfo(dtype)
    if values.dtype.kind not in "iub" or int(values.min()) < max(info.min, -(2**62)) or int(values.max()) > info.max:
        raise _corrupt(f"{what}: {name} must hold whole numbers from {info.min:,} to {info.max:,}")


# -- a recording of an attached vLLM server (attached_writer.py) ---------------------------------------

_ATTACH_TEXTS = ("url", "version")
_ATTACH_LISTS = ("model_names", "engines", "sources")
MAX_NOTICE_TEXT = 4_000
NOTICE_FIELDS = 8  # tick, batches before it, kind, stream, first seq, last seq, count, message


def _table(value, what: str) -> dict:
    if not isinstance(value, dict):
        raise _corrupt(f"{what} must be a table, got {shown(value)}")
    return value


def _text(value, what: str, limit: int = MAX_NOTICE_TEXT) -> str:
    if not isinstance(value, str) or len(value) > limit:
        raise _corrupt(f"{what} must be text of at most {limit:,} characters, got {shown(value)}")
    return value


def check_attach_header(header: dict, name: str) -> dict:
    """The server an attached recording followed (header "attach") and how ("target")."""
    attach = _table(header.get("attach"), f"{name}: the header's attach")
    from kvscope.app.lab.vllm.metrics import MAX_ENGINES, MAX_MODEL_NAMES  # an attached recording's only

    for key in _ATTACH_TEXTS:
        _text(attach.get(key), f"{name}: the header's attach.{key}", 2_000)
    # as many as an attach takes: a server's LoRA adapters by the hundred, its metrics' 1,024 engines
    most = {"model_names": MAX_MODEL_NAMES, "engines": MAX_ENGINES, "sources": MAX_EVENT_KINDS}
    for key in _ATTACH_LISTS:
        values = attach.get(key)
        if not isinstance(values, list) or len(values) > most[key] or not all(isinstance(v, str) for v in values):
            raise _corrupt(f"{name}: the header's attach.{key} must be a list of at most {most[key]:,} texts, "
                           f"got {shown(values)}")
    whole(attach.get("num_gpu_blocks"), f"{name}: the header's attach.num_gpu_blocks", 1, MAX_NUM_BLOCKS)
    whole(attach.get("block_size"), f"{name}: the header's attach.block_size", 1, MAX_BLOCK_SIZE)
    if attach.get("replay") is not None:
        _text(attach["replay"], f"{name}: the header's attach.replay", 2_000)
    for key in ("cache_config", "unavailable"):
        table = _table(attach.get(key), f"{name}: the header's attach.{key}")
        if not all(isinstance(v, str) for v in table.values()):
            raise _corrupt(f"{name}: the header's attach.{key} must map names to texts")
    prediction = attach.get("prediction")
    if not isinstance(prediction, list) or not all(isinstance(row, dict) and isinstance(row.get("name"), str)
                                                   and isinstance(row.get("unit"), str)
                                                   and isinstance(row.get("note"), str) for row in prediction):
        raise _corrupt(f"{name}: the header's attach.prediction must be a list of figures")
    for row in prediction:
        for key in ("predicted", "observed", "error"):
            if row.get(key) is not None:
                _number(row[key], f"{name}: the header's attach.prediction {key}")
    _table(header.get("target"), f"{name}: the header's target")
    for key in ("model", "hardware"):
        if header.get(key) is not None:
            _table(header[key], f"{name}: the header's {key}")
    return header


def check_attach_start(head: dict, arrays: dict, counts: tuple, subscriber: tuple, what: str) -> None:
    """ATTACH_START: the map's state (map.state, msgpack bytes) and the counts when recording began."""
    _number(head.get("time_s"), f"{what}: time_s")
    events = _table(head.get("events"), f"{what}: events")
    if len(events) > MAX_EVENT_KINDS:
        raise _corrupt(f"{what}: events names {len(events):,} kinds")
    for kind, n in events.items():
        whole(n, f"{what}: events {kind[:40]}")
    for group, names in (("counts", counts), ("subscriber", subscriber)):
        table = _table(head.get(group), f"{what}: {group}")
        for key in names:
            whole(table.get(key), f"{what}: {group}.{key}")
    state = arrays.get("map.state")
    if state is None or state.dtype != np.uint8:
        raise _corrupt(f"{what} has no map.state bytes")


def check_ticks(head: dict, arrays: dict, num_ticks: int, point_columns: tuple, subscriber: tuple,
                what: str) -> None:
    """ATTACH_TICKS of num_ticks ticks: tables of consistent lengths, streams and notices in range."""
    times = _length(arrays, "tick.time_s", num_ticks, what)
    if times.dtype.kind != "f" or not np.isfinite(times).all():
        raise _corrupt(f"{what}: tick.time_s must hold finite seconds")
    batches = _counts(arrays, "tick.num_batches", num_ticks, what)
    for name in ("tick.has_point", "tick.metric_restart", *(f"tick.{n}" for n in subscriber)):
        _length(arrays, name, num_ticks, what)
    for name in subscriber:
        _counts(arrays, f"tick.{name}", num_ticks, what)
    points = int(np.count_nonzero(arrays["tick.has_point"]))
    for name in point_columns:
        _length(arrays, f"point.{name}", points, what)
    for name in ("batch.seq", "batch.stream", "batch.replayed"):
        _length(arrays, name, batches, what)
    _length(arrays, "batch.bytes", _counts(arrays, "batch.length", batches, what), what)
    streams = head.get("streams")
    if (not isinstance(streams, list) or len(streams) > MAX_STEPS
            or not all(isinstance(s, list) and len(s) == 3 and isinstance(s[0], str) and isinstance(s[1], str)
                       and (s[2] is None or isinstance(s[2], int) and not isinstance(s[2], bool)) for s in streams)):
        raise _corrupt(f"{what}: streams must be a list of [source, topic, data-parallel rank]")
    _in_range(arrays, "batch.stream", len(streams), what)
    notices = head.get("notices")
    if not isinstance(notices, list) or not all(isinstance(n, list) and len(n) == NOTICE_FIELDS for n in notices):
        raise _corrupt(f"{what}: notices must be a list of [{NOTICE_FIELDS} fields]")
    per_tick = arrays["tick.num_batches"]
    for n in notices:
        tick = whole(n[0], f"{what}: a notice's tick", 0, num_ticks - 1)
        whole(n[1], f"{what}: a notice's place in its tick", 0, int(per_tick[tick]))
        _text(n[2], f"{what}: a notice's kind", 40)
        whole(n[3], f"{what}: a notice's stream", -1, len(streams) - 1)
        for value in (n[4], n[5]):
            if value is not None:
                whole(value, f"{what}: a notice's seq", -(2**63), 2**63 - 1)
        whole(n[6], f"{what}: a notice's count")
        _text(n[7], f"{what}: a notice's message")
    failures = head.get("failures")
    if not isinstance(failures, list) or not all(isinstance(f, list) and len(f) == 2 for f in failures):
        raise _corrupt(f"{what}: failures must be a list of [tick, message]")
    for tick, message in failures:
        whole(tick, f"{what}: a failed scrape's tick", 0, num_ticks - 1)
        _text(message, f"{what}: a failed scrape's message")
