"""The live engine as a session (protocol.py): what runs where the engine lives.

An EngineSession owns the Engine: it builds it (loading a real model can take seconds), steps it
while playing -- pacing the simulated clock to a multiple of real time -- and gathers what the
window needs. When the window asks (at most once per frame) take_frame() hands over one
FrameDelta: a fresh snapshot and the steps, events and per-request latencies since the previous
frame (a request's TTFT and queue time as soon as its first token is made, its finish time when it
ends), bounded so a frame costs the same however fast the engine runs. The engine never waits for
the window; what the window had no time to draw is dropped or summarised. Steps are kept as the
engine returns them (one append a step) and turned into columns once per frame (StepTable).

With a model that reads and writes text (a tokenizer with a chat template), a chat workload's
requests are its conversations' text, and submit_prompt adds a typed one. Each frame carries the
words of the text requests that changed since the last: the prompt once, the answer so far
(decoded token by token as it streams), and why it ended.

The session runs in a process of its own (process_host.py); it is plain single-threaded code, so
tests and benchmarks can also drive it directly.
"""

from __future__ import annotations

import time
import traceback
from collections import deque
from dataclasses import dataclass
from itertools import chain

import numpy as np

from kvscope.engine import Engine, EngineArgs
from kvscope.engine.config import ConfigError, HardwareSpec, ModelConfig
from kvscope.engine.units import format_bytes
from kvscope.app.lab.chat_workload import MAX_TEXT_CHARS
from kvscope.app.lab.text_tokenizer import ChatTokenizer, chat_tokenizer_for, why_no_text
from kvscope.app.lab.workload import WorkloadSpec, generate_requests

from kvscope.app.host.pacing import MAX_WAIT_S, Pacing
from kvscope.app.host.points import point_array, step_point
from kvscope.app.host.process_tuning import leave_a_core_to_the_window
from kvscope.app.host.protocol import (
    APPLY,
    EVENTS_KEPT,
    FAIL,
    PAUSE,
    PLAY,
    RECORD,
    SPEED,
    STEP,
    STEPS_KEPT,
    STOP_RECORDING,
    SUBMIT_PROMPT,
    FrameDelta,
    RequestText,
    Session,
)
from kvscope.app.host.session_blocks import SnapshotSender

# the frame and its bounds, where the live engine's users have always imported them from
__all__ = ["EVENTS_KEPT", "STEPS_KEPT", "EngineInfo", "EngineSession", "FrameDelta", "RunConfig"]

# Holding the newest 400 steps alive costs ~1.5 us a step in cache misses: ~10 % of a 15 us
# simulated step, nothing next to a real forward. Engines whose steps are this cheap keep no
# steps between frames: asked for a frame, the session keeps the next 400 first.
CHEAP_STEP_S = 0.0001
SERIES_INTERVAL_S = 0.002  # at most one plot point per 2 ms of wall time: fast runs are thinned here
SUMMARY_INTERVAL_S = 0.5  # percentiles over every finished request: not worth 60 times a second
SUMMARY_COST_FACTOR = 200  # ... and, however many requests have finished, <= 0.5 % of the engine's time
CLOCK_CHECK_INTERVAL_S = 0.0001  # a flat-out engine reads the wall clock about this often ...
MAX_STEPS_PER_CLOCK_CHECK = 32  # ... and at least every this many steps
FIRST_TOKEN_TOLERANCE_S = 1e-9  # see _collect_finished
TYPED_PROMPT_MAX_TOKENS = 256  # a typed prompt's answer ends here if the model has not ended it (or at the context)


@dataclass(frozen=True)
class RunConfig:
    """Everything that defines a run; applying a new one rebuilds the engine in place."""

    backend: str  # simulated | real
    model: ModelConfig
    hardware: HardwareSpec
    engine_args: EngineArgs
    workload: WorkloadSpec
    seed: int = 0
    model_path: str | None = None  # real backend: a local model directory instead of the preset's shape


@dataclass(frozen=True)
class EngineInfo:
    """What the window knows of the engine it shows, reported by the engine itself once built."""

    label: str
    backend: str  # the runner's name: simulated | real
    plan: object  # MemoryPlan
    resolved: object  # ResolvedArgs
    args: EngineArgs
    model: ModelConfig
    hardware: HardwareSpec
    workload: WorkloadSpec
    allocation: str  # the KV manager in use: paged | contiguous
    kv_tensor_bytes: int | None = None  # real backend: bytes of the paged K/V tensors actually allocated
    # None: it answers typed prompts; else why it cannot (a replay only shows what happened)
    no_text_reason: str | None = "only the live engine answers typed prompts"

    def __getitem__(self, key: str):  # the window reads it like the dict it used to be
        return getattr(self, key)


def build_simulated_engine(config: RunConfig) -> Engine:
    """The simulated engine and workload a RunConfig describes. Deterministic: two built from one
    config take the same steps (`kvscope bench gui` steps one headless beside the window's)."""
    engine = Engine(config.model, config.hardware, config.engine_args)
    engine.add_workload(generate_requests(config.workload, engine.model.vocab_size, seed=config.seed,
                                          longest_request=engine.resolved.max_model_len))
    return engine


# The status of a frame whose Apply built no engine: the window tells that error from the others by it.
BUILD_FAILED_STATUS = "could not build the engine"


class EngineSession(Session):
    """The live engine: apply(RunConfig) builds it, record / stop_recording record it."""

    def __init__(self):
        self.engine: Engine | None = None
        self.speed = 1.0  # simulated seconds per wall second; 0 = as fast as possible
        self.playing = False
        self._pending = FrameDelta()
        self._kept: deque = deque(maxlen=STEPS_KEPT)  # the newest StepResults, for the next frame
        self._stepped = True  # the engine changed since the last snapshot
        self._last_summary = 0.0
        self._last_point = 0.0
        self._point_steps = 0  # engine steps at the last point
        self._last_result = None  # the newest step's result (on the flat-out path: as of the last advance())
        self._point_base = (0, 0.0, 0.0, 0)  # output tokens, compute time, busy time, preemptions at the last point
        self._summary_interval = SUMMARY_INTERVAL_S
        self._steps_per_clock_check = 1
        self.mean_step_s = float("inf")  # wall time of a flat-out step, measured over the last advance()
        self._pacing = Pacing()
        self._finished_seen = 0
        # Ids (sorted) of requests whose first token a frame has carried and that were still in the
        # engine at the last snapshot; and that snapshot's clock: a request finishing later had its
        # first token sent with the snapshot if it came by then (_collect_finished).
        self._first_token_sent = np.zeros(0, dtype=np.int64)
        self._snapshot_clock = -float("inf")
        self._config: RunConfig | None = None
        self._label = ""
        self._recorder = None  # a RunRecorder while the window records the run
        self._points: list = []  # SeriesPoints since the last frame
        self._frame_due_at_step: int | None = None  # a frame asked for goes out once the engine is here
        self._chat: ChatTokenizer | None = None  # the model's tokenizer, when it can hold a conversation
        self._no_text_reason = ""
        self._streams: dict = {}  # request id -> TextStream of text requests seen and not finished
        self._typed: set = set()  # request ids that came from submit_prompt
        self._snapshot_sender: SnapshotSender | None = None  # in the host's process: snapshots go as changes

    # -- commands -------------------------------------------------------------------------------
    def handle(self, command: str, arg) -> None:
        # Whatever comes next (a single step, a paced run, a new engine) is kept for the next frame;
        # after a pause or a single step that frame also brings a summary with the snapshot.
        self.keep_history_for_next_frame()
        if command in (PAUSE, STEP):
            self._stepped = self.engine is not None
            self._last_summary = -float("inf")
        if command == APPLY:
            config, play = arg
            self._build(config)
            self.playing = play and self.engine is not None
            self._pacing.restart()
        elif command == PLAY and self.engine is not None:
            self.playing = True
            self._pacing.restart()
        elif command == PAUSE:
            self.playing = False
        elif command == STEP and self.engine is not None:
            self.playing = False
            self._run_one_step()
        elif command == SPEED:
            self.speed = arg
            self._pacing.restart()
        elif command == RECORD:
            self._start_recording(arg)
        elif command == STOP_RECORDING:
            self._stop_recording("recording stopped")
        elif command == SUBMIT_PROMPT:
            self._submit_prompt(arg)
        elif command == FAIL:  # the self-test and tests check that an engine error reaches the window
            def broken_step():
                raise RuntimeError(arg)
            if self.engine is not None:
                self.engine.step = broken_step

    @property
    def cheap_steps(self) -> bool:
        """Steps so cheap that keeping them between frames would cost the engine (CHEAP_STEP_S)."""
        return self.mean_step_s < CHEAP_STEP_S

    def keep_history_for_next_frame(self) -> None:
        """From now on keep the newest STEPS_KEPT steps: a frame may be asked for soon."""
        if self._kept.maxlen != STEPS_KEPT:
            self._kept = deque(maxlen=STEPS_KEPT)

    def frame_requested(self) -> None:
        if self.flat_out and self._kept.maxlen == 0:
            # Cheap steps are kept only when asked for (holding the newest STEPS_KEPT all the time
            # cost ~10 % of the engine's speed): the frame goes out after the next ones. (Steps
            # that have just stopped being cheap wait the same way: none were kept since the last.)
            self.keep_history_for_next_frame()
            self._frame_due_at_step = self.engine.step_count + STEPS_KEPT

    def frame_ready(self) -> bool:
        due = self._frame_due_at_step
        return due is None or not self.flat_out or self.engine.step_count >= due

    def restart_snapshot_changes(self) -> None:
        self._snapshot_sender = self._snapshot_sender or SnapshotSender()
        self._snapshot_sender.restart()
        self._stepped = self.engine is not None  # the whole snapshot goes with the next frame

    def close(self) -> None:
        self._stop_recording("the window closed")  # a recording in progress is finished, not lost

    def take_frame(self, keep_history: bool | None = None) -> FrameDelta:
        """Everything since the last call, with a snapshot if the engine changed meanwhile. Unless
        told, it keeps no steps for the next frame while cheap steps run flat out: the next
        frame_requested() starts keeping them."""
        if keep_history is None:
            keep_history = not (self.flat_out and self.cheap_steps)
        self._frame_due_at_step = None
        snapshot_due = self.engine is not None and self._stepped
        if snapshot_due:
            self._collect_finished()  # judged against the previous snapshot (see _collect_finished)
        frame, self._pending = self._pending, FrameDelta()
        if self._kept:
            frame.carry_steps(self._kept)
        self._kept = deque(maxlen=STEPS_KEPT if keep_history else 0)
        frame.playing = self.playing
        frame.points, self._points = point_array(self._points), []
        if self._recorder is not None:
            frame.recording_steps = self._recorder.num_steps
        if self._chat is not None and self.engine is not None:
            frame.texts = self._changed_texts()
        if snapshot_due:
            sender = self._snapshot_sender
            frame.snapshot = sender.snapshot(self.engine) if sender is not None else self.engine.snapshot()
            self._stepped = False
            self._send_first_tokens(frame, frame.snapshot.requests)
            self._snapshot_clock = frame.snapshot.time_s
            now = time.perf_counter()
            if frame.summary is None and now - self._last_summary >= self._summary_interval:
                frame.summary = self.engine.summary()
                self._last_summary = time.perf_counter()
                self._summary_interval = max(SUMMARY_INTERVAL_S, SUMMARY_COST_FACTOR * (self._last_summary - now))
        return frame

    # -- running --------------------------------------------------------------------------------
    @property
    def flat_out(self) -> bool:
        """Playing with nothing to wait for: every moment spent elsewhere is a step not taken."""
        return self.playing and self.engine is not None and (self.speed == 0 or self.engine.runner.name != "simulated")

    @property
    def core_bound(self) -> bool:
        return self.flat_out and self.engine.runner.name == "simulated"

    def advance(self, budget_s: float = 0.0) -> float:
        """Engine steps for about budget_s of wall time (at least one), or -- when a paced engine
        is ahead of the wall clock -- the seconds to wait before the next. Stepping in bursts
        keeps the caller's own checks (the engine process polls its pipe) off the per-step path."""
        engine = self.engine
        paced = self.speed > 0 and engine.runner.name == "simulated"
        if not paced and self._recorder is None:
            return self._advance_flat_out(budget_s)
        deadline = time.perf_counter() + budget_s
        while True:
            # With nothing left to arrive or run there is nothing to pace: the next step ends the
            # workload now (a run whose every request was rejected on arrival jumped its clock over
            # all the arrivals, and would otherwise wait that long before saying it was done).
            if paced and engine.has_unfinished_requests():
                ahead = engine.clock - self._pacing.target(engine.clock, self.speed, time.perf_counter())
                if ahead > 0:
                    return min(ahead / self.speed, MAX_WAIT_S)
            now = self._run_one_step()
            if now is None or now >= deadline:
                return 0.0

    def _advance_flat_out(self, budget_s: float) -> float:
        """advance() with nothing to pace and nothing to record: the loop the window's cost is
        measured on. A simulated step takes ~15 us at maximum speed, and reading the clock, two
        calls and copying the events after each step cost ~10 % of that; here a step costs at most
        one append, and the clock is read every few steps (about every CLOCK_CHECK_INTERVAL_S)."""
        step = self.engine.step
        keep_step = self._kept.append
        keeping = self._kept.maxlen != 0
        per_check = self._steps_per_clock_check
        clock = time.perf_counter
        started = now = clock()
        deadline = started + budget_s
        steps = 0
        self._stepped = True
        result = self._last_result
        try:
            while now < deadline or not steps:
                for _ in range(per_check):
                    stepped = step()
                    if stepped is None:
                        self._workload_complete(result)
                        return 0.0
                    result = stepped
                    if keeping:
                        keep_step(result)
                steps += per_check
                now = clock()
                if now - self._last_point >= SERIES_INTERVAL_S:
                    self._last_point = now
                    self._add_point(result)
        except Exception:  # noqa: BLE001 - the engine stops; the window shows the error and stays usable
            self._engine_failed()
            return 0.0
        self._last_result = result
        self.mean_step_s = (now - started) / steps
        self._steps_per_clock_check = max(1, min(MAX_STEPS_PER_CLOCK_CHECK,
                                                 int(CLOCK_CHECK_INTERVAL_S / max(self.mean_step_s, 1e-9))))
        return 0.0

    # -- recording ------------------------------------------------------------------------------
    def _start_recording(self, path: str) -> None:
        from kvscope.app.lab.recording import RunRecorder

        if self.engine is None:
            self._pending.error = "Nothing to record: no engine is built (apply the settings first)."
            self._pending.recording_stopped = True  # the window unchecks Record and says it of the recording
            return
        self._stop_recording("a new recording started")
        try:
            self._recorder = RunRecorder(self.engine, path, {"label": self._label, "workload": self._config.workload,
                                                             "seed": self._config.seed})
        except (OSError, ConfigError) as exc:
            self._pending.error = f"Cannot record to {path}: {exc}"
            self._pending.recording_stopped = True
            return
        self._pending.status = f"recording to {path}"

    def _stop_recording(self, note: str) -> None:
        recorder, self._recorder = self._recorder, None
        if recorder is None:
            return
        self._pending.recording_stopped = True
        try:
            size = recorder.close(self.engine.summary() if self.engine is not None else None, note=note)
        except (OSError, ConfigError) as exc:  # RecordingError (a ConfigError) wraps a failed write
            self._pending.error = f"The recording {recorder.path} could not be finished: {exc}"
            return
        self._pending.status = (f"recording written to {recorder.path} ({format_bytes(size)}, "
                                f"{recorder.num_steps:,} step{'s' if recorder.num_steps != 1 else ''}); open it with File > Open recording")

    def _build(self, config: RunConfig) -> None:
        self._stop_recording("the engine was rebuilt")
        stopped = self._pending  # what stopping it said ("written to", or why it could not be finished)
        try:
            self._build_engine(config)
        finally:
            _keep_recording_note(self._pending, stopped)

    def _build_engine(self, config: RunConfig) -> None:
        self._config = config
        self.engine = None
        self._finished_seen = 0
        self._first_token_sent = np.zeros(0, dtype=np.int64)
        self._snapshot_clock = -float("inf")
        self._point_base = (0, 0.0, 0.0, 0)
        self._point_steps = 0
        self._last_result = None
        self._kept = deque(maxlen=STEPS_KEPT)
        self._steps_per_clock_check = 1
        self.mean_step_s = float("inf")
        self._summary_interval = SUMMARY_INTERVAL_S
        self._points = []
        self._chat, self._streams, self._typed = None, {}, set()
        self._pending = FrameDelta(status=f"building the {config.backend} engine ...")
        try:
            if config.backend == "real":
                from kvscope.app.lab.chat_defaults import live_chat_dtype
                from kvscope.app.lab.real_backend import create_real_engine, load_for_real_backend
                from kvscope.app.lab.trained_model import TRAINED_MODEL

                if config.model_path or config.model.name != TRAINED_MODEL.name:
                    loaded = load_for_real_backend(model_path=config.model_path,
                                                   architecture=None if config.model_path else config.model)
                else:  # the trained model's own weights, not random ones of its shape
                    loaded = load_for_real_backend(TRAINED_MODEL.name, dtype=live_chat_dtype())
                engine = create_real_engine(loaded, config.engine_args)
                label = loaded.label
                leave_a_core_to_the_window()
                self._no_text_reason = why_no_text("real", loaded)
                try:
                    self._chat = chat_tokenizer_for(loaded)
                except ConfigError as exc:  # a broken chat template: only text needs it
                    if config.workload.is_text:
                        raise
                    self._chat, self._no_text_reason = None, str(exc)
                engine.add_workload(generate_requests(config.workload, engine.model.vocab_size, seed=config.seed,
                                                      tokenizer=self._chat, longest_request=engine.resolved.max_model_len))
            else:
                engine = build_simulated_engine(config)
                label = f"{config.model.name} (simulated on {config.hardware.name})"
                self._no_text_reason = why_no_text(config.backend)
        except ConfigError as exc:
            self._pending = FrameDelta(error=str(exc), status=BUILD_FAILED_STATUS)
            return
        except Exception:  # noqa: BLE001 - shown to the user; the window keeps working
            self._pending = FrameDelta(error=traceback.format_exc(), status=BUILD_FAILED_STATUS)
            return
        self.engine = engine
        self._label = label
        cache = getattr(engine.runner, "cache", None)
        info = EngineInfo(label=label, backend=engine.runner.name, plan=engine.plan, resolved=engine.resolved,
                          args=engine.args, model=engine.model, hardware=engine.hardware, workload=config.workload,
                          allocation=engine.kv.kind, kv_tensor_bytes=getattr(cache, "nbytes", None),
                          no_text_reason=None if self._chat is not None else self._no_text_reason)
        self._pending = FrameDelta(engine_info=info, status=f"ready: {label}")
        self._stepped = True

    # -- text -----------------------------------------------------------------------------------
    def _submit_prompt(self, text) -> None:
        """A typed prompt joins the run as one more chat request, or is refused with the reason."""
        engine = self.engine
        reason = None
        if engine is None:
            reason = "no engine is running: apply the settings first"
        elif self._chat is None:
            reason = f"this engine cannot answer text: {self._no_text_reason}"
        elif not isinstance(text, str) or not text.strip():
            reason = "the prompt is empty"
        elif len(text) > MAX_TEXT_CHARS:  # refused before it is tokenized (seconds for megabytes)
            reason = f"the prompt is {len(text):,} characters; a typed prompt has at most {MAX_TEXT_CHARS:,}"
        if reason is None:
            chat = self._config.workload.chat
            system = [{"role": "system", "content": chat.system_prompt}] if chat is not None else []
            try:  # the template passed its trial at load; a typed conversation may still cross a bound
                ids, rendered = self._chat.chat_prompt(system + [{"role": "user", "content": text.strip()}])
            except ConfigError as exc:
                self._pending.prompt_refused = str(exc)
                return
            limit = engine.resolved.max_model_len
            room = limit - len(ids)
            needed = engine.kv.blocks_for_tokens(len(ids))
            if room < 1:
                reason = (f"the prompt is {len(ids):,} tokens with the chat template, and the context "
                          f"(max_model_len) holds {limit:,}: no room left for an answer")
            elif needed > engine.kv.num_blocks:
                reason = (f"the prompt needs {needed:,} KV blocks and the whole pool holds {engine.kv.num_blocks:,}")
        if reason is not None:
            self._pending.prompt_refused = reason
            return
        request_id = engine.add_request(ids, min(TYPED_PROMPT_MAX_TOKENS, room), stop_token_ids=self._chat.stop_token_ids,
                                        prompt_text=rendered, first_in_line=True)
        self._typed.add(request_id)
        self._pending.submitted_request_id = request_id
        self.playing = True  # the answer is what the user waits for: a finished or paused run picks it up
        self._pacing.restart()

    def _changed_texts(self) -> dict:
        """RequestText of every text request whose words changed since the last frame."""
        texts = {}
        streams = self._streams
        finished, self.engine.finished_text_requests = self.engine.finished_text_requests, []
        for req in chain(self.engine.requests.values(), finished):
            if req.prompt_text is None:
                continue
            request_id = req.request_id
            stream = streams.get(request_id)
            prompt = None
            if stream is None:
                stream = streams[request_id] = self._chat.stream()
                prompt = req.prompt_text
            produced = len(req.token_ids) - req.num_prompt_tokens
            if produced > stream.num_tokens:
                stream.feed(req.token_ids[req.num_prompt_tokens + stream.num_tokens:])
            elif prompt is None and req.finish_reason is None:
                continue  # nothing new
            texts[request_id] = RequestText(prompt, stream.text, req.finish_reason, request_id in self._typed)
            if req.finish_reason is not None:
                del streams[request_id]
                self._typed.discard(request_id)
        return texts

    def _run_one_step(self) -> float | None:
        """One step and its bookkeeping; the wall time after it, or None if the engine stopped."""
        try:
            result = self.engine.step()
        except Exception:  # noqa: BLE001 - the engine stops; the window shows the error and stays usable
            self._engine_failed()
            return None
        self._stepped = True
        if result is None:
            self._workload_complete(self._last_result)
            return None
        self._last_result = result
        if self._recorder is not None:
            try:
                self._recorder.record_step(result)
            except (OSError, ConfigError) as exc:  # a full disk: the run goes on, the recording stops
                recorder, self._recorder = self._recorder, None
                recorder.abandon()  # its writer thread and open file would outlive it
                self._pending.recording_stopped = True
                self._pending.error = f"Recording to {recorder.path} stopped: {exc}"
        self._kept.append(result)
        now = time.perf_counter()
        if now - self._last_point >= SERIES_INTERVAL_S:
            self._last_point = now
            self._add_point(result)
        return now

    def _engine_failed(self) -> None:
        self.playing = False
        self._pending.error = traceback.format_exc()
        self._pending.status = "the engine stopped with an error"

    def _workload_complete(self, last_result) -> None:
        self.playing = False
        if last_result is not None and self.engine.metrics.steps > self._point_steps:
            self._add_point(last_result)  # the last tokens count too
        self._collect_finished()
        self._pending.done = True
        self._pending.summary = self.engine.summary()
        self._pending.status = "workload complete" + _rejections_said(self.engine.metrics)
        self._stop_recording("the workload completed")

    def _add_point(self, result) -> None:
        metrics = self.engine.metrics
        tokens0, compute0, busy0, preempt0 = self._point_base
        busy = metrics.busy_time - busy0
        self._points.append(step_point(result, metrics.sampled_tokens - tokens0, metrics.compute_time - compute0,
                                       busy, metrics.preemptions - preempt0))
        self._point_base = (metrics.sampled_tokens, metrics.compute_time, metrics.busy_time, metrics.preemptions)
        self._point_steps = metrics.steps
        self._collect_finished()

    def _collect_finished(self) -> None:
        """The requests finished since the last call, from the engine's metrics (a row per finished
        request, in finishing order): their finish times for the latency plot, and the first token
        of each whose first token came after the last snapshot -- it was never in a snapshot's
        table, so _send_first_tokens did not send it. Called before every snapshot is taken."""
        metrics = self.engine.metrics
        seen = self._finished_seen
        if len(metrics.ttft) <= seen:
            return
        finish_times, ttfts, queue_times = metrics.finish_times[seen:], metrics.ttft[seen:], metrics.queue_time[seen:]
        self._pending.finished.extend(zip(finish_times, ttfts, queue_times))
        # first token = arrival + TTFT = finish - end-to-end + TTFT, which may miss the step's end by a
        # rounding error; first tokens come at step ends, microseconds apart at the least
        after = self._snapshot_clock + FIRST_TOKEN_TOLERANCE_S
        for finish, e2e, ttft, queue_time in zip(finish_times, metrics.e2e[seen:], ttfts, queue_times):
            first_token_time = finish - e2e + ttft
            if first_token_time > after:
                self._pending.first_tokens.append((first_token_time, ttft, queue_time))
        self._finished_seen = len(metrics.ttft)

    # -- first tokens ---------------------------------------------------------------------------
    def _send_first_tokens(self, frame: FrameDelta, table) -> None:
        """Puts into the frame the first token of every request in the snapshot's table that has
        one and has not been sent: the latency plot shows a TTFT while its request still runs. The
        snapshot computed every active request's TTFT already: ~36 us a frame with 1,024 running."""
        ids = np.sort(table["request_id"][np.isfinite(table["ttft_s"])])
        requests = self.engine.requests
        for request_id in ids[~np.isin(ids, self._first_token_sent, assume_unique=True)].tolist():
            frame.first_tokens.append(_first_token_row(requests[request_id]))
        # Only requests still in the engine can finish later: the array stays as big as the batch.
        self._first_token_sent = ids


def _keep_recording_note(frame: FrameDelta, stopped: FrameDelta) -> None:
    """An Apply or Reset while recording: the new engine's frame also says what became of the recording
    (it replaced that note: one that could not be finished went without a word, as if written)."""
    if not stopped.recording_stopped:
        return
    frame.recording_stopped = True
    if stopped.error:
        frame.error = f"{frame.error}\n\n{stopped.error}" if frame.error else stopped.error
    elif stopped.status and frame.status != BUILD_FAILED_STATUS:  # that status marks a failed build
        frame.status = f"{stopped.status} \u00b7 {frame.status}" if frame.status else stopped.status


def _rejections_said(metrics) -> str:
    """The end of the run's last status line: how many requests the engine turned away, and why the first."""
    if not metrics.rejected:
        return ""
    first = f" (the first, {metrics.first_rejection})" if metrics.first_rejection else ""
    return f": {metrics.rejected:,} of {metrics.rejected + metrics.completed:,} requests rejected on arrival{first}"


def _first_token_row(request) -> tuple:
    """(first_token_time_s, ttft_s, queue_time_s), as the engine's metrics compute them at finish."""
    return (request.first_token_time, request.first_token_time - request.arrival_time,
            request.first_scheduled_time - request.arrival_time)
