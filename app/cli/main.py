"""The `kvscope` command: memory math, headless runs, presets and benchmarks.

Bad input of any kind ends in one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys

from kvscope.engine.config import ConfigError, resolve_engine_args
from kvscope.engine.memory_math import plan_memory
from kvscope.app.lab.presets import KINDS, load_hardware, load_model, load_workload, preset_names

from kvscope.app.cli import options
from kvscope.engine.units import format_bytes
from kvscope.app.cli.output import table

EXIT_USAGE = 2


def math_rows(plan, model, hardware) -> list[tuple[str, str]]:
    tp = plan.tensor_parallel_size
    devices = f" on {tp} devices" if tp > 1 else ""
    rows = [
        ("model", f"{model.name}: {model.num_hidden_layers} layers, {model.num_attention_heads} attention heads, "
                  f"{model.num_key_value_heads} KV heads x head_dim {model.head_dim}"),
        ("hardware", f"{hardware.name}: {hardware.description or ''}".rstrip(": ")),
        ("KV cache dtype", f"{plan.kv_cache_dtype}"),
        ("KV per token", f"{format_bytes(plan.kv_bytes_per_token)}  "
                         f"(2 x {model.num_hidden_layers} layers x {model.num_key_value_heads} KV heads x "
                         f"{model.head_dim} x {plan.kv_bytes_per_token // (2 * model.num_hidden_layers * model.num_key_value_heads * model.head_dim)} B)"),
        ("KV per sequence", f"{format_bytes(plan.kv_bytes_per_sequence)}  at max_model_len {plan.max_model_len:,} tokens"),
        ("device memory", f"{format_bytes(plan.memory_bytes)}{devices}, x gpu_memory_utilization {plan.gpu_memory_utilization:g}"
                          f" = {format_bytes(plan.memory_bytes * plan.gpu_memory_utilization)}"),
        ("weights", f"{format_bytes(plan.weights_bytes)}  ({plan.weights_source})"),
        ("reserve", format_bytes(plan.reserve_bytes)),
        ("KV pool", f"{format_bytes(plan.kv_pool_bytes)}  ({plan.kv_pool_source})"),
        ("block", f"{plan.block_size} tokens = {format_bytes(plan.block_bytes)}"),
        ("blocks", f"{plan.num_blocks:,}  ({plan.num_blocks * plan.block_size:,} token slots)"),
        ("max concurrent sequences", f"{plan.max_concurrent_sequences:.2f}  at {plan.max_model_len:,} tokens each "
                                     f"({plan.blocks_per_sequence:,} blocks per sequence)"),
    ]
    if not plan.fits:
        rows.append(("does not fit", "the weights leave no memory for a KV cache"))
    return rows


def cmd_math(args) -> int:
    model = options.model_from_args(args)
    hardware = options.hardware_from_args(args)
    engine_args = options.engine_args_from_args(args)
    resolved = resolve_engine_args(engine_args, model, hardware)
    plan = plan_memory(model, hardware, resolved)
    if args.json:
        print(json.dumps(plan.to_dict(), indent=2))
    else:
        print(table(math_rows(plan, model, hardware), title="KV cache memory math"))
    return 0


def cmd_presets(args) -> int:
    kinds = [args.kind] if args.kind else list(KINDS)
    loaders = {"models": load_model, "hardware": load_hardware, "workloads": load_workload}
    for kind in kinds:
        print(f"{kind}:")
        for name in preset_names(kind):
            try:
                description = loaders[kind](name).description
            except ConfigError as exc:
                description = f"(invalid: {exc})"
            print(f"  {name:<22} {description}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kvscope",
        description="See why the KV cache, not compute, decides how many requests a GPU can serve.",
    )
    parser.add_argument("--self-test", action="store_true",
                        help="check this installation end to end (imports, presets, simulated and real steps, "
                             "the window) and exit 0 only if all passed")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p_math = sub.add_parser("math", help="KV cache memory math: bytes per token, pool, blocks, concurrency")
    options.add_model_options(p_math)
    options.add_hardware_options(p_math)
    options.add_engine_options(p_math)
    p_math.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    p_math.set_defaults(func=cmd_math)

    p_run = sub.add_parser("run", help="run a workload through the engine headlessly and summarise it")
    options.add_model_options(p_run)
    options.add_hardware_options(p_run)
    options.add_engine_options(p_run)
    options.add_scheduler_options(p_run)
    options.add_backend_options(p_run)
    group = p_run.add_argument_group("workload")
    group.add_argument("--workload", metavar="PRESET", default="chat", help="workload preset, or a workload .toml file (default chat)")
    group.add_argument("--trace", metavar="FILE", help="replay a trace CSV (TIMESTAMP, ContextTokens, GeneratedTokens)")
    group.add_argument("--requests", type=options.whole, help="number of requests (default: the workload's)")
    group.add_argument("--arrival-rate", type=options.number, help="Poisson arrivals per second (0: all at once)")
    group.add_argument("--seed", type=options.whole, default=0, help="random seed (default 0): same seed, same run")
    p_run.add_argument("--json", metavar="OUT", help="write the summary as JSON to OUT ('-' for stdout)")
    p_run.add_argument("--quiet", action="store_true", help="no progress line")
    p_run.add_argument("--record", metavar="FILE",
                       help="record the run (steps, events, block-map deltas) to FILE (.kvrec) for `kvscope gui --replay`")
    p_run.set_defaults(func=lambda a: _lazy("cli.run", "cmd_run")(a))

    p_gui = sub.add_parser("gui", help="the explorer window")
    p_gui.add_argument("--model", metavar="PRESET", help="model preset (default tiny-llama on the real backend)")
    p_gui.add_argument("--model-path", metavar="DIR", help="a local Hugging Face model directory (real backend)")
    p_gui.add_argument("--hardware", metavar="PRESET", help="hardware preset; a GPU preset selects the simulated backend")
    p_gui.add_argument("--workload", metavar="PRESET", help="workload preset (default azure-conv)")
    p_gui.add_argument("--backend", choices=("simulated", "real"), help="default: real on this machine")
    p_gui.add_argument("--theme", choices=("dark", "light", "contrast"), default="dark",
                       help="colours: dark (default), light, or contrast (high contrast, as demo mode uses)")
    p_gui.add_argument("--size", type=_size, default=(1600, 960), metavar="WxH", help="window size (default 1600x960)")
    p_gui.add_argument("--quit-after", type=options.number, metavar="SECONDS", help="close after this many seconds")
    p_gui.add_argument("--screenshot", metavar="PNG", help="with --quit-after: save the window as a PNG first")
    p_gui.add_argument("--demo", action="store_true",
                       help="demo mode for talks: fullscreen, large fonts, high contrast, settings hidden (F11 toggles)")
    p_gui.add_argument("--replay", metavar="FILE", help="replay a recorded run (.kvrec): no model, no GPU needed")
    p_gui.add_argument("--scenario", metavar="NAME", help="open a guided scenario (see `kvscope scenarios`)")
    p_gui.set_defaults(func=lambda a: _lazy("cli.gui", "cmd_gui")(a))

    p_scenarios = sub.add_parser("scenarios", help="list the guided scenarios (each a question, a comparison, a reveal)")
    p_scenarios.add_argument("--json", action="store_true", help="print them as JSON")
    p_scenarios.set_defaults(func=lambda a: _lazy("cli.compare", "cmd_scenarios")(a))

    p_compare = sub.add_parser("compare", help="run a scenario's configurations on the identical workload, side by side")
    p_compare.add_argument("--scenario", metavar="NAME", required=True, help="a scenario name (`kvscope scenarios`)")
    p_compare.add_argument("--requests", type=options.whole, help="override the scenario's number of requests")
    p_compare.add_argument("--seed", type=options.whole, help="override the scenario's random seed")
    p_compare.add_argument("--json", metavar="OUT", help="write one object per configuration as JSON to OUT ('-' for stdout)")
    p_compare.add_argument("--csv", metavar="OUT", help="write the results table as CSV to OUT")
    p_compare.add_argument("--quiet", action="store_true", help="no progress line")
    p_compare.set_defaults(func=lambda a: _lazy("cli.compare", "cmd_compare")(a))

    p_export = sub.add_parser("export", help="convert a recorded run (.kvrec) for other tools")
    p_export.add_argument("file", metavar="FILE", help="a recording written by `kvscope run --record`")
    p_export.add_argument("--perfetto", metavar="OUT", help="a Chrome/Perfetto trace JSON (open it at ui.perfetto.dev)")
    p_export.add_argument("--csv", metavar="OUT", help="the per-step series as CSV")
    p_export.set_defaults(func=lambda a: _lazy("cli.export", "cmd_export")(a))

    p_verify = sub.add_parser("verify", help="check the real paged engine against transformers' generate()")
    source = p_verify.add_mutually_exclusive_group()
    source.add_argument("--model", metavar="PRESET", default="tiny-llama",
                        help="a model preset, run with random weights of its shape (default tiny-llama)")
    source.add_argument("--model-path", metavar="DIR", help="a local Hugging Face model directory")
    p_verify.add_argument("--kv-cache-dtype", default="all", help="fp32, fp16, bf16, fp8_e4m3, fp8_e5m2, or all (default)")
    p_verify.add_argument("--device", help="cpu, cuda or cuda:N (default: cuda if present, else cpu)")
    p_verify.add_argument("--dtype", choices=("fp32", "fp16", "bf16"), help="weight dtype (default fp32 on CPU)")
    p_verify.add_argument("--prompts", type=options.whole, default=8, help="prompts to compare (default 8)")
    p_verify.add_argument("--max-tokens", type=options.whole, default=16, help="tokens generated per prompt (default 16)")
    p_verify.add_argument("--json", metavar="OUT", help="write the results as JSON to OUT ('-' for stdout)")
    p_verify.set_defaults(func=lambda a: _lazy("cli.verify", "cmd_verify")(a))

    p_models = sub.add_parser("models", help="models the real backend can run: presets, the local Hugging Face cache")
    p_models.set_defaults(func=lambda a: _lazy("cli.verify", "cmd_models")(a))

    p_presets = sub.add_parser("presets", help="list the built-in presets")
    p_presets.add_argument("kind", nargs="?", choices=KINDS)
    p_presets.set_defaults(func=cmd_presets)

    p_bench = sub.add_parser("bench", help="benchmarks whose figures go in README.md")
    p_bench.add_argument("what", nargs="?", choices=("scheduler", "trace", "real", "gui"),
                         help="scheduler: per-step overhead at 256 running on 100k blocks; "
                              "trace: the whole Azure trace on llama-3-8b / h100-80gb (simulated); "
                              "real: the real engine vs transformers on the tiny model; "
                              "gui: the window's frame time and its cost to the engine "
                              "(default: all but gui)")
    p_bench.add_argument("--requests", type=options.whole, default=64, help="real: requests in the workload (default 64)")
    p_bench.add_argument("--device", help="real: cpu or cuda (default: cuda if present)")
    p_bench.add_argument("--json", metavar="OUT", help="also write the figures as JSON")
    p_bench.set_defaults(func=lambda a: _lazy("bench.bench", "cmd_bench")(a))
    return parser


def _size(text: str) -> tuple[int, int]:
    try:
        width, height = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected WIDTHxHEIGHT, e.g. 1920x1080, got {text!r}") from None
    if width < 320 or height < 240:
        raise argparse.ArgumentTypeError(f"a window of at least 320x240, got {text!r}")
    return width, height


def _lazy(module: str, name: str):
    import importlib

    return getattr(importlib.import_module(f"kvscope.app.{module}"), name)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--self-test"]:
        from kvscope.app.bench.self_test import run_self_test

        return run_self_test(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
    try:
        return args.func(args)
    except ConfigError as exc:
        print(f"kvscope: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("kvscope: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
