"""One hostile case and the fixture writer every pass's module is handed (scripts/hostile_inputs.py
runs the cases; the hostile_inputs_*.py modules make them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Case:
    name: str
    category: str
    argv: list
    expect: str = "refuse"  # refuse | ok | either (no traceback, no hang)
    protected: list = field(default_factory=list)  # files that must be left as they were
    env: dict = field(default_factory=dict)
    slow: bool = False
    must_say: tuple = ()  # fragments the stderr (refusal) or stdout (ok) must hold
    must_not_say: tuple = ()
    stdout: str = ""  # a file standard output is written to (/dev/full), instead of a pipe


def write(path: Path, data) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data, encoding="utf-8")
    return path
