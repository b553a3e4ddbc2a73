"""The checks of a table read from a file (a preset, a config.json, a workload, a weight index)
before it becomes one of the engine's dataclasses: the table is a table, each field has the type
its annotation names, a required field is there. The engine reads no files, so these live above
it; the ranges of the values are the dataclasses' own to check (engine/checks.py).

Every failure is the engine's ConfigError, its message starting with what was read (a file, a
preset and its field)."""

from __future__ import annotations

import dataclasses
import difflib
import functools
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


def unknown_fields(data: dict, allowed, list_allowed: bool = True) -> str | None:
    """What to say of the keys of data that are not in allowed, each with the field it seems to mean
    (a typo, another case, a space around it: 'arival_rate_per_s (did you mean arrival_rate_per_s?)');
    None when every key is known."""
    from kvscope.app.lab.presets import meant_names  # presets reads its tables with this module
    from kvscope.app.lab.said_paths import said_short

    unknown = sorted(map(str, set(data) - set(allowed)))
    if not unknown:
        return None
    said = []
    for key in unknown:
        # a field's name is long and a typo short of it (memory_bandwith): closer than a preset's name need be
        meant = meant_names(key, sorted(allowed)) or difflib.get_close_matches(key, sorted(allowed), n=1, cutoff=0.6)
        shown_key = said_short(repr(key) if not key.isprintable() or key != key.strip() else key, 60)
        said.append(f"{shown_key} (did you mean {meant[0]}?)" if meant else shown_key)
    listed = f"; allowed: {', '.join(sorted(allowed))}" if list_allowed else ""
    return f"unknown field(s) {', '.join(said)}{listed}"


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
    hints = _type_hints(cls)
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


@functools.cache
def _type_hints(cls) -> dict:
    """typing.get_type_hints, once per class: it evaluates every annotation's text each call."""
    return typing.get_type_hints(cls)


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
