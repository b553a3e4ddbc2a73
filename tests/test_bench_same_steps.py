"""`kvscope bench gui --part cost` compares the window's engine with a headless copy over the
same steps: built from one RunConfig the two take identical steps, and a copy that does not is
refused rather than measured."""

from __future__ import annotations

import dataclasses

import pytest

from kvscope.app.bench.bench_gui import catch_up
from kvscope.app.host.session import RunConfig, build_simulated_engine
from kvscope.app.lab.presets import load_hardware, load_model, load_workload
from kvscope.engine import EngineArgs


def _config(seed: int = 0) -> RunConfig:
    return RunConfig(backend="simulated", model=load_model("llama-3-8b"), hardware=load_hardware("h100-80gb"),
                     engine_args=EngineArgs(), workload=load_workload("chat").with_overrides(num_requests=400),
                     seed=seed)


def test_a_copy_built_from_the_same_config_takes_the_same_steps():
    window_engine, headless = build_simulated_engine(_config()), build_simulated_engine(_config())
    for _ in range(700):
        window_engine.step()
    catch_up(headless, window_engine.snapshot())
    assert headless.step_count == window_engine.step_count == 700
    assert headless.clock == window_engine.clock > 0
    for _ in range(300):  # and again from there, as the benchmark's rounds do
        window_engine.step()
    catch_up(headless, window_engine.snapshot())
    assert headless.clock == window_engine.clock


def test_a_copy_that_takes_other_steps_is_refused():
    window_engine, other = build_simulated_engine(_config()), build_simulated_engine(_config(seed=1))
    for _ in range(500):
        window_engine.step()
    with pytest.raises(RuntimeError, match="diverged"):
        catch_up(other, window_engine.snapshot())


def test_a_copy_whose_workload_ends_first_is_refused():
    short = dataclasses.replace(_config(), workload=load_workload("chat").with_overrides(num_requests=2))
    window_engine, headless = build_simulated_engine(_config()), build_simulated_engine(short)
    for _ in range(3000):
        window_engine.step()
    with pytest.raises(RuntimeError, match="finished its workload"):
        catch_up(headless, window_engine.snapshot())


def test_the_median_round_comes_with_an_interval_that_narrows_with_more_rounds():
    import random
    import statistics

    from kvscope.app.bench.bench_gui import median_interval

    noise = random.Random(3)
    few = [0.05 + noise.gauss(0, 0.15) for _ in range(24)]
    many = [0.05 + noise.gauss(0, 0.15) for _ in range(1000)]
    low, high = median_interval(few, 0.90)
    assert low < statistics.median(few) < high
    assert median_interval(few, 0.90) == (low, high)  # seeded: the same rounds, the same interval
    low_many, high_many = median_interval(many, 0.90)
    assert high_many - low_many < (high - low) / 2  # 40 times the rounds: about a sixth as wide
    assert low_many < 0.05 < high_many
    assert median_interval([0.02] * 10, 0.90) == (0.02, 0.02)
