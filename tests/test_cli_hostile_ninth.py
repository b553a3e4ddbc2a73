"""The command line against bad input, ninth round: refusals that were clean but wrong. A number flag's
refusal said nothing of what it takes (`--block-size 0x10`: "not a number"), 1e-320 passed as a
utilization though 1e-400 was refused, a field set by a flag was named only as the engine's field
(`--max-model-len 0`: "engine: max_model_len ..."), a flag given to the wrong command was "did you
mean --help?" and one typed before the command made its value "an invalid choice" of command,
`kvscope --help >&-` exited 0 with the help on stderr, `--vllm-version "0.19 "` was shown with its
space, /proc/self/mem was "Input/output error", `kvscope models` listed a KVSCOPE_CACHE_DIR that is a
file as "none yet" (a HOME that is a file failed only after `loading ...`), a name's bytes that are
not UTF-8 were shown as "?", 205649.00 concurrent sequences had no thousands, and a user preset named apart from another only in case was saved over it where
the file system ignores case."""

from __future__ import annotations

import sys

import pytest

from cli_helper import cli
from kvscope.app.lab.presets import load_hardware, save_user_preset
from kvscope.engine.config import ConfigError
from test_cli_hostile_fifth import refused

LINUX = pytest.mark.skipif(sys.platform != "linux", reason="paths of Linux")


# -- 1: a number flag says what it takes -------------------------------------------------------------


@pytest.mark.parametrize("argv, said", [
    (("--block-size", "0x10"), ("hexadecimal is not read", "such as 16")),
    (("--block-size=",), ("no value given", "such as 16")),
    (("--max-model-len", "inf"), ("not a finite number", "such as 16")),
    (("--max-model-len", "1.5"), ("not a whole number", "such as 16")),
    (("--reserve-bytes", "0.5"), ("not a whole number", "such as 16e9")),
    (("--gpu-memory-utilization", "1e-320"), ("too close to 0", "at least 1e-300")),
])
def test_a_refused_number_says_what_would_be_taken(capsys, argv, said):
    rc, out, err = cli(capsys, "math", *argv)
    refused(rc, err, argv[0].rstrip("="), *said)
    assert out == ""


# -- 2: the flag the user typed, not only the engine's field ----------------------------------------


@pytest.mark.parametrize("argv, lead, field", [
    (("math", "--max-model-len", "0"), "--max-model-len 0: ", "max_model_len"),
    (("math", "--attention-heads", "5"), "--attention-heads 5: ", "num_attention_heads (5)"),
    (("math", "--tensor-parallel-size", "5"), "--tensor-parallel-size 5: ", "tensor_parallel_size 5"),
    (("math", "--max-num-batched-tokens", "5"), "--max-num-batched-tokens 5: ", "max_num_batched_tokens (5)"),
    (("run", "--quiet", "--requests", "0"), "--requests 0: ", "num_requests"),
    (("run", "--quiet", "--requests", "2", "--arrival-rate", "-5"), "--arrival-rate -5: ", "arrival_rate_per_s"),
])
def test_a_field_set_by_a_flag_is_said_with_the_flag(capsys, argv, lead, field):
    rc, out, err = cli(capsys, *argv)
    line = refused(rc, err, field)
    assert line.startswith(f"kvscope: error: {lead}"), line


def test_a_one_word_field_is_not_taken_for_its_flag(capsys):
    rc, _, err = cli(capsys, "math", "--vllm-version", "0.99")
    line = refused(rc, err, "memory accounting up to 0.33")
    assert "--accounting" not in line


# -- 3: flags in the wrong place ------------------------------------------------------------------


def test_a_flag_of_another_command_names_the_commands_that_take_it(capsys):
    rc, _, err = cli(capsys, "export", "--model", "x")
    line = refused(rc, err, "--model (a flag of `kvscope math`", "not of `kvscope export`")
    assert "--help?" not in line


def test_a_flag_before_the_command_is_said_as_such(capsys):
    rc, _, err = cli(capsys, "--model", "x", "math")
    line = refused(rc, err, "--model comes before the command", "`kvscope math --model ...`")
    assert "invalid choice" not in line


# -- 4: standard output closed, a version with a space --------------------------------------------


@pytest.mark.parametrize("argv", [("--help",), ("math", "-h")])
def test_help_with_standard_output_closed_is_refused(capsys, monkeypatch, argv):
    monkeypatch.setattr(sys, "stdout", None)
    rc, _, err = cli(capsys, *argv)
    assert rc == 2
    assert err.strip().splitlines() == ["kvscope: error: the standard output is closed; give the command "
                                        "somewhere to write"]


def test_a_vllm_version_is_shown_without_its_spaces(capsys):
    rc, out, err = cli(capsys, "math", "--vllm-version", " 0.19 ")
    assert rc == 0, err
    assert "what vLLM 0.19 allocates" in out and "0.19 " + " " not in out


# -- 5: files the kernel makes up, a cache folder that is a file ----------------------------------


@LINUX
@pytest.mark.parametrize("argv", [("math", "--config", "/proc/self/mem"), ("export", "/proc/self/mem"),
                                  ("run", "--quiet", "--requests", "2", "--trace", "/proc/self/mem")])
def test_a_process_memory_file_is_said_as_what_it_is(capsys, argv):
    rc, out, err = cli(capsys, *argv)
    refused(rc, err, "/proc/self/mem", "cannot read its bytes", "a file the kernel makes up", "give a file")
    assert out == ""


def test_models_says_a_cache_folder_that_is_a_file(capsys, monkeypatch, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("kept\n")
    monkeypatch.setenv("KVSCOPE_CACHE_DIR", str(notes))
    rc, out, err = cli(capsys, "models")  # a listing: the fourth pass took it, and it lists what it can
    assert rc == 0, err
    assert "none can be: KVSCOPE_CACHE_DIR=" in out and "not a folder" in out
    assert "none yet" not in out and notes.read_text() == "kept\n"


# -- 6: preset names apart only in case -----------------------------------------------------------


def _hardware_fields() -> dict:
    return {k: v for k, v in load_hardware("l4-24gb").__dict__.items() if k != "name"}


def test_a_user_preset_named_as_a_built_in_in_other_case_is_refused(monkeypatch, tmp_path):
    monkeypatch.setenv("KVSCOPE_CONFIG_DIR", str(tmp_path))
    with pytest.raises(ConfigError, match="built-in preset 'l4-24gb' only in case"):
        save_user_preset("hardware", "L4-24GB", _hardware_fields())
    assert not (tmp_path / "presets" / "hardware" / "L4-24GB.toml").exists()


def test_a_user_preset_named_as_another_in_other_case_is_refused(monkeypatch, tmp_path):
    monkeypatch.setenv("KVSCOPE_CONFIG_DIR", str(tmp_path))
    kept = save_user_preset("hardware", "my-gpu", _hardware_fields())
    before = kept.read_bytes()
    with pytest.raises(ConfigError, match="your preset 'my-gpu' only in case.*save it as 'my-gpu'"):
        save_user_preset("hardware", "My-GPU", _hardware_fields())
    assert kept.read_bytes() == before
    assert save_user_preset("hardware", "my-gpu", _hardware_fields()) == kept  # the same spelling replaces it


def test_a_home_that_is_a_file_is_said_before_the_cache_is_used(capsys, monkeypatch, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("kept\n")
    monkeypatch.delenv("KVSCOPE_CACHE_DIR", raising=False)
    monkeypatch.setenv("HOME", str(notes))  # calibrate and the real backend said it after `loading ...`
    rc, out, err = cli(capsys, "calibrate", "--no-save", "--model", "tiny-llama")
    refused(rc, err, "the kvscope cache", f"{notes} is a file, not a folder", "set KVSCOPE_CACHE_DIR")
    assert "loading" not in out + err


# -- 7: what is shown -----------------------------------------------------------------------------


def test_a_name_that_is_not_utf8_is_shown_by_its_bytes(capsys, tmp_path):
    # argv's byte 0xff, as Python holds it (surrogateescape): the terminal got "?" or U+FFFD for it
    rc, _, err = cli(capsys, "math", "--config", f"{tmp_path}/a\udcffb.json")
    line = refused(rc, err, "a\\xffb.json")
    assert "\udcff" not in line and "\ufffd" not in line


def test_a_large_concurrency_is_written_with_thousands(capsys):
    rc, out, err = cli(capsys, "math", "--model", "tiny-llama", "--max-model-len", "1")
    assert rc == 0, err
    row = next(line for line in out.splitlines() if line.startswith("max concurrent sequences"))
    assert "," in row.split()[3], row
