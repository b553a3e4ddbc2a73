"""The command line against bad input, sixth round: a flag only vLLM's accounting reads given with
`--accounting lesson` (taken, and then changing nothing), and a tiny `ulimit -v` at which Python's
own hashlib logged a traceback per hash it could not load before kvscope's one line."""

from __future__ import annotations

import logging
import resource
import subprocess

import pytest

from cli_helper import cli
from kvscope.app.cli import main as cli_main
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
