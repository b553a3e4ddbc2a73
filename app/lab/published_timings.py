"""Published vLLM measurements replayed on the simulated engine: how far off its TTFT, TPOT and
throughput are, and the calibration terms that bring a GPU preset closest to them.

Each case (tests/fixtures/published_vllm_timings.toml in a source checkout) names a hardware and a
model preset, vLLM's settings and every request's prompt and output length as the published run
sent them (all at once); the simulated engine serves the same requests and its medians are
compared with the published ones. fit_published() is how the shipped presets' calibrations were
found: a coordinate search over the efficiencies and overheads minimising the squared log error
of every published figure of that hardware.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

import numpy as np

from kvscope.app.lab.presets import load_hardware, load_model
from kvscope.engine import Engine, EngineArgs
from kvscope.engine.config import ConfigError

PUBLISHED_FILE = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "published_vllm_timings.toml"
METRICS = (("ttft_p50_ms", "TTFT p50", "ms"), ("tpot_p50_ms", "TPOT p50", "ms"),
           ("output_throughput_tokens_per_s", "output throughput", "tokens/s"))
_ENGINE_FIELDS = ("vllm_version", "gpu_memory_utilization", "max_num_seqs", "enable_chunked_prefill",
                  "enable_prefix_caching", "max_model_len")


def load_cases(path: Path | None = None) -> list[dict]:
    path = Path(path or PUBLISHED_FILE)
    if not path.is_file():
        raise ConfigError(f"the published vLLM measurements ({path}) come with a source checkout of kvscope; "
                          "this installation has none")
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    defaults = data.get("defaults", {})
    return [{**defaults, **case} for case in data["case"]]


def simulate_case(case: dict, hardware=None, seed: int = 0) -> dict:
    """The simulated engine's TTFT / TPOT medians (ms) and output throughput for the case's requests."""
    model = load_model(case["model"])
    hardware = hardware or load_hardware(case["hardware"])
    args = EngineArgs(**{f: case[f] for f in _ENGINE_FIELDS if f in case}, seed=seed)
    if not args.enable_chunked_prefill:  # vLLM before chunked prefill by default: a step holds a whole prompt
        args = args.replace(max_num_batched_tokens=max(case["max_model_len"], 512))
    engine = Engine(model, hardware, args)
    rng = np.random.default_rng(seed)
    for prompt_len, output_len in zip(case["input_lens"], case["output_lens"]):
        engine.add_request(rng.integers(1, model.vocab_size, prompt_len).tolist(), max(1, output_len), 0.0)
    summary = engine.run()
    return {"ttft_p50_ms": summary["ttft_p50_s"] * 1e3, "tpot_p50_ms": summary["tpot_p50_s"] * 1e3,
            "output_throughput_tokens_per_s": summary["throughput_tokens_per_s"]}


def evaluate_published(cases: list | None = None, hardware_for=None) -> list[dict]:
    """One row per published figure: the case, the metric, published, simulated, relative error.
    hardware_for(case) gives the hardware to simulate (default: the case's preset as shipped)."""
    rows = []
    for case in cases or load_cases():
        hardware = hardware_for(case) if hardware_for else load_hardware(case["hardware"])
        simulated = simulate_case(case, hardware)
        for key, label, unit in METRICS:
            if key in case:
                rows.append({"case": case["name"], "setup": case["setup"], "source": case["source"],
                             "hardware": case["hardware"], "metric": label, "unit": unit,
                             "published": case[key], "simulated": simulated[key],
                             "error": (simulated[key] - case[key]) / case[key],
                             "calibration": hardware.calibration["label"]})
    return rows


def format_published_table(rows: list) -> str:
    lines = ["Simulated vs published vLLM figures (shipped presets; target: within 20 %)",
             "-" * 74,
             f"{'case':<28} {'figure':<18} {'published':>12} {'simulated':>12} {'error':>8}"]
    for r in rows:
        lines.append(f"{r['case']:<28} {r['metric']:<18} {r['published']:>12,.2f} {r['simulated']:>12,.2f} "
                     f"{r['error'] * 100:>+7.1f} %")
    errors = [abs(r["error"]) for r in rows]
    lines.append(f"median |error| {np.median(errors) * 100:.1f} %, largest {max(errors) * 100:.1f} % "
                 f"({sum(e <= 0.2 for e in errors)} of {len(errors)} within 20 %); units: ms, output tokens/s")
    return "\n".join(lines)


# -- fitting a preset's calibration to the published figures -------------------------------------

def _loss(cases: list, hardware) -> float:
    total = 0.0
    for case in cases:
        simulated = simulate_case(case, hardware)
        for key, _, _ in METRICS:
            if key in case:
                total += math.log(simulated[key] / case[key]) ** 2
    return total


SEARCH = {
    "flops_efficiency": [0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0],
    "bandwidth_efficiency": [0.4, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0],
    "overhead_s": [0.0, 0.5e-3, 1e-3, 2e-3, 3e-3, 4e-3, 6e-3, 8e-3],
    "overhead_per_seq_s": [0.0, 5e-6, 10e-6, 20e-6, 40e-6, 80e-6],
}


def fit_published(hardware_name: str, cases: list | None = None, fixed: dict | None = None, rounds: int = 3,
                  start: dict | None = None) -> tuple[dict, float]:
    """Calibration terms for `hardware_name` minimising the squared log error of its published figures
    (coordinate search over SEARCH; `fixed` terms are not searched). Returns (terms, loss)."""
    cases = [c for c in (cases or load_cases()) if c["hardware"] == hardware_name]
    base = load_hardware(hardware_name)
    terms = {"flops_efficiency": 0.6, "bandwidth_efficiency": 0.8, "overhead_s": 2e-3, "overhead_per_seq_s": 20e-6,
             **(start or {}), **(fixed or {})}

    def loss_of(candidate: dict) -> float:
        return _loss(cases, base.replace(calibration={"label": "search", **candidate}))

    best = loss_of(terms)
    for _ in range(rounds):
        improved = False
        for name, values in SEARCH.items():
            if fixed and name in fixed:
                continue
            for value in values:
                candidate = {**terms, name: value}
                loss = loss_of(candidate)
                if loss < best - 1e-12:
                    best, terms, improved = loss, candidate, True
        if not improved:
            break
    return terms, best
