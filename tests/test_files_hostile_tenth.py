"""The tenth hostile pass over the files kvscope reads: what the command line cannot reach (the
trained model's GGUF header, walked before transformers reads it) and the readers' edges (a header
that is whole, JSON whose keys may repeat). Each refusal test failed before its fix;
scripts/hostile_inputs_tenth_files.py runs the rest through the command line."""

from __future__ import annotations

import json
import struct

import pytest

from kvscope.app.lab.bounded_reads import load_json
from kvscope.app.lab.gguf_header import gguf_damage
from kvscope.app.lab.models.safetensors_header import safetensors_header
from kvscope.engine.config import ConfigError


# -- GGUF ------------------------------------------------------------------------------------------------------

def _s(data: bytes) -> bytes:
    return struct.pack("<Q", len(data)) + data


def _kv(key: bytes, kind: int, value: bytes) -> bytes:
    return _s(key) + struct.pack("<I", kind) + value


def _tensor(name: bytes, shape, kind: int, offset: int) -> bytes:
    return (_s(name) + struct.pack("<I", len(shape)) + b"".join(struct.pack("<Q", n) for n in shape)
            + struct.pack("<IQ", kind, offset))


ARCH = _kv(b"general.architecture", 8, _s(b"llama"))
TWO = [_tensor(b"a", [8], 0, 0), _tensor(b"b", [8], 0, 32)]  # two F32 tensors of 32 bytes, aligned


def _gguf(pairs=(ARCH,), tensors=TWO, alignment: int = 32, data: bytes = bytes(64)) -> bytes:
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(pairs)) + b"".join(pairs) + b"".join(tensors)
    return out + bytes(-len(out) % alignment) + data


NESTED = _kv(b"x", 9, struct.pack("<IQ", 9, 1) + struct.pack("<IQ", 4, 2) + struct.pack("<II", 1, 2))


@pytest.mark.parametrize("data, said", [
    (_gguf((ARCH, ARCH)), "'general.architecture' is given twice"),
    (_gguf((ARCH, _kv(b"\xff\xfe", 4, struct.pack("<I", 1)))), "is not UTF-8 text"),
    (_gguf((_kv(b"general.architecture", 4, struct.pack("<I", 1)),)), "general.architecture has value type 4"),
    (_gguf(tensors=[_tensor(b"a", [8], 0, 0), _tensor(b"b", [8], 0, 40)]), "offset 40, not a multiple of the"),
    (_gguf(tensors=[_tensor(b"a", [8], 0, 0), _tensor(b"b", [8], 0, 0)]), "overlaps the tensor before it"),
    (_gguf(tensors=[_tensor(b"a", [8], 0, 0), _tensor(b"a", [8], 0, 32)]), "'a' is listed twice"),
    (_gguf(tensors=[_tensor(b"a", [8, 0], 0, 0)]), "a dimension of 0"),
    (_gguf(tensors=[_tensor(b"a", [31], 2, 0)]), "not whole blocks of 32"),  # Q4_0
    (_gguf((ARCH, _kv(b"general.alignment", 4, struct.pack("<I", 12))), alignment=12), "general.alignment is 12"),
    (_gguf((ARCH, _kv(b"x", 9, struct.pack("<IQ", 9, 1) * 12))), "nests arrays more than 8 deep"),
])
def test_a_gguf_header_that_lies_is_said(tmp_path, data, said):
    path = tmp_path / "model.gguf"
    path.write_bytes(data)
    why = gguf_damage(path)
    assert why is not None and said in why and "\n" not in why


def test_a_whole_gguf_and_one_with_nested_arrays_pass(tmp_path):
    for i, data in enumerate((_gguf(), _gguf((ARCH, NESTED)))):
        path = tmp_path / f"{i}.gguf"
        path.write_bytes(data)
        assert gguf_damage(path) is None


# -- safetensors headers ---------------------------------------------------------------------------------------

def _safetensors(header: dict, body: bytes) -> bytes:
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + body


def test_a_whole_safetensors_header_is_its_tensors_and_sub_byte_dtypes_are_sized(tmp_path):
    path = tmp_path / "model.safetensors"
    path.write_bytes(_safetensors({"__metadata__": {"format": "pt"},
                                   "a": {"dtype": "F4", "shape": [2, 3], "data_offsets": [0, 3]},
                                   "b": {"dtype": "BF16", "shape": [], "data_offsets": [3, 5]}}, bytes(5)))
    assert set(safetensors_header(path, "x")) == {"a", "b"}


@pytest.mark.parametrize("header, body, said", [
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, bytes(12), "has bytes after its last tensor"),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, bytes(12), "leaves bytes 0 to 4 unused"),
    ({"a": {"dtype": "F6_E2M3", "shape": [3], "data_offsets": [0, 2]}}, bytes(2), "not a whole number of bytes"),
    ({"a": {"dtype": "F32", "shape": [True], "data_offsets": [0, 4]}}, bytes(4), "shape must be a list"),
    ({"a": {"dtype": "F32", "shape": [1]}}, bytes(4), "missing data_offsets"),
    ({"a": [1]}, bytes(4), "must be an object with dtype"),
])
def test_a_safetensors_header_that_lies_is_said_with_its_tensor(tmp_path, header, body, said):
    path = tmp_path / "model.safetensors"
    path.write_bytes(_safetensors(header, body))
    with pytest.raises(ConfigError, match=said):
        safetensors_header(path, "weights")


# -- JSON keys, config.json fields ------------------------------------------------------------------------------

def test_a_repeated_key_is_refused_where_asked_and_named_at_any_depth():
    with pytest.raises(ConfigError, match=r"'bits' is given twice in one object \(4, then 8\)"):
        load_json('{"q": {"bits": 4, "bits": 8}}', "config.json", unique_keys=True)
    assert load_json('{"a": 1, "a": 2}', "tokenizer.json") == {"a": 2}  # other files: as json reads them
    # the same value twice says nothing ambiguous: read, as transformers reads such a config.json
    assert load_json('{"torch_dtype": "bf16", "torch_dtype": "bf16"}', "config.json", unique_keys=True) == {
        "torch_dtype": "bf16"}


def test_a_chat_template_writing_a_number_of_100001_digits_is_said_without_pythons_advice():
    from kvscope.app.lab.chat_template import ChatTemplate

    with pytest.raises(ConfigError) as caught:
        ChatTemplate("{{ 10 ** 100000 }}", "T's chat_template", {}).render([{"role": "user", "content": "hi"}])
    assert "digits" in str(caught.value) and "set_int_max_str_digits" not in str(caught.value)


def test_a_request_count_of_hundreds_of_digits_is_said_short():
    from kvscope.app.lab.presets import load_workload

    for count in (10**400, -10**400):
        with pytest.raises(ConfigError) as caught:
            load_workload("chat").with_overrides(num_requests=count)
        said = str(caught.value)
        assert "(401 digits)" in said and len(said) < 200, said


def test_a_recording_interrupted_inside_a_step_closes_at_the_last_whole_chunk(tmp_path):
    """SIGTERM (now raised as Ctrl+C is) landed inside record_step, between the chunk's lists: closing
    then wrote lists of uneven lengths (numpy's "operands could not be broadcast", a traceback)."""
    from kvscope.app.lab.presets import load_hardware, load_model
    from kvscope.app.lab.recording import Recording, RunRecorder
    from kvscope.app.lab.workload import LengthDist, WorkloadSpec, generate_requests
    from kvscope.engine import Engine, EngineArgs

    engine = Engine(load_model("llama-3-8b"), load_hardware("h100-80gb"), EngineArgs(num_gpu_blocks_override=60))
    spec = WorkloadSpec(name="w", num_requests=20, arrival_rate_per_s=100.0,
                        prompt_tokens=LengthDist("constant", value=64), output_tokens=LengthDist("constant", value=30))
    engine.add_workload(generate_requests(spec, engine.model.vocab_size, seed=1))
    recorder = RunRecorder(engine, tmp_path / "r.kvrec", {"label": "interrupted"}, keyframe_interval=16)
    for _ in range(20):
        recorder.record_step(engine.step())
    real_block_arrays = engine.kv.block_arrays

    def interrupted():
        raise KeyboardInterrupt  # where a signal handler raises: after the step's batch entries were listed

    engine.kv.block_arrays = interrupted
    with pytest.raises(KeyboardInterrupt):
        while True:
            recorder.record_step(engine.step())
    engine.kv.block_arrays = real_block_arrays
    recorder.close(engine.summary(), note="the run stopped early: KeyboardInterrupt", failed=True)
    recording = Recording.open(tmp_path / "r.kvrec")
    assert recording.num_steps == 16  # the last chunk flushed (every 16 steps); the 4 after it and the cut step dropped
