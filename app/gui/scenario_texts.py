"""What the comparison page shows of a guided scenario before it runs: its title, caption and
question, where it runs, and a guess box sized for its answer's unit. Plain Python, no Qt."""

from __future__ import annotations

from kvscope.app.lab.cuda_device import cuda_device_visible


def scenario_texts(scenario) -> dict:
    """The ``scenario_texts`` of CompareView.open_comparison for a Scenario."""
    unit = scenario.answer.unit
    return {
        "title": f"{scenario.order}. {scenario.title}", "caption": scenario.caption,
        "question": scenario.question, "backend_text": backend_text(scenario),
        "unit": unit, "choices": list(scenario.answer.choices) or None,
        "minimum": 0.0, "maximum": 100.0 if unit == "%" else 1e6 if unit == "x" else 1e9,
        "decimals": 2 if unit in ("x", "GiB") else 1, "initial": 1.0 if unit == "x" else None,
    }


def backend_text(scenario) -> str:
    models = ", ".join(dict.fromkeys(c.model for c in scenario.configs))
    if scenario.backend == "real":
        return f"real backend ({models} on this {'GPU' if cuda_device_visible() else 'CPU'})"
    hardware = ", ".join(dict.fromkeys(c.hardware for c in scenario.configs))
    return f"simulated backend ({models} on {hardware})"
