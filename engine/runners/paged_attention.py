"""Attention over paged K/V, registered with transformers' AttentionInterface.

One forward runs the whole packed batch: prompt chunks and decode tokens of many requests side by
side in one sequence, no padding. Each layer's new K/V has already been written to its slots by
the PagedKVCache; here every query attends to its own request's blocks, read through its block
table. Decode tokens are attended in groups of similar context lengths (padded and masked); each
prompt chunk in its own call with a causal mask offset by the tokens already cached (a chunk with
nothing cached attends its own new K/V).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from transformers import AttentionInterface

ATTN_IMPLEMENTATION = "kvscope_paged"


@dataclass
class PrefillChunk:
    query_start: int  # first position of the chunk in the packed batch
    query_len: int
    context_len: int  # tokens attended by the chunk's last query: cached + chunk
    block_table: torch.Tensor  # [blocks covering context_len]
    mask: torch.Tensor | None  # [query_len, context_len] when tokens were cached before the chunk


@dataclass
class DecodeGroup:
    """Decode tokens of requests with similar context lengths, padded to the longest of them."""

    index: torch.Tensor  # [D] positions in T
    block_tables: torch.Tensor  # [D, width]
    lens: torch.Tensor  # [D] context lengths
    bias: torch.Tensor | None = None  # [D, 1, 1, width * block_size]: 0 inside the context, -inf past it;
    # made by the first layer that attends the group, reused by the others


# Requests per decode group off the CPU: padding to the group's longest context wastes little,
# and each group's calls are worth their fixed cost.
DECODE_GROUP_SIZE = 16
# On a CPU, where padding costs in proportion to the keys read: a group's calls (gather, SDPA)
# cost about as much as reading this many keys; requests share a group where padding them to a
# common length reads fewer extra keys than another group would cost.
CALL_COST_KEYS = 400


def group_by_width(widths: list[int], block_size: int) -> list[tuple[int, int]]:
    """Runs [start, end) of the sorted widths (blocks): a request starts a new run where padding
    the run's requests to its width would read more keys than a call costs (CALL_COST_KEYS)."""
    runs, start, total = [], 0, 0
    for i, width in enumerate(widths):
        if i > start and ((i - start) * width - total) * block_size > CALL_COST_KEYS:
            runs.append((start, i))
            start, total = i, 0
        total += width
    return runs + [(start, len(widths))] if widths else runs


# Query rows per SDPA call of a fresh prompt chunk of 256 tokens or more (510 tokens: 0.67x the
# time of one causal call, measured; shorter chunks gain nothing)
PREFILL_TILE = 64


@dataclass
class StepMetadata:
    input_ids: torch.Tensor  # [1, T]
    position_ids: torch.Tensor  # [1, T]
    slot_mapping: torch.Tensor  # [T]: block_id * block_size + offset of each new token
    sample_index: torch.Tensor  # positions in T whose logits are sampled
    sample_entries: list  # batch entry of each sampled position
    decode_groups: list = field(default_factory=list)
    prefills: list = field(default_factory=list)
    cache: object = None  # the PagedKVCache holding every layer's blocks


def build_step_metadata(batch, block_size: int, device) -> StepMetadata:
    """The tensors one forward needs, from the scheduler's batch and the requests' block tables."""
    input_ids, positions, slots = [], [], []
    sample_index, sample_entries = [], []
    decode_index, decode_tables, decode_lens = [], [], []
    prefill_specs = []
    cursor = 0
    for entry, (req, n) in enumerate(zip(batch.requests, batch.num_new_tokens)):
        start = req.num_computed_tokens
        end = start + n
        table = req.block_ids
        input_ids.extend(req.token_ids[start:end])
        pos = np.arange(start, end)
        positions.append(pos)
        slots.append(np.asarray(table, dtype=np.int64)[pos // block_size] * block_size + pos % block_size)
        if end == len(req.token_ids):
            sample_index.append(cursor + n - 1)
            sample_entries.append(entry)
        if n == 1:
            decode_index.append(cursor)
            decode_tables.append(table[: -(-end // block_size)])
            decode_lens.append(end)
        else:
            prefill_specs.append((cursor, n, start, end, table[: -(-end // block_size)]))
        cursor += n

    as_long = lambda values: torch.as_tensor(values, dtype=torch.long, device=device)  # noqa: E731
    meta = StepMetadata(
        input_ids=as_long(input_ids).unsqueeze(0),
        position_ids=as_long(np.concatenate(positions)).unsqueeze(0),
        slot_mapping=as_long(np.concatenate(slots)),
        sample_index=as_long(sample_index),
        sample_entries=sample_entries,
    )
    order = sorted(range(len(decode_index)), key=decode_lens.__getitem__)
    widths = [len(decode_tables[m]) for m in order]
    runs = (group_by_width(widths, block_size) if torch.device(device).type == "cpu" else
            [(i, min(i + DECODE_GROUP_SIZE, len(order))) for i in range(0, len(order), DECODE_GROUP_SIZE)])
    for first, end in runs:
        members = order[first:end]
        tables = np.zeros((len(members), widths[end - 1]), dtype=np.int64)
        for row, m in enumerate(members):
            tables[row, : len(decode_tables[m])] = decode_tables[m]
        meta.decode_groups.append(DecodeGroup(as_long([decode_index[m] for m in members]), as_long(tables),
                                              as_long([decode_lens[m] for m in members])))
    for query_start, n, cached, end, table in prefill_specs:
        mask = None
        if cached:
            queries = np.arange(cached, end)[:, None]
            mask = torch.as_tensor(np.arange(end)[None, :] <= queries, device=device)
        meta.prefills.append(PrefillChunk(query_start, n, end, as_long(table), mask))
    return meta


def _decode_attention(layer, q: torch.Tensor, group: DecodeGroup, scale: float, dtype) -> torch.Tensor:
    """One query per request, its padded context masked by the group's bias: one fused SDPA call
    over strided views of the gathered blocks (about half the time of matmuls per KV head). The
    query heads that share a KV head go in as that head's query positions (all attend the whole
    context): SDPA then reads each KV head once instead of once per query head (GQA), 0.72x the
    time of enable_gqa measured here (16 requests, 9 query / 3 KV heads), the same result."""
    heads, _, head_dim = q.shape
    k, v = layer.read(group.block_tables, dtype)  # [D, blocks, block_size, kv_heads, head_dim]
    d, kv_heads = k.shape[0], k.shape[-2]
    k = k.view(d, -1, kv_heads, head_dim).transpose(1, 2)
    v = v.view(d, -1, kv_heads, head_dim).transpose(1, 2)
    if group.bias is None:
        keys = torch.arange(k.shape[2], device=q.device)
        group.bias = torch.where(keys < group.lens[:, None], 0.0, float("-inf")).to(dtype)[:, None, None]
    # [D, kv_heads, heads per KV head, head_dim]: query head i reads KV head i // (heads / kv_heads)
    qd = q[:, group.index].transpose(0, 1).reshape(d, kv_heads, heads // kv_heads, head_dim)
    out = F.scaled_dot_product_attention(qd, k, v, attn_mask=group.bias, scale=scale)
    return out.reshape(d, heads, head_dim)


def paged_attention_forward(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
                            kvscope_step: StepMetadata | None = None, **kwargs):
    """query: [1, heads, T, head_dim]. Returns ([1, T, heads, head_dim], None) as transformers expects."""
    step = kvscope_step
    layer = step.cache.layers[module.layer_idx]
    q = query[0]  # [heads, T, head_dim]
    heads, total, head_dim = q.shape
    out = q.new_empty(total, heads, head_dim)
    dtype = q.dtype
    scale = scaling if scaling is not None else head_dim**-0.5
    for group in step.decode_groups:
        out[group.index] = _decode_attention(layer, q, group, scale, dtype)
    for chunk in step.prefills:
        s, n = chunk.query_start, chunk.query_len
        if chunk.mask is None and layer.keys.dtype == dtype:  # nothing cached before: the stored K/V are these
            k, v = key[:, :, s:s + n], value[:, :, s:s + n]
        else:
            k, v = layer.read(chunk.block_table, dtype)  # [blocks, block_size, kv_heads, head_dim]
            k = k.reshape(-1, k.shape[-2], head_dim)[: chunk.context_len].transpose(0, 1).unsqueeze(0)
            v = v.reshape(-1, v.shape[-2], head_dim)[: chunk.context_len].transpose(0, 1).unsqueeze(0)
        qp = q[:, s:s + n].unsqueeze(0)
        if chunk.mask is not None or n < 4 * PREFILL_TILE:
            o = F.scaled_dot_product_attention(qp, k, v, attn_mask=chunk.mask, is_causal=chunk.mask is None,
                                               scale=scaling, enable_gqa=True)
            out[s:s + n] = o[0].transpose(0, 1)
            continue
        # Tiles of query rows, each attending only the keys up to its last row: one causal call
        # reads every key for every row (SDPA's CPU kernel skips none in a block of 512 keys)
        for a in range(0, n, PREFILL_TILE):
            b = min(a + PREFILL_TILE, n)
            mask = None if a == 0 else torch.arange(b, device=q.device) <= torch.arange(a, b, device=q.device)[:, None]
            o = F.scaled_dot_product_attention(qp[:, :, a:b], k[:, :, :b], v[:, :, :b], attn_mask=mask,
                                               is_causal=a == 0, scale=scaling, enable_gqa=True)
            out[s + a:s + b] = o[0].transpose(0, 1)
    return out.unsqueeze(0), None


AttentionInterface.register(ATTN_IMPLEMENTATION, paged_attention_forward)
