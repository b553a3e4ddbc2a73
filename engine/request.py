"""One request's life in the engine: its tokens, how many have been computed, its timestamps."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class RequestStatus(enum.IntEnum):
    PENDING = 0  # known to the engine, arrival time not reached yet
    WAITING = 1  # arrived, queued for admission (or re-admission after preemption)
    RUNNING = 2
    FINISHED = 3
    REJECTED = 4


class Request:
    __slots__ = (
        "request_id", "token_ids", "num_prompt_tokens", "max_tokens", "num_computed_tokens",
        "status", "block_ids", "block_hashes", "arrival_time", "first_scheduled_time",
        "first_token_time", "finish_time", "num_preemptions", "num_cached_prompt_tokens",
        "unused_slots", "num_registered_blocks", "stop_token_ids", "finish_reason", "prompt_text",
    )

    def __init__(self, request_id: int, prompt_token_ids: list, max_tokens: int, arrival_time: float,
                 stop_token_ids: frozenset = frozenset(), prompt_text: str | None = None):
        self.request_id = request_id
        self.token_ids = list(prompt_token_ids) if hasattr(prompt_token_ids, "__iter__") else []  # or a PromptOfLength
        self.num_prompt_tokens = len(prompt_token_ids)
        self.max_tokens = max_tokens
        self.num_computed_tokens = 0
        self.status = RequestStatus.PENDING
        self.block_ids: list[int] = []
        self.block_hashes: list[int] = []  # chain hashes of this request's full blocks, in order
        self.arrival_time = arrival_time
        self.first_scheduled_time: float | None = None
        self.first_token_time: float | None = None
        self.finish_time: float | None = None
        self.num_preemptions = 0
        self.num_cached_prompt_tokens = 0  # prompt tokens served from the prefix cache at admission
        self.unused_slots = 0  # allocated slots not yet holding a token (internal fragmentation)
        self.num_registered_blocks = 0  # leading full blocks already entered in the prefix cache
        self.stop_token_ids = stop_token_ids  # sampling one ends the request early (the model's end of sequence)
        self.finish_reason: str | None = None  # "stop" (a stop token), "length" (max_tokens)
        self.prompt_text = prompt_text  # what the prompt says, for whoever shows it; the engine never reads it

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def total_tokens(self) -> int:
        """Prompt plus the full requested output: the most slots this request will ever hold."""
        return self.num_prompt_tokens + self.max_tokens

    def __repr__(self) -> str:
        return (f"Request({self.request_id}, {self.status.name}, prompt={self.num_prompt_tokens}, "
                f"out={self.num_output_tokens}/{self.max_tokens}, computed={self.num_computed_tokens})")


@dataclass(frozen=True)
class RequestSpec:
    """A request as a workload hands it to the engine: its arrival, its prompt, how long it may run."""

    index: int
    arrival_time_s: float
    prompt_token_ids: list
    max_tokens: int
    shared_prefix_tokens: int = 0
    stop_token_ids: frozenset = frozenset()  # text requests end on one of these too: the model decides
    prompt_text: str | None = None  # the prompt as text, when it was text
