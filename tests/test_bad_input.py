"""Bad input of every kind ends in one line and exit code 2, and never costs a file (issue 16).

One section per kind of input, as the checks are organised (engine/checks.py): numbers past
their range, structures of the wrong type or depth, files (devices, bombs, byte-order marks,
outputs that are also inputs), recordings, model directories, and the window's flags, checked
before a window exists. scripts/hostile_inputs.py runs a few hundred such inputs through the
real command; tests/test_fuzz_parsers.py generates them.
"""

from __future__ import annotations

import json
import re
import struct
import zlib
from pathlib import Path
from types import SimpleNamespace

import pytest

from cli_helper import cli
from kvscope.app.lab import presets
from kvscope.app.lab.bounded_reads import load_json
from kvscope.app.lab.models.config_json import load_hf_config
from kvscope.app.lab.output_path import atomic_output, check_output_path
from kvscope.app.lab.recording import Recording, RecordingError, RunRecorder
from kvscope.app.lab.recording import format as kvrec
from kvscope.app.lab.workload import LengthDist, WorkloadSpec, generate_requests, read_trace
from kvscope.engine import Engine
from kvscope.engine.checks import MAX_NUM_BLOCKS, real_number, whole_number
from kvscope.engine.config import ConfigError, EngineArgs

TRACE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 64, "intermediate_size": 128,
         "vocab_size": 512, "max_position_embeddings": 512}


def refused(rc, err, *fragments) -> str:
    """Exit 2, no traceback, the last stderr line `kvscope...error...` holding every fragment."""
    assert rc == 2, f"exit code {rc}, stderr:\n{err}"
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    last = lines[-1]
    assert last.startswith("kvscope") and "error" in last, err
    assert len(lines) == 1 or lines[0].startswith("usage:"), err
    for fragment in fragments:
        assert fragment in last, f"{fragment!r} not in {last!r}"
    return last


# -- numbers: a range, its bound in the message -----------------------------------------------------


def test_the_bounded_number_checks_name_the_bound_crossed():
    with pytest.raises(ConfigError, match=r"^layers must be at most 10, got 1e\+300$"):
        whole_number(1e300, "layers", 1, 10)
    with pytest.raises(ConfigError, match=r"must be greater than 0, got 0"):
        whole_number(0, "x", 1, 10)
    with pytest.raises(ConfigError, match=r"must be 0 or more, got -1"):
        whole_number(-1, "x", 0, 10)
    with pytest.raises(ConfigError, match=r"must be a whole number from 1 to 10, got 2.5"):
        whole_number(2.5, "x", 1, 10)
    with pytest.raises(ConfigError, match=r"\(401 digits\)"):  # a huge number is not repeated whole
        whole_number(10**400, "x", 1, 10)
    with pytest.raises(ConfigError, match="must be a number from 0 to 1, got nan"):
        real_number(float("nan"), "x", 0, 1)
    assert whole_number(3.0, "x", 1, 10) == 3 and isinstance(whole_number(3.0, "x", 1, 10), int)


@pytest.mark.parametrize("argv, fragments", [
    (["math", "--model", "llama-3-8b", "--layers", "1e300"], ["num_hidden_layers", "at most 10,000", "(301 digits)"]),
    (["math", "--model", "llama-3-8b", "--head-dim", "1e12"], ["head_dim", "at most 65,536"]),
    (["math", "--memory-gib", "-0.5e2"], ["--memory-gib", "greater than 0", "-50"]),  # a value, not an option
    (["math", "--memory-bytes", "-1e3"], ["--memory-bytes", "greater than 0"]),
    (["math", "--memory-gib", "1e30"], ["--memory-gib", "at most"]),
    (["math", "--kv-cache-memory-bytes", "1e300"], ["--kv-cache-memory-bytes", "at most"]),
    (["math", "--reserve-bytes", "1e300"], ["--reserve-bytes", "at most"]),
    (["math", "--params", "1e300"], ["--params", "at most"]),
    (["math", "--tensor-parallel-size", "1e9"], ["--tensor-parallel-size", "at most 65,536"]),
    (["math", "--max-model-len", "1e15"], ["max_model_len", "at most 1,073,741,824"]),
    (["run", "--max-num-seqs", "1e12"], ["max_num_seqs", "at most"]),
    (["run", "--arrival-rate", "1e308"], ["arrival_rate_per_s", "at most"]),
    (["run", "--seed", "1e30"], ["--seed", "at most"]),
    (["run", "--requests", "1e12"], ["num_requests", "at most 10,000,000"]),
    (["gui", "--quit-after", "-1"], ["--quit-after", "0 or more", "-1"]),
    (["gui", "--quit-after", "1e12"], ["--quit-after", "at most"]),
    (["gui", "--size", "99999x99999"], ["--size", "8192x8192"]),
    (["verify", "--prompts", "0"], ["--prompts", "greater than 0"]),
    (["verify", "--max-tokens", "-1"], ["--max-tokens", "greater than 0", "-1"]),
    (["verify", "--max-tokens", "1e12"], ["--max-tokens", "at most 4,096"]),
    (["compare", "--scenario", "cache-ceiling", "--seed", "1e30"], ["--seed", "at most"]),
    (["bench", "compare", "--rounds", "-1"], ["--rounds", "greater than 0"]),
    (["bench", "gui", "--rounds", "1001"], ["--rounds", "at most 1,000"]),
    (["bench", "scheduler", "--rounds", "3"], ["--rounds goes with", "bench compare", "bench gui"]),
    (["bench", "gui", "--part", "frame", "--rounds", "3"], ["--rounds goes with", "its cost part"]),
])
def test_numbers_out_of_range_are_refused_with_the_bound(capsys, argv, fragments):
    rc, out, err = cli(capsys, *argv)
    refused(rc, err, *fragments)
    assert out == ""


def test_a_pool_too_large_to_simulate_is_refused_before_it_is_built(capsys):
    rc, _, err = cli(capsys, "run", "--quiet", "--requests", 2, "--kv-cache-memory-bytes", "1e15")
    refused(rc, err, f"more than the {MAX_NUM_BLOCKS:,}", "block_size")


def test_a_budget_of_one_byte_does_not_blame_the_weights(capsys):
    rc, _, err = cli(capsys, "run", "--quiet", "--requests", 2, "--kv-cache-memory-bytes", 1)
    line = refused(rc, err, "kv_cache_memory_bytes", "smaller than one block", "2,097,152 bytes")
    assert "weights" not in line


@pytest.mark.parametrize("lengths", ['{ dist = "uniform", min = 1, max = 1000000000000000000 }', "1000000000000",
                                     '{ dist = "lognormal", median = 1e308, sigma = 1e308 }'])
def test_absurd_lengths_are_refused_before_their_tokens_are_made(tmp_path, lengths):
    path = tmp_path / "w.toml"
    path.write_text(f'name = "w"\nnum_requests = 2\nprompt_tokens = {lengths}\n')
    with pytest.raises(ConfigError, match="prompt_tokens: .* must be at most 4,194,304"):
        presets.load_workload_file(path)


# -- structures: types, nesting, allowed keys ---------------------------------------------------------


@pytest.fixture
def user_presets(tmp_path, monkeypatch):
    monkeypatch.setenv("KVSCOPE_CONFIG_DIR", str(tmp_path / "config"))
    root = tmp_path / "config" / "presets"
    for kind in ("models", "hardware", "workloads"):
        (root / kind).mkdir(parents=True)
    return root


MODEL_FIELDS = ("num_hidden_layers = 2\nnum_attention_heads = 8\nnum_key_value_heads = 8\nhead_dim = 64\n"
                "hidden_size = 512\nintermediate_size = 1024\nvocab_size = 1000\n")


@pytest.mark.parametrize("kind, text, fragments", [
    ("models", "", ["missing field(s) num_hidden_layers"]),
    ("models", MODEL_FIELDS.replace("num_hidden_layers = 2", "num_hidden_layers = [2]"),
     ["num_hidden_layers must be a number, got [2]"]),
    ("models", MODEL_FIELDS + "weight_dtype = ['bf16']\n", ["weight_dtype must be text"]),
    ("models", MODEL_FIELDS.replace("num_hidden_layers = 2", "num_hidden_layers = 1e300"),
     ["num_hidden_layers must be at most 10,000, got 1e+300"]),
    ("hardware", 'memory_bytes = 80e9\nmemory_bandwidth_bytes_per_s = 3e12\npeak_flops = "fast"\n',
     ["peak_flops must be a table, got 'fast'"]),
    ("hardware", "memory_bytes = 80e9\nmemory_bandwidth_bytes_per_s = 3e12\npeak_flops = [1, 2]\n",
     ["peak_flops must be a table"]),
    ("hardware", 'memory_bytes = 80e9\nmemory_bandwidth_bytes_per_s = 3e12\n[peak_flops]\nfp16 = "lots"\n',
     ["peak_flops.fp16 must be a number"]),
    ("hardware", 'memory_bytes = 80e9\nmemory_bandwidth_bytes_per_s = 3e12\nkind = "tpu"\n[peak_flops]\nfp16 = 1e15\n',
     ["kind must be 'gpu' or 'cpu'"]),
    ("hardware", "memory_bytes = 1e300\nmemory_bandwidth_bytes_per_s = 3e12\n[peak_flops]\nfp16 = 1e15\n",
     ["memory_bytes must be at most"]),
])
def test_a_preset_of_the_wrong_shape_names_the_field(capsys, user_presets, kind, text, fragments):
    (user_presets / kind / "bad.toml").write_text(text)
    flag = "--model" if kind == "models" else "--hardware"
    rc, _, err = cli(capsys, "math", flag, "bad")
    line = refused(rc, err, "preset bad", *fragments)
    assert "__init__" not in line and "positional argument" not in line


def test_one_invalid_user_preset_is_listed_as_invalid_and_the_rest_still_are(capsys, user_presets):
    (user_presets / "models" / "broken.toml").write_text("num_hidden_layers = 'two'\n")
    (user_presets / "hardware" / "broken.toml").write_text('peak_flops = "fast"\n')
    (user_presets / "workloads" / "broken.toml").write_text('name = "w"\ntrace = 5\n')
    rc, out, err = cli(capsys, "presets")
    assert rc == 0, err
    for kind in ("models", "hardware", "workloads"):
        block = out.split(f"{kind}:")[1]
        assert "broken" in block and "(invalid:" in block.split("broken", 1)[1].splitlines()[0]
    assert "llama-3-8b" in out and "h100-80gb" in out and "azure-conv" in out
    rc, out, _ = cli(capsys, "models")
    assert rc == 0 and "(invalid:" in out


@pytest.mark.parametrize("argv, fragment", [
    (["math", "--model", ""], "--model is empty"),
    (["math", "--hardware", " "], "--hardware is empty"),
    (["run", "--workload", ""], "--workload is empty"),
    (["compare", "--scenario", ""], "--scenario is empty"),
    (["gui", "--model", ""], "--model is empty"),
    (["math", "--model", "../hardware/h100-80gb"], "a preset name uses letters"),
])
def test_an_empty_or_path_like_preset_name_is_refused(capsys, argv, fragment):
    rc, _, err = cli(capsys, *argv)
    refused(rc, err, fragment)


def deep(n: int) -> str:
    return "[" * n + "]" * n


@pytest.mark.parametrize("text, fragments", [
    (deep(100_000), ["nested deeper than 64 levels"]),
    ('{"a":' * 50_000 + "1" + "}" * 50_000, ["nested deeper"]),
    ("[1, 2, 3]", ["expected a JSON object"]),
    (json.dumps({**LLAMA, "num_hidden_layers": 1e300}), ["num_hidden_layers must be at most 10,000"]),
    (json.dumps(LLAMA).replace('"num_hidden_layers": 2', '"num_hidden_layers": ' + "9" * 400),
     ["num_hidden_layers must be at most", "(400 digits)"]),
    (json.dumps({"model_type": "x", "text_config": 5}), ["text_config must be a table"]),
    (json.dumps({"model_type": "x", "text_config": {**LLAMA, "hidden_size": [64]}}), ["hidden_size must be a whole"]),
    (json.dumps({**LLAMA, "model_type": ["llama"]}), ["model_type must be text"]),
    (json.dumps({**LLAMA, "layer_types": [1, 2]}), ["layer_types must be a list of names"]),
    (json.dumps({**LLAMA, "quantization_config": {"quant_method": "gptq", "bits": "four"}}),
     ["quantization_config.bits must be a whole number"]),
])
def test_a_config_json_of_the_wrong_shape_is_one_clear_error(capsys, tmp_path, text, fragments):
    (tmp_path / "config.json").write_text(text)
    rc, _, err = cli(capsys, "math", "--config", tmp_path)
    refused(rc, err, "config.json", *fragments)


def test_a_config_json_that_is_binary_or_a_device_is_refused(tmp_path):
    (tmp_path / "config.json").write_bytes(bytes(range(256)) * 8)
    with pytest.raises(ConfigError, match="not UTF-8 text"):
        load_hf_config(tmp_path)
    with pytest.raises(ConfigError, match="not a regular file"):
        load_hf_config("/dev/zero")


def test_the_depth_limited_json_loader():
    assert load_json(b'\xef\xbb\xbf{"a": [1]}', "x") == {"a": [1]}  # a byte-order mark is not JSON's
    with pytest.raises(ConfigError, match="^x: JSON nested deeper than 3 levels$"):
        load_json("[[[[1]]]]", "x", max_depth=3)


# -- files ------------------------------------------------------------------------------------------


def test_a_trace_with_a_byte_order_mark_finds_its_first_column(tmp_path):
    path = tmp_path / "bom.csv"
    path.write_bytes(("\ufeff" + TRACE_HEADER + "0,100,10\n1,50,5\n").encode("utf-8"))
    assert [(r.prompt_tokens, r.output_tokens) for r in read_trace(path)] == [(100, 10), (50, 5)]


@pytest.mark.parametrize("rows, fragments", [
    (["0,1000000000,10"], ["line 2", "prompt tokens must be at most 4,194,304"]),
    (["0,10,1000000000000000000"], ["line 2", "output tokens must be at most"]),
    (["0,10,10", "1e308,10,10"], ["line 3", "a trace spans at most"]),
    (["0," + "9" * 200_000 + ",10"], ["line 2", "not a readable CSV row", "field limit"]),
])
def test_a_trace_row_past_the_bounds_names_its_line(tmp_path, rows, fragments):
    path = tmp_path / "t.csv"
    path.write_text(TRACE_HEADER + "\n".join(rows) + "\n")
    with pytest.raises(ConfigError) as error:
        read_trace(path)
    for fragment in fragments:
        assert fragment in str(error.value)


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_a_trace_that_is_a_device_is_refused_at_once(device):
    with pytest.raises(ConfigError, match="not a regular file"):
        read_trace(device)


def test_a_user_workload_finds_its_relative_trace_beside_it(capsys, user_presets):
    (user_presets / "workloads" / "mine.toml").write_text('name = "mine"\ntrace = "mine.csv"\n')
    (user_presets / "workloads" / "mine.csv").write_text(TRACE_HEADER + "0,50,5\n1,60,6\n")
    spec = presets.load_workload("mine")
    assert Path(spec.trace_path) == user_presets / "workloads" / "mine.csv"
    # a built-in trace named by a user preset is still found
    (user_presets / "workloads" / "azure.toml").write_text('name = "azure"\ntrace = "azure_conv.csv"\n')
    assert Path(presets.load_workload("azure").trace_path).parent == Path(presets.presets_root() / "traces")
    rc, out, err = cli(capsys, "run", "--quiet", "--workload", "mine", "--json", "-")
    assert rc == 0, err
    assert json.loads(out)["completed"] == 2


def small_engine():
    from kvscope.app.lab.presets import load_hardware, load_model

    engine = Engine(load_model("tiny-llama"), load_hardware("h100-80gb"),
                    EngineArgs(kv_cache_memory_bytes=4 * 1024**2, max_num_seqs=8))
    spec = WorkloadSpec("small", num_requests=12, arrival_rate_per_s=20.0,
                        prompt_tokens=LengthDist("constant", value=100, max=100),
                        output_tokens=LengthDist("constant", value=20, max=20))
    engine.add_workload(generate_requests(spec, engine.model.vocab_size))
    return engine, spec


@pytest.fixture(scope="module")
def recording_bytes(tmp_path_factory) -> bytes:
    path = tmp_path_factory.mktemp("rec") / "small.kvrec"
    engine, spec = small_engine()
    recorder = RunRecorder(engine, path, {"label": "small", "workload": spec}, keyframe_interval=16)
    engine.run(on_step=recorder.record_step)
    recorder.close(engine.summary())
    return path.read_bytes()


@pytest.mark.parametrize("argv", [
    ["export", "{rec}", "--perfetto", "{rec}"],
    ["export", "{rec}", "--csv", "{rec}"],
    ["export", "{rec}", "--csv", "{dir}/./run.kvrec"],
    ["run", "--quiet", "--trace", "{trace}", "--json", "{trace}"],
    ["run", "--quiet", "--trace", "{trace}", "--record", "{trace}"],
])
def test_an_output_that_is_also_an_input_is_refused(capsys, tmp_path, recording_bytes, argv):
    rec, trace = tmp_path / "run.kvrec", tmp_path / "t.csv"
    rec.write_bytes(recording_bytes)
    trace.write_text(TRACE_HEADER + "0,100,10\n")
    before = {rec: rec.read_bytes(), trace: trace.read_bytes()}
    rc, _, err = cli(capsys, *[a.format(rec=rec, trace=trace, dir=tmp_path) for a in argv])
    refused(rc, err, "is also the", "this command reads")
    assert {p: p.read_bytes() for p in before} == before


@pytest.mark.parametrize("argv", [
    ["run", "--quiet", "--requests", 2, "--json", "{out}", "--record", "{out}"],
    ["compare", "--scenario", "cache-ceiling", "--json", "{out}", "--csv", "{out}"],
])
def test_two_outputs_naming_one_file_are_refused(capsys, tmp_path, argv):
    rc, _, err = cli(capsys, *[str(a).format(out=tmp_path / "x.out") for a in argv])
    refused(rc, err, "name the same file")


def test_a_run_that_fails_leaves_an_existing_recording_as_it_was(tmp_path, recording_bytes, monkeypatch):
    target = tmp_path / "run.kvrec"
    target.write_bytes(recording_bytes)
    engine, _ = small_engine()
    recorder = RunRecorder(engine, target, {"label": "fails"})
    for _ in range(5):
        recorder.record_step(engine.step())
    assert target.read_bytes() == recording_bytes  # written beside it meanwhile
    recorder.close(engine.summary(), note="the run stopped early: RuntimeError", failed=True)
    assert target.read_bytes() == recording_bytes and not recorder.replaced
    assert [p.name for p in tmp_path.iterdir()] == ["run.kvrec"]  # nothing left beside it
    # a run that completes replaces it
    engine, _ = small_engine()
    recorder = RunRecorder(engine, target, {"label": "completes"})
    engine.run(on_step=recorder.record_step)
    recorder.close(engine.summary())
    assert recorder.replaced and Recording.open(target).header["label"] == "completes"


def test_a_cli_run_that_fails_mid_run_keeps_the_existing_record_target(capsys, tmp_path, recording_bytes,
                                                                      monkeypatch):
    target = tmp_path / "run.kvrec"
    target.write_bytes(recording_bytes)
    original = Engine.step
    calls = {"n": 0}

    def failing_step(self):
        calls["n"] += 1
        if calls["n"] > 3:
            raise ConfigError("the device went away")
        return original(self)

    monkeypatch.setattr(Engine, "step", failing_step)
    rc, _, err = cli(capsys, "run", "--quiet", "--requests", 5, "--record", target)
    refused(rc, err, "the device went away", f"{target} was left as it was")
    assert target.read_bytes() == recording_bytes


def test_an_atomic_output_leaves_the_target_when_the_writer_fails(tmp_path):
    target = tmp_path / "out.json"
    target.write_text("before")
    with pytest.raises(RuntimeError):
        with atomic_output(target) as partial:
            partial.write_text("half")
            raise RuntimeError("disk full")
    assert target.read_text() == "before" and [p.name for p in tmp_path.iterdir()] == ["out.json"]
    with atomic_output(target) as partial:
        partial.write_text("after")
    assert target.read_text() == "after"
    with atomic_output("/dev/null") as path:  # a device is written as it is, never renamed over
        assert str(path) == "/dev/null"
    check_output_path("--json", "/dev/null")


# -- recordings -------------------------------------------------------------------------------------


def records_of(data: bytes) -> list:
    out, offset = [], kvrec.FILE_HEADER.size
    while offset + kvrec.FRAME.size <= len(data):
        marker, record_type, flags, length, _, _ = kvrec.FRAME.unpack_from(data, offset)
        if marker != kvrec.FRAME_MARKER:
            break
        out.append((offset, record_type, flags, length))
        offset += kvrec.FRAME.size + length
    return out


def replaced(data: bytes, number: int, stored: bytes, flags: int | None = None) -> bytes:
    """The file with record `number` holding `stored` (as stored: compressed if its flag says so),
    checksums right, the index dropped (the reader scans)."""
    records = records_of(data)
    offset, record_type, old_flags, length = records[number]
    flags = old_flags if flags is None else flags
    head = kvrec.FRAME_HEAD.pack(kvrec.FRAME_MARKER, record_type, flags, len(stored), zlib.crc32(stored))
    end = next(r[0] for r in records if r[1] == kvrec.INDEX)
    return data[:offset] + head + struct.pack("<I", zlib.crc32(head)) + stored + data[offset + kvrec.FRAME.size + length:end]


def payload(data: bytes, number: int) -> bytes:
    offset, _, flags, length = records_of(data)[number]
    raw = data[offset + kvrec.FRAME.size: offset + kvrec.FRAME.size + length]
    return zlib.decompress(raw) if flags & kvrec.FLAG_ZLIB else raw


def with_head(raw: bytes, change) -> bytes:
    (n,) = struct.unpack_from("<I", raw)
    head = json.loads(raw[4:4 + n])
    change(head)
    text = json.dumps(head).encode()
    return struct.pack("<I", len(text)) + text + raw[4 + n:]


def number_of(data: bytes, record_type: int) -> int:
    return next(i for i, r in enumerate(records_of(data)) if r[1] == record_type)


def changed_head(data: bytes, record_type: int, change) -> bytes:
    number = number_of(data, record_type)
    raw = with_head(payload(data, number), change)
    compressed = records_of(data)[number][2] & kvrec.FLAG_ZLIB
    return replaced(data, number, zlib.compress(raw) if compressed else raw)


@pytest.mark.parametrize("record_type, change, fragment", [
    (kvrec.HEADER, lambda h: h.update(model=[1, 2]), "the header's model must be a table"),
    (kvrec.HEADER, lambda h: h.update(format_version="one"), "format_version must be a list of whole numbers"),
    (kvrec.HEADER, lambda h: h.update(event_kinds=7), "event_kinds must be a list of event names"),
    (kvrec.HEADER, lambda h: h.update(num_blocks=10**12), f"num_blocks must be at most {MAX_NUM_BLOCKS:,}"),
    (kvrec.HEADER, lambda h: h.update(block_size="16"), "block_size must be a whole number"),
    (kvrec.STEPS, lambda h: h.update(first_step="zero"), "first_step must be a whole number"),
    (kvrec.KEYFRAME, lambda h: h.update(position="start"), "position must be a whole number"),
    (kvrec.KEYFRAME, lambda h: h["arrays"].pop("owner"), "has no owner array"),
    (kvrec.KEYFRAME, lambda h: h.update(time_s="noon"), "time_s must be a number"),
    (kvrec.KEYFRAME, lambda h: h.update(arrays=[1]), "its arrays are not a table"),
    (kvrec.DELTAS, lambda h: h.update(arrays={}), "has no"),
    (kvrec.STEPS, lambda h: h["arrays"]["step.step"].update(dtype="|O"), "dtype object"),
])
def test_a_recording_with_fields_of_the_wrong_type_is_a_recording_error(tmp_path, recording_bytes, record_type,
                                                                        change, fragment):
    path = tmp_path / "bad.kvrec"
    path.write_bytes(changed_head(recording_bytes, record_type, change))
    with pytest.raises(RecordingError, match="the file is corrupt") as error:
        Recording.open(path)
    assert fragment in str(error.value)


def test_an_event_kind_out_of_range_is_a_recording_error(tmp_path, recording_bytes):
    number = number_of(recording_bytes, kvrec.STEPS)
    raw = bytearray(payload(recording_bytes, number))
    (n,) = struct.unpack_from("<I", raw)
    raw[4 + n + json.loads(raw[4:4 + n])["arrays"]["event.kind"]["offset"]] = 200
    path = tmp_path / "bad.kvrec"
    path.write_bytes(replaced(recording_bytes, number, zlib.compress(bytes(raw))))
    with pytest.raises(RecordingError, match="event.kind must hold whole numbers from 0 to"):
        Recording.open(path)


def test_a_huge_claimed_record_length_costs_no_memory(tmp_path, recording_bytes):
    data = bytearray(recording_bytes)
    offset = records_of(recording_bytes)[2][0]
    struct.pack_into("<Q", data, offset + 4, 2**62)
    struct.pack_into("<I", data, offset + 16, zlib.crc32(bytes(data[offset:offset + 16])))
    path = tmp_path / "bad.kvrec"
    path.write_bytes(bytes(data))
    with pytest.raises(RecordingError, match="ends past the end of the file"):
        Recording.open(path)


def test_a_zlib_bomb_is_refused_having_inflated_no_more_than_the_cap(tmp_path, recording_bytes, monkeypatch):
    monkeypatch.setattr(kvrec, "MAX_RECORD_BYTES", 4 * 1024**2)
    bomb = zlib.compress(bytes(64 * 1024**2), 9)  # 64 MiB of zeros in about 64 KiB
    path = tmp_path / "bomb.kvrec"
    path.write_bytes(replaced(recording_bytes, number_of(recording_bytes, kvrec.DELTAS), bomb))
    with pytest.raises(RecordingError, match="inflates to more than 4,194,304 bytes"):
        Recording.open(path)
    with pytest.raises(RecordingError, match="cut short"):
        kvrec.inflate(zlib.compress(b"x" * 1000)[:-6], "x")


@pytest.mark.parametrize("change, fragment", [
    (lambda d: changed_head(d, kvrec.HEADER, lambda h: h.update(num_blocks=10**12)), "num_blocks must be at most"),
    (lambda d: changed_head(d, kvrec.KEYFRAME, lambda h: h["arrays"].pop("owner")), "has no owner array"),
])
def test_gui_replay_refuses_a_recording_the_window_could_not_show(capsys, tmp_path, recording_bytes, change,
                                                                   fragment):
    path = tmp_path / "bad.kvrec"
    path.write_bytes(change(recording_bytes))
    rc, _, err = cli(capsys, "gui", "--replay", path, "--quit-after", 0)
    refused(rc, err, fragment)


# -- model directories -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    pytest.importorskip("torch")
    import torch
    from safetensors.torch import load_file, save_file

    from kvscope.app.lab.verify.tiny_model import build_random_model
    from kvscope.engine.config import ModelConfig

    root = tmp_path_factory.mktemp("models")
    shape = ModelConfig(name="m", num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                        hidden_size=64, intermediate_size=128, vocab_size=512, max_position_embeddings=512,
                        weight_dtype="fp32")
    good = build_random_model(shape, root / "good")
    tensors = load_file(good / "model.safetensors")
    config = json.loads((good / "config.json").read_text())
    dirs = {"good": good}

    def variant(name, config_changes=None, drop=(), add=None):
        folder = root / name
        folder.mkdir()
        cfg = {k: v for k, v in {**config, **(config_changes or {})}.items() if v is not None}
        (folder / "config.json").write_text(json.dumps(cfg))
        weights = {k: v for k, v in tensors.items() if k not in drop}
        weights.update(add or {})
        save_file(weights, folder / "model.safetensors")
        dirs[name] = folder

    variant("missing", drop=[k for k in tensors if k.endswith("layers.1.mlp.up_proj.weight")])
    variant("unexpected", add={"model.extra.weight": torch.zeros(3)})
    variant("shape", {"intermediate_size": 96})
    variant("no-architectures", {"architectures": None})
    variant("architectures-string", {"architectures": "LlamaForCausalLM"})
    variant("index-map-list")
    (root / "index-map-list" / "model.safetensors.index.json").write_text('{"weight_map": ["model.safetensors"]}')
    return dirs


@pytest.mark.parametrize("name, fragments", [
    ("missing", ["weights do not match its config.json", "missing from the weights", "layers.1.mlp.up_proj.weight"]),
    ("unexpected", ["weights do not match", "not in the model", "model.extra.weight"]),
    ("shape", ["weights do not match", "of another shape", "mlp"]),
    ("architectures-string", ["architectures must be a list, got 'LlamaForCausalLM'"]),
    ("index-map-list", ["weight_map must be a table"]),
])
def test_a_model_directory_whose_weights_or_config_disagree_is_refused(model_dirs, name, fragments):
    from kvscope.app.lab.models.loader import load_model_directory

    with pytest.raises(ConfigError) as error:
        load_model_directory(model_dirs[name], device="cpu")
    for fragment in fragments:
        assert fragment in str(error.value)
    assert "L, l, a" not in str(error.value)


def test_a_model_directory_without_architectures_is_read_by_its_model_type(model_dirs):
    from kvscope.app.lab.models.loader import check_model_directory, load_model_directory

    assert "architectures" not in check_model_directory(model_dirs["no-architectures"])
    loaded = load_model_directory(model_dirs["no-architectures"], device="cpu")
    assert loaded.config.num_hidden_layers == 2 and not loaded.random_weights


def gui_args(**given):
    base = dict(model=None, model_path=None, hardware=None, workload=None, backend=None, theme="dark",
                size=(1600, 960), quit_after=None, screenshot=None, demo=False, replay=None, scenario=None)
    return SimpleNamespace(**{**base, **given})


@pytest.mark.parametrize("path, fragment", [
    ("{root}/nope", "no such directory"),
    ("{good}/config.json", "is a file"),
    ("{missing_config}", "missing config.json"),
])
def test_gui_checks_its_model_path_before_any_window(tmp_path, model_dirs, path, fragment):
    from kvscope.app.cli.gui import check_flags

    (tmp_path / "empty").mkdir()
    path = path.format(root=tmp_path, good=model_dirs["good"], missing_config=tmp_path / "empty")
    with pytest.raises(ConfigError, match=fragment):
        check_flags(gui_args(model_path=path))


def test_gui_refuses_a_preset_whose_random_weights_pass_this_machines_memory_before_any_window(monkeypatch):
    """Before: `gui --backend real --model llama-3-70b --quit-after 1` ended 0 over a window that could not run."""
    import kvscope.app.cli.gui as gui
    from kvscope.app.cli.gui import check_flags

    machine = gui.load_hardware("this-machine").replace(memory_bytes=24 * 2**30)  # whatever this machine holds
    monkeypatch.setattr(gui, "load_hardware", lambda name: machine)
    with pytest.raises(ConfigError, match="llama-3-70b needs about 262.8 GiB for its weights as fp32, but this "
                                          "machine has 24.0 GiB: the real backend builds a preset's weights"):
        check_flags(gui_args(backend="real", model="llama-3-70b"))
    assert check_flags(gui_args(backend="real", model="tiny-llama"))["model"] == "tiny-llama"


def test_a_reader_that_stops_early_costs_no_traceback():
    """`kvscope presets | head -1`: the pipe closes before the listing is written."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "kvscope.app", "presets"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141 and err == "", err


@pytest.mark.parametrize("name, fragments", [
    ("missing", ["weights do not match its config.json", "layers.1.mlp.up_proj.weight"]),
    ("shape", ["weights do not match", "of another shape"]),
])
def test_gui_refuses_weights_that_do_not_match_their_config_before_any_window(model_dirs, name, fragments):
    from kvscope.app.cli.gui import check_flags

    with pytest.raises(ConfigError) as error:
        check_flags(gui_args(model_path=str(model_dirs[name])))
    assert str(error.value).startswith(f"--model-path {model_dirs[name]}")
    for fragment in fragments:
        assert fragment in str(error.value)


def test_gui_accepts_a_model_directory_whose_weights_match():
    from kvscope.app.cli.gui import weights_mismatch

    pytest.importorskip("transformers")
    import tempfile

    from kvscope.app.lab.verify.tiny_model import build_random_model
    from kvscope.engine.config import ModelConfig

    shape = ModelConfig(name="m", num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, head_dim=8,
                        hidden_size=16, intermediate_size=32, vocab_size=64, max_position_embeddings=64,
                        weight_dtype="fp32")
    with tempfile.TemporaryDirectory() as root:
        assert weights_mismatch(str(build_random_model(shape, Path(root) / "m"))) is None


def test_gui_screenshot_without_quit_after_is_refused(tmp_path):
    from kvscope.app.cli.gui import check_flags

    with pytest.raises(ConfigError, match="needs --quit-after"):
        check_flags(gui_args(screenshot=str(tmp_path / "shot.png")))


# -- the window's own inputs: its settings form and a model folder chosen in it ---------------------


@pytest.fixture
def window(qtbot, tmp_path, monkeypatch):
    from kvscope.app.cli.gui import initial_values
    from kvscope.app.gui.main_window import MainWindow

    monkeypatch.setenv("KVSCOPE_CONFIG_DIR", str(tmp_path / "config"))
    win = MainWindow(initial_values(gui_args(backend="simulated", hardware="h100-80gb", workload="chat")),
                     autoplay=False)
    qtbot.addWidget(win)
    win.show()
    yield win
    win.close()


def test_the_settings_boxes_hold_what_the_command_line_accepts_and_no_more(window):
    from kvscope.app.lab.workload import MAX_REQUESTS
    from kvscope.engine.checks import CEILINGS, MAX_BYTES

    settings, editor = window.settings, window.editor
    assert settings.max_model_len.maximum() == CEILINGS["max_model_len"]
    assert settings.max_num_seqs.maximum() == CEILINGS["max_num_seqs"]
    assert settings.max_num_batched_tokens.maximum() == CEILINGS["max_num_batched_tokens"]
    assert settings.num_requests.maximum() == MAX_REQUESTS
    assert settings.kv_budget.maximum() * 1024**2 == MAX_BYTES
    for name, box in editor.model_boxes.items():
        assert box.maximum() == CEILINGS[name], name
    assert editor.gpu_count.maximum() == CEILINGS["gpu_count"]
    assert "at most 1,048,576 requests" in settings.max_num_seqs.toolTip()


@pytest.mark.parametrize("field, box, fragment", [
    # 1 TiB on an 80 GB H100: the device's memory is said first, as `math --kv-cache-memory-bytes` says it
    ("kv_cache_memory_bytes", "kv_budget", "is more than the 79.19 GiB (85.0 GB) of h100-80gb; give at most"),
    ("max_model_len", "max_model_len", "longer than the 8,192 positions of llama-3-8b"),
])
def test_a_value_the_engine_refuses_shows_its_reason_in_its_field_and_apply_waits(window, field, box, fragment):
    spin = getattr(window.settings, box)
    spin.setValue(spin.maximum())
    assert window.settings_form.current_config() is None
    assert fragment in window.settings.errors[field].text() and not window.settings.apply_button.isEnabled()
    assert not window.apply_settings(play=True)
    spin.setValue(spin.minimum())
    assert window.settings_form.current_config() is not None and window.settings.apply_button.isEnabled()


def test_a_context_no_full_request_of_which_fits_the_pool_is_refused_in_its_field(window):
    """Within the model's positions, but a pool of 512 MiB holds half of one 8,192-token request of
    llama-3-8b (128 KiB a token): vLLM would not start."""
    window.settings.kv_budget.setValue(512)
    window.settings.max_model_len.setValue(8192)
    assert window.settings_form.current_config() is None
    assert "not one full-length request fits" in window.settings.errors["max_model_len"].text()
    assert not window.apply_settings(play=True)
    window.settings.max_model_len.setValue(2048)
    assert window.settings_form.current_config() is not None


def test_a_model_folder_chosen_in_the_window_whose_weights_disagree_is_one_message(window, qtbot, model_dirs):
    settings = window.settings
    settings.model_path = str(model_dirs["missing"])
    settings.backend.setCurrentIndex(settings.backend.findData("real"))
    assert window.apply_settings(play=True)
    qtbot.waitUntil(lambda: bool(window.errors_shown), timeout=120_000)
    error = window.errors_shown[-1]
    assert "weights do not match its config.json" in error and "Traceback" not in error
    assert len(window.errors_shown) == 1 and window.worker.alive
    # and the window works on: back to a preset, simulated
    settings.model_path = None
    settings.backend.setCurrentIndex(settings.backend.findData("simulated"))
    window.speed.setCurrentText("max")
    assert window.apply_settings(play=True)
    qtbot.waitUntil(lambda: window.latest_snapshot is not None and window.latest_snapshot.step > 10, timeout=60_000)


# -- a second hostile pass (2026-11-27): paths the OS cannot look up, pipes, procfs, and nonsense
# that used to be accepted --------------------------------------------------------------------

LONG_NAME = "a" * 300  # past the 255 bytes a file name may have


@pytest.mark.parametrize("argv", [
    ["math", "--model", LONG_NAME],
    ["run", "--quiet", "--trace", LONG_NAME],
    ["export", LONG_NAME],
    ["run", "--quiet", "--requests", "2", "--json", LONG_NAME],
])
def test_a_name_too_long_for_the_file_system_is_one_line(capsys, tmp_path, monkeypatch, argv):
    monkeypatch.chdir(tmp_path)
    refused(*cli(capsys, *argv)[::2], "File name too long", "characters)")


def test_a_symlink_loop_as_output_or_config_folder_is_one_line(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("loopA").symlink_to("loopB")
    Path("loopB").symlink_to("loopA")
    refused(*cli(capsys, "run", "--quiet", "--requests", "2", "--json", "loopA")[::2], "--json loopA",
            "symbolic links")
    monkeypatch.setenv("KVSCOPE_CONFIG_DIR", "loopA")
    refused(*cli(capsys, "presets")[::2], "loopA", "symbolic links")


@pytest.mark.skipif(not hasattr(__import__("os"), "mkfifo"), reason="needs named pipes")
def test_a_named_pipe_is_refused_at_once_as_input_or_output(capsys, tmp_path, monkeypatch):
    """Opening a FIFO waits for the other end: as a trace, a recording or an output the command
    used to hang for ever."""
    import os

    monkeypatch.chdir(tmp_path)
    os.mkfifo("pipe")
    refused(*cli(capsys, "run", "--quiet", "--trace", "pipe")[::2], "not a regular file")
    refused(*cli(capsys, "export", "pipe")[::2], "not a regular file")
    refused(*cli(capsys, "run", "--quiet", "--requests", "2", "--json", "pipe")[::2], "a pipe that nothing reads")


def test_a_procfs_file_given_as_a_recording_is_refused(capsys):
    refused(*cli(capsys, "export", "/proc/self/status")[::2], "cannot read /proc/self/status")


def test_the_real_backend_refuses_a_device_it_does_not_run_on(capsys):
    refused(*cli(capsys, "run", "--quiet", "--backend", "real", "--model", "tiny-llama", "--device", "meta",
                 "--requests", "2")[::2], "runs on cpu or cuda", "not meta")


def test_tensor_parallelism_must_split_the_attention_heads_too(capsys):
    # llama-3-8b: 32 attention heads, 8 KV heads; 24 devices replicate the KV heads evenly but not the queries
    refused(*cli(capsys, "math", "--tensor-parallel-size", "24")[::2], "cannot split num_attention_heads 32")


def test_a_block_larger_than_the_pool_is_named_as_the_cause(capsys):
    rc, out, _ = cli(capsys, "math", "--block-size", "100000")
    assert rc == 0 and "no room for one KV block: a block of 100,000 tokens" in out and "weights take" not in out


@pytest.mark.parametrize("argv,fragment", [
    (["run", "--quiet", "--arrival-rate", "1e-300", "--requests", "3"], "or at least 1e-06"),
])
def test_rates_too_small_to_mean_anything_are_refused(capsys, argv, fragment):
    refused(*cli(capsys, *argv)[::2], fragment)


@pytest.mark.parametrize("field,fragment", [
    ('"num_key_value_heads": 0', "num_key_value_heads must be greater than 0"),
    ('"max_position_embeddings": 0', "max_position_embeddings must be greater than 0"),
    ('"quantization_config": {"quant_method": "gptq", "bits": 3}', "gptq with bits 3"),
    ('"quantization_config": {"quant_method": "banana"}', "quant_method 'banana' is not one kvscope sizes"),
])
def test_a_config_json_value_is_refused_not_replaced_by_a_default(capsys, tmp_path, field, fragment):
    path = tmp_path / "config.json"
    path.write_text('{"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64, "vocab_size": 100, '
                    + field + "}")
    refused(*cli(capsys, "math", "--config", path)[::2], fragment)


def test_no_file_a_run_reads_can_be_its_output(capsys, tmp_path, monkeypatch):
    """The trace a workload file names, a --config folder's config.json and the preset files the
    run reads (named or by default) are inputs too."""
    monkeypatch.chdir(tmp_path)
    Path("mine.csv").write_text(TRACE_HEADER + "2023-11-16 18:15:46.6805900,100,10\n")
    Path("mine.toml").write_text('name = "mine"\ntrace = "mine.csv"\n')
    Path("shape").mkdir()
    Path("shape/config.json").write_text(json.dumps(LLAMA))
    protected = {p: Path(p).read_bytes() for p in ("mine.csv", "shape/config.json")}
    refused(*cli(capsys, "run", "--quiet", "--workload", "mine.toml", "--json", "mine.csv")[::2],
            "the trace the workload file names")
    refused(*cli(capsys, "run", "--quiet", "--config", "shape", "--requests", "2", "--record",
                 "shape/config.json")[::2], "the model config")
    default_preset = presets.presets_root() / "models" / "llama-3-8b.toml"
    protected[str(default_preset)] = default_preset.read_bytes()
    refused(*cli(capsys, "run", "--quiet", "--requests", "2", "--json", default_preset)[::2], "the model preset")
    assert all(Path(p).read_bytes() == data for p, data in protected.items())


def test_flags_that_would_be_dropped_without_a_word_are_refused(capsys, tmp_path):
    refused(*cli(capsys, "run", "--quiet", "--quantization", "nf4", "--requests", "2")[::2],
            "--quantization: the real backend's", "--weight-dtype")
    refused(*cli(capsys, "calibrate", "--model", "tiny-llama", "--model-path", tmp_path)[::2],
            "--model and --model-path both")
    refused(*cli(capsys, "gui", "--replay", tmp_path / "run.kvrec", "--model", "llama-3-8b")[::2],
            "--model would not apply")
    refused(*cli(capsys, "export", tmp_path / "run.kvrec", "--csv", "-")[::2], "--csv -: an export is written to a file")
    rc, out, err = cli(capsys)
    assert rc == 2 and "usage:" in out and "give a command" in err


def test_odd_but_valid_spellings_are_read(capsys, tmp_path):
    """A TOML file with a byte-order mark and ISO timestamps with a zone after the fraction."""
    workload = tmp_path / "bom.toml"
    workload.write_bytes(b'\xef\xbb\xbfname = "bom"\nnum_requests = 3\n')
    rc, _, err = cli(capsys, "run", "--quiet", "--workload", workload)
    assert rc == 0, err
    trace = tmp_path / "zoned.csv"
    trace.write_text(TRACE_HEADER + "2023-11-16 18:15:46.6805900+00:00,100,10\n2023-11-16 18:15:48.1805900+00:00,50,5\n")
    rows = read_trace(trace)
    assert [round(r.arrival_time_s, 6) for r in rows] == [0.0, 1.5]


def test_a_json_number_too_long_for_python_is_named_plainly():
    with pytest.raises(ConfigError, match="a whole number of more than 4,300 digits") as caught:
        load_json('{"vocab_size": ' + "9" * 5000 + "}", "config x")
    assert "set_int_max_str_digits" not in str(caught.value)


def test_a_scenario_field_error_names_its_file_once(capsys, tmp_path):
    text = (presets.presets_root() / "scenarios" / "cache-ceiling.toml").read_text()
    path = tmp_path / "bad-seed.toml"
    path.write_text(re.sub(r"(?m)^seed = \d+$", "seed = -1", text, count=1))
    last = refused(*cli(capsys, "compare", "--scenario", path)[::2], "base.seed: must be a whole number >= 0")
    assert last.count("scenario file") == 1
