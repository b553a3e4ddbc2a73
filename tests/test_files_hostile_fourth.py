"""The fourth hostile pass over the files kvscope reads (scripts/hostile_inputs_fourth_files.py):
calibration profiles, config.json, recordings and model folders' tokenizers and chat templates.
Each file is refused in one sentence naming it, before anything is allocated for what it claims."""

from __future__ import annotations

import json
import struct
import zlib

import numpy as np
import pytest

from kvscope.app.lab.calibration import calibration_table, make_profile, profile_path, read_profile, save_profile
from kvscope.app.lab.models.config_json import model_from_hf_config
from kvscope.app.lab.recording import Recording
from kvscope.app.lab.recording.format import (
    FILE_HEADER,
    FRAME,
    FRAME_HEAD,
    FRAME_MARKER,
    INDEX,
    MAX_RECORD_BYTES,
    MAX_STORED_BYTES,
    TRAILER_TAG,
    RecordingError,
    decode_payload,
    frame_record,
)
from kvscope.app.lab.this_machine import cpu_machine_key, detect_this_machine
from kvscope.engine.config import ConfigError
from kvscope.engine.cost_model import MAX_EFFICIENCY, MIN_EFFICIENCY

from cli_helper import cli

# -- calibration profiles ----------------------------------------------------------------------------------


def _profile(tmp_path, monkeypatch, calibration=None, measured_on=None, raw: str | None = None):
    monkeypatch.setenv("KVSCOPE_CACHE_DIR", str(tmp_path))
    path = profile_path(cpu_machine_key())
    if raw is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(raw.encode("utf-8"))
        return path
    profile = {"format": "kvscope-calibration", "version": 1,
               "calibration": calibration if calibration is not None else {"label": "x", "flops_efficiency": 0.5}}
    if measured_on is not None:
        profile["measured_on"] = measured_on
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(profile))
    return path


def _refused_in_one_line(capsys, *argv, says):
    rc, _, err = cli(capsys, *argv)
    lines = err.strip().splitlines()
    # the real backend's progress lines ("loading ...") come first; the error is one line, the last
    assert rc == 2 and "Traceback" not in err and sum("error" in line for line in lines) == 1, err
    assert lines[-1].startswith("kvscope: error:"), err
    for fragment in says:
        assert fragment in err, err
    return err


@pytest.mark.parametrize("dtype", [["fp32"], {"a": 1}, 16])
def test_a_profile_whose_peak_dtype_is_not_a_name_is_refused(tmp_path, monkeypatch, capsys, dtype):
    path = _profile(tmp_path, monkeypatch, measured_on={"peak_flops": 1e11, "peak_dtype": dtype})
    with pytest.raises(ConfigError, match="measured_on.peak_dtype must be one of"):
        read_profile(path)
    _refused_in_one_line(capsys, "math", "--hardware", "this-machine",
                         says=(str(path), "measured_on.peak_dtype", "kvscope calibrate"))


def test_a_profile_whose_measured_on_is_not_a_table_is_refused(tmp_path, monkeypatch):
    path = _profile(tmp_path, monkeypatch, measured_on=[1, 2])
    with pytest.raises(ConfigError, match="measured_on must be a table"):
        read_profile(path)


@pytest.mark.parametrize("field, text", [("label", "a\nb\x1b[31m"), ("label", "tab\there"), ("source", "one\rtwo"),
                                         ("label", "bidi \u202e override")])
def test_a_profile_label_or_source_that_is_not_one_printable_line_is_refused(tmp_path, monkeypatch, capsys, field,
                                                                             text):
    path = _profile(tmp_path, monkeypatch, calibration={"label": "x", field: text})
    with pytest.raises(ConfigError, match=f"calibration.{field} must be one line of text") as caught:
        read_profile(path)
    assert "\n" not in str(caught.value) and "\x1b" not in str(caught.value)
    _refused_in_one_line(capsys, "run", "--hardware", "this-machine", "--requests", "2", "--quiet",
                         says=(f"calibration.{field}",))


@pytest.mark.parametrize("name", ["flops_efficiency", "bandwidth_efficiency", "kv_bandwidth_efficiency"])
@pytest.mark.parametrize("value", [1e-300, MIN_EFFICIENCY / 2])
def test_a_profile_efficiency_far_below_any_machine_is_refused(tmp_path, monkeypatch, capsys, name, value):
    path = _profile(tmp_path, monkeypatch, calibration={"label": "x", name: value})
    with pytest.raises(ConfigError, match=f"calibration.{name} must be at least {MIN_EFFICIENCY:g}"):
        read_profile(path)
    _refused_in_one_line(capsys, "run", "--hardware", "this-machine", "--requests", "2", "--quiet",
                         says=(f"calibration.{name}", "kvscope calibrate"))


def test_the_efficiencies_real_fits_give_are_taken(tmp_path, monkeypatch):
    """The published GPU fits (0.3 - 0.9), a CPU's KV gathers (0.32) and the fit's own cap (10,
    where a side of the roofline decided no step) all read back: the bounds are the engine's."""
    for value in (MIN_EFFICIENCY, 0.3, 0.32, 0.9, 1.3, MAX_EFFICIENCY):
        path = _profile(tmp_path, monkeypatch, calibration={"label": "x", "flops_efficiency": value,
                                                            "bandwidth_efficiency": value})
        assert read_profile(path)["calibration"]["bandwidth_efficiency"] == value


def test_calibrate_does_not_store_what_the_reader_refuses():
    terms = {"flops_efficiency": 1e-9, "bandwidth_efficiency": 0.5, "kv_bandwidth_efficiency": 0.5,
             "overhead_s": 0.001, "overhead_per_seq_s": 0.0, "overhead_per_token_s": 0.0}
    with pytest.raises(ConfigError, match="flops_efficiency must be at least"):
        calibration_table(terms, "kvscope calibrate on x", 0.1, "test")
    with pytest.raises(ConfigError, match="label must be one line"):
        calibration_table({**terms, "flops_efficiency": 0.5}, "two\nlines", 0.1, "test")


def test_an_efficiency_restated_against_a_far_peak_is_refused(tmp_path, monkeypatch):
    """A profile's flops_efficiency is restated against today's peak (up to 100 times off): the
    result is held to the same range as a stored one."""
    monkeypatch.setenv("KVSCOPE_CACHE_DIR", str(tmp_path))
    peak = detect_this_machine(use_cuda=False).peak_flops["fp32"]
    path = profile_path(cpu_machine_key())
    save_profile(path, make_profile(cpu_machine_key(), "test CPU", {"label": "x", "flops_efficiency": 2e-3},
                                    {"steps": 0}, {"peak_flops": peak / 50, "peak_dtype": "fp32"}))
    with pytest.raises(ConfigError, match="flops_efficiency restated") as caught:
        detect_this_machine(use_cuda=False)
    assert str(path) in str(caught.value)


def test_a_profile_with_a_byte_order_mark_is_read(tmp_path, monkeypatch, capsys):
    profile = {"format": "kvscope-calibration", "version": 1,
               "calibration": {"label": "bom test", "flops_efficiency": 0.5}}
    path = _profile(tmp_path, monkeypatch, raw="\ufeff" + json.dumps(profile))
    assert read_profile(path)["calibration"]["label"] == "bom test"
    rc, _, err = cli(capsys, "math", "--hardware", "this-machine")
    assert rc == 0, err


# -- config.json ------------------------------------------------------------------------------------------------

LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 128, "intermediate_size": 256,
         "vocab_size": 1000, "max_position_embeddings": 512}


@pytest.mark.parametrize("value", [0, -1])
def test_config_json_intermediate_size_zero_or_negative_is_refused_not_read_as_absent(tmp_path, capsys, value):
    with pytest.raises(ConfigError, match="intermediate_size"):
        model_from_hf_config({**LLAMA, "intermediate_size": value}, "m")
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA, "intermediate_size": value}))
    _refused_in_one_line(capsys, "math", "--config", path, says=("intermediate_size", str(path)))


def test_config_json_without_intermediate_size_is_four_times_hidden():
    config = {k: v for k, v in LLAMA.items() if k != "intermediate_size"}
    assert model_from_hf_config(config, "m").intermediate_size == 4 * 128
    assert model_from_hf_config({**config, "intermediate_size": None}, "m").intermediate_size == 4 * 128


def test_config_json_moe_intermediate_size_zero_is_refused_not_replaced():
    with pytest.raises(ConfigError, match="moe_intermediate_size"):
        model_from_hf_config({**LLAMA, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 0}, "m")


# -- recordings ----------------------------------------------------------------------------------------------


def _records(data: bytes) -> list:
    out, offset = [], FILE_HEADER.size
    while offset + FRAME.size <= len(data):
        marker, record_type, flags, length, _, _ = FRAME.unpack_from(data, offset)
        if marker != FRAME_MARKER:
            break
        out.append((offset, record_type, flags, length))
        offset += FRAME.size + length
    return out


def _payload(head: dict, body: bytes = b"") -> bytes:
    text = json.dumps(head).encode()
    return struct.pack("<I", len(text)) + text + body


def _closed(data: bytes, index_payload: bytes) -> bytes:
    """The recording's records up to its index, a new index record and a trailer pointing at it."""
    index_offset = next(o for o, t, _, _ in _records(data) if t == INDEX)
    trailer = struct.pack("<Q8s", index_offset, TRAILER_TAG)
    return (data[:index_offset] + frame_record(INDEX, index_payload, True) + trailer
            + struct.pack("<I", zlib.crc32(trailer)))


def test_a_record_claiming_more_than_a_record_may_take_is_refused_before_it_is_read(tmp_path, recording_bytes):
    """The frame (checksum right) claims a payload past the cap and the file, sparse, is that long:
    refused from the frame, not read whole first."""
    offset = _records(recording_bytes)[1][0]
    frame = bytearray(recording_bytes[offset:offset + FRAME.size])
    claimed = MAX_STORED_BYTES + 1
    struct.pack_into("<Q", frame, 4, claimed)
    struct.pack_into("<I", frame, 16, zlib.crc32(bytes(frame[:16])))
    path = tmp_path / "claims.kvrec"
    with open(path, "wb") as handle:
        handle.write(recording_bytes[:offset] + bytes(frame))
        handle.truncate(offset + FRAME.size + claimed)  # a hole: no disk
    with pytest.raises(RecordingError, match=f"claims {claimed:,} bytes, more than") as caught:
        Recording.open(path, allow_truncated=True)
    assert path.name in str(caught.value)


def test_arrays_that_restore_past_a_record_are_refused_before_any_is_made():
    """64 MiB of zeros (64 KB zlib'd) declared as a delta array sum to 512 MiB of int64; as
    overlapping views of the same bytes they would be copied on concatenation."""
    count = MAX_RECORD_BYTES // 8 + 1
    body = bytes(count)
    with pytest.raises(RecordingError, match="restore to more than"):
        decode_payload(_payload({"arrays": {"a": {"dtype": "|u1", "count": count, "offset": 0, "delta": True}}},
                                body), "r")
    views = {f"v{i}": {"dtype": "|u1", "count": count, "offset": 0} for i in range(9)}
    with pytest.raises(RecordingError, match="restore to more than"):
        decode_payload(_payload({"arrays": views}, body), "r")
    widened = {"a": {"dtype": "|u1", "count": count, "offset": 0, "as": "<f8"}}
    with pytest.raises(RecordingError, match="restore to more than"):
        decode_payload(_payload({"arrays": widened}, body), "r")
    # what a writer stores reads back as before
    head, arrays = decode_payload(_payload({"arrays": {"a": {"dtype": "|u1", "count": 4, "offset": 0,
                                                             "delta": True, "as": "<i4"}}}, bytes([1, 2, 3, 4])), "r")
    assert arrays["a"].tolist() == [1, 3, 6, 10] and arrays["a"].dtype == np.int32


def test_a_header_record_holding_arrays_is_refused(tmp_path, recording_bytes):
    """A header never holds arrays; a forged one's (2 MB declaring 500 MB of zeros as float64) is
    refused, never restored."""
    offset, _, _, length = _records(recording_bytes)[0]
    raw = recording_bytes[offset + FRAME.size:offset + FRAME.size + length]
    (n,) = struct.unpack_from("<I", raw)
    head = json.loads(raw[4:4 + n])
    head["arrays"] = {"a": {"dtype": "|u1", "count": 8, "offset": 0, "as": "<f8"}}
    second = _records(recording_bytes)[1][0]
    index_offset = next(o for o, t, _, _ in _records(recording_bytes) if t == INDEX)
    path = tmp_path / "header-arrays.kvrec"
    path.write_bytes(recording_bytes[:offset] + frame_record(1, _payload(head, bytes(8)), True)
                     + recording_bytes[second:index_offset])
    with pytest.raises(RecordingError, match=r"record 0 \(the header\) holds arrays"):
        Recording.open(path, allow_truncated=True)


def test_an_index_listing_more_records_than_the_file_holds_is_refused_before_the_walk(tmp_path, recording_bytes,
                                                                                      capsys):
    index_offset = next(o for o, t, _, _ in _records(recording_bytes) if t == INDEX)
    count = (index_offset - FILE_HEADER.size) // FRAME.size + 1
    specs = {f"record.{name}": {"dtype": "|u1", "count": count, "offset": 0, **({"as": "<i8"} if name == "offset"
                                                                                  else {})}
             for name in ("type", "offset", "first", "count")}
    path = tmp_path / "index-many.kvrec"
    path.write_bytes(_closed(recording_bytes, _payload({"arrays": specs}, bytes([14]) * count)))
    with pytest.raises(RecordingError, match=f"lists {count:,} records, more than the {count - 1:,}"):
        Recording.open(path)
    _refused_in_one_line(capsys, "export", path, says=("index-many.kvrec", "lists"))


def test_an_index_whose_records_are_out_of_order_or_not_headed_by_the_header_is_refused(tmp_path, recording_bytes):
    from kvscope.app.lab.recording.format import encode_payload

    offset, _, flags, length = next(r for r in _records(recording_bytes) if r[1] == INDEX)
    stored = recording_bytes[offset + FRAME.size:offset + FRAME.size + length]
    head, original = decode_payload(zlib.decompress(stored) if flags & 1 else stored, "index")
    head.pop("arrays")

    def index(change=lambda a: a):
        return encode_payload(head, change({name: values.copy() for name, values in original.items()}))

    def offsets_repeated(a):
        a["record.offset"][1] = a["record.offset"][0]
        return a

    path = tmp_path / "order.kvrec"
    path.write_bytes(_closed(recording_bytes, index(offsets_repeated)))
    with pytest.raises(RecordingError, match="out of order"):
        Recording.open(path)
    path.write_bytes(_closed(recording_bytes, index(lambda a: {k: v[1:] for k, v in a.items()})))
    with pytest.raises(RecordingError, match="does not list the header as its first record"):
        Recording.open(path)
    path.write_bytes(_closed(recording_bytes, index()))  # the same index, rewritten: read as before
    with Recording.open(path) as recording:
        assert recording.num_steps > 0


def test_a_frame_head_with_a_huge_length_past_the_file_is_still_truncation(tmp_path, recording_bytes):
    """Past the end of the file a claimed length is a cut file (allow_truncated reads up to it)."""
    offset = _records(recording_bytes)[-2][0]
    head = FRAME_HEAD.pack(FRAME_MARKER, 3, 1, 2**62, 0)
    path = tmp_path / "cut.kvrec"
    path.write_bytes(recording_bytes[:offset] + head + struct.pack("<I", zlib.crc32(head)))
    with pytest.raises(RecordingError, match="truncated"):
        Recording.open(path)


# -- model folders: tokenizers and chat templates --------------------------------------------------------------

PLAIN = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
SMOLLM2 = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
           "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
           "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
           "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def _tokenizer_json(size: int) -> str:
    """A word-level tokenizer of `size` ids; words it does not know are its last id."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"<eos>": 0, **{f"w{i}": i for i in range(1, size - 1)}, "[UNK]": size - 1}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    return tokenizer.to_str()


def _tokenizer_config(template: str) -> str:
    return json.dumps({"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<eos>", "unk_token": "[UNK]",
                       "chat_template": template})


@pytest.fixture(scope="module")
def good_model(tmp_path_factory):
    from kvscope.app.lab.verify.tiny_model import build_random_model
    from kvscope.engine.config import ModelConfig

    shape = ModelConfig(name="hostile", num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                        head_dim=16, hidden_size=64, intermediate_size=128, vocab_size=512,
                        max_position_embeddings=512, weight_dtype="fp32")
    return build_random_model(shape, tmp_path_factory.mktemp("models") / "good")


def _variant(good, folder, files: dict):
    import shutil

    shutil.copytree(good, folder)
    for name, content in files.items():
        (folder / name).write_text(content)
    return folder


def test_a_tokenizer_json_that_is_a_list_is_refused_naming_it(tmp_path, good_model, capsys):
    from kvscope.app.lab.models.loader import load_model_directory

    folder = _variant(good_model, tmp_path / "m", {"tokenizer.json": "[1, 2, 3]",
                                                   "tokenizer_config.json": _tokenizer_config(PLAIN)})
    with pytest.raises(ConfigError, match="tokenizer.json: expected a JSON object"):
        load_model_directory(folder)
    _refused_in_one_line(capsys, "run", "--quiet", "--backend", "real", "--model-path", folder, "--requests", "2",
                         "--kv-cache-memory-bytes", "1e6", says=("tokenizer.json", str(folder)))


def test_a_tokenizer_file_that_is_a_folder_is_refused_and_a_folder_without_one_runs_textless(tmp_path, good_model):
    """Before: tokenizer.json made a folder read as "no tokenizer", and the model ran without text unsaid."""
    from kvscope.app.lab.models.loader import load_model_directory

    folder = _variant(good_model, tmp_path / "m", {})
    (folder / "tokenizer.json").mkdir()
    with pytest.raises(ConfigError, match="tokenizer.json is a folder"):
        load_model_directory(folder)
    (folder / "tokenizer.json").rmdir()
    assert load_model_directory(folder).tokenizer is None  # no tokenizer at all: runs on token ids, as before


def test_the_trained_models_cached_copy_with_a_damaged_tokenizer_is_refused_with_what_to_do(
        tmp_path, good_model, monkeypatch):
    from kvscope.app.lab.real_backend import load_for_real_backend
    from kvscope.app.lab.trained_model import TRAINED_MODEL

    monkeypatch.setenv("KVSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    copy = tmp_path / "cache" / "models" / TRAINED_MODEL.name
    copy.parent.mkdir(parents=True)
    _variant(good_model, copy, {"tokenizer.json": "[1, 2, 3]", "tokenizer_config.json": _tokenizer_config(PLAIN)})
    with pytest.raises(ConfigError, match="tokenizer.json") as caught:
        load_for_real_backend(TRAINED_MODEL.name)
    assert f"delete {copy}" in str(caught.value)


def test_a_tokenizer_config_nested_100000_deep_is_refused(tmp_path, good_model):
    from kvscope.app.lab.models.loader import load_model_directory

    folder = _variant(good_model, tmp_path / "m", {"tokenizer_config.json": "[" * 100_000 + "]" * 100_000})
    with pytest.raises(ConfigError, match="tokenizer_config.json: JSON nested deeper"):
        load_model_directory(folder)


def test_a_tokenizer_with_ids_past_the_models_vocabulary_is_refused_at_load(tmp_path, good_model, capsys):
    from kvscope.app.lab.models.loader import load_model_directory

    folder = _variant(good_model, tmp_path / "m", {"tokenizer.json": _tokenizer_json(5001),
                                                   "tokenizer_config.json": _tokenizer_config(PLAIN)})
    with pytest.raises(ConfigError, match="its tokenizer has ids up to 5,000, but the model's vocabulary"):
        load_model_directory(folder)
    _refused_in_one_line(capsys, "run", "--quiet", "--backend", "real", "--model-path", folder, "--requests", "2",
                         "--kv-cache-memory-bytes", "1e6", "--workload", "chat-text", says=("ids up to 5,000",))
    # as many ids as rows: loaded, and its chat template renders
    fits = _variant(good_model, tmp_path / "fits", {"tokenizer.json": _tokenizer_json(512),
                                                    "tokenizer_config.json": _tokenizer_config(PLAIN)})
    assert load_model_directory(fits).tokenizer is not None


@pytest.mark.parametrize("template, says", [
    ("{{ raise_exception('no system messages') }}", "no system messages"),
    ("{% if %}", "cannot be read"),
    ("{{ foo.bar.baz }}", "'foo' is undefined"),
    ("{% for i in range(100000) %}{% for j in range(100000) %}{{ j }}{% endfor %}{% endfor %}", "steps"),
])
def test_a_chat_template_that_fails_is_one_line_naming_it(tmp_path, good_model, capsys, template, says):
    from kvscope.app.lab.models.loader import load_model_directory
    from kvscope.app.lab.text_tokenizer import chat_tokenizer_for

    folder = _variant(good_model, tmp_path / "m", {"tokenizer.json": _tokenizer_json(100),
                                                   "tokenizer_config.json": _tokenizer_config(template)})
    with pytest.raises(ConfigError, match=says) as caught:
        chat_tokenizer_for(load_model_directory(folder))
    assert f"{folder / 'tokenizer_config.json'}'s chat_template" in str(caught.value)
    _refused_in_one_line(capsys, "run", "--quiet", "--backend", "real", "--model-path", folder, "--requests", "2",
                         "--kv-cache-memory-bytes", "1e6", "--workload", "chat-text",
                         says=("tokenizer_config.json's chat_template", says))


def _special_tokens():
    return {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "unk_token": "<|endoftext|>"}


@pytest.mark.parametrize("template, says", [
    ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "steps"),
    ("{% set s = 'x' * 100000 %}{% for a in s %}{% for b in s %}{% endfor %}{% endfor %}", "steps"),
    ("{{ 'x' * 10**10 }}", "repeats a value"),
    ("{{ 2 ** (10 ** 9) }}", "no number past"),
    ("{{ '%0999999999d' % 1 }}", "width"),
    ("{{ '{:>999999999}'.format(1) }}", "width"),
    ("{{ 'x'|center(10**9) }}", "no number past"),
    ("{{ 'x'.ljust(10**9) }}", "no number past"),
    ("{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}", "joins"),
    ("{% macro d(s, n) %}{% if n %}{{ d(s ~ s, n - 1) }}{% endif %}{% endmacro %}{{ d('x', 40) }}", "joins"),
    ("{% set s = 'x' * 1000 %}" + "{% set s = s ~ s %}" * 40, "joins"),
    ("{{ lipsum(20000, false, 100, 101) }}", "'lipsum' is undefined"),
    ("{% set s = 'x' * 1000000 %}{{ (" + " ~ ".join(["s"] * 200) + ")|length }}", "joins"),
    ("{% set s = 'x' * 1000000 %}{{ (" + " + ".join(["s"] * 100) + ")|length }}", "a [+] makes"),
    ("{% set ns = namespace(x=3) %}{% for i in range(40) %}{% set ns.x = ns.x * ns.x %}{% endfor %}", "multiplies"),
    ("{{ '" + "x" * (300 * 1024) + "' }}", "at most 262,144"),
    ("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "recurses"),
    ("{% set s = 'x' * 100000 %}{{ s|replace('', s) }}", "replace"),
    ("{% set s = '\n' * 100000 %}{{ s|indent(100000) }}", "indent"),
    ("{% set s = 'x' * 100000 %}{{ ([s] * 100)|join(s) }}", "join"),
    ("{{ ''.__class__.__mro__ }}", "unsafe"),
    ("{{ 1 / 0 }}", "division by zero"),
])
def test_a_chat_template_is_bounded_in_steps_size_and_numbers(template, says):
    """Each of these ran for minutes, or built gigabytes, in an unbounded sandbox."""
    import time

    from kvscope.app.lab.chat_template import ChatTemplate

    started = time.perf_counter()
    with pytest.raises(ConfigError, match=says) as caught:
        ChatTemplate(template, "T's chat_template", _special_tokens()).render([{"role": "user", "content": "hi"}])
    assert str(caught.value).startswith("T's chat_template") and "\n" not in str(caught.value)
    assert time.perf_counter() - started < 10


def test_the_bounded_template_renders_as_transformers_does(tmp_path):
    """The sandbox is set up as transformers' own: the same prompt for SmolLM2's template, with and
    without a system prompt, and for a template using its globals and filters."""
    from transformers import PreTrainedTokenizerFast

    from kvscope.app.lab.chat_template import ChatTemplate

    tools = ("{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
             "{{ m|tojson }}{{ m['content']|upper|indent(2) }}{% endfor %}{{ ns.n }} {{ eos_token }}"
             "{% for i in range(messages|length) %}{{ loop.index }}{% if i > 0 %}{% break %}{% endif %}{% endfor %}")
    conversations = ([{"role": "user", "content": "What is the capital of France?"}],
                     [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi é ✓"},
                      {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "Bye\nnow"}])
    for number, text in enumerate((SMOLLM2, tools, PLAIN)):
        folder = tmp_path / f"t{number}"
        folder.mkdir()
        (folder / "tokenizer.json").write_text(_tokenizer_json(100))
        (folder / "tokenizer_config.json").write_text(json.dumps({
            "tokenizer_class": "PreTrainedTokenizerFast", **_special_tokens(), "chat_template": text}))
        tokenizer = PreTrainedTokenizerFast.from_pretrained(folder)
        template = ChatTemplate(text, "t", tokenizer.special_tokens_map)
        for messages in conversations:
            assert template.render(messages) == tokenizer.apply_chat_template(messages, tokenize=False,
                                                                              add_generation_prompt=True)


def test_a_plain_template_and_tokenizer_run_chat_text(tmp_path, good_model, capsys):
    folder = _variant(good_model, tmp_path / "m", {"tokenizer.json": _tokenizer_json(100),
                                                   "tokenizer_config.json": _tokenizer_config(PLAIN)})
    rc, _, err = cli(capsys, "run", "--quiet", "--backend", "real", "--model-path", folder, "--requests", "2",
                     "--kv-cache-memory-bytes", "1e6", "--workload", "chat-text")
    assert rc == 0, err
