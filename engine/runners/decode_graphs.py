"""CUDA graphs for decode-only steps, captured as vLLM captures them.

A small model on a GPU spends a decode step launching kernels, not running them (the tiny model:
~7 ms a step on an H200, the GPU mostly idle). A step whose requests each decode one token is
replayed from a graph captured for its padded shape: batch sizes round up to BATCH_BUCKETS, block
tables to a power-of-two width. Inputs go through static buffers; padding rows write their K/V
to a scratch block past the pool's last one (the block manager never hands it out) and attend
only it, so they change nothing the window draws. Everything else runs eagerly.

`forward()` runs the same static-buffer step without a graph: how the CPU tests check that the
captured computation gives the eager path's tokens.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from kvscope.engine.runners.paged_attention import DecodeGroup, StepMetadata

# vLLM's capture sizes: 1, 2, 4, then multiples of 8 (here coarser past 64 to capture fewer)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384, 448, 512)
MIN_WIDTH_BLOCKS = 8
# Keys one captured step may gather per layer (bucket x width x block size): past it, eager
# groups read less padding than one graph would
MAX_GRAPH_KEYS = 1 << 20


def _bucket(value: int, buckets) -> int | None:
    return next((b for b in buckets if b >= value), None)


def _width_bucket(blocks: int) -> int:
    return max(MIN_WIDTH_BLOCKS, 1 << (blocks - 1).bit_length())


class DecodeGraphs:
    def __init__(self, hf_model, cache, block_size: int, scratch_block: int, max_batch: int, cache_argument: str):
        self.hf_model = hf_model
        self.cache = cache
        self.block_size = block_size
        self.scratch_block = scratch_block
        self.cache_argument = cache_argument
        self.buckets = tuple(b for b in BATCH_BUCKETS if b < max_batch) + (_bucket(max_batch, BATCH_BUCKETS) or max_batch,)
        device = cache.layers[0].keys.device
        size = self.buckets[-1]
        long = dict(dtype=torch.long, device=device)
        self.input_ids = torch.zeros((1, size), **long)
        self.positions = torch.zeros((1, size), **long)
        self.slots = torch.zeros(size, **long)
        self.lens = torch.ones(size, **long)
        self.rows = torch.arange(size, **long)
        self.tables: dict[int, torch.Tensor] = {}  # width -> [size, width] block ids
        self.graphs: dict[tuple[int, int], tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self.pool = None
        self.capture_time_s = 0.0
        self.replays = 0
        self.failure: str | None = None  # why capture failed: graphs are off from then on

    def shape_for(self, batch) -> tuple[int, int] | None:
        """(batch bucket, width) of a decode-only batch that a graph can run; None otherwise."""
        if self.failure is not None or any(n != 1 for n in batch.num_new_tokens):
            return None
        bucket = _bucket(len(batch.requests), self.buckets)
        if bucket is None:
            return None
        longest = max(req.num_computed_tokens for req in batch.requests) + 1
        width = _width_bucket(-(-longest // self.block_size))
        if bucket * width * self.block_size > MAX_GRAPH_KEYS:
            return None
        return bucket, width

    def load(self, batch, bucket: int, width: int) -> None:
        """Copy the batch into the static buffers; rows past the batch become padding."""
        bs = self.block_size
        ids = np.zeros(bucket, dtype=np.int64)
        positions = np.zeros(bucket, dtype=np.int64)
        slots = np.full(bucket, self.scratch_block * bs, dtype=np.int64)
        lens = np.ones(bucket, dtype=np.int64)
        tables = np.full((bucket, width), self.scratch_block, dtype=np.int64)
        for row, req in enumerate(batch.requests):
            pos = req.num_computed_tokens
            ids[row] = req.token_ids[pos]
            positions[row] = pos
            blocks = req.block_ids[: pos // bs + 1]
            slots[row] = blocks[-1] * bs + pos % bs
            lens[row] = pos + 1
            tables[row, : len(blocks)] = blocks
        self._copy(bucket, width, ids, positions, slots, lens, tables)

    def load_padding(self, bucket: int, width: int) -> None:
        self._copy(bucket, width, np.zeros(bucket, np.int64), np.zeros(bucket, np.int64),
                   np.full(bucket, self.scratch_block * self.block_size, np.int64), np.ones(bucket, np.int64),
                   np.full((bucket, width), self.scratch_block, np.int64))

    @torch.inference_mode()
    def _copy(self, bucket, width, ids, positions, slots, lens, tables) -> None:
        if width not in self.tables:
            self.tables[width] = torch.full((self.buckets[-1], width), self.scratch_block, dtype=torch.long,
                                            device=self.slots.device)
        self.input_ids[0, :bucket].copy_(torch.from_numpy(ids))
        self.positions[0, :bucket].copy_(torch.from_numpy(positions))
        self.slots[:bucket].copy_(torch.from_numpy(slots))
        self.lens[:bucket].copy_(torch.from_numpy(lens))
        self.tables[width][:bucket].copy_(torch.from_numpy(tables))

    def forward(self, bucket: int, width: int) -> torch.Tensor:
        """The decode step over the static buffers: [bucket, vocab] logits. No host sync, no
        Python decision on tensor data: what a graph can capture."""
        meta = StepMetadata(input_ids=self.input_ids[:, :bucket], position_ids=self.positions[:, :bucket],
                            slot_mapping=self.slots[:bucket], sample_index=self.rows[:bucket], sample_entries=[])
        meta.decode_groups.append(DecodeGroup(self.rows[:bucket], self.tables[width][:bucket], self.lens[:bucket]))
        meta.cache = self.cache
        self.cache.step = meta
        try:
            out = self.hf_model(input_ids=meta.input_ids, position_ids=meta.position_ids, use_cache=True,
                                logits_to_keep=0, kvscope_step=meta, **{self.cache_argument: self.cache})
        finally:
            self.cache.step = None
        return out.logits[0]

    def _capture(self, bucket: int, width: int) -> None:
        started = time.perf_counter()
        self.load_padding(bucket, width)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):  # warm-up: lazy initialisation and library handles happen outside the graph
                self.forward(bucket, width)
        torch.cuda.current_stream().wait_stream(side)
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool, capture_error_mode="thread_local"):
            # greedy tokens, not logits, leave the graph: [bucket] ids instead of [bucket, vocab]
            # floats held per graph
            tokens = self.forward(bucket, width).argmax(-1)
        self.graphs[(bucket, width)] = (graph, tokens)
        self.capture_time_s += time.perf_counter() - started

    def run(self, batch, bucket: int, width: int) -> torch.Tensor | None:
        """The batch's greedy tokens ([requests]) from a replayed graph; None where capture failed
        (the reason is kept in `failure` and the step runs eagerly). Off CUDA the same step runs
        without a graph."""
        if self.slots.device.type != "cuda":
            self.load(batch, bucket, width)
            return self.forward(bucket, width)[: len(batch.requests)].argmax(-1)
        if (bucket, width) not in self.graphs:
            try:
                self._capture(bucket, width)
            except Exception as exc:  # a model or driver that cannot be captured: eager from now on
                self.failure = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                torch.cuda.synchronize()
                return None
        graph, tokens = self.graphs[(bucket, width)]
        self.load(batch, bucket, width)
        graph.replay()
        self.replays += 1
        return tokens[: len(batch.requests)]
