"""The engine: requests in, one step at a time, every step returned as data.

    Engine.step():  arrivals -> Scheduler.schedule() -> Runner.execute() -> tokens, finishes
    Engine.snapshot(): the block map and request table as numpy arrays

The clock is virtual: it advances by each step's duration (priced by the simulated runner, or
measured by a real one) and jumps over idle gaps to the next arrival, so an hour-long trace
replays in seconds and the same seed always gives the same run.
"""

from __future__ import annotations

import heapq
import operator
from dataclasses import dataclass, field, fields
from typing import Iterable, Iterator

import numpy as np

from kvscope.engine.config import EngineArgs, HardwareSpec, ModelConfig, as_served, resolve_engine_args
from kvscope.engine.contiguous_allocator import ContiguousKVCacheManager
from kvscope.engine.events import EventKind, EventSink
from kvscope.engine.hybrid_kv_cache_manager import HybridKVCacheManager, is_hybrid
from kvscope.engine.kv_cache_manager import PagedKVCacheManager
from kvscope.engine.memory_math import plan_memory, require_fit
from kvscope.engine.metrics import MetricsCollector
from kvscope.engine.request import Request, RequestSpec, RequestStatus
from kvscope.engine.runners.base import NO_TOKEN, StepOutOfMemory
from kvscope.engine.scheduler import Scheduler
from kvscope.engine.snapshot import BLOCK_RESERVED, Snapshot, block_state_and_fill, request_table


class EngineStalled(RuntimeError):
    """Work is queued but no step can make progress: a bug, reported instead of a hang."""


@dataclass(slots=True)
class StepResult:
    step: int
    start_time_s: float
    duration_s: float
    request_ids: list  # the batch, in order
    num_new_tokens: list  # per batch entry: prompt-chunk length, or 1 for a decode
    is_prefill: list  # per batch entry
    events: list = field(default_factory=list)
    num_running: int = 0
    num_waiting: int = 0
    kv_usage: float = 0.0  # share of blocks held by requests during the step
    num_tokens: int = 0
    num_prefill_tokens: int = 0
    compute_time_s: float = 0.0
    memory_time_s: float = 0.0
    unused_slots: int = 0  # allocated but empty token slots (fragmentation)
    num_preemptions: int = 0
    num_output_tokens: int = 0  # tokens sampled this step

    def __reduce__(self):
        # By default a slots object pickles its state as a dict of field names and values; a tuple
        # of the values takes half the time, and the window receives hundreds of steps a frame.
        return StepResult, _step_result_fields(self)


_step_result_fields = operator.attrgetter(*(f.name for f in fields(StepResult)))


class Engine:
    def __init__(self, model: ModelConfig, hardware: HardwareSpec, args: EngineArgs | None = None,
                 runner_factory=None, record_outputs: bool = False):
        """runner_factory(model, hardware, plan, args) builds the runner once the pool is sized;
        the simulated runner by default. record_outputs keeps finished requests' output token ids."""
        args = args or EngineArgs()
        self.model = model = as_served(model, hardware)  # a float32 checkpoint on a GPU: as vLLM serves it
        self.hardware = hardware
        self.args = args
        self.resolved = resolve_engine_args(args, model, hardware)
        self.plan = plan_memory(model, hardware, self.resolved)
        require_fit(self.plan)
        self.sink = EventSink()
        num_blocks = self.plan.num_blocks
        if args.allocation == "contiguous":
            self.kv = ContiguousKVCacheManager(num_blocks, self.plan.block_size, self.resolved.max_model_len, self.sink)
        elif is_hybrid(self.plan):
            self.kv = HybridKVCacheManager.for_plan(self.plan, model.sliding_window, args.enable_prefix_caching, self.sink)
        else:
            self.kv = PagedKVCacheManager(num_blocks, self.plan.block_size, args.enable_prefix_caching, self.sink)
        self.scheduler = Scheduler(self.resolved, self.kv, self.sink)
        if runner_factory is None:
            from kvscope.engine.runners.simulated import SimulatedRunner as runner_factory
        self.runner = runner_factory(model, hardware, self.plan, args)
        self.outputs: dict[int, list[int]] | None = {} if record_outputs else None
        self.finished_text_requests: list[Request] = []  # finished with prompt text: the host takes them
        self.metrics = MetricsCollector()
        self.clock = 0.0
        self.step_count = 0
        self.requests: dict[int, Request] = {}  # waiting and running; finished ones leave
        self._pending: list = []  # heap of (arrival_time, request_id, Request) not yet arrived
        self._source: Iterator[RequestSpec] | None = None
        self._source_next: RequestSpec | None = None
        self._next_id = 0
        self._consecutive_ooms = 0
        self._first_in_line: set[int] = set()

    # -- submission -----------------------------------------------------------------------------
    def add_request(self, prompt_token_ids, max_tokens: int, arrival_time: float | None = None,
                    stop_token_ids: frozenset = frozenset(), prompt_text: str | None = None,
                    first_in_line: bool = False) -> int:
        """Queue a request; it arrives at arrival_time on the engine clock (now if None). It ends
        after max_tokens output tokens, or sooner on one of stop_token_ids. first_in_line: it waits
        ahead of every queued request (as vLLM's priority scheduling puts a higher priority first)."""
        if max_tokens < 1:
            raise ValueError("max_tokens must be at least 1")
        if len(prompt_token_ids) < 1:
            raise ValueError("a prompt needs at least one token")
        request_id = self._next_id
        self._next_id += 1
        arrival = self.clock if arrival_time is None else max(arrival_time, 0.0)
        req = Request(request_id, prompt_token_ids, max_tokens, arrival, frozenset(stop_token_ids), prompt_text)
        heapq.heappush(self._pending, (arrival, request_id, req))
        if first_in_line:
            self._first_in_line.add(request_id)
        return request_id

    def add_workload(self, specs: Iterable[RequestSpec]) -> None:
        """Requests pulled lazily as the clock reaches their arrival, so a long trace costs no memory up front."""
        self._source = iter(specs)
        self._source_next = next(self._source, None)

    def _next_arrival_time(self) -> float | None:
        times = []
        if self._pending:
            times.append(self._pending[0][0])
        if self._source_next is not None:
            times.append(self._source_next.arrival_time_s)
        return min(times) if times else None

    def _rejection_reason(self, req: Request) -> str | None:
        total = req.total_tokens
        limit = self.resolved.max_model_len
        if total > limit:
            return f"prompt {req.num_prompt_tokens} + max_tokens {req.max_tokens} tokens exceed max_model_len {limit}"
        needed = self.kv.blocks_for_tokens(total - 1)
        if needed > self.kv.num_blocks:
            return f"needs {needed} blocks, more than the whole pool of {self.kv.num_blocks}"
        return None

    def _arrive(self, req: Request) -> None:
        self.metrics.on_arrival(req.arrival_time)
        self.sink.emit(EventKind.ARRIVED, req.request_id, value=float(req.num_prompt_tokens))
        reason = self._rejection_reason(req)
        if reason is not None:
            req.status = RequestStatus.REJECTED
            self.metrics.rejected += 1
            if self.metrics.first_rejection is None:
                self.metrics.first_rejection = f"request {req.request_id}: {reason}"
            self.sink.emit(EventKind.REJECTED, req.request_id, detail=reason)
            return
        self.requests[req.request_id] = req
        self.scheduler.add(req, first_in_line=req.request_id in self._first_in_line)
        self._first_in_line.discard(req.request_id)

    def _admit_arrivals(self) -> None:
        now = self.clock
        while True:
            spec = self._source_next
            if spec is not None and spec.arrival_time_s <= now:
                self.add_request(spec.prompt_token_ids, spec.max_tokens, spec.arrival_time_s, spec.stop_token_ids,
                                 spec.prompt_text)
                self._source_next = next(self._source, None)
                continue
            if self._pending and self._pending[0][0] <= now:
                self._arrive(heapq.heappop(self._pending)[2])
                continue
            break

    # -- stepping -------------------------------------------------------------------------------
    def has_unfinished_requests(self) -> bool:
        return bool(self.scheduler.has_work or self._pending or self._source_next is not None)

    def step(self) -> StepResult | None:
        """Run one engine step; None when there is nothing left to do."""
        sink = self.sink
        sink.now = self.clock
        self._admit_arrivals()
        while not self.scheduler.has_work:
            nxt = self._next_arrival_time()
            if nxt is None:
                return None if not sink.events else self._idle_result()
            self.clock = max(self.clock, nxt)
            sink.now = self.clock
            self._admit_arrivals()

        scheduler = self.scheduler
        batch = scheduler.schedule()
        if not batch.requests:
            raise EngineStalled(
                f"step {self.step_count}: {len(scheduler.waiting)} waiting, {len(scheduler.running)} running, "
                f"{self.kv.num_free_blocks} free blocks, and nothing could be scheduled"
            )
        kv_usage = self.kv.usage
        num_running = len(scheduler.running)
        unused_slots = self.kv.unused_slots
        try:
            result = self.runner.execute(batch)
        except StepOutOfMemory as exc:
            return self._recover_from_oom(batch, str(exc))
        self._consecutive_ooms = 0
        start = self.clock
        end = start + result.duration_s
        sink.now = end

        finished = []
        sampled = 0
        register = self.kv.register_full_blocks
        for req, n, token in zip(batch.requests, batch.num_new_tokens, result.sampled_token_ids):
            req.num_computed_tokens += n
            register(req)
            if token != NO_TOKEN:
                sampled += 1
                req.token_ids.append(token)
                if req.first_token_time is None:
                    req.first_token_time = end
                stop = token in req.stop_token_ids
                if stop or len(req.token_ids) - req.num_prompt_tokens >= req.max_tokens:
                    req.finish_reason = "stop" if stop else "length"
                    req.finish_time = end
                    finished.append(req)
        metrics = self.metrics
        if finished:
            scheduler.finish(finished)
            for req in finished:
                del self.requests[req.request_id]
                metrics.on_finish(req)
                if self.outputs is not None:
                    self.outputs[req.request_id] = req.token_ids[req.num_prompt_tokens:]
                sink.emit(EventKind.FINISHED, req.request_id, value=end - req.arrival_time)
                if req.prompt_text is not None:  # kept, tokens and all, for whoever shows its text
                    self.finished_text_requests.append(req)
                else:
                    req.token_ids = []  # a finished request keeps its metrics, not its tokens
                req.block_hashes = []
        metrics.preemptions = scheduler.num_preemptions
        metrics.on_step(result.duration_s, result.compute_time_s, kv_usage, num_running,
                        unused_slots, self._allocated_slots(), batch.num_tokens - batch.num_prefill_tokens, sampled)
        self.clock = end
        step = StepResult(
            self.step_count, start, result.duration_s,
            [r.request_id for r in batch.requests], batch.num_new_tokens, batch.is_prefill,
            sink.drain(), num_running, len(scheduler.waiting), kv_usage, batch.num_tokens,
            batch.num_prefill_tokens, result.compute_time_s, result.memory_time_s, unused_slots,
            len(batch.preempted), sampled,
        )
        self.step_count += 1
        return step

    def _recover_from_oom(self, batch, reason: str) -> StepResult:
        """Nothing of the failed step was computed, so the scheduler's state still holds: give the
        newest running request's blocks back (it recomputes later) and let the next step retry."""
        scheduler = self.scheduler
        self._consecutive_ooms += 1
        if self._consecutive_ooms > 3 and len(scheduler.running) <= 1:
            raise EngineStalled(f"the device runs out of memory even for a single request ({reason}); "
                                "lower max_num_batched_tokens or gpu_memory_utilization")
        preempted = len(batch.preempted)
        if len(scheduler.running) > 1:
            scheduler.preempt_newest()
            preempted += 1
        self.sink.emit(EventKind.OUT_OF_MEMORY, -1, detail=reason)
        return StepResult(self.step_count, self.clock, 0.0, [], [], [], self.sink.drain(),
                          len(scheduler.running), len(scheduler.waiting), self.kv.usage,
                          num_preemptions=preempted)

    def _allocated_slots(self) -> int:
        kv = self.kv
        return (kv.num_blocks - kv.num_free_blocks) * kv.block_size

    def _idle_result(self) -> StepResult:
        """Arrivals that were all rejected still surface their events."""
        return StepResult(self.step_count, self.clock, 0.0, [], [], [], self.sink.drain(),
                          len(self.scheduler.running), len(self.scheduler.waiting), self.kv.usage)

    def run(self, max_steps: int | None = None, on_step=None) -> dict:
        """Step until every request is done (or max_steps); returns the metrics summary."""
        steps = 0
        while max_steps is None or steps < max_steps:
            result = self.step()
            if result is None:
                break
            steps += 1
            if on_step is not None:
                on_step(result)
        return self.summary()

    def summary(self) -> dict:
        return self.metrics.summary(self.kv.prefix_queried_tokens, self.kv.prefix_hit_tokens)

    def engine_settings(self) -> dict:
        """The engine arguments as they ran: every default resolved against the model and hardware."""
        args, resolved = self.args, self.resolved
        return {
            "block_size": args.block_size,
            "gpu_memory_utilization": resolved.gpu_memory_utilization,
            "kv_cache_memory_bytes": resolved.kv_cache_memory_bytes,
            "max_model_len": resolved.max_model_len,
            "max_num_seqs": self.resolved.max_num_seqs,
            "max_num_batched_tokens": resolved.max_num_batched_tokens,
            "kv_cache_dtype": resolved.kv_cache_dtype,
            "enable_prefix_caching": args.enable_prefix_caching,
            "enable_chunked_prefill": args.enable_chunked_prefill,
            "tensor_parallel_size": resolved.tensor_parallel_size,
            "scheduling": args.scheduling,
            "allocation": args.allocation,
        }

    # -- snapshot -------------------------------------------------------------------------------
    def snapshot(self, marks: tuple | None = None) -> Snapshot:
        """The engine as the window draws it; marks: block_marks() when the caller has them already."""
        owner, ref_cnt, block_hash = self.kv.block_arrays()
        ref_cnt = ref_cnt.copy()
        state, fill = block_state_and_fill(ref_cnt, block_hash, self.kv.block_size)
        partial, tokens, reserved = marks if marks is not None else self.block_marks()
        fill[partial] = tokens
        state[reserved], fill[reserved] = BLOCK_RESERVED, 0
        return Snapshot(block_owner=owner.copy(), block_state=state, block_ref_cnt=ref_cnt, block_fill=fill,
                        block_hash=block_hash.copy(), **self.snapshot_fields())

    def block_marks(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """What the pool's arrays leave out: the running requests' last blocks holding tokens, the
        tokens in each, and their blocks held with none yet (a contiguous reservation's tail, or a
        step that was scheduled but never ran: device out of memory)."""
        bs, positional = self.kv.block_size, self.kv.positional_blocks
        partial, tokens, reserved = [], [], []
        for req in self.scheduler.running:
            blocks = positional(req)
            filled = -(-req.num_computed_tokens // bs)
            if filled and blocks:
                partial.append(blocks[filled - 1])
                tokens.append(req.num_computed_tokens - (filled - 1) * bs)
            if filled < len(blocks):
                reserved += blocks[filled:]
        return np.array(partial, np.int64), np.array(tokens, np.uint16), np.array(reserved, np.int64)

    def snapshot_fields(self) -> dict:
        """A snapshot's fields besides its block arrays: the clock, the counts, the request table."""
        kv, scheduler = self.kv, self.scheduler
        return dict(time_s=self.clock, step=self.step_count, block_size=kv.block_size, kv_usage=kv.usage,
                    requests=request_table(self.requests.values()), num_running=len(scheduler.running),
                    num_waiting=len(scheduler.waiting), **kv.group_snapshot())
