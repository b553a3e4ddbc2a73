"""The calibrated clock: the fit recovers known factors, a stored profile changes the simulated
step time as it says, a damaged profile is one clear error, and `kvscope calibrate` refuses bad flags."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from kvscope.app.lab.calibration import (
    LEGACY_CPU_FLOPS_PER_CORE, calibration_note,
    MeasuredStep, fit_features, fit_steps, held_out_error, make_profile, profile_path, read_profile, save_profile,
    step_features,
)
from kvscope.app.lab.presets import load_hardware, load_model
from kvscope.app.lab.this_machine import cpu_machine_key, cpu_peak_flops, detect_this_machine
from kvscope.engine import Engine, EngineArgs
from kvscope.engine.config import ConfigError
from kvscope.engine.cost_model import UNCALIBRATED, StepCostModel, check_calibration
from kvscope.engine.memory_math import plan_memory
from kvscope.engine.config import resolve_engine_args

from cli_helper import cli

KNOWN = {"flops_efficiency": 0.55, "bandwidth_efficiency": 0.8, "kv_bandwidth_efficiency": 0.4, "overhead_s": 2e-3, "overhead_per_seq_s": 40e-6,
         "overhead_per_token_s": 0.0}


def cost_model_for(hardware, model_name="llama-3-8b"):
    model = load_model(model_name)
    args = EngineArgs(max_model_len=4096)
    plan = plan_memory(model, hardware, resolve_engine_args(args, model, hardware))
    return StepCostModel(model, hardware, plan)


def synthetic_steps(truth: StepCostModel, noise: float = 0.0, seed: int = 0) -> list:
    """Prefills of 16 - 4,096 tokens and decodes of 1 - 256 requests over 100 - 3,000 tokens of KV,
    priced by the cost model with known factors, times optional multiplicative noise."""
    rng = np.random.default_rng(seed)
    steps = []
    for tokens in (16, 64, 256, 512, 1024, 2048, 4096):
        steps.append((tokens, 1, 1, tokens * (tokens + 1) // 2, 0))
    for batch in (1, 2, 4, 8, 16, 32, 64, 128, 256):
        for context in (100, 1000, 3000):
            steps.append((batch, batch, batch, batch * (context + 1), batch * context))
    measured = []
    for tokens, seqs, samples, pairs, kv in steps:
        duration = truth.cost(tokens, samples, pairs, kv, seqs)[0] * (1 + noise * rng.standard_normal())
        measured.append(MeasuredStep(tokens, seqs, samples, pairs, kv, duration))
    return measured


def test_the_fit_recovers_known_factors_from_synthetic_steps():
    h100 = load_hardware("h100-80gb")
    truth = cost_model_for(h100.replace(calibration={"label": "truth", **KNOWN}))
    steps = synthetic_steps(truth)
    fit = fit_steps(steps, cost_model_for(h100.replace(calibration=None)))
    for name, value in KNOWN.items():
        assert fit.calibration_terms[name] == pytest.approx(value, rel=1e-3, abs=1e-9), name
    assert fit.summary()["median_error"] < 1e-6


def test_the_fit_is_robust_to_noise_and_a_burst_of_load():
    h100 = load_hardware("h100-80gb")
    truth = cost_model_for(h100.replace(calibration={"label": "truth", **KNOWN}))
    steps = synthetic_steps(truth, noise=0.03, seed=1)
    steps[5] = MeasuredStep(steps[5].num_tokens, steps[5].num_seqs, steps[5].num_samples, steps[5].attention_pairs,
                     steps[5].kv_read_tokens, steps[5].duration_s * 8)  # another process took the CPU
    features = step_features(steps, cost_model_for(h100.replace(calibration=None)))
    fit = fit_features(features)
    assert fit.summary()["outliers_set_aside"] >= 1 and not fit.kept[5]
    # With noise, terms that grow alike trade places: compute time and the per-token overhead (both
    # scale with a prefill's tokens), the weights' read and the fixed overhead (both once a step). The
    # factors that have a shape of their own come back within 20 %, and the step times much closer.
    assert fit.calibration_terms["flops_efficiency"] == pytest.approx(KNOWN["flops_efficiency"], rel=0.2)
    assert fit.calibration_terms["kv_bandwidth_efficiency"] == pytest.approx(KNOWN["kv_bandwidth_efficiency"], rel=0.2)
    fitted = cost_model_for(h100.replace(calibration={"label": "fit", **fit.calibration_terms}))
    clean = synthetic_steps(truth)
    predicted = [fitted.cost(s.num_tokens, s.num_samples, s.attention_pairs, s.kv_read_tokens, s.num_seqs)[0]
                 for s in clean]
    assert np.median([abs(p - s.duration_s) / s.duration_s for p, s in zip(predicted, clean)]) < 0.03
    assert np.median(fit.errors[fit.kept]) < 0.05
    assert held_out_error(features) < 0.06


def test_too_few_steps_is_one_clear_error():
    h100 = load_hardware("h100-80gb")
    steps = synthetic_steps(cost_model_for(h100))[:3]
    with pytest.raises(ConfigError, match="at least 6 measured steps"):
        fit_steps(steps, cost_model_for(h100))


def test_a_calibration_changes_the_simulated_step_time_as_it_says():
    h100 = load_hardware("h100-80gb").replace(calibration=None)
    datasheet = cost_model_for(h100)
    slower = cost_model_for(h100.replace(calibration={"label": "half the bandwidth", "bandwidth_efficiency": 0.5,
                                                       "overhead_s": 0.0}))
    # a decode of 8 requests on llama-3-8b is memory-bound: twice the time at half the bandwidth
    decode = (8, 8, 8 * 1001, 8 * 1000, 8)
    base = datasheet.cost(*decode)[0] - UNCALIBRATED["overhead_s"]
    assert slower.cost(*decode)[0] == pytest.approx(2 * base, rel=1e-9)
    # the floors the metrics report stay the datasheet's
    assert slower.cost(*decode)[1:] == datasheet.cost(*decode)[1:]


def test_a_stored_profile_is_what_this_machine_simulates_with(tmp_path, monkeypatch):
    monkeypatch.setenv("KVSCOPE_CACHE_DIR", str(tmp_path))
    before = detect_this_machine(use_cuda=False)
    assert before.calibration["label"] == UNCALIBRATED["label"]
    fitted = check_calibration({"label": "kvscope calibrate on test 2025-01-01", "flops_efficiency": 0.25,
                                "bandwidth_efficiency": 0.5, "overhead_s": 0.01, "overhead_per_seq_s": 0.001,
                                "expected_error": 0.08}, "test")
    path = profile_path(cpu_machine_key())
    save_profile(path, make_profile(cpu_machine_key(), "test CPU", fitted, {"steps": 0},
                                    {"peak_flops": before.peak_flops["fp32"]}))  # as `kvscope calibrate` stores it
    after = detect_this_machine(use_cuda=False)
    assert after.calibration == fitted and fitted["kv_bandwidth_efficiency"] == 0.5
    model = load_model("tiny-llama")

    def first_decode_duration(hardware):
        engine = Engine(model, hardware, EngineArgs(max_model_len=512))
        for _ in range(4):
            engine.add_request(list(range(1, 65)), 3)
        engine.step()  # the four prefills
        return engine.step().duration_s  # four decodes

    old, new = first_decode_duration(before), first_decode_duration(after)
    engine = Engine(model, before, EngineArgs(max_model_len=512))
    compute, weights, kv = StepCostModel(model, before, engine.plan).floors(4, 4, 4 * 65, 4 * 64)
    assert old == pytest.approx(max(compute, weights + kv) + UNCALIBRATED["overhead_s"], rel=1e-9)
    # without a kv_bandwidth_efficiency of its own the KV traffic goes at bandwidth_efficiency
    assert new == pytest.approx(max(compute / 0.25, (weights + kv) / 0.5) + 0.01 + 4 * 0.001, rel=1e-9)
    assert "expected error \u00b18 %" in calibration_note(after.calibration)


@pytest.mark.parametrize("content, message", [
    (b"{not json", "not a JSON calibration profile"),
    (b"[]", "not a JSON object"),
    (json.dumps({"format": "other", "version": 1}).encode(), "format is 'other'"),
    (json.dumps({"format": "kvscope-calibration", "version": 1, "calibration": {"label": "x",
                 "flops_efficiency": -1}}).encode(), "calibration.flops_efficiency"),
    (json.dumps({"format": "kvscope-calibration", "version": 1, "calibration": {"label": "x",
                 "warp_factor": 9}}).encode(), "unknown field"),
    (json.dumps({"format": "kvscope-calibration", "version": 1, "calibration": {"flops_efficiency": 0.5}}).encode(),
     "needs a label"),
])
def test_a_damaged_profile_is_one_clear_error_naming_the_file(tmp_path, monkeypatch, capsys, content, message):
    monkeypatch.setenv("KVSCOPE_CACHE_DIR", str(tmp_path))
    path = profile_path(cpu_machine_key())
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    with pytest.raises(ConfigError, match=message) as caught:
        read_profile(path)
    assert str(path) in str(caught.value) and "kvscope calibrate" in str(caught.value)
    with pytest.raises(ConfigError, match=message):
        detect_this_machine(use_cuda=False)
    rc, _, err = cli(capsys, "run", "--hardware", "this-machine", "--model", "tiny-llama", "--requests", "2", "--quiet")
    assert rc == 2 and err.count("\n") == 1 and message in err


def test_a_hardware_preset_calibration_is_checked():
    h100 = load_hardware("h100-80gb")
    with pytest.raises(ConfigError, match="calibration.overhead_s"):
        h100.replace(calibration={"label": "x", "overhead_s": "fast"})
    with pytest.raises(ConfigError, match="unknown field"):
        h100.replace(calibration={"label": "x", "speed": 1})


@pytest.mark.parametrize("flags, message", [
    (["--model", "no-such-model"], "unknown model preset"),
    (["--threads", "0"], "--threads"),
    (["--scale", "-1"], "--scale"),
    (["--device", "tpu"], "device"),
])
def test_calibrate_refuses_bad_flags_in_one_line(capsys, flags, message):
    rc, _, err = cli(capsys, "calibrate", *flags)
    assert rc == 2, err
    assert message in err and "Traceback" not in err


def test_every_simulated_time_is_labelled_with_its_calibration(tmp_path, capsys):
    from types import SimpleNamespace

    from kvscope.app.gui.window_state import WindowState
    from kvscope.app.host.protocol import FrameDelta

    rc, out, _ = cli(capsys, "run", "--hardware", "h100-80gb", "--requests", "3", "--quiet")
    assert rc == 0 and "simulated times" in out and "fitted to published vLLM" in out and "expected error" in out
    report = tmp_path / "run.json"
    rc, _, _ = cli(capsys, "run", "--hardware", "l4-24gb", "--requests", "3", "--quiet", "--json", report)
    reported = json.loads(report.read_text())["calibration"]
    assert rc == 0 and reported["label"] == UNCALIBRATED["label"] and reported["expected_error"] > 0
    engine = Engine(load_model("llama-3-8b"), load_hardware("a100-80gb"), EngineArgs(max_model_len=2048))
    state = WindowState()
    state.take(FrameDelta(engine_info=SimpleNamespace(plan=engine.plan, backend="simulated", label="t",
                                                      hardware=engine.hardware, workload=SimpleNamespace(name="chat"))))
    assert "simulated times: fitted to published vLLM" in state.status_text()
    assert "expected error \u00b115 %" in state.status_text()


def test_a_profile_fitted_against_another_peak_keeps_its_achieved_flops(tmp_path, monkeypatch):
    """A CPU profile stored before this machine's peak was estimated from its vector units (a flat
    50 GFLOP/s a core then) is restated against today's peak: the same achieved FLOP/s."""
    monkeypatch.setenv("KVSCOPE_CACHE_DIR", str(tmp_path))
    peak = detect_this_machine(use_cuda=False).peak_flops["fp32"]
    legacy_peak = LEGACY_CPU_FLOPS_PER_CORE * (os.cpu_count() or 1)
    fitted = check_calibration({"label": "kvscope calibrate on test 2025-01-01", "flops_efficiency": 0.8,
                                "bandwidth_efficiency": 0.5}, "test")
    path = profile_path(cpu_machine_key())
    save_profile(path, make_profile(cpu_machine_key(), "test CPU", fitted, {"steps": 0}, {}))
    legacy = detect_this_machine(use_cuda=False).calibration
    assert legacy["flops_efficiency"] * peak == pytest.approx(0.8 * legacy_peak)
    assert legacy["bandwidth_efficiency"] == 0.5
    save_profile(path, make_profile(cpu_machine_key(), "test CPU", fitted, {"steps": 0}, {"peak_flops": peak}))
    assert detect_this_machine(use_cuda=False).calibration["flops_efficiency"] == pytest.approx(0.8)
    # a fit in bf16 is a share of the bf16 peak, and restated against it
    bf16 = detect_this_machine(use_cuda=False).peak_flops["bf16"]
    save_profile(path, make_profile(cpu_machine_key(), "test CPU", fitted, {"steps": 0},
                                    {"peak_flops": bf16 / 2, "peak_dtype": "bf16"}))
    assert detect_this_machine(use_cuda=False).calibration["flops_efficiency"] == pytest.approx(0.4)
    for odd in ("fast", 1e-320, peak * 1e6, -1):
        save_profile(path, make_profile(cpu_machine_key(), "test CPU", fitted, {"steps": 0}, {"peak_flops": odd}))
        with pytest.raises(ConfigError, match="measured_on.peak_flops") as caught:
            detect_this_machine(use_cuda=False)
        assert str(path) in str(caught.value)
    save_profile(path, make_profile(cpu_machine_key(), "test CPU", fitted, {"steps": 0},
                                    {"peak_flops": peak, "peak_dtype": "fp4"}))
    with pytest.raises(ConfigError, match="measured_on.peak_dtype must be one of"):
        detect_this_machine(use_cuda=False)


def test_this_cpu_peak_is_an_upper_bound_of_what_its_matmuls_reach():
    """The estimate from the vector units and the clock: a real fp32 matmul on one thread never
    beats it (the old flat 50 GFLOP/s a core was half of what this project's CPU reaches)."""
    import time

    import torch

    per_core = cpu_peak_flops(1)["fp32"]
    a, b = torch.randn(512, 512), torch.randn(512, 512)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        best = float("inf")
        for _ in range(20):
            start = time.perf_counter()
            torch.mm(a, b)
            best = min(best, time.perf_counter() - start)
    finally:
        torch.set_num_threads(threads)
    assert 2 * 512**3 / best <= per_core


def test_a_scale_whose_prompts_pass_the_model_length_is_refused_with_the_most_that_fits():
    from kvscope.app.lab.calibration import calibration_phases, check_scale_fits

    check_scale_fits(7.98, 4096, "tiny-llama")  # every prompt runs at its scaled length
    longest = max(len(prompt) for phase in calibration_phases(1000, 4096, scale=7.98) for prompt, _ in phase)
    assert longest == int(512 * 7.98)
    with pytest.raises(ConfigError, match=r"--scale 16: .* 8,192 tokens .* give at most --scale 7.98"):
        check_scale_fits(16, 4096, "tiny-llama")
