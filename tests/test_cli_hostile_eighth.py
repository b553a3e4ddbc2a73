"""The command line against bad input, eighth round: input paths as typed (a '/' after a file's name,
which Path() drops, so the file was read; a path through a file, said as the OS's "Not a
directory"; /dev/fd/N with nothing open as N), --device said in kvscope's words by the lab layer
too, --vllm-version older than any vLLM release, and --gpu-memory-utilization beside
--kv-cache-memory-bytes, which replaces it."""

from __future__ import annotations

import os
import sys

import pytest

from cli_helper import cli
from kvscope.app.lab.bounded_reads import read_capped
from kvscope.app.lab.models.loader import resolve_device
from kvscope.engine.config import ConfigError, EngineArgs
from test_cli_hostile_fifth import refused

RUN = ("run", "--quiet", "--requests", "2")
LINUX = pytest.mark.skipif(sys.platform != "linux", reason="paths of Linux")


@pytest.fixture
def inputs(tmp_path, capsys):
    """A recording, a trace, a config.json, a workload and a plain file, each an input some flag reads."""
    recording = tmp_path / "r.kvrec"
    rc, _, err = cli(capsys, *RUN, "--record", recording)
    assert rc == 0, err
    files = {"recording": recording, "notes": tmp_path / "file.txt", "trace": tmp_path / "t.csv",
             "config": tmp_path / "config.json", "workload": tmp_path / "w.toml"}
    files["notes"].write_text("kept\n")
    files["trace"].write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n0,100,10\n1,200,20\n")
    files["config"].write_text('{"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, '
                               '"hidden_size": 64, "intermediate_size": 128, "vocab_size": 100}')
    files["workload"].write_text('name = "w"\nnum_requests = 2\narrival_rate_per_s = 1.0\n')
    return files


def _nothing_new(tmp_path, before):
    assert sorted(p.name for p in tmp_path.iterdir()) == before


# -- 1: a '/' after a file's name -------------------------------------------------------------------


@pytest.mark.parametrize("what, argv", [
    ("recording", ("export", "{}/", "--csv", "{out}")),
    ("recording", ("gui", "--replay", "{}/", "--quit-after", "0")),
    ("trace", (*RUN, "--trace", "{}/", "--json", "{out}")),
    ("config", ("math", "--config", "{}/")),
    ("workload", (*RUN, "--workload", "{}/", "--json", "{out}")),
])
def test_an_input_ending_in_a_slash_after_a_file_is_refused(capsys, tmp_path, inputs, what, argv):
    before = sorted(p.name for p in tmp_path.iterdir())
    given = inputs[what]
    rc, out, err = cli(capsys, *(a.format(given, out=tmp_path / "out") for a in argv))
    refused(rc, err, f"{given}/", "ends in '/', which names a folder", f"{given} is a file")
    assert out == ""
    _nothing_new(tmp_path, before)


def test_the_shared_reader_refuses_a_slash_after_a_file(inputs):
    with pytest.raises(ConfigError, match="ends in '/', which names a folder; .*t.csv is a file"):
        read_capped(f"{inputs['trace']}/", "trace", 1024)  # Path() dropped the '/', and read the file


# -- 2: a file in place of a folder -----------------------------------------------------------------


def test_an_input_through_a_file_names_the_file(capsys, tmp_path, inputs):
    notes = inputs["notes"]
    before = sorted(p.name for p in tmp_path.iterdir())
    for argv in ((*RUN, "--workload", f"{notes}/x.toml"), ("math", "--config", f"{notes}/config.json"),
                 ("export", f"{notes}/a/r.kvrec")):
        rc, out, err = cli(capsys, *argv)
        line = refused(rc, err, f"{notes} is a file, not a folder")
        assert "Not a directory" not in line and out == ""
    with pytest.raises(ConfigError, match="file.txt is a file, not a folder"):
        read_capped(f"{notes}/x.toml", "workload file", 1024)
    _nothing_new(tmp_path, before)
    assert notes.read_text() == "kept\n"


# -- 3: a descriptor that is not open ---------------------------------------------------------------


def _closed_descriptor() -> int:
    for number in range(900, 1000):
        try:
            os.fstat(number)
        except OSError:
            return number
    pytest.skip("no closed descriptor under 1000")


@LINUX
def test_a_descriptor_that_is_not_open_is_said_as_one(capsys, tmp_path, inputs):
    number = _closed_descriptor()
    before = sorted(p.name for p in tmp_path.iterdir())
    for argv in ((*RUN, "--json", f"/dev/fd/{number}"), ("math", "--config", f"/dev/fd/{number}"),
                 ("export", inputs["recording"], "--csv", f"/proc/self/fd/{number}")):
        rc, out, err = cli(capsys, *argv)
        line = refused(rc, err, f"descriptor {number} is not open")
        assert "no file can be made" not in line and out == ""
    _nothing_new(tmp_path, before)


# -- 4: --device in kvscope's words, the window's check included ------------------------------------


@pytest.mark.parametrize("device, said", [
    ("tpu", "runs on cpu or cuda (cuda:N), not tpu"),
    ("cuda:01", "numbers a device"),  # torch: "Invalid device string"
    ("cpu:3", "the CPU is one device"),  # torch took it as the one CPU
])
def test_the_lab_layers_device_check_says_it_in_kvscopes_words(capsys, device, said):
    with pytest.raises(ConfigError) as refusal:  # the window calls this without the CLI's check
        resolve_device(device)
    assert said in str(refusal.value) and "Expected one of" not in str(refusal.value)
    rc, _, err = cli(capsys, "verify", "--device", device)  # the CLI says the same words, named by its flag
    refused(rc, err, f"--device {device!r}", said)


# -- 5: --vllm-version ------------------------------------------------------------------------------


@pytest.mark.parametrize("version, said", [
    ("0.0", "from 0.1 to 0.33"), ("0.0.9", "no vLLM release is older than 0.1"),
    ("vv0.10", "must look like 0.19"), ("0.19.abc", "must look like 0.19"),
])
def test_a_vllm_version_no_release_had_is_refused(capsys, version, said):
    rc, out, err = cli(capsys, "math", "--vllm-version", version)
    refused(rc, err, said)
    assert out == ""


def test_a_vllm_version_as_its_tags_write_it_is_read_as_the_release():
    assert EngineArgs(vllm_version="v0.10").vllm_version == "v0.10"
    from kvscope.engine.config import parse_vllm_version

    assert [parse_vllm_version(v) for v in ("v0.10", "0.6.4.post1", "0.10.1rc1", "0.1")] == [
        (0, 10), (0, 6), (0, 10), (0, 1)]


# -- 6: --gpu-memory-utilization beside --kv-cache-memory-bytes -------------------------------------


def test_utilization_beside_a_set_kv_budget_is_refused_when_typed(capsys, tmp_path):
    out_file = tmp_path / "out.json"
    for argv in (("math",), (*RUN, "--json", out_file)):
        rc, out, err = cli(capsys, *argv, "--kv-cache-memory-bytes", "1e9", "--gpu-memory-utilization", "0.9")
        refused(rc, err, "--gpu-memory-utilization", "--kv-cache-memory-bytes", "give one of them")
        assert out == ""
    assert not out_file.exists()
    rc, out, err = cli(capsys, "math", "--kv-cache-memory-bytes", "1e9")  # its default is no typed value
    assert rc == 0 and "gpu_memory_utilization not applied" in out, err


# -- found by probing: a loop of links, a socket ----------------------------------------------------


@LINUX
def test_a_loop_of_links_is_said_as_one_by_every_reader(capsys, tmp_path):
    os.symlink(tmp_path / "loop2", tmp_path / "loop1")
    os.symlink(tmp_path / "loop1", tmp_path / "loop2")
    loop = tmp_path / "loop1"
    for argv in ((*RUN, "--trace", loop), ("gui", "--replay", loop, "--quit-after", "0"),  # both: "no such file"
                 ("verify", "--model-path", loop)):  # "no such directory"
        refused(*cli(capsys, *argv)[::2], "a loop of symbolic links")
    rc, _, err = cli(capsys, *RUN, "--json", f"{loop}/x")  # "loop1 is a file, not a folder"
    assert "is a file" not in refused(rc, err, "symbolic links")


@LINUX
def test_a_socket_is_said_as_one_not_as_no_such_device(capsys, tmp_path, inputs):
    import socket

    sock = tmp_path / "sock"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(sock))
        for argv in (("export", sock), ("math", "--config", sock), (*RUN, "--json", sock),
                     ("export", inputs["recording"], "--csv", sock)):
            line = refused(*cli(capsys, *argv)[::2], "is a socket")
            assert "No such device" not in line
    with pytest.raises(ConfigError, match="is a socket"):  # the shared reader, as the window's readers call it
        read_capped(sock, "trace", 1024)


def test_a_dash_for_an_input_is_said_as_the_standard_input(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no file named '-' there
    for argv in (("export", "-"), (*RUN, "--trace", "-")):  # "-: no such file"
        refused(*cli(capsys, *argv)[::2], "'-' stands for the standard input")
