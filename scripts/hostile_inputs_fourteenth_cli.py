"""The fourteenth hostile pass's cases (the command line and attach), for scripts/hostile_inputs.py; every
name begins "fourteenth cli:" (`--only "fourteenth cli"` runs them). Found, and how it behaved before:
`math --vllm-version 0.10.1.1` (and v0.10.1.1), a release vLLM tagged, was refused as "must look like 0.19
or 0.6.4". A float flag was said back rounded to six digits: `--gpu-memory-utilization 1.0000000001` was
refused as "--gpu-memory-utilization 1: ... must be in (0, 1]", `attach --duration 0.1999999` as "0.2 s is
too short ...; give at least 0.2 s", `calibrate --scale 0.0624999` as "--scale 0.0625: the shortest
prompt would be 1 tokens ..., under one", and `--memory-gib 9.3e-10` (under a byte) was told to "give at least
9.3e-10". A number written with a comma (`--requests 1,000`, `--gpu-memory-utilization 0,9`) or a
per-unit (`--arrival-rate 5/s`, '5 req/s') was told to "give a number in decimal digits", which it was.
An attached server's cache_config_info sizing labels were read whatever they held: kv_cache_memory_bytes
1e300 was said as "the server sized its cache from GPU memory: pass --hardware", 1.5 bytes planned 0
blocks (an error of -100 %), num_gpu_blocks_override 0 was shown as "forced: the server runs with
num_gpu_blocks_override 0", gpu_memory_utilization 0 was planned as 0.9; a /version of "v0.8.5" was
planned as release 8.5 (0.33's accounting, "the newest kvscope models"), "0.x.5" as 0.5 (V0's). `attach
http://h:8000 --kv-events tcp://h:8000` (or --replay there, or a DP rank's port + r) followed the HTTP port
in silence and said "not the server's publisher". `run --trace t.csv --requests 0` (-3, or the azure-conv
preset) was "trace t.csv: no requests in the file". A /metrics count of 1e300 (num_preemptions_total) printed
301 digits in the summary, 3.5 was said as 4, num_requests_running 2.5 as 2, a TTFT histogram _count of 4.5
was read as such. Every case's `expect` is the right behaviour."""

from __future__ import annotations

from pathlib import Path

from hostile_case import ROOT

DEAD = "http://127.0.0.1:1"  # nothing listens: each refusal here comes before the server is asked
EVENTS = ["--kv-events", "tcp://127.0.0.1:5557"]
HELD: list = []  # the publishers' ZMQ context, held open for the whole run


def fourteenth_cli_cases(d: Path, Case, write) -> list:
    return (_version_cases(Case) + _said_number_cases(Case) + _typed_number_cases(Case) + _attach_label_cases(Case)
            + _http_port_cases(Case) + _trace_cases(d, Case, write))


def _trace_cases(d: Path, Case, write) -> list:
    trace = write(d / "fourteenth-cli" / "t.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                  "2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.53,396,9\n")
    said = ("--requests 0: ", "num_requests must be at least 1")
    return [
        _case(Case, "run --trace t.csv --requests 0 ('trace t.csv: no requests in the file')", "numbers",
              ["run", "--quiet", "--trace", str(trace), "--requests", "0"], must_say=said,
              must_not_say=("no requests in the file",)),
        _case(Case, "run --workload azure-conv --requests 0 ('no requests in the file')", "numbers",
              ["run", "--quiet", "--workload", "azure-conv", "--requests", "0"], must_say=said,
              must_not_say=("no requests in the file",)),
        _case(Case, "run --trace t.csv --requests 2 (every row)", "numbers",
              ["run", "--quiet", "--trace", str(trace), "--requests", "2"], expect="ok"),
    ]


def _case(Case, name: str, *args, **kwargs):
    return Case(f"fourteenth cli: {name}", *args, **kwargs)


def _version_cases(Case) -> list:
    return [
        _case(Case, "math --vllm-version 0.10.1.1 (a release vLLM tagged: 'must look like 0.19')", "flags",
              ["math", "--vllm-version", "0.10.1.1"], expect="ok", must_say=("(vLLM 0.10.1.1)",)),
        _case(Case, "math --vllm-version v0.10.1.1 (its tag)", "flags",
              ["math", "--vllm-version", "v0.10.1.1"], expect="ok", must_say=("(vLLM v0.10.1.1)",)),
        _case(Case, "math --vllm-version 0.10.1.1.1 (five parts: no release)", "flags",
              ["math", "--vllm-version", "0.10.1.1.1"], must_say=("vllm_version must look like 0.19",)),
    ]


def _said_number_cases(Case) -> list:
    return [
        _case(Case, "math --gpu-memory-utilization 1.0000000001 (said as '--gpu-memory-utilization 1')", "numbers",
              ["math", "--gpu-memory-utilization", "1.0000000001"],
              must_say=("--gpu-memory-utilization 1.0000000001: gpu_memory_utilization must be in (0, 1]",)),
        _case(Case, "attach --duration 0.1999999 (said as '0.2 s is too short; give at least 0.2 s')", "numbers",
              ["attach", DEAD, *EVENTS, "--duration", "0.1999999"],
              must_say=("0.1999999 s is too short", "give at least 0.2 s")),
        _case(Case, "math --memory-gib 9.3e-10 (under a byte: 'give at least 9.3e-10')", "numbers",
              ["math", "--memory-gib", "9.3e-10"], must_say=("is less than one byte", "give at least 9.32e-10")),
        _case(Case, "calibrate --scale 0.0624999 (said as '--scale 0.0625: ... 1 tokens, under one')", "numbers",
              ["calibrate", "--scale", "0.0624999", "--no-save"],
              must_say=("--scale 0.0624999: the shortest calibration prompt would be 0.9999984 tokens",),
              must_not_say=("be 1 tokens",)),
        _case(Case, "math --memory-gib 9.32e-10 (the least it says it takes)", "numbers",
              ["math", "--memory-gib", "9.32e-10"], expect="ok"),
    ]


def _typed_number_cases(Case) -> list:
    comma = "a comma is read neither as a thousands separator nor as a decimal point"
    return [
        _case(Case, "run --requests 1,000 ('give a number in decimal digits')", "numbers",
              ["run", "--quiet", "--requests", "1,000"], must_say=(comma,), must_not_say=("decimal digits",)),
        _case(Case, "math --gpu-memory-utilization 0,9 (a decimal comma)", "numbers",
              ["math", "--gpu-memory-utilization", "0,9"], must_say=(comma,)),
        _case(Case, "run --arrival-rate 5/s ('give a number in decimal digits')", "numbers",
              ["run", "--quiet", "--requests", "2", "--arrival-rate", "5/s"],
              must_say=("a number with a unit (/s) typed after it",), must_not_say=("decimal digits",)),
        _case(Case, "run --arrival-rate '5 req/s'", "numbers",
              ["run", "--quiet", "--requests", "2", "--arrival-rate", "5 req/s"],
              must_say=("a number with a unit (req/s)",)),
        _case(Case, "run --arrival-rate 1/2 (a fraction: no unit)", "numbers",
              ["run", "--quiet", "--requests", "2", "--arrival-rate", "1/2"],
              must_say=("decimal digits",), must_not_say=("unit", "comma")),
        _case(Case, "run --requests 1_000 (Python's grouping: taken)", "numbers",
              ["run", "--quiet", "--requests", "1_000", "--workload", "uniform-short"], expect="ok"),
    ]


def _attach_label_cases(Case) -> list:
    """Against a vLLM look-alike on loopback whose cache_config_info holds one sizing label out of range,
    with a publisher that sends one batch: the attach is taken, its prediction rows say the label."""
    import msgspec
    import zmq
    from hostile_fixtures import fake_http_server, stored, zmq_publisher

    prom = (ROOT / "tests" / "fixtures" / "vllm" / "metrics_live_vllm_cpu_0.32_pressure.prom").read_bytes()
    batch = msgspec.msgpack.encode([1.0, [stored([7])], 0])
    context = zmq.Context()
    HELD.append(context)

    def attach(changes: dict, *flags, version: bytes = b"0.32.0") -> list:
        metrics = prom
        for old, changed in changes.items():
            metrics = metrics.replace(old, changed)
        url = fake_http_server({"/version": b'{"version": "%s"}' % version, "/metrics": metrics,
                                "/v1/models": b'{"object": "list", "data": [{"id": "tiny"}]}'})
        events = zmq_publisher(context, lambda: [[b"", (0).to_bytes(8, "big", signed=True), batch]])
        return ["attach", url, "--kv-events", events, "--duration", "1", "--model", "tiny-llama", *flags]

    memory = b'kv_cache_memory_bytes="1073741824"'
    override = b'num_gpu_blocks_override="12"'
    no_budget = {memory: b'kv_cache_memory_bytes="None"'}  # sized from GPU memory: the utilization is read
    return [
        _case(Case, "attach: kv_cache_memory_bytes 1e300 (said as 'sized its cache from GPU memory')", "flags",
              attach({memory: b'kv_cache_memory_bytes="1e300"'}), expect="ok",
              must_say=("kv_cache_memory_bytes='1e300', which is not a whole number of bytes",),
              must_not_say=("sized its cache from GPU memory",)),
        _case(Case, "attach: kv_cache_memory_bytes 1.5 (0 blocks planned, -100 %)", "flags",
              attach({memory: b'kv_cache_memory_bytes="1.5"'}), expect="ok",
              must_say=("kv_cache_memory_bytes='1.5', which is not a whole number of bytes",),
              must_not_say=("-100",)),
        _case(Case, "attach: num_gpu_blocks_override 0 ('forced ... override 0')", "flags",
              attach({override: b'num_gpu_blocks_override="0"'}), expect="ok",
              must_say=("num_gpu_blocks_override='0', which is not a whole number of blocks",),
              must_not_say=("forced",)),
        _case(Case, "attach --hardware h100-80gb: gpu_memory_utilization 0 (planned as 0.9)", "flags",
              attach({**no_budget, b'gpu_memory_utilization="0.92"': b'gpu_memory_utilization="0"'},
                     "--hardware", "h100-80gb"), expect="ok",
              must_say=("gpu_memory_utilization='0', which is not a share of memory",),
              must_not_say=("gpu_memory_utilization 0.9",)),
        _case(Case, "attach --hardware h100-80gb: gpu_memory_utilization 0.92 (planned from it)", "flags",
              attach(no_budget, "--hardware", "h100-80gb"), expect="ok",
              must_say=("from h100-80gb x gpu_memory_utilization 0.92",)),
        _case(Case, "attach: the captured labels (the forced count said as forced)", "flags",
              attach({}), expect="ok", must_say=("forced: the server runs with num_gpu_blocks_override 12",)),
        _case(Case, "attach: num_preemptions_total 1e300 (301 digits printed)", "flags",
              attach({b'num_preemptions_total{engine="0",model_name="tiny"} 3.0':
                      b'num_preemptions_total{engine="0",model_name="tiny"} 1e300'}), expect="ok",
              must_say=("preemptions (server total)                n/a",), must_not_say=("000,000,000,000,000",)),
        _case(Case, "attach: num_requests_running 2.5 (said as 2)", "flags",
              attach({b'num_requests_running{engine="0",model_name="tiny"} 0.0':
                      b'num_requests_running{engine="0",model_name="tiny"} 2.5'}), expect="ok",
              must_say=("running / waiting                         n/a / 0",)),
        _case(Case, "attach --json -: a TTFT histogram _count of 4.5 (a mean of half an observation)", "flags",
              attach({b'vllm:time_to_first_token_seconds_count{engine="0",model_name="tiny"} 4.0':
                      b'vllm:time_to_first_token_seconds_count{engine="0",model_name="tiny"} 4.5'}, "--json", "-"),
              expect="ok", must_say=("_count 4.5 (a whole count from 0 to 2^53)",)),
        _case(Case, "attach: num_preemptions_total 3.0 (the captured count, whole)", "flags",
              attach({}), expect="ok", must_say=("preemptions (server total)                3",)),
        _case(Case, "attach: /version v0.8.5 (planned as release 8.5, with 0.33's accounting)", "flags",
              attach({override: b'num_gpu_blocks_override="None"'}, version=b"v0.8.5"), expect="ok",
              must_say=("vLLM 0.8.5 accounting",), must_not_say=("the newest kvscope models",)),
        _case(Case, "attach: /version 0.x.5 (planned as 0.5, V0's accounting)", "flags",
              attach({override: b'num_gpu_blocks_override="None"'}, version=b"0.x.5"), expect="ok",
              must_say=("the server's version '0.x.5' names no release",), must_not_say=("vLLM 0.5 accounting",)),
        _case(Case, "attach: /version 0.10.1.1 (vLLM's four-part release)", "flags",
              attach({override: b'num_gpu_blocks_override="None"'}, version=b"0.10.1.1"), expect="ok",
              must_say=("vLLM 0.10.1 accounting",)),
    ]


def _http_port_cases(Case) -> list:
    from hostile_fixtures import fake_http_server

    prom = (ROOT / "tests" / "fixtures" / "vllm" / "metrics_live_vllm_cpu_0.32_pressure.prom").read_bytes()
    url = fake_http_server({"/version": b'{"version": "0.32.0"}', "/metrics": prom})
    port = url.rpartition(":")[2]
    said = "is the server's HTTP port"
    return [
        _case(Case, "attach URL --kv-events on the URL's port ('not the server's publisher' after following)",
              "flags", ["attach", url, "--kv-events", f"tcp://127.0.0.1:{port}", "--duration", "0.3"],
              must_say=(said, "give the server's --kv-events-config endpoint"), must_not_say=("no KV event",)),
        _case(Case, "attach URL --replay on the URL's port ('gave no answer' after attaching)", "flags",
              ["attach", url, "--kv-events", "tcp://127.0.0.1:9", "--replay", f"tcp://localhost:{port}",
               "--duration", "0.3", "--timeout", "0.2"], must_say=(said, "replay_endpoint"),
              must_not_say=("gave no answer",)),
        _case(Case, "attach --data-parallel-size 2 whose rank 1 is the URL's port", "flags",
              ["attach", "http://127.0.0.1:2", "--kv-events", "tcp://127.0.0.1:1", "--data-parallel-size", "2",
               "--duration", "0.3"], must_say=("(DP rank 1: the port + 1)", said), must_not_say=("cannot reach",)),
        _case(Case, "attach http://127.0.0.1 --kv-events tcp://127.0.0.1:80 (the scheme's port)", "flags",
              ["attach", "http://127.0.0.1", "--kv-events", "tcp://127.0.0.1:80", "--duration", "0.3"],
              must_say=(said,), must_not_say=("cannot reach",)),
        _case(Case, "attach --data-parallel-size 2, rank 1 below the URL's port (the server is asked)", "flags",
              ["attach", "http://127.0.0.1:3", "--kv-events", "tcp://127.0.0.1:1", "--data-parallel-size", "2",
               "--duration", "0.3"], must_say=("cannot reach",)),
    ]
