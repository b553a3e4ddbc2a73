"""The eleventh hostile pass over the files kvscope reads: files well-formed but contradicting
themselves (a model preset's latent-attention fields without the latent, a workload's constant
length outside its own bounds, a calibration profile of another machine, a recording whose later
chunk starts again below the one before). Each refusal test failed before its fix; the consistent
neighbours beside them pass. scripts/hostile_inputs_eleventh_files.py runs them through the command line."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kvscope.app.lab.recording import Recording
from kvscope.app.lab.recording.format import STEPS, RecordingError
from kvscope.app.lab.workload import WorkloadSpec, dist_from_dict, workload_from_dict
from kvscope.engine.config import ConfigError, HardwareSpec, ModelConfig
from small_recording import forged_record

LLAMA = dict(name="m", num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=2, head_dim=64,
             hidden_size=512, intermediate_size=1024, vocab_size=1000, max_position_embeddings=4096)


# -- model and hardware --------------------------------------------------------------------------------------

@pytest.mark.parametrize("changes, said", [
    ({"v_head_dim": 64}, "v_head_dim describes multi-head latent attention"),  # was dropped without a word
    ({"q_lora_rank": 64, "v_head_dim": 64}, "q_lora_rank and v_head_dim describe"),
    ({"max_model_len_limit": 100}, "max_model_len_limit (100) is less than max_position_embeddings (4,096)"),
])
def test_a_model_whose_fields_contradict_each_other_is_refused_naming_them(changes, said):
    with pytest.raises(ConfigError) as caught:
        ModelConfig(**LLAMA, **changes)
    assert said in str(caught.value), caught.value


def test_latent_attention_and_stretched_positions_stay_accepted():
    mla = ModelConfig(**{**LLAMA, "head_dim": 192}, kv_lora_rank=512, qk_rope_head_dim=64, q_lora_rank=64,
                      v_head_dim=128)
    assert mla.uses_mla and mla.v_head_dim == 128
    assert ModelConfig(**LLAMA, max_model_len_limit=32768).longest_context == 32768
    assert ModelConfig(**LLAMA, max_model_len_limit=4096).longest_context == 4096


def test_experts_beside_every_layer_dense_are_refused_naming_the_field_the_file_has():
    from kvscope.app.lab.models.config_json import model_from_hf_config
    from kvscope.app.lab.presets import load_model, model_from_dict

    moe = dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=64, num_dense_layers=2)
    with pytest.raises(ConfigError, match=r"preset x: num_dense_layers \(2\) makes every layer dense"):
        model_from_dict({**LLAMA, **moe}, "preset x")
    assert ModelConfig(**LLAMA, **moe).num_dense_layers == 2  # --layers may cut a model to its dense layers
    assert load_model("deepseek-v2-lite").replace(num_hidden_layers=1).num_hidden_layers == 1
    base = {"model_type": "qwen2_moe", "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2,
            "hidden_size": 512, "intermediate_size": 1024, "vocab_size": 1000, "max_position_embeddings": 4096,
            "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 64}
    for fields, said in (({"first_k_dense_replace": 2}, "first_k_dense_replace makes all 2 layers dense"),
                         ({"mlp_only_layers": [0, 1]}, "mlp_only_layers makes all 2 layers dense")):
        with pytest.raises(ConfigError) as caught:
            model_from_hf_config({**base, **fields}, "m")
        assert said in str(caught.value) and "num_dense_layers" not in str(caught.value), caught.value
    assert model_from_hf_config({**base, "mlp_only_layers": [1, 1]}, "m").num_dense_layers == 1


def _hardware(link: float) -> HardwareSpec:
    return HardwareSpec(name="h", memory_bytes=80 * 1024**3, memory_bandwidth_bytes_per_s=3e12,
                        peak_flops={"bf16": 1e15}, gpu_count=8, interconnect_bandwidth_bytes_per_s=link)


def test_an_interconnect_of_almost_no_bandwidth_is_refused_and_none_falls_back():
    """1e-300 bytes/s put each all-reduce at 1e300 s: a run's summary of NaN and inf."""
    with pytest.raises(ConfigError, match=r"interconnect_bandwidth_bytes_per_s must be 0 .* got 1e-300"):
        _hardware(1e-300)
    assert _hardware(0.0).interconnect_bandwidth_bytes_per_s == 0.0  # none given: the memory bandwidth stands in
    assert _hardware(1e6).interconnect_bandwidth_bytes_per_s == 1e6


def test_a_preset_whose_name_field_is_not_its_files_is_refused(tmp_path, monkeypatch):
    from kvscope.app.lab.presets import load_hardware, load_model, presets_root

    monkeypatch.setenv("KVSCOPE_CONFIG_DIR", str(tmp_path))
    for kind, load, built_in in (("models", load_model, "llama-3-8b"), ("hardware", load_hardware, "l4-24gb")):
        (tmp_path / "presets" / kind).mkdir(parents=True)
        (tmp_path / "presets" / kind / "mine.toml").write_text((presets_root() / kind / f"{built_in}.toml").read_text())
        with pytest.raises(ConfigError, match=f"its name field is '{built_in}', not 'mine'"):
            load("mine")


# -- workloads -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("table, said", [
    ({"dist": "constant", "value": 8, "min": 100}, "constant value 8 is below min 100"),  # ran 100-token prompts
    ({"dist": "constant", "value": 800, "max": 100}, "constant value 800 is above max 100"),  # ran 800-token ones
    ({"dist": "lognormal", "median": 5000, "sigma": 0.1, "max": 100}, "median 5,000.0 is outside min 1 to max 100"),
    ({"dist": "lognormal", "median": 2, "sigma": 0.1, "min": 50}, "median 2.0 is outside min 50"),
])
def test_a_length_outside_its_own_bounds_is_refused(table, said):
    with pytest.raises(ConfigError) as caught:
        dist_from_dict(table, "prompt_tokens")
    assert said in str(caught.value), caught.value


def test_a_length_inside_its_bounds_is_what_it_says():
    assert dist_from_dict({"dist": "constant", "value": 100, "min": 100, "max": 100}, "p").value == 100
    lognormal = {"dist": "lognormal", "median": 100, "sigma": 0.5, "min": 100, "max": 4000}
    assert dist_from_dict(lognormal, "p").median == 100


W = {"name": "w", "num_requests": 3, "arrival_rate_per_s": 1.0, "prompt_tokens": 8, "output_tokens": 4}


@pytest.mark.parametrize("fields, said", [
    ({"trace_speedup": 100}, "trace_speedup replays a trace faster, but the workload has no trace"),
    ({"shared_prefix_tokens": 500}, "shared_prefix_tokens would be ignored"),
    ({"num_shared_prefixes": 4}, "num_shared_prefixes would be ignored"),
    ({"shared_prefix_fraction": 0.0, "shared_prefix_tokens": 5}, "shared_prefix_fraction"),
    ({"shared_prefix_fraction": 1.0, "shared_prefix_tokens": 500}, "shared_prefix_tokens (500) is not shorter"),
    ({"shared_prefix_fraction": 0.5, "shared_prefix_tokens": 8}, "the longest prompt prompt_tokens gives (8)"),
])
def test_a_workload_field_its_other_fields_leave_unread_is_refused(fields, said):
    with pytest.raises(ConfigError) as caught:
        workload_from_dict({**W, **fields}, "workload file w.toml")
    assert said in str(caught.value) and "w.toml" in str(caught.value), caught.value


def test_a_shared_prefix_shorter_than_the_prompts_and_the_windows_own_overrides_stay_accepted():
    spec = workload_from_dict({**W, "prompt_tokens": {"dist": "uniform", "min": 10, "max": 600},
                               "shared_prefix_fraction": 0.5, "shared_prefix_tokens": 100}, "w")
    assert spec.shared_prefix_tokens == 100
    # the window passes its trace-speed box to every workload: that is not a file's field left unread
    assert WorkloadSpec("w").with_overrides(trace_speedup=2.0).trace_speedup == 2.0


def test_a_scenario_sent_all_at_once_at_an_arrival_rate_is_refused(tmp_path):
    from kvscope.app.lab.scenarios import load_scenario, scenarios_root

    text = (scenarios_root() / "cache-ceiling.toml").read_text()
    path = tmp_path / "s.toml"
    path.write_text(text.replace("all_at_once = true", "all_at_once = true\narrival_rate_per_s = 5.0", 1))
    with pytest.raises(ConfigError, match=r"base\.workload\.arrival_rate_per_s: all_at_once sends every request"):
        load_scenario(str(path))
    path.write_text(text)
    assert load_scenario(str(path)).workload.all_at_once


# -- calibration profiles ----------------------------------------------------------------------------------------

def _profile(tmp_path, monkeypatch, **top):
    from kvscope.app.lab.calibration import profile_path
    from kvscope.app.lab.this_machine import cpu_machine_key

    monkeypatch.setenv("KVSCOPE_CACHE_DIR", str(tmp_path))
    key = cpu_machine_key()
    path = profile_path(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"format": "kvscope-calibration", "version": 1,
                                "calibration": {"label": "fit", "flops_efficiency": 0.5}, **top}))
    return key


def test_a_calibration_profile_measured_on_another_machine_is_refused(tmp_path, monkeypatch):
    from kvscope.app.lab.calibration import load_stored_calibration

    key = _profile(tmp_path, monkeypatch, machine="cuda-nvidia-h100-80gb-hbm3")
    with pytest.raises(ConfigError, match=r"measured on 'cuda-nvidia-h100-80gb-hbm3', not on this machine"):
        load_stored_calibration(key)


@pytest.mark.parametrize("top", [{}, {"machine": "same"}])
def test_a_calibration_profile_of_this_machine_or_naming_none_is_read(tmp_path, monkeypatch, top):
    from kvscope.app.lab.calibration import load_stored_calibration
    from kvscope.app.lab.this_machine import cpu_machine_key

    key = _profile(tmp_path, monkeypatch, **({"machine": cpu_machine_key()} if top else {}))
    assert load_stored_calibration(key)["flops_efficiency"] == 0.5


# -- recordings --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["step.start_time_s", "step.step"])
def test_a_chunk_that_starts_below_the_one_before_is_refused(tmp_path, recording_bytes, name):
    """Each chunk checked only its own order: a second chunk whose clock (or step numbers) began
    again at 0 was exported and replayed as it came, a timeline folded over itself."""
    path = tmp_path / "again.kvrec"
    path.write_bytes(forged_record(recording_bytes, STEPS, 1, name, lambda v: v - v[0]))
    with pytest.raises(RecordingError) as caught:
        Recording.open(path, allow_truncated=True)
    said = str(caught.value)
    assert "again.kvrec" in said and f"{name} goes backwards from the chunk before it" in said, said


def test_chunks_in_order_open_and_a_chunk_may_start_where_the_last_ended(tmp_path, recording_bytes):
    path = tmp_path / "same.kvrec"
    path.write_bytes(recording_bytes)
    first = []
    forged_record(recording_bytes, STEPS, 0, "step.start_time_s", lambda v: first.append(v) or v)
    with Recording.open(path) as recording:
        steps = recording.num_steps
    assert steps > len(first[0])
    path.write_bytes(forged_record(recording_bytes, STEPS, 1, "step.start_time_s",
                                   lambda v: np.concatenate([[first[0][-1]], v[1:]])))
    with Recording.open(path, allow_truncated=True) as recording:
        assert recording.num_steps == steps
