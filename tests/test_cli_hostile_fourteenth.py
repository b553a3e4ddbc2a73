"""The command line and attach against bad input, fourteenth round (scripts/hostile_inputs_fourteenth_cli.py):
vLLM's four-part releases refused, float flags said back rounded (a value in range refused as out of it),
numbers written with a comma or a per-unit told to "give decimal digits", a server's cache_config_info
sizing labels planned from whatever they held, its /version's digits picked out of any dotted part, an
endpoint on its HTTP port followed in silence, `run --trace t.csv --requests 0` said as a file of no
requests, and /metrics counts of 1e300 or 3.5 printed. Each refusal test fails on the code before its fix;
each has a consistent neighbour that is still taken."""

from __future__ import annotations

import pytest

from cli_helper import cli
from test_cli_hostile_fifth import refused

from kvscope.app.lab.presets import load_hardware, load_model
from kvscope.app.lab.vllm.prediction import predict
from kvscope.engine.config import ConfigError, parse_vllm_version

DEAD = "http://127.0.0.1:1"  # nothing listens: a refusal that names the server came after the flags' checks
EVENTS = ("--kv-events", "tcp://127.0.0.1:5557")


# -- 1. vLLM's releases ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version, parsed", [("0.10.1.1", (0, 10)), ("v0.10.1.1", (0, 10)), ("0.8.5.post1", (0, 8)),
                                             ("0.10", (0, 10))])
def test_a_four_part_release_vllm_tagged_is_read(version, parsed):
    assert parse_vllm_version(version) == parsed


def test_a_four_part_release_is_taken_by_math_and_five_parts_are_not(capsys):
    rc, out, err = cli(capsys, "math", "--vllm-version", "0.10.1.1")
    assert rc == 0, err
    assert "(vLLM 0.10.1.1)" in out
    with pytest.raises(ConfigError, match="must look like 0.19"):
        parse_vllm_version("0.10.1.1.1")


# -- 2. a float said back as typed ----------------------------------------------------------------------------------


def test_a_utilization_past_1_by_a_little_is_said_as_typed(capsys):
    rc, out, err = cli(capsys, "math", "--gpu-memory-utilization", "1.0000000001")
    refused(rc, err, "--gpu-memory-utilization 1.0000000001: gpu_memory_utilization must be in (0, 1]")
    rc, out, err = cli(capsys, "math", "--gpu-memory-utilization", "5")
    refused(rc, err, "--gpu-memory-utilization 5: ")  # a short value stays short
    rc, out, err = cli(capsys, "math", "--gpu-memory-utilization", "1")
    assert rc == 0, err


def test_a_duration_just_under_the_least_is_said_as_typed(capsys):
    rc, out, err = cli(capsys, "attach", DEAD, *EVENTS, "--duration", "0.1999999")
    refused(rc, err, "0.1999999 s is too short to hear a KV event", "give at least 0.2 s")


def test_memory_under_a_byte_names_a_least_that_is_taken(capsys):
    rc, out, err = cli(capsys, "math", "--memory-gib", "9.3e-10")
    refused(rc, err, "--memory-gib 9.3e-10 is less than one byte of memory; give at least 9.32e-10 (1 byte)")
    rc, out, err = cli(capsys, "math", "--memory-gib", "9.32e-10")  # the least it names
    assert rc == 0, err


# -- 3. numbers with a comma or a per-unit --------------------------------------------------------------------------


@pytest.mark.parametrize("argv", [("run", "--quiet", "--requests", "1,000"),
                                  ("math", "--gpu-memory-utilization", "0,9"),
                                  ("math", "--memory-bytes", "80,000,000,000")])
def test_a_number_with_a_comma_says_the_comma(capsys, argv):
    rc, out, err = cli(capsys, *argv)
    refused(rc, err, "a comma is read neither as a thousands separator nor as a decimal point", "write 1000")
    assert "decimal digits" not in err


@pytest.mark.parametrize("rate, unit", [("5/s", "/s"), ("5 req/s", "req/s"), ("2rps", "rps")])
def test_a_rate_with_its_unit_says_so(capsys, rate, unit):
    rc, out, err = cli(capsys, "run", "--quiet", "--requests", "2", "--arrival-rate", rate)
    refused(rc, err, f"a number with a unit ({unit}) typed after it")
    assert "decimal digits" not in err


@pytest.mark.parametrize("value", ["1/2", ",9", "1,5e9"])
def test_what_is_neither_is_said_as_before(capsys, value):
    rc, out, err = cli(capsys, "run", "--quiet", "--requests", "2", "--arrival-rate", value)
    refused(rc, err, "give a number in decimal digits")
    assert "unit" not in err and "comma" not in err


def test_grouped_digits_are_still_taken(capsys):
    rc, out, err = cli(capsys, "run", "--quiet", "--workload", "uniform-short", "--requests", "1_0",
                       "--arrival-rate", "5")
    assert rc == 0, err


# -- 4. an attached server's sizing labels --------------------------------------------------------------------------

CAPTURED = {"block_size": "32", "num_gpu_blocks": "16384", "kv_cache_memory_bytes": "1073741824",
            "gpu_memory_utilization": "0.92", "cache_dtype": "auto"}


@pytest.mark.parametrize("label, value, said", [
    ("kv_cache_memory_bytes", "1e300", "which is not a whole number of bytes from 1"),
    ("kv_cache_memory_bytes", "1.5", "which is not a whole number of bytes from 1"),
    ("kv_cache_memory_bytes", "-5", "which is not a whole number of bytes from 1"),
    ("num_gpu_blocks_override", "0", "which is not a whole number of blocks from 1"),
    ("num_gpu_blocks_override", "-3", "which is not a whole number of blocks from 1"),
    ("gpu_memory_utilization", "0", "which is not a share of memory above 0 and at most 1"),
    ("gpu_memory_utilization", "5", "which is not a share of memory above 0 and at most 1"),
])
def test_a_sizing_label_out_of_range_is_said_and_nothing_is_planned_from_it(label, value, said):
    config = {**CAPTURED, label: value}
    for hardware in (None, load_hardware("h100-80gb")):
        blocks, concurrency = predict(config, "0.32.0", load_model("tiny-llama"), hardware)
        assert blocks.predicted is None and concurrency.predicted is None
        assert f"vllm:cache_config_info has {label}={value!r}, {said}" in blocks.note
        assert "sized its cache from GPU memory" not in blocks.note and "forced" not in blocks.note


@pytest.mark.parametrize("changes, said", [
    ({}, "tiny-llama, vLLM 0.32.0 accounting, from kv_cache_memory_bytes"),
    ({"num_gpu_blocks_override": "12"}, "forced: the server runs with num_gpu_blocks_override 12"),
    ({"kv_cache_memory_bytes": "None", "gpu_memory_utilization": "1"}, "from h100-80gb x gpu_memory_utilization 1"),
])
def test_labels_in_range_are_planned_from(changes, said):
    blocks, concurrency = predict({**CAPTURED, **changes}, "0.32.0", load_model("tiny-llama"),
                                  load_hardware("h100-80gb") if "None" in changes.values() else None)
    assert blocks.predicted and said in blocks.note


# -- 5. the release a server's /version names -----------------------------------------------------------------------


@pytest.mark.parametrize("version, said", [
    ("v0.8.5", "vLLM 0.8.5 accounting, from"),  # was release 8.5: 0.33's accounting, "the newest"
    ("0.10.1.1", "vLLM 0.10.1 accounting, from"),
    ("0.x.5", "vLLM 0.33 accounting (the server's version '0.x.5' names no release)"),  # was 0.5, V0's
    ("1.x.33", "names no release"),
    ("0.11.0rc2.dev123+gabc", "vLLM 0.11"),  # neighbours: read as before (0.11, now 0.11.0 as the flag reads it)
    ("0.33.1+cpu", "vLLM 0.33.1 accounting, from"),
    ("99.1", "vLLM 0.33 accounting (the newest kvscope models; the server reports 99.1)"),
])
def test_a_servers_version_is_read_as_the_flag_reads_a_release(version, said):
    assert said in predict(CAPTURED, version, load_model("tiny-llama"))[0].note


# -- 6. an endpoint on the server's HTTP port ------------------------------------------------------------------------


@pytest.mark.parametrize("flags, said", [
    (("http://127.0.0.1:8000", "--kv-events", "tcp://127.0.0.1:8000"),
     "KV event endpoint tcp://127.0.0.1:8000: port 8000 is the server's HTTP port (http://127.0.0.1:8000)"),
    (("127.0.0.1:8000", "--kv-events", "tcp://*:8000"), "port 8000 is the server's HTTP port"),
    (("http://localhost:8000", "--kv-events", "tcp://127.0.0.1:5557", "--replay", "tcp://[::1]:8000"),
     "replay endpoint tcp://[::1]:8000: port 8000 is the server's HTTP port"),
    (("http://127.0.0.1:2", "--kv-events", "tcp://127.0.0.1:1", "--data-parallel-size", "2"),
     "KV event endpoint tcp://127.0.0.1:2 (DP rank 1: the port + 1): port 2 is the server's HTTP port"),
    (("http://127.0.0.1", "--kv-events", "tcp://127.0.0.1:80"), "port 80 is the server's HTTP port"),
])
def test_an_endpoint_on_the_servers_http_port_is_refused_before_anything_is_sent(capsys, flags, said):
    rc, out, err = cli(capsys, "attach", *flags, "--duration", "0.2")
    refused(rc, err, said, "give the server's --kv-events-config")
    assert "cannot reach" not in err


def test_a_live_servers_own_port_was_followed_in_silence(capsys, server):
    http = server()
    rc, out, err = cli(capsys, "attach", http.url, "--kv-events", f"tcp://127.0.0.1:{http.port}", "--duration", "0.3")
    refused(rc, err, f"port {http.port} is the server's HTTP port")
    assert "no KV event" not in err  # before: followed for --duration, then "not the server's publisher"


@pytest.mark.parametrize("flags", [
    ("http://127.0.0.1:3", "--kv-events", "tcp://127.0.0.1:1", "--data-parallel-size", "2"),  # ranks on 1 and 2
    ("http://127.0.0.1:1", "--kv-listen", "tcp://*:1"),  # a bind here: said by the bind, not this check
    ("http://10.0.0.1:1", "--kv-events", "tcp://127.0.0.1:1", "--timeout", "0.05"),  # another host's port 1
])
def test_endpoints_off_the_http_port_reach_the_server(capsys, flags):
    rc, out, err = cli(capsys, "attach", *flags, "--duration", "0.2")
    assert rc == 2 and "is the server's HTTP port" not in err


# -- 7. --requests 0 of a trace, and /metrics counts ----------------------------------------------------------------


@pytest.mark.parametrize("source", [("--trace", "t.csv"), ("--workload", "azure-conv")])
@pytest.mark.parametrize("requests", ["0", "-3"])
def test_no_requests_of_a_trace_names_the_flag_not_the_file(capsys, tmp_path, monkeypatch, source, requests):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,374,44\n"
                                    "2023-11-16 18:15:50.53,396,9\n")
    rc, out, err = cli(capsys, "run", "--quiet", *source, "--requests", requests)
    refused(rc, err, f"--requests {requests}: ", "num_requests must be at least 1")
    assert "no requests in the file" not in err
    rc, out, err = cli(capsys, "run", "--quiet", *source, "--requests", "2")  # its rows: run
    assert rc == 0, err


def _metrics_with(line: bytes, value: bytes):
    from attach_fixtures import PRESSURE_METRICS
    from kvscope.app.lab.vllm.metrics import parse_metrics

    old = line + b" 3.0" if b"preemptions" in line else line + b" 0.0"
    assert old in PRESSURE_METRICS
    return parse_metrics(PRESSURE_METRICS.replace(old, line + b" " + value).decode())


PREEMPTIONS = b'vllm:num_preemptions_total{engine="0",model_name="tiny"}'
RUNNING = b'vllm:num_requests_running{engine="0",model_name="tiny"}'


@pytest.mark.parametrize("line, value", [(PREEMPTIONS, b"1e300"), (PREEMPTIONS, b"3.5"), (RUNNING, b"2.5"),
                                         (PREEMPTIONS, b"9007199254740994")])
def test_a_count_that_is_no_whole_number_or_past_2_to_the_53_is_ignored_and_said(line, value):
    metrics = _metrics_with(line, value)
    figure = "num_preemptions_total" if line == PREEMPTIONS else "num_requests_running"
    assert getattr(metrics.total, figure) is None
    assert any("a whole count from 0 to 2^53" in r for r in metrics.rejected)


@pytest.mark.parametrize("line, value, read", [(PREEMPTIONS, b"3.0", 3), (RUNNING, b"2", 2),
                                               (PREEMPTIONS, b"9007199254740992", 2**53)])
def test_whole_counts_are_read(line, value, read):
    metrics = _metrics_with(line, value)
    figure = "num_preemptions_total" if line == PREEMPTIONS else "num_requests_running"
    assert getattr(metrics.total, figure) == read and not metrics.rejected


TTFT_COUNT = b'vllm:time_to_first_token_seconds_count{engine="0",model_name="tiny"}'
TTFT_BUCKET = b'vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="tiny"}'


@pytest.mark.parametrize("line, old, value", [(TTFT_COUNT, b"4.0", b"1e300"), (TTFT_COUNT, b"4.0", b"4.5"),
                                              (TTFT_BUCKET, b"0.0", b"0.5")])
def test_a_histograms_count_that_is_no_whole_number_is_ignored_and_said(line, old, value):
    from attach_fixtures import PRESSURE_METRICS
    from kvscope.app.lab.vllm.metrics import parse_metrics

    assert line + b" " + old in PRESSURE_METRICS
    metrics = parse_metrics(PRESSURE_METRICS.replace(line + b" " + old, line + b" " + value).decode())
    assert metrics.total.time_to_first_token is None
    assert any("time_to_first_token" in r and "a whole count from 0 to 2^53" in r for r in metrics.rejected)
    captured = parse_metrics(PRESSURE_METRICS.decode()).total.time_to_first_token
    assert captured is not None and captured.count == 4  # the captured histogram: read


def test_a_scale_just_under_the_least_is_said_as_typed(capsys):
    rc, out, err = cli(capsys, "calibrate", "--scale", "0.0624999", "--no-save")
    refused(rc, err, "--scale 0.0624999: the shortest calibration prompt would be 0.9999984 tokens",
            "give at least --scale 0.0625")
    assert "be 1 tokens" not in err


def test_a_share_of_a_cpu_budget_is_said_as_typed(capsys):
    rc, out, err = cli(capsys, "math", "--hardware", "this-machine", "--gpu-memory-utilization", "0.9000001")
    refused(rc, err, "--gpu-memory-utilization 0.9000001: on a CPU target")
