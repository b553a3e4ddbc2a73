"""The seeds' worked examples, reproduced by the memory math (and so by `kvscope math`) with the
lesson's accounting they use; and vLLM's accounting, formula by formula, on real models' configs."""

import pytest

from kvscope.engine.config import ConfigError, EngineArgs, HardwareSpec, resolve_engine_args
from kvscope.engine.memory_math import kv_bytes_per_token, num_parameters, plan_memory, require_fit, weights_bytes
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
    p = plan(load_model("llama-2-7b"), gpu(80 * GiB), max_model_len=4096, gpu_memory_utilization=1.0,
             accounting="lesson")
    assert p.kv_cache_dtype == "fp16"
    assert p.kv_bytes_per_token == 512 * KiB
    assert p.kv_bytes_per_sequence == 2 * GiB


@pytest.mark.parametrize("hardware", ["80gib", "h100-80gb"])
def test_llama_2_7b_about_33_concurrent_4k_sequences_on_80_gib(hardware):
    hw = gpu(80 * GiB) if hardware == "80gib" else load_hardware(hardware)
    p = plan(load_model("llama-2-7b"), hw, max_model_len=4096, gpu_memory_utilization=1.0, accounting="lesson")
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
                        weight_dtype="fp16", weights_bytes=140 * 10**9,
                        max_position_embeddings_given=False)  # the lesson's model: no positions said
    p = plan(model, gpu(80e9, count=8), max_model_len=8192, gpu_memory_utilization=1.0, tensor_parallel_size=8,
             accounting="lesson")
    assert round(p.kv_bytes_per_token / 1e6, 2) == 2.62
    assert round(p.kv_bytes_per_sequence / 1e9, 1) == 21.5
    assert p.kv_pool_bytes == 500 * 10**9
    assert int(p.max_concurrent_sequences) == 23
    # every device holds 1/8 of the KV heads, so 1/8 of each token's bytes
    assert p.kv_bytes_per_token_per_device * 8 == p.kv_bytes_per_token


def test_qwen36_27b_fp8_on_h100_nvl_at_075_fits_about_2_7_full_128k_requests():
    model, hw = load_model("qwen3.6-27b-fp8"), load_hardware("h100-nvl-94gb")
    fp8 = plan(model, hw, kv_cache_dtype="fp8", max_model_len=131072, gpu_memory_utilization=0.75, accounting="lesson")
    fp16 = plan(model, hw, kv_cache_dtype="fp16", max_model_len=131072, gpu_memory_utilization=0.75,
                accounting="lesson")
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


# -- vLLM's accounting, formula by formula (config.json fields as published) ------------------------

from kvscope.app.lab.models.config_json import model_from_hf_config  # noqa: E402
from kvscope.engine.memory_math import activation_peak_bytes, cuda_graph_bytes, non_torch_bytes  # noqa: E402

LLAMA_31_8B = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
               "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
               "max_position_embeddings": 131072, "torch_dtype": "bfloat16"}
QWEN25_7B = {"model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
             "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064,
             "max_position_embeddings": 32768, "use_sliding_window": False, "sliding_window": 131072,
             "torch_dtype": "bfloat16"}
GEMMA2_9B = {"model_type": "gemma2", "hidden_size": 3584, "intermediate_size": 14336, "num_hidden_layers": 42,
             "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256, "vocab_size": 256000,
             "max_position_embeddings": 8192, "sliding_window": 4096, "tie_word_embeddings": True,
             "torch_dtype": "bfloat16"}
PHI_4 = {"model_type": "phi3", "hidden_size": 5120, "intermediate_size": 17920, "num_hidden_layers": 40,
         "num_attention_heads": 40, "num_key_value_heads": 10, "vocab_size": 100352, "torch_dtype": "bfloat16"}
CODELLAMA_7B = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
                "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32016, "torch_dtype": "bfloat16"}
MIXTRAL_8X7B = {"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000, "num_local_experts": 8,
                "num_experts_per_tok": 2, "torch_dtype": "bfloat16"}
QWEN3_30B_A3B = {"model_type": "qwen3_moe", "hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 48,
                 "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "vocab_size": 151936,
                 "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768, "mlp_only_layers": [],
                 "torch_dtype": "bfloat16"}
DEEPSEEK_V2_LITE = {"model_type": "deepseek_v2", "hidden_size": 2048, "intermediate_size": 10944,
                    "moe_intermediate_size": 1408, "num_hidden_layers": 27, "num_attention_heads": 16,
                    "num_key_value_heads": 16, "n_routed_experts": 64, "n_shared_experts": 2, "num_experts_per_tok": 6,
                    "first_k_dense_replace": 1, "kv_lora_rank": 512, "q_lora_rank": None, "qk_nope_head_dim": 128,
                    "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 102400, "torch_dtype": "bfloat16"}
QWEN35_9B = {"model_type": "qwen3_5_text", "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 32,
             "num_attention_heads": 16, "num_key_value_heads": 4, "head_dim": 256, "vocab_size": 248320,
             "full_attention_interval": 4, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
             "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
             "mamba_ssm_dtype": "float32", "torch_dtype": "bfloat16"}
QWEN35_27B = {**QWEN35_9B, "hidden_size": 5120, "intermediate_size": 17408, "num_hidden_layers": 64,
              "num_attention_heads": 24, "linear_num_value_heads": 48}
QWEN36_35B_A3B = {**QWEN35_9B, "hidden_size": 2048, "num_hidden_layers": 40, "num_key_value_heads": 2,
                  "num_experts": 256, "num_experts_per_tok": 8, "moe_intermediate_size": 512,
                  "shared_expert_intermediate_size": 512}


def hf(cfg: dict, name: str = "model"):
    return model_from_hf_config(cfg, name)


def vllm_plan(model, hardware="8x-h100-80gb", **engine):
    hw = load_hardware(hardware)
    engine.setdefault("tensor_parallel_size", 1)
    return plan(model, hw, **engine)


@pytest.mark.parametrize("cfg, tokens, seqs, tp, logged, tolerance", [
    # vLLM 0.19 on H100 (llm-d-planner PR 205): "torch peak memory increase"
    (LLAMA_31_8B, 8192, 1024, 1, 1.89, 0.05), (LLAMA_31_8B, 8192, 1024, 4, 1.89, 0.05),
    (QWEN25_7B, 8192, 1024, 1, 2.21, 0.05), (GEMMA2_9B, 8192, 1024, 1, 3.65, 0.05),
    (PHI_4, 8192, 1024, 1, 1.52, 0.05), (CODELLAMA_7B, 8192, 1024, 1, 0.77, 0.05),
    (MIXTRAL_8X7B, 8192, 1024, 2, 1.21, 0.05), (DEEPSEEK_V2_LITE, 8192, 1024, 1, 1.93, 0.1),
    (QWEN3_30B_A3B, 8192, 1024, 1, 2.68, 0.2),
    # V0 on an RTX 3090: a whole 20,000-token prompt (vllm#10517: peak 17.06 - weights 14.99)
    (LLAMA_31_8B, 20000, 256, 1, 2.07, 0.15),
])
def test_activation_peak_matches_the_profiled_peaks(cfg, tokens, seqs, tp, logged, tolerance):
    model = hf(cfg)
    assert activation_peak_bytes(model, tp, tokens, seqs) / GiB == pytest.approx(logged, abs=tolerance)


def test_vllm_pool_is_the_usable_memory_less_weights_activation_non_torch_and_from_0_21_cuda_graphs():
    model = hf(LLAMA_31_8B)
    old = vllm_plan(model, gpu_memory_utilization=0.95, max_num_seqs=1024, vllm_version="0.19")
    usable = load_hardware("h100-80gb").memory_bytes * 0.95
    assert old.cudagraph_bytes == 0 and old.non_torch_bytes == int(0.25 * GiB)
    assert old.kv_pool_bytes == int(usable - old.weights_bytes - old.activation_bytes - old.non_torch_bytes)
    assert old.kv_pool_bytes / GiB == pytest.approx(58.11, rel=0.005)  # "Available KV cache memory: 58.11 GiB"
    new = vllm_plan(model, gpu_memory_utilization=0.95, max_num_seqs=1024, vllm_version="0.21")
    assert new.cudagraph_bytes == cuda_graph_bytes(model)
    assert new.cudagraph_bytes / GiB == pytest.approx(0.84, abs=0.1)  # "Estimated CUDA graph memory: 0.84 GiB"
    assert old.kv_pool_bytes - new.kv_pool_bytes == new.cudagraph_bytes
    assert new.held_back_bytes == new.activation_bytes + new.non_torch_bytes + new.cudagraph_bytes
    lesson = vllm_plan(model, gpu_memory_utilization=0.95, accounting="lesson")
    assert lesson.held_back_bytes == 0 and lesson.kv_pool_bytes == int(usable - lesson.weights_bytes)
    assert new.lesson_kv_pool_bytes == lesson.kv_pool_bytes  # shown beside what vLLM allocates


def test_an_eager_vllm_holds_nothing_back_for_cuda_graphs_it_never_captures():
    model = hf(LLAMA_31_8B)
    graphs = vllm_plan(model, gpu_memory_utilization=0.95, vllm_version="0.21")
    eager = vllm_plan(model, gpu_memory_utilization=0.95, vllm_version="0.21", enforce_eager=True)
    assert graphs.cudagraph_bytes > 0 and eager.cudagraph_bytes == 0
    assert eager.kv_pool_bytes - graphs.kv_pool_bytes == graphs.cudagraph_bytes
    assert "CUDA graphs" not in eager.kv_pool_source and "CUDA graphs" in graphs.kv_pool_source


def test_a_cpu_target_sized_by_its_memory_holds_back_no_cuda_context_or_graphs():
    """--hardware this-machine --memory-gib 32 sized the pool as a share of the RAM and took 256 MiB of
    CUDA context and the CUDA graphs off it, which a CPU never has."""
    model = hf(LLAMA_31_8B)
    cpu = load_hardware("this-machine").with_memory(32 * GiB)
    gpu = cpu.replace(kind="gpu")
    on_cpu, as_gpu = (plan_memory(model, h, resolve_engine_args(EngineArgs(vllm_version="0.21"), model, h))
                      for h in (cpu, gpu))
    assert on_cpu.non_torch_bytes == 0 and on_cpu.cudagraph_bytes == 0
    assert as_gpu.non_torch_bytes > 0 and as_gpu.cudagraph_bytes > 0
    assert on_cpu.activation_bytes > 0  # the profiling forward runs on a CPU too
    assert on_cpu.held_back_bytes == on_cpu.activation_bytes
    assert on_cpu.kv_pool_bytes == int(32 * GiB * 0.92 - on_cpu.weights_bytes) - on_cpu.activation_bytes
    assert "non-torch" not in on_cpu.kv_pool_source


def test_non_torch_memory_is_2_gib_a_gpu_with_tensor_parallelism_over_nvlink_only():
    assert non_torch_bytes(load_hardware("8x-h100-80gb"), 1) == int(0.25 * GiB)
    assert non_torch_bytes(load_hardware("8x-h100-80gb"), 2) / GiB == pytest.approx(2.1)  # logged 2.06 - 2.21
    assert non_torch_bytes(load_hardware("rtx-4090-24gb").replace(gpu_count=2), 2) == int(0.25 * GiB)  # PCIe


def test_the_default_token_budget_is_vllms_for_the_card():
    model = load_model("llama-3.1-8b")
    for name, budget in (("h100-80gb", 8192), ("rtx-3090-24gb", 2048), ("a100-80gb", 2048), ("l4-24gb", 2048)):
        hw = load_hardware(name)
        assert resolve_engine_args(EngineArgs(), model, hw).max_num_batched_tokens == budget, name


def test_v0_profiles_a_whole_prompt_and_sizes_sliding_layers_as_full_attention():
    v0 = vllm_plan(hf(LLAMA_31_8B), "rtx-3090-24gb", max_model_len=20000, vllm_version="0.6")
    assert v0.profiled_tokens == 20000  # chunked prefill off: the profile runs a 20,000-token prompt
    gemma = hf(GEMMA2_9B)
    assert vllm_plan(gemma, vllm_version="0.6").layer_groups == (("full_attention", 42, 512),)


def test_sliding_window_layers_hold_at_most_their_window_of_blocks():
    """vLLM: cdiv(min(window - 1 + tokens in flight, max_model_len), block_size) + 1 blocks."""
    oss = load_model("gpt-oss-20b")
    p = vllm_plan(oss, tensor_parallel_size=2, max_model_len=131072, max_num_batched_tokens=2048, vllm_version="0.19")
    assert dict((k, b) for k, _, b in p.layer_groups) == {"sliding_attention": -(-(127 + 2048) // 16) + 1,
                                                          "full_attention": 131072 // 16}
    async_two_batches = vllm_plan(oss, tensor_parallel_size=2, max_model_len=131072, max_num_batched_tokens=2048,
                                  vllm_version="0.33")
    assert dict((k, b) for k, _, b in async_two_batches.layer_groups)["sliding_attention"] == -(-(127 + 4096) // 16) + 1
    # at 8K and an 8,192-token budget the window saves nothing: the logged 512 + 513 blocks a request
    p = vllm_plan(oss, tensor_parallel_size=2, max_model_len=8192, vllm_version="0.19", gpu_memory_utilization=0.9)
    assert p.blocks_per_sequence == 512 + 513
    assert p.block_bytes == 12 * (16 * 2 * 4 * 64 * 2) * 2  # groups of 12 layers, 16 KiB pages a GPU, 2 GPUs


@pytest.mark.parametrize("cfg, groups, group_size, padding, blocks", [
    # Gemma 3 27B: 52 sliding + 10 full -> 7 groups of 10, 8 padding layers ("Add 8 padding layers")
    ({"model_type": "gemma3_text", "hidden_size": 5376, "intermediate_size": 21504, "num_hidden_layers": 62,
      "num_attention_heads": 32, "num_key_value_heads": 16, "head_dim": 128, "vocab_size": 262208,
      "sliding_window": 1024, "sliding_window_pattern": 6, "torch_dtype": "bfloat16"}, 7, 10, 8, 512 + 6 * 513),
    (GEMMA2_9B, 2, 21, 0, 512 + 513),  # 21 + 21
    # Gemma 3 4B: 29 sliding + 5 full -> groups of 5 ("Add 1 padding layers")
    ({"model_type": "gemma3_text", "hidden_size": 2560, "intermediate_size": 10240, "num_hidden_layers": 34,
      "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "vocab_size": 262208,
      "sliding_window": 1024, "sliding_window_pattern": 6, "torch_dtype": "bfloat16"}, 7, 5, 1, 512 + 6 * 513),
])
def test_hybrid_allocator_groups_and_concurrency(cfg, groups, group_size, padding, blocks):
    p = vllm_plan(hf(cfg), max_model_len=8192, vllm_version="0.19")
    assert len(p.layer_groups) == groups and p.padding_layers == padding
    assert max(layers for _, layers, _ in p.layer_groups) == group_size
    assert p.blocks_per_sequence == blocks
    assert p.max_concurrent_sequences == pytest.approx(p.num_blocks / blocks)
    assert p.num_blocks == p.kv_pool_bytes // p.block_bytes  # a block id: a page in each of group_size layers


def test_mla_caches_one_latent_per_token_and_layer_not_split_over_devices():
    v3 = load_model("deepseek-v3")
    one = vllm_plan(v3, "8x-h100-80gb", kv_cache_dtype="bf16", tensor_parallel_size=1, gpu_memory_utilization=0.9)
    eight = vllm_plan(v3, "8x-h100-80gb", kv_cache_dtype="bf16", tensor_parallel_size=8)
    assert one.kv_bytes_per_token == 61 * (512 + 64) * 2  # 70,272 B: 1,152 B a layer
    assert eight.kv_bytes_per_token_per_device == one.kv_bytes_per_token  # every GPU holds the whole latent
    lesson = vllm_plan(v3, "8x-h100-80gb", kv_cache_dtype="bf16", tensor_parallel_size=8, accounting="lesson")
    assert lesson.kv_bytes_per_token == 2 * 61 * 128 * 192 * 2  # the lesson's formula: 43x the latent
    lite = hf(DEEPSEEK_V2_LITE)
    p = vllm_plan(lite, gpu_memory_utilization=0.95, max_num_seqs=1024, vllm_version="0.19", max_model_len=8192)
    assert p.block_bytes == 16 * 576 * 2 * 27
    assert p.max_concurrent_sequences == pytest.approx(183.78, rel=0.01)  # logged on H100 (llm-d-planner)


@pytest.mark.parametrize("cfg, kv_dtype, block_size, padding_pct", [
    (QWEN35_9B, "bf16", 528, 0.76),    # "Setting attention block size to 528 tokens", "Padding ... by 0.76%"
    (QWEN35_9B, "fp8", 1056, 0.76),    # 1,056 with an fp8 KV cache (the same page)
    (QWEN35_27B, "bf16", 784, 0.13),   # Qwen3_5ForConditionalGeneration: 784 tokens, 0.13 %
    (QWEN36_35B_A3B, "fp8", 2096, 0.0),  # the NVFP4 35B-A3B log: 2,096 tokens
])
def test_linear_attention_state_sets_the_attention_block_size(cfg, kv_dtype, block_size, padding_pct):
    model = hf(cfg)
    p = vllm_plan(model, kv_cache_dtype=kv_dtype, max_model_len=32768, vllm_version="0.19")
    assert p.block_size == block_size
    page = p.block_bytes // max(layers for _, layers, _ in p.layer_groups)
    assert (page - model.linear_state_bytes) / model.linear_state_bytes * 100 == pytest.approx(padding_pct, abs=0.01)


def test_linear_attention_layers_hold_one_state_page_or_two_with_prefix_caching():
    model = hf(QWEN35_27B)
    groups = vllm_plan(model, max_model_len=32768, vllm_version="0.19", enable_prefix_caching=False).layer_groups
    assert sorted((k, n) for k, n, _ in groups) == [("full_attention", 16)] + [("linear_attention", 16)] * 3
    assert [b for k, _, b in groups if k == "linear_attention"] == [1, 1, 1]
    aligned = vllm_plan(model, max_model_len=32768, vllm_version="0.24", enable_prefix_caching=True).layer_groups
    assert [b for k, _, b in aligned if k == "linear_attention"] == [2, 2, 2]  # vLLM's "align" mode


def test_the_gpu_kv_cache_size_line_by_version():
    model = hf(LLAMA_31_8B)
    for version in ("0.6", "0.19"):
        p = vllm_plan(model, max_model_len=8000, vllm_version=version)
        assert p.kv_cache_size_tokens == p.num_blocks * 16
    p = vllm_plan(model, max_model_len=8000, vllm_version="0.33")
    assert p.kv_cache_size_tokens == int(p.max_concurrent_sequences * 8000)
    gemma = load_model("gemma-3-27b")
    p = vllm_plan(gemma, max_model_len=8192, vllm_version="0.19")
    assert p.kv_cache_size_tokens == p.num_blocks // 7 * 16  # num_blocks // groups x block_size


def test_qwen36_has_16_layers_of_kv_and_the_lesson_beside_it():
    model, hw = load_model("qwen3.6-27b-fp8"), load_hardware("h100-nvl-94gb")
    vllm = plan(model, hw, kv_cache_dtype="fp8", max_model_len=131072, gpu_memory_utilization=0.75, max_num_seqs=8)
    assert model.count_layers("full_attention") == 16 and model.count_layers("linear_attention") == 48
    assert vllm.kv_bytes_per_token == 32 * KiB  # 16 layers, not 64
    assert vllm.lesson_max_concurrent_sequences == pytest.approx(2.65, abs=0.01)  # 92.63 GiB CUDA-visible
    assert 3 < vllm.max_concurrent_sequences / vllm.lesson_max_concurrent_sequences < 4


@pytest.mark.parametrize("name, total, active", [
    ("deepseek-v3", 671e9, 37e9), ("gpt-oss-120b", 116.8e9, 5.1e9), ("gpt-oss-20b", 20.9e9, 3.6e9),
    ("qwen3-next-80b-a3b", 80e9, 3e9), ("deepseek-v2-lite", 15.7e9, 2.4e9),
])
def test_expert_counts_give_the_published_parameter_counts(name, total, active):
    model = load_model(name)
    assert num_parameters(model) == pytest.approx(total, rel=0.02)
    # "active" as published leaves the input embedding out (a lookup, not a matmul)
    assert num_parameters(model, active=True) - model.vocab_size * model.hidden_size == pytest.approx(active, rel=0.05)


def test_quantised_weights_keep_16_bit_embeddings():
    fp8 = hf(LLAMA_31_8B).replace(weight_dtype="fp8")
    assert weights_bytes(fp8)[0] / GiB == pytest.approx(8.49, abs=0.1)  # "weights memory: 8.49GiB" (llm-d)


def test_a_max_model_len_longer_than_the_pool_is_named_with_the_longest_that_fits():
    from kvscope.engine.memory_math import full_length_reason

    model, hardware = load_model("llama-3.1-8b"), load_hardware("l4-24gb")

    def at(max_model_len):
        return plan_memory(model, hardware, resolve_engine_args(EngineArgs(max_model_len=max_model_len), model, hardware))

    too_long = at(131072)
    reason = full_length_reason(too_long)
    assert reason and "vLLM would refuse to start" in reason and f"{too_long.num_blocks:,}" in reason
    longest = too_long.num_blocks * too_long.block_size
    assert f"the longest max_model_len that fits is {longest:,} tokens" in reason
    # vLLM's estimate is exact: that length fits, one block more does not
    assert full_length_reason(at(longest)) is None
    assert full_length_reason(at(longest + too_long.block_size)) is not None


def test_a_float32_checkpoint_is_sized_as_vllm_serves_it_on_a_gpu_and_kept_on_a_cpu():
    """vLLM's --dtype auto serves a float32 checkpoint in bf16 on a GPU that has it (fp16 before
    Ampere), K/V too: read as float32, Llama 3 8B took 29.92 GiB of weights and 256 KiB a token."""
    model, h100 = load_model("llama-3-8b").replace(weight_dtype="fp32"), load_hardware("h100-80gb")
    served, as_bf16 = plan(model, h100), plan(model.replace(weight_dtype="bf16"), h100)
    assert served.kv_cache_dtype == "bf16" and served.kv_bytes_per_token == 128 * 1024
    assert served.weights_bytes == as_bf16.weights_bytes and served.num_blocks == as_bf16.num_blocks
    assert "float32 checkpoint served in bf16" in served.weights_source
    assert plan(model, h100.replace(peak_flops={"fp16": 1e14, "fp32": 5e13})).kv_cache_dtype == "fp16"
    on_cpu = plan(model, h100.replace(kind="cpu"))
    assert on_cpu.kv_cache_dtype == "fp32" and on_cpu.weights_bytes == 2 * as_bf16.weights_bytes
