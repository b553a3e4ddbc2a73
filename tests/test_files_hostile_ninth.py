"""The ninth hostile pass over the files kvscope reads: inputs that were accepted and gave nonsense,
or refused in Python's words. Each test failed before its fix (scripts/hostile_inputs_ninth_files.py
runs the same inputs through the command line)."""

from __future__ import annotations

import json
import os
import threading
import time

import numpy as np
import pytest

from kvscope.app.lab.models.config_json import model_from_hf_config
from kvscope.app.lab.models.loader import check_model_directory
from kvscope.app.lab.recording import Recording
from kvscope.app.lab.recording.format import DELTAS, STEPS, RecordingError
from kvscope.app.lab.presets import load_workload_file
from kvscope.app.lab.workload import read_trace
from kvscope.engine.config import ConfigError
from small_recording import forged_record

HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
BASE = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 128, "intermediate_size": 256,
        "vocab_size": 1000, "max_position_embeddings": 512}
PYTHON_WORDS = ("datetime.", "object has no attribute", "NoneType", "Traceback", "<class")


def _trace(tmp_path, text: str, name: str = "t.csv"):
    path = tmp_path / name
    path.write_bytes(text.encode("utf-8"))
    return path


def _refusal(call) -> str:
    with pytest.raises(ConfigError) as error:
        call()
    message = str(error.value)
    assert "\n" not in message and not any(word in message for word in PYTHON_WORDS), message
    return message


# -- traces ------------------------------------------------------------------------------------------


def _arrivals_in_zone(path, zone: str) -> list:
    before = os.environ.get("TZ")
    os.environ["TZ"] = zone
    time.tzset()
    try:
        return [row.arrival_time_s for row in read_trace(path)]
    finally:
        if before is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = before
        time.tzset()


def test_a_trace_of_times_without_a_zone_replays_the_same_in_every_time_zone(tmp_path):
    """Read in the machine's zone, a trace across New York's spring DST change was 2 s long there
    and 3,602 s long in UTC: the same file, another replay."""
    path = _trace(tmp_path, HEADER + "2023-03-12 01:59:59,100,10\n2023-03-12 03:00:01,100,10\n")
    assert _arrivals_in_zone(path, "UTC") == _arrivals_in_zone(path, "America/New_York") == [0.0, 3602.0]


@pytest.mark.parametrize("rows, fragments", [
    # the second row's zone made it arrive 5 hours before the first: "goes backwards", of a sorted file
    ("2023-11-16 18:15:46,100,10\n2023-11-16 18:15:47+05:00,100,10\n",
     ("line 3", "with a time zone", "line 2's is a date-time without a time zone (read as UTC)")),
    ("2023-11-16 18:15:46Z,100,10\n2023-11-16 18:15:47,100,10\n2023-11-16 18:15:48-08:00,100,10\n",
     ("line 4", "with a time zone", "line 3's is a date-time without a time zone")),
    ("0,100,10\n2023-11-16 18:15:46,100,10\n", ("line 3", "line 2's is a number of seconds")),
    # milliseconds since 1970 read as seconds: 5 s of trace replayed over 83 minutes
    ("1700000000000,100,10\n1700000005000,100,10\n", ("line 2", "milliseconds", "give seconds")),
    # int() and float() read these as 1000, 100 and 10
    ("0,1_000,10\n", ("line 2", "ContextTokens '1_000'", "digits 0-9")),
    ("0,\u0661\u0660\u0660,10\n", ("line 2", "ContextTokens", "digits 0-9")),
    ("1_0,100,10\n", ("line 2", "TIMESTAMP '1_0'", "ISO date-time")),
    ("16/11/2023 18:15,100,10\n", ("line 2", "TIMESTAMP '16/11/2023 18:15'", "neither seconds")),
])
def test_a_trace_whose_rows_mean_something_else_is_refused_naming_the_field(tmp_path, rows, fragments):
    message = _refusal(lambda: read_trace(_trace(tmp_path, HEADER + rows)))
    for fragment in fragments:
        assert fragment in message, message


@pytest.mark.parametrize("separator, said", [(";", "semicolons"), ("\t", "tabs")])
def test_a_trace_separated_by_semicolons_or_tabs_says_so(tmp_path, separator, said):
    text = (HEADER + "0,100,10\n").replace(",", separator)
    message = _refusal(lambda: read_trace(_trace(tmp_path, text)))
    assert f"separated by {said}" in message and "comma-separated" in message, message


def test_rows_in_utc_with_and_without_a_zone_are_one_clock(tmp_path):
    """+00:00 and Z say what a time without a zone is read as: the rows agree, and are read."""
    rows = read_trace(_trace(tmp_path, HEADER + "2023-11-16 18:15:46+00:00,100,10\n2023-11-16 18:15:47,100,10\n"
                                               "2023-11-16 18:15:49Z,100,10\n"))
    assert [r.arrival_time_s - rows[0].arrival_time_s for r in rows] == [0.0, 1.0, 3.0]


def test_a_trace_row_with_a_trailing_comma_is_read(tmp_path):
    """A spreadsheet's export ends rows with an empty cell: refused as "a comma inside a number?"."""
    rows = read_trace(_trace(tmp_path, HEADER + "0,100,10,\n1,50,5,,\n"))
    assert [(r.arrival_time_s, r.prompt_tokens, r.output_tokens) for r in rows] == [(0.0, 100, 10), (1.0, 50, 5)]


def test_a_trace_row_holds_no_dict_of_its_own(tmp_path):
    """A trace may hold 10,000,000 rows: with a __dict__ each they took ~1.9 GB, a third of the 6 GiB
    a run may have, before a request ran (slots: ~0.9 GB)."""
    row = read_trace(_trace(tmp_path, HEADER + "0,100,10\n"))[0]
    assert not hasattr(row, "__dict__") and (row.arrival_time_s, row.prompt_tokens, row.output_tokens) == (0.0, 100, 10)


# -- workload TOML ----------------------------------------------------------------------------------


@pytest.mark.parametrize("text, field", [
    ('num_requests = 1979-05-27', "num_requests"),
    ('num_requests = 2\nprompt_tokens = { dist = "constant", value = 1979-05-27T07:32:00Z }', "prompt_tokens.value"),
    ('num_requests = 2\nchat = 1979-05-27', "chat"),
])
def test_a_workload_date_is_said_in_toml_words(tmp_path, text, field):
    """Quoted as datetime.date(1979, 5, 27), Python's repr, by the field's own check."""
    path = tmp_path / "w.toml"
    path.write_text(f'name = "w"\n{text}\n')
    message = _refusal(lambda: load_workload_file(path))
    assert f"w.toml: {field} is a TOML date or time (1979-05-27" in message, message


# -- config.json --------------------------------------------------------------------------------------


def _config(**changes):
    return lambda: model_from_hf_config({**BASE, **changes}, "x", "config /m/config.json")


@pytest.mark.parametrize("changes, fragments", [
    # 'list' object has no attribute 'get'
    ({"quantization_config": {"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": [8]}}}},
     ("config_groups", "weights must be a table")),
    # "head_dim must be greater than 0", a field the file does not give
    ({"kv_lora_rank": 512}, ("kv_lora_rank", "qk_nope_head_dim and qk_rope_head_dim")),
    # "linear_state_bytes must be greater than 0, got -4": a field kvscope derives
    ({"layer_types": ["linear_attention", "full_attention"], "linear_num_key_heads": 1, "linear_num_value_heads": 1,
      "linear_key_head_dim": 1, "linear_value_head_dim": 1, "linear_conv_kernel_dim": 0},
     ("linear_conv_kernel_dim must be at least 2",)),
    ({"layer_types": ["linear_attention", "full_attention"], "linear_num_key_heads": 0, "linear_num_value_heads": 1,
      "linear_key_head_dim": 1, "linear_value_head_dim": 1, "linear_conv_kernel_dim": 4},
     ("linear_num_key_heads must be greater than 0",)),
    # names counted as that many dense layers
    ({"num_experts": 8, "num_experts_per_tok": 2, "mlp_only_layers": ["a", "b"]}, ("mlp_only_layers",)),
])
def test_a_config_field_of_the_wrong_shape_is_named_not_a_derived_one(changes, fragments):
    message = _refusal(_config(**changes))
    assert "linear_state_bytes" not in message and "head_dim must" not in message, message
    for fragment in fragments:
        assert fragment in message, message


# -- model folders ------------------------------------------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_a_model_folder_whose_weights_are_a_pipe_is_refused_not_waited_on(tmp_path):
    """The weights' dtype check opened model.safetensors: a pipe with no writer blocked it for ever."""
    (tmp_path / "config.json").write_text(json.dumps(BASE))
    pipe = tmp_path / "model.safetensors"
    os.mkfifo(pipe)
    outcome = []

    def check():
        try:
            check_model_directory(tmp_path)
            outcome.append("accepted")
        except ConfigError as exc:
            outcome.append(str(exc))

    worker = threading.Thread(target=check, daemon=True)
    worker.start()
    worker.join(5)
    if worker.is_alive():  # a writer that closes at once lets the blocked open return
        os.close(os.open(pipe, os.O_WRONLY | os.O_NONBLOCK))
        worker.join(5)
        pytest.fail("check_model_directory blocked on a pipe named model.safetensors")
    assert "model.safetensors is not a regular file" in outcome[0], outcome


# -- recordings ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("record_type, nth, name, change, said", [
    # a NaN start time was a traceback in the Perfetto export (cannot convert float NaN to integer)
    (STEPS, 0, "step.start_time_s", lambda v: np.where(np.arange(len(v)) == 3, np.nan, v), "entry 3 is nan"),
    (STEPS, 0, "step.start_time_s", lambda v: v + np.inf, "finite numbers"),
    (STEPS, 0, "step.start_time_s", lambda v: v[::-1].copy(), "goes backwards"),  # a timeline folded over itself
    (STEPS, 0, "step.step", lambda v: v[::-1].copy(), "goes backwards"),
    (STEPS, 0, "step.duration_s", lambda v: -v - 1, "0 or more"),
    (STEPS, 0, "step.kv_usage", lambda v: v + 5, "from 0 to 1"),  # a pool 500 % full
    (STEPS, 0, "step.num_running", lambda v: v - 1000, "0 or more"),
    (STEPS, 0, "event.time_s", lambda v: v * np.nan, "finite numbers"),
    (STEPS, 1, "finished.ttft_s", lambda v: v * np.nan, "finite numbers"),
    (DELTAS, 0, "snapshot.time_s", lambda v: v + np.inf, "finite numbers"),
    (DELTAS, 0, "snapshot.kv_usage", lambda v: v * np.nan, "from 0 to 1"),
    # blocks past the pool's and requests of negative ids were exported and replayed as they came
    (STEPS, 0, "event.blocks", lambda v: v + 10**9, "from 0 to"),
    (STEPS, 0, "event.blocks", lambda v: v - 10**6, "from 0 to"),
    (STEPS, 0, "event.request_id", lambda v: v - 10**6, "or -1 for the engine's own"),
    (STEPS, 0, "batch.num_new_tokens", lambda v: v - 10**6, "0 or more"),
])
def test_a_recording_whose_series_are_nonsense_is_refused_naming_the_array(tmp_path, recording_bytes, record_type,
                                                                          nth, name, change, said):
    path = tmp_path / "forged.kvrec"
    path.write_bytes(forged_record(recording_bytes, record_type, nth, name, change))
    with pytest.raises(RecordingError) as error:
        Recording.open(path, allow_truncated=True)
    message = str(error.value)
    assert f"{name} " in message and said in message and "forged.kvrec" in message, message


def test_the_recording_the_checks_are_made_on_opens(tmp_path, recording_bytes):
    path = tmp_path / "same.kvrec"
    path.write_bytes(forged_record(recording_bytes, STEPS, 0, "step.kv_usage", lambda v: v))
    with Recording.open(path, allow_truncated=True) as recording:
        assert recording.num_steps > 0
