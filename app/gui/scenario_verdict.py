"""How close a guess came: the sentence the window shows under a scenario's measured answer.

A scenario asks a question before its comparison runs, and the audience commits a guess in the
scenario panel (a number in the answer's unit, or one of the configurations). The lab's Scenario
reads the answer from the run (`reveal`); this module turns the guess and that answer into the
verdict. Only the window takes guesses: `kvscope compare --scenario` prints the answer alone.
"""

from __future__ import annotations

import math
import re

from kvscope.app.lab.compare import ComparisonResult
from kvscope.app.lab.scenarios import Scenario, format_answer
from kvscope.engine.config import ConfigError

# A guess within this share of the answer is called close.
CLOSE = 0.10

_NUMBER = re.compile(r"[-+]?(\d[\d,_]*\.?\d*|\.\d+)([eE][-+]?\d+)?")


def guess_verdict(scenario: Scenario, guess, result) -> str:
    """How close a guess came. `result` is the ComparisonResult, or the value Scenario.reveal() gave."""
    actual = scenario.reveal(result)[0] if isinstance(result, ComparisonResult) else result
    says = answer_source(scenario)
    if scenario.answer.kind == "choice":
        picked = parse_choice(guess, scenario.answer.choices)
        if picked == actual:
            return f"Right: \"{actual}\"."
        return f"Not this time: you picked \"{picked}\"; {says} \"{actual}\"."
    value = parse_number(guess)
    unit = scenario.answer.unit
    shown = format_answer(actual, unit)
    if actual == 0:
        off = "exact" if value == 0 else f"off by {format_answer(abs(value), unit)}"
        return f"You guessed {format_answer(value, unit)}; {says} {shown}: {off}."
    error = (value - actual) / abs(actual)
    if abs(error) <= CLOSE:
        verdict = f"close: within {abs(error) * 100:.0f} %"
    else:
        verdict = f"{abs(error) * 100:.0f} % {'high' if error > 0 else 'low'}"
        factor = value / actual if actual else math.inf
        if factor >= 2 or 0 < factor <= 0.5:
            verdict += f" ({factor:.2g} times the answer)"
    return f"You guessed {format_answer(value, unit)}; {says} {shown}: {verdict}."


def answer_source(scenario: Scenario) -> str:
    """Who gives the answer: a run measured it, or the memory math computed it before any step ran."""
    return "the memory math computes" if scenario.reveal_from.kind == "memory" else "the run measured"


def parse_number(guess) -> float:
    """A number guess, from a number or from text that holds one ("1,500 tokens/s", "2.6 GiB")."""
    if isinstance(guess, (int, float)) and not isinstance(guess, bool):
        value = float(guess)
    else:
        match = _NUMBER.search(str(guess))
        if not match:
            raise ConfigError(f"a guess is a number, got {guess!r}")
        value = float(match.group(0).replace(",", "").replace("_", ""))
    if not math.isfinite(value):
        raise ConfigError(f"a guess is a finite number, got {guess!r}")
    return value


def parse_choice(guess, choices: tuple) -> str:
    """A choice guess: one of the choices by its text (any case) or by its number from 1."""
    text = str(guess).strip()
    for choice in choices:
        if text.lower() == choice.lower():
            return choice
    if text.isdigit() and 1 <= int(text) <= len(choices):
        return choices[int(text) - 1]
    raise ConfigError(f"choose one of: {', '.join(f'{i}. {c}' for i, c in enumerate(choices, 1))}; got {guess!r}")
