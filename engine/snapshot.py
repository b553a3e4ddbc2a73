"""The engine's state as plain numpy data: what the views draw, cheap enough for 60 a second."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

BLOCK_FREE = 0  # holds nothing reusable
BLOCK_CACHED = 1  # free, but still holds a prefix a new request may reuse
BLOCK_USED = 2  # holds tokens of one or more running requests
BLOCK_RESERVED = 3  # held by a request but no token in it yet (contiguous reservation)

REQUEST_DTYPE = np.dtype([
    ("request_id", np.int64),
    ("status", np.int8),  # RequestStatus
    ("num_prompt_tokens", np.int32),
    ("num_output_tokens", np.int32),
    ("max_tokens", np.int32),
    ("num_computed_tokens", np.int32),
    ("num_cached_prompt_tokens", np.int32),
    ("num_blocks", np.int32),
    ("num_preemptions", np.int32),
    ("arrival_time_s", np.float64),
    ("ttft_s", np.float64),  # NaN until the first token
])


@dataclass(frozen=True)
class Snapshot:
    time_s: float
    step: int
    block_size: int
    block_owner: np.ndarray  # int64 per block: request id that filled it, -1 for none
    block_state: np.ndarray  # uint8 per block: BLOCK_* codes
    block_ref_cnt: np.ndarray  # int32 per block: requests referencing it (>1: shared prefix)
    block_fill: np.ndarray  # uint16 per block: tokens held
    block_hash: np.ndarray  # uint64 per block: prefix-cache chain hash, 0 for none
    requests: np.ndarray  # REQUEST_DTYPE, the requests the engine holds (waiting and running)
    kv_usage: float
    num_running: int
    num_waiting: int
    # Models whose layer groups cache differently (sliding windows, linear-attention state): the
    # group each block serves (uint8 index into group_names); None for a single uniform group.
    block_group: np.ndarray | None = None
    group_names: tuple = ()

    @property
    def num_blocks(self) -> int:
        return len(self.block_state)

    def held_blocks_by_group(self) -> dict[str, int]:
        """Blocks held by requests, per kind of layer group (groups of one kind summed); {} when uniform."""
        if self.block_group is None:
            return {}
        held = self.block_group[(self.block_state == BLOCK_USED) | (self.block_state == BLOCK_RESERVED)]
        counts = np.bincount(held, minlength=len(self.group_names))
        out: dict[str, int] = {}
        for name, n in zip(self.group_names, counts):
            out[name] = out.get(name, 0) + int(n)
        return out

    def count(self, state: int) -> int:
        return int(np.count_nonzero(self.block_state == state))
