"""The command line and attach against bad input, sixteenth round (scripts/hostile_inputs_sixteenth_cli.py): a
parameter count said as "0.00 B", random weights too large for the device refused after `loading ...` (calibrate,
verify), attach's summary saying --duration rounded, a value typed after a switch said only as "unrecognized" (a
second benchmark too), a preset file's path given to --model said as a Hugging Face name, kvscope's own
--self-test after a command answered "did you mean --reserve-bytes?", a recording sent to /dev/null offered for
replay, and `compare --requests` under a scenario's least said without its flag. Each refusal test fails on the
code before its fix; each has a consistent neighbour that is still taken."""

from __future__ import annotations

import pytest

from attach_fixtures import play_script
from cli_helper import cli
from test_cli_hostile_fifth import refused

from kvscope.app.cli import combinations, options
from kvscope.app.lab.models import loader
from kvscope.engine.config import ConfigError

# -- 1. a parameter count in the unit it reaches ------------------------------------------------------------------


@pytest.mark.parametrize("count, said", [(8.03e9, "8.03 B"), (34_020_000, "34.02 M"), (135_000, "135.00 K"),
                                         (3, "3"), (0, "0")])
def test_a_parameter_count_is_said_in_the_unit_it_reaches(count, said):
    from kvscope.engine.units import format_parameters

    assert format_parameters(count) == said


def test_a_million_parameters_are_not_said_as_none(capsys):
    rc, out, err = cli(capsys, "math", "--params", "1e6")
    assert rc == 0, err
    assert "(--params 1.00 M x 2 B (bf16))" in out and "0.00 B" not in out
    rc, out, err = cli(capsys, "math", "--model", "tiny-llama")
    assert rc == 0, err
    assert "34.02 M parameters x 2 B (bf16)" in out and "0.03 B" not in out
    rc, out, err = cli(capsys, "math", "--params", "8e9")  # a count in billions reads as before
    assert rc == 0, err
    assert "(--params 8.00 B x 2 B (bf16))" in out


# -- 2. random weights larger than the device, before `loading ...` -----------------------------------------------


@pytest.fixture
def one_gib_machine(monkeypatch):
    monkeypatch.setattr(loader, "_available_bytes", lambda device: 2**30)


@pytest.mark.parametrize("argv", [("verify", "--model", "llama-3-8b", "--device", "cpu"),
                                  ("calibrate", "--model", "llama-3-8b", "--device", "cpu", "--no-save")])
def test_random_weights_past_the_device_are_refused_before_loading(capsys, one_gib_machine, argv):
    rc, out, err = cli(capsys, *argv)
    refused(rc, err, "llama-3-8b needs about 29.9 GiB for its weights as fp32, but cpu has 1.0 GiB")
    assert "loading" not in err


def test_a_preset_that_fits_and_an_edited_shape_are_left_to_load(one_gib_machine):
    options.check_real_model("tiny-llama", None, fit_on="cpu")  # 136 MB of fp32 weights fit in 1 GiB
    options.check_real_model("llama-3-8b", None)  # `run --layers 1` checks its edited shape itself
    with pytest.raises(ConfigError, match="needs about 29.9 GiB"):
        options.check_real_model("llama-3-8b", None, fit_on="cpu")


# -- 3. attach: the duration as typed, and a recording with no file to replay ---------------------------------------


def test_attach_says_its_duration_as_typed_and_offers_no_replay_of_dev_null(server, publisher, tmp_path, capsys):
    http, pub = server(), publisher()
    play_script(pub)
    rc, out, err = cli(capsys, "attach", http.url, "--kv-events", pub.endpoint, "--duration", "1.2345678",
                       "--record", "/dev/null")
    assert rc == 0, err
    assert "Attached for 1.2345678 s" in out
    assert "recording written to /dev/null" in out and "nothing to replay" in out and "--replay /dev/null" not in out


def test_a_recording_in_a_file_or_on_dev_null(capsys, tmp_path):
    rc, out, err = cli(capsys, "run", "--quiet", "--requests", "2", "--record", "/dev/null")
    assert rc == 0, err
    assert "which keeps no file: there is nothing to replay" in out and "--replay /dev/null" not in out
    kept = tmp_path / "r.kvrec"
    rc, out, err = cli(capsys, "run", "--quiet", "--requests", "2", "--record", kept)
    assert rc == 0, err
    assert f"replay it with `kvscope gui --replay {kept}`" in out


# -- 4. a value typed after a switch ---------------------------------------------------------------------------------


@pytest.mark.parametrize("argv, said", [
    (("math", "--json", "out.json"), "out.json (--json takes no value in `kvscope math`: print one JSON object "
                                     "instead of the table; redirect it to keep it: > out.json)"),
    (("scenarios", "--json", "s.json"), "s.json (--json takes no value in `kvscope scenarios`"),
    (("math", "--enforce-eager", "yes"), "yes (--enforce-eager takes no value in `kvscope math`"),
])
def test_a_value_after_a_switch_names_the_switch(capsys, argv, said):
    rc, out, err = cli(capsys, *argv)
    refused(rc, err, f"unrecognized arguments: {said}")


@pytest.mark.parametrize("argv, second", [(("bench", "scheduler", "trace"), "trace"),
                                          (("presets", "models", "hardware"), "hardware")])
def test_a_second_choice_is_said_as_one(capsys, argv, second):
    rc, out, err = cli(capsys, *argv)
    refused(rc, err, f"unrecognized arguments: {second} (a second choice: `kvscope {argv[0]}` takes one at a time)")


def test_a_stray_word_after_no_switch_is_said_as_before(capsys):
    rc, out, err = cli(capsys, "math", "extra")
    refused(rc, err, "unrecognized arguments: extra")
    assert "takes no value" not in err
    rc, out, err = cli(capsys, "bench", "scheduler", "extra")  # no choice of bench's: said as before
    assert "second choice" not in refused(rc, err, "unrecognized arguments: extra")
    rc, out, err = cli(capsys, "math", "--json")  # the switch alone prints the JSON
    assert rc == 0, err and out.startswith("{")


# -- 5. a preset's file given where its name goes --------------------------------------------------------------------


@pytest.mark.parametrize("flag, path", [("--model", "presets/models/llama-3-8b.toml"), ("--model", "./config.json"),
                                        ("--hardware", "presets/hardware/h100-80gb.toml")])
def test_a_path_given_for_a_preset_is_said_as_a_path(capsys, flag, path):
    rc, out, err = cli(capsys, "math", flag, path)
    line = refused(rc, err, f"{path!r}: a path, and {flag} takes a preset's name")
    assert "Hugging Face" not in line and "uses letters, digits" not in line


def test_a_repository_name_and_a_workload_file_are_read_as_before(capsys):
    rc, out, err = cli(capsys, "math", "--model", "meta-llama/Meta-Llama-3-8B")
    refused(rc, err, "is a Hugging Face repository name, not a preset")
    rc, out, err = cli(capsys, "run", "--quiet", "--requests", "2", "--workload", "presets/workloads/chat.toml")
    assert rc == 0, err


# -- 6. kvscope's own flag after a command ---------------------------------------------------------------------------


def test_self_test_after_a_command_is_said_as_kvscopes_own(capsys):
    rc, out, err = cli(capsys, "math", "--self-test")
    line = refused(rc, err, "--self-test (a flag of `kvscope` itself, typed before the command, not of `kvscope math`)")
    assert "did you mean" not in line
    rc, out, err = cli(capsys, "export", "--model", "x")  # another command's flag: named as before
    refused(rc, err, "--model (a flag of `kvscope math`")


# -- 7. compare --requests under a scenario's least ------------------------------------------------------------------


def test_compare_requests_under_the_least_names_the_flag(capsys, monkeypatch):
    rc, out, err = cli(capsys, "compare", "--scenario", "static-vs-continuous", "--requests", "5")
    refused(rc, err, "--requests 5: scenario static-vs-continuous needs at least 64 requests", "leave --requests out")

    def reached(*args):  # the least is taken: the command goes on to the trace's rows (the run itself is long here)
        raise ConfigError("past the scenario's checks")

    monkeypatch.setattr(combinations, "refuse_requests_past_trace", reached)
    rc, out, err = cli(capsys, "compare", "--quiet", "--scenario", "static-vs-continuous", "--requests", "64")
    refused(rc, err, "past the scenario's checks")
