"""The real runner: a transformers model executing every step over the paged KV pool."""

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from kvscope.app.lab.models.loader import discover_cached_models, load_model_directory, served_dtype
from kvscope.app.lab.real_backend import create_real_engine, load_for_real_backend
from kvscope.app.lab.verify.parity import run_parity
from kvscope.app.lab.verify.tiny_model import build_random_model
from kvscope.engine import EngineArgs
from kvscope.engine.config import ConfigError, ModelConfig
from kvscope.engine.events import EventKind
from kvscope.engine.memory_math import num_parameters

FAMILIES = {
    "llama": dict(model_type="llama"),
    "mistral": dict(model_type="mistral"),
    "qwen2": dict(model_type="qwen2"),
    "qwen3": dict(model_type="qwen3", qk_norm=True),
}


def small_model(family: str) -> ModelConfig:
    return ModelConfig(name=f"test-{family}", num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                       head_dim=16, hidden_size=64, intermediate_size=128, vocab_size=512,
                       max_position_embeddings=1024, weight_dtype="fp32", **FAMILIES[family])


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    return {family: build_random_model(small_model(family), root / family) for family in FAMILIES}


@pytest.fixture(scope="module")
def tiny():
    return load_for_real_backend("tiny-llama")


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_fp32_kv_reproduces_generate_exactly_through_chunking_sharing_and_preemption(model_dirs, family):
    loaded = load_model_directory(model_dirs[family], random_weights=True)
    assert loaded.config.model_type == family
    result = run_parity(loaded, "fp32")
    assert result.exact, result
    assert result.preemptions > 0 and result.prefix_hit_tokens > 0 and result.chunked_prefill_chunks > 0


def test_narrower_kv_reports_its_quality_cost(model_dirs):
    loaded = load_model_directory(model_dirs["llama"], random_weights=True)
    fp16 = run_parity(loaded, "fp16")
    fp8 = run_parity(loaded, "fp8_e5m2")
    assert 0 < fp16.max_logit_diff < fp8.max_logit_diff
    assert fp8.top1_agreement <= fp16.top1_agreement <= 1.0


def test_each_token_kv_lives_at_its_blocks_slot(tiny):
    """Layer 0's keys, computed independently from the weights, sit at block_id * block_size +
    offset of exactly the blocks the block manager handed out (the ones the window draws)."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    engine = create_real_engine(tiny, EngineArgs(num_gpu_blocks_override=64, max_model_len=256))
    prompt = list(range(100, 140))
    rid = engine.add_request(prompt, max_tokens=3)
    engine.step()
    req = engine.requests[rid]
    assert len(req.block_ids) == 3  # 40 tokens in blocks of 16
    model = tiny.hf_model.model
    with torch.no_grad():
        ids = torch.tensor([prompt])
        hidden = model.layers[0].input_layernorm(model.embed_tokens(ids))
        attn = model.layers[0].self_attn
        k = attn.k_proj(hidden).view(1, 40, -1, attn.head_dim).transpose(1, 2)
        cos, sin = model.rotary_emb(hidden, torch.arange(40)[None])
        _, k = apply_rotary_pos_emb(k, k, cos, sin)
    expected = k[0].transpose(0, 1)  # [40, kv_heads, head_dim]
    stored = engine.runner.cache.layers[0].keys  # [num_blocks, block_size, kv_heads, head_dim]
    slots = torch.tensor([req.block_ids[t // 16] * 16 + t % 16 for t in range(40)])
    assert torch.allclose(stored.view(-1, *stored.shape[2:])[slots], expected, atol=1e-5)
    untouched = sorted(set(range(64)) - set(req.block_ids))
    assert not stored[untouched].any()
    snap = engine.snapshot()
    assert set(np.flatnonzero(snap.block_owner == rid)) == set(req.block_ids)


def test_a_prefix_hit_really_skips_the_shared_tokens(tiny):
    engine = create_real_engine(tiny, EngineArgs(max_model_len=512))
    shared = list(range(1000, 1064))  # four full blocks
    engine.add_request(shared + [7, 8, 9], max_tokens=2)
    engine.run()
    second = engine.add_request(shared + [5, 6], max_tokens=2)
    step = engine.step()
    assert step.request_ids == [second]
    assert step.num_new_tokens == [2]  # 64 shared tokens came from the cache
    assert any(ev.kind == EventKind.PREFIX_HIT and ev.value == 64 for ev in step.events)


def test_kvscope_math_agrees_with_what_the_real_runner_allocates(tiny):
    from kvscope.app.cli.main import main

    engine = create_real_engine(tiny, EngineArgs())
    cache = engine.runner.cache
    assert cache.layers[0].keys.shape[0] == engine.plan.num_blocks
    assert cache.nbytes == engine.plan.num_blocks * engine.plan.block_bytes
    assert engine.plan.weights_bytes == num_parameters(tiny.config) * 4
    out = subprocess.run([sys.executable, "-m", "kvscope.app", "math", "--model", "tiny-llama",
                          "--hardware", "this-machine", "--json"], capture_output=True, text=True, check=True)
    math = json.loads(out.stdout)
    assert math["num_blocks"] == engine.plan.num_blocks
    assert math["kv_pool_bytes"] == engine.plan.kv_pool_bytes
    assert math["weights_bytes"] == engine.plan.weights_bytes
    del main


def test_fp8_kv_is_stored_in_one_byte_and_doubles_the_blocks(tiny):
    fp32 = create_real_engine(tiny, EngineArgs(kv_cache_dtype="fp32"))
    fp8 = create_real_engine(tiny, EngineArgs(kv_cache_dtype="fp8"))
    assert fp8.runner.cache.layers[0].keys.element_size() == 1
    assert fp8.plan.num_blocks // 4 == fp32.plan.num_blocks  # fp32 -> fp8: 4 bytes -> 1 (pool // block)
    assert abs(fp8.runner.cache.nbytes - fp32.runner.cache.nbytes) <= fp32.plan.block_bytes


def test_real_runs_measure_step_times_and_match_the_simulated_events_form(tiny):
    from kvscope.app.lab.workload import generate_requests
    from kvscope.app.lab.presets import load_workload

    engine = create_real_engine(tiny, EngineArgs(max_model_len=1024))
    spec = load_workload("chat").with_overrides(num_requests=6, arrival_rate_per_s=0.0)
    engine.add_workload(generate_requests(spec, tiny.config.vocab_size))
    steps = []
    summary = engine.run(on_step=steps.append)
    assert summary["completed"] + summary["rejected"] == 6
    assert all(s.duration_s > 0 for s in steps if s.request_ids)
    assert engine.runner.forward_time_s <= engine.runner.step_time_s
    kinds = {ev.kind for s in steps for ev in s.events}
    assert {EventKind.ARRIVED, EventKind.ADMITTED, EventKind.ALLOCATED, EventKind.FINISHED} <= kinds


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_bad_model_directories_get_clear_errors(tmp_path, model_dirs):
    with pytest.raises(ConfigError, match="no such directory"):
        load_model_directory(tmp_path / "nope")
    _write(tmp_path / "empty" / "README", "x")
    with pytest.raises(ConfigError, match="missing config.json"):
        load_model_directory(tmp_path / "empty")
    _write(tmp_path / "gpt2" / "config.json", json.dumps({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2"}))
    with pytest.raises(ConfigError, match="unsupported architecture GPT2LMHeadModel"):
        load_model_directory(tmp_path / "gpt2")
    cfg = (model_dirs["llama"] / "config.json").read_text()
    _write(tmp_path / "pickled" / "config.json", cfg)
    _write(tmp_path / "pickled" / "pytorch_model.bin", "not really")
    with pytest.raises(ConfigError, match="--allow-pickle"):
        load_model_directory(tmp_path / "pickled")
    _write(tmp_path / "noweights" / "config.json", cfg)
    with pytest.raises(ConfigError, match="no weights"):
        load_model_directory(tmp_path / "noweights")
    _write(tmp_path / "sharded" / "config.json", cfg)
    _write(tmp_path / "sharded" / "model-00001-of-00002.safetensors", "x")
    _write(tmp_path / "sharded" / "model.safetensors.index.json",
           json.dumps({"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}))
    with pytest.raises(ConfigError, match="missing weight shard"):
        load_model_directory(tmp_path / "sharded")
    remote = json.loads(cfg)
    remote["auto_map"] = {"AutoModelForCausalLM": "x.Y"}
    _write(tmp_path / "remote" / "config.json", json.dumps(remote))
    with pytest.raises(ConfigError, match="remote code"):
        load_model_directory(tmp_path / "remote")
    _write(tmp_path / "corrupt" / "config.json", cfg)
    _write(tmp_path / "corrupt" / "model.safetensors", "garbage")
    with pytest.raises(ConfigError, match="cannot load"):
        load_model_directory(tmp_path / "corrupt")


def test_a_model_too_big_for_memory_is_refused_before_anything_is_built():
    from kvscope.app.lab.presets import load_model

    with pytest.raises(ConfigError, match="needs about .* GiB"):
        load_for_real_backend(architecture=load_model("llama-3-70b"))


def test_weights_load_in_the_dtype_vllm_serves_them_in_when_none_is_asked(monkeypatch):
    """vLLM's --dtype auto: a float32 checkpoint computes in bf16 on an Ampere or later GPU (it had
    loaded in fp16, and its K/V with it), in fp16 before; a float16 one stays float16; a CPU keeps fp32."""
    cuda = torch.device("cuda")
    capability = {"now": (9, 0)}
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability["now"])
    assert served_dtype("fp32", cuda) == "bf16" and served_dtype("bf16", cuda) == "bf16"
    assert served_dtype("fp16", cuda) == "fp16" and served_dtype("int4", cuda) == "fp16"
    capability["now"] = (7, 5)  # a T4: no bf16
    assert served_dtype("fp32", cuda) == "fp16" and served_dtype("bf16", cuda) == "fp16"
    assert served_dtype("fp32", torch.device("cpu")) == "fp32" == served_dtype("bf16", torch.device("cpu"))


def test_an_unknown_weight_quantisation_is_refused_by_name(model_dirs):
    # int8 and nf4 run on this CPU (tests/test_quantization.py); anything else is named and refused
    with pytest.raises(ConfigError, match="unknown quantization 'int4'; choose int8, nf4"):
        load_model_directory(model_dirs["llama"], device="cpu", quantization="int4")


def test_models_in_the_hugging_face_cache_are_discovered(tmp_path, model_dirs):
    snapshot = tmp_path / "models--acme--tiny" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    for f in model_dirs["qwen2"].iterdir():
        (snapshot / f.name).write_bytes(f.read_bytes())
    found = discover_cached_models(tmp_path)
    assert [(m.name, m.supported) for m in found] == [("acme/tiny", True)]
    assert found[0].weights_bytes > 0
    loaded = load_model_directory(found[0].path)
    assert loaded.config.model_type == "qwen2"
    # an interrupted download: a shard whose link points at a blob never written is listed, not loadable
    (snapshot / "model-00002-of-00002.safetensors").symlink_to(tmp_path / "blobs" / "missing")
    assert [(m.name, m.supported) for m in discover_cached_models(tmp_path)] == [("acme/tiny", False)]


def test_cli_real_run_verify_and_errors(tmp_path, model_dirs):
    def kvscope(*argv):
        return subprocess.run([sys.executable, "-m", "kvscope.app", *map(str, argv)], capture_output=True, text=True)

    out = kvscope("run", "--backend", "real", "--model-path", model_dirs["mistral"], "--workload", "uniform-short",
                  "--requests", "8", "--max-model-len", "512", "--json", "-", "--quiet")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["backend"] == "real" and report["completed"] == 8 and report["output_tokens"] == 8 * 32
    out = kvscope("verify", "--model-path", model_dirs["qwen3"], "--kv-cache-dtype", "fp32", "--json", "-")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["results"][0]["exact"] is True
    for argv, message in [
        (("run", "--backend", "real", "--model-path", tmp_path / "missing"), "no such directory"),
        (("run", "--backend", "real", "--hardware", "h100-80gb"), "simulated target"),
        (("run", "--model-path", model_dirs["llama"]), "--backend real"),
        (("verify", "--kv-cache-dtype", "int3"), "unknown kv_cache_dtype"),
        (("bench", "scheduler", "--against-vllm"), "--against-vllm goes with `kvscope bench real`"),
        (("bench", "real", "--against-vllm", "--device", "cuda"), "vLLM's CPU build: it runs on the CPU"),
    ]:
        out = kvscope(*argv)
        assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
        assert message in out.stderr.strip().splitlines()[-1]


def test_the_vllm_comparison_times_kvscope_on_exact_lengths_as_a_client_would(tiny):
    """kvscope's side of `bench real --against-vllm`: every request makes exactly its length (end of
    sequence ignored, as vLLM is asked to), and each TTFT is a wall time within the run."""
    from kvscope.app.bench.bench_vs_vllm import run_kvscope_exact

    prompts = [list(range(10 + i, 50 + 7 * i)) for i in range(6)]
    outputs = [3, 9, 1, 5, 12, 4]
    result = run_kvscope_exact(tiny, prompts, outputs)
    assert result["output_tokens"] == sum(outputs) and result["block_size"] == 32
    assert 0 < result["ttft_p50_s"] < result["wall_time_s"]
    assert result["throughput_tokens_per_s"] == pytest.approx(sum(outputs) / result["wall_time_s"])


def test_the_vllm_comparison_runs_kvscope_on_the_threads_asked_and_gives_torch_its_own_back(tiny):
    """kvscope's side runs once on one thread (as vLLM computes by default) and once on every core;
    the same tokens either way, and torch's thread count is what it was afterwards."""
    import torch

    from kvscope.app.bench.bench_vs_vllm import run_kvscope_exact

    before = torch.get_num_threads()
    prompts, outputs = [list(range(5, 40)), list(range(50, 70))], [4, 6]
    for threads in (1, 2):
        torch.set_num_threads(3 - threads)  # a different count before: the run must set its own
        run = run_kvscope_exact(tiny, prompts, outputs, threads=threads)
        assert run["threads"] == threads and run["output_tokens"] == 10
        assert torch.get_num_threads() == 3 - threads  # given back as it was
    torch.set_num_threads(before)
