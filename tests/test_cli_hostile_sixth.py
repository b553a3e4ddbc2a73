"""The command line against bad input, sixth round: a flag only vLLM's accounting reads given with
`--accounting lesson` (taken, and then changing nothing), and a tiny `ulimit -v` at which Python's
own hashlib logged a traceback per hash it could not load before kvscope's one line. Then what
scripts/hostile_inputs_sixth_cli.py cannot say: the address space at many limits, the one line when
even formatting it runs out, standard input closed; and in-process checks of its fixes."""

from __future__ import annotations

import argparse
import logging
import os
import resource
import subprocess

import pytest

from cli_helper import cli
from kvscope.app.cli import main as cli_main
from kvscope.app.cli import options
from test_cli_hostile_fifth import KVSCOPE, refused


@pytest.mark.parametrize("argv, flag", [
    (("run", "--accounting", "lesson", "--vllm-version", "0.5", "--requests", "3"), "--vllm-version"),
    (("math", "--accounting", "lesson", "--vllm-version", "0.33"), "--vllm-version"),
    (("math", "--accounting", "lesson", "--max-num-seqs", "4"), "--max-num-seqs"),
    (("run", "--accounting", "lesson", "--enforce-eager", "--requests", "3"), "--enforce-eager"),
])
def test_a_flag_the_lesson_accounting_ignores_is_refused_by_name(capsys, argv, flag):
    rc, _, err = cli(capsys, *argv)
    refused(rc, err, flag, "--accounting vllm")


@pytest.mark.parametrize("argv", [
    ("math", "--accounting", "lesson"),
    ("math", "--accounting", "vllm", "--vllm-version", "0.5"),
    ("run", "--accounting", "lesson", "--max-num-seqs", "4", "--requests", "3", "--quiet"),  # run schedules with it
])
def test_what_the_accounting_reads_is_still_taken(capsys, argv):
    rc, _, err = cli(capsys, *argv)
    assert rc == 0, err


def test_hashlib_failing_to_load_a_hash_logs_nothing(monkeypatch, capsys):
    """hashlib calls logging.exception for each hash it cannot load (which installs a stderr handler
    on the root logger); imported through _import_hashlib_quietly, nothing reaches stderr and the
    root logger is left as it was."""
    def failing_import(name):
        try:
            raise ValueError("unsupported hash type blake2b")
        except ValueError:
            logging.exception("code for hash %s was not found.", "blake2b")

    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])
    monkeypatch.setattr(cli_main.importlib, "import_module", failing_import)
    cli_main._import_hashlib_quietly()
    assert root.handlers == []
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("limit_kib", [103_680, 106_240, 108_800])
def test_an_address_space_where_hashlib_cannot_load_is_one_line_at_most(limit_kib):
    """At ~103 MiB hashlib's extension modules could not be mapped: eight logged tracebacks, then
    kvscope's one line. Near this floor the command either runs or says one line."""
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (limit_kib * 1024, limit_kib * 1024))

    proc = subprocess.run([str(KVSCOPE), "math"], capture_output=True, text=True, timeout=60, preexec_fn=limit)
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) <= 1, proc.stderr[-800:]


def test_demo_mode_takes_the_size_given_with_a_theme(tmp_path):
    """`gui --demo --size 1280x720 --theme light` was fullscreen in high contrast: the flags took
    effect only after leaving demo mode."""
    import os
    import struct

    shot = tmp_path / "demo.png"
    proc = subprocess.run([str(KVSCOPE), "gui", "--backend", "simulated", "--demo", "--size", "1280x720", "--theme",
                           "light", "--quit-after", "2", "--screenshot", str(shot)], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    assert proc.returncode == 0, proc.stderr[-800:]
    width, height = struct.unpack(">II", shot.read_bytes()[16:24])  # the PNG's IHDR
    assert (width, height) == (1280, 720)


def test_a_path_over_255_bytes_is_said_short_once(capsys, tmp_path):
    """The name came back already said short ("... (305 characters)", 90 characters) and was cut
    again: "... (305 characters) (90 characters)"."""
    rc, _, err = cli(capsys, "run", "--trace", str(tmp_path / ("b" * 300)))
    line = refused(rc, err, "File name too long", "characters)")
    assert line.count("characters)") == 1, line

# -- the helper session's checks, sixth pass ------------------------------------------------------------


def under_limit(kib: int, *argv: str) -> subprocess.CompletedProcess:
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (kib * 1024, kib * 1024))

    return subprocess.run([str(KVSCOPE), *argv], capture_output=True, text=True, timeout=60, preexec_fn=limit)


# -- a tiny address space ---------------------------------------------------------------------------


@pytest.mark.parametrize("kib", [92_160, 97_280, 101_376, 104_448, 109_568, 111_616, 114_688, 117_760])
def test_an_address_space_too_small_to_start_in_is_one_line_every_time(kib):
    """100 - 120 MiB: the start-up ran out at a different place each run. Seen: a MemoryError while
    the out-of-memory line itself compiled a regular expression (109,568 KiB, 1 run in 15), a
    SyntaxError or SystemError from CPython's parser, hashlib's page of logged tracebacks, OpenBLAS's
    abort (exit 1) and a segmentation fault (exit 139). Below 120 MiB the start-up is not tried."""
    for command in (["math"], ["--help"], ["presets"]):
        proc = under_limit(kib, *command)
        refused(proc.returncode, proc.stderr, "out of memory", "ulimit -v")


def test_just_above_the_start_up_floor_a_command_runs():
    proc = under_limit(125_000, "math")
    assert proc.returncode == 0 and "KV per token" in proc.stdout, proc.stderr[-500:]


def test_the_out_of_memory_line_is_said_when_even_formatting_it_runs_out(monkeypatch, capsys):
    """Saying the library's message is work too; with none left the line is said without it."""
    class Starving(MemoryError):
        def __str__(self):
            raise MemoryError

    assert cli_main._out_of_memory_at_start(Starving()) == 2
    err = capsys.readouterr().err
    assert err == cli_main.OUT_OF_MEMORY_LINE + "\n"


def test_the_out_of_memory_line_needs_no_regular_expression(monkeypatch, capsys):
    def no_memory(*_args, **_kwargs):
        raise MemoryError

    monkeypatch.setattr(cli_main.re, "sub", no_memory)
    monkeypatch.setattr(cli_main.re, "compile", no_memory)
    assert cli_main._out_of_memory_at_start(MemoryError("\x1b[2J mapped")) == 2
    err = capsys.readouterr().err
    assert "out of memory" in err and "\x1b" not in err and len(err.splitlines()) == 1


# -- flags only vLLM's accounting reads, under --accounting lesson ----------------------------------------


@pytest.mark.parametrize("argv, flag", [
    (["math", "--accounting", "lesson", "--vllm-version", "0.5"], "--vllm-version"),
    (["run", "--quiet", "--requests", "2", "--accounting", "lesson", "--vllm-version", "0.5"], "--vllm-version"),
    (["math", "--accounting", "lesson", "--enforce-eager"], "--enforce-eager"),
    (["math", "--accounting", "lesson", "--max-num-batched-tokens", "4096"], "--max-num-batched-tokens"),
    (["run", "--quiet", "--requests", "2", "--accounting", "lesson", "--no-enforce-eager"], "--enforce-eager"),
    (["math", "--accou", "lesson", "--vllm-v", "0.5"], "--vllm-version"),
])
def test_a_flag_the_lessons_formula_ignores_is_refused(capsys, argv, flag):
    rc, out, err = cli(capsys, *argv)
    refused(rc, err, flag, "--accounting lesson")
    assert out == ""


def test_the_lessons_formula_takes_what_it_reads_and_vllms_takes_all(capsys):
    for argv in (["math", "--accounting", "lesson", "--gpu-memory-utilization", "0.8", "--reserve-bytes", "1e9",
                  "--block-size", "32", "--kv-cache-dtype", "fp8"],
                 ["run", "--quiet", "--requests", "2", "--accounting", "lesson", "--max-num-seqs", "4"],
                 ["math", "--vllm-version", "0.5", "--enforce-eager", "--max-num-seqs", "8"]):
        rc, _, err = cli(capsys, *argv)
        assert rc == 0, (argv, err)


def test_the_flags_typed_are_known_apart_from_their_defaults():
    parser = cli_main.build_parser()
    argv = ["math", "--vllm-version", "0.33", "--acc=lesson", "--no-enforce-eager", "--json"]
    given = cli_main.refuse_repeated_flags(parser, argv, "math")
    assert given == {"vllm_version", "accounting", "enforce_eager", "json"}
    args = argparse.Namespace(accounting="lesson", given_flags=frozenset({"block_size"}))
    options.refuse_what_the_lesson_ignores(args, "math")  # the lesson's pool is made of blocks


# -- outputs ----------------------------------------------------------------------------------------


def test_an_output_ending_in_a_slash_replaces_no_file(capsys, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("kept\n")
    for flag in ("--json", "--record"):
        rc, _, err = cli(capsys, "run", "--quiet", "--requests", "2", flag, f"{notes}/")
        refused(rc, err, "ends in '/'")
    rc, _, err = cli(capsys, "run", "--quiet", "--requests", "2", "--json", f"{tmp_path / 'new.json'}/")
    refused(rc, err, "ends in '/'")
    assert notes.read_text() == "kept\n" and sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_an_output_where_no_file_can_be_made_is_refused_before_the_run(capsys):
    rc, out, err = cli(capsys, "run", "--quiet", "--requests", "2", "--json", "/proc/version")
    refused(rc, err, "no file can be made in /proc")
    assert out == ""  # before the run: its summary was printed, then the write failed


def test_an_output_onto_standard_input_closed_is_refused():
    proc = subprocess.run(f"exec {KVSCOPE} run --quiet --requests 2 --json /dev/stdin <&-", shell=True,
                          capture_output=True, text=True, timeout=60)
    refused(proc.returncode, proc.stderr, "--json /dev/stdin")


# -- numbers and argv -------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["1e-400", "-1e-400", "1_0e-999", "0.0000e-5000001"])
def test_a_number_a_float_rounds_to_zero_is_refused(text):
    if text.startswith("0.0000"):  # zero written with an exponent is still zero
        assert options.number(text) == 0
        return
    with pytest.raises(argparse.ArgumentTypeError, match="too close to 0"):
        options.number(text)


def test_zero_however_written_is_zero():
    for text in ("0", "-0", "0.0", "-0.0", "0e5", "\uff10", "\u0660"):
        assert options.number(text) == 0, text


def test_a_very_long_argv_is_refused_at_once(capsys):
    rc, _, err = cli(capsys, "math", *["--json"] * 20_000)
    refused(rc, err, "20,001 arguments", "at most 1,000")


# -- listings ---------------------------------------------------------------------------------------


def test_models_shows_cache_folders_escaped(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "\x1b[2Jhub"))
    monkeypatch.setenv("KVSCOPE_CACHE_DIR", str(tmp_path / "\x07cache"))
    rc, out, err = cli(capsys, "models")
    assert rc == 0, err
    assert "\x1b" not in out and "\x07" not in out
    assert "\\x1b[2Jhub" in out and "\\x07cache" in out
    assert os.linesep in out  # its lines are kept
