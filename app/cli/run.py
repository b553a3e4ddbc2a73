"""`kvscope run`: a workload through the engine, headless, with progress and a summary."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path

from kvscope.engine import Engine
from kvscope.engine.config import DEFAULT_HARDWARE, DEFAULT_MODEL, DEFAULT_REAL_MODEL, ConfigError, EngineArgs
from kvscope.app.lab.presets import THIS_MACHINE, load_workload, load_workload_file, preset_file
from kvscope.app.lab.output_path import (check_distinct_outputs, check_file_output, check_output_path,
                                         write_json_output)
from kvscope.app.lab.trained_model import TRAINED_MODEL
from kvscope.app.lab.recording.format import RecordingError
from kvscope.app.lab.workload import ALL_ROWS, WorkloadSpec, generate_requests, refuse_ignored, refuse_ignored_by_trace
from kvscope.engine.checks import MAX_SEED, whole_number
from kvscope.app.lab.calibration import calibration_note
from kvscope.engine.memory_math import full_length_reason
from kvscope.engine.events import EventKind

from kvscope.app.cli import combinations, options
from kvscope.app.cli.math import math_rows
from kvscope.app.host.process_tuning import tune_for_engine
from kvscope.engine.units import format_bytes, format_percent, format_seconds
from kvscope.app.cli import surroundings
from kvscope.app.cli.output import counted, recorded, shown, table

DEFAULT_WORKLOAD = "chat"


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("run", help="run a workload through the engine headlessly and summarise it")
    options.add_model_options(parser)
    options.add_hardware_options(parser)
    options.add_engine_options(parser)
    options.add_scheduler_options(parser)
    options.add_backend_options(parser)
    group = parser.add_argument_group("workload")
    group.add_argument("--workload", metavar="PRESET",
                       help=f"workload preset, or a workload .toml file (default {DEFAULT_WORKLOAD})")
    group.add_argument("--trace", metavar="FILE", help="replay a trace CSV (TIMESTAMP, ContextTokens, GeneratedTokens)")
    group.add_argument("--requests", type=options.whole, help="number of requests (default: the workload's)")
    group.add_argument("--arrival-rate", type=options.number,
                       help="Poisson arrivals per second (0: all at once; default: the workload's)")
    seed = EngineArgs().seed
    group.add_argument("--seed", type=options.whole, default=seed,
                       help=f"random seed (default {seed}): same seed, same run")
    parser.add_argument("--json", metavar="OUT", help="write the summary as JSON to OUT ('-' for stdout)")
    parser.add_argument("--quiet", action="store_true", help="no progress line")
    parser.add_argument("--record", metavar="FILE",
                        help="record the run (steps, events, block-map deltas) to FILE (.kvrec) for "
                             "`kvscope gui --replay`")
    parser.set_defaults(func=run)


def input_files(args) -> dict:
    """The files a run reads, by what they are: an output flag naming one of them is refused.
    That is every file: the config.json of a --config folder, the trace a workload file names, and
    the preset files (built-in or the user's) that --model, --hardware and --workload name."""
    config = args.config
    if config and Path(config).is_dir():
        config = str(Path(config) / "config.json")
    given = {"trace": args.trace, "model config": config,
             "workload file": args.workload if (args.workload or "").endswith(".toml") else None}
    if args.model_path:  # every file of the folder: its weights and tokenizer are read too
        given.update(options.model_input_files(None, args.model_path))
    if given["workload file"]:
        with contextlib.suppress(ConfigError):  # a broken file is refused, with its reason, when it is read
            given["trace the workload file names"] = load_workload_file(args.workload).trace_path
    model = args.model or (DEFAULT_REAL_MODEL if args.backend == "real" else DEFAULT_MODEL)
    for what, kind, name in (("model preset", "models", None if config or args.model_path else model),
                             ("hardware preset", "hardware", args.hardware or DEFAULT_HARDWARE),
                             ("workload preset", "workloads",
                              None if given["workload file"] or args.trace else args.workload or DEFAULT_WORKLOAD)):
        if name:
            given[what] = preset_file(kind, name)
    given.update(options.calibration_profile_files(args.hardware))
    return {what: str(path) for what, path in given.items() if path}


TOO_LONG_ADVICE = "give --max-model-len, more memory, or --accounting lesson to run it anyway"


def workload_from_args(args) -> WorkloadSpec:
    if args.trace and args.workload:
        raise ConfigError(f"--trace {args.trace} and --workload {args.workload} both say what requests to send; "
                          "give one")
    if args.trace:
        if not Path(args.trace).exists():
            raise ConfigError(f"trace {args.trace}: no such file")
        spec = WorkloadSpec(name=Path(args.trace).stem, description=f"trace replay of {args.trace}",
                            trace_path=args.trace, num_requests=ALL_ROWS)
    elif (args.workload or "").endswith(".toml"):
        spec = load_workload_file(args.workload)
    else:
        spec = load_workload(args.workload or DEFAULT_WORKLOAD)
    if spec.trace_path is not None and args.arrival_rate is not None:
        refuse_ignored_by_trace(["--arrival-rate"], f"workload {spec.name}")
    if (spec.trace_path is not None and not spec.shared_prefix_fraction and args.backend != "real"
            and "seed" in getattr(args, "given_flags", ())):  # `--seed 1..5` were five runs of one result
        refuse_ignored(["--seed"], f"workload {spec.name}", "replays a trace, whose rows give each request's arrival "
                       "and lengths, and shares no prefix; the seed draws only the prompts' token ids, which the "
                       "simulated backend does not read (no two prompts share a block either way)")
    combinations.refuse_requests_past_trace(spec, args.requests, f"trace {args.trace}" if args.trace else
                                            f"workload {spec.name}'s trace {spec.trace_path}",
                                            (spec.num_requests, f"workload {spec.name}'s"))
    return spec.with_overrides(num_requests=args.requests, arrival_rate_per_s=args.arrival_rate)


def build_engine(args) -> tuple[Engine, WorkloadSpec]:
    spec = workload_from_args(args)
    options.refuse_what_the_lesson_ignores(args, "run --backend real" if args.backend == "real" else "run")
    if args.allocation == "contiguous" and args.enable_prefix_caching and \
            "enable_prefix_caching" in getattr(args, "given_flags", ()):  # ran, 0 % hits, without a word
        raise ConfigError("--enable-prefix-caching: --allocation contiguous reserves each request its own "
                          "max_model_len region and shares no blocks, so no prefix is ever cached; drop it, or use "
                          "--allocation paged")
    if args.backend == "real":
        engine = build_real_engine(args)
    else:
        if args.model_path:
            raise ConfigError(options.MODEL_PATH_NEEDS_REAL)
        real_only = [flag for flag, value in (("--device", args.device), ("--dtype", args.dtype),
                                              ("--quantization", args.quantization),
                                              ("--allow-pickle", args.allow_pickle or None)) if value is not None]
        if real_only:  # the simulated backend would run without them, silently
            raise ConfigError(f"{', '.join(real_only)}: the real backend's (it loads and runs the weights); use "
                              "them with --backend real, or size simulated weights with --weight-dtype")
        model, hardware = options.model_from_args(args), options.hardware_from_args(args)
        engine_args = options.engine_args_from_args(args)
        combinations.refuse_cpu_share_simulated(args, hardware)
        combinations.refuse_a_split_not_typed(args, model, hardware)
        engine = Engine(model, hardware, engine_args)
        options.refuse_kv_budget_beyond_memory(engine.plan, args)
        combinations.refuse_what_a_set_budget_ignores(args, hardware, engine_args, engine.resolved, "run")
    too_long = full_length_reason(engine.plan)
    if too_long and engine.args.accounting == "vllm":  # as vLLM refuses to start; the lesson's accounting
        # is a what-if that may run a pool smaller than one request (the longer ones are rejected on arrival)
        raise ConfigError(f"{too_long}: {TOO_LONG_ADVICE}")
    try:
        tokenizer = text_tokenizer(engine)
    except ConfigError:  # a broken chat template: only a workload of text needs it
        if spec.is_text:
            raise
        tokenizer = None
    engine.add_workload(generate_requests(spec, engine.model.vocab_size, seed=args.seed, tokenizer=tokenizer,
                                          longest_request=engine.resolved.max_model_len))
    return engine, spec


def text_tokenizer(engine: Engine):
    """The real model's chat tokenizer, if it has one: a chat workload's requests are then its text."""
    if engine.runner.name != "real":
        return None
    from kvscope.app.lab.text_tokenizer import chat_tokenizer_for

    return chat_tokenizer_for(engine.runner.loaded)


def build_real_engine(args, record_outputs: bool = False) -> Engine:
    """The real backend on this machine: a local model directory, or a preset's shape with random weights."""
    # this-machine names where the real backend runs (as `gui --backend real` takes it), not a simulated target
    simulated = [f"{flag} {value:g}" if isinstance(value, float) else f"{flag} {value}" for flag, value in (
        ("--hardware", None if args.hardware == THIS_MACHINE else args.hardware), ("--memory-bytes", args.memory_bytes),
        ("--memory-gib", args.memory_gib)) if value is not None]
    if simulated:
        raise ConfigError(f"{', '.join(simulated)}: describe{'s' * (len(simulated) == 1)} a simulated target; the real "
                          "backend runs on this machine (size its KV pool with --kv-cache-memory-bytes; on CUDA also "
                          "--gpu-memory-utilization)")
    if args.config:
        raise ConfigError("--config gives a shape for the simulated backend; the real backend takes --model-path DIR "
                          "or a --model preset (random weights of its shape)")
    sized = [flag for flag, value in (("--weight-dtype", args.weight_dtype), ("--params", args.params),
                                      ("--weights-bytes", args.weights_bytes)) if value is not None]
    if sized:  # the real backend loads the weights it is given: these would change nothing
        raise ConfigError(f"{', '.join(sized)}: size a simulated model's weights; the real backend loads them at "
                          "--dtype (fp32, bf16, fp16), quantised with --quantization int8 or nf4")
    combinations.refuse_shape_edits_of_real_weights(args, TRAINED_MODEL.name, DEFAULT_REAL_MODEL)
    combinations.refuse_pickle_permission_for_a_preset(args)
    # before torch is imported (seconds) and minutes of loading
    options.check_real_device(args.device)
    options.check_real_model(args.model, args.model_path, args.allow_pickle)
    from kvscope.app.lab.real_backend import create_real_engine, load_for_real_backend

    edited = any(getattr(args, f) is not None for f in ("layers", "attention_heads", "kv_heads", "head_dim"))
    architecture = options.model_from_args(args, default_model=DEFAULT_REAL_MODEL) if edited else None
    refuse_before_loading(args, architecture or options.model_from_args(args, default_model=DEFAULT_REAL_MODEL))
    if not args.model_path:
        name = architecture.name if architecture else (args.model or DEFAULT_REAL_MODEL)
        kind = "trained weights (converted" if name == TRAINED_MODEL.name else "random weights (built"
        status(f"loading {name} with {kind} into the kvscope cache on first use) ...")
    else:
        status(f"loading {args.model_path} ...")
    loaded = load_for_real_backend(args.model or DEFAULT_REAL_MODEL, args.model_path, args.device, args.dtype,
                                   args.quantization, args.allow_pickle, architecture)
    status(f"loaded {loaded.label}")
    return create_real_engine(loaded, options.engine_args_from_args(args), record_outputs=record_outputs)


def refuse_before_loading(args, shape) -> None:
    """What the engine refuses of the model once it is loaded, said before `loading ...` and its minutes
    (three lines, the refusal last): more than one device, a --max-model-len past the model's positions,
    random weights larger than this machine's memory."""
    tp = args.tensor_parallel_size
    if tp not in (None, 1):
        raise ConfigError(f"--tensor-parallel-size {tp:,}: the real backend runs on one device; tensor parallelism "
                          "is simulated only")
    if args.max_model_len is not None and shape.max_position_embeddings_given and args.max_model_len > shape.longest_context:
        from kvscope.engine.config import resolve_engine_args
        from kvscope.app.lab.presets import load_hardware

        # its first check is this one: the engine's own words, as after loading
        resolve_engine_args(options.engine_args_from_args(args), shape, load_hardware(DEFAULT_HARDWARE))
    from kvscope.app.lab.models.loader import check_weights_fit, resolve_device

    device = resolve_device(args.device, "--device")
    # weights that cannot be built here come first: the KV budget's room beside them is moot
    if not args.model_path and shape.name != TRAINED_MODEL.name:  # random weights, built in fp32
        check_weights_fit(shape, device, "fp32")
    if device.type == "cpu":
        combinations.refuse_share_of_a_cpu_budget(args, "on this machine's CPU (the real backend's device)",
                                                  memory_flags=False)
        combinations.refuse_eager_on_a_cpu(args)
        too_long = combinations.refuse_cpu_budget_without_room(args, shape, options.engine_args_from_args(args))
        if too_long:  # in the words build_engine says it in, after loading
            raise ConfigError(f"{too_long}: {TOO_LONG_ADVICE}")
    budget = args.kv_cache_memory_bytes
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") if device.type == "cpu" else None
    if budget is not None and memory is not None and budget > memory:  # its tensors are allocated: swap, or killed
        raise ConfigError(f"--kv-cache-memory-bytes {budget:g}: a KV pool of {format_bytes(int(budget))} is more than "
                          f"this machine's {format_bytes(memory)} of memory; give at most {memory:,} bytes")


def status(message: str) -> None:
    print(f"kvscope: {shown(message)}", file=sys.stderr, flush=True)  # a path in it may hold ESC


def kept_recording(path: str, steps: int) -> str | None:
    """What a new --record file holds after the run stopped early (Ctrl+C, SIGTERM, an engine error), or
    None where no file keeps it (/dev/null). It kept the steps so far and said only "kvscope:
    interrupted", leaving the user to wonder whether the file was written, and of what."""
    if not os.path.isfile(path):
        return None
    return (f"{path} keeps the {counted(steps, 'step')} run before it (its note says the run stopped early): "
            f"`kvscope gui --replay {path}` replays {'it' if steps == 1 else 'them'}")


def closed(recorder, path: str, existed: bool, *args, **kwargs) -> int:
    """recorder.close(...); a write that failed (a full disk, `ulimit -f`: found when the records
    queued are written) says what it left at path."""
    try:
        return recorder.close(*args, **kwargs)
    except RecordingError as failure:
        left = left_by_failed_write(path, existed)
        raise (ConfigError(f"{failure} ({left})") if left else failure) from None


def left_by_failed_write(path: str, existed: bool) -> str | None:
    """What a --record file is after a write to it failed (a full disk, `ulimit -f`), or None where no
    file keeps it (/dev/full). A new file was left cut off mid-record, said only as "cannot write the
    recording": one holding no whole step (the usual case: a record holds hundreds) is removed."""
    from kvscope.app.lab.recording.reader import steps_held

    if existed:
        return f"{path} was left as it was"
    if not os.path.isfile(path):
        return None
    steps = steps_held(path)
    if steps == 0:
        with contextlib.suppress(OSError):
            os.remove(path)
        return f"no whole step had been written, so {path} was removed"
    return (f"{path} keeps the first {counted(steps, 'step')}, cut off without its index: "
            f"`kvscope gui --replay {path}` replays {'it' if steps == 1 else 'them'}")


class Progress:
    """One status line on stderr: rewritten in place on a terminal, a line every few seconds otherwise."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.tty = sys.stderr.isatty()
        self.interval = 0.25 if self.tty else 5.0
        self.started = time.monotonic()
        self.last = self.started

    def __call__(self, engine: Engine, step, force: bool = False) -> None:
        if self.due(force):
            m = engine.metrics
            self.show(f"step {engine.step_count:,}  engine clock {engine.clock:,.1f} s  completed {m.completed:,}  "
                      f"rejected {m.rejected:,}  running {len(engine.scheduler.running)}  "
                      f"waiting {len(engine.scheduler.waiting)}  KV {format_percent(engine.kv.usage)}")

    def due(self, force: bool) -> bool:
        """Whether a line is wanted now (at most one per interval, unless forced)."""
        if not self.enabled:
            return False
        now = time.monotonic()
        if not force and now - self.last < self.interval:
            return False
        self.last = now
        return True

    def show(self, text: str) -> None:
        line = f"{text}  wall {self.last - self.started:.1f} s"
        if self.tty:
            print("\r" + line[:160].ljust(120), end="", file=sys.stderr, flush=True)
        else:
            print(line, file=sys.stderr, flush=True)

    def done(self) -> None:
        if self.enabled and self.tty:
            print(file=sys.stderr)


# The wall: the pool (nearly) full while requests wait for room -- the moment the seeds' lesson is about.
KV_FULL_SHARE = 0.99


class WallWatch:
    """The engine clock when the KV pool first hit the wall, for the summary: the number that says
    whether a run shows the lesson at all, and how soon. A contiguous pool hits it earlier: when
    its free blocks cannot hold one more max_model_len reservation (three of 512 blocks in a pool
    of 1,657 leave 121: 93 % in use, and nobody else gets in)."""

    def __init__(self, engine):
        self.full_at_s: float | None = None
        contiguous = engine.args.allocation == "contiguous"
        self.reservation_blocks = engine.kv.blocks_per_request if contiguous else None
        self.num_blocks = engine.kv.num_blocks

    def __call__(self, step) -> None:
        if self.full_at_s is None and step.num_waiting > 0 and (step.kv_usage >= KV_FULL_SHARE or (
                self.reservation_blocks and (1 - step.kv_usage) * self.num_blocks < self.reservation_blocks)):
            self.full_at_s = step.start_time_s + step.duration_s

    def row(self) -> tuple[str, str]:
        if self.reservation_blocks:
            full = f"fewer free blocks than one {self.reservation_blocks:,}-block max_model_len reservation"
            never = f"the free blocks always held one more {self.reservation_blocks:,}-block reservation"
        else:
            full = f"KV >= {KV_FULL_SHARE * 100:.0f} % in use"
            never = f"KV use never reached {KV_FULL_SHARE * 100:.0f} %"
        if self.full_at_s is None:
            return ("KV pool full at", f"never: {never} while requests waited")
        return ("KV pool full at", f"{format_seconds(self.full_at_s)} of engine clock ({full}, requests waiting)")


class RejectionWatch:
    """Why requests were turned away on arrival (the engine's REJECTED events), for the summary:
    how many of each kind, and the first REPORTED with the engine's reason (a whole trace can
    reject thousands)."""

    REPORTED = 100

    def __init__(self):
        self.kinds: dict[str, int] = {}
        self.first: list[tuple[int, str]] = []  # (request id, the engine's reason)

    def __call__(self, step) -> None:
        for event in step.events:
            if event.kind is EventKind.REJECTED:
                # the engine's two reasons (engine.py _rejection_reason), told apart by what they name
                kind = ("longer than max_model_len" if "max_model_len" in event.detail
                        else "larger than the whole KV pool")
                self.kinds[kind] = self.kinds.get(kind, 0) + 1
                if len(self.first) < self.REPORTED:
                    self.first.append((event.request_id, event.detail))

    def row(self, counted: str) -> tuple[str, str]:
        """The summary's row, with the reasons when the events said them (`counted`: the summary's count)."""
        if not self.first:
            return ("requests rejected", counted)
        first_id, first_reason = self.first[0]
        return ("requests rejected", f"{sum(self.kinds.values()):,} on arrival: "
                + ", ".join(f"{n:,} {kind}" for kind, n in self.kinds.items())
                + f" (the first, request {first_id}: {first_reason})")

    def report(self) -> list[dict]:
        return [{"request_id": i, "reason": reason} for i, reason in self.first]


def fewer_than_100(requests: int | None, why: bool) -> str:
    """What a p99 rests on when that is under 100 requests: the 99th percentile of 20 lies between
    their two largest, a figure a person would read as the tail of many."""
    if not requests or requests >= 100:
        return ""
    return f"(of {counted(requests, 'request')}" + (": a p99 of under 100 is near their largest)" if why else ")")


def _p50_p99(s: dict, name: str, requests: int | None, why: bool = False) -> str:
    few = fewer_than_100(requests, why)
    return f"{format_seconds(s[name + '_p50_s'])} / {format_seconds(s[name + '_p99_s'])}" + (f"  {few}" if few else "")


def _busy(s: dict) -> str:
    """The span the time-weighted means are taken over: the engine's steps, not the idle time between
    arrivals (a mean of 6.8 % over 213 s of steps was printed bare for a 532 s run)."""
    if s["busy_time_s"] >= s["duration_s"]:
        return "the run's steps"
    return f"the {format_seconds(s['busy_time_s'])} of steps, not the {format_seconds(s['duration_s'])} run"


def summary_rows(summary: dict) -> list[tuple[str, str]]:
    s = summary
    return [
        ("requests completed", f"{s['completed']:,}"),
        ("requests rejected", f"{s['rejected']:,}"),
        ("preemptions", f"{s['preemptions']:,}"),
        ("engine steps", f"{s['steps']:,}"),
        ("duration (engine clock)", format_seconds(s["duration_s"])),
        ("output throughput", f"{s['throughput_tokens_per_s']:,.1f} tokens/s"),
        ("total throughput", f"{s['total_throughput_tokens_per_s']:,.1f} tokens/s (prompt + output)"),
        ("TTFT p50 / p99", _p50_p99(s, "ttft", s["completed"], why=True)),
        ("time per output token p50 / p99", _p50_p99(s, "tpot", s.get("tpot_requests"))),
        ("queue time p50 / p99", _p50_p99(s, "queue_time", s["completed"])),
        ("end-to-end latency p50 / p99", _p50_p99(s, "e2e_latency", s["completed"])),
        ("KV cache usage peak / mean", f"{format_percent(s['peak_kv_usage'])} / {format_percent(s['mean_kv_usage'])}"
                                       f"  (the mean over {_busy(s)})"),
        ("peak running requests", f"{s['peak_running']:,}"),
        ("prefix cache hit rate", format_percent(s["prefix_cache_hit_rate"])),
        ("fragmentation (mean)", f"{format_percent(s['mean_fragmentation'])} of allocated slots unused, "
                                 f"the mean over {_busy(s)}"),
        ("compute utilisation", f"{format_percent(s['compute_utilization'])} of busy time at the compute roofline"),
    ]


def answers_table(rows: list[dict], tokenizer, shown: int = 3) -> str:
    """A few of the run's answers, as a person reads them (all are in the --json report)."""
    from kvscope.app.lab.text_results import question_of, shorten

    if not rows:
        return "Answers: no text request finished"
    ended = {"stop": "the model ended it", "length": "max_tokens ended it"}
    lines = []
    for row in rows[:shown]:
        lines += [(f"request {row['request_id']} asks", question_of(row, tokenizer)),
                  (f"answer ({row['output_tokens']} tokens, {ended.get(row['finish_reason'], row['finish_reason'])})",
                   shorten(row["output"]))]
    stopped = sum(row["finish_reason"] == "stop" for row in rows)
    return table(lines, title=f"Answers: {counted(len(rows), 'request')}, {stopped:,} ended by the model "
                              f"(the first {min(shown, len(rows))} here; all in --json)")


def run_report(engine: Engine, spec: WorkloadSpec, args, summary: dict, wall_s: float) -> dict:
    return {
        **summary,
        "wall_time_s": wall_s,
        "model": engine.model.name,
        "hardware": engine.hardware.name,
        "workload": spec.name,
        "backend": engine.runner.name,
        "weights_bytes": engine.plan.weights_bytes,
        "seed": args.seed,
        "engine_args": engine.engine_settings(),
        "num_blocks": engine.plan.num_blocks,
        "kv_pool_bytes": engine.plan.kv_pool_bytes,
        # what the times rest on: a simulated clock's calibration and expected error (a real run measures them)
        "calibration": engine.hardware.calibration if engine.runner.name == "simulated" else None,
    }


def start_recording(engine: Engine, spec: WorkloadSpec, args):
    from kvscope.app.lab.recording import RunRecorder

    label = engine.runner.loaded.label if engine.runner.name == "real" else \
        f"{engine.model.name} (simulated on {engine.hardware.name})"
    arguments = {k: v for k, v in vars(args).items() if k not in ("func", "command", "given_flags") and v is not None}
    return RunRecorder(engine, args.record, {"label": label, "workload": spec, "seed": args.seed,
                                             "arguments": arguments})


def run(args) -> int:
    tune_for_engine()
    # Say what is wrong with an output path before a long run, not after it.
    inputs = input_files(args)
    check_output_path("--json", args.json, inputs)
    check_file_output("--record", args.record, "a recording", inputs)
    check_distinct_outputs({"--json": args.json, "--record": args.record})
    whole_number(args.seed, "--seed", 0, MAX_SEED)
    engine, spec = build_engine(args)
    progress = Progress(enabled=not args.quiet)
    wall_watch = WallWatch(engine)
    rejections = RejectionWatch()
    started = time.monotonic()
    recorder = None

    def on_step(step):
        if recorder is not None:
            recorder.record_step(step)
        wall_watch(step)
        rejections(step)
        progress(engine, step)

    existed = bool(args.record) and os.path.isfile(args.record)
    try:
        held = surroundings.hold_ending_signals()  # until the recorder that removes its file on them exists
        try:
            recorder = start_recording(engine, spec, args) if args.record else None
        finally:
            surroundings.release(held)  # a Ctrl+C or SIGTERM that came meanwhile is raised here
        summary = engine.run(on_step=on_step)
    except BaseException as exc:  # a new file keeps the steps so far, and says why it stops there
        if recorder is None:  # its first records failed to write (`ulimit -f`): what they left is said
            left = left_by_failed_write(args.record, existed) if isinstance(exc, RecordingError) else None
            if left:
                raise ConfigError(f"{exc} ({left})") from None
            raise
        note = f"the run stopped early: {type(exc).__name__}: {exc}".rstrip(": ")
        closed(recorder, args.record, existed, engine.summary(), note=note, failed=True)
        if recorder.replaced:  # a new file keeps the steps so far: said, as attach says its capture
            kept = kept_recording(args.record, recorder.num_steps)
            if kept and isinstance(exc, ConfigError):
                raise ConfigError(f"{exc} (the run stopped; {kept})") from None
            if kept:  # Ctrl+C, SIGTERM: said before main's "interrupted", which stays the last line
                status(f"the run stopped early: {kept}")
            raise
        if isinstance(exc, ConfigError):  # its one line says both
            raise ConfigError(f"{exc} (the run stopped; {args.record} was left as it was)") from None
        status(f"the run stopped early: {args.record} was left as it was")
        raise
    progress(engine, None, force=True)
    progress.done()
    wall = time.monotonic() - started
    recording_size = closed(recorder, args.record, existed, summary) if recorder is not None else None
    report = run_report(engine, spec, args, summary, wall)
    report["kv_full_at_s"] = wall_watch.full_at_s
    report["rejections"] = rejections.report()  # the first REPORTED with the engine's reason; "rejected" counts all
    tokenizer = text_tokenizer(engine) if spec.is_text else None
    if tokenizer is not None:
        from kvscope.app.lab.text_results import text_results

        report["requests"] = text_results(engine, tokenizer)
    if args.json != "-":
        print(table(math_rows(engine.plan, engine.model, engine.hardware), title="Memory"))
        print()
        rows = summary_rows(summary) + [("wall time", f"{wall:.2f} s ({engine.runner.name} backend)")]
        peak_row = next(i for i, (name, _) in enumerate(rows) if name.startswith("KV cache usage peak"))
        rows.insert(peak_row + 1, wall_watch.row())
        rows = [rejections.row(value) if name == "requests rejected" else (name, value) for name, value in rows]
        if engine.runner.name == "simulated":  # beside the times, before the wall time that closes the table
            rows.insert(len(rows) - 1, ("simulated times", calibration_note(engine.hardware.calibration)))
        if engine.runner.name == "real":
            runner = engine.runner
            rows.append(("model", runner.loaded.label))
            share = runner.forward_time_s / runner.step_time_s if runner.step_time_s else 0.0
            rows.append(("time in the model forward", f"{runner.forward_time_s:.2f} s of {runner.step_time_s:.2f} s "
                                                      f"of step time ({format_percent(share)})"))
        print(table(rows, title=f"Run: {spec.name} on {engine.model.name} / {engine.hardware.name}"))
        if tokenizer is not None:
            print()
            print(answers_table(report["requests"], tokenizer))
    if args.json:
        write_json_output("--json", args.json, report)
    if recording_size is not None:
        # stdout may hold the JSON summary (--json -): the note goes to stderr then
        print(recorded(args.record, f"{format_bytes(recording_size)}, {counted(recorder.num_steps, 'step')}"),
              file=sys.stderr if args.json == "-" else sys.stdout)
    return 0
