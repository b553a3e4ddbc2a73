"""The seeds' worked examples, reproduced by the memory math (and so by `kvscope math`)."""

import pytest

from kvscope.engine.config import ConfigError, EngineArgs, HardwareSpec, resolve_engine_args
from kvscope.engine.memory_math import kv_bytes_per_token, plan_memory, require_fit
from kvscope.app.lab.presets import load_hardware, load_model

GiB = 1024**3
MiB = 1024**2
KiB = 1024


def plan(model, hardware, **engine):
    resolved = resolve_engine_args(EngineArgs(**engine), model, hardware)
    return plan_memory(model, hardware, resolved)


def gpu(memory_bytes, count=1):
    return HardwareSpec(name="test-gpu", memory_bytes=int(memory_bytes), memory_bandwidth_bytes_per_s=1e12,
                        peak_flops={"fp16": 1e15}, gpu_count=count)


def test_llama_2_7b_half_a_mib_per_token_and_2_gib_per_4k_sequence():
    p = plan(load_model("llama-2-7b"), gpu(80 * GiB), max_model_len=4096, gpu_memory_utilization=1.0)
    assert p.kv_cache_dtype == "fp16"
    assert p.kv_bytes_per_token == 512 * KiB
    assert p.kv_bytes_per_sequence == 2 * GiB


@pytest.mark.parametrize("hardware", ["80gib", "h100-80gb"])
def test_llama_2_7b_about_33_concurrent_4k_sequences_on_80_gib(hardware):
    hw = gpu(80 * GiB) if hardware == "80gib" else load_hardware(hardware)
    p = plan(load_model("llama-2-7b"), hw, max_model_len=4096, gpu_memory_utilization=1.0)
    assert 12 * GiB < p.weights_bytes < 14 * GiB  # the seed's "weights ~14 GiB" at fp16 (6.74 B params)
    assert 33 <= p.max_concurrent_sequences < 34


def test_llama_3_8b_is_4x_smaller_per_token_than_llama_2_7b():
    l2 = plan(load_model("llama-2-7b"), gpu(80 * GiB), kv_cache_dtype="fp16")
    l3 = plan(load_model("llama-3-8b"), gpu(80 * GiB), kv_cache_dtype="fp16")
    assert l2.kv_bytes_per_token == 4 * l3.kv_bytes_per_token
    assert l3.kv_bytes_per_token == 128 * KiB


def test_70b_full_mha_on_8x80gb_minus_140gb_fits_23_requests_at_8k():
    from kvscope.engine.config import ModelConfig

    model = ModelConfig(name="70b-mha", num_hidden_layers=80, num_attention_heads=64, num_key_value_heads=64,
                        head_dim=128, hidden_size=8192, intermediate_size=28672, vocab_size=32000,
                        weight_dtype="fp16", weights_bytes=140 * 10**9)
    p = plan(model, gpu(80e9, count=8), max_model_len=8192, gpu_memory_utilization=1.0, tensor_parallel_size=8)
    assert round(p.kv_bytes_per_token / 1e6, 2) == 2.62
    assert round(p.kv_bytes_per_sequence / 1e9, 1) == 21.5
    assert p.kv_pool_bytes == 500 * 10**9
    assert int(p.max_concurrent_sequences) == 23
    # every device holds 1/8 of the KV heads, so 1/8 of each token's bytes
    assert p.kv_bytes_per_token_per_device * 8 == p.kv_bytes_per_token


def test_qwen36_27b_fp8_on_h100_nvl_at_075_fits_about_2_7_full_128k_requests():
    model, hw = load_model("qwen3.6-27b-fp8"), load_hardware("h100-nvl-94gb")
    fp8 = plan(model, hw, kv_cache_dtype="fp8", max_model_len=131072, gpu_memory_utilization=0.75)
    fp16 = plan(model, hw, kv_cache_dtype="fp16", max_model_len=131072, gpu_memory_utilization=0.75)
    assert fp8.kv_bytes_per_token == 128 * KiB
    assert fp16.kv_bytes_per_token == 256 * KiB
    assert fp8.kv_bytes_per_sequence == 16 * GiB
    assert 42 * GiB < fp8.kv_pool_bytes < 44 * GiB  # "~43 GiB KV pool"
    assert round(fp8.max_concurrent_sequences, 1) == 2.7


@pytest.mark.parametrize("dtype,size", [("fp32", 4), ("fp16", 2), ("bf16", 2), ("fp8", 1), ("fp8_e4m3", 1), ("fp8_e5m2", 1)])
def test_kv_bytes_scale_with_the_kv_dtype(dtype, size):
    model = load_model("llama-3-8b")
    assert kv_bytes_per_token(model, dtype) == 2 * 32 * 8 * 128 * size


def test_blocks_are_the_pool_divided_by_block_bytes_and_reserve_comes_off_the_pool():
    model = load_model("llama-3-8b")
    base = plan(model, gpu(40 * GiB), block_size=16)
    reserved = plan(model, gpu(40 * GiB), block_size=16, reserve_bytes=GiB)
    assert base.num_blocks == base.kv_pool_bytes // (16 * base.kv_bytes_per_token)
    assert base.kv_pool_bytes - reserved.kv_pool_bytes == GiB
    bigger_blocks = plan(model, gpu(40 * GiB), block_size=32)
    assert bigger_blocks.num_blocks == base.num_blocks // 2


def test_tensor_parallel_splits_weights_and_kv_heads():
    model = load_model("llama-3-70b")
    hw = load_hardware("8x-h100-80gb")
    tp8 = plan(model, hw)
    assert tp8.tensor_parallel_size == 8
    assert tp8.kv_bytes_per_token_per_device == tp8.kv_bytes_per_token // 8
    tp4 = plan(model, hw, tensor_parallel_size=4)
    assert tp8.num_blocks > tp4.num_blocks  # more devices: more memory for KV after the weights


def test_weights_that_do_not_fit_leave_no_blocks_and_say_so():
    p = plan(load_model("llama-3-70b"), load_hardware("l4-24gb"))
    assert p.num_blocks == 0 and not p.fits
    with pytest.raises(ConfigError, match="no room for a KV cache"):
        require_fit(p)


def test_tensor_parallel_must_divide_kv_heads():
    model = load_model("llama-3-8b").replace(num_key_value_heads=8)
    with pytest.raises(ConfigError, match="cannot split"):
        resolve_engine_args(EngineArgs(tensor_parallel_size=3), model, gpu(80 * GiB, count=4))
