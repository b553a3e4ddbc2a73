"""`kvscope calibrate`: fit the simulated clock to this machine's real steps and store the profile.

The real backend runs a spread of batch shapes; every step's measured time is fitted by the step
cost model's terms (achieved share of peak FLOP/s and of bandwidth, an overhead per step, per
request and per token); the profile goes to kvscope's cache, where `--hardware this-machine`
finds it from then on.
"""

from __future__ import annotations

import sys

from kvscope.app.cli import combinations, options
from kvscope.app.cli.output import counted, shown, table
from kvscope.engine.config import COMPUTE_DTYPES, ConfigError
from kvscope.app.lab.calibration import calibration_note
from kvscope.engine.cost_model import MAX_EFFICIENCY
from kvscope.engine.units import format_seconds


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "calibrate", help="fit the simulated clock to this machine's real steps (stored for --hardware this-machine)")
    parser.add_argument("--model", metavar="PRESET",
                        help="model to run: smollm2-135m-instruct where installed, else tiny-llama (random weights)")
    parser.add_argument("--model-path", metavar="DIR", help="a local model directory to run instead")
    parser.add_argument("--device", help="cpu, cuda or cuda:N (default: cuda if present, else cpu)")
    parser.add_argument("--dtype", choices=COMPUTE_DTYPES,
                        help="weight dtype (default fp32 on CPU, the model's 16-bit type on CUDA)")
    parser.add_argument("--threads", type=options.bounded(1, 1024, whole_only=True),
                        help="torch threads on a CPU (default: torch's own choice); recorded in the profile")
    parser.add_argument("--scale", type=options.bounded(0.0, 16.0, low_open=True), default=1.0,
                        help="prompt lengths times this, above 0 and at most 16 (default 1: prompts of 16 - 512 "
                             "tokens; less is quicker and fits less of the range)")
    parser.add_argument("--seed", type=options.bounded(0, 2**31 - 1, whole_only=True), default=0,
                        help="seed of the random prompts (default 0)")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="fit the steps' wall time (default), or this process's CPU time: the same on an idle "
                             "machine with --threads 1, and unmoved by other processes' load on a busy one")
    parser.add_argument("--no-save", action="store_true", help="print the fit but store no profile")
    parser.add_argument("--json", metavar="OUT", help="also write the fit and the profile as JSON to OUT")
    parser.set_defaults(func=run)


def status(message: str) -> None:
    print(f"kvscope calibrate: {shown(message)}", file=sys.stderr, flush=True)  # a path in it may hold ESC


def check_scale_floor(scale: float) -> None:
    """Each calibration prompt is at least one token: under 1/16, the 16-token prompts were cut to one
    (and the shorter scaled ones with them, all one length), the profile recording the scale asked for;
    `--scale 1e-9` fitted and stored a clock from prompts of one token only, before any prefill was timed."""
    from kvscope.app.lab.calibration import DECODE_SHAPES, PREFILL_LENGTHS

    shortest = min(PREFILL_LENGTHS + tuple(length for _batch, length in DECODE_SHAPES))
    if int(shortest * scale) < 1:
        said = options.typed_float  # 0.0624999 was "--scale 0.0625: ... 1 tokens ..., under one"
        raise ConfigError(f"--scale {said(scale)}: the shortest calibration prompt would be {said(shortest * scale)} "
                          f"tokens ({shortest} x {said(scale)}), under one, and every prompt that short is run as one token: the "
                          f"fit would not see the lengths it is for; give at least --scale {1 / shortest:g}")


def check_scale_ceiling(args) -> None:
    """The longest scaled prompt fits the model's length, said from its preset or config.json before
    `loading ...`: `calibrate --scale 16` (the most --help names) loaded the model and began measuring,
    then was refused as past smollm2-135m-instruct's 8,192 tokens."""
    from kvscope.app.lab.calibration import check_scale_fits, default_calibration_model

    shape = options.model_shape(args.model or default_calibration_model(), args.model_path)
    check_scale_fits(args.scale, shape.longest_context, shape.name)


def torch_default_threads() -> int:
    """The threads torch works a step with when --threads is not given (its own choice for this machine)."""
    import torch

    return torch.get_num_threads()


def check_cpu_clock_threads(args, device_type: str = "cpu") -> None:
    """--clock cpu fits this process's CPU seconds, the sum over its threads: with torch's several
    threads working a step, that is a multiple of the step's time, and the profile stored it as this
    machine's clock (steps twice as slow on 2 threads). One thread's CPU time is the step's. On a GPU
    the step runs on the device, which no CPU second times: that was refused as too many threads."""
    if args.clock == "cpu" and device_type != "cpu":
        raise ConfigError(f"--clock cpu: it times this process's CPU seconds, and on {device_type} the steps run on "
                          "the device, not the CPU: drop --clock cpu (the wall clock), or give --device cpu")
    if args.clock != "cpu" or args.threads == 1:
        return
    threads = args.threads or torch_default_threads()
    if threads == 1:
        return
    who = f"--threads {threads}" if args.threads else f"torch's default here, {counted(threads, 'thread')}"
    raise ConfigError(f"--clock cpu: it times this process's CPU seconds, summed over its threads, and with {who} "
                      f"working each step a step's CPU time would be up to {threads}x its time; give --threads 1 with "
                      "it, or drop --clock cpu to fit the steps' wall time")


def run(args) -> int:
    from kvscope.app.lab.output_path import check_file_output, check_output_path, write_json_output

    # A file only: the table takes the standard output (`--json -` mixed the two). Nor one of the files
    # read: the model's preset or folder (the stored profile is checked once the machine is known).
    inputs = options.model_input_files(args.model, args.model_path)
    check_file_output("--json", args.json, "the fit's JSON (the table takes the standard output)", inputs)
    if args.model and args.model_path:  # as `math` and `run` say: one source of weights
        raise ConfigError("--model and --model-path both name the weights to calibrate on; give one")
    options.check_real_device(args.device)
    options.check_real_model(args.model, args.model_path, fit_on=args.device)  # before `loading ...`
    from kvscope.app.lab.models.loader import resolve_device

    device_type = resolve_device(args.device, "--device").type
    combinations.refuse_threads_past_the_cores(args, device_type)
    if not args.no_save:  # the profile is stored in the cache
        options.check_cache_variable()
    check_scale_floor(args.scale)
    check_scale_ceiling(args)
    check_cpu_clock_threads(args, device_type)
    import torch

    from kvscope.app.lab import calibration
    from kvscope.app.lab.real_backend import load_for_real_backend
    from kvscope.app.lab.this_machine import this_machine_key
    from kvscope.engine.config import EngineArgs

    if args.threads:
        torch.set_num_threads(args.threads)
    model = args.model or calibration.default_calibration_model()
    status(f"loading {args.model_path or model} ...")
    loaded = load_for_real_backend(model, args.model_path, args.device, args.dtype, progress=status)
    machine = this_machine_key(use_cuda=loaded.device.type == "cuda")
    if not args.no_save:  # --json onto the profile about to be stored would replace it with the report
        check_output_path("--json", args.json, {"calibration profile this command stores":
                                                str(calibration.profile_path(machine))})
    if not args.no_save:  # a cache that cannot hold the profile is said now, not after the run
        from kvscope.app.lab.verify.tiny_model import make_cache_folder

        make_cache_folder(calibration.profile_path(machine).parent)
    threads = torch.get_num_threads()
    details = f"{loaded.label}" + (f", {counted(threads, 'torch thread')}" if loaded.device.type == "cpu" else "")
    status(f"measuring {details} on {machine}: {len(calibration.calibration_phases(1000, 10**6))} groups of "
           "requests, each run to the end")
    if args.clock == "cpu":
        details += ", CPU-time clock"
    result = calibration.run_calibration(loaded, EngineArgs(), scale=args.scale, seed=args.seed, progress=status,
                                         clock=args.clock)
    fitted = result.calibration(machine, details)
    summary = result.fit.summary()
    path = calibration.profile_path(machine)
    profile = calibration.make_profile(machine, result.engine.hardware.description, fitted, {
        **summary, "held_out_median_error": result.held_out_median_error}, {
        "model": loaded.label, "device": str(loaded.device), "torch_threads": threads, "scale": args.scale,
        "seed": args.seed, "clock": args.clock,  # what flops_efficiency is a share of: the peak of the fit's dtype
        "peak_flops": result.engine.hardware.flops_for(result.engine.model.weight_dtype),
        "peak_dtype": result.engine.model.weight_dtype})
    terms = result.fit.calibration_terms
    hardware = result.engine.hardware
    print(table([
        ("machine", f"{machine} ({hardware.description})"),
        ("measured on", details),
        ("steps", f"{summary['steps']:,} ({summary['outliers_set_aside']} set aside as outliers)"),
        ("achieved FLOP/s", f"{terms['flops_efficiency'] * 100:.1f} % of the "
                            f"{hardware.flops_for(result.engine.model.weight_dtype):.3g} "
                            "FLOP/s peak this machine's preset assumes" + (
                                " (never the slower side here: the per-token overhead carries a prefill's time)"
                                if terms["flops_efficiency"] >= MAX_EFFICIENCY else "")),
        ("achieved bandwidth", f"{terms['bandwidth_efficiency'] * 100:.1f} % of "
                               f"{hardware.memory_bandwidth_bytes_per_s / 1e9:.3g} GB/s reading the weights, "
                               f"{terms['kv_bandwidth_efficiency'] * 100:.1f} % reading and writing the KV cache"),
        ("overhead per step", format_seconds(terms["overhead_s"])),
        ("overhead per request", format_seconds(terms["overhead_per_seq_s"])),
        ("overhead per token", format_seconds(terms["overhead_per_token_s"])),
        ("step time error, fitted steps", f"median {summary['median_error'] * 100:.1f} %, "
                                          f"p90 {summary['p90_error'] * 100:.1f} %"),
        ("step time error, held out", f"median {result.held_out_median_error * 100:.1f} % (steps predicted by fits "
                                      "that did not see them)"),
        ("simulated times now say", calibration_note(fitted)),
        ("profile", "not stored (--no-save)" if args.no_save else str(path)),
    ], title="Calibrated clock"))
    if not args.no_save:
        calibration.save_profile(path, profile)
    if args.json:
        steps = [{name: getattr(s, name) for name in s.__dataclass_fields__} for s in result.steps]
        write_json_output("--json", args.json, {**profile, "steps": steps})
    return 0
