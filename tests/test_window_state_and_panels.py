"""The window's Qt-free state and its registry of panels.

WindowState is tested without a window: what a frame from a real engine changes in it, and the
numbers the memory bar and the status line show. The registry is tested the way a new panel is
added: one Panel registered in the test, no change to MainWindow, and the window builds it in its
dock, lists it in the View menu, and hands it every frame, the theme and new engines.
"""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from kvscope.app.gui.window_state import WindowState, timeline_and_flashes, values_from_engine_info, window_title
from kvscope.app.host.points import POINT_DTYPE
from kvscope.app.host.protocol import EventTable, FrameDelta, StepTable
from kvscope.app.lab.presets import load_hardware, load_model, load_workload
from kvscope.app.lab.workload import generate_requests
from kvscope.engine import Engine, EngineArgs
from kvscope.engine.events import Event, EventKind
from kvscope.engine.snapshot import BLOCK_CACHED, BLOCK_RESERVED, BLOCK_USED


@pytest.fixture(scope="module")
def run():
    """A small simulated run: the engine, its step results and a snapshot after each step, up to
    the first snapshot with blocks of every kind the memory bar counts (held, shared, cached)."""
    engine = Engine(load_model("llama-3-8b"), load_hardware("l4-24gb"),
                    EngineArgs(num_gpu_blocks_override=400, max_model_len=2048))
    workload = load_workload("shared-system-prompt").with_overrides(num_requests=12, arrival_rate_per_s=8.0)
    engine.add_workload(generate_requests(workload, engine.model.vocab_size, seed=3))
    results, snapshots = [], []
    while len(results) < 300:
        results.append(engine.step())
        snapshots.append(engine.snapshot())
        counts = counts_of(snapshots[-1])
        if counts["shared"] and counts["cached"]:
            break
    return SimpleNamespace(engine=engine, results=results, snapshots=snapshots)


def info_of(engine, backend="simulated"):
    return SimpleNamespace(plan=engine.plan, backend=backend, label="test run", workload=SimpleNamespace(name="chat"))


def points(n: int, output_tokens: int = 3) -> np.ndarray:
    rows = np.zeros(n, dtype=POINT_DTYPE)
    rows["time_s"] = np.arange(1, n + 1) * 0.1
    rows["output_tokens"] = output_tokens
    return rows


def counts_of(snapshot) -> dict:
    """Block counts as the block map gives them (used excludes shared; shared = used with ref > 1)."""
    used = snapshot.block_state == BLOCK_USED
    shared = used & (snapshot.block_ref_cnt > 1)
    return {"used": int((used & ~shared).sum()), "shared": int(shared.sum()),
            "reserved": snapshot.count(BLOCK_RESERVED), "cached": snapshot.count(BLOCK_CACHED)}


def test_the_state_and_its_derivations_import_no_qt():
    code = ("import sys; import kvscope.app.gui.window_state, kvscope.app.gui.scenario_texts, "
            "kvscope.app.gui.export_files, kvscope.app.lab.preset_edits; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('PySide6', 'pyqtgraph', 'torch')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


def test_a_frame_folds_into_the_state(run):
    state = WindowState()
    old = state.series
    frame = FrameDelta(engine_info=info_of(run.engine), steps=StepTable.of(run.results[:5]), points=points(5),
                       finished=[(0.5, 0.1, 0.02)], summary={"completed": 1}, snapshot=run.snapshots[4])
    update = state.take(frame)
    assert update.new_engine and state.series is not old  # a new engine starts a new series
    assert state.plan is run.engine.plan and state.latest_snapshot is run.snapshots[4]
    assert state.series.columns["time_s"].size == 5 and state.series.total_output == 15
    assert state.latest_summary == {"completed": 1} and not state.done
    assert [s[0] for s in update.timeline_steps] == [r.step for r in run.results[:5]]
    allocated = [b for r in run.results[:5] for ev in r.events if ev.kind == EventKind.ALLOCATED for b in ev.blocks]
    assert update.flashes["allocated"].dtype == np.int64 and list(update.flashes["allocated"]) == allocated

    update = state.take(FrameDelta(points=points(2), done=True, error="boom"))
    assert not update.new_engine and state.series.columns["time_s"].size == 7  # the same engine's series grows
    assert state.done and state.errors_shown == ["boom"]
    assert state.latest_snapshot is run.snapshots[4]  # a frame without a snapshot keeps the last one


def test_the_timeline_marks_who_joined_finished_or_was_preempted():
    event = lambda kind, rid, blocks=(): Event(kind, rid, 1.01, tuple(blocks))  # noqa: E731
    step = SimpleNamespace(step=7, start_time_s=1.0, duration_s=0.01, request_ids=[1, 2], num_new_tokens=[16, 1],
                           is_prefill=[True, False],
                           events=[event(EventKind.ADMITTED, 1), event(EventKind.ALLOCATED, 1, [4, 5]),
                                   event(EventKind.FINISHED, 2), event(EventKind.PREEMPTED, 3, [9]),
                                   event(EventKind.EVICTED, 1, [6]), event(EventKind.ALLOCATED, 2, [7])])
    quiet = SimpleNamespace(step=8, start_time_s=1.01, duration_s=0.02, request_ids=[1], num_new_tokens=[1],
                            is_prefill=[False], events=[event(EventKind.PREEMPTED, 1, [4, 5, 7])])
    steps, flashes = timeline_and_flashes(StepTable.of([step, quiet]))
    assert steps == [(7, 1.0, 0.01, [1, 2], [16, 1], [True, False], [1], [2], [3]),
                     (8, 1.01, 0.02, [1], [1], [False], [], [], [1])]
    assert {k: v.tolist() for k, v in flashes.items()} == {"allocated": [4, 5, 7], "preempted": [9, 4, 5, 7],
                                                           "evicted": [6]}


def test_steps_and_events_cross_the_pipe_as_columns_and_come_back_as_the_engine_made_them(run):
    from kvscope.app.host.protocol import decode_frame, encode_frame

    rejected = Event(EventKind.REJECTED, 99, 2.5, detail="the prompt is longer than the context")
    results = run.results[:40]
    frame = FrameDelta(steps=StepTable.of(results), events=EventTable.of([*results[-1].events, rejected]))
    messages = encode_frame(frame)
    received = iter([bytes(m) for m in messages])
    decoded = decode_frame(next(received), lambda: next(received))
    assert len(messages) == 1  # small columns go inside the pickle: one message
    assert decoded.steps.numbers == [r.step for r in results]
    assert decoded.steps.request_ids.tolist() == [i for r in results for i in r.request_ids]
    assert list(decoded.steps.events) == [e for r in results for e in r.events]
    assert list(decoded.events) == [*results[-1].events, rejected]
    newest = decoded.steps.events.newest(3)
    assert list(newest) == [e for r in results for e in r.events][-3:]
    assert not EventTable.of([]) and not StepTable.of([]) and FrameDelta().idle
    assert len(encode_frame(FrameDelta())) == 1  # an idle frame (60 a second while paused) is one message


def test_big_arrays_cross_the_pipe_as_their_own_messages_small_ones_inside_the_pickle():
    from kvscope.app.host.protocol import IN_BAND_BYTES, decode_frame, encode_frame

    big = np.arange(IN_BAND_BYTES // 8 + 1, dtype=np.int64)  # one element over
    small = np.arange(IN_BAND_BYTES // 8, dtype=np.int64)
    frame = FrameDelta(points=np.zeros(3, dtype=POINT_DTYPE), summary={"big": big, "small": small})
    messages = encode_frame(frame)
    assert len(messages) == 2 and bytes(messages[1]) == big.tobytes()
    received = iter([bytes(m) for m in messages])
    decoded = decode_frame(next(received), lambda: next(received))
    assert np.array_equal(decoded.summary["big"], big) and np.array_equal(decoded.summary["small"], small)


def test_the_memory_bar_splits_the_plan_by_the_blocks_shown(run):
    state = WindowState(theme_name="light")
    plan, snap = run.engine.plan, run.snapshots[-1]
    assert state.memory_budget(None) is None  # no engine yet
    state.take(FrameDelta(engine_info=info_of(run.engine), snapshot=snap))
    counts = counts_of(snap)
    title, tooltip, segments = state.memory_budget(counts)
    sizes = {label: nbytes for label, nbytes, _color, _tip in segments}
    held = counts["used"] + counts["shared"] + counts["reserved"]
    assert counts["used"] and counts["shared"] and counts["cached"]
    assert sizes["KV in use"] == held * plan.block_bytes
    assert sizes["KV cached"] == counts["cached"] * plan.block_bytes
    assert sizes["KV free"] == (plan.num_blocks - held - counts["cached"]) * plan.block_bytes
    held_back = sum(sizes.get(k, 0) for k in ("activation peak", "non-torch", "CUDA graphs", "reserve"))
    assert sizes["weights"] == plan.weights_bytes and held_back == plan.held_back_bytes
    assert title == f"Memory budget: {plan.model} on l4-24gb" and plan.kv_pool_source in tooltip
    assert dict((s[0], s[2]) for s in segments)["KV in use"] == state.theme.decode  # the theme's colours
    state.theme_name = "dark"
    assert dict((s[0], s[2]) for s in state.memory_budget(counts)[2])["KV in use"] == state.theme.decode

    state.take(FrameDelta(engine_info=info_of(run.engine, backend="real")))
    assert state.memory_budget(counts)[0].endswith("on this machine")
    other = SimpleNamespace(**{**info_of(run.engine).__dict__, "plan": SimpleNamespace(
        **{**plan.__dict__, "num_blocks": plan.num_blocks + 1})})
    state.take(FrameDelta(engine_info=other))  # the snapshot shown is still the old engine's
    sizes = {label: nbytes for label, nbytes, _c, _t in state.memory_budget(counts)[2]}
    assert sizes["KV in use"] == 0 and sizes["KV free"] == (plan.num_blocks + 1) * plan.block_bytes


def test_the_status_line_gives_every_number_with_its_unit(run):
    state = WindowState()
    snap = run.snapshots[-1]
    state.take(FrameDelta(engine_info=info_of(run.engine), snapshot=snap, points=points(4),
                          summary={"completed": 2, "rejected": 0, "preemptions": 1}, recording_steps=12))
    state.frame_drawn(0.004)
    text = state.status_text()
    for part in (f"engine clock {snap.time_s:,.2f} s", f"step {snap.step:,}", f"running {snap.num_running:,}",
                 "KV ", "%", "completed 2", "preemptions 1", "output tokens/s (last second of engine time)",
                 "frame 4.0 ms", "recording (12 steps)"):
        assert part in text, part
    state.demo = True  # large fonts: what an audience reads
    text = state.status_text()
    assert "output tokens/s" in text and "last second" not in text and "frame" not in text


def test_a_recording_is_seen_until_a_live_frame_says_it_ended():
    state = WindowState()
    assert not state.take(FrameDelta(recording_steps=None)).recording_ended  # none was seen
    assert not state.take(FrameDelta(recording_steps=3)).recording_ended
    assert not state.take(FrameDelta(recording_steps=None), replaying=True).recording_ended  # a replay's frames
    assert state.take(FrameDelta(recording_steps=None)).recording_ended
    assert not state.take(FrameDelta(recording_steps=None)).recording_ended  # said once
    # a recording that failed before any frame showed it running (a small disk filled at once)
    assert state.take(FrameDelta(recording_steps=None, recording_stopped=True)).recording_ended


def test_a_recorded_engine_fills_the_settings_form(run):
    info = SimpleNamespace(backend="real", model=run.engine.model, hardware=run.engine.hardware,
                           allocation="paged", args=EngineArgs(block_size=32),
                           workload=load_workload("chat").with_overrides(num_requests=7))
    values = values_from_engine_info(info)
    assert values["hardware"] == "this-machine" and values["model"] == "llama-3-8b"
    assert values["block_size"] == 32 and values["workload"] == "chat" and values["num_requests"] == 7
    assert window_title(info_of(run.engine, "real")) == "kvscope \u2014 test run \u2014 chat (real)"


def test_edited_presets_keep_their_base_and_scale_every_precision():
    from kvscope.app.lab.preset_edits import edited_preset_fields

    base = load_hardware("h100-80gb")
    fields = edited_preset_fields("hardware", "h100-80gb", {"memory_bytes": 40 * 1024**3,
                                                              "flops_16bit": base.flops_for("fp16") / 2})
    assert fields["memory_bytes"] == 40 * 1024**3 and "flops_16bit" not in fields
    assert fields["peak_flops"] == pytest.approx({k: v / 2 for k, v in base.peak_flops.items()})
    assert fields["source"] == "edited from h100-80gb in kvscope"
    model = load_model("llama-3-8b")
    same = edited_preset_fields("models", "llama-3-8b", {"num_hidden_layers": 16})
    assert same["num_hidden_layers"] == 16 and same["weights_bytes"] == model.weights_bytes
    other = "fp32" if model.weight_dtype != "fp32" else "fp16"
    assert edited_preset_fields("models", "llama-3-8b", {"weight_dtype": other})["weights_bytes"] is None


def test_the_cuda_check_answers_as_torch_would_without_importing_it():
    from kvscope.app.lab.cuda_device import cuda_device_visible, torch_cuda_version

    code = ("import sys; from kvscope.app.lab.scenarios import load_scenario, scenario_names; "
            "from kvscope.app.gui.scenario_texts import scenario_texts; "
            "real = [n for n in scenario_names() if load_scenario(n).backend == 'real']; "
            "print(scenario_texts(load_scenario(real[0]))['backend_text'], '|', 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    text, torch_imported = out.stdout.strip().split(" | ")
    assert text.startswith("real backend (") and torch_imported == "False"  # asked without importing torch
    torch = pytest.importorskip("torch")
    assert torch_cuda_version() == torch.version.cuda
    assert cuda_device_visible() == torch.cuda.is_available()
    assert (" on this GPU)" in text) == torch.cuda.is_available()


# -- the registry ---------------------------------------------------------------------------------

class FrameCounter:
    """What a new panel's widget file would hold: a view that draws the frames it is handed."""

    @staticmethod
    def make():
        from PySide6.QtWidgets import QLabel

        class FrameCounterView(QLabel):
            def __init__(self):
                super().__init__("no frame yet")
                self.updates, self.themes, self.clears = [], [], 0

            def set_theme(self, theme):
                self.themes.append(theme.name)

            def clear(self):
                self.clears += 1

        return FrameCounterView()

    @staticmethod
    def update(view, update):
        view.updates.append(update)
        if update.frame.snapshot is not None:
            view.setText(f"step {update.frame.snapshot.step:,}")


def test_a_registered_panel_is_built_docked_and_fed_every_frame(qtbot, tmp_path, monkeypatch, run):
    from kvscope.app.cli.gui import initial_values
    from kvscope.app.gui import panels
    from kvscope.app.gui.main_window import MainWindow

    monkeypatch.setenv("KVSCOPE_CONFIG_DIR", str(tmp_path))
    monkeypatch.setattr(panels, "PANELS", list(panels.PANELS))  # registered for this test only
    panels.register(panels.Panel("frame_counter", "Frame counter", FrameCounter.make, FrameCounter.update,
                                 place="right", dock="Frame counter"))
    args = SimpleNamespace(backend="simulated", model=None, hardware="h100-80gb", workload="chat", model_path=None)
    values = {**initial_values(args), "num_requests": 20}
    win = MainWindow(values, autoplay=False)
    qtbot.addWidget(win)
    view = win.frame_counter
    assert win.panels.docks["Frame counter"].widget() is view  # alone in its dock
    assert "Frame counter" in [a.text() for a in win.menuBar().actions()[1].menu().actions()]  # View menu
    assert win.block_map is win.panels.views["block_map"]  # the built-in panels come from the same registry
    assert view.themes == ["dark"]

    qtbot.waitUntil(lambda: win.engine_info is not None, timeout=20000)  # the engine's first frame
    assert view.clears == 1 and any(u.new_engine for u in view.updates)
    frame = FrameDelta(snapshot=run.snapshots[3], steps=StepTable.of(run.results[:4]))
    win.timer.stop()
    win.render_frame(frame)
    update = view.updates[-1]
    assert update.frame is frame and update.state is win.state and view.text() == f"step {run.snapshots[3].step:,}"
    assert len(update.timeline_steps) == 4 and update.views["frame_counter"] is view
    win.set_theme("light")
    assert view.themes[-1] == "light" and view.updates[-1].redraw
    win.close()


def test_two_panels_naming_one_dock_share_it_as_tabs(qtbot, monkeypatch):
    from PySide6.QtWidgets import QMainWindow, QTabWidget

    from kvscope.app.gui import panels

    window = QMainWindow()
    qtbot.addWidget(window)
    extra = [panels.Panel(name, name.title(), FrameCounter.make, FrameCounter.update, place="bottom", dock="Lists")
             for name in ("first", "second")]
    built = panels.PanelSet(window, [*panels.PANELS, *extra])
    tabs = built.docks["Lists"].widget()
    assert isinstance(tabs, QTabWidget) and [tabs.tabText(i) for i in range(tabs.count())] == ["First", "Second"]
    assert built.center_split.count() == 3  # block map, batch timeline, prompt box
    built.update(WindowState().nothing_new())
    assert all(len(built.views[name].updates) == 1 for name in ("first", "second"))
    with pytest.raises(ValueError, match="two panels"):
        panels.PanelSet(window, [*extra, extra[0]])


def test_the_memory_bar_shows_what_vllm_holds_back_part_by_part():
    from kvscope.app.gui.window_state import reserve_segments
    from kvscope.app.lab.presets import load_hardware, load_model
    from kvscope.engine.config import EngineArgs, resolve_engine_args
    from kvscope.engine.memory_math import plan_memory

    model, hardware = load_model("llama-3-8b"), load_hardware("h100-80gb")

    def plan(**args):
        return plan_memory(model, hardware, resolve_engine_args(EngineArgs(**args), model, hardware))

    vllm = reserve_segments(plan(reserve_bytes=2**20))
    assert [s[0] for s in vllm] == ["activation peak", "non-torch", "CUDA graphs", "reserve"]
    assert sum(s[1] for s in vllm) == plan(reserve_bytes=2**20).held_back_bytes
    older = reserve_segments(plan(vllm_version="0.19"))  # before 0.21 vLLM did not subtract its graphs
    assert "CUDA graphs" not in [s[0] for s in older]
    lesson = reserve_segments(plan(accounting="lesson"))
    assert [(s[0], s[1]) for s in lesson] == [("reserve", 0)]
