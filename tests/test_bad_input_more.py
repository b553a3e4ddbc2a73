"""Bad input the third hostile pass found (2026-11-27), one test per fix; tests/test_bad_input.py
holds the earlier passes' and the `refused` shape every refusal is held to."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from cli_helper import cli
from test_bad_input import LLAMA, TRACE_HEADER, refused
from kvscope.app.cli import main as cli_main
from kvscope.app.lab import presets
from kvscope.app.lab.recording import writer as recording_writer
from kvscope.app.lab.recording import RecordingError, RunRecorder
from kvscope.engine import Engine
from kvscope.engine.config import EngineArgs

HUGE = "9" * 5000  # more digits than Python converts (sys.get_int_max_str_digits)
SCENARIO = Path(__file__).resolve().parent.parent / "presets" / "scenarios" / "cache-ceiling.toml"


def test_a_toml_number_past_pythons_digit_limit_is_refused_and_the_listing_survives(tmp_path, monkeypatch, capsys):
    write = tmp_path / "presets" / "models" / "big.toml"
    write.parent.mkdir(parents=True)
    write.write_text(f"num_hidden_layers = {HUGE}\n")
    monkeypatch.setenv("KVSCOPE_CONFIG_DIR", str(tmp_path))
    refused(*cli(capsys, "math", "--model", "big")[::2], "more than 4,300 digits")
    rc, out, err = cli(capsys, "presets")
    assert rc == 0 and "Traceback" not in err
    scenario = tmp_path / "s.toml"
    scenario.write_text(SCENARIO.read_text().replace("order = 1", f"order = {HUGE}"))
    refused(*cli(capsys, "compare", "--scenario", scenario)[::2], "more than 4,300 digits")


def test_a_calibration_profile_with_a_huge_number_is_refused_with_the_hint(tmp_path):
    from kvscope.app.lab.calibration import read_profile

    path = tmp_path / "p.json"
    path.write_text(f'{{"format": {HUGE}}}')
    with pytest.raises(Exception) as caught:
        read_profile(path)
    assert "more than 4,300 digits" in str(caught.value) and "kvscope calibrate" in str(caught.value)


@pytest.mark.parametrize("cache", ["file", "/dev/null", "/proc/no-such-kvscope"])
def test_a_cache_folder_kvscope_cannot_make_is_named(tmp_path, monkeypatch, cache):
    from kvscope.app.lab.verify.tiny_model import make_cache_folder
    from kvscope.engine.config import ConfigError

    if cache == "file":
        cache = str(tmp_path / "afile")
        Path(cache).write_text("x")
    monkeypatch.setenv("KVSCOPE_CACHE_DIR", cache)
    with pytest.raises(ConfigError, match=r"KVSCOPE_CACHE_DIR=.* must be a folder kvscope can write"):
        make_cache_folder(Path(cache) / "models")


def test_a_scenario_config_names_its_own_bad_field_and_keeps_labels_on_one_line(tmp_path, capsys):
    text = SCENARIO.read_text()
    bad_output = tmp_path / "out.toml"
    bad_output.write_text(text.replace("engine = { max_num_seqs = 64 }", "engine = { max_num_seqs = 64 }\noutput_tokens = -1"))
    last = refused(*cli(capsys, "compare", "--scenario", bad_output)[::2], "(max_num_seqs 64).output_tokens: must be")
    assert "quantization" not in last and last.count("scenario file") == 1
    newline = tmp_path / "nl.toml"
    newline.write_text(text.replace('"max_num_seqs 64"', '"a\\nb"'))
    refused(*cli(capsys, "compare", "--scenario", newline)[::2], "configs[1].label: must be one line")


@pytest.mark.parametrize("argv", [
    ["run", "--quiet", "--requests", "2", "--record", "-"],
    ["gui", "--screenshot", "-", "--quit-after", "1"],
    ["attach", "http://127.0.0.1:1", "--kv-events", "tcp://127.0.0.1:5557", "--duration", "1", "--record", "-"],
])
def test_dash_is_not_a_file_for_a_recording_or_a_screenshot(tmp_path, monkeypatch, capsys, argv):
    monkeypatch.chdir(tmp_path)
    refused(*cli(capsys, *argv)[::2], "-: a ", "is written to a file, not to stdout")
    assert not (tmp_path / "-").exists()


def test_a_rate_or_length_given_beside_a_trace_is_refused_not_dropped(tmp_path, capsys):
    trace = tmp_path / "t.csv"
    trace.write_text(TRACE_HEADER + "0,100,10\n1,100,10\n")
    refused(*cli(capsys, "run", "--quiet", "--trace", trace, "--workload", "agent")[::2], "give one")
    refused(*cli(capsys, "run", "--quiet", "--trace", trace, "--arrival-rate", "5")[::2], "--arrival-rate would be ignored")
    refused(*cli(capsys, "run", "--quiet", "--workload", "azure-conv", "--arrival-rate", "5")[::2], "would be ignored")
    workload = tmp_path / "w.toml"
    workload.write_text('name = "w"\ntrace = "t.csv"\nprompt_tokens = 100\n')
    refused(*cli(capsys, "run", "--quiet", "--workload", workload)[::2], "prompt_tokens would be ignored")
    scenario = tmp_path / "s.toml"
    scenario.write_text(SCENARIO.read_text().replace('name = "4K-token users"\nprompt_tokens = 4000\noutput_tokens = 96',
                                                     'preset = "azure-conv"\narrival_rate_per_s = 3'))
    refused(*cli(capsys, "compare", "--scenario", scenario)[::2], "arrival_rate_per_s would be ignored")
    rc, _, err = cli(capsys, "run", "--quiet", "--trace", trace)
    assert rc == 0, err


@pytest.mark.parametrize("argv, said", [
    (["run", "--quiet", "--model", "llama-3-8b", "--model", "tiny-llama"], "--model llama-3-8b, then --model tiny-llama"),
    (["run", "--quiet", "--req", "2", "--requests=3"], "given twice (--requests 2, then --requests 3)"),
    (["math", "--enable-prefix-caching", "--no-enable-prefix-caching"], "contradicts --enable-prefix-caching"),
    (["compare", "--scenario", "cache-ceiling", "--scenario", "benchmark-trap"], "given twice"),
])
def test_a_flag_given_twice_with_different_values_is_refused(capsys, argv, said):
    refused(*cli(capsys, *argv)[::2], said)


def test_a_flag_given_twice_with_the_same_value_passes(capsys):
    rc, _, err = cli(capsys, "math", "--block-size", "16", "--block-size", "16", "--json", "--json")
    assert rc == 0, err


@pytest.mark.parametrize("changes, said", [
    ({"head_dim": 0}, "head_dim must be greater than 0"),
    ({"quantization_config": {"quant_method": "compressed-tensors",
                              "config_groups": {"g": {"weights": {"num_bits": 2, "type": "int"}}}}}, "2 bits"),
])
def test_config_json_values_that_would_be_sized_wrong_are_refused(tmp_path, capsys, changes, said):
    (tmp_path / "config.json").write_text(json.dumps({**LLAMA, **changes}))
    refused(*cli(capsys, "math", "--config", tmp_path)[::2], said)


def test_standard_output_on_a_full_disk_is_one_line(monkeypatch, capsys):
    def full(args):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(cli_main, "refuse_blank_values", full)
    refused(*cli(capsys, "presets")[::2], "cannot write the output: No space left on device")


def test_a_recorder_whose_header_fails_leaves_no_partial_beside_an_existing_file(tmp_path, monkeypatch):
    from kvscope.app.lab.presets import load_hardware, load_model

    existing = tmp_path / "run.kvrec"
    existing.write_bytes(b"old recording")
    engine = Engine(load_model("tiny-llama"), load_hardware("h100-80gb"), EngineArgs(kv_cache_memory_bytes=4 * 1024**2))
    original = recording_writer._RecordWriter.append

    def append(self, *args, **kwargs):  # the disk is full: the writer's thread failure surfaces at the 2nd record
        if self.offset or self._queue.qsize() or getattr(self, "_tried", False):
            raise RecordingError(f"cannot write the recording {self.path}: No space left on device")
        self._tried = True
        original(self, *args, **kwargs)

    monkeypatch.setattr(recording_writer._RecordWriter, "append", append)
    with pytest.raises(RecordingError, match="No space left"):
        RunRecorder(engine, existing, {"label": "x"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.kvrec"]
    assert existing.read_bytes() == b"old recording"


def test_a_config_dir_that_is_a_file_is_refused(tmp_path, monkeypatch, capsys):
    file = tmp_path / "afile"
    file.write_text("x")
    monkeypatch.setenv("KVSCOPE_CONFIG_DIR", str(file))
    refused(*cli(capsys, "presets")[::2], "KVSCOPE_CONFIG_DIR=", "not a folder")
    monkeypatch.setenv("KVSCOPE_CONFIG_DIR", str(tmp_path / "missing"))  # not made yet: no user presets
    assert presets.user_preset_names("models") == []


def test_bench_checks_its_json_output_before_measuring(tmp_path, capsys):
    refused(*cli(capsys, "bench", "scheduler", "--json", tmp_path)[::2], "--json", "is a folder")


@pytest.mark.parametrize("text, said", [
    (TRACE_HEADER + "0,1,500,10\n", "4 cells where the header names 3"),  # 1,500 split into two cells
    ("TIMESTAMP,ContextTokens,GeneratedTokens,timestamp\n0,100,10,5\n", "2 arrival columns"),
])
def test_a_trace_row_or_header_that_would_be_misread_is_refused(tmp_path, capsys, text, said):
    trace = tmp_path / "t.csv"
    trace.write_text(text)
    refused(*cli(capsys, "run", "--quiet", "--trace", trace)[::2], said)


@pytest.mark.parametrize("argv, said", [
    (["--model", "tiny-llama"], "both name the model; give one"),
    (["--backend", "simulated"], "--model-path loads real weights"),
    (["--hardware", "h100-80gb"], "selects the simulated one"),
])
def test_gui_model_path_beside_a_flag_it_would_silence_is_refused(tmp_path, capsys, argv, said):
    (tmp_path / "config.json").write_text(json.dumps(LLAMA))
    refused(*cli(capsys, "gui", "--model-path", tmp_path, *argv, "--quit-after", "0")[::2], said)


def test_gui_real_backend_with_a_gpu_preset_is_refused(capsys):
    refused(*cli(capsys, "gui", "--backend", "real", "--hardware", "h100-80gb", "--quit-after", "0")[::2],
            "describes a simulated target")


def test_a_metrics_exposition_with_hostile_engine_labels_is_read_or_refused_in_one_line():
    from kvscope.app.lab.vllm.metrics import MetricsError, parse_metrics

    base = 'vllm:num_requests_running{engine="0",model_name="m"} 1\n'
    metrics = parse_metrics(base + f'vllm:num_requests_running{{engine="{HUGE}",model_name="m"}} 1\n')
    assert list(metrics.engines)[0] == "0" and len(metrics.engines) == 2  # a 5,000-digit label sorts, last
    many = "".join(f'vllm:num_requests_running{{engine="{i}",model_name="m"}} 1\n' for i in range(1100))
    with pytest.raises(MetricsError, match="names 1,100 engines; a vLLM server has at most 1,024"):
        parse_metrics(many)


@pytest.mark.parametrize("body", ['{"version": ' + "[" * 50_000 + "]" * 50_000 + "}", '{"version": [1, 2]}'])
def test_a_version_answer_nested_deep_or_not_text_is_refused(monkeypatch, body):
    from kvscope.app.lab.vllm import metrics

    monkeypatch.setattr(metrics, "fetch_text", lambda url, timeout_s=None: body)
    with pytest.raises(metrics.MetricsError, match=r'did not answer \{"version": ...\}'):
        metrics.fetch_version("http://127.0.0.1:1")


def test_a_chat_workload_refuses_the_lengths_its_text_sets(tmp_path, capsys):
    chat = (Path(__file__).resolve().parent.parent / "presets" / "workloads" / "chat-text.toml").read_text()
    workload = tmp_path / "chat.toml"
    workload.write_text(chat.replace("output_tokens = 192", "output_tokens = 192\nprompt_tokens = 5000"))
    refused(*cli(capsys, "run", "--quiet", "--workload", workload)[::2], "sends chat text", "prompt_tokens would be")


def test_compare_refuses_an_output_onto_a_preset_its_scenario_reads(capsys):
    root = Path(__file__).resolve().parent.parent / "presets"
    model = root / "models" / "llama-2-7b.toml"
    before = model.read_bytes()
    refused(*cli(capsys, "compare", "--quiet", "--scenario", "cache-ceiling", "--csv", model)[::2],
            "is also the model preset llama-2-7b")
    refused(*cli(capsys, "compare", "--quiet", "--scenario", "fp8-kv-real", "--json",
                 root / "traces" / "azure_conv.csv")[::2], "is also the trace")
    assert model.read_bytes() == before
