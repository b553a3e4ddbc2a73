"""Which requests run this step, and how many tokens each: the token budget is the only currency.

Continuous (iteration-level) batching, as in vLLM v1: every step first serves the running
requests (a decode token each, or the next chunk of a prompt), then admits waiting requests in
arrival order while the token budget, max_num_seqs and free blocks allow. When the pool runs dry
the newest running request is preempted: its blocks go back and it will recompute later.

Static batching, the baseline: a batch is fixed when the engine is empty and no one else joins
until every member has finished.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from kvscope.engine.config import ResolvedArgs
from kvscope.engine.events import EventKind, EventSink
from kvscope.engine.request import Request, RequestStatus


@dataclass(slots=True)
class ScheduledBatch:
    requests: list = field(default_factory=list)
    num_new_tokens: list = field(default_factory=list)
    is_prefill: list = field(default_factory=list)
    num_tokens: int = 0
    num_prefill_tokens: int = 0
    # Sum over scheduled tokens of the keys each attends to, and of the cached tokens each
    # request reads: what the cost model charges for attention and KV traffic.
    attention_pairs: int = 0
    kv_read_tokens: int = 0
    preempted: list = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.requests)


class Scheduler:
    def __init__(self, resolved: ResolvedArgs, kv_manager, sink: EventSink):
        args = resolved.args
        self.kv = kv_manager
        self.sink = sink
        self.max_num_seqs = resolved.max_num_seqs
        self.max_num_batched_tokens = resolved.max_num_batched_tokens
        self.chunked_prefill = args.enable_chunked_prefill
        self.static = args.scheduling == "static"
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.static_members: set[int] = set()  # static batching: ids of the current batch
        self.num_preemptions = 0

    def add(self, req: Request, first_in_line: bool = False) -> None:
        """Queue an arrived request: last in line, or first (a person waiting at the keyboard)."""
        req.status = RequestStatus.WAITING
        if first_in_line:
            self.waiting.appendleft(req)
        else:
            self.waiting.append(req)

    @property
    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    def preempt_newest(self) -> Request:
        victim = self.running.pop()
        self._preempt(victim, ScheduledBatch())
        return victim

    def _preempt(self, victim: Request, batch: ScheduledBatch) -> None:
        blocks = self.kv.free(victim)
        victim.num_computed_tokens = 0
        victim.num_preemptions += 1
        victim.status = RequestStatus.WAITING
        self.waiting.appendleft(victim)
        self.num_preemptions += 1
        batch.preempted.append(victim)
        self.sink.emit(EventKind.PREEMPTED, victim.request_id, tuple(blocks))

    def _add_entry(self, batch: ScheduledBatch, req: Request, n: int) -> None:
        computed = req.num_computed_tokens
        prefill = n > 1 or computed < req.num_prompt_tokens or computed < req.num_tokens - 1
        batch.requests.append(req)
        batch.num_new_tokens.append(n)
        batch.is_prefill.append(prefill)
        batch.num_tokens += n
        if prefill:
            batch.num_prefill_tokens += n
        # token t (0-based) attends to t + 1 keys; the n new tokens start at position `computed`
        batch.attention_pairs += n * computed + n * (n + 1) // 2
        batch.kv_read_tokens += computed

    def schedule(self) -> ScheduledBatch:
        batch = ScheduledBatch()
        budget = self.max_num_batched_tokens
        kv = self.kv
        running = self.running

        i = 0
        while i < len(running) and budget > 0:
            req = running[i]
            n = req.num_tokens - req.num_computed_tokens
            if n > budget:
                if not self.chunked_prefill:
                    i += 1
                    continue
                n = budget
            preempted_self = False
            while not kv.allocate_slots(req, n):
                victim = running.pop()
                self._preempt(victim, batch)
                if victim is req:
                    preempted_self = True
                    break
            if preempted_self:
                break
            self._add_entry(batch, req, n)
            budget -= n
            i += 1

        if batch.preempted:
            return batch  # the pool is short: admitting now would only preempt again
        if self.static:
            if not running and not self.static_members and self.waiting:
                self.static_members = {r.request_id for r, _ in zip(self.waiting, range(self.max_num_seqs))}
            admissible = self.static_members
        else:
            admissible = None

        waiting = self.waiting
        bs = kv.block_size
        while waiting and budget > 0 and len(running) < self.max_num_seqs:
            req = waiting[0]
            if admissible is not None and req.request_id not in admissible:
                break
            cached = kv.find_cached_prefix(req)
            n = req.num_tokens - len(cached) * bs
            if n > budget:
                if not self.chunked_prefill:
                    break
                n = budget
            if not kv.allocate_slots(req, n, cached):
                break
            waiting.popleft()
            running.append(req)
            req.status = RequestStatus.RUNNING
            kv.note_prefix_query(req, cached)
            if req.first_scheduled_time is None:
                req.first_scheduled_time = self.sink.now
                self.sink.emit(EventKind.ADMITTED, req.request_id, value=self.sink.now - req.arrival_time)
            self._add_entry(batch, req, n)
            budget -= n
        return batch

    def finish(self, finished: list[Request]) -> None:
        """Drop finished requests from the running list and give back their blocks."""
        for req in finished:
            self.kv.free(req)
            req.status = RequestStatus.FINISHED
            if self.static:
                self.static_members.discard(req.request_id)
        self.running = [r for r in self.running if r.status == RequestStatus.RUNNING]
