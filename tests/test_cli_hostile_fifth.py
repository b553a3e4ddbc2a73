"""The fifth hostile pass over the command line (scripts/hostile_inputs_fifth_cli.py has its cases
as the hostile runner runs them): what each failure was, checked in-process where it can be, and
in a subprocess where the process's own standard streams or address space are the input."""

from __future__ import annotations

import errno
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from cli_helper import cli
from kvscope.app.cli import main as cli_main

ROOT = Path(__file__).resolve().parent.parent
KVSCOPE = ROOT / ".venv" / "bin" / "kvscope"
DEAD = "http://127.0.0.1:1"
EVENTS = ("--kv-events", "tcp://127.0.0.1:9")


def refused(rc, err, *fragments):
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kvscope") and "error" in lines[0], err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def kvscope(*argv, **kwargs):
    """The real command in a subprocess: (exit code, stdout, stderr)."""
    proc = subprocess.run([str(KVSCOPE), *map(str, argv)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "QT_QPA_PLATFORM": "offscreen"}, **kwargs)
    return proc.returncode, proc.stdout, proc.stderr


# -- the standard streams -------------------------------------------------------------------------


def test_a_closed_standard_error_is_no_traceback(capsys, monkeypatch):
    """`kvscope run 2>&-` ended in AttributeError (the progress line's sys.stderr.isatty()), exit 1."""
    monkeypatch.setattr(sys, "stderr", None)
    assert cli_main.main(["run", "--requests", "2"]) == 0
    capsys.readouterr()
    monkeypatch.setattr(sys, "stderr", None)
    assert cli_main.main(["math", "--model", "nope"]) == 2
    assert "kvscope: error" not in capsys.readouterr().out  # not moved to stdout (print(file=None) picks it)


def test_a_standard_error_whose_reader_left_still_exits_2(capsys, monkeypatch):
    """`kvscope math --model nope 2>&1 | head -c 5`: the error line's write failed, exit 1."""
    class Gone:
        def write(self, text):
            raise BrokenPipeError(errno.EPIPE, "Broken pipe")

        def flush(self):
            raise BrokenPipeError(errno.EPIPE, "Broken pipe")

    monkeypatch.setattr(sys, "stderr", Gone())
    assert cli_main.main(["math", "--model", "nope"]) == 2


def test_an_output_naming_standard_input_is_refused_and_the_file_kept(tmp_path):
    """`kvscope run --json /dev/stdin < notes.txt` renamed the report over notes.txt."""
    notes = tmp_path / "notes.txt"
    notes.write_text("precious\n")
    for argv in (("run", "--quiet", "--requests", "2", "--json", "/dev/stdin"),
                 ("run", "--quiet", "--requests", "2", "--record", "/proc/self/fd/0")):
        with open(notes) as stdin:
            rc, _, err = kvscope(*argv, stdin=stdin)
        refused(rc, err, "standard input")
        assert notes.read_text() == "precious\n"


def test_an_output_naming_standard_error_is_refused(tmp_path):
    """A recording or a PNG written into the command's messages (`--record /dev/stderr` said
    "replay it with kvscope gui --replay /dev/stderr")."""
    log = tmp_path / "log.txt"
    with open(log, "w") as stderr:
        proc = subprocess.run([str(KVSCOPE), "run", "--quiet", "--requests", "2", "--record", "/dev/stderr"],
                              stdout=subprocess.PIPE, stderr=stderr, timeout=60)
    assert proc.returncode == 2
    assert "standard error" in log.read_text() and "KVREC" not in log.read_text()


def test_dev_null_is_still_a_place_to_write(tmp_path):
    rc, _, err = kvscope("run", "--quiet", "--requests", "2", "--json", "/dev/null", stdin=subprocess.DEVNULL)
    assert rc == 0, err


# -- what is echoed ---------------------------------------------------------------------------------


def test_control_characters_in_a_path_are_shown_escaped(capsys):
    rc, _, err = cli(capsys, "run", "--quiet", "--trace", "/nonexistent/\x1b]0;pwned\x07\u202e.csv")
    line = refused(rc, err, "\\x1b]0;pwned\\x07\\u202e.csv")
    assert "\x1b" not in line and "\x07" not in line and "\u202e" not in line


def test_one_line_keeps_ordinary_text():
    assert cli_main.one_line("a path é/ü, 3.2 GiB ±5 %") == "a path é/ü, 3.2 GiB ±5 %"
    assert cli_main.one_line("tab\there") == "tab\\there"


def test_a_flag_pasted_with_a_typographic_dash_is_named(capsys):
    rc, _, err = cli(capsys, "run", "--quiet", "\u2014requests", "3")
    refused(rc, err, "did you mean --requests")


# -- outputs onto files a command reads -------------------------------------------------------------


@pytest.fixture
def model_folder(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama"}))
    (folder / "model.safetensors").write_bytes(b"weights\n")
    return folder


@pytest.mark.parametrize("argv", [
    ("run", "--quiet", "--backend", "real", "--requests", "2", "--json"),
    ("verify", "--json"),
    ("calibrate", "--json"),
])
def test_an_output_onto_a_model_folders_weights_is_refused(capsys, model_folder, argv):
    weights = model_folder / "model.safetensors"
    rc, _, err = cli(capsys, *argv, weights, "--model-path", model_folder)
    refused(rc, err, "--model-path folder")
    assert weights.read_bytes() == b"weights\n"


def test_attach_refuses_an_output_onto_the_presets_it_reads(capsys, monkeypatch, tmp_path):
    """--json is written even when the attach is refused: it replaced the --model preset."""
    preset = tmp_path / "presets" / "models" / "mine.toml"
    preset.parent.mkdir(parents=True)
    text = (ROOT / "presets" / "models" / "tiny-llama.toml").read_text().replace('"tiny-llama"', '"mine"')
    preset.write_text(text)
    monkeypatch.setenv("KVSCOPE_CONFIG_DIR", str(tmp_path))
    rc, _, err = cli(capsys, "attach", DEAD, *EVENTS, "--duration", "0.5", "--model", "mine", "--json", preset)
    refused(rc, err, "model preset")
    assert preset.read_text() == text


def test_verify_and_calibrate_refuse_an_output_onto_their_model_preset(capsys):
    built_in = ROOT / "presets" / "models" / "tiny-llama.toml"
    before = built_in.read_bytes()
    for command in ("verify", "calibrate"):
        rc, _, err = cli(capsys, command, "--model", "tiny-llama", "--json", built_in)
        refused(rc, err, "model preset")
    assert built_in.read_bytes() == before


# -- attach's addresses -----------------------------------------------------------------------------


@pytest.mark.parametrize("flags", [
    (*EVENTS, "--topic", "kv\udcff"),
    ("--kv-events", "tcp://\udcff:5557"),
    ("--kv-listen", "tcp://\udcff:5557"),
    (*EVENTS, "--replay", "tcp://\udcff:5558"),
])
def test_attach_refuses_addresses_and_topics_that_are_not_utf8(capsys, flags):
    """ZMQ encodes them as UTF-8: --replay was a traceback, the others hung closing the subscriber."""
    rc, _, err = cli(capsys, "attach", DEAD, *flags, "--duration", "0.5")
    refused(rc, err, "UTF-8")


def test_attach_refuses_an_inproc_endpoint_and_a_topic_no_message_can_have(capsys):
    rc, _, err = cli(capsys, "attach", DEAD, "--kv-events", "inproc://kv", "--duration", "0.5")
    refused(rc, err, "inproc")
    rc, _, err = cli(capsys, "attach", DEAD, *EVENTS, "--topic", "t" * 5000, "--duration", "0.5")
    refused(rc, err, "--topic of 5,000 bytes")


# -- scenarios, byte counts, benchmarks ------------------------------------------------------------


def test_a_scenario_path_that_is_a_folder_or_a_pipe_is_said_as_one(capsys, tmp_path):
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    rc, _, err = cli(capsys, "compare", "--quiet", "--scenario", tmp_path)
    refused(rc, err, "is a folder")
    rc, _, err = cli(capsys, "compare", "--quiet", "--scenario", pipe)
    refused(rc, err, "not a regular file")
    rc, _, err = cli(capsys, "bench", "compare", "--scenario", "/dev/null")
    refused(rc, err, "not a regular file")


@pytest.mark.parametrize("flag,value", [("--weights-bytes", "1.5"), ("--memory-bytes", "80000000000.5"),
                                        ("--reserve-bytes", "0.5"), ("--kv-cache-memory-bytes", "1048576.5"),
                                        ("--params", "1.5")])
def test_a_fractional_byte_count_is_refused(capsys, flag, value):
    rc, _, err = cli(capsys, "math", flag, value)
    refused(rc, err, "not a whole number", flag)


def test_a_whole_byte_count_written_with_a_fraction_and_an_exponent_is_accepted(capsys):
    rc, out, err = cli(capsys, "math", "--weights-bytes", "16.5e9", "--json")
    assert rc == 0, err
    assert json.loads(out)["weights_bytes"] == 16_500_000_000


def test_bench_json_goes_to_a_file_not_beside_the_tables(capsys):
    rc, _, err = cli(capsys, "bench", "scheduler", "--json", "-")
    refused(rc, err, "not to stdout")
    rc, _, err = cli(capsys, "calibrate", "--json", "-")
    refused(rc, err, "not to stdout")


# -- --self-test's output, and a tiny address space -------------------------------------------------


@pytest.mark.parametrize("error,code", [(OSError(errno.ENOSPC, "No space left on device"), 2),
                                        (BrokenPipeError(errno.EPIPE, "Broken pipe"), 141)])
def test_self_test_output_that_cannot_be_written(capsys, monkeypatch, error, code):
    """`kvscope --self-test --startup > /dev/full` was a traceback from its last print."""
    from kvscope.app.bench import self_test

    def probe():
        raise error

    monkeypatch.setattr(self_test, "run_startup_probe", probe)
    monkeypatch.setattr(cli_main, "_silence_stdout", lambda: None)  # capsys's stdout has no descriptor
    rc, _, err = cli(capsys, "--self-test", "--startup")
    assert rc == code
    if code == 2:
        refused(rc, err, "No space left")


def test_self_test_with_stdout_on_a_full_disk():
    with open("/dev/full", "w") as full:
        proc = subprocess.run([str(KVSCOPE), "--self-test"], stdout=full, stderr=subprocess.PIPE, text=True,
                              timeout=60, env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    refused(proc.returncode, proc.stderr, "No space left")


def test_a_tiny_address_space_is_one_line_not_a_traceback():
    """`ulimit -v 50000`: numpy's libraries cannot be mapped; the import in main.py was a traceback."""
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (50_000 * 1024, 50_000 * 1024))

    proc = subprocess.run([str(KVSCOPE), "math"], capture_output=True, text=True, timeout=60, preexec_fn=limit)
    refused(proc.returncode, proc.stderr, "out of memory", "ulimit -v")


def test_an_address_space_openblas_could_not_start_its_threads_in_still_runs():
    """`ulimit -v 125000`: OpenBLAS gave up allocating a buffer per core in C (a KeyboardInterrupt
    traceback, exit 130, before main() ran); with one BLAS thread the command runs."""
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (125_000 * 1024, 125_000 * 1024))

    proc = subprocess.run([str(KVSCOPE), "math"], capture_output=True, text=True, timeout=60, preexec_fn=limit)
    assert proc.returncode == 0 and "KV per token" in proc.stdout, proc.stderr[-500:]


def test_an_import_error_that_is_not_memory_is_not_hidden():
    with pytest.raises(ImportError):
        cli_main._out_of_memory_at_start(ImportError("No module named 'numpy'"))


# -- a window with no display Qt can use -------------------------------------------------------------


def test_an_unknown_qt_platform_is_refused_not_aborted_on():
    from kvscope.app.cli.qt_system_libs import unknown_platform

    assert "no such platform plugin" in unknown_platform({"QT_QPA_PLATFORM": "nonsense"})
    for fine in ("offscreen", "OFFSCREEN", "nonsense;offscreen", "vnc:size=800x600", "wayland-egl", ""):
        assert unknown_platform({"QT_QPA_PLATFORM": fine}) is None, fine
    # a plugin folder of the user's own may hold more than Qt's: left to Qt
    assert unknown_platform({"QT_QPA_PLATFORM": "mine", "QT_QPA_PLATFORM_PLUGIN_PATH": "/opt/qt"}) is None


def test_no_x_display_is_refused_not_aborted_on():
    from kvscope.app.cli.qt_system_libs import x_display_problem

    assert "DISPLAY is not set" in x_display_problem({"DISPLAY": ""})
    assert "cannot open the X display" in x_display_problem({"DISPLAY": ":87"})  # no X server there


@pytest.mark.parametrize("env", [{"QT_QPA_PLATFORM": "nonsense"}, {"QT_QPA_PLATFORM": "xcb", "DISPLAY": ":87"}])
def test_gui_and_attach_windows_say_so_in_one_line(capsys, monkeypatch, env):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    rc, _, err = cli(capsys, "gui", "--backend", "simulated", "--quit-after", "0")
    refused(rc, err)
    rc, _, err = cli(capsys, "attach", DEAD, *EVENTS, "--quit-after", "0")
    refused(rc, err)
