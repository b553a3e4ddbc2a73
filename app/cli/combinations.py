"""Flags that are each fine and together change nothing, said before anything runs (the eleventh
hostile pass): a share of the memory where the KV pool is a set budget, more requests than a trace
has rows, passages to score on a model with no tokenizer. Each was taken and ran as if not typed."""

from __future__ import annotations

from kvscope.engine.config import DEFAULT_CPU_KV_CACHE_BYTES, ConfigError
from kvscope.engine.units import format_bytes

from kvscope.app.cli.options import typed_float
from kvscope.app.cli.output import counted

# What sizes the KV pool as a share of the memory (memory x utilization - weights - reserve): on a
# CPU target the pool is a set budget instead (as vLLM's CPU backend takes VLLM_CPU_KVCACHE_SPACE).
SHARE_FLAGS = ("gpu_memory_utilization", "reserve_bytes")


def _typed(args, dest: str) -> bool:
    return dest in getattr(args, "given_flags", frozenset())


def refuse_share_of_a_cpu_budget(args, on_a_cpu: str, memory_flags: bool) -> None:
    """`math --hardware this-machine --gpu-memory-utilization 0.5` (or --reserve-bytes 1e9), and the
    real backend on a CPU with either, printed a 1 GiB pool "(as in vLLM, a set KV budget replaces it)"
    though no budget was typed: the share was taken and applied to nothing.

    on_a_cpu: the target in words ("on a CPU target (--hardware this-machine)");
    memory_flags: whether --memory-gib is there to size the pool from memory instead."""
    if getattr(args, "kv_cache_memory_bytes", None) is not None:
        return  # with a typed budget the engine's own checks say it (give one of them)
    said = []
    for dest in SHARE_FLAGS:
        if _typed(args, dest) and getattr(args, dest, None) is not None:
            said.append(f"--{dest.replace('_', '-')} {typed_float(getattr(args, dest))}")
    if not said:
        return
    one = len(said) == 1
    instead = ", or --memory-gib for a share of that much memory" if memory_flags else ""
    raise ConfigError(f"{', '.join(said)}: {on_a_cpu} the KV pool is a set budget, "
                      f"{format_bytes(DEFAULT_CPU_KV_CACHE_BYTES)} unless --kv-cache-memory-bytes gives another (as "
                      "vLLM's CPU backend takes VLLM_CPU_KVCACHE_SPACE), not a share of the memory: "
                      f"{'it' if one else 'they'} would change nothing; drop {'it' if one else 'them'}, or size "
                      f"the pool with --kv-cache-memory-bytes{instead}")


def refuse_cpu_share_simulated(args, hardware) -> None:
    """The simulated target: a CPU preset (this-machine) whose memory no --memory-* flag made a budget."""
    if hardware.kind == "cpu" and not hardware.memory_is_budget:
        refuse_share_of_a_cpu_budget(args, f"on a CPU target (--hardware {hardware.name})", memory_flags=True)


def refuse_requests_past_trace(spec, requests: int | None, what: str, left_out: tuple[int, str] | None = None) -> None:
    """`run --trace t.csv --requests 5` on a trace of 2 rows ran 2 requests and said "requests
    completed 2", the 5 taken without a word (`compare --scenario static-vs-continuous --requests
    100000` ran the trace's 19,365 for minutes). what: the trace in words ("trace t.csv"); left_out:
    the count run without --requests and whose it is, (96, "the scenario's"), when not the whole trace
    (leaving --requests out was said to "replay them all" where a scenario runs its own 96)."""
    if requests is None or requests < 1 or spec.trace_path is None:
        return  # 0 is the spec's own to refuse: read with a limit of 0 rows it was "no requests in the file"
    from kvscope.app.lab.workload import read_trace

    rows = len(read_trace(spec.trace_path, limit=requests))  # a bad row is said here, as the run would
    if rows < requests:
        them = "it" if rows == 1 else "them all"
        instead = f"to replay {them}" if left_out is None or left_out[0] >= rows else \
            f"for {left_out[1]} {counted(left_out[0], 'request')}"
        raise ConfigError(f"--requests {requests:,}: {what} holds {rows:,} request{'' if rows == 1 else 's'} (one a "
                          f"row); give at most {rows:,}, or leave --requests out {instead}")


def refuse_passages_without_a_tokenizer(args, has_tokenizer: bool, model_name: str) -> None:
    """`verify --model tiny-llama --passages 2` scored nothing (random weights have no tokenizer) and
    exited 0; with --json - not even the note on stderr said so."""
    if has_tokenizer or not args.passages or not _typed(args, "passages"):
        return
    raise ConfigError(f"--passages {args.passages}: {model_name} has no tokenizer, so no English passage can be "
                      "scored on it; drop --passages, or give a model with one (--model smollm2-135m-instruct, "
                      "or a --model-path folder with its tokenizer files)")


# What only vLLM's subtraction reads (its activation peak, its CUDA graphs), by the command: `math`
# sizes nothing else with them; `run` schedules with the scheduler's, so only --enforce-eager there.
SUBTRACTION_ONLY = {"math": ("enforce_eager", "max_num_seqs", "max_num_batched_tokens", "enable_chunked_prefill"),
                    "run": ("enforce_eager",)}


def refuse_what_a_set_budget_ignores(args, hardware, engine_args, resolved, reader: str) -> None:
    """vLLM's accounting subtracts an activation peak (sized by the token budget and max_num_seqs) and
    CUDA graphs (none under --enforce-eager) from the memory; where the KV pool is a set budget nothing
    is subtracted. `math --kv-cache-memory-bytes 4e9 --max-num-seqs 8`, `math --hardware this-machine
    --enforce-eager` printed the very table they printed without the flag."""
    if engine_args.accounting != "vllm" or resolved.kv_cache_memory_bytes is None:
        return  # the lesson's: refused before (refuse_what_the_lesson_ignores)
    ignored = []
    for dest in SUBTRACTION_ONLY[reader]:
        if _typed(args, dest):
            value = getattr(args, dest)
            ignored.append(("--" if value or not isinstance(value, bool) else "--no-") + dest.replace("_", "-")
                           + (f" {value:,}" if isinstance(value, int) and not isinstance(value, bool) else ""))
    if not ignored:
        return
    one = len(ignored) == 1
    why = ("--kv-cache-memory-bytes sets the KV pool" if getattr(args, "kv_cache_memory_bytes", None) is not None
           else f"on a CPU target (--hardware {hardware.name}) the KV pool is a set budget")
    what = "the CUDA graphs" if len(ignored) == 1 and "eager" in ignored[0] else "the activation peak, the CUDA graphs"
    raise ConfigError(f"{', '.join(ignored)} {'changes' if one else 'change'} nothing here ({why}, and nothing is "
                      f"subtracted from it): {'it is' if one else 'they are'} read only for what vLLM's accounting "
                      f"subtracts from the memory ({what})"
                      f"{', and the simulated clock does not read it' if reader == 'run' else ''}; "
                      f"drop {'it' if one else 'them'}")


def refuse_eager_on_a_cpu(args) -> None:
    """The real backend on a CPU captures no CUDA graphs and sizes a set KV budget: --enforce-eager ran as
    without it."""
    if _typed(args, "enforce_eager"):
        flag = "--enforce-eager" if args.enforce_eager else "--no-enforce-eager"
        raise ConfigError(f"{flag}: the real backend on this machine's CPU captures no CUDA graphs (only on CUDA "
                          "does it run decode steps through them), so it would change nothing; drop it")


LOOPBACK = {"127.0.0.1", "localhost", "[::1]", "::1"}


def _tcp(endpoint: str) -> tuple[str, int] | None:
    from kvscope.app.lab.vllm.http_fetch import valid_port
    from kvscope.app.lab.vllm.endpoints import dialable

    if not endpoint.lower().startswith("tcp://"):
        return None
    host, colon, port = dialable(endpoint)[len("tcp://"):].rpartition(":")
    if not colon or not valid_port(port):
        return None  # said by the endpoint's own check, with its reason
    host = host.lower()
    return ("127.0.0.1" if host in LOOPBACK else host), int(port)


def refuse_replay_on_an_event_port(args) -> None:
    """`attach --kv-events tcp://h:5557 --replay tcp://h:5557`, or `--replay tcp://h:5558
    --data-parallel-size 2` (DP rank 1 publishes its events on 5557 + 1): a port holds one socket, so
    the replay was dialed at a publisher and every gap was "the replay socket did not answer" after
    the attach had started. Said before anything is sent. --kv-listen tcp://*:5557 binds that port here:
    a replay dialed at this machine's 5557 would reach kvscope's own socket."""
    listen = getattr(args, "kv_listen", None)
    events, replay = getattr(args, "kv_events", None) or listen, getattr(args, "replay", None)
    if not events or not replay:
        return
    flag = "--kv-events" if getattr(args, "kv_events", None) else "--kv-listen"  # a bound *: this machine's
    ranks = getattr(args, "data_parallel_size", None) or 1
    if events.strip() == replay.strip():
        clash = "the same endpoint"
    else:
        published, replayed = _tcp(events), _tcp(replay)
        if published is None or replayed is None or published[0] != replayed[0]:
            return
        offset = replayed[1] - published[1]
        if not -ranks < offset < ranks:
            return
        clash = ("the same endpoint" if offset == 0 else
                 f"port {max(replayed[1], published[1])}, where DP rank {abs(offset)} "
                 f"{'publishes its events' if offset > 0 else 'answers replays'} (each rank r on the port + r, "
                 f"--data-parallel-size {ranks})")
    raise ConfigError(f"--replay {replay} and {flag} {events} name {clash}: an address holds one socket, the "
                      "publisher's or the replay's; give the server's replay endpoint (its kv-events-config "
                      "replay_endpoint)"
                      + (f", a port {ranks} or more away from the events' port" if ranks > 1 else ""))


SHAPE_FLAGS = ("layers", "attention_heads", "kv_heads", "head_dim")


def refuse_shape_edits_of_real_weights(args, trained_model: str, default_model: str) -> None:
    """The real backend builds random weights of an edited preset's shape; weights it loads have their
    own. `run --backend real --model-path M --layers 2` loaded and ran M's 30 layers (the flag dropped),
    and `--model smollm2-135m-instruct --head-dim 32` said "loading ... trained weights" and ran random
    ones under the trained model's name. Said before loading."""
    edited = [f"--{dest.replace('_', '-')} {getattr(args, dest):,}" for dest in SHAPE_FLAGS
              if getattr(args, dest, None) is not None]
    if not edited:
        return
    flags, one = ", ".join(edited), len(edited) == 1
    if getattr(args, "model_path", None):
        raise ConfigError(f"{flags}: --model-path {args.model_path} is loaded as it is, in the shape of its "
                          f"config.json; {'it edits' if one else 'they edit'} a --model preset's shape, whose random "
                          f"weights are built to fit: drop {'it' if one else 'them'}, or give a preset")
    model = getattr(args, "model", None) or default_model
    if model == trained_model:
        raise ConfigError(f"{flags}: {model}'s trained weights have the shape they were trained in; an edited shape "
                          f"would run random weights under its name: drop {'it' if one else 'them'}, or edit a "
                          "random-weights preset's shape (--model tiny-llama)")


def refuse_pickle_permission_for_a_preset(args) -> None:
    """--allow-pickle lets a --model-path folder's pickled *.bin weights load; a --model preset's weights
    are built (or converted) by kvscope as safetensors, so `run --backend real --model tiny-llama
    --allow-pickle` took a permission nothing asked for."""
    if getattr(args, "allow_pickle", False) and not getattr(args, "model_path", None):
        raise ConfigError("--allow-pickle: lets the pickled *.bin weights of a --model-path folder load; a --model "
                          "preset's weights are built by kvscope as safetensors, and nothing pickled is read: drop it")


def usable_cores() -> int:
    import os

    try:
        return len(os.sched_getaffinity(0))  # the cores this process may run on (a container's, taskset's)
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def refuse_threads_past_the_cores(args, device_type: str) -> None:
    """`calibrate --threads 1000` on a 2-core machine fitted (and stored, for --hardware this-machine)
    the steps of 1,000 threads taking turns on 2 cores: minutes, and a clock of nothing this machine
    runs. On CUDA torch's CPU threads are not what is measured, and the profile left them out unsaid."""
    threads = getattr(args, "threads", None)
    if not threads:
        return
    if device_type != "cpu":
        raise ConfigError(f"--threads {threads}: sets torch's threads on a CPU, and this calibration runs on "
                          f"{device_type}, whose steps they do not time: drop it, or give --device cpu")
    cores = usable_cores()
    if threads > cores:
        raise ConfigError(f"--threads {threads:,}: this machine runs {cores:,} thread{'' if cores == 1 else 's'} at "
                          f"once (the cores kvscope may use); more would take turns, and the profile would time the "
                          f"turns, not this machine: give at most {cores:,}")


def refuse_cpu_budget_without_room(args, shape, engine_args) -> str | None:
    """The real backend on a CPU: the pool is the budget (--kv-cache-memory-bytes, else the CPU's default
    1 GiB), in blocks of the model at its --dtype (fp32 unless given), known before the weights load.
    `--kv-cache-memory-bytes 1000` and `200000` (2 blocks of tiny-llama's 256 a request), and `--block-size
    1048576` in the default budget, were refused after `loading ...` and `loaded ...`. Returns why not one
    full-length request fits (said by the caller, as after loading); raises when not one block does.
    Quantised weights are left to the engine (their KV dtype)."""
    if getattr(args, "quantization", None):
        return None
    from kvscope.engine.config import resolve_engine_args
    from kvscope.engine.memory_math import full_length_reason, no_room_reason, plan_memory
    from kvscope.app.lab.this_machine import detect_this_machine

    model = shape.replace(weight_dtype=getattr(args, "dtype", None) or "fp32")
    hardware = detect_this_machine(use_cuda=False)
    plan = plan_memory(model, hardware, resolve_engine_args(engine_args, model, hardware))
    if not plan.fits:
        raise ConfigError(no_room_reason(plan))
    return full_length_reason(plan) if engine_args.accounting == "vllm" else None


def _splits(model, tp: int) -> bool:
    """The engine's own rule (resolve_engine_args): whole shares of the query heads, and of the KV
    heads (or each KV head copied to a whole number of devices)."""
    kv = model.num_key_value_heads
    return not ((kv >= tp and kv % tp) or (kv < tp and tp % kv)) and model.num_attention_heads % tp == 0


def refuse_a_split_not_typed(args, model, hardware) -> None:
    """`math --hardware 8x-h100-80gb --model qwen2.5-7b` was "tensor_parallel_size 8 cannot split
    num_attention_heads 28 evenly": a flag the user never typed, its value the node's device count
    (the default), and no word on what would split the model."""
    tp = hardware.gpu_count
    if getattr(args, "tensor_parallel_size", None) is not None or tp <= 1 or _splits(model, tp):
        return
    best = next(n for n in range(tp - 1, 0, -1) if _splits(model, n))
    raise ConfigError(f"--hardware {hardware.name} has {tp} devices, and the model is split over all of them unless "
                      f"--tensor-parallel-size says otherwise; {tp} cannot split {model.name}'s "
                      f"{model.num_attention_heads} query heads and {model.num_key_value_heads} KV heads evenly: give "
                      f"--tensor-parallel-size {best} (the most that splits them), or another --hardware")
