"""Decode steps through the static buffers CUDA graphs capture: the tokens of the eager path,
padding that touches only the scratch block, and prefill never taking that path."""

import numpy as np
import pytest
import torch

from kvscope.app.lab.models.loader import load_model_directory
from kvscope.app.lab.real_backend import create_real_engine
from kvscope.app.lab.verify.tiny_model import build_random_model
from kvscope.engine import EngineArgs
from kvscope.engine.config import ModelConfig
from kvscope.engine.runners.decode_graphs import DecodeGraphs, _width_bucket
from kvscope.engine.runners.paged_cache import PagedKVCache


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    config = ModelConfig(name="graph-test", num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         head_dim=16, hidden_size=64, intermediate_size=128, vocab_size=512,
                         max_position_embeddings=1024, weight_dtype="fp32", model_type="llama")
    return load_model_directory(build_random_model(config, tmp_path_factory.mktemp("graph-model")), device="cpu",
                                random_weights=True)


def requests(count: int) -> list[tuple[list[int], int]]:
    rng = np.random.default_rng(3)
    return [(rng.integers(3, 500, int(rng.integers(5, 60))).tolist(), int(rng.integers(8, 40))) for _ in range(count)]


def engine_with_static_decode(loaded):
    """The real engine on this CPU, its decode-only steps run through DecodeGraphs' static buffers
    (what a GPU captures), with the scratch block a GPU run allocates past the pool."""
    engine = create_real_engine(loaded, EngineArgs(kv_cache_dtype="fp32", max_num_seqs=12),
                                memory_bytes=64 * 1024 * 1024)
    runner, model, plan = engine.runner, loaded.config, engine.plan
    runner.cache = PagedKVCache(model.num_hidden_layers, plan.num_blocks + 1, plan.block_size,
                                model.num_key_value_heads, model.head_dim, "fp32", runner.device)
    runner.graphs = DecodeGraphs(runner.hf_model, runner.cache, plan.block_size, plan.num_blocks, 12,
                                 runner.cache_argument)
    return engine


def run(engine, work) -> dict:
    ids = [engine.add_request(prompt, n) for prompt, n in work]
    engine.run()
    return {i: engine.outputs[i] for i in ids}


def test_static_decode_gives_the_eager_tokens_and_takes_every_decode_only_step(loaded):
    work = requests(10)
    eager = create_real_engine(loaded, EngineArgs(kv_cache_dtype="fp32", max_num_seqs=12),
                               memory_bytes=64 * 1024 * 1024, record_outputs=True)
    expected = run(eager, work)
    engine = engine_with_static_decode(loaded)
    engine.outputs = {}
    taken = []
    graphs = engine.runner.graphs
    original = graphs.run
    graphs.run = lambda batch, bucket, width: taken.append((len(batch.requests), bucket, width)) or original(batch, bucket, width)
    got = run(engine, work)
    assert list(got.values()) == list(expected.values())
    assert len(taken) > 20
    assert any(bucket > n for n, bucket, _ in taken), "no step was padded up to its bucket"
    assert all(bucket in graphs.buckets and bucket >= n for n, bucket, _ in taken)


def test_padding_rows_write_only_the_scratch_block(loaded):
    engine = engine_with_static_decode(loaded)
    graphs, cache = engine.runner.graphs, engine.runner.cache
    for prompt, n in requests(3):
        engine.add_request(prompt, n)
    for _ in range(3):  # some blocks of the pool hold K/V
        engine.step()
    pool = [layer.keys[: graphs.scratch_block].clone() for layer in cache.layers]
    assert any(kept.abs().sum() > 0 for kept in pool)
    for layer in cache.layers:  # earlier padded decode steps wrote the same padding K/V there
        layer.keys[graphs.scratch_block].zero_()
    scratch = cache.layers[0].keys[graphs.scratch_block].clone()
    graphs.load_padding(4, 8)
    with torch.inference_mode():
        graphs.forward(4, 8)
    for layer, kept in zip(cache.layers, pool):
        assert torch.equal(layer.keys[: graphs.scratch_block], kept), "padding wrote into a pool block"
    assert not torch.equal(cache.layers[0].keys[graphs.scratch_block], scratch), "padding wrote nowhere"


def test_prefill_and_mixed_steps_never_take_the_graph_path(loaded):
    engine = engine_with_static_decode(loaded)
    graphs = engine.runner.graphs
    shapes = []
    original = engine.runner.execute

    def execute(batch):
        shapes.append((list(batch.num_new_tokens), graphs.shape_for(batch)))
        return original(batch)

    engine.runner.execute = execute
    for prompt, n in requests(6):
        engine.add_request(prompt, n)
    engine.run()
    assert any(shape is not None for _, shape in shapes) and any(shape is None for _, shape in shapes)
    for new_tokens, shape in shapes:
        assert (shape is not None) == all(n == 1 for n in new_tokens), new_tokens


def test_width_buckets_cover_each_context():
    assert [_width_bucket(b) for b in (1, 8, 9, 16, 17, 100)] == [8, 8, 16, 16, 32, 128]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA GPU")
def test_captured_graphs_give_the_eager_tokens_on_cuda(tmp_path):
    config = ModelConfig(name="graph-test", num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         head_dim=16, hidden_size=64, intermediate_size=128, vocab_size=512,
                         max_position_embeddings=1024, weight_dtype="fp32", model_type="llama")
    on_gpu = load_model_directory(build_random_model(config, tmp_path / "m"), random_weights=True, device="cuda")
    work = requests(10)
    results = {}
    for eager in (True, False):
        args = EngineArgs(kv_cache_dtype="fp32", max_num_seqs=12, enforce_eager=eager, kv_cache_memory_bytes=64 << 20)
        engine = create_real_engine(on_gpu, args, record_outputs=True)
        results[eager] = run(engine, work)
        graphs = engine.runner.graphs
        if not eager:
            assert graphs.failure is None, graphs.failure
            assert graphs.replays > 20 and graphs.graphs
        del engine, graphs
    assert list(results[False].values()) == list(results[True].values())
