"""The command line against bad input, nineteenth round (scripts/hostile_inputs_nineteenth_cli.py): an output
written over an existing file took a new file's permissions and owner (a results file made private, 0600, became
readable by all, 0644); a --record whose writes failed (a full disk, `ulimit -f`) left a new file cut off
mid-record, said only as "cannot write the recording ...: File too large"; standard output cut short by `ulimit -f`
exited 0 (`run --json - > r.json`: half a JSON object), and was told to "free some space"; standard output open for
reading only (`1< notes.txt`) was a traceback after the work; a full standard error (`2>/dev/full`) ended `run` at
its first progress line, its outputs unwritten, and a refusal there exited 1; `--screenshot w.ico` saved the window
shrunk to 256x256 (.xbm, .pbm, .wbmp: one bit a pixel); `bench real --against-vllm --device cuda` imported torch
before refusing (17 s), `--device CPU` was "runs on the CPU, not CPU"; `kvscope --version --self-test` ran no
self-test and exited 0; `--json mine.toml`, `--csv c.xlsx` wrote under another format's name; `run --json - > r.json 2>&1` mixed the
progress line into the JSON. Each test fails on
the code before its fix; each has a consistent neighbour that is still taken."""

from __future__ import annotations

import errno
import os
import stat

import pytest

from cli_helper import cli
from test_cli_hostile_fifth import refused

from kvscope.app.lab.output_path import atomic_output, write_text_atomic

# -- 1. a file written over keeps its permissions --------------------------------------------------------------------


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o444])
def test_a_file_written_over_keeps_its_permissions(tmp_path, mode):
    target = tmp_path / "results.json"
    target.write_text("old")
    target.chmod(mode)
    write_text_atomic("--json", str(target), "{}\n")
    assert target.read_text() == "{}\n" and _mode(target) == mode


def test_a_new_file_takes_the_umask(tmp_path):
    umask = os.umask(0o027)
    try:
        with atomic_output(tmp_path / "new.csv") as partial:
            partial.write_text("a\n")
    finally:
        os.umask(umask)
    assert _mode(tmp_path / "new.csv") == 0o640


def test_a_run_over_a_private_json_keeps_it_private(capsys, tmp_path):
    target = tmp_path / "r.json"
    target.write_text("old")
    target.chmod(0o600)
    rc, _, err = cli(capsys, "run", "--quiet", "--requests", 1, "--json", target)
    assert rc == 0, err
    assert _mode(target) == 0o600 and target.read_text().startswith("{")


# -- 2. a recording whose writes failed says what it left ----------------------------------------------------------


@pytest.fixture
def disk_fills_after(monkeypatch):
    """The recording's writes fail with EFBIG (as under `ulimit -f`) once `limit` bytes are written."""
    from kvscope.app.lab.recording import writer

    def arrange(limit: int):
        original, full = writer._RecordWriter._write, []

        def write(self, data):
            if full or self.offset + len(data) > limit:  # and every write after, as a file at its limit
                full.append(True)
                raise OSError(errno.EFBIG, os.strerror(errno.EFBIG))
            return original(self, data)

        monkeypatch.setattr(writer._RecordWriter, "_write", write)

    return arrange


def test_a_new_recording_with_no_whole_step_is_removed(capsys, tmp_path, disk_fills_after):
    target = tmp_path / "r.kvrec"
    disk_fills_after(4096)
    rc, out, err = cli(capsys, "run", "--quiet", "--requests", 3, "--record", target)
    refused(rc, err, "cannot write the recording", "File too large",
            f"no whole step had been written, so {target} was removed")
    assert not target.exists() and list(tmp_path.iterdir()) == []


def test_an_existing_recording_is_said_as_left_as_it_was(capsys, tmp_path, disk_fills_after):
    target = tmp_path / "r.kvrec"
    target.write_bytes(b"an older recording")
    disk_fills_after(4096)
    rc, _, err = cli(capsys, "run", "--quiet", "--requests", 3, "--record", target)
    refused(rc, err, "File too large", f"{target} was left as it was")
    assert target.read_bytes() == b"an older recording" and list(tmp_path.iterdir()) == [target]


def test_a_recording_cut_off_after_whole_steps_says_how_many_it_keeps(capsys, tmp_path, disk_fills_after,
                                                                     monkeypatch):
    from kvscope.app.lab.recording.reader import steps_held

    from kvscope.app.lab.recording import writer

    target = tmp_path / "r.kvrec"
    monkeypatch.setattr(writer, "CHUNK_STEPS", 64)  # records of 64 steps, not 2,048: a small run keeps some
    disk_fills_after(40 * 1024)
    rc, _, err = cli(capsys, "run", "--quiet", "--requests", 20, "--record", target)
    line = refused(rc, err, "File too large", "cut off without its index", f"`kvscope gui --replay {target}`")
    kept = steps_held(target)
    assert kept > 0 and f"keeps the first {kept:,} steps" in line


def test_a_recording_with_room_is_written(capsys, tmp_path, disk_fills_after):
    target = tmp_path / "r.kvrec"
    disk_fills_after(10 * 2**20)
    rc, out, err = cli(capsys, "run", "--quiet", "--requests", 3, "--record", target)
    assert rc == 0, err
    assert "recording written to" in out and target.stat().st_size > 0


# -- 3. standard output cut short by the file size limit (`ulimit -f`) ---------------------------------------------


def _limited_to(limit: int):
    import resource

    def arrange():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return arrange


def test_json_on_stdout_cut_short_by_the_size_limit_is_an_error_not_exit_0(tmp_path):
    """`run --json - > r.json` under `ulimit -f 1` wrote 1,024 of 1,915 bytes and exited 0: CPython's buffered
    writer returns a short count for a large write the file takes part of, and TextIOWrapper drops the rest."""
    import subprocess
    import sys

    kvscope = [sys.executable, "-m", "kvscope.app"]
    out = tmp_path / "r.json"
    with open(out, "wb") as handle:
        proc = subprocess.run([*kvscope, "math", "--json"], stdout=handle, stderr=subprocess.PIPE,
                              preexec_fn=_limited_to(1024), timeout=60)
    err = proc.stderr.decode()
    refused(proc.returncode, err, "cannot write the output: File too large", "(`ulimit -f`) is reached")
    assert out.stat().st_size == 1024


def test_whole_writes_raise_where_the_file_takes_part():
    """_WholeWrites on a file that takes 100 bytes of a write, then no more (as `ulimit -f` does): an error."""
    import io

    from kvscope.app.cli.streams import _WholeWrites

    class Limited(io.RawIOBase):
        def __init__(self):
            self.kept = b""

        def writable(self):
            return True

        def write(self, data):
            room = 100 - len(self.kept)
            if room <= 0:
                raise OSError(errno.EFBIG, "File too large")
            self.kept += bytes(data[:room])
            return min(room, len(data))

    whole = io.TextIOWrapper(_WholeWrites(Limited()))
    with pytest.raises(OSError, match="File too large"):
        whole.write("x" * 9000)
        whole.flush()


def test_the_advice_follows_the_cause():
    from kvscope.app.cli.main import cannot_write_output

    assert cannot_write_output(OSError(errno.EFBIG, "File too large")).endswith(
        "the file size limit (`ulimit -f`) is reached; raise it, or write elsewhere")
    assert cannot_write_output(OSError(errno.ENOSPC, "No space left on device")).endswith(
        "free some space or write elsewhere")


def test_a_file_written_over_keeps_its_owner_and_group(tmp_path):
    target = tmp_path / "results.json"
    target.write_text("old")
    if os.geteuid() == 0:  # root may give a file away: the owner another's, as a user's file is to root
        os.chown(target, 12345, 23456)
    before = os.stat(target)
    write_text_atomic("--json", str(target), "{}\n")
    after = os.stat(target)
    assert (after.st_uid, after.st_gid) == (before.st_uid, before.st_gid)


# -- 4. a screenshot in a format that does not keep the window as shown ----------------------------------------


@pytest.mark.parametrize("name, said", [("w.ico", "at most 256x256"), ("w.CUR", "at most 256x256"),
                                        ("w.xbm", "one bit a pixel"), ("w.pbm", "one bit a pixel"),
                                        ("w.wbmp", "one bit a pixel")])
def test_a_screenshot_as_an_icon_or_one_bit_image_is_refused(tmp_path, name, said):
    from kvscope.app.cli.gui import check_screenshot_target
    from kvscope.engine.config import ConfigError

    with pytest.raises(ConfigError, match=said) as refusal:
        check_screenshot_target(str(tmp_path / name))
    assert ".png" in str(refusal.value) and ".ico" not in str(refusal.value).split("use ")[1]
    check_screenshot_target(str(tmp_path / "w.png"))  # the neighbours: taken
    check_screenshot_target(str(tmp_path / "w.jpg"))


# -- 5. bench real --against-vllm --device ---------------------------------------------------------------------


def test_against_vllm_on_cuda_is_refused_before_torch_is_imported(capsys, monkeypatch):
    """It imported torch and transformers first: 17 s on a busy machine to say one line."""
    import sys

    for heavy in ("kvscope.app.lab.real_backend", "kvscope.app.lab.verify.baselines"):
        monkeypatch.setitem(sys.modules, heavy, None)  # importing it now raises ImportError
    rc, out, err = cli(capsys, "bench", "real", "--against-vllm", "--device", "cuda")
    refused(rc, err, "--against-vllm compares with vLLM's CPU build: it runs on the CPU, not cuda")


@pytest.mark.parametrize("device", ["CPU", " cpu"])
def test_against_vllm_with_cpu_misspelt_says_cpu(capsys, device):
    rc, out, err = cli(capsys, "bench", "real", "--against-vllm", "--device", device)
    line = refused(rc, err, "did you mean cpu?")
    assert "not CPU\"" not in line and "runs on the CPU, not" not in line


# -- 6. --version followed by what it would not run ------------------------------------------------------------


@pytest.mark.parametrize("rest", [["--self-test"], ["math"], ["run", "--requests", "3"]])
def test_version_with_more_after_it_is_refused(capsys, rest):
    """`kvscope --version --self-test` printed the version and exited 0: no self-test ran, and a script took it
    as passed."""
    rc, out, err = cli(capsys, "--version", *rest)
    refused(rc, err, "--version prints the version and exits", f"`kvscope {' '.join(rest)}` without it")
    assert out == ""
    rc, out, err = cli(capsys, "--version")  # the neighbour: alone, taken
    assert rc == 0 and out.startswith("kvscope ")


# -- 7. standard output open for reading only --------------------------------------------------------------------


def test_stdout_open_for_reading_only_is_said_before_the_work(tmp_path):
    """`kvscope math 1< notes.txt` ran, then failed to print in a traceback (OSError: Bad file descriptor, exit 1)."""
    import subprocess
    import sys

    notes = tmp_path / "notes.txt"
    notes.write_text("keep me\n")
    with open(notes, "rb") as read_only:
        proc = subprocess.run([sys.executable, "-m", "kvscope.app", "math"], stdout=read_only,
                              stderr=subprocess.PIPE, timeout=60)
    refused(proc.returncode, proc.stderr.decode(), "the standard output is open for reading only")
    assert notes.read_text() == "keep me\n"


# -- 8. standard error that cannot be written ---------------------------------------------------------------------


def test_a_full_stderr_does_not_stop_the_run(tmp_path):
    """`kvscope run --json r.json 2>/dev/full` (a log on a full disk): the progress line's failed write ended the
    run with exit 2, its table and r.json unwritten, nothing said; now the messages go nowhere and the work is done."""
    import subprocess
    import sys

    with open(os.devnull, "wb") as null, open("/dev/full", "wb") as full:
        proc = subprocess.run([sys.executable, "-m", "kvscope.app", "run", "--requests", "2", "--json",
                               str(tmp_path / "r.json"), "--record", str(tmp_path / "r.kvrec")],
                              stdout=null, stderr=full, timeout=60)
    assert proc.returncode == 0 and (tmp_path / "r.json").stat().st_size > 0 and (tmp_path / "r.kvrec").exists()


def test_a_refusal_onto_a_full_stderr_still_exits_2(monkeypatch):
    """argparse's refusal that could not be written was a traceback that could not be either: exit 1, not 2."""
    import io
    import sys

    from kvscope.app.cli import streams
    from kvscope.app.cli.main import main

    class Full(io.StringIO):
        def write(self, text):
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(sys, "stderr", Full())
    monkeypatch.setattr(sys, "__stderr__", sys.stderr)  # as the process's own: wrapped by main
    try:
        rc = main(["math", "--bogus"])
    except SystemExit as exc:
        rc = exc.code
    assert rc == 2 and isinstance(sys.stderr, streams.ErrorsMayGoNowhere) and sys.stderr.failed


# -- 9. an output named for a format kvscope does not write ------------------------------------------------------


@pytest.mark.parametrize("flag, name, said", [("--json", "mine.toml", "TOML"), ("--csv", "c.xlsx", "an Excel workbook"),
                                              ("--csv", "c.parquet", "Parquet"), ("--record", "r.yaml", "YAML")])
def test_an_output_named_for_another_format_is_refused(tmp_path, flag, name, said):
    """`run --json mine.toml` in the presets folder wrote JSON there: `kvscope presets` then listed an invalid
    preset ("malformed TOML"); a CSV named .xlsx does not open in Excel."""
    from kvscope.app.lab.output_path import check_output_path
    from kvscope.engine.config import ConfigError

    with pytest.raises(ConfigError, match=f"the name's .* says {said}"):
        check_output_path(flag, str(tmp_path / name))
    check_output_path(flag, str(tmp_path / (name.rsplit(".", 1)[0] + {"--json": ".json", "--csv": ".csv",
                                                                        "--record": ".kvrec"}[flag])))


# -- 10. an output to stdout with standard error sent into it (2>&1) -----------------------------------------------


def test_json_on_stdout_with_stderr_into_it_is_refused(tmp_path):
    """`kvscope run --json - > r.json 2>&1` began with the progress line, not '{': not JSON."""
    import subprocess
    import sys

    out = tmp_path / "r.json"
    command = [sys.executable, "-m", "kvscope.app", "run", "--requests", "2", "--json", "-"]
    with open(out, "wb") as both:
        proc = subprocess.run(command, stdout=both, stderr=both, timeout=60)
    refused(proc.returncode, out.read_text(), "standard error goes to the same file or pipe as standard output",
            "or add --quiet")
    from types import SimpleNamespace

    from kvscope.app.cli.streams import refuse_stderr_into_the_dash_output

    # the neighbours: --quiet writes nothing else there; a file for --json takes none of it
    refuse_stderr_into_the_dash_output(SimpleNamespace(command="run", json="-", quiet=True))
    refuse_stderr_into_the_dash_output(SimpleNamespace(command="run", json=str(out), quiet=False))
