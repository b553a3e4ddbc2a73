"""Calibrating the simulated clock from the real runner's measured steps on this machine.

The real backend runs a spread of batch shapes (single prompts of several lengths, decode
batches of several sizes over several KV lengths); every step's measured duration is kept with
its shape. The step cost model (engine/cost_model.py) prices a step as

    max(compute floor / flops_efficiency, weight floor / bandwidth_efficiency + KV floor / kv_bandwidth_efficiency)
        + overhead_s + overhead_per_seq_s x requests + overhead_per_token_s x tokens

which is linear in (the three inverse efficiencies, the three overheads) once it
is known which side of the max each step falls on. The fit alternates: given the sides, a
non-negative least squares on relative error (each step weighted by 1 / its duration, so a 20 ms
decode counts as much as a 2 s prefill); given the coefficients, the sides again; from several
starting splits, keeping the best. Steps the fit misses by far more than the rest (a burst of
load from another process) are dropped once and the fit repeated. Every term stays >= 0.

The profile is JSON in kvscope's cache (calibration/<machine key>.json), written atomically, and
read back by app/lab/this_machine.py whenever `this-machine` is the hardware.
"""

from __future__ import annotations

import datetime
import itertools
import json
import math
import re
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kvscope.app.lab.bounded_reads import (MAX_JSON_DEPTH, _DuplicateKey, _unique_pairs, nesting_depth, read_capped,
                                          refuse_outsized_whole, unholdable_number, what_is_there)
from kvscope.app.lab.output_path import write_text_atomic
from kvscope.app.lab.verify.tiny_model import cache_dir, make_cache_folder
from kvscope.engine.checks import real_number, shown
from kvscope.engine.config import WEIGHT_DTYPE_BYTES, ConfigError, HardwareSpec
from kvscope.engine.cost_model import (
    MAX_EFFICIENCY,
    MIN_EFFICIENCY,
    UNCALIBRATED,
    StepCostModel,
    check_calibration,
)

PROFILE_FORMAT = "kvscope-calibration"
PROFILE_VERSION = 1
MAX_PROFILE_BYTES = 1024**2  # a profile is a few hundred bytes
# A step the first fit misses by more than this many times the median miss is set aside once.
OUTLIER_FACTOR = 4.0
FIT_TERMS = ("flops_efficiency", "bandwidth_efficiency", "kv_bandwidth_efficiency", "overhead_s", "overhead_per_seq_s",
             "overhead_per_token_s")


@dataclass(frozen=True, slots=True)
class MeasuredStep:
    """One real step: its shape as the cost model reads it, and how long it took."""

    num_tokens: int
    num_seqs: int
    num_samples: int
    attention_pairs: int
    kv_read_tokens: int
    duration_s: float  # wall time, as the real runner measures it
    # CPU time of this process during the step: the wall time of an idle machine with one torch
    # thread, and unlike it untouched by other processes taking the CPU (a loaded machine)
    cpu_s: float = 0.0


CLOCKS = ("wall", "cpu")


class StepRecorder:
    """Wraps a runner: every execute() is passed through and its shape and duration kept."""

    def __init__(self, runner):
        self.runner = runner
        self.name = runner.name
        self.steps: list[MeasuredStep] = []
        self.recording = True

    def __getattr__(self, name):  # loaded, forward_time_s, ...: the wrapped runner's
        return getattr(self.runner, name)

    def execute(self, batch):
        cpu_started = time.process_time()
        result = self.runner.execute(batch)
        if self.recording:
            samples = sum(1 for token in result.sampled_token_ids if token >= 0)
            self.steps.append(MeasuredStep(batch.num_tokens, len(batch.requests), samples, batch.attention_pairs,
                                           batch.kv_read_tokens, result.duration_s, time.process_time() - cpu_started))
        return result


def calibration_note(calibration: dict) -> str:
    """One line naming a time's calibration and its expected error: "datasheet peaks, uncalibrated; expected error ±51 %"."""
    return f"{calibration['label']}; expected error \u00b1{calibration['expected_error'] * 100:.0f} %"


# -- the batch shapes ----------------------------------------------------------------------------

# Prompt lengths run alone (prefill steps), and (batch size, prompt length) pairs decoded for
# DECODE_STEPS steps each: the spread of num_tokens, num_seqs and KV length the fit needs.
PREFILL_LENGTHS = (16, 64, 256, 512)
DECODE_SHAPES = ((1, 16), (1, 512), (2, 128), (4, 64), (4, 256), (8, 32), (8, 256), (16, 32), (16, 128), (32, 16))
DECODE_STEPS = 8


def check_scale_fits(scale: float, max_model_len: int, model_name: str) -> None:
    """A prompt scaled past the model's length was cut to it, and the profile said the scale it was
    not run at: the longest prompts then all had one length."""
    longest = max(PREFILL_LENGTHS + tuple(length for _batch, length in DECODE_SHAPES))
    room = max_model_len - DECODE_STEPS - 1
    if int(longest * scale) > room:
        raise ConfigError(f"--scale {scale:g}: the longest calibration prompt would be {int(longest * scale):,} tokens "
                          f"({longest} x {scale:g}), and {model_name} takes at most {room:,} beside its "
                          f"{DECODE_STEPS} decoded tokens (max_model_len {max_model_len:,}); give at most "
                          f"--scale {math.floor(room / longest * 100) / 100:g}")


def calibration_phases(vocab_size: int, max_model_len: int, seed: int = 0, scale: float = 1.0) -> list:
    """Groups of (prompt token ids, max_tokens), each group run to completion before the next."""
    rng = np.random.default_rng(seed)

    def prompt(length: int) -> list:
        length = max(1, min(int(length * scale), max_model_len - DECODE_STEPS - 1))
        return rng.integers(1, vocab_size, length).tolist()

    phases = [[(prompt(n), 1)] for n in PREFILL_LENGTHS]
    phases += [[(prompt(length), DECODE_STEPS) for _ in range(batch)] for batch, length in DECODE_SHAPES]
    return phases


def measure_steps(engine, phases: list, progress=None) -> list[MeasuredStep]:
    """Run each phase on the (real) engine, after one unrecorded warm-up request; the steps measured."""
    recorder = StepRecorder(engine.runner)
    engine.runner = recorder
    recorder.recording = False
    engine.add_request(phases[0][0][0][:8], 2)  # the first forward pays one-off costs
    engine.run()
    recorder.recording = True
    for index, phase in enumerate(phases, 1):
        for prompt, max_tokens in phase:
            engine.add_request(prompt, max_tokens)
        engine.run()
        if progress is not None:
            tokens = sum(len(p) for p, _ in phase)
            progress(f"phase {index}/{len(phases)}: {len(phase)} request(s), {tokens:,} prompt tokens, "
                     f"{len(recorder.steps):,} steps measured")
    engine.runner = recorder.runner
    return recorder.steps


# -- the fit -------------------------------------------------------------------------------------

@dataclass
class Fit:
    calibration_terms: dict  # the FIT_TERMS
    predicted_s: np.ndarray
    measured_s: np.ndarray
    kept: np.ndarray  # bool per step: False where set aside as an outlier

    @property
    def errors(self) -> np.ndarray:
        return np.abs(self.predicted_s - self.measured_s) / self.measured_s

    def summary(self) -> dict:
        errors = self.errors
        return {"steps": int(len(errors)), "outliers_set_aside": int((~self.kept).sum()),
                "median_error": float(np.median(errors)), "p90_error": float(np.quantile(errors, 0.9))}


def step_features(steps: list[MeasuredStep], cost_model: StepCostModel, clock: str = "wall") -> dict:
    floors = np.array([cost_model.floors(s.num_tokens, s.num_samples, s.attention_pairs, s.kv_read_tokens)
                       for s in steps], dtype=float).reshape(-1, 3)
    return {"compute": floors[:, 0], "weights": floors[:, 1], "kv": floors[:, 2],
            "seqs": np.array([s.num_seqs for s in steps], dtype=float),
            "tokens": np.array([s.num_tokens for s in steps], dtype=float),
            "measured": np.array([s.cpu_s if clock == "cpu" else s.duration_s for s in steps], dtype=float)}


def _nonnegative_lstsq(design: np.ndarray, target: np.ndarray) -> tuple[np.ndarray, float]:
    """min |design x - target|^2 with x >= 0, exactly, by trying every subset of the (six) columns."""
    columns = design.shape[1]
    best, best_cost = np.zeros(columns), float(target @ target)
    for size in range(1, columns + 1):
        for subset in itertools.combinations(range(columns), size):
            sub = design[:, subset]
            coef, *_ = np.linalg.lstsq(sub, target, rcond=None)
            if (coef < 0).any():
                continue
            cost = float(np.sum((sub @ coef - target) ** 2))
            if cost < best_cost * (1 - 1e-9):
                best = np.zeros(columns)
                best[list(subset)] = coef
                best_cost = cost
    return best, best_cost


def _memory(coef: np.ndarray, f: dict) -> np.ndarray:
    return f["weights"] * coef[1] + f["kv"] * coef[2]


def _predict(coef: np.ndarray, f: dict) -> np.ndarray:
    return (np.maximum(f["compute"] * coef[0], _memory(coef, f)) + coef[3] + coef[4] * f["seqs"]
            + coef[5] * f["tokens"])


def _fit_once(f: dict, rows: np.ndarray, per_token: bool = True) -> np.ndarray:
    """The coefficients (1 / each efficiency, overhead, per seq, per token) fitted on `rows`."""
    weight = 1.0 / f["measured"][rows]
    target = np.ones(rows.sum())
    intensity = f["compute"][rows] / (f["weights"][rows] + f["kv"][rows])
    starts = [np.ones(rows.sum(), bool), np.zeros(rows.sum(), bool)]
    starts += [intensity >= q for q in np.quantile(intensity, (0.25, 0.5, 0.75))]
    best, best_cost = None, math.inf
    for compute_bound in starts:
        for _ in range(30):
            design = np.column_stack([f["compute"][rows] * compute_bound, f["weights"][rows] * ~compute_bound,
                                      f["kv"][rows] * ~compute_bound, np.ones(rows.sum()), f["seqs"][rows],
                                      f["tokens"][rows] * per_token]) * weight[:, None]
            coef, _ = _nonnegative_lstsq(design, target)
            sides = f["compute"][rows] * coef[0] >= _memory(coef, {k: v[rows] for k, v in f.items()})
            if (sides == compute_bound).all():
                break
            compute_bound = sides
        cost = float(np.sum(((_predict(coef, {k: v[rows] for k, v in f.items()}) - f["measured"][rows])
                             * weight) ** 2))
        if cost < best_cost:
            best, best_cost = coef, cost
    return best, best_cost


def _fit_rows(f: dict, rows: np.ndarray) -> np.ndarray:
    """A prefill's compute and a per-token overhead grow alike with its tokens: the per-token term
    is kept only where it explains clearly more (10 %) than the FLOP count alone does."""
    without, cost_without = _fit_once(f, rows, per_token=False)
    with_it, cost_with = _fit_once(f, rows, per_token=True)
    return with_it if cost_with < 0.9 * cost_without else without


def _terms(coef: np.ndarray, f: dict, rows: np.ndarray) -> dict:
    """Coefficients as calibration fields. A side of the roofline that decided none of the steps
    keeps the datasheet rate, or the rate at which it would just tie on its heaviest step if the
    datasheet rate would decide some: either way the fitted steps' prices stay as fitted."""
    def efficiency(inverse: float, floor: np.ndarray, other_s: np.ndarray) -> float:
        if inverse > 0:
            return float(min(max(1.0 / inverse, MIN_EFFICIENCY), MAX_EFFICIENCY))  # a fit, held to what a profile may say
        with np.errstate(divide="ignore", invalid="ignore"):
            tie = np.where(other_s > 0, floor / other_s, np.inf)
        return float(min(MAX_EFFICIENCY, max(1.0, float(tie.max(initial=0.0)))))

    part = {k: v[rows] for k, v in f.items()}
    compute, memory = part["compute"], _memory(coef, part)
    return {"flops_efficiency": efficiency(coef[0], compute, memory),
            "bandwidth_efficiency": efficiency(coef[1], part["weights"], compute * coef[0]),
            "kv_bandwidth_efficiency": efficiency(coef[2], part["kv"], compute * coef[0]),
            "overhead_s": float(coef[3]), "overhead_per_seq_s": float(coef[4]), "overhead_per_token_s": float(coef[5])}


def _coefficients(terms: dict) -> np.ndarray:
    return np.array([1.0 / terms["flops_efficiency"], 1.0 / terms["bandwidth_efficiency"],
                     1.0 / terms["kv_bandwidth_efficiency"], terms["overhead_s"], terms["overhead_per_seq_s"],
                     terms["overhead_per_token_s"]])


def fit_features(f: dict) -> Fit:
    """The calibration terms that best predict f["measured"] in relative error, outliers set aside once."""
    n = len(f["measured"])
    if n < len(FIT_TERMS):
        raise ConfigError(f"calibration needs at least {len(FIT_TERMS)} measured steps, got {n}")
    if (f["measured"] <= 0).any() or not np.isfinite(f["measured"]).all():
        raise ConfigError("calibration: every measured step time must be a positive number of seconds")
    rows = np.ones(n, bool)
    terms = _terms(_fit_rows(f, rows), f, rows)
    errors = np.abs(_predict(_coefficients(terms), f) - f["measured"]) / f["measured"]
    kept = errors <= OUTLIER_FACTOR * max(float(np.median(errors)), 0.01)
    if not kept.all() and kept.sum() >= len(FIT_TERMS):
        terms = _terms(_fit_rows(f, kept), f, kept)
    else:
        kept = np.ones(n, bool)
    return Fit(terms, _predict(_coefficients(terms), f), f["measured"], kept)


def fit_steps(steps: list[MeasuredStep], cost_model: StepCostModel) -> Fit:
    return fit_features(step_features(steps, cost_model))


def held_out_error(f: dict, folds: int = 5) -> float:
    """Median relative error of steps predicted by fits that did not see them (every `folds`-th step out)."""
    n = len(f["measured"])
    errors = []
    for fold in range(folds):
        test = np.arange(n) % folds == fold
        if test.sum() == 0 or (~test).sum() < len(FIT_TERMS):
            continue
        train = {k: v[~test] for k, v in f.items()}
        terms = fit_features(train).calibration_terms
        predicted = _predict(_coefficients(terms), {k: v[test] for k, v in f.items()})
        errors.extend(np.abs(predicted - f["measured"][test]) / f["measured"][test])
    return float(np.median(errors)) if errors else math.nan


def calibration_table(terms: dict, label: str, expected_error: float, source: str) -> dict:
    return check_calibration({"label": label, **terms, "expected_error": round(float(expected_error), 4),
                              "source": source}, "calibration")


# -- the stored profile --------------------------------------------------------------------------

def profile_path(machine: str) -> Path:
    return cache_dir() / "calibration" / f"{machine}.json"


def make_profile(machine: str, description: str, calibration: dict, fit: dict, measured_on: dict) -> dict:
    return {"format": PROFILE_FORMAT, "version": PROFILE_VERSION, "machine": machine, "description": description,
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "measured_on": measured_on, "fit": fit, "calibration": calibration}


def save_profile(path: Path, profile: dict) -> None:
    make_cache_folder(path.parent)
    write_text_atomic("calibration profile", path, json.dumps(profile, indent=2) + "\n")


def read_profile(path: Path) -> dict:
    """A stored profile, checked; ConfigError names the file and what is wrong with it."""
    label = f"calibration profile {path}"
    hint = "; run `kvscope calibrate` again or delete the file"
    data = read_capped(path, label, MAX_PROFILE_BYTES, "calibration profile")
    try:
        # utf-8-sig: an editor's byte-order mark is taken, as presets, config.json and traces take it
        # a key given twice ("machine", "flops_efficiency"): json kept the last without a word
        profile = json.loads(data.decode("utf-8-sig"), object_pairs_hook=_unique_pairs)
    except _DuplicateKey as exc:
        raise ConfigError(f"{label}: {exc}{hint}") from None
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ConfigError(f"{label}: not a JSON calibration profile ({str(exc)[:120]}){hint}") from None
    except ValueError as exc:  # a number Python will not hold (more than 4,300 digits)
        raise ConfigError(f"{unholdable_number(label, exc)}{hint}") from None
    if not isinstance(profile, dict) or nesting_depth(profile) > MAX_JSON_DEPTH:
        raise ConfigError(f"{label}: not a JSON object{hint}")
    try:  # an efficiency of 10**400 has no float: compared with one it raised OverflowError
        refuse_outsized_whole(profile, label)
    except ConfigError as exc:
        raise ConfigError(f"{exc}{hint}") from None
    if profile.get("format") != PROFILE_FORMAT:
        raise ConfigError(f"{label}: format is {profile.get('format')!r:.40}, not {PROFILE_FORMAT!r}{hint}")
    if type(profile.get("version")) is int and profile["version"] > PROFILE_VERSION:  # a later kvscope's, not damage
        raise ConfigError(f"{label}: version {shown(profile['version'])} is newer than this kvscope reads "
                          f"({PROFILE_VERSION}); it was written by a newer kvscope: upgrade, or run `kvscope calibrate` "
                          "again to replace it")
    if type(profile.get("version")) is not int or profile["version"] != PROFILE_VERSION:  # true == 1 in Python
        raise ConfigError(f"{label}: version {profile.get('version')!r:.20} is not {PROFILE_VERSION}, the version "
                          f"this kvscope reads{hint}")
    if "calibration" not in profile:
        raise ConfigError(f"{label}: no calibration table{hint}")
    try:
        profile["calibration"] = check_calibration(profile["calibration"], label)
        _check_measured_on(profile.get("measured_on"), f"{label}: measured_on")
    except ConfigError as exc:
        raise ConfigError(f"{exc}{hint}") from None
    return profile


def _check_measured_on(measured_on, what: str) -> None:
    """The fields the calibration is restated with: a table, its peak_dtype a dtype's name (not a
    list or a table), its peak_flops a rate. Other fields (the model, the device) are only shown."""
    if measured_on is None:
        return
    if not isinstance(measured_on, dict):
        raise ConfigError(f"{what} must be a table of what the fit ran on, got {shown(measured_on)}")
    dtype = measured_on.get("peak_dtype", "fp32")
    if not isinstance(dtype, str) or dtype not in WEIGHT_DTYPE_BYTES:
        raise ConfigError(f"{what}.peak_dtype must be one of {', '.join(WEIGHT_DTYPE_BYTES)}, got {shown(dtype)}")
    if measured_on.get("peak_flops") is not None:
        real_number(measured_on["peak_flops"], f"{what}.peak_flops", 0.0, low_open=True)


# Until 2026-11-27 a CPU's peak was a flat estimate of 50 GFLOP/s a core for every dtype; a CPU
# profile stored then names no peak, and its flops_efficiency is a share of that one.
LEGACY_CPU_FLOPS_PER_CORE = 50e9
# A stored peak this far from today's estimate for the same machine is not this machine's.
PEAK_MISMATCH = 100.0


def _efficiency_in_range(value: float, what: str) -> None:
    """The range check_calibration holds a stored efficiency to, for one computed from it."""
    if not MIN_EFFICIENCY <= value <= MAX_EFFICIENCY:
        raise ConfigError(f"{what} must be from {MIN_EFFICIENCY:g} to {MAX_EFFICIENCY:g} (a share of the peak "
                          f"rate), got {value:.3g}")


def load_stored_calibration(machine: str, hardware: HardwareSpec | None = None) -> dict | None:
    """The calibration `kvscope calibrate` stored for `machine`; None if it has not run here. Given
    the machine as it is described now, an efficiency fitted against another peak FLOP/s (the one of
    the dtype the fit ran in) is restated against today's peak for that dtype: the same achieved
    FLOP/s in that dtype."""
    path = profile_path(machine)
    if not path.is_file():
        # a folder, a pipe or a link to nothing there: the datasheet peaks were used without a word
        if path.is_symlink() or path.exists():
            raise ConfigError(f"calibration profile {path}: is {what_is_there(path)}, not a file (the profile "
                              "`kvscope calibrate` stores is a JSON file); remove it and run `kvscope calibrate` "
                              "again, or restore the file")
        return None
    profile = read_profile(path)
    if "machine" in profile and profile["machine"] != machine:  # copied from another machine: not this one's speed
        raise ConfigError(f"calibration profile {path}: it was measured on {shown(profile['machine'])}, not on this "
                          f"machine ({machine}); run `kvscope calibrate` here, or delete the file")
    calibration = profile["calibration"]
    measured_on = profile.get("measured_on") or {}  # read_profile checked it is a table
    fitted_peak, dtype = measured_on.get("peak_flops"), measured_on.get("peak_dtype", "fp32")
    cores = re.fullmatch(r"cpu-.*-(\d+)cores", machine)
    if fitted_peak is None and cores:
        fitted_peak = LEGACY_CPU_FLOPS_PER_CORE * int(cores.group(1))
    if hardware is None or fitted_peak is None:
        return calibration
    label = f"calibration profile {path}: measured_on"
    now = hardware.flops_for(dtype)
    try:  # bounded by today's estimate: a peak 100x away from it was not measured on this machine
        fitted_peak = real_number(fitted_peak, f"{label}.peak_flops", now / PEAK_MISMATCH, now * PEAK_MISMATCH)
    except ConfigError as exc:
        raise ConfigError(f"{exc}; run `kvscope calibrate` again or delete the file") from None
    efficiency = min(MAX_EFFICIENCY, calibration["flops_efficiency"] * fitted_peak / now)
    try:  # restated against a peak up to 100x off, a small efficiency can fall out of the range
        _efficiency_in_range(efficiency, f"calibration profile {path}: its flops_efficiency restated against "
                                         f"this machine's {dtype} peak of {now:.3g} FLOP/s")
    except ConfigError as exc:
        raise ConfigError(f"{exc}; run `kvscope calibrate` again or delete the file") from None
    return {**calibration, "flops_efficiency": efficiency}


def uncalibrated(hardware: HardwareSpec) -> HardwareSpec:
    """The same hardware at its datasheet (or estimated) peaks: what the fit is expressed against."""
    return hardware.replace(calibration=dict(UNCALIBRATED))


# -- one calibration run -------------------------------------------------------------------------

@dataclass
class CalibrationRun:
    engine: object  # the real engine the steps ran on
    steps: list
    features: dict
    fit: Fit
    held_out_median_error: float

    def calibration(self, machine: str, details: str) -> dict:
        date = datetime.date.today().isoformat()
        summary = self.fit.summary()
        source = (f"{summary['steps']:,} real steps ({details}) fitted by least squares on relative error; median "
                  f"error {summary['median_error'] * 100:.1f} % on the steps fitted, "
                  f"{self.held_out_median_error * 100:.1f} % on steps held out of the fit")
        return calibration_table(self.fit.calibration_terms, f"kvscope calibrate on {machine} {date}",
                                 self.held_out_median_error, source)


def default_calibration_model() -> str:
    """The trained model where its package is installed (or it is converted), else the tiny random one."""
    from kvscope.app.lab.trained_model import TRAINED_MODEL, find_gguf, is_converted
    from kvscope.engine.config import DEFAULT_REAL_MODEL

    if is_converted():
        return TRAINED_MODEL.name
    try:
        find_gguf()
    except ConfigError:
        return DEFAULT_REAL_MODEL
    return TRAINED_MODEL.name


def run_calibration(loaded, engine_args, scale: float = 1.0, seed: int = 0, progress=None,
                    clock: str = "wall") -> CalibrationRun:
    """The calibration shapes on the real backend with `loaded`, and the fit of their measured steps."""
    from kvscope.app.lab.real_backend import create_real_engine

    engine = create_real_engine(loaded, engine_args)
    check_scale_fits(scale, engine.resolved.max_model_len, engine.model.name)
    phases = calibration_phases(engine.model.vocab_size, engine.resolved.max_model_len, seed, scale)
    steps = measure_steps(engine, phases, progress)
    return fit_run(engine, steps, clock)


def fit_run(engine, steps: list, clock: str = "wall") -> CalibrationRun:
    """The fit of steps measured on `engine`, by their wall time or their CPU time (`clock`)."""
    features = step_features(steps, StepCostModel(engine.model, uncalibrated(engine.hardware), engine.plan), clock)
    return CalibrationRun(engine, steps, features, fit_features(features), held_out_error(features))
