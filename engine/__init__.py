"""kvscope's inference engine: block pool, KV cache managers, scheduler, runners. Imports no Qt.

The names below load on first use, so that importing a small module of this package (the
snapshot types the widgets draw, say) does not pull in the whole engine.
"""

import importlib

_EXPORTS = {
    "ConfigError": "config", "EngineArgs": "config", "HardwareSpec": "config", "ModelConfig": "config",
    "Engine": "engine", "EngineStalled": "engine", "StepResult": "engine",
    "Event": "events", "EventKind": "events",
    "MemoryPlan": "memory_math", "plan_memory": "memory_math",
    "Snapshot": "snapshot",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
