"""`kvscope bench calibration`: does the calibrated clock predict the real backend on requests it was not fitted on?

1. `kvscope calibrate`'s shapes run on the real backend and are fitted (the fit set);
2. a different workload (held out: Azure conversation requests, prompts / 8, outputs / 4 capped at
   64, all arriving at once, so steps mix prefill chunks and decodes as a server's do) runs on the
   real backend, every step measured;
3. the same requests run on the simulated backend of this machine with the fitted calibration, and
   with the datasheet peaks for comparison.
Reported: the median error of the held-out steps' predicted times (each real step's shape priced by
the fitted model), the error of the median step time and of the whole workload's duration between
the two runs. Targets: step time within 10 %, workload within 15 %. Then the published vLLM table
(app/lab/published_timings.py): the shipped GPU presets against measured vLLM figures.
"""

from __future__ import annotations

import platform
import statistics

import numpy as np

from kvscope.app.cli.output import table
from kvscope.app.lab.output_path import write_json_output
from kvscope.engine import Engine, EngineArgs
from kvscope.engine.cost_model import UNCALIBRATED, StepCostModel
from kvscope.engine.units import format_seconds

HELD_OUT_OFFSET = 200  # trace rows from here on: none of them shaped the fit's requests
MAX_OUTPUT_TOKENS = 64
MAX_HELD_OUT_REQUESTS = 256  # the held-out workload's most requests: more add minutes and no new step shapes


def check_held_out_requests(requests: int) -> None:
    """--requests of `bench calibration`: `--requests 2048` (the flag's own bound) ran 256 without a word."""
    from kvscope.engine.config import ConfigError

    if requests > MAX_HELD_OUT_REQUESTS:
        raise ConfigError(f"--requests {requests:,}: `kvscope bench calibration` holds out at most "
                          f"{MAX_HELD_OUT_REQUESTS} requests (1 to 2,048 is for bench real and cuda); give 1 to "
                          f"{MAX_HELD_OUT_REQUESTS}")


def held_out_requests(count: int, vocab_size: int, seed: int = 1) -> list[tuple[list, int]]:
    from kvscope.app.lab.presets import load_workload
    from kvscope.app.lab.workload import read_trace

    rows = read_trace(load_workload("azure-conv").trace_path, limit=HELD_OUT_OFFSET + count)[HELD_OUT_OFFSET:]
    rng = np.random.default_rng(seed)
    return [(rng.integers(1, vocab_size, max(4, r.prompt_tokens // 8)).tolist(),
             max(2, min(MAX_OUTPUT_TOKENS, r.output_tokens // 4))) for r in rows]


def _run(engine, requests) -> dict:
    for prompt, max_tokens in requests:
        engine.add_request(prompt, max_tokens, arrival_time=0.0)
    durations = []
    engine.run(on_step=lambda step: durations.append(step.duration_s) if step.request_ids else None)
    summary = engine.summary()
    return {"duration_s": summary["duration_s"], "steps": len(durations),
            "median_step_s": statistics.median(durations), "ttft_p50_s": summary["ttft_p50_s"],
            "tpot_p50_s": summary["tpot_p50_s"], "step_durations_s": durations}


def _error(predicted: float, measured: float) -> float:
    return abs(predicted - measured) / measured


def _evaluate(real_engine, steps: list, clock: str, calibration: dict, requests) -> dict:
    """The simulated run of `requests` with `calibration` against the real steps' `clock` times."""
    measured = [s.cpu_s if clock == "cpu" else s.duration_s for s in steps]
    target = real_engine.hardware.replace(calibration=calibration)
    simulated = _run(Engine(real_engine.model, target, real_engine.args), requests)
    cost_model = StepCostModel(real_engine.model, target, real_engine.plan)
    predicted = [cost_model.cost(s.num_tokens, s.num_samples, s.attention_pairs, s.kv_read_tokens, s.num_seqs)[0]
                 for s in steps]
    real_duration, real_median = sum(measured), statistics.median(measured)
    return {
        **{k: v for k, v in simulated.items() if k != "step_durations_s"},
        "real_duration_s": real_duration, "real_median_step_s": real_median, "real_steps": len(measured),
        "held_out_step_median_error": float(np.median([_error(p, m) for p, m in zip(predicted, measured)])),
        "median_step_error": _error(simulated["median_step_s"], real_median),
        "duration_error": _error(simulated["duration_s"], real_duration),
    }


def bench_calibration(count: int = 24, device: str | None = None, progress=print) -> dict:
    from kvscope.app.lab import calibration
    from kvscope.app.lab.real_backend import create_real_engine, load_for_real_backend

    import torch

    model_name = calibration.default_calibration_model()
    loaded = load_for_real_backend(model_name, device=device, progress=progress)
    progress(f"fit: `kvscope calibrate`'s shapes on {loaded.label}, {torch.get_num_threads()} torch thread(s)")
    fit_wall = calibration.run_calibration(loaded, EngineArgs(), progress=progress)
    fit_cpu = calibration.fit_run(fit_wall.engine, fit_wall.steps, "cpu")
    requests = held_out_requests(count, loaded.config.vocab_size)
    progress(f"held out: {len(requests)} Azure-shaped requests on the real backend")
    real_engine = create_real_engine(loaded, EngineArgs())
    recorder = calibration.StepRecorder(real_engine.runner)
    real_engine.runner = recorder  # the model is warm: the fit ran on it in this process
    _run(real_engine, requests)
    results = {"model": loaded.label, "torch_threads": torch.get_num_threads(), "requests": len(requests),
               "measured": {"fit": [_as_dict(s) for s in fit_wall.steps], "held_out": [_as_dict(s) for s in recorder.steps]}}
    for clock, fit in (("wall", fit_wall), ("cpu", fit_cpu)):
        fitted = fit.calibration("this machine", f"{loaded.label}, {clock} clock")
        results[clock] = {"fit": fit.fit.summary(), "fit_held_out_median_error": fit.held_out_median_error,
                          "calibration": fitted,
                          "calibrated": _evaluate(real_engine, recorder.steps, clock, fitted, requests),
                          "datasheet": _evaluate(real_engine, recorder.steps, clock, dict(UNCALIBRATED), requests)}
    return results


def _as_dict(step) -> dict:
    return {name: getattr(step, name) for name in step.__dataclass_fields__}


def print_calibration(r: dict) -> None:
    def pct(x):
        return f"{x * 100:.1f} %"

    for clock, what in (("wall", "wall time, as the real runner measures it"),
                        ("cpu", "this process's CPU time: the wall time of an idle machine, untouched by other "
                                "processes' load")):
        c = r[clock]
        cal, raw = c["calibrated"], c["datasheet"]
        print(table([
            ("model", f"{r['model']}, {r['torch_threads']} torch thread(s)"),
            ("step times", what),
            ("fit set", f"{c['fit']['steps']} steps of `kvscope calibrate`'s shapes; median error "
                        f"{pct(c['fit']['median_error'])} fitted, {pct(c['fit_held_out_median_error'])} held out"),
            ("held-out workload", f"{r['requests']} Azure conversation requests (prompts / 8, outputs / 4 capped at "
                                  f"{MAX_OUTPUT_TOKENS}), all at once"),
            ("real backend", f"{cal['real_steps']} steps, median step {format_seconds(cal['real_median_step_s'])}, "
                             f"workload {format_seconds(cal['real_duration_s'])}"),
            ("simulated, calibrated", f"{cal['steps']} steps, median step {format_seconds(cal['median_step_s'])}, "
                                      f"workload {format_seconds(cal['duration_s'])}"),
            ("simulated, datasheet peaks", f"{raw['steps']} steps, median step {format_seconds(raw['median_step_s'])}, "
                                           f"workload {format_seconds(raw['duration_s'])}"),
            ("held-out step time error (median)", f"{pct(cal['held_out_step_median_error'])} calibrated "
                                                  f"(target <= 10 %); {pct(raw['held_out_step_median_error'])} datasheet"),
            ("median step time error", f"{pct(cal['median_step_error'])} calibrated (target <= 10 %); "
                                       f"{pct(raw['median_step_error'])} datasheet"),
            ("workload duration error", f"{pct(cal['duration_error'])} calibrated (target <= 15 %); "
                                        f"{pct(raw['duration_error'])} datasheet"),
        ], title=f"Calibrated clock vs the real backend on requests it was not fitted on ({clock} clock)"))
        print()


def print_published(rows: list) -> None:
    from kvscope.app.lab.published_timings import format_published_table

    print(format_published_table(rows))


def cmd_bench_calibration(args) -> int:
    import sys

    from kvscope.app.lab.published_timings import evaluate_published

    results = {"machine": f"{platform.processor() or platform.machine()}, Python {platform.python_version()}"}

    def progress(message: str) -> None:
        print(f"kvscope bench calibration: {message}", file=sys.stderr, flush=True)

    results["published"] = rows = evaluate_published()
    print_published(rows)
    print()
    results["real"] = bench_calibration(args.requests, device=args.device, progress=progress)
    print_calibration(results["real"])
    if args.json:
        write_json_output("--json", args.json, results)
    return 0
