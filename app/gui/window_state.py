"""What the window knows between frames, and what it works out from a frame that is not drawing.

Plain Python, no Qt (napari's rule: the model never imports the toolkit), so every number the
window shows -- the memory bar's segments, the status line, the timeline's batch changes -- is
tested without a window. MainWindow folds each frame in with ``take`` and hands the resulting
``FrameUpdate`` to every registered panel (kvscope.app.gui.panels).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from kvscope.app.gui.request_texts import RequestTexts
from kvscope.app.gui.series import RunSeries
from kvscope.app.host.block_flashes import FLASH_KINDS
from kvscope.app.host.protocol import EVENT_KIND_CODES, FrameDelta, StepTable
from kvscope.app.lab.calibration import calibration_note
from kvscope.engine.config import default_gpu_memory_utilization
from kvscope.engine.events import EventKind
from kvscope.engine.units import format_percent
from kvscope.widgets.palette import THEMES

STARTING_TEXT = "starting the engine: its own process loads torch and builds the run ..."


def starting_text(config) -> str:
    """The status line until the engine's first frame: a cold start takes seconds, and a blank line
    read as a hung window. The very first start with the trained model also converts it, once
    (~20 s on a slow 2-core machine), which the line says rather than look stuck."""
    from kvscope.app.lab.trained_model import TRAINED_MODEL, is_converted

    if (config is not None and config.backend == "real" and config.model_path is None
            and config.model.name == TRAINED_MODEL.name and not is_converted()):
        return ("starting the engine: the first start converts the trained model into kvscope's cache, once "
                "(about 20 s), then loads it ...")
    return STARTING_TEXT

FRAME_TIMES_KEPT = 600  # ~10 s of frames: the median in the status line follows what the window does now
WEIGHTS_COLOR = (120, 120, 140)
RESERVE_COLOR = (150, 110, 160)  # the activation peak, or the whole reserve
NON_TORCH_COLOR = (125, 95, 140)
GRAPHS_COLOR = (175, 135, 185)


@dataclass
class FrameUpdate:
    """One frame as the panels read it: the frame, the state it was folded into, and what was
    worked out from it once for every panel."""

    frame: FrameDelta
    state: WindowState
    timeline_steps: list = field(default_factory=list)  # per step, the batch timeline's TimelineStep fields
    flashes: dict = field(default_factory=dict)  # block ids (int64 arrays) by flash kind
    new_engine: bool = False
    recording_ended: bool = False  # the recording the frames confirmed is no longer being written
    redraw: bool = False  # no new data: views whose colours or labels come from the state draw again
    views: dict = field(default_factory=dict)  # the window's panel views by name, for a panel that reads another's


class WindowState:
    """The window's memory: what runs, what was last seen, what the user selected."""

    def __init__(self, theme_name: str = "dark"):
        self.theme_name = theme_name
        self.demo = False  # large fonts: the status line keeps what an audience reads
        self.config = None  # RunConfig the live engine was last applied with
        self.engine_info = None  # EngineInfo of the engine shown (the live one, or a recording's)
        self.selected_request = -1
        self.texts = RequestTexts()  # the words of the text requests seen: the latest of each
        self.series = RunSeries()
        self.latest_snapshot = None
        self.latest_summary: dict = {}
        self.done = False  # the workload (or the recording) has run to its end
        self.errors_shown: list[str] = []
        self.recording_steps: int | None = None  # steps recorded so far, while the live run records
        self.recording_seen = False  # a frame has confirmed that the engine records
        self.recording_path: str | None = None  # what File > Record writes to, while Record is checked
        # when (seconds since the epoch) that recording began over an existing file, else None: the new
        # one is written beside it until complete (recording/writer.py), so a killed engine leaves both
        self.recording_replaces_since: float | None = None
        self.frame_times_ms: deque[float] = deque(maxlen=FRAME_TIMES_KEPT)
        self.frames_rendered = 0

    @property
    def theme(self):
        return THEMES[self.theme_name]

    @property
    def plan(self):
        """The MemoryPlan of the engine shown, None before the first engine reports."""
        return self.engine_info.plan if self.engine_info is not None else None

    def take(self, frame, replaying: bool = False) -> FrameUpdate:
        """Fold one frame into the state; what the panels draw from it."""
        update = FrameUpdate(frame, self, new_engine=frame.engine_info is not None)
        if update.new_engine:
            self.engine_info = frame.engine_info
            self.series = RunSeries()
            self.latest_summary = {}
            self.texts.clear()
        if frame.texts:
            self.texts.take(frame.texts)
        if frame.error:
            self.errors_shown.append(frame.error)
        if frame.steps:
            update.timeline_steps, update.flashes = timeline_and_flashes(frame.steps)
        if len(frame.points):  # a POINT_DTYPE array
            self.series.add_points(frame.points)
        if frame.finished:
            self.series.add_finished(frame.finished)
        if frame.first_tokens:
            self.series.add_first_tokens(frame.first_tokens)
        if frame.summary is not None:
            self.latest_summary = frame.summary
        if frame.snapshot is not None:
            self.latest_snapshot = frame.snapshot
        if frame.done:
            self.done = True
        self.recording_steps = frame.recording_steps
        if frame.recording_steps is not None:
            self.recording_seen = True
        elif (self.recording_seen or frame.recording_stopped) and not replaying:  # ended (unchecked, Apply, a full disk)
            self.recording_seen = False
            update.recording_ended = True
        return update

    def nothing_new(self) -> FrameUpdate:
        """An update with no new data, for views to draw again what they show (after a theme change)."""
        return FrameUpdate(FrameDelta(), self, redraw=True)

    def frame_drawn(self, seconds: float) -> None:
        self.frame_times_ms.append(seconds * 1000)
        self.frames_rendered += 1

    def status_text(self) -> str:
        """The status bar's line: the engine's clock and queues, the run's totals, the frame time."""
        snap, summary, parts = self.latest_snapshot, self.latest_summary, []
        if snap is not None:
            parts += [f"engine clock {snap.time_s:,.2f} s", f"step {snap.step:,}", f"running {snap.num_running:,}",
                      f"waiting {snap.num_waiting:,}", f"KV {format_percent(snap.kv_usage)}"]
        if summary:
            parts += [f"completed {summary.get('completed', 0):,}", f"rejected {summary.get('rejected', 0):,}",
                      f"preemptions {summary.get('preemptions', 0):,}"]
        recent = self.series.throughput()
        if len(recent):
            parts.append(f"{recent[-1]:,.0f} output tokens/s" + ("" if self.demo else " (last second of engine time)"))
        calibration = getattr(getattr(self.engine_info, "hardware", None), "calibration", None)
        if calibration and self.engine_info.backend == "simulated":
            parts.append(f"simulated times: {calibration_note(calibration)}")
        if self.frame_times_ms and not self.demo:
            parts.append(f"frame {np.median(self.frame_times_ms):.1f} ms")
        if self.recording_steps is not None:
            parts.append(f"\u25cf recording ({self.recording_steps:,} steps)")
        return "   ".join(parts)

    def memory_budget(self, block_counts: dict | None) -> tuple[str, str, list[tuple]] | None:
        """The memory bar's title, tooltip and segments (label, bytes, colour, tooltip), from the
        plan and the blocks of the snapshot shown (``block_counts``: used, shared, reserved and
        cached blocks as the block map counted them); None before an engine reports."""
        plan, snap, theme = self.plan, self.latest_snapshot, self.theme
        if plan is None:
            return None
        if block_counts is not None and snap is not None and snap.num_blocks == plan.num_blocks:
            used = block_counts["used"] + block_counts["shared"] + block_counts["reserved"]
            cached = block_counts["cached"]
        else:  # the snapshot shown is an older engine's
            used = cached = 0
        free = plan.num_blocks - used - cached
        block_bytes = plan.block_bytes
        segments = [
            ("weights", plan.weights_bytes, WEIGHTS_COLOR, plan.weights_source),
            ("KV in use", used * block_bytes, theme.decode, f"{used:,} blocks held by requests"),
            ("KV cached", cached * block_bytes, theme.good, f"{cached:,} free blocks holding reusable prefixes"),
            ("KV free", free * block_bytes, theme.free_block, f"{free:,} empty blocks"),
            *reserve_segments(plan),
        ]
        where = "this machine" if self.engine_info.backend == "real" else plan.hardware
        tooltip = f"KV pool sized by {plan.kv_pool_source}"
        if plan.accounting == "vllm" and plan.lesson_max_concurrent_sequences:
            tooltip += (f"\nwhat vLLM {plan.vllm_version} allocates: {plan.max_concurrent_sequences:.2f} sequences of "
                        f"{plan.max_model_len:,} tokens; the lesson's formula (nothing held back, every layer a full "
                        f"KV cache): {plan.lesson_max_concurrent_sequences:.2f}")
        return f"Memory budget: {plan.model} on {where}", tooltip, segments


def reserve_segments(plan) -> list[tuple]:
    """What is held back besides the weights: as vLLM subtracts it, part by part, where the plan
    models vLLM's accounting (one 'reserve' segment otherwise, the lesson's or a measured one)."""
    parts = [
        ("activation peak", plan.activation_bytes, RESERVE_COLOR,
         f"vLLM's profiling pass: a forward of {plan.profiled_tokens:,} tokens, sampling {plan.profiled_seqs:,} sequences"),
        ("non-torch", plan.non_torch_bytes, NON_TORCH_COLOR, "CUDA context, NCCL and all-reduce buffers"),
        ("CUDA graphs", plan.cudagraph_bytes, GRAPHS_COLOR, f"vLLM {plan.vllm_version}'s estimate of its captured graphs"),
    ]
    modelled = [part for part in parts if part[1] > 0]
    if not modelled:
        return [("reserve", plan.held_back_bytes, RESERVE_COLOR, "held back for activations and the runtime")]
    extra = plan.extra_reserve_bytes
    return modelled + ([("reserve", extra, GRAPHS_COLOR, "--reserve-bytes, beyond vLLM's accounting")] if extra else [])


def window_title(info) -> str:
    backend = "real" if info.backend == "real" else "simulated"
    return f"kvscope \u2014 {info.label} \u2014 {info.workload.name} ({backend})"


# The events that mark a step on the timeline, by kind code: the position of their list in a step's fields.
_MARKS = {EVENT_KIND_CODES[EventKind.ADMITTED]: 6, EVENT_KIND_CODES[EventKind.FINISHED]: 7,
          EVENT_KIND_CODES[EventKind.PREEMPTED]: 8}
_FLASH_CODES = {EVENT_KIND_CODES[kind]: name for kind, name in FLASH_KINDS.items()}


def timeline_and_flashes(steps: StepTable) -> tuple[list[tuple], dict]:
    """The batch timeline's steps (each the fields of a TimelineStep, in order) and the blocks to
    flash ({flash kind: int64 block ids, in event order}), from the steps of a frame."""
    rows, events = steps.rows, steps.events
    kinds = events.rows["kind"]
    # per step: its batch as lists (slices of one list per column), then its mark lists, empty so far
    ends = np.cumsum(rows["batch_size"])
    starts = (ends - rows["batch_size"]).tolist()
    request_ids, new_tokens = steps.request_ids.tolist(), steps.num_new_tokens.tolist()
    prefill = steps.is_prefill.tolist()
    fields = [[step, start_time_s, duration_s, request_ids[a:b], new_tokens[a:b], prefill[a:b], [], [], []]
              for step, start_time_s, duration_s, a, b in zip(rows["step"].tolist(), rows["start_time_s"].tolist(),
                                                              rows["duration_s"].tolist(), starts, ends.tolist())]
    marked = np.flatnonzero(np.isin(kinds, list(_MARKS)))
    if len(marked):
        step_of_event = np.repeat(np.arange(len(rows)), rows["num_events"])
        for step_index, code, request_id in zip(step_of_event[marked].tolist(), kinds[marked].tolist(),
                                                events.rows["request_id"][marked].tolist()):
            fields[step_index][_MARKS[code]].append(request_id)
    flashes = {}
    if len(events.blocks):
        kind_of_block = np.repeat(kinds, events.rows["num_blocks"])
        for code, name in _FLASH_CODES.items():
            blocks = events.blocks[kind_of_block == code]
            if len(blocks):
                flashes[name] = blocks
    return [tuple(step) for step in fields], flashes


def values_from_engine_info(info) -> dict:
    """The settings form's values for what an engine (here: a recorded one) ran with."""
    args, workload = info.args, info.workload
    values = {"backend": info.backend, "model": getattr(info.model, "name", None),
              "hardware": "this-machine" if info.backend == "real" else getattr(info.hardware, "name", None),
              "allocation": info.allocation,
              # the live form's config.json, model folder or trace is not the recording's: its label said so
              "model_path": None, "config_path": None, "trace_path": None}
    for key in ("kv_cache_dtype", "block_size", "gpu_memory_utilization", "max_model_len", "kv_cache_memory_bytes",
                "max_num_seqs", "max_num_batched_tokens", "enable_prefix_caching", "enable_chunked_prefill",
                "scheduling"):
        if hasattr(args, key):
            values[key] = getattr(args, key)
    if values.get("gpu_memory_utilization", 0) is None:  # the share vLLM's release took by itself
        values["gpu_memory_utilization"] = default_gpu_memory_utilization(args.vllm_version)
    if getattr(workload, "name", None):
        values["workload"] = workload.name
    if isinstance(getattr(workload, "num_requests", None), int):
        values["num_requests"] = workload.num_requests
    return values
