"""The command line against bad input, seventh round: the output checks that only the CLI made (a
trailing '/', a folder where no file can be made) now made by the shared check the window's exports
call too; an output below a file said as such; KVSCOPE_CONFIG_DIR through a file; a mis-cased
scenario or choice with its did-you-mean; `math --enable-prefix-caching`, which changed nothing;
and what probing found besides (a refusal after `loading ...`, a cache folder that is a file)."""

from __future__ import annotations

import os
import sys

import pytest

from cli_helper import cli
from kvscope.app.lab.output_path import check_output_path
from kvscope.engine.config import ConfigError
from test_cli_hostile_fifth import refused

RUN = ("run", "--quiet", "--requests", "2")


# -- the shared output check ------------------------------------------------------------------------


def test_the_shared_output_check_refuses_a_trailing_slash_as_the_command_line_did(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("kept\n")
    with pytest.raises(ConfigError, match="ends in '/'"):  # the window's File > Export calls this check
        check_output_path("export", f"{notes}/")
    assert notes.read_text() == "kept\n"


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc")
def test_the_shared_output_check_refuses_a_folder_where_no_file_can_be_made():
    with pytest.raises(ConfigError, match="no file can be made in /proc"):
        check_output_path("export", "/proc/kvscope-new.json")


def test_an_output_below_a_file_says_the_file_is_no_folder(capsys, tmp_path):
    notes = tmp_path / "file.txt"
    notes.write_text("kept\n")
    for flag in ("--json", "--record"):
        rc, out, err = cli(capsys, *RUN, flag, f"{notes}/x")
        line = refused(rc, err, f"{notes} is a file, not a folder")
        assert "does not exist" not in line and out == ""
    rc, _, err = cli(capsys, *RUN, "--json", f"{notes}/a/b.json")  # deeper: the file is still the reason
    refused(rc, err, f"{notes} is a file, not a folder")
    assert notes.read_text() == "kept\n" and [p.name for p in tmp_path.iterdir()] == ["file.txt"]


# -- environment ------------------------------------------------------------------------------------


@pytest.mark.parametrize("below", ["/", "/sub", "/sub/deeper"])
def test_a_config_folder_through_a_file_is_refused_by_its_variable(capsys, monkeypatch, tmp_path, below):
    notes = tmp_path / "file.txt"
    notes.write_text("kept\n")
    monkeypatch.setenv("KVSCOPE_CONFIG_DIR", f"{notes}{below}")
    rc, out, err = cli(capsys, "presets")
    refused(rc, err, "KVSCOPE_CONFIG_DIR=", f"{notes} is a file, not a folder")
    assert out == ""  # not a listing's first line, then the refusal
    assert notes.read_text() == "kept\n"


def test_a_cache_folder_that_is_a_file_is_refused_before_loading(capsys, monkeypatch, tmp_path):
    notes = tmp_path / "file.txt"
    notes.write_text("kept\n")
    monkeypatch.setenv("KVSCOPE_CACHE_DIR", str(notes))
    rc, out, err = cli(capsys, "verify", "--model", "tiny-llama")  # built there on first use
    refused(rc, err, "KVSCOPE_CACHE_DIR=", "not a folder")  # one line: not `loading tiny-llama ...` first
    assert out == "" and notes.read_text() == "kept\n"


# -- names ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("typed, meant", [
    ("Prefix-Caching", "prefix-caching"), ("cache-ceilng", "cache-ceiling"), ("prefix caching", "prefix-caching"),
    ("cache-ceiling.toml", "cache-ceiling"),
])
def test_a_mistyped_scenario_gets_a_did_you_mean(capsys, typed, meant):
    rc, _, err = cli(capsys, "compare", "--quiet", "--scenario", typed)
    refused(rc, err, f"did you mean {'the scenario ' if typed.endswith('.toml') else ''}{meant}?")


@pytest.mark.parametrize("argv, meant", [
    (("presets", "Models"), "did you mean models?"),
    (("math", "--accounting", "Lesson"), "did you mean lesson?"),
    (("math", "--JSON"), "did you mean --json?"),
    (("math", "--model", "Llama 3 8B"), "did you mean llama-3-8b?"),
    (("run", "--workload", "\uff43\uff48\uff41\uff54"), "did you mean chat?"),  # full-width letters
])
def test_a_mis_cased_choice_flag_or_preset_gets_a_did_you_mean(capsys, argv, meant):
    rc, _, err = cli(capsys, *argv)
    refused(rc, err, meant)


def test_a_workload_path_without_toml_is_said_as_a_path(capsys):
    rc, _, err = cli(capsys, *RUN, "--workload", "/dev/zero")
    refused(rc, err, "a path", "ends in .toml")


# -- flags that change nothing ----------------------------------------------------------------------


@pytest.mark.parametrize("argv, flag", [
    (("math", "--enable-prefix-caching"), "--enable-prefix-caching"),
    (("math", "--no-enable-prefix-caching"), "--no-enable-prefix-caching"),
    (("math", "--model", "qwen3.6-27b-fp8", "--no-enable-prefix-caching", "--accounting", "lesson"),
     "--no-enable-prefix-caching"),
    (("math", "--model", "qwen3.6-27b-fp8", "--no-enable-prefix-caching", "--vllm-version", "0.19"),
     "--no-enable-prefix-caching"),
])
def test_prefix_caching_is_refused_in_math_where_it_changes_nothing(capsys, argv, flag):
    rc, out, err = cli(capsys, *argv)
    refused(rc, err, flag, "changes nothing in `kvscope math`")
    assert out == ""


def test_prefix_caching_is_taken_in_math_where_it_sizes_state_blocks(capsys):
    said = {}
    for flag in ("--enable-prefix-caching", "--no-enable-prefix-caching"):
        rc, out, err = cli(capsys, "math", "--model", "qwen3.6-27b-fp8", "--hardware", "h100-80gb", flag, "--json")
        assert rc == 0, err
        said[flag] = out
    assert said["--enable-prefix-caching"] != said["--no-enable-prefix-caching"]


def test_memory_under_one_byte_is_refused_by_its_flag(capsys):
    rc, _, err = cli(capsys, "math", "--memory-gib", "1e-300")
    refused(rc, err, "--memory-gib", "less than one byte")


# -- the real backend's commands --------------------------------------------------------------------


@pytest.mark.parametrize("argv, said", [
    (("verify", "--device", "tpu"), "runs on cpu or cuda"),
    (("verify", "--device", "cuda:-1"), "numbers a device"),
    (("verify", "--model", "Tiny-Llama"), "did you mean tiny-llama?"),
    (("verify", "--model-path", "/nonexistent-kvscope-model"), "no such directory"),
])
def test_the_real_backend_refuses_before_saying_loading(capsys, argv, said):
    rc, _, err = cli(capsys, *argv)
    refused(rc, err, said)  # one line: not `kvscope: loading ...` first


def test_an_empty_positional_is_named_as_one(capsys):
    rc, _, err = cli(capsys, "attach", "", "--duration", "1")
    refused(rc, err, "URL is empty")
    assert "--url" not in err


@pytest.mark.skipif(sys.platform != "linux", reason="paths of Linux")
def test_the_sixth_rounds_output_refusals_keep_their_words(capsys, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("kept\n")
    refused(*cli(capsys, *RUN, "--json", f"{notes}/")[::2], "ends in '/'")
    refused(*cli(capsys, *RUN, "--record", "/proc/version")[::2], "no file can be made in /proc")
    assert notes.read_text() == "kept\n"
