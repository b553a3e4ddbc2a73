"""The fifteenth hostile pass's cases (the command line and attach), for scripts/hostile_inputs.py; every
name begins "fifteenth cli:" (`--only "fifteenth cli"` runs them). Found, and how it behaved before:
`bench scenarios --against-vllm` (and compare, calibration, cuda, soak) timed its own benchmark for minutes,
the flag unread (only `bench` alone and `bench trace` were refused). An input typed with a space or tab
around its name (`--trace "t.csv "`, `export " r.kvrec"`) was "trace t.csv : no such file", the space
unseen in the line, though t.csv is there. An output so named was written: `run --json "o.csv "` wrote JSON
into "o.csv " past the check of a .csv name, `run --json " -"` a file " -" in the current folder. `attach`
whose publisher sent only batches this server could not have sent (13 blocks stored at once on a 12-block
pool, a DP rank it has not) said "could not be decoded and none could: it is not a vLLM KV event
publisher", the wrong cause, naming none; undecodable messages named no first reason either. A headless
`attach --kv-listen tcp://*:*` bound a port the system picked and said it nowhere until the end, where no
server's --kv-events-config could have named it. `verify --model llama-3-70b` and `calibrate --model
llama-3-8b` said "needs about 29.9 GiB for its weights" only after `loading ...`; `calibrate --scale 16`
(the most --help names) loaded the model and began measuring before refusing it as past the model's length.
`math --reserve-bytes -1` was "got -1.0", `--weights-bytes 0` "got 0.0", `--memory-gib 1e12`
"got 1,000,000,000,000.0". `bench compare --scenario mine.toml --json mine.toml` wrote the figures over the
scenario file. Every case's `expect` is the right behaviour."""

from __future__ import annotations

from pathlib import Path

from hostile_case import ROOT

DEAD = "http://127.0.0.1:1"  # nothing listens: each refusal here comes before the server is asked
HELD: list = []  # the publishers' ZMQ context, held open for the whole run


def fifteenth_cli_cases(d: Path, Case, write) -> list:
    folder = d / "fifteenth-cli"
    return (_bench_cases(folder, Case, write) + _blank_path_cases(folder, Case, write) + _attach_cases(Case)
            + _before_loading_cases(Case) + _said_size_cases(Case))


def _case(Case, name: str, *args, **kwargs):
    return Case(f"fifteenth cli: {name}", *args, **kwargs)


def _bench_cases(folder: Path, Case, write) -> list:
    scenario = write(folder / "mine.toml", (ROOT / "presets" / "scenarios" / "cache-ceiling.toml").read_text())
    return [
        _case(Case, "bench scenarios --against-vllm (its own benchmark timed, the flag unread)", "flags",
              ["bench", "scenarios", "--against-vllm"],
              must_say=("--against-vllm goes with `kvscope bench real`, not `kvscope bench scenarios`",)),
        _case(Case, "bench compare --against-vllm (minutes of comparison, the flag unread)", "flags",
              ["bench", "compare", "--against-vllm"], must_say=("not `kvscope bench compare`",)),
        _case(Case, "bench compare --scenario mine.toml --json mine.toml (the scenario replaced)", "files",
              ["bench", "compare", "--scenario", str(scenario), "--json", str(scenario)], protected=[scenario],
              must_say=("is also the scenario file this command reads",)),
    ]


def _blank_path_cases(folder: Path, Case, write) -> list:
    trace = write(folder / "t.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                  "2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.53,396,9\n")
    blank = ("with a blank (a space, a tab), which would be written into the file's name",)
    return [
        _case(Case, "run --trace 't.csv ' ('trace t.csv : no such file', the space unseen)", "files",
              ["run", "--quiet", "--trace", f"{trace} "],
              must_say=("the name as typed ends with a space", f"and {trace} is there")),
        _case(Case, "run --trace ' t.csv' (a space before it)", "files", ["run", "--quiet", "--trace", f" {trace}"],
              must_say=("the name as typed begins with a space",)),
        _case(Case, "run --trace t.csv (the name as it is)", "files", ["run", "--quiet", "--trace", str(trace)],
              expect="ok"),
        _case(Case, "run --json 'o.csv ' (JSON written as 'o.csv ', past the .csv check)", "files",
              ["run", "--quiet", "--requests", "2", "--json", f"{folder / 'o.csv'} "], must_say=blank),
        _case(Case, "run --json ' -' (a file ' -' written in the current folder)", "files",
              ["run", "--quiet", "--requests", "2", "--json", " -"], must_say=("--json ' -': the name begins",) + blank),
        _case(Case, "run --record 'r.kvrec<TAB>'", "files",
              ["run", "--quiet", "--requests", "2", "--record", f"{folder / 'r.kvrec'}\t"], must_say=blank),
        _case(Case, "run --json 'my run.json' (a space inside the name is a name)", "files",
              ["run", "--quiet", "--requests", "2", "--json", str(folder / "my run.json")], expect="ok"),
    ]


def _attach_cases(Case) -> list:
    """Against a vLLM look-alike on loopback (12 blocks of 32 tokens, one engine) whose publisher sends one
    batch: one this server could not have sent is said as such, not as an undecodable stream."""
    import msgspec
    import zmq
    from hostile_fixtures import fake_http_server, stored, zmq_publisher

    prom = (ROOT / "tests" / "fixtures" / "vllm" / "metrics_live_vllm_cpu_0.32_pressure.prom").read_bytes()
    context = zmq.Context()
    HELD.append(context)
    url = fake_http_server({"/version": b'{"version": "0.32.0"}', "/metrics": prom,
                            "/v1/models": b'{"object": "list", "data": [{"id": "tiny"}]}'})

    def attach(payload: bytes) -> list:
        events = zmq_publisher(context, lambda: [[b"", (0).to_bytes(8, "big", signed=True), payload]])
        return ["attach", url, "--kv-events", events, "--duration", "1"]

    other = ("were read, and none could come from", "it is another server's publisher")
    wrong = ("not a vLLM KV event publisher", "could not be decoded")
    return [
        _case(Case, "attach: a batch storing 13 blocks on a 12-block server ('not a vLLM KV event publisher')",
              "flags", attach(msgspec.msgpack.encode([1.0, [stored(list(range(1, 14)))], 0])),
              must_say=other + ("a batch storing 13 blocks, more than the server's pool of 12",), must_not_say=wrong),
        _case(Case, "attach: a batch of DP rank 3 from a one-engine server ('not a vLLM KV event publisher')",
              "flags", attach(msgspec.msgpack.encode([1.0, [stored([7])], 3])),
              must_say=other + ("data_parallel_rank 3 is not one of the server's DP engines",), must_not_say=wrong),
        _case(Case, "attach: undecodable messages name the first reason", "flags", attach(b"\xc1 not msgpack"),
              must_say=("could not be decoded and none could (the first, seq 0: KV event batch",
                        "it is not a vLLM KV event publisher")),
        _case(Case, "attach: a batch of 12 blocks on the 12-block server (read)", "flags",
              attach(msgspec.msgpack.encode([1.0, [stored(list(range(1, 13)))], 0])), expect="ok",
              must_say=("12 blocks stored",)),
        _case(Case, "attach --kv-listen tcp://*:* --duration (a port picked and never said)", "flags",
              ["attach", DEAD, "--kv-listen", "tcp://*:*", "--duration", "0.3"],
              must_say=("port '*' lets the system pick one", "give that port, e.g. tcp://*:5557")),
        _case(Case, "attach --kv-listen tcp://*:* --data-parallel-size 2 (no port to offset, as before)", "flags",
              ["attach", DEAD, "--kv-listen", "tcp://*:*", "--data-parallel-size", "2", "--duration", "0.3"],
              must_say=("has no port to offset by the DP rank",)),
        _case(Case, "attach --kv-listen tcp://*:5557 --duration (a port: the server is asked)", "flags",
              ["attach", DEAD, "--kv-listen", "tcp://*:5557", "--duration", "0.3"], must_say=("cannot reach",)),
    ]


def _before_loading_cases(Case) -> list:
    return [
        _case(Case, "verify --model llama-3-70b (refused after 'loading ...')", "flags",
              ["verify", "--model", "llama-3-70b", "--passages", "0"],
              must_say=("llama-3-70b needs about 262.8 GiB for its weights as fp32",), must_not_say=("loading",)),
        _case(Case, "calibrate --model llama-3-70b (refused after 'loading ...')", "flags",
              ["calibrate", "--model", "llama-3-70b", "--no-save"],
              must_say=("needs about 262.8 GiB",), must_not_say=("loading",)),
        _case(Case, "calibrate --model tiny-llama --scale 16 (refused after loading and 'measuring ...')", "numbers",
              ["calibrate", "--model", "tiny-llama", "--scale", "16", "--no-save"],
              must_say=("--scale 16: the longest calibration prompt would be 8,192 tokens", "give at most --scale 7.98"),
              must_not_say=("loading", "measuring")),
    ]


def _said_size_cases(Case) -> list:
    return [
        _case(Case, "math --reserve-bytes -1 (said as 'got -1.0')", "numbers", ["math", "--reserve-bytes", "-1"],
              must_say=("--reserve-bytes must be 0 or more, got -1",), must_not_say=("-1.0",)),
        _case(Case, "math --weights-bytes 0 (said as 'got 0.0')", "numbers", ["math", "--weights-bytes", "0"],
              must_say=("--weights-bytes must be greater than 0, got 0",), must_not_say=("0.0",)),
        _case(Case, "math --memory-gib 1e12 (said as 'got 1,000,000,000,000.0')", "numbers",
              ["math", "--memory-gib", "1e12"], must_say=("got 1,000,000,000,000",), must_not_say=("000.0",)),
        _case(Case, "math --reserve-bytes 1e9 (taken)", "numbers", ["math", "--reserve-bytes", "1e9"], expect="ok"),
    ]
