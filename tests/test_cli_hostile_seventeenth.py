"""The command line and attach against bad input, seventeenth round (scripts/hostile_inputs_seventeenth_cli.py):
`bench calibration --requests 2048` run as 256 without a word, `verify --quantization int8` loading its model twice
and `verify --max-tokens` past the model's context refused after `loading ...`,
`calibrate --clock cpu` on a GPU refused as too many CPU threads, `--requests` past a trace told to "leave --requests
out to replay them all" where a scenario (or a workload file) runs its own count, and attach's prediction: its window
said in whole seconds ("over the last 0 s"), a multi-GPU preset planned on one GPU (0 blocks, error -100 %), a model
that leaves no room said as a prediction of 0 blocks, a CPU preset's set budget said as "x gpu_memory_utilization".
Each refusal test fails on the code before its fix; each has a consistent neighbour that is still taken."""

from __future__ import annotations

import argparse
from types import SimpleNamespace

import pytest

from cli_helper import cli
from test_cli_hostile_fifth import refused

from kvscope.app.cli import calibrate, options
from kvscope.app.lab.presets import load_hardware, load_model
from kvscope.app.lab.vllm.prediction import LatencyModel, ObservedLoad, predict

# -- 1. bench calibration's --requests: at most the 256 it holds out -----------------------------------------------


@pytest.fixture
def benched(monkeypatch):
    """The calibration benchmark's requests as the command would run them (the benchmark itself not run)."""
    from kvscope.app.bench import bench_calibration

    ran = []
    monkeypatch.setattr(bench_calibration, "cmd_bench_calibration", lambda a: ran.append(a.requests) or 0)
    return ran


@pytest.mark.parametrize("requests, taken", [("257", False), ("2048", False), ("256", True), ("1", True)])
def test_bench_calibration_requests_past_its_256_are_refused(capsys, benched, requests, taken):
    rc, out, err = cli(capsys, "bench", "calibration", "--requests", requests)
    if taken:
        assert rc == 0 and benched == [int(requests)], err
    else:
        refused(rc, err, f"--requests {int(requests):,}: `kvscope bench calibration` holds out at most 256")
        assert benched == []


# -- 2. verify loads each quantised model once ---------------------------------------------------------------------


@pytest.fixture
def loads(monkeypatch):
    """The models verify loads, by quantisation (nothing loaded, nothing run)."""
    from kvscope.app.lab import real_backend
    from kvscope.app.lab.verify import parity

    loaded = []

    def load(model, model_path, device, dtype, quantization):
        loaded.append(quantization)
        return SimpleNamespace(label=f"fake {quantization}", tokenizer=None,
                               config=SimpleNamespace(max_position_embeddings=2048, name="tiny-llama"))

    result = SimpleNamespace(to_dict=dict, kv_cache_dtype="fp32", weights="int8", exact=True)
    monkeypatch.setattr(real_backend, "load_for_real_backend", load)
    monkeypatch.setattr(parity, "run_parity", lambda *a, **k: result)
    return loaded


@pytest.mark.parametrize("quantization, expected", [("int8", ["int8"]), ("nf4", ["nf4"]),
                                                    ("all", [None, "int8", "nf4"])])
def test_verify_loads_each_model_once(capsys, loads, quantization, expected):
    rc, out, err = cli(capsys, "verify", "--model", "tiny-llama", "--device", "cpu", "--quantization", quantization,
                       "--kv-cache-dtype", "fp32", "--prompts", "1", "--max-tokens", "1", "--passages", "0",
                       "--json", "-")
    assert rc == 0, err
    assert loads == expected
    assert err.count("kvscope: loading") == len(expected)
    assert "1 prompt through" in err and "1 prompts" not in err


@pytest.mark.parametrize("quantization", ["none", "int8"])
def test_verify_says_a_context_too_short_before_loading(capsys, loads, quantization):
    argv = ("verify", "--model", "tiny-llama", "--device", "cpu", "--quantization", quantization, "--kv-cache-dtype",
            "fp32", "--prompts", "1", "--passages", "0", "--json", "-")
    rc, out, err = cli(capsys, *argv, "--max-tokens", "4096")
    refused(rc, err, "--max-tokens 4096: a prompt of up to 220 tokens and its answer must fit the model's 4,096-token "
                     "context; give at most 3,876")
    assert loads == [] and "loading" not in err
    rc, out, err = cli(capsys, *argv, "--max-tokens", "3876")  # the most that fits: loaded and run
    assert rc == 0 and loads == [None if quantization == "none" else quantization], err


# -- 3. calibrate --clock cpu on a GPU: the device named, not the threads ----------------------------------------------


def test_a_cpu_clock_on_a_gpu_is_refused_as_such(capsys, monkeypatch):
    import torch

    from kvscope.app.lab.models import loader

    monkeypatch.setattr(options, "check_real_device", lambda device: None)
    monkeypatch.setattr(options, "check_real_model", lambda *a, **k: None)
    monkeypatch.setattr(loader, "resolve_device", lambda requested, label="device": torch.device("cuda"))
    rc, out, err = cli(capsys, "calibrate", "--model", "tiny-llama", "--device", "cuda", "--clock", "cpu", "--no-save")
    refused(rc, err, "--clock cpu: it times this process's CPU seconds, and on cuda the steps run on the device")
    assert "threads" not in err


@pytest.mark.parametrize("clock, threads, device", [("cpu", 1, "cpu"), ("wall", None, "cuda"), ("wall", 2, "cpu")])
def test_a_cpu_clock_on_one_cpu_thread_and_a_wall_clock_anywhere_are_taken(clock, threads, device):
    calibrate.check_cpu_clock_threads(argparse.Namespace(clock=clock, threads=threads), device)


# -- 4. --requests past a trace: what leaving it out runs --------------------------------------------------------------


def test_requests_past_a_scenarios_trace_name_the_scenarios_own_count(capsys):
    rc, out, err = cli(capsys, "compare", "--scenario", "static-vs-continuous", "--requests", "100000", "--quiet")
    refused(rc, err, "give at most 19,366, or leave --requests out for scenario static-vs-continuous's 96 requests")
    assert "replay them all" not in err


def test_requests_past_a_workload_files_trace_name_its_count_and_a_bare_trace_replays_all(capsys, tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,100,20\n"
                     "2023-11-16 18:15:47.68,200,30\n")
    workload = tmp_path / "w.toml"
    workload.write_text('name = "w"\ntrace = "t.csv"\nnum_requests = 1\n')
    rc, out, err = cli(capsys, "run", "--quiet", "--workload", workload, "--requests", "5")
    refused(rc, err, "give at most 2, or leave --requests out for workload w's 1 request")
    rc, out, err = cli(capsys, "run", "--quiet", "--trace", trace, "--requests", "5")
    refused(rc, err, "give at most 2, or leave --requests out to replay them all")


# -- 5. attach's prediction -----------------------------------------------------------------------------------------

CACHE = {"block_size": "16", "num_gpu_blocks": "512"}


def _load(seconds: float) -> ObservedLoad:
    return ObservedLoad(seconds, 1, 2.0, 3441.0, 0.0, 100.0, 0.0, 0.0, None, 0.02, None)


@pytest.mark.parametrize("seconds, said", [(0.3, "over the last 300.0 ms"), (30.0, "over the last 30.00 s")])
def test_the_latency_window_is_said_as_time(seconds, said):
    server = SimpleNamespace(cache_config=CACHE, version="0.33.0")
    model = LatencyModel.for_server(server, load_model("llama-3-8b"), load_hardware("h100-80gb"))
    for row in model.predict(_load(seconds)):
        assert said in row.note and "last 0 s" not in row.note


def test_a_multi_gpu_preset_is_planned_over_its_devices_as_math_plans_it(capsys):
    blocks, _ = predict(CACHE, "0.33.0", load_model("llama-3-70b"), load_hardware("8x-h100-80gb"))
    rc, out, err = cli(capsys, "math", "--model", "llama-3-70b", "--hardware", "8x-h100-80gb", "--json")
    import json

    assert blocks.predicted == json.loads(out)["num_blocks"] > 0
    assert "8x-h100-80gb (tensor parallel 8) x gpu_memory_utilization 0.92" in blocks.note


def test_a_model_that_leaves_no_room_is_no_prediction_of_zero_blocks():
    blocks, concurrency = predict(CACHE, "0.33.0", load_model("llama-3-70b"), load_hardware("h100-80gb"))
    assert blocks.predicted is None and blocks.error is None and concurrency.predicted is None
    assert "llama-3-70b leaves no room for a KV cache from h100-80gb" in blocks.note
    fits, _ = predict(CACHE, "0.33.0", load_model("llama-3-8b"), load_hardware("h100-80gb"))
    assert fits.predicted == 28_087 and "from h100-80gb x gpu_memory_utilization 0.92" in fits.note  # 0.33.0's default


def test_a_cpu_presets_pool_is_said_as_its_set_budget():
    blocks, _ = predict(CACHE, "0.33.0", load_model("llama-3-8b"), load_hardware("this-machine"))
    assert "this-machine's KV budget" in blocks.note and "gpu_memory_utilization" not in blocks.note


# -- 6. the attached window: an attach that never happened ----------------------------------------------------------


def test_recording_an_attach_that_was_refused_keeps_the_refusal(tmp_path):
    from kvscope.app.host.attach_session import AttachSession
    from kvscope.app.host.protocol import APPLY, RECORD
    from kvscope.app.lab.vllm.attachment import AttachTarget

    session = AttachSession()  # as `attach --record` starts it: the attach, then the recording, in one frame
    session.handle(APPLY, (AttachTarget("http://127.0.0.1:1", kv_events="tcp://127.0.0.1:2"), False))
    session.handle(RECORD, str(tmp_path / "r.kvrec"))
    frame = session.take_frame()
    assert "cannot reach http://127.0.0.1:1" in frame.error and frame.status == "not attached"
    idle = AttachSession()  # no attach asked for: Record still says why there is nothing to record
    idle.handle(RECORD, str(tmp_path / "r.kvrec"))
    assert idle.take_frame().error == "Nothing to record: not attached to a server."
    assert not (tmp_path / "r.kvrec").exists()


# -- 7. the real backend's default CPU budget, before `loading ...` ---------------------------------------------------


def test_a_block_past_the_default_cpu_budget_is_refused_before_loading(capsys):
    rc, out, err = cli(capsys, "run", "--quiet", "--backend", "real", "--model", "tiny-llama", "--device", "cpu",
                       "--requests", "1", "--block-size", "1048576")
    refused(rc, err, "no room for a KV cache: the budget kv_cache_memory_bytes (1.00 GiB (1.1 GB)) is smaller than one "
                     "block of tiny-llama")
    assert "loading" not in err


@pytest.mark.parametrize("block_size", [16, 65536])
def test_blocks_within_the_default_cpu_budget_are_left_to_load(block_size):
    from kvscope.app.cli import combinations
    from kvscope.engine.config import EngineArgs

    args = argparse.Namespace(kv_cache_memory_bytes=None, quantization=None, dtype=None)
    engine_args = EngineArgs(block_size=block_size, max_model_len=256)
    assert combinations.refuse_cpu_budget_without_room(args, load_model("tiny-llama"), engine_args) is None


def test_weights_past_this_machine_come_before_the_budgets_room(capsys, monkeypatch):
    """llama-3-70b's random fp32 weights (262 GiB) were said as 'max_model_len 8,192 tokens needs 512
    blocks but the pool holds 102' once the default budget was checked before loading: the weights are
    the first reason (the tenth pass's case)."""
    from kvscope.app.lab.models import loader

    monkeypatch.setattr(loader, "_available_bytes", lambda device: 64 * 2**30)
    rc, out, err = cli(capsys, "run", "--quiet", "--backend", "real", "--model", "llama-3-70b", "--device", "cpu",
                       "--requests", "1")
    refused(rc, err, "for its weights as fp32")
    assert "max_model_len" not in err and "loading" not in err


def test_a_server_that_gives_no_share_is_planned_at_its_releases_default():
    """A cache_config_info without gpu_memory_utilization: vLLM 0.19 took 0.9, 0.21 on take 0.92."""
    older, _ = predict(CACHE, "0.19.1", load_model("llama-3-8b"), load_hardware("h100-80gb"))
    newer, _ = predict(CACHE, "0.33.0", load_model("llama-3-8b"), load_hardware("h100-80gb"))
    assert "x gpu_memory_utilization 0.9 " in older.note + " " and "x gpu_memory_utilization 0.92" in newer.note
    assert older.predicted < newer.predicted
