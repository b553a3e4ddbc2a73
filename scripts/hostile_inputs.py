"""Bad input, tried as a hostile user would: every case runs the real `kvscope` command in a
subprocess (a time limit, an address-space limit) and is judged by what a user sees.

    python scripts/hostile_inputs.py [--only SUBSTRING] [--verbose] [--json OUT]

A case is clean when it ends as expected: a refusal is exit code 2 with one `kvscope ... error`
line last on stderr and no traceback; an accepted input is exit code 0. Otherwise it is a
traceback (or a crash), a hang (past the time limit), a wrong outcome (nonsense accepted, a
refusal that names the wrong cause) or a lost file (a file the command was not asked to write
changed). The fixtures (traces, presets, config.json files, model folders, recordings) are made
in a temporary folder first; a small random-weight model is built there for the model-folder cases.
One file on purpose: the cases are data, read top to bottom by category, each beside its fixture.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from hostile_inputs_fifth_cli import fifth_cli_cases
from hostile_inputs_fifth_files import fifth_file_cases
from hostile_inputs_sixth_cli import sixth_cli_cases
from hostile_inputs_sixth_files import sixth_file_cases
from hostile_inputs_seventh_cli import seventh_cli_cases
from hostile_inputs_seventh_files import seventh_file_cases
from hostile_inputs_eighth_cli import eighth_cli_cases
from hostile_inputs_eighth_files import eighth_file_cases
from hostile_inputs_fourth_cli import fourth_cli_cases
from hostile_inputs_fourth_files import fourth_file_cases
from hostile_inputs_third import third_pass_cases

ROOT = Path(__file__).resolve().parent.parent
KVSCOPE = ROOT / ".venv" / "bin" / "kvscope"
TIME_LIMIT_S = 10.0  # a refusal or a tiny run takes a second or two; past this a case hangs
SLOW_TIME_LIMIT_S = 60.0  # cases that load a model with torch (real backend, verify)
MEMORY_LIMIT_BYTES = 6 * 1024**3


@dataclass
class Case:
    name: str
    category: str
    argv: list
    expect: str = "refuse"  # refuse | ok | either (no traceback, no hang)
    protected: list = field(default_factory=list)  # files that must be left as they were
    env: dict = field(default_factory=dict)
    slow: bool = False
    must_say: tuple = ()  # fragments the stderr (refusal) or stdout (ok) must hold
    must_not_say: tuple = ()
    stdout: str = ""  # a file standard output is written to (/dev/full), instead of a pipe


# -- fixtures ----------------------------------------------------------------------------------


def write(path: Path, data) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data, encoding="utf-8")
    return path


def small_recording(path: Path) -> Path:
    from kvscope.app.lab.recording import RunRecorder
    from kvscope.app.lab.workload import WorkloadSpec, generate_requests, LengthDist
    from kvscope.engine import Engine
    from kvscope.engine.config import EngineArgs
    from kvscope.app.lab.presets import load_hardware, load_model

    path.parent.mkdir(parents=True, exist_ok=True)
    engine = Engine(load_model("tiny-llama"), load_hardware("h100-80gb"),
                    EngineArgs(kv_cache_memory_bytes=4 * 1024**2, max_num_seqs=8))
    spec = WorkloadSpec("small", num_requests=12, arrival_rate_per_s=20.0,
                        prompt_tokens=LengthDist("constant", value=100, max=100),
                        output_tokens=LengthDist("constant", value=20, max=20))
    engine.add_workload(generate_requests(spec, engine.model.vocab_size))
    recorder = RunRecorder(engine, path, {"label": "hostile", "workload": spec}, keyframe_interval=16)
    engine.run(on_step=recorder.record_step)
    recorder.close(engine.summary())
    return path


def records_of(data: bytes) -> list:
    """(offset, type, flags, length) of each record of a recording, from the start."""
    from kvscope.app.lab.recording.format import FILE_HEADER, FRAME

    out, offset = [], FILE_HEADER.size
    while offset + FRAME.size <= len(data):
        marker, record_type, flags, length, _, _ = FRAME.unpack_from(data, offset)
        if marker != b"KR":
            break
        out.append((offset, record_type, flags, length))
        offset += FRAME.size + length
    return out


def reframed(data: bytes, number: int, payload: bytes, compress: bool | None = None) -> bytes:
    """The recording with record `number`'s payload replaced (checksums right) and its index and
    trailer dropped (the offsets after the change moved): the reader scans it as an unclosed file."""
    from kvscope.app.lab.recording.format import FRAME, INDEX, frame_record

    records = records_of(data)
    offset, record_type, flags, length = records[number]
    if compress is None:
        compress = bool(flags & 1)
    new = frame_record(record_type, payload, compress)
    end = next((r[0] for r in records if r[1] == INDEX), len(data))
    return data[:offset] + new + data[offset + FRAME.size + length:end]


def zlib_bomb(size: int) -> bytes:
    """zlib data that inflates to `size` zero bytes (about a thousandth of that compressed)."""
    squeeze = zlib.compressobj(9)
    chunk = bytes(64 * 1024**2)
    parts = [squeeze.compress(chunk) for _ in range(size // len(chunk))]
    return b"".join(parts) + squeeze.flush()


def reframed_raw(data: bytes, number: int, stored: bytes) -> bytes:
    """As reframed, with the payload given as stored (already compressed), the zlib flag kept."""
    from kvscope.app.lab.recording.format import FRAME, FRAME_HEAD, FRAME_MARKER, INDEX

    records = records_of(data)
    offset, record_type, flags, length = records[number]
    head = FRAME_HEAD.pack(FRAME_MARKER, record_type, flags, len(stored), zlib.crc32(stored))
    end = next((r[0] for r in records if r[1] == INDEX), len(data))
    return data[:offset] + head + struct.pack("<I", zlib.crc32(head)) + stored + data[offset + FRAME.size + length:end]


def payload_of(data: bytes, number: int) -> bytes:
    from kvscope.app.lab.recording.format import FRAME

    offset, _, flags, length = records_of(data)[number]
    raw = data[offset + FRAME.size: offset + FRAME.size + length]
    return zlib.decompress(raw) if flags & 1 else raw


def with_head(payload: bytes, change) -> bytes:
    """A payload whose JSON head is changed by change(head) (the arrays kept)."""
    (n,) = struct.unpack_from("<I", payload)
    head = json.loads(payload[4:4 + n])
    change(head)
    text = json.dumps(head).encode()
    return struct.pack("<I", len(text)) + text + payload[4 + n:]


def recording_cases(d: Path) -> list:
    from kvscope.app.lab.recording.format import DELTAS, HEADER, KEYFRAME, STEPS

    good = small_recording(d / "good.kvrec")
    data = good.read_bytes()
    records = records_of(data)
    number_of = {t: next(i for i, r in enumerate(records) if r[1] == t) for t in (HEADER, KEYFRAME, STEPS, DELTAS)}
    variants = {}
    (d / "out").mkdir(parents=True, exist_ok=True)

    def header_change(change):
        return reframed(data, 0, with_head(payload_of(data, 0), change))

    # header fields of the wrong type (the header record is uncompressed; the index still points right)
    variants["header-model-list"] = header_change(lambda h: h.update(model=[1, 2, 3]))
    variants["header-version-one"] = header_change(lambda h: h.update(format_version="one"))
    variants["header-version-list-text"] = header_change(lambda h: h.update(format_version=["one", 0]))
    variants["header-event-kinds-int"] = header_change(lambda h: h.update(event_kinds=7))
    variants["header-event-kinds-empty"] = header_change(lambda h: h.update(event_kinds=[]))
    variants["header-block-size-text"] = header_change(lambda h: h.update(block_size="16"))
    variants["header-num-blocks-huge"] = header_change(lambda h: h.update(num_blocks=10**12))
    variants["header-num-blocks-bigint"] = header_change(lambda h: h.update(num_blocks=10**40))
    variants["header-plan-string"] = header_change(lambda h: h.update(plan="big"))
    variants["header-workload-list"] = header_change(lambda h: h.update(workload=[1]))
    variants["header-engine-args-int"] = header_change(lambda h: h.update(engine_args=5))
    variants["header-not-object"] = reframed(data, 0, (lambda t: struct.pack("<I", len(t)) + t)(b"[1,2,3]"))
    variants["header-deep-json"] = reframed(
        data, 0, (lambda t: struct.pack("<I", len(t)) + t)(b"[" * 100_000 + b"]" * 100_000))
    # step and keyframe records (compressed; the file is cut after the change: the reader scans)
    steps, deltas, keyframe = number_of[STEPS], number_of[DELTAS], number_of[KEYFRAME]

    def cut_change(number, change):
        return reframed(data, number, with_head(payload_of(data, number), change))

    variants["steps-first-step-text"] = cut_change(steps, lambda h: h.update(first_step="zero"))
    variants["steps-num-steps-huge"] = cut_change(steps, lambda h: h.update(num_steps=10**15))
    variants["keyframe-position-text"] = cut_change(keyframe, lambda h: h.update(position="start"))
    variants["keyframe-no-owner"] = cut_change(keyframe, lambda h: h["arrays"].pop("owner"))
    variants["keyframe-time-text"] = cut_change(keyframe, lambda h: h.update(time_s="noon"))
    variants["keyframe-array-dtype-object"] = cut_change(keyframe, lambda h: h["arrays"]["owner"].update(dtype="|O"))
    variants["keyframe-array-count-negative"] = cut_change(keyframe, lambda h: h["arrays"]["owner"].update(count=-5))
    variants["keyframe-array-huge-count"] = cut_change(keyframe, lambda h: h["arrays"]["owner"].update(count=10**18))
    variants["keyframe-arrays-list"] = cut_change(keyframe, lambda h: h.update(arrays=[1, 2]))

    def event_kind_out_of_range(payload: bytes) -> bytes:
        (n,) = struct.unpack_from("<I", payload)
        head = json.loads(payload[4:4 + n])
        spec = head["arrays"]["event.kind"]
        raw = bytearray(payload)
        base = 4 + n + spec["offset"]
        raw[base] = 200  # the first event's kind: far past the known kinds
        return bytes(raw)

    variants["event-kind-out-of-range"] = reframed(data, steps, event_kind_out_of_range(payload_of(data, steps)))
    variants["deltas-missing-arrays"] = cut_change(deltas, lambda h: h.update(arrays={}))
    variants["steps-missing-arrays"] = cut_change(steps, lambda h: h.update(arrays={}))
    variants["zlib-bomb-deltas"] = reframed_raw(data, deltas, zlib_bomb(4 * 1024**3))
    # a frame claiming a huge payload length (the frame checksum made right)
    offset = records[steps][0]
    raw = bytearray(data[:offset + 20])
    struct.pack_into("<Q", raw, offset + 4, 2**62)
    struct.pack_into("<I", raw, offset + 16, zlib.crc32(bytes(raw[offset:offset + 16])))
    variants["huge-claimed-length"] = bytes(raw) + data[offset + 20:]
    variants["empty-file"] = b""
    variants["text-file"] = b"TIMESTAMP,ContextTokens,GeneratedTokens\n1,2,3\n"
    variants["signature-only"] = data[:14]
    variants["half-file"] = data[: len(data) // 2]
    variants["flipped-byte-middle"] = bytes(b ^ (0x40 if i == len(data) // 3 else 0) for i, b in enumerate(data))

    cases = []
    for name, blob in variants.items():
        path = write(d / "recordings" / f"{name}.kvrec", blob)
        cases.append(Case(f"export {name}", "recording", ["export", str(path)], expect="refuse_or_ok"))
        cases.append(Case(f"export --csv {name}", "recording",
                          ["export", str(path), "--csv", str(d / "out" / f"{name}.csv")], expect="refuse_or_ok"))
        cases.append(Case(f"export --perfetto {name}", "recording",
                          ["export", str(path), "--perfetto", str(d / "out" / f"{name}.json")], expect="refuse_or_ok"))
    for name in ("header-num-blocks-huge", "keyframe-no-owner", "zlib-bomb-deltas", "header-event-kinds-int",
                 "huge-claimed-length", "empty-file", "text-file", "signature-only", "flipped-byte-middle"):
        cases.append(Case(f"gui --replay {name}", "recording",
                          ["gui", "--replay", str(d / "recordings" / f"{name}.kvrec"), "--quit-after", "1"],
                          expect="refuse", slow=True))
    return cases


def trace_cases(d: Path) -> list:
    t = d / "traces"
    header = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
    files = {
        "prompt-1e9": header + "0,1000000000,10\n",
        "prompt-1e18": header + "0,1000000000000000000,10\n",
        "output-1e18": header + "0,10,1000000000000000000\n",
        "prompt-negative": header + "0,-5,10\n",
        "prompt-zero": header + "0,0,10\n",
        "prompt-float": header + "0,12.5,10\n",
        "prompt-1e400": header + "0,1e400,10\n",
        "time-nan": header + "nan,10,10\n",
        "time-inf": header + "inf,10,10\n",
        "time-huge": header + "0,10,10\n1e308,10,10\n",
        "time-backwards": header + "5,10,10\n1,10,10\n",
        "time-garbage-date": header + "2023-13-45 99:99:99,10,10\n",
        "empty": "",
        "header-only": header,
        "no-columns": "a,b,c\n1,2,3\n",
        "missing-cells": header + "0,10\n",
        "huge-field": header + "0," + "9" * 200_000 + ",10\n",
        "huge-quoted-field": header + '0,"' + "x" * 300_000 + '",10\n',
        "unterminated-quote": header + '0,"10,10\n1,10,10\n',
        "nul-bytes": header + "0,1\x000,10\n",
        "many-columns": ",".join(f"c{i}" for i in range(100_000)) + "\n",
    }
    cases = []
    for name, text in files.items():
        path = write(t / f"{name}.csv", text)
        cases.append(Case(f"run --trace {name}", "trace", ["run", "--quiet", "--trace", str(path)]))
    latin = write(t / "latin1.csv", (header + "0,10,10\n# caf\xe9\n").encode("latin-1"))
    cases.append(Case("run --trace latin-1", "trace", ["run", "--quiet", "--trace", str(latin)]))
    binary = write(t / "binary.csv", bytes(range(256)) * 64)
    cases.append(Case("run --trace binary", "trace", ["run", "--quiet", "--trace", str(binary)]))
    bom = write(t / "bom.csv", ("\ufeff" + header + "0,100,10\n1,100,10\n").encode("utf-8"))
    cases.append(Case("run --trace with a UTF-8 BOM", "trace", ["run", "--quiet", "--trace", str(bom)], expect="ok"))
    crlf = write(t / "crlf.csv", (header + "0,100,10\n1,100,10\n").replace("\n", "\r\n"))
    cases.append(Case("run --trace CRLF", "trace", ["run", "--quiet", "--trace", str(crlf)], expect="ok"))
    cases.append(Case("run --trace a folder", "trace", ["run", "--quiet", "--trace", str(t)]))
    cases.append(Case("run --trace /dev/zero", "trace", ["run", "--quiet", "--trace", "/dev/zero"]))
    cases.append(Case("run --trace /dev/urandom", "trace", ["run", "--quiet", "--trace", "/dev/urandom"]))
    cases.append(Case("run --trace missing", "trace", ["run", "--quiet", "--trace", str(t / "nope.csv")]))
    cases.append(Case("run --trace empty name", "trace", ["run", "--quiet", "--trace", ""]))
    return cases


def preset_cases(d: Path) -> list:
    user = d / "config"
    env = {"KVSCOPE_CONFIG_DIR": str(user)}
    models = {
        "empty": "",
        "name-int": 'name = 5\nnum_hidden_layers = 2\n',
        "layers-1e300": "num_hidden_layers = 1e300\nnum_attention_heads = 8\nnum_key_value_heads = 8\nhead_dim = 64\n"
                        "hidden_size = 512\nintermediate_size = 1024\nvocab_size = 1000\n",
        "layers-bigint": "num_hidden_layers = 9223372036854775807\nnum_attention_heads = 8\nnum_key_value_heads = 8\n"
                         "head_dim = 64\nhidden_size = 512\nintermediate_size = 1024\nvocab_size = 1000\n",
        "heads-list": "num_hidden_layers = 2\nnum_attention_heads = [8]\nnum_key_value_heads = 8\nhead_dim = 64\n"
                      "hidden_size = 512\nintermediate_size = 1024\nvocab_size = 1000\n",
        "head-dim-half": "num_hidden_layers = 2\nnum_attention_heads = 8\nnum_key_value_heads = 8\nhead_dim = 64.5\n"
                         "hidden_size = 512\nintermediate_size = 1024\nvocab_size = 1000\n",
        "nested-table": "[num_hidden_layers]\nx = 1\n",
        "weights-negative": "num_hidden_layers = 2\nnum_attention_heads = 8\nnum_key_value_heads = 8\nhead_dim = 64\n"
                            "hidden_size = 512\nintermediate_size = 1024\nvocab_size = 1000\nweights_bytes = -1\n",
        "dtype-list": "num_hidden_layers = 2\nnum_attention_heads = 8\nnum_key_value_heads = 8\nhead_dim = 64\n"
                      "hidden_size = 512\nintermediate_size = 1024\nvocab_size = 1000\nweight_dtype = ['bf16']\n",
        "malformed": "num_hidden_layers = \n",
        "binary": b"\xff\xfe\x00\x01" * 100,
    }
    hardware = {
        "flops-string": 'memory_bytes = 80e9\nmemory_bandwidth_bytes_per_s = 3e12\npeak_flops = "fast"\n',
        "flops-list": "memory_bytes = 80e9\nmemory_bandwidth_bytes_per_s = 3e12\npeak_flops = [1, 2]\n",
        "flops-table-of-text": 'memory_bytes = 80e9\nmemory_bandwidth_bytes_per_s = 3e12\n[peak_flops]\nfp16 = "lots"\n',
        "flops-nan": "memory_bytes = 80e9\nmemory_bandwidth_bytes_per_s = 3e12\n[peak_flops]\nfp16 = nan\n",
        "memory-1e300": "memory_bytes = 1e300\nmemory_bandwidth_bytes_per_s = 3e12\n[peak_flops]\nfp16 = 1e15\n",
        "memory-text": 'memory_bytes = "80GB"\nmemory_bandwidth_bytes_per_s = 3e12\n[peak_flops]\nfp16 = 1e15\n',
        "gpus-1e9": "memory_bytes = 80e9\nmemory_bandwidth_bytes_per_s = 3e12\ngpu_count = 1000000000\n"
                    "[peak_flops]\nfp16 = 1e15\n",
        "kind-tpu": 'memory_bytes = 80e9\nmemory_bandwidth_bytes_per_s = 3e12\nkind = "tpu"\n[peak_flops]\nfp16 = 1e15\n',
        "empty": "",
    }
    workloads = {
        "requests-1e300": 'name = "w"\nnum_requests = 1e300\n',
        "requests-text": 'name = "w"\nnum_requests = "many"\n',
        "prompt-1e12": 'name = "w"\nnum_requests = 2\nprompt_tokens = 1000000000000\n',
        "prompt-list": 'name = "w"\nprompt_tokens = [1, 2]\n',
        "lognormal-huge": 'name = "w"\nnum_requests = 2\nprompt_tokens = { dist = "lognormal", median = 1e308, '
                          'sigma = 1e308 }\n',
        "uniform-huge": 'name = "w"\nnum_requests = 2\nprompt_tokens = { dist = "uniform", min = 1, '
                        'max = 1000000000000000000 }\n',
        "trace-int": 'name = "w"\ntrace = 5\n',
        "trace-absolute-missing": 'name = "w"\ntrace = "/no/such/trace.csv"\n',
        "rate-nan": 'name = "w"\narrival_rate_per_s = nan\n',
        "name-table": "[name]\nx = 1\n",
        "empty": "",
        "speedup-zero": 'name = "w"\ntrace = "t.csv"\ntrace_speedup = 0\n',
    }
    for name, text in models.items():
        write(user / "presets" / "models" / f"bad-{name}.toml", text)
    for name, text in hardware.items():
        write(user / "presets" / "hardware" / f"bad-{name}.toml", text)
    for name, text in workloads.items():
        write(user / "presets" / "workloads" / f"bad-{name}.toml", text)
    # a user workload whose trace lies beside it (a relative path)
    write(user / "presets" / "workloads" / "mine.toml", 'name = "mine"\ntrace = "mine.csv"\n')
    write(user / "presets" / "workloads" / "mine.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n0,50,5\n1,60,6\n")

    cases = [Case("presets listing with invalid user presets", "structure", ["presets"], expect="ok", env=env,
                  must_say=("invalid",))]
    for name in models:
        cases.append(Case(f"math --model bad-{name}", "structure", ["math", "--model", f"bad-{name}"], env=env,
                          must_not_say=("ModelConfig.__init__", "positional argument")))
    for name in hardware:
        cases.append(Case(f"math --hardware bad-{name}", "structure", ["math", "--hardware", f"bad-{name}"], env=env,
                          must_not_say=("HardwareSpec.__init__", "positional argument")))
    for name in workloads:
        cases.append(Case(f"run --workload bad-{name}", "structure",
                          ["run", "--quiet", "--workload", f"bad-{name}", "--requests", "3"], env=env))
    cases.append(Case("run --workload user preset with a relative trace", "files",
                      ["run", "--quiet", "--workload", "mine"], expect="ok", env=env))
    cases += [
        Case("math --model ''", "structure", ["math", "--model", ""]),
        Case("math --hardware ''", "structure", ["math", "--hardware", ""]),
        Case("run --workload ''", "structure", ["run", "--quiet", "--workload", ""]),
        Case("math --model path traversal", "structure", ["math", "--model", "../hardware/h100-80gb"]),
        Case("math --model with a slash", "structure", ["math", "--model", "a/b"]),
        Case("math --model ' '", "structure", ["math", "--model", " "]),
        Case("compare --scenario ''", "structure", ["compare", "--scenario", ""]),
        Case("gui --scenario ''", "structure", ["gui", "--scenario", "", "--quit-after", "1"], slow=True),
        Case("gui --model ''", "structure", ["gui", "--model", "", "--quit-after", "1"], slow=True),
        Case("gui --model nope", "structure", ["gui", "--model", "nope", "--quit-after", "1"], slow=True,
             must_say=("nope",)),
        Case("gui --hardware nope", "structure", ["gui", "--hardware", "nope", "--quit-after", "1"], slow=True),
        Case("gui --workload nope", "structure", ["gui", "--workload", "nope", "--quit-after", "1"], slow=True),
        Case("gui --scenario nope", "structure", ["gui", "--scenario", "nope", "--quit-after", "1"], slow=True),
        Case("gui --theme nope", "structure", ["gui", "--theme", "nope", "--quit-after", "1"]),
        Case("gui --backend nope", "structure", ["gui", "--backend", "nope", "--quit-after", "1"]),
        Case("gui --model ../../etc/passwd", "structure",
             ["gui", "--model", "../../etc/passwd", "--quit-after", "1"], slow=True),
        Case("run --workload a folder .toml", "files", ["run", "--quiet", "--workload", str(d) + "/x.toml"]),
    ]
    scen = d / "scenarios"
    scenario_files = {
        "empty": "",
        "configs-table": 'name = "s"\norder = 1\n[configs]\nx = 1\n',
        "answer-list": 'name = "s"\norder = 1\nanswer = [1]\n',
        "order-huge": 'name = "s"\norder = 1e300\n',
        "base-list": 'name = "s"\norder = 1\nbase = [1, 2]\n',
    }
    for name, text in scenario_files.items():
        path = write(scen / f"{name}.toml", text)
        cases.append(Case(f"compare --scenario file {name}", "structure", ["compare", "--scenario", str(path)]))
    return cases


def config_cases(d: Path) -> list:
    c = d / "configs"
    base = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 128, "intermediate_size": 256,
            "vocab_size": 1000, "max_position_embeddings": 512}

    def cfg(**changes):
        return json.dumps({**base, **changes})

    files = {
        "list": "[1, 2, 3]",
        "string": '"config"',
        "null": "null",
        "empty": "",
        "deep": "[" * 100_000 + "]" * 100_000,
        "deep-object": '{"a":' * 100_000 + "1" + "}" * 100_000,
        "layers-1e300": cfg(num_hidden_layers=1e300),
        "layers-bigint": cfg().replace('"num_hidden_layers": 2', '"num_hidden_layers": ' + "9" * 400),
        "layers-huge-exponent": cfg().replace('"num_hidden_layers": 2', '"num_hidden_layers": 1e99999'),
        "heads-zero": cfg(num_attention_heads=0),
        "heads-string": cfg(num_attention_heads="four"),
        "hidden-float": cfg(hidden_size=127.5),
        "text-config-int": json.dumps({"model_type": "x", "text_config": 5}),
        "text-config-wrong-types": json.dumps({"model_type": "x", "text_config": {**base, "num_hidden_layers": "two",
                                                                                  "hidden_size": [128]}}),
        "quantization-list": cfg(quantization_config=[1]),
        "quantization-bits-text": cfg(quantization_config={"quant_method": "gptq", "bits": "four"}),
        "torch-dtype-int": cfg(torch_dtype=5),
        "layer-types-text": cfg(layer_types="full_attention"),
        "layer-types-ints": cfg(layer_types=[1, 2]),
        "sliding-window-text": cfg(sliding_window="big", model_type="mistral"),
        "experts-text": cfg(num_experts="many", num_experts_per_tok=2),
        "kv-lora-text": cfg(kv_lora_rank="x"),
        "max-positions-1e30": cfg(max_position_embeddings=10**30),
        "vocab-1e15": cfg(vocab_size=10**15),
        "model-type-list": cfg(model_type=["llama"]),
        "interval-text": cfg(full_attention_interval="4"),
        "utf16": None,
    }
    cases = []
    for name, text in files.items():
        if text is None:
            path = write(c / name / "config.json", cfg().encode("utf-16"))
        else:
            path = write(c / name / "config.json", text)
        cases.append(Case(f"math --config {name}", "structure", ["math", "--config", str(path)]))
    binary = write(c / "binary" / "config.json", bytes(range(256)) * 40)
    cases.append(Case("math --config binary", "structure", ["math", "--config", str(binary)]))
    cases.append(Case("math --config /dev/zero", "files", ["math", "--config", "/dev/zero"]))
    cases.append(Case("math --config a folder without config.json", "files", ["math", "--config", str(d)]))
    return cases


def model_folder_cases(d: Path) -> list:
    """Model folders for --model-path: a small random Llama, then broken copies of it."""
    import torch
    from safetensors.torch import load_file, save_file

    from kvscope.app.lab.verify.tiny_model import build_random_model
    from kvscope.engine.config import ModelConfig

    shape = ModelConfig(name="hostile", num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                        head_dim=16, hidden_size=64, intermediate_size=128, vocab_size=512,
                        max_position_embeddings=512, weight_dtype="fp32")
    good = build_random_model(shape, d / "models" / "good")
    tensors = load_file(good / "model.safetensors")
    config = json.loads((good / "config.json").read_text())

    def variant(name, config_changes=None, drop=(), add=None, tensors_override=None, files=None, no_weights=False):
        folder = d / "models" / name
        folder.mkdir(parents=True, exist_ok=True)
        cfg = {**config, **(config_changes or {})}
        for key, value in list(cfg.items()):
            if value is _DELETE:
                del cfg[key]
        (folder / "config.json").write_text(json.dumps(cfg))
        if not no_weights:
            weights = dict(tensors_override if tensors_override is not None else tensors)
            for key in drop:
                weights.pop(key)
            weights.update(add or {})
            save_file(weights, folder / "model.safetensors")
        for file_name, content in (files or {}).items():
            write(folder / file_name, content)
        return folder

    layer_key = next(k for k in tensors if k.endswith("layers.1.mlp.up_proj.weight"))
    folders = {
        "missing-parameter": variant("missing-parameter", drop=[layer_key]),
        "unexpected-parameter": variant("unexpected-parameter", add={"model.extra.weight": torch.zeros(3)}),
        "more-layers-in-config": variant("more-layers", {"num_hidden_layers": 3}),
        "shape-mismatch": variant("shape-mismatch", {"intermediate_size": 96}),
        "no-architectures": variant("no-architectures", {"architectures": _DELETE}),
        "architectures-string": variant("architectures-string", {"architectures": "LlamaForCausalLM"}),
        "architectures-ints": variant("architectures-ints", {"architectures": [1, 2]}),
        "architectures-unsupported": variant("architectures-unsupported", {"architectures": ["GPT2LMHeadModel"]}),
        "auto-map": variant("auto-map", {"auto_map": {"AutoModel": "x.Y"}}),
        "no-weights": variant("no-weights", no_weights=True),
        "garbage-safetensors": variant("garbage-safetensors", no_weights=True,
                                       files={"model.safetensors": b"\x08\x00\x00\x00\x00\x00\x00\x00{}garbage"}),
        "index-map-list": variant("index-map-list", files={"model.safetensors.index.json":
                                                           json.dumps({"weight_map": ["model.safetensors"]})}),
        "index-binary": variant("index-binary", files={"model.safetensors.index.json": bytes(range(256))}),
        "index-missing-shard": variant("index-missing-shard", files={"model.safetensors.index.json": json.dumps(
            {"weight_map": {"lm_head.weight": "model-00002.safetensors"}})}),
        "index-shard-escapes": variant("index-shard-escapes", files={"model.safetensors.index.json": json.dumps(
            {"weight_map": {"lm_head.weight": "../../../etc/passwd"}})}),
    }
    for name, text in (("config-list", "[1]"), ("config-binary", bytes(range(256))),
                       ("config-deep", "[" * 100_000 + "]" * 100_000)):
        folder = variant(name)
        write(folder / "config.json", text)
        folders[name] = folder
    cases = [Case("run --backend real --model-path good", "model", ["run", "--quiet", "--backend", "real",
                                                                    "--model-path", str(good), "--requests", "2",
                                                                    "--kv-cache-memory-bytes", "1e6"],
                  expect="ok", slow=True)]
    for name, folder in folders.items():
        if name == "no-architectures":
            continue  # transformers picks the class from model_type: it loads (a case below)
        cases.append(Case(f"run --model-path {name}", "model",
                          ["run", "--quiet", "--backend", "real", "--model-path", str(folder), "--requests", "2"],
                          slow=True, must_not_say=("model_type 'llama'", "L, l, a, m, a")))
    for name in ("missing-parameter", "architectures-string", "config-deep"):
        cases.append(Case(f"verify --model-path {name}", "model", ["verify", "--model-path", str(folders[name])],
                          slow=True))
    # weights that do not match their config are refused before the window opens, as by `run`
    for name in ("missing-parameter", "unexpected-parameter", "more-layers-in-config", "shape-mismatch",
                 "architectures-string", "config-deep", "garbage-safetensors", "no-weights", "auto-map"):
        cases.append(Case(f"gui --model-path {name}", "model", ["gui", "--model-path", str(folders[name]),
                                                                "--quit-after", "1"], slow=True,
                          must_say=("weights do not match",) if "parameter" in name or "mismatch" in name
                          or "more-layers" in name else ()))
    cases.append(Case("gui --model-path good", "model", ["gui", "--model-path", str(good), "--quit-after", "1"],
                      expect="ok", slow=True))
    cases.append(Case("run --model-path without architectures (llama)", "model",
                      ["run", "--quiet", "--backend", "real", "--model-path", str(folders["no-architectures"]),
                       "--requests", "2"], expect="ok", slow=True))
    cases += [
        Case("gui --model-path missing", "model", ["gui", "--model-path", str(d / "nope"), "--quit-after", "1"],
             slow=True),
        Case("gui --model-path a file", "model", ["gui", "--model-path", str(good / "config.json"),
                                                  "--quit-after", "1"], slow=True),
        Case("run --model-path missing", "model", ["run", "--backend", "real", "--model-path", str(d / "nope")],
             slow=True),
        Case("verify --prompts 0", "numbers", ["verify", "--prompts", "0"]),
        Case("verify --prompts -3", "numbers", ["verify", "--prompts", "-3"]),
        Case("verify --max-tokens -1", "numbers", ["verify", "--max-tokens", "-1"]),
        Case("verify --max-tokens 0", "numbers", ["verify", "--max-tokens", "0"]),
        Case("verify --max-tokens 1e12", "numbers", ["verify", "--max-tokens", "1e12"]),
        Case("verify --prompts 1e9", "numbers", ["verify", "--prompts", "1e9"]),
        Case("verify --kv-cache-dtype nonsense", "numbers", ["verify", "--kv-cache-dtype", "fp7"]),
        Case("run real --kv-cache-memory-bytes 1", "numbers",
             ["run", "--quiet", "--backend", "real", "--model-path", str(good), "--kv-cache-memory-bytes", "1"],
             slow=True, must_not_say=("weights take",)),
    ]
    return cases


_DELETE = object()


def number_cases(d: Path) -> list:
    math = ["math", "--model", "llama-3-8b"]
    cases = []
    for flags in (
        ["--layers", "1e300"], ["--layers", "1e18"], ["--layers", "-1"], ["--layers", "0"], ["--layers", "2.5"],
        ["--kv-heads", "1e300"], ["--head-dim", "1e12"], ["--attention-heads", "1e15"],
        ["--memory-gib", "1e30"], ["--memory-gib", "-0.5e2"], ["--memory-gib", "nan"], ["--memory-gib", "-inf"],
        ["--memory-bytes", "-1e3"], ["--memory-bytes", "1e300"], ["--memory-gib", "0"],
        ["--block-size", "1e12"], ["--block-size", "0"], ["--max-model-len", "1e15"], ["--max-model-len", "-5"],
        ["--gpu-memory-utilization", "nan"], ["--gpu-memory-utilization", "2"], ["--gpu-memory-utilization", "-0.5"],
        ["--tensor-parallel-size", "1e9"], ["--reserve-bytes", "1e300"], ["--reserve-bytes", "-1e9"],
        ["--kv-cache-memory-bytes", "1e300"], ["--kv-cache-memory-bytes", "-1"], ["--weights-bytes", "1e300"],
        ["--params", "1e300"], ["--params", "-5"], ["--weight-dtype", "fp7"], ["--kv-cache-dtype", "fp7"],
        ["--vllm-version", "x.y"],
    ):
        cases.append(Case(f"math {' '.join(flags)}", "numbers", math + flags))
    cases.append(Case("math custom --layers 1e300", "numbers",
                      ["math", "--layers", "1e300", "--kv-heads", "8", "--head-dim", "128", "--weights-bytes", "1e9"]))
    cases.append(Case("math custom --head-dim 1e300", "numbers",
                      ["math", "--layers", "2", "--kv-heads", "8", "--head-dim", "1e300", "--weights-bytes", "1e9"]))
    cases.append(Case("math --memory-bytes 1", "numbers", ["math", "--memory-bytes", "1"], expect="either"))
    run = ["run", "--quiet", "--requests", "3"]
    for flags in (
        ["--requests", "-1"], ["--requests", "1e12"], ["--requests", "0"], ["--arrival-rate", "-1"],
        ["--arrival-rate", "1e308"], ["--arrival-rate", "nan"], ["--seed", "-1"], ["--seed", "1e30"],
        ["--max-num-seqs", "1e12"], ["--max-num-seqs", "0"], ["--max-num-batched-tokens", "1e15"],
        ["--memory-bytes", "1e30"], ["--kv-cache-memory-bytes", "1"], ["--kv-cache-memory-bytes", "1e15"],
        ["--block-size", "1e9"], ["--max-model-len", "1e12"],
    ):
        cases.append(Case(f"run {' '.join(flags)}", "numbers", run + flags,
                          must_not_say=("weights take",) if "--kv-cache-memory-bytes" in flags else ()))
    cases += [
        Case("gui --quit-after -1", "numbers", ["gui", "--quit-after", "-1"]),
        Case("gui --quit-after nan", "numbers", ["gui", "--quit-after", "nan"]),
        Case("gui --quit-after 1e12", "numbers", ["gui", "--quit-after", "1e12"]),
        Case("gui --size 99999x99999", "numbers", ["gui", "--size", "99999x99999", "--quit-after", "1"]),
        Case("gui --size 0x0", "numbers", ["gui", "--size", "0x0"]),
        Case("gui --size axb", "numbers", ["gui", "--size", "axb"]),
        Case("gui --size 1e3x800", "numbers", ["gui", "--size", "1e3x800"]),
        Case("gui --size -5x5", "numbers", ["gui", "--size", "-5x5", "--quit-after", "1"]),
        Case("gui --size 1600x", "numbers", ["gui", "--size", "1600x", "--quit-after", "1"]),
        Case("gui --size 1e9x1e9", "numbers", ["gui", "--size", "1e9x1e9", "--quit-after", "1"]),
        Case("gui --size 99999999999999999999x800", "numbers",
             ["gui", "--size", "99999999999999999999x800", "--quit-after", "1"]),
        Case("gui --quit-after inf", "numbers", ["gui", "--quit-after", "inf"]),
        Case("gui --quit-after 1e-300 (closes at once)", "numbers",
             ["gui", "--backend", "simulated", "--quit-after", "1e-300"], expect="ok", slow=True),
        Case("compare --requests -5", "numbers", ["compare", "--scenario", "cache-ceiling", "--requests", "-5"]),
        Case("compare --requests 1e12", "numbers", ["compare", "--scenario", "cache-ceiling", "--requests", "1e12"]),
        Case("compare --seed -1", "numbers", ["compare", "--scenario", "cache-ceiling", "--seed", "-1"]),
        Case("compare --seed 1e30", "numbers", ["compare", "--scenario", "cache-ceiling", "--seed", "1e30"]),
        Case("bench --requests 0", "numbers", ["bench", "real", "--requests", "0"]),
        Case("bench --rounds -1", "numbers", ["bench", "compare", "--rounds", "-1"]),
    ]
    return cases


def file_cases(d: Path) -> list:
    f = d / "files"
    recording = small_recording(f / "run.kvrec")
    trace = write(f / "t.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n0,100,10\n1,100,10\n")
    existing = small_recording(f / "existing.kvrec")
    bad_late = write(f / "late.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n0,100,10\n" +
                     "".join(f"{i},100,10\n" for i in range(1, 50)) + "60,oops,10\n")
    cases = [
        Case("export --perfetto onto the recording", "files", ["export", str(recording), "--perfetto", str(recording)],
             protected=[recording]),
        Case("export --csv onto the recording", "files", ["export", str(recording), "--csv", str(recording)],
             protected=[recording]),
        Case("export --csv and --perfetto the same file", "files",
             ["export", str(recording), "--csv", str(f / "same.out"), "--perfetto", str(f / "same.out")]),
        Case("export via another spelling of the path", "files",
             ["export", str(recording), "--csv", str(f / "." / "run.kvrec")], protected=[recording]),
        Case("run --trace t.csv --json t.csv", "files", ["run", "--quiet", "--trace", str(trace), "--json", str(trace)],
             protected=[trace]),
        Case("run --trace t.csv --record t.csv", "files",
             ["run", "--quiet", "--trace", str(trace), "--record", str(trace)], protected=[trace]),
        Case("run --json x --record x", "files",
             ["run", "--quiet", "--requests", "2", "--json", str(f / "x.out"), "--record", str(f / "x.out")]),
        Case("run fails early with an existing --record", "files",
             ["run", "--quiet", "--trace", str(bad_late), "--record", str(existing)], protected=[existing]),
        Case("run fails at once with an existing --record", "files",
             ["run", "--quiet", "--requests", "-1", "--record", str(existing)], protected=[existing]),
        Case("run bad model with an existing --record", "files",
             ["run", "--quiet", "--model", "nope", "--record", str(existing)], protected=[existing]),
        Case("run --json to a folder", "files", ["run", "--quiet", "--requests", "2", "--json", str(f)]),
        Case("run --json /dev/full", "files", ["run", "--quiet", "--requests", "2", "--json", "/dev/full"]),
        Case("run --record /dev/full", "files", ["run", "--quiet", "--requests", "2", "--record", "/dev/full"]),
        Case("run --json in a missing folder", "files",
             ["run", "--quiet", "--requests", "2", "--json", str(f / "no" / "x.json")]),
        Case("compare --json x --csv x", "files",
             ["compare", "--scenario", "cache-ceiling", "--json", str(f / "c.out"), "--csv", str(f / "c.out")]),
        Case("verify --json in a missing folder", "files", ["verify", "--json", str(f / "no" / "v.json")]),
        Case("export a folder", "files", ["export", str(f)]),
        Case("export /dev/zero", "files", ["export", "/dev/zero"]),
        Case("gui --replay missing", "files", ["gui", "--replay", str(f / "missing.kvrec"), "--quit-after", "1"]),
        Case("gui --screenshot in a missing folder", "files",
             ["gui", "--screenshot", str(f / "no" / "s.png"), "--quit-after", "1"]),
        Case("gui --replay a folder", "files", ["gui", "--replay", str(f), "--quit-after", "1"],
             must_say=("is a folder",)),
        Case("gui --replay /dev/zero", "files", ["gui", "--replay", "/dev/zero", "--quit-after", "1"],
             must_say=("not a regular file",)),
        Case("gui --replay a trace", "files", ["gui", "--replay", str(trace), "--quit-after", "1"],
             protected=[trace]),
        Case("gui --screenshot onto the --replay recording", "files",
             ["gui", "--replay", str(recording), "--screenshot", str(recording), "--quit-after", "1"],
             protected=[recording], must_say=("is also the recording",)),
        Case("gui --screenshot another spelling of the --replay recording", "files",
             ["gui", "--replay", str(recording), "--screenshot", str(f / "." / "run.kvrec"), "--quit-after", "1"],
             protected=[recording]),
        Case("gui --screenshot a folder", "files", ["gui", "--screenshot", str(f), "--quit-after", "1"]),
        Case("gui --screenshot without --quit-after", "files", ["gui", "--screenshot", str(f / "s.png")],
             must_say=("needs --quit-after",)),
        Case("gui --screenshot /dev/full", "files", ["gui", "--screenshot", "/dev/full", "--quit-after", "1"],
             must_say=("not a regular file",)),
        Case("gui --screenshot of an unknown image format", "files",
             ["gui", "--screenshot", str(f / "shot.nope"), "--quit-after", "1"], must_say=("no .nope images",)),
        Case("gui --model-path /dev/null", "files", ["gui", "--model-path", "/dev/null", "--quit-after", "1"]),
        Case("gui --replay with a screenshot", "files",
             ["gui", "--replay", str(recording), "--screenshot", str(f / "shot.png"), "--quit-after", "1"],
             expect="ok", slow=True, protected=[recording]),
        Case("math --config /dev/urandom", "files", ["math", "--config", "/dev/urandom"]),
    ]
    return cases + lookup_cases(f)


def lookup_cases(f: Path) -> list:
    """Paths the system cannot look up or that would block, and outputs that are inputs the run
    reads indirectly (the second hostile pass, 2026-11-27)."""
    long_name = str(f / ("a" * 300))
    (f / "loopA").unlink(missing_ok=True)
    (f / "loopB").unlink(missing_ok=True)
    os.symlink(f / "loopB", f / "loopA")
    os.symlink(f / "loopA", f / "loopB")
    pipe = f / "pipe"
    if not pipe.exists():
        os.mkfifo(pipe)
    shape = f / "shape"
    shape.mkdir(exist_ok=True)
    config = write(shape / "config.json", json.dumps({"num_hidden_layers": 2, "num_attention_heads": 4,
                                                       "hidden_size": 64, "vocab_size": 100}))
    trace = write(f / "named.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n0,100,10\n1,100,10\n")
    workload = write(f / "named.toml", 'name = "named"\ntrace = "named.csv"\n')
    return [
        Case("math --model a 300-character name", "files", ["math", "--model", "a" * 300], must_say=("too long",)),
        Case("run --trace a 300-character name", "files", ["run", "--quiet", "--trace", long_name]),
        Case("run --json a 300-character name", "files", ["run", "--quiet", "--requests", "2", "--json", long_name]),
        Case("export a 300-character name", "files", ["export", long_name]),
        Case("run --json a symlink loop", "files", ["run", "--quiet", "--requests", "2", "--json", str(f / "loopA")]),
        Case("gui --screenshot a symlink loop", "files",
             ["gui", "--screenshot", str(f / "loopA"), "--quit-after", "1"]),
        Case("presets with KVSCOPE_CONFIG_DIR a symlink loop", "files", ["presets"],
             env={"KVSCOPE_CONFIG_DIR": str(f / "loopA")}),
        Case("run --trace a named pipe", "files", ["run", "--quiet", "--trace", str(pipe)],
             must_say=("not a regular file",)),
        Case("export a named pipe", "files", ["export", str(pipe)], must_say=("not a regular file",)),
        Case("math --config a named pipe", "files", ["math", "--config", str(pipe)]),
        Case("run --json a named pipe", "files", ["run", "--quiet", "--requests", "2", "--json", str(pipe)],
             must_say=("nothing reads",)),
        Case("export /proc/self/status", "files", ["export", "/proc/self/status"]),
        Case("gui --replay /proc/self/status", "files", ["gui", "--replay", "/proc/self/status", "--quit-after", "1"]),
        Case("run --json the trace a workload file names", "files",
             ["run", "--quiet", "--workload", str(workload), "--json", str(trace)], protected=[trace]),
        Case("run --record a --config folder's config.json", "files",
             ["run", "--quiet", "--config", str(shape), "--requests", "2", "--record", str(config)], protected=[config]),
        Case("run --json the default model preset", "files",
             ["run", "--quiet", "--requests", "2", "--json", str(ROOT / "presets" / "models" / "llama-3-8b.toml")],
             protected=[ROOT / "presets" / "models" / "llama-3-8b.toml"]),
        Case("run --device meta on the real backend", "files",
             ["run", "--quiet", "--backend", "real", "--model", "tiny-llama", "--device", "meta", "--requests", "2"],
             must_say=("cpu or cuda",)),
        Case("run --quantization on the simulated backend", "files",
             ["run", "--quiet", "--quantization", "nf4", "--requests", "2"], must_say=("--weight-dtype",)),
        Case("math --tensor-parallel-size 24 on 32 query heads", "files", ["math", "--tensor-parallel-size", "24"],
             must_say=("num_attention_heads",)),
        Case("run --arrival-rate 1e-300", "files", ["run", "--quiet", "--arrival-rate", "1e-300", "--requests", "3"]),
        Case("gui --replay with --model", "files",
             ["gui", "--replay", str(f / "run.kvrec"), "--model", "llama-3-8b", "--quit-after", "1"],
             must_say=("would not apply",)),
        Case("export --csv -", "files", ["export", str(f / "run.kvrec"), "--csv", "-"]),
        Case("kvscope with no command", "files", [], must_say=("give a command",)),
    ]


# -- running -----------------------------------------------------------------------------------


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))


def judge(case: Case, rc, out: str, err: str, elapsed: float, changed: list) -> tuple[str, str]:
    """(outcome, detail): clean | traceback | hang | wrong | file lost."""
    if rc is None:
        return "hang", f"still running after {elapsed:.0f} s"
    if changed:
        return "file lost", f"changed: {', '.join(changed)}"
    if "Traceback" in err or rc not in (0, 2):
        tail = err.strip().splitlines()[-1:] if err.strip() else [f"exit {rc}"]
        return "traceback", f"exit {rc}: {tail[0][:200]}"
    lines = err.strip().splitlines()
    last = lines[-1] if lines else ""
    if "(an input larger than kvscope checks for)" in last:
        return "wrong", f"caught only by the last-resort handler: {last[:200]}"
    if rc == 2:
        if case.expect == "ok":
            return "wrong", f"refused: {last[:200]}"
        if not (last.startswith("kvscope") and "error" in last):
            return "wrong", f"exit 2 without a kvscope error line: {last[:200]}"
        if len(lines) > 1 and not lines[0].startswith("usage:") and not lines[0].startswith("kvscope"):
            return "wrong", f"more than one line: {lines[0][:120]} ..."
    if rc == 0 and case.expect == "refuse":
        return "wrong", "accepted (exit 0)"
    text = err if rc == 2 else out
    for fragment in case.must_say:
        if fragment not in text:
            return "wrong", f"does not say {fragment!r}: {(last or out.strip()[-200:])[:200]}"
    for fragment in case.must_not_say:
        if fragment in err or fragment in out:
            return "wrong", f"says {fragment!r}: {last[:200]}"
    return "clean", (last if rc == 2 else "exit 0")[:200]


def run_case(case: Case) -> tuple[str, str, float]:
    before = {str(p): Path(p).read_bytes() for p in case.protected if Path(p).exists()}
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "HF_HUB_OFFLINE": "1", **case.env}
    limit = SLOW_TIME_LIMIT_S if case.slow else TIME_LIMIT_S
    started = time.monotonic()
    stdout = open(case.stdout, "wb") if case.stdout else subprocess.PIPE  # noqa: SIM115 - closed below
    proc = subprocess.Popen([str(KVSCOPE), *case.argv], stdout=stdout, stderr=subprocess.PIPE, env=env,
                            preexec_fn=_limit_memory, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=limit)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        out, err = proc.communicate()
        rc = None
    finally:
        if case.stdout:
            stdout.close()
    out = out or b""
    elapsed = time.monotonic() - started
    changed = [p for p, data in before.items() if not Path(p).exists() or Path(p).read_bytes() != data]
    outcome, detail = judge(case, rc, out.decode(errors="replace"), err.decode(errors="replace"), elapsed, changed)
    if outcome == "clean" and elapsed > limit:
        outcome, detail = "hang", f"took {elapsed:.1f} s"
    return outcome, detail, elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="run the cases whose name holds this text")
    parser.add_argument("--category", help="run one category")
    parser.add_argument("--verbose", action="store_true", help="print every case, not only those that fail")
    parser.add_argument("--json", help="write the outcomes as JSON")
    parser.add_argument("--keep", action="store_true", help="keep the fixtures folder")
    args = parser.parse_args()
    d = Path(tempfile.mkdtemp(prefix="kvscope-hostile-"))
    try:
        cases = (number_cases(d) + trace_cases(d) + preset_cases(d) + config_cases(d) + file_cases(d)
                 + recording_cases(d) + model_folder_cases(d) + third_pass_cases(d, Case, write)
                 + fourth_cli_cases(d, Case, write) + fourth_file_cases(d, Case, write)
                 + fifth_cli_cases(d, Case, write) + fifth_file_cases(d, Case, write)
                 + sixth_cli_cases(d, Case, write) + sixth_file_cases(d, Case, write)
                 + seventh_cli_cases(d, Case, write) + seventh_file_cases(d, Case, write)
                 + eighth_cli_cases(d, Case, write) + eighth_file_cases(d, Case, write))
        cases = [c for c in cases if (not args.only or args.only in c.name)
                 and (not args.category or c.category == args.category)]
        results = []
        for case in cases:
            if case.expect == "refuse_or_ok":
                case.expect = "either"
            outcome, detail, elapsed = run_case(case)
            results.append({"name": case.name, "category": case.category, "outcome": outcome, "detail": detail,
                            "seconds": round(elapsed, 2), "argv": case.argv})
            if outcome != "clean" or args.verbose:
                print(f"{outcome:<10} {elapsed:5.1f} s  [{case.category}] {case.name}: {detail}", flush=True)
        by = {}
        for r in results:
            by.setdefault(r["category"], {}).setdefault(r["outcome"], 0)
            by[r["category"]][r["outcome"]] += 1
        print(f"\n{len(results)} cases: " + ", ".join(
            f"{o} {sum(1 for r in results if r['outcome'] == o)}"
            for o in ("clean", "traceback", "hang", "wrong", "file lost")))
        for category, counts in sorted(by.items()):
            print(f"  {category:<10} " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
        return 0 if all(r["outcome"] == "clean" for r in results) else 1
    finally:
        if args.keep:
            print(f"fixtures kept in {d}")
        else:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
