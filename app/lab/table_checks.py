"""The checks of a table read from a file (a preset, a config.json, a workload, a weight index)
before it becomes one of the engine's dataclasses: the table is a table, each field has the type
its annotation names, a required field is there. The engine reads no files, so these live above
it; the ranges of the values are the dataclasses' own to check (engine/checks.py).

Every failure is the engine's ConfigError, its message starting with what was read (a file, a
preset and its field)."""

from __future__ import annotations

import dataclasses
import typing

from kvscope.engine.checks import ConfigError, shown


def require_table(value, what: str, example: str = "") -> dict:
    if not isinstance(value, dict):
        hint = f" like {example}" if example else ""
        raise ConfigError(f"{what} must be a table{hint}, got {shown(value)}")
    return value


def require_text(value, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{what} must be non-empty text, got {shown(value)}")
    return value


def check_fields(cls, data, label: str) -> None:
    """data can build the dataclass cls: a table, every required field there, each field of the
    type its annotation names (text, true/false, a number, a table, a list). Ranges are the
    class's own __post_init__'s to check; this keeps TypeError and AttributeError out of it."""
    require_table(data, label)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    missing = [name for name, f in fields.items() if name not in data and f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING]
    if missing:
        raise ConfigError(f"{label}: missing field(s) {', '.join(missing)}")
    hints = typing.get_type_hints(cls)
    for name, value in data.items():
        if name not in fields:
            continue
        kinds = tuple(t for t in typing.get_args(hints[name]) if t is not type(None)) or (hints[name],)
        if value is None and type(None) in typing.get_args(hints[name]):
            continue
        expected = _field_kind(kinds)
        if expected == "text" and not isinstance(value, str):
            raise ConfigError(f"{label}: {name} must be text, got {shown(value)}")
        if expected == "true or false" and not isinstance(value, bool):
            raise ConfigError(f"{label}: {name} must be true or false, got {shown(value)}")
        if expected == "a number" and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise ConfigError(f"{label}: {name} must be a number, got {shown(value)}")
        if expected == "a table" and not isinstance(value, dict):
            raise ConfigError(f"{label}: {name} must be a table, got {shown(value)}")
        if expected == "a list" and not isinstance(value, (list, tuple)):
            raise ConfigError(f"{label}: {name} must be a list, got {shown(value)}")


def _field_kind(kinds: tuple) -> str:
    if bool in kinds:
        return "true or false"
    if str in kinds:
        return "text"
    if set(kinds) & {int, float}:
        return "a number"
    if dict in kinds or any(typing.get_origin(k) is dict for k in kinds):
        return "a table"
    if set(kinds) & {list, tuple} or any(typing.get_origin(k) in (list, tuple) for k in kinds):
        return "a list"
    return "any"


def build_config(cls, data: dict, label: str):
    """cls(**data), its errors starting with `label` (which file or preset said it)."""
    check_fields(cls, data, label)  # a missing field or a wrong type, named, before cls sees it
    try:
        return cls(**data)
    except ConfigError as exc:
        message = str(exc)
        # the dataclass names itself ("model 'x': ..."); the label already says which file
        message = message.split(": ", 1)[1] if message.startswith(("model ", "hardware ")) else message
        raise ConfigError(f"{label}: {message}") from None
    except TypeError as exc:  # a required field is missing
        raise ConfigError(f"{label}: {exc}") from None
