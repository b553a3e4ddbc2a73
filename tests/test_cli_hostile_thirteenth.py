"""The command line against bad input, thirteenth round (scripts/hostile_inputs_thirteenth_cli.py):
`attach --duration 0.001` said as "not the server's publisher", a DP-2 server followed as rank 0 alone,
a command's own flag after '--' said as another command's, numbers typed with their unit, outputs named
for another format (`export --csv trace.json --perfetto steps.csv`), `run --seed` that a trace ignores,
`run --backend real --hardware this-machine` refused as a simulated target, `verify --kv-cache-dtype
auto` and FP16, `gui --size 1600×960` and `gui --workload mine.toml`. Each refusal test fails on the code
before its fix; each has a consistent neighbour that is still taken."""

from __future__ import annotations

import pytest

from attach_fixtures import PRESSURE_METRICS, FixtureServer, vllm_routes
from cli_helper import cli
from test_cli_hostile_fifth import refused

from kvscope.engine.config import KV_CACHE_PRECISIONS

DEAD = "http://127.0.0.1:1"  # nothing listens: a refusal that names the server came after the flags' checks
TRACE = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.53,396,9\n"


# -- 1. attach -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("duration", ["0.001", "1e-300", "0.19"])
def test_an_attach_too_short_to_hear_an_event_is_refused_before_the_server_is_asked(capsys, duration):
    rc, out, err = cli(capsys, "attach", DEAD, "--kv-events", "tcp://127.0.0.1:5557", "--duration", duration)
    refused(rc, err, "argument --duration:", "s is too short to hear a KV event", "give at least 0.2 s")
    assert "cannot reach" not in err and "not the server's publisher" not in err


def test_an_attach_of_the_shortest_duration_reaches_the_server(capsys):
    rc, out, err = cli(capsys, "attach", DEAD, "--kv-events", "tcp://127.0.0.1:5557", "--duration", "0.2")
    refused(rc, err, "cannot reach http://127.0.0.1:1/version")  # the flags passed: the server is asked


def _two_engines() -> bytes:
    """The captured exposition with every engine="0" sample repeated as engine "1": a DP-2 server."""
    lines = PRESSURE_METRICS.splitlines()
    second = [line.replace(b'engine="0"', b'engine="1"') for line in lines
              if b'engine="0"' in line and not line.startswith(b"#")]
    return b"\n".join(lines + second) + b"\n"


@pytest.mark.parametrize("size, said", [
    (1, "names 2 DP engines (ranks 0-1), and a data-parallel size of 1 follows the KV events of rank 0 alone"),
    (2, None),  # the size the server runs: attached (no publisher listens: refused after following)
])
def test_a_server_of_more_dp_engines_than_followed_is_refused(capsys, size, said):
    server = FixtureServer(vllm_routes(metrics=_two_engines()))
    try:
        rc, out, err = cli(capsys, "attach", server.url, "--kv-events", "tcp://127.0.0.1:9", "--duration", "0.2",
                           "--data-parallel-size", str(size))
    finally:
        server.stop()
    if said:
        refused(rc, err, said, "give --data-parallel-size 2")
    else:
        refused(rc, err, "no KV event from tcp://127.0.0.1:9 yet")


# -- 2. flags and numbers --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("argv, flag", [
    (("export", "--", "r.kvrec", "--csv", "x.csv"), "--csv"),
    (("math", "--", "--json"), "--json"),
    (("attach", "--", DEAD, "--kv-events", "tcp://127.0.0.1:5557"), "--kv-events"),
])
def test_a_commands_own_flag_after_a_double_dash_is_said_as_such(capsys, argv, flag):
    rc, out, err = cli(capsys, *argv)
    refused(rc, err, f"{flag} (a flag of `kvscope {argv[0]}`, but after '--', which ends the flags")
    assert "did you mean" not in err and "not of `kvscope" not in err


def test_a_flag_of_another_command_is_still_said_as_its(capsys):
    rc, out, err = cli(capsys, "math", "--requests", "3")
    refused(rc, err, "--requests (a flag of `kvscope run`")


@pytest.mark.parametrize("argv, said", [
    (("math", "--memory-gib", "24GiB"), "a number with a unit (GiB) typed after it; give the number alone"),
    (("math", "--memory-bytes", "80 GB"), "a number with a unit (GB)"),
    (("math", "--gpu-memory-utilization", "90%"), "a share is given as a fraction, such as 0.9 for 90 %"),
    (("attach", DEAD, "--kv-events", "tcp://127.0.0.1:5557", "--duration", "10s"), "a number with a unit (s)"),
])
def test_a_number_typed_with_its_unit_says_so(capsys, argv, said):
    rc, out, err = cli(capsys, *argv)
    refused(rc, err, said)
    assert "decimal digits" not in err


@pytest.mark.parametrize("value, said", [("1e", "give a number in decimal digits"), ("0x10", "hexadecimal is not read"),
                                         ("lots", "give a number in decimal digits")])
def test_what_is_no_number_with_a_unit_is_said_as_before(capsys, value, said):
    rc, out, err = cli(capsys, "math", "--memory-gib", value)
    refused(rc, err, said)
    assert "unit" not in err


# -- 3. outputs named for another format ----------------------------------------------------------------------------


@pytest.fixture
def recording(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    rc, out, err = cli(capsys, "run", "--quiet", "--requests", "2", "--record", "r.kvrec")
    assert rc == 0, err
    return tmp_path / "r.kvrec"


def test_swapped_export_outputs_are_refused_and_nothing_is_written(capsys, recording):
    rc, out, err = cli(capsys, "export", recording, "--csv", "trace.json", "--perfetto", "steps.csv")
    refused(rc, err, "steps.csv: writes JSON, and the name's .csv says CSV; give a .json name")
    assert not (recording.parent / "trace.json").exists() and not (recording.parent / "steps.csv").exists()
    rc, out, err = cli(capsys, "export", recording, "--csv", "steps.csv", "--perfetto", "trace.json")
    assert rc == 0, err


@pytest.mark.parametrize("argv, said", [
    (("run", "--quiet", "--requests", "2", "--record", "out.json"), "--record out.json: writes a kvscope recording"),
    (("run", "--quiet", "--requests", "2", "--json", "out.kvrec"), "--json out.kvrec: writes JSON"),
    (("run", "--quiet", "--requests", "2", "--json", "out.CSV"), "the name's .csv says CSV"),
])
def test_an_output_named_for_another_format_is_refused(capsys, tmp_path, monkeypatch, argv, said):
    monkeypatch.chdir(tmp_path)
    rc, out, err = cli(capsys, *argv)
    refused(rc, err, said)
    assert list(tmp_path.iterdir()) == []


def test_outputs_named_for_their_format_or_for_none_are_written(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc, out, err = cli(capsys, "run", "--quiet", "--requests", "2", "--json", "out.JSON", "--record", "run")
    assert rc == 0, err
    assert {p.name for p in tmp_path.iterdir()} == {"out.JSON", "run"}


# -- 4. run, verify, gui ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("source", [("--workload", "azure-conv", "--requests", "2"), ("--trace", "t.csv")])
def test_a_seed_a_trace_does_not_read_is_refused(capsys, tmp_path, monkeypatch, source):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.csv").write_text(TRACE)
    rc, out, err = cli(capsys, "run", "--quiet", *source, "--seed", "5")
    refused(rc, err, "replays a trace", "the seed draws only the prompts' token ids", "--seed would be ignored")
    rc, out, err = cli(capsys, "run", "--quiet", *source)  # the same run without it
    assert rc == 0, err


def test_a_seed_of_a_synthetic_workload_is_taken(capsys):
    rc, out, err = cli(capsys, "run", "--quiet", "--workload", "chat", "--requests", "2", "--seed", "5")
    assert rc == 0, err


def test_the_real_backend_takes_this_machine_as_its_hardware(capsys, monkeypatch):
    """`run --backend real --hardware this-machine` was "describe a simulated target" (gui takes it)."""
    from kvscope.app.cli import run as run_command
    from kvscope.engine.config import ConfigError

    def checked(args, shape):
        raise ConfigError("past the hardware check, to the checks before loading")

    monkeypatch.setattr(run_command, "refuse_before_loading", checked)
    rc, out, err = cli(capsys, "run", "--backend", "real", "--model", "tiny-llama", "--hardware", "this-machine")
    refused(rc, err, "past the hardware check")


@pytest.mark.parametrize("flags, said", [
    (("--hardware", "this-machine", "--memory-gib", "4"), "--memory-gib 4: describes a simulated target"),
    (("--hardware", "h100-80gb"), "--hardware h100-80gb: describes a simulated target"),
])
def test_a_simulated_target_beside_the_real_backend_is_named(capsys, flags, said):
    rc, out, err = cli(capsys, "run", "--backend", "real", "--model", "tiny-llama", *flags)
    refused(rc, err, said)


@pytest.mark.parametrize("value, read", [("auto", "auto"), ("FP16", "fp16"), ("ALL", None)])
def test_verify_reads_a_kv_cache_dtype_as_run_does(monkeypatch, capsys, value, read):
    from kvscope.app.cli import verify

    asked = []
    monkeypatch.setattr(verify, "check_output_path", lambda *a, **k: (_ for _ in ()).throw(SystemExit(0)))
    original = verify.normalize_dtype
    monkeypatch.setattr(verify, "normalize_dtype", lambda name, *a: asked.append(original(name, *a)) or asked[-1])
    rc, out, err = cli(capsys, "verify", "--kv-cache-dtype", value)
    assert rc == 0, err
    assert asked == ([read] if read else list(KV_CACHE_PRECISIONS))


def test_verify_refuses_an_unknown_kv_cache_dtype_with_the_ones_it_takes(capsys):
    rc, out, err = cli(capsys, "verify", "--kv-cache-dtype", "fp9")
    refused(rc, err, "unknown kv_cache_dtype 'fp9'; choose all or one of: auto, fp32")


@pytest.mark.parametrize("text, size", [("1600×960", (1600, 960)), ("1600X960", (1600, 960))])
def test_a_window_size_with_the_multiplication_sign_is_read(text, size):
    from kvscope.app.cli.gui import _size

    assert _size(text) == size


def test_a_size_of_three_sides_is_still_refused():
    import argparse

    from kvscope.app.cli.gui import _size

    with pytest.raises(argparse.ArgumentTypeError, match="expected WIDTHxHEIGHT"):
        _size("1600×960×2")


def test_a_workload_file_where_a_preset_is_read_says_where_to_save_it(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KVSCOPE_CONFIG_DIR", str(tmp_path / "config"))
    (tmp_path / "mine.toml").write_text('name = "mine"\n')
    rc, out, err = cli(capsys, "gui", "--backend", "simulated", "--workload", "mine.toml", "--quit-after", "0")
    refused(rc, err, "'mine.toml': a workload file, where a preset's name is read",
            f"save it as {tmp_path / 'config' / 'presets' / 'workloads' / 'mine.toml'}", "give the name 'mine'")
    assert "give a workload .toml file" not in err
    from kvscope.app.lab.presets import load_workload

    assert load_workload("chat").name == "chat"  # a preset's name is read as before


@pytest.mark.parametrize("command, said", [
    (("attach", DEAD, "--kv-events", "tcp://127.0.0.1:5557", "--duration", "0.3"),
     "give the served model's folder, the one holding its config.json"),
    (("math",), "or a config.json itself with --config"),  # math takes --config: it is named there
])
def test_a_config_json_given_as_the_model_folder_is_sent_where_the_command_reads_it(capsys, tmp_path, command, said):
    """`attach --model-path DIR/config.json` was told to give it "with --config", a flag attach has not."""
    config = tmp_path / "config.json"
    config.write_text("{}")
    rc, out, err = cli(capsys, *command, "--model-path", config)
    refused(rc, err, said)
    assert ("--config" in err) == (command[0] == "math")
