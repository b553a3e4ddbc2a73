"""kvscope's inference engine: block pool, KV cache managers, scheduler, runners. Imports no Qt."""

from .config import ConfigError, EngineArgs, HardwareSpec, ModelConfig
from .engine import Engine, EngineStalled, StepResult
from .events import Event, EventKind
from .memory_math import MemoryPlan, plan_memory
from .snapshot import Snapshot

__all__ = [
    "ConfigError", "Engine", "EngineArgs", "EngineStalled", "Event", "EventKind", "HardwareSpec",
    "MemoryPlan", "ModelConfig", "Snapshot", "StepResult", "plan_memory",
]
