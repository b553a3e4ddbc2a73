"""Generated bad input for every parser: config.json, presets (TOML), traces (CSV), recordings (.kvrec).

Each property: whatever the input, the parser returns or raises the project's own ConfigError
(RecordingError is one), never another exception, and within a time bound per example (the
hypothesis deadline). The inputs are built near the real thing (a real config, a real
recording's bytes, the fields a preset has) so they reach past the first check.
"""

from __future__ import annotations

import json
import string
import tempfile
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from kvscope.app.lab import presets  # noqa: E402
from kvscope.app.lab.bounded_reads import load_json  # noqa: E402
from kvscope.app.lab.models.config_fields import HF_FIELDS  # noqa: E402
from kvscope.app.lab.models.config_json import load_hf_config, model_from_hf_config  # noqa: E402
from kvscope.app.lab.recording import Recording, RunRecorder  # noqa: E402
from kvscope.app.lab.workload import LengthDist, WorkloadSpec, generate_requests, read_trace, workload_from_dict  # noqa: E402
from kvscope.engine import Engine  # noqa: E402
from kvscope.engine.config import ConfigError, EngineArgs  # noqa: E402

DEADLINE_MS = 3000  # one example: a parse, or a whole small recording read back
FUZZ = settings(max_examples=120, deadline=DEADLINE_MS, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

# Values of every JSON/TOML type, numbers at the edges included.
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(10**30), max_value=10**30),
    st.sampled_from([0, 1, -1, 2**31, 2**63, 10**400, 0.5, 1e300, -1e300]),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20),
)
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                        st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                      max_leaves=12)
LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 64, "intermediate_size": 128,
         "vocab_size": 512, "max_position_embeddings": 512}
HF_KEYS = sorted(HF_FIELDS) + ["head_dim", "rope_scaling", "quantization_config"]


def only_config_errors(call):
    try:
        call()
    except ConfigError:
        pass


# -- config.json ------------------------------------------------------------------------------------


@FUZZ
@given(changes=st.dictionaries(st.sampled_from(HF_KEYS), values, max_size=6), drop=st.sets(st.sampled_from(list(LLAMA))))
def test_config_json_fields_of_any_type(changes, drop):
    cfg = {k: v for k, v in {**LLAMA, **changes}.items() if k not in drop}
    only_config_errors(lambda: model_from_hf_config(cfg, "fuzz"))
    only_config_errors(lambda: model_from_hf_config({"model_type": "x", "text_config": cfg}, "fuzz"))


@FUZZ
@given(text=st.one_of(st.text(max_size=200), st.binary(max_size=200).map(lambda b: b.decode("latin-1")),
                      st.builds(lambda n, o: "[" * n + o + "]" * n, st.integers(0, 5000), st.sampled_from(["", "1", "{}"])),
                      values.map(json.dumps)))
def test_config_json_text_of_any_shape(tmp_path, text):
    path = tmp_path / "config.json"
    path.write_bytes(text.encode("utf-8", errors="surrogatepass"))
    only_config_errors(lambda: load_hf_config(path))
    only_config_errors(lambda: load_json(text, "fuzz"))


# -- presets (TOML) ---------------------------------------------------------------------------------

MODEL_KEYS = sorted(presets._MODEL_KEYS)
HARDWARE_KEYS = sorted(presets._HARDWARE_KEYS)
WORKLOAD_KEYS = ["name", "description", "num_requests", "arrival_rate_per_s", "prompt_tokens", "output_tokens",
                 "shared_prefix_fraction", "shared_prefix_tokens", "num_shared_prefixes", "trace", "trace_speedup"]
toml_values = st.recursive(
    st.one_of(st.booleans(), st.integers(min_value=-(2**63), max_value=2**63 - 1),
              st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(string.ascii_letters, max_size=6),
                                                                         inner, max_size=3)),
    max_leaves=8)


@FUZZ
@given(model=st.dictionaries(st.sampled_from(MODEL_KEYS + ["bogus"]), toml_values, max_size=10),
       hardware=st.dictionaries(st.sampled_from(HARDWARE_KEYS + ["bogus"]), toml_values, max_size=8),
       workload=st.dictionaries(st.sampled_from(WORKLOAD_KEYS + ["bogus"]), toml_values, max_size=8))
def test_preset_tables_of_any_shape(model, hardware, workload):
    only_config_errors(lambda: presets.model_from_dict(model, "fuzz", default_name="fuzz"))
    only_config_errors(lambda: presets.hardware_from_dict(hardware, "fuzz", default_name="fuzz"))
    with tempfile.TemporaryDirectory() as folder:
        only_config_errors(lambda: workload_from_dict(workload, "fuzz", trace_dir=Path(folder)))


@FUZZ
@given(text=st.one_of(st.text(max_size=300), st.builds(lambda n: "a = " + "[" * n + "]" * n, st.integers(0, 3000))))
def test_preset_text_of_any_shape(tmp_path, text):
    path = tmp_path / "p.toml"
    path.write_bytes(text.encode("utf-8", errors="surrogatepass"))
    only_config_errors(lambda: presets.read_toml(path, "fuzz"))
    only_config_errors(lambda: presets.load_workload_file(path))


# -- traces (CSV) ------------------------------------------------------------------------------------

cells = st.one_of(st.integers(min_value=-(10**20), max_value=10**20).map(str), st.floats().map(repr),
                  st.sampled_from(["", "nan", "inf", "1e400", "2023-11-16 18:15:46.6805900", "\x00", '"', "\ufeff"]),
                  st.text(max_size=10))


@FUZZ
@given(header=st.sampled_from(["TIMESTAMP,ContextTokens,GeneratedTokens", "\ufeffTIMESTAMP,ContextTokens,GeneratedTokens",
                               "arrival_time_s,prompt_tokens,output_tokens", "a,b,c", ""]),
       rows=st.lists(st.lists(cells, min_size=0, max_size=4).map(",".join), max_size=8),
       newline=st.sampled_from(["\n", "\r\n", "\r"]))
def test_trace_rows_of_any_content(tmp_path, header, rows, newline):
    path = tmp_path / "t.csv"
    path.write_bytes(newline.join([header, *rows]).encode("utf-8", errors="surrogatepass"))
    only_config_errors(lambda: read_trace(path))


# -- recordings (.kvrec) ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def recording_bytes(tmp_path_factory) -> bytes:
    from kvscope.app.lab.presets import load_hardware, load_model

    engine = Engine(load_model("tiny-llama"), load_hardware("h100-80gb"),
                    EngineArgs(kv_cache_memory_bytes=4 * 1024**2, max_num_seqs=8))
    spec = WorkloadSpec("small", num_requests=10, arrival_rate_per_s=20.0,
                        prompt_tokens=LengthDist("constant", value=100, max=100),
                        output_tokens=LengthDist("constant", value=12, max=12))
    engine.add_workload(generate_requests(spec, engine.model.vocab_size))
    path = tmp_path_factory.mktemp("kvrec") / "small.kvrec"
    recorder = RunRecorder(engine, path, {"label": "fuzz", "workload": spec}, keyframe_interval=8)
    engine.run(on_step=recorder.record_step)
    recorder.close(engine.summary())
    return path.read_bytes()


def read_everything(path: Path) -> None:
    """What the commands and the replay read: every step, snapshots, the whole-run views, the exports."""
    from kvscope.app.cli.export import describe
    from kvscope.app.lab.export import write_series_csv
    from kvscope.app.lab.export.perfetto import write_perfetto

    for verify in (True, False):
        with Recording.open(path, verify=verify, allow_truncated=True) as recording:
            for i in range(recording.num_steps):
                recording.step(i)
            for i in range(0, recording.num_steps, 7):
                recording.snapshot_at(i)
            recording.series()
            recording.finished_requests()
            recording.event_counts()
            describe(recording)
            write_series_csv(recording, path.with_suffix(".csv"))
            write_perfetto(recording, path.with_suffix(".json"))


mutations = st.lists(st.tuples(st.sampled_from(["flip", "set", "cut", "insert", "delete"]),
                               st.floats(min_value=0, max_value=1), st.integers(0, 255)), min_size=1, max_size=4)


@FUZZ
@given(changes=mutations)
def test_recording_bytes_mutated(tmp_path, recording_bytes, changes):
    data = bytearray(recording_bytes)
    for kind, where, byte in changes:
        at = min(int(where * len(data)), max(len(data) - 1, 0))
        if kind == "flip" and data:
            data[at] ^= 1 << (byte % 8)
        elif kind == "set" and data:
            data[at] = byte
        elif kind == "cut":
            del data[at:]
        elif kind == "insert":
            data[at:at] = bytes([byte]) * (byte % 5 + 1)
        elif kind == "delete":
            del data[at:at + byte % 9 + 1]
    path = tmp_path / "m.kvrec"
    path.write_bytes(bytes(data))
    only_config_errors(lambda: read_everything(path))


def reframed(recording: bytes, record: int, change) -> bytes:
    """The recording with one record's inflated payload changed by change(payload) and its
    checksums made right (what a forger, not a disk, does); the index is dropped, so the reader
    scans the records."""
    import struct
    import zlib

    from kvscope.app.lab.recording import format as kvrec

    records, offset = [], kvrec.FILE_HEADER.size
    while offset + kvrec.FRAME.size <= len(recording):
        marker, record_type, flags, length, _, _ = kvrec.FRAME.unpack_from(recording, offset)
        records.append((offset, record_type, flags, length))
        offset += kvrec.FRAME.size + length
    offset, record_type, flags, length = records[record % (len(records) - 1)]  # not the index
    raw = recording[offset + kvrec.FRAME.size:offset + kvrec.FRAME.size + length]
    payload = change(zlib.decompress(raw) if flags & kvrec.FLAG_ZLIB else raw)
    stored = zlib.compress(payload) if flags & kvrec.FLAG_ZLIB else payload
    frame = kvrec.FRAME_HEAD.pack(kvrec.FRAME_MARKER, record_type, flags, len(stored), zlib.crc32(stored))
    return (recording[:offset] + frame + struct.pack("<I", zlib.crc32(frame)) + stored
            + recording[offset + kvrec.FRAME.size + length:records[-1][0]])


HEAD_KEYS = ["first_step", "num_steps", "position", "time_s", "step", "num_running", "arrays", "event_details",
             "block_size", "num_blocks", "event_kinds", "format_version", "model", "plan", "workload", "label"]


@FUZZ
@given(record=st.integers(0, 40), key=st.sampled_from(HEAD_KEYS), value=values)
def test_recording_heads_with_fields_of_any_type(tmp_path, recording_bytes, record, key, value):
    import struct

    def change(payload: bytes) -> bytes:
        (n,) = struct.unpack_from("<I", payload)
        head = json.loads(payload[4:4 + n])
        head[key] = value
        text = json.dumps(head, allow_nan=True).encode()
        return struct.pack("<I", len(text)) + text + payload[4 + n:]

    path = tmp_path / "h.kvrec"
    path.write_bytes(reframed(recording_bytes, record, change))
    only_config_errors(lambda: read_everything(path))


@FUZZ
@given(record=st.integers(0, 40), changes=st.lists(st.tuples(st.floats(0, 1), st.integers(0, 255)), min_size=1,
                                                    max_size=6))
def test_recording_arrays_with_any_values(tmp_path, recording_bytes, record, changes):
    """Bytes of a record's arrays (past its head) set to anything, checksums right: counts, block
    indices, event kinds and offsets that contradict each other."""
    import struct

    def change(payload: bytes) -> bytes:
        (n,) = struct.unpack_from("<I", payload)
        data = bytearray(payload)
        start = 4 + n
        for where, byte in changes:
            if len(data) > start:
                data[start + int(where * (len(data) - start - 1))] = byte
        return bytes(data)

    path = tmp_path / "a.kvrec"
    path.write_bytes(reframed(recording_bytes, record, change))
    only_config_errors(lambda: read_everything(path))
