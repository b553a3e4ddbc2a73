"""The eighth hostile pass's cases (the command line), for scripts/hostile_inputs.py: input paths as
typed (a '/' after a file's name, which Path() dropped, so `export r.kvrec/` read the recording; a
path through a file, said as the OS's "Not a directory"; a loop of links said as "no such file"; a
socket said as "No such device or address"), /dev/fd/N with nothing open as N (for an output, "no
file can be made in /dev/fd"), --device in kvscope's words, --vllm-version older than vLLM's first
release, and --gpu-memory-utilization beside --kv-cache-memory-bytes, which replaces it. Every
case's `expect` is the right behaviour.

Not expressible with Case (tested in tests/test_cli_hostile_eighth.py instead): resolve_device
called as the window calls it, without the command line's check in front of it."""

from __future__ import annotations

import os
import socket
from pathlib import Path

RUN = ["run", "--quiet", "--requests", "2"]
CLOSED_DESCRIPTOR = 977  # the harness's child process inherits no descriptor past 2


def eighth_cli_cases(d: Path, Case, write) -> list:
    t = d / "eighth-cli"
    t.mkdir(parents=True, exist_ok=True)
    from hostile_inputs_fourth_cli import _recording

    recording = t / "r.kvrec"
    _recording(recording)
    files = {
        "recording": recording,
        "notes": write(t / "file.txt", "notes that must survive\n"),
        "trace": write(t / "t.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n0,100,10\n1,200,20\n"),
        "config": write(t / "config.json", '{"num_hidden_layers": 2, "num_attention_heads": 4, '
                        '"num_key_value_heads": 2, "hidden_size": 64, "intermediate_size": 128, "vocab_size": 100}'),
        "workload": write(t / "w.toml", 'name = "w"\nnum_requests = 2\narrival_rate_per_s = 1.0\n'),
    }
    return (_slash_after_a_file_cases(t, files, Case) + _through_a_file_cases(files, Case)
            + _odd_kind_cases(t, files, Case) + _descriptor_cases(files, Case) + _device_cases(Case)
            + _vllm_version_cases(Case) + _utilization_cases(t, Case))


def _slash_after_a_file_cases(t: Path, files: dict, Case) -> list:
    """Path("r.kvrec/") is r.kvrec: the file was read, though the OS refuses the name as typed."""
    out = t / "out.csv"

    def said(name):
        return (f"{files[name]}/", "ends in '/', which names a folder", f"{files[name]} is a file")

    return [
        Case("export r.kvrec/ --csv out.csv", "files", ["export", f"{files['recording']}/", "--csv", str(out)],
             protected=[files["recording"]], must_say=said("recording")),
        Case("gui --replay r.kvrec/", "files", ["gui", "--replay", f"{files['recording']}/", "--quit-after", "0"],
             must_say=said("recording")),
        Case("run --trace t.csv/", "files", RUN + ["--trace", f"{files['trace']}/"], must_say=said("trace")),
        Case("math --config config.json/", "files", ["math", "--config", f"{files['config']}/"],
             must_say=said("config")),
        Case("run --workload w.toml/ (said as a name not ending in .toml)", "files",
             RUN + ["--workload", f"{files['workload']}/"], must_say=said("workload")),
        Case("math --model-path file.txt/", "files", ["math", "--model-path", f"{files['notes']}/"],
             must_say=said("notes")),
        Case("run --json /dev/null/ (a device, not a folder)", "files", RUN + ["--json", "/dev/null/"],
             must_say=("/dev/null is a device",)),
    ]


def _through_a_file_cases(files: dict, Case) -> list:
    """A part before the name is a file: the readers said the OS's "Not a directory"."""
    notes = files["notes"]
    said = (f"{notes} is a file, not a folder",)
    return [
        Case("run --workload file.txt/x.toml", "files", RUN + ["--workload", f"{notes}/x.toml"], protected=[notes],
             must_say=said, must_not_say=("Not a directory",)),
        Case("math --config file.txt/config.json", "files", ["math", "--config", f"{notes}/config.json"],
             must_say=said, must_not_say=("Not a directory",)),
        Case("export file.txt/a/r.kvrec", "files", ["export", f"{notes}/a/r.kvrec"], must_say=said,
             must_not_say=("Not a directory",)),
    ]


def _odd_kind_cases(t: Path, files: dict, Case) -> list:
    """A loop of links was "no such file" to some readers, a socket "No such device or address", '-'
    (standard input to many tools) "no such file"; an output below a loop said the loop was a file."""
    loop = t / "loop1"
    for name, target in (("loop1", "loop2"), ("loop2", "loop1")):
        if not os.path.lexists(t / name):
            os.symlink(t / target, t / name)
    sock = t / "sock"
    if not os.path.lexists(sock):
        with socket.socket(socket.AF_UNIX) as server:
            server.bind(str(sock))
    looped = ("a loop of symbolic links",)
    return [
        Case("run --trace loop (said as no such file)", "files", RUN + ["--trace", str(loop)], must_say=looped,
             must_not_say=("no such file",)),
        Case("gui --replay loop (said as no such file)", "files", ["gui", "--replay", str(loop), "--quit-after", "0"],
             must_say=looped),
        Case("verify --model-path loop (said as no such directory)", "files", ["verify", "--model-path", str(loop)],
             must_say=looped),
        Case("run --json loop/x (said: the loop is a file)", "files", RUN + ["--json", f"{loop}/x"],
             must_say=("symbolic links",), must_not_say=("is a file",)),
        Case("export a socket", "files", ["export", str(sock)], must_say=("is a socket",)),
        Case("math --config a socket", "files", ["math", "--config", str(sock)], must_say=("is a socket",)),
        Case("run --json a socket", "files", RUN + ["--json", str(sock)], must_say=("is a socket",)),
        Case("export r.kvrec --csv a socket", "files", ["export", str(files["recording"]), "--csv", str(sock)],
             must_say=("is a socket",)),
        Case("export - (said as no such file)", "files", ["export", "-"], must_say=("standard input",)),
        Case("run --trace -", "files", RUN + ["--trace", "-"], must_say=("standard input",)),
    ]


def _descriptor_cases(files: dict, Case) -> list:
    """/dev/fd/N with nothing open as N: "no file can be made in /dev/fd", or "no such file"."""
    said = (f"descriptor {CLOSED_DESCRIPTOR} is not open",)
    fd = f"/dev/fd/{CLOSED_DESCRIPTOR}"
    return [
        Case("run --json /dev/fd/N (not open)", "files", RUN + ["--json", fd], must_say=said,
             must_not_say=("no file can be made",)),
        Case("export --perfetto /proc/self/fd/N (not open)", "files",
             ["export", str(files["recording"]), "--perfetto", f"/proc/self/fd/{CLOSED_DESCRIPTOR}"], must_say=said),
        Case("math --config /dev/fd/N (not open)", "files", ["math", "--config", fd], must_say=said),
        Case("run --trace /dev/fd/N (not open)", "files", RUN + ["--trace", fd], must_say=said),
        Case("export /dev/fd/N (not open)", "files", ["export", fd], must_say=said),
    ]


def _device_cases(Case) -> list:
    """torch keeps N of cuda:N in 8 bits and takes cpu:N as the CPU; its own words list 20 device types."""
    return [
        Case("verify --device cpu:3", "flags", ["verify", "--device", "cpu:3"], must_say=("the CPU is one device",)),
        Case("verify --device cuda:01 (torch: Invalid device string)", "flags", ["verify", "--device", "cuda:01"],
             must_say=("numbers a device",)),
        Case("calibrate --device xpu", "flags", ["calibrate", "--device", "xpu"],
             must_say=("runs on cpu or cuda",), must_not_say=("Expected one of",)),
    ]


def _vllm_version_cases(Case) -> list:
    """0.0 is no vLLM release; "v0.10" is how its tags are written, read as 0.10."""
    return [
        Case("math --vllm-version 0.0", "flags", ["math", "--vllm-version", "0.0"], must_say=("from 0.1 to 0.33",)),
        Case("math --vllm-version 0.0.9", "flags", ["math", "--vllm-version", "0.0.9"],
             must_say=("no vLLM release is older than 0.1",)),
        Case("math --vllm-version 0.19.abc", "flags", ["math", "--vllm-version", "0.19.abc"],
             must_say=("must look like 0.19",)),
        Case("math --vllm-version vv0.10", "flags", ["math", "--vllm-version", "vv0.10"],
             must_say=("must look like 0.19",)),
        Case("math --vllm-version v0.10 (a tag's spelling)", "flags", ["math", "--vllm-version", "v0.10"],
             expect="ok", must_say=("vLLM v0.10",)),
        Case("math --vllm-version 0.6.4.post1", "flags", ["math", "--vllm-version", "0.6.4.post1"], expect="ok"),
    ]


def _utilization_cases(t: Path, Case) -> list:
    """A set KV budget replaces memory x utilization: a typed utilization would change nothing."""
    said = ("--gpu-memory-utilization", "--kv-cache-memory-bytes", "give one of them")
    return [
        Case("math --kv-cache-memory-bytes --gpu-memory-utilization", "flags",
             ["math", "--kv-cache-memory-bytes", "1e9", "--gpu-memory-utilization", "0.5"], must_say=said),
        Case("run --kv-cache-memory-bytes --gpu-memory-utilization 0.9 (the default, typed)", "flags",
             RUN + ["--kv-cache-memory-bytes", "1e9", "--gpu-memory-utilization", "0.9", "--json",
                    str(t / "never.json")], must_say=said),
        Case("math --kv-cache-memory-bytes alone", "flags", ["math", "--kv-cache-memory-bytes", "1e9"], expect="ok",
             must_say=("gpu_memory_utilization not applied",)),
    ]
