"""Decode attention over the paged blocks (engine/runners/paged_attention.py): requests grouped by
context length, padded and masked, against plain attention over each request's own keys."""

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from kvscope.engine.runners.paged_attention import (PrefillChunk, StepMetadata, _decode_attention, build_step_metadata,
                                                    group_by_width, paged_attention_forward)
from kvscope.engine.runners.paged_cache import PagedKVCache

BLOCK_SIZE, KV_HEADS, HEADS, HEAD_DIM, NUM_BLOCKS = 4, 2, 6, 16, 128


def decode_batch(context_lens):
    """Requests each decoding one token after context_len - 1 cached ones, on distinct blocks."""
    requests, next_block = [], 1
    for n in context_lens:
        blocks = list(range(next_block, next_block + -(-n // BLOCK_SIZE)))[::-1]  # out of order, as reused blocks are
        next_block += len(blocks)
        requests.append(SimpleNamespace(num_computed_tokens=n - 1, token_ids=list(range(n)), block_ids=blocks))
    assert next_block <= NUM_BLOCKS
    return SimpleNamespace(requests=requests, num_new_tokens=[1] * len(requests))


def filled_cache(kv_cache_dtype, seed=0):
    cache = PagedKVCache(1, NUM_BLOCKS, BLOCK_SIZE, KV_HEADS, HEAD_DIM, kv_cache_dtype, "cpu")
    layer = cache.layers[0]
    gen = torch.Generator().manual_seed(seed)
    for store in (layer.keys, layer.values):
        values = torch.randn(store.shape, generator=gen)
        store.copy_(values.to(layer.kv_dtype).view(store.dtype) if layer.is_fp8 else values.to(store.dtype))
    return layer


def reference_attention(layer, q, batch, dtype, scale):
    """Each request's query heads over its own keys, read token by token through its block table."""
    out = []
    for i, req in enumerate(batch.requests):
        n = req.num_computed_tokens + 1
        k, v = layer.read(torch.tensor(req.block_ids), torch.float32)
        k = k.reshape(-1, KV_HEADS, HEAD_DIM)[:n].repeat_interleave(HEADS // KV_HEADS, dim=1)  # [n, heads, head_dim]
        v = v.reshape(-1, KV_HEADS, HEAD_DIM)[:n].repeat_interleave(HEADS // KV_HEADS, dim=1)
        weights = torch.softmax(torch.einsum("hd,nhd->hn", q[:, i].float(), k) * scale, dim=-1)
        out.append(torch.einsum("hn,nhd->hd", weights, v))
    return torch.stack(out).to(dtype)


def attend(layer, q, meta, dtype, scale):
    out = q.new_empty(q.shape[1], HEADS, HEAD_DIM)
    for group in meta.decode_groups:
        out[group.index] = _decode_attention(layer, q, group, scale, dtype)
    return out


@pytest.mark.parametrize("kv_cache_dtype, dtype, atol", [("fp32", torch.float32, 1e-5), ("bf16", torch.bfloat16, 2e-2),
                                                         ("fp8_e4m3", torch.float32, 1e-5)])
@pytest.mark.parametrize("context_lens", [[3, 5, 40, 41, 200], [2, 3], [7]])
def test_grouped_decode_attention_is_plain_attention_over_each_requests_blocks(kv_cache_dtype, dtype, atol,
                                                                                context_lens):
    """Context lengths far apart (a request alone in its group), all inside one block, and a
    single request; blocks handed out in reverse order, as reused blocks are."""
    layer = filled_cache(kv_cache_dtype)
    batch = decode_batch(context_lens)
    meta = build_step_metadata(batch, BLOCK_SIZE, "cpu")
    assert sum(len(g.index) for g in meta.decode_groups) == len(context_lens)
    q = torch.randn(HEADS, len(context_lens), HEAD_DIM, generator=torch.Generator().manual_seed(1)).to(dtype)
    scale = HEAD_DIM**-0.5
    with torch.inference_mode():
        out = attend(layer, q, meta, dtype, scale)
    torch.testing.assert_close(out.float(), reference_attention(layer, q, batch, dtype, scale).float(), atol=atol, rtol=0)


def test_decode_groups_follow_the_context_lengths():
    meta = build_step_metadata(decode_batch([3, 5, 40, 41, 200]), BLOCK_SIZE, "cpu")
    # 3 and 5 tokens pad to 11 blocks with 40 and 41 (under a call's cost); 200 tokens would pad the others by 4 x 39 blocks
    assert [g.index.tolist() for g in meta.decode_groups] == [[0, 1, 2, 3], [4]]
    assert [g.block_tables.shape[1] for g in meta.decode_groups] == [11, 50]
    assert meta.decode_groups[0].lens.tolist() == [3, 5, 40, 41]


def test_requests_share_a_group_unless_padding_them_costs_more_than_a_call():
    assert group_by_width([3] * 50, 32) == [(0, 50)]  # equal widths: never split
    assert group_by_width([1, 1, 2, 2, 40], 32) == [(0, 4), (4, 5)]
    assert group_by_width([], 32) == []
    widths = sorted([1, 2, 2, 3, 5, 8, 9, 9, 17, 30, 31, 64, 65, 200] * 3)
    runs = group_by_width(widths, 16)
    assert runs[0][0] == 0 and runs[-1][1] == len(widths) and all(a[1] == b[0] for a, b in zip(runs, runs[1:]))
    for start, end in runs:  # the keys read for padding stay within a call's cost
        padding = sum(widths[end - 1] - w for w in widths[start:end]) * 16
        assert padding <= 400 + 16 * widths[end - 1]


@pytest.mark.parametrize("prompt_len", [255, 256, 300, 513])
def test_a_long_fresh_prompt_chunk_in_tiles_is_one_causal_attention(prompt_len):
    """Chunks of 256 tokens or more go in tiles of query rows (PREFILL_TILE), each attending the
    keys up to its last row; the result is that of one causal call over the chunk."""
    layer = filled_cache("fp32")
    gen = torch.Generator().manual_seed(2)
    query = torch.randn(1, HEADS, prompt_len, HEAD_DIM, generator=gen)
    key, value = torch.randn(2, 1, KV_HEADS, prompt_len, HEAD_DIM, generator=gen)
    step = StepMetadata(input_ids=None, position_ids=None, slot_mapping=None, sample_index=None, sample_entries=[],
                        prefills=[PrefillChunk(0, prompt_len, prompt_len, torch.arange(1), None)],
                        cache=SimpleNamespace(layers=[layer]))
    with torch.inference_mode():
        out, _ = paged_attention_forward(SimpleNamespace(layer_idx=0), query, key, value, None, scaling=0.25,
                                         kvscope_step=step)
        expected = F.scaled_dot_product_attention(query, key, value, is_causal=True, scale=0.25, enable_gqa=True)
    torch.testing.assert_close(out[0], expected[0].transpose(0, 1), atol=1e-5, rtol=0)
