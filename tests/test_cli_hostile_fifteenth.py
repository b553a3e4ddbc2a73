"""The command line and attach against bad input, fifteenth round (scripts/hostile_inputs_fifteenth_cli.py):
`bench scenarios --against-vllm` timing its own benchmark with the flag unread, a path typed with a space
around it (an input said "no such file" with the space unseen, an output written under a name ending in a
space), an attach whose publisher sent batches this server could not have sent said as "not a vLLM KV event
publisher", a headless --kv-listen on a port the system picks and never says, verify and calibrate refusing
a preset too big for the machine (or a --scale past its length) only after `loading ...`, size flags said
back as "-1.0", and `bench compare --json` over the scenario file it reads. Each refusal test fails on the
code before its fix; each has a consistent neighbour that is still taken."""

from __future__ import annotations

import argparse
import threading

import msgspec
import pytest

from cli_helper import cli
from test_cli_hostile_fifth import refused

from kvscope.app.cli import options

DEAD = "http://127.0.0.1:1"  # nothing listens: a refusal that names the server came after the flags' checks
EVENTS = ("--kv-events", "tcp://127.0.0.1:5557")


# -- 1. a flag a benchmark does not read -----------------------------------------------------------------------------


@pytest.mark.parametrize("what", ["scenarios", "compare", "calibration", "cuda", "soak", None])
def test_against_vllm_beside_another_benchmark_is_refused(capsys, monkeypatch, what):
    import importlib

    for module, command in (("bench_scenarios", "cmd_bench_scenarios"), ("bench_compare", "cmd_bench_compare"),
                            ("bench_calibration", "cmd_bench_calibration"), ("bench_cuda", "cmd_bench_cuda"),
                            ("bench_soak", "cmd_soak")):  # each would run for minutes, the flag unread
        monkeypatch.setattr(importlib.import_module(f"kvscope.app.bench.{module}"), command, lambda a: 0)
    rc, out, err = cli(capsys, "bench", *([what] if what else []), "--against-vllm")
    refused(rc, err, "--against-vllm goes with `kvscope bench real`, not `kvscope bench")


def test_against_vllm_beside_real_is_taken(capsys, monkeypatch):
    import kvscope.app.bench.bench_vs_vllm as vs_vllm

    reached = []
    monkeypatch.setattr(vs_vllm, "bench_against_vllm", lambda count, device: reached.append(count) or {})
    monkeypatch.setattr(vs_vllm, "print_against_vllm", lambda r: None)
    rc, out, err = cli(capsys, "bench", "real", "--against-vllm", "--requests", "3")
    assert rc == 0 and reached == [3], err


# -- 2. a path typed with a space around it ---------------------------------------------------------------------------


@pytest.fixture
def trace(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,374,44\n"
                    "2023-11-16 18:15:50.53,396,9\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("typed, where", [("{} ", "ends with a space"), (" {}", "begins with a space"),
                                          ("{}\t", "ends with a blank (a tab, a line break)")])
def test_an_input_missing_only_for_a_space_around_it_says_so(capsys, trace, typed, where):
    rc, out, err = cli(capsys, "run", "--quiet", "--trace", typed.format(trace))
    refused(rc, err, f"no such file: the name as typed {where}", f"and {trace} is there; give the name without it")


def test_an_input_missing_otherwise_is_said_as_before_and_the_file_itself_is_read(capsys, trace):
    rc, out, err = cli(capsys, "run", "--quiet", "--trace", f"{trace.parent / 'nope.csv'} ")
    refused(rc, err, "no such file")
    assert "as typed" not in err
    rc, out, err = cli(capsys, "run", "--quiet", "--trace", trace)
    assert rc == 0, err


@pytest.mark.parametrize("name, flag", [("o.csv ", "--json"), (" -", "--json"), ("r.kvrec\t", "--record")])
def test_an_output_named_with_a_space_around_it_is_refused_and_nothing_is_written(capsys, tmp_path, monkeypatch,
                                                                                  name, flag):
    monkeypatch.chdir(tmp_path)
    rc, out, err = cli(capsys, "run", "--quiet", "--requests", "2", flag, name)
    refused(rc, err, f"{flag} '", "with a blank (a space, a tab), which would be written into the file's name")
    assert list(tmp_path.iterdir()) == []


def test_an_output_with_a_space_inside_its_name_is_written(capsys, tmp_path):
    out_file = tmp_path / "my run.json"
    rc, out, err = cli(capsys, "run", "--quiet", "--requests", "2", "--json", out_file)
    assert rc == 0 and out_file.stat().st_size > 0, err


# -- 3. attach: batches read whole, none this server's ----------------------------------------------------------------


def _publish_once(pub, blocks: int, rank: int = 0) -> None:
    def script():
        assert pub.subscribed.wait(10)
        event = {"type": "BlockStored", "block_hashes": list(range(1, blocks + 1)), "parent_block_hash": None,
                 "token_ids": [1] * (32 * blocks), "block_size": 32}
        pub.publish(0, msgspec.msgpack.encode([1.0, [event], rank]))

    threading.Thread(target=script, daemon=True).start()


@pytest.mark.parametrize("blocks, rank, said", [
    (13, 0, "a batch storing 13 blocks, more than the server's pool of 12"),
    (1, 3, "data_parallel_rank 3 is not one of the server's DP engines"),
])
def test_batches_of_another_server_are_not_said_undecodable(capsys, server, publisher, blocks, rank, said):
    http, pub = server(), publisher()  # the server reports 12 blocks, one engine
    _publish_once(pub, blocks, rank)
    rc, out, err = cli(capsys, "attach", http.url, "--kv-events", pub.endpoint, "--duration", "1")
    refused(rc, err, f"1 batch(es) from {pub.endpoint} were read, and none could come from {http.url}", said,
            "it is another server's publisher")
    assert "could not be decoded" not in err and "not a vLLM KV event publisher" not in err


def test_a_batch_this_server_could_send_is_read(capsys, server, publisher):
    http, pub = server(), publisher()
    _publish_once(pub, 12)
    rc, out, err = cli(capsys, "attach", http.url, "--kv-events", pub.endpoint, "--duration", "1")
    assert rc == 0 and "12 blocks stored" in out, err


def test_undecodable_messages_still_say_not_a_publisher_and_name_the_first(capsys, server, publisher):
    http, pub = server(), publisher()

    def script():
        assert pub.subscribed.wait(10)
        pub.publish(0, b"\xc1 not msgpack")

    threading.Thread(target=script, daemon=True).start()
    rc, out, err = cli(capsys, "attach", http.url, "--kv-events", pub.endpoint, "--duration", "1")
    refused(rc, err, "could not be decoded and none could (the first, seq 0: KV event batch",
            "it is not a vLLM KV event publisher")


# -- 4. attach: a headless listen on a port the system picks -----------------------------------------------------------


@pytest.mark.parametrize("endpoint", ["tcp://*:*", "tcp://127.0.0.1:*"])
def test_a_headless_listen_on_any_port_is_refused(capsys, endpoint):
    rc, out, err = cli(capsys, "attach", DEAD, "--kv-listen", endpoint, "--duration", "0.3")
    refused(rc, err, f"--kv-listen {endpoint}: port '*' lets the system pick one", "e.g. tcp://*:5557")


def test_a_listen_on_a_port_and_the_windows_listen_on_any_port_are_taken(capsys, monkeypatch):
    from kvscope.app.cli import attach as attach_command

    rc, out, err = cli(capsys, "attach", DEAD, "--kv-listen", "tcp://127.0.0.1:0", "--duration", "0.3")
    assert "port '*'" not in err  # its own refusal (port 0), not this one
    rc, out, err = cli(capsys, "attach", DEAD, "--kv-listen", "tcp://*:5557", "--duration", "0.3")
    refused(rc, err, "cannot reach http://127.0.0.1:1/version")  # past every flag's check, to the server
    opened = []
    monkeypatch.setattr(attach_command, "run_window", lambda target, args: opened.append(target) or 0)
    rc, out, err = cli(capsys, "attach", DEAD, "--kv-listen", "tcp://*:*", "--quit-after", "1")
    assert rc == 0 and len(opened) == 1, err  # the window shows the port the system gave


# -- 5. the real backend's commands refuse before `loading ...` --------------------------------------------------------


@pytest.mark.parametrize("argv", [("verify", "--model", "llama-3-70b", "--passages", "0"),
                                  ("calibrate", "--model", "llama-3-70b", "--no-save")])
def test_a_preset_too_big_for_the_machine_is_refused_before_loading(capsys, argv):
    rc, out, err = cli(capsys, *argv)
    refused(rc, err, "llama-3-70b needs about 262.8 GiB for its weights as fp32")
    assert "loading" not in err


def test_a_preset_that_fits_passes_the_same_check():
    options.check_real_model("tiny-llama", None, fit_on=None)  # the machine's default device
    options.check_real_model("llama-3-70b", None)  # run checks the edited shape itself, later


def test_a_scale_past_the_models_length_is_refused_before_loading(capsys):
    rc, out, err = cli(capsys, "calibrate", "--model", "tiny-llama", "--scale", "16", "--no-save")
    refused(rc, err, "--scale 16: the longest calibration prompt would be 8,192 tokens", "give at most --scale 7.98")
    assert "loading" not in err


def test_the_largest_scale_it_names_passes_the_check():
    from kvscope.app.cli.calibrate import check_scale_ceiling

    check_scale_ceiling(argparse.Namespace(model="tiny-llama", model_path=None, scale=7.98))


# -- 6. a size said back as typed ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("flag, value, said", [("--reserve-bytes", "-1", "must be 0 or more, got -1"),
                                               ("--weights-bytes", "0", "must be greater than 0, got 0"),
                                               ("--memory-gib", "1e12", "must be at most 1,073,741,824, got 1,000,000,000,000"),
                                               ("--memory-gib", "-0.5", "must be greater than 0, got -0.5")])
def test_a_size_flags_refusal_says_a_whole_number_as_typed(capsys, flag, value, said):
    rc, out, err = cli(capsys, "math", flag, value)
    line = refused(rc, err, f"{flag} {said}")
    assert not line.endswith(".0")


def test_a_size_in_range_is_taken(capsys):
    rc, out, err = cli(capsys, "math", "--reserve-bytes", "1e9")
    assert rc == 0, err


# -- 7. bench compare's output and the scenario it reads -----------------------------------------------------------------


def test_bench_compare_refuses_json_onto_its_scenario_file(capsys, tmp_path, monkeypatch):
    import kvscope.app.bench.bench_compare as bench_compare
    from kvscope.app.lab.presets import preset_file

    scenario = tmp_path / "mine.toml"
    scenario.write_bytes(preset_file("scenarios", "cache-ceiling").read_bytes())
    before = scenario.read_bytes()
    monkeypatch.setattr(bench_compare, "cmd_bench_compare", lambda a: pytest.fail("the benchmark ran"))
    rc, out, err = cli(capsys, "bench", "compare", "--scenario", scenario, "--json", scenario)
    refused(rc, err, f"--json {scenario}: is also the scenario file this command reads")
    assert scenario.read_bytes() == before
    ran = []
    monkeypatch.setattr(bench_compare, "cmd_bench_compare", lambda a: ran.append(a.json) or 0)
    rc, out, err = cli(capsys, "bench", "compare", "--scenario", scenario, "--json", tmp_path / "figures.json")
    assert rc == 0 and ran == [str(tmp_path / "figures.json")], err
