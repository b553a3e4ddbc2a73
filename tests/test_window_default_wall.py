"""The window's default simulated run shows the lesson -- the KV pool full, requests waiting for it --
within its first 15 s of engine clock, as `kvscope run` and `make demo` do (issue 15: "every default
run fills the KV cache and shows the wall within about 15 s")."""

from __future__ import annotations

from types import SimpleNamespace

from kvscope.app.cli import gui
from kvscope.app.cli.run import KV_FULL_SHARE
from kvscope.app.gui.run_settings import build_run_config
from kvscope.app.host.protocol import APPLY
from kvscope.app.host.session import EngineSession

WALL_WITHIN_S = 15.0


def _window_defaults(**flags) -> dict:
    args = SimpleNamespace(backend="simulated", model=None, hardware=None, workload=None, model_path=None)
    for name, value in flags.items():
        setattr(args, name, value)
    return gui.initial_values(args)


def _first_wall_s(values: dict, until_s: float) -> float | None:
    """Steps the engine the window would build, as its engine process does, and returns the engine
    clock at which the pool was first full with requests waiting; None if not by until_s."""
    session = EngineSession()
    session.handle(APPLY, (build_run_config(values), False))
    engine = session.engine
    assert engine is not None, session.take_frame().error
    while engine.clock < until_s:
        step = engine.step()
        if step is None:
            return None
        if step.kv_usage >= KV_FULL_SHARE and step.num_waiting > 0:
            return step.start_time_s + step.duration_s
    return None


def test_the_window_on_the_simulated_backend_runs_the_clis_chat_traffic():
    values = _window_defaults()
    assert (values["model"], values["hardware"], values["workload"]) == ("llama-3-8b", "l4-24gb", "chat")
    # the workload's own Poisson rate, not a faster one chosen to make the wall appear
    config = build_run_config(values)
    assert config.workload.arrival_rate_per_s == 4.0 and config.workload.trace_path is None


def test_the_windows_default_simulated_run_fills_the_kv_pool_within_fifteen_seconds():
    full_at_s = _first_wall_s(_window_defaults(), until_s=WALL_WITHIN_S)
    assert full_at_s is not None and full_at_s <= WALL_WITHIN_S


def test_a_named_workload_is_kept_and_the_trace_alone_shows_no_wall_in_time():
    # why the default is not the Azure trace: its first minute is slow (~2 requests a second)
    values = _window_defaults(workload="azure-conv")
    assert values["workload"] == "azure-conv"
    assert _first_wall_s(values, until_s=WALL_WITHIN_S) is None
