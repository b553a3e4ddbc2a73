"""`kvscope verify`: the paged engine against transformers' own generate(), per KV precision."""

from __future__ import annotations

from pathlib import Path

from kvscope.engine.config import (
    COMPUTE_DTYPES,
    DEFAULT_REAL_MODEL,
    KV_CACHE_DTYPE_BYTES,
    KV_CACHE_PRECISIONS,
    ConfigError,
)

from kvscope.app.cli import options
from kvscope.app.cli.run import status
from kvscope.app.cli.output import table
from kvscope.app.lab.output_path import check_output_path, write_json_output

# Each prompt runs through the paged engine and through generate(): a few dozen take minutes on a
# CPU already. The longest parity prompt is 220 tokens (app/lab/verify/parity.py).
MAX_PROMPTS = 256
MAX_TOKENS = 4096
LONGEST_PROMPT = 220


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("verify", help="check the real paged engine against transformers' generate()")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--model", metavar="PRESET", default=DEFAULT_REAL_MODEL,
                        help=f"a model preset, run with random weights of its shape (default {DEFAULT_REAL_MODEL})")
    source.add_argument("--model-path", metavar="DIR", help="a local Hugging Face model directory")
    parser.add_argument("--kv-cache-dtype", default="all",
                        help=f"{', '.join(KV_CACHE_PRECISIONS)}, or all (default)")
    parser.add_argument("--device", help="cpu, cuda or cuda:N (default: cuda if present, else cpu)")
    parser.add_argument("--dtype", choices=COMPUTE_DTYPES, help="weight dtype (default fp32 on CPU)")
    parser.add_argument("--prompts", type=options.bounded(1, MAX_PROMPTS, whole_only=True), default=8,
                        help=f"prompts to compare, 1 to {MAX_PROMPTS} (default 8)")
    parser.add_argument("--max-tokens", type=options.bounded(1, MAX_TOKENS, whole_only=True), default=16,
                        help=f"tokens generated per prompt, 1 to {MAX_TOKENS} (default 16)")
    parser.add_argument("--json", metavar="OUT", help="write the results as JSON to OUT ('-' for stdout)")
    parser.set_defaults(func=run)


def run(args) -> int:
    dtypes = KV_CACHE_PRECISIONS if args.kv_cache_dtype == "all" else (args.kv_cache_dtype,)
    for dtype in dtypes:
        if dtype not in KV_CACHE_DTYPE_BYTES:
            raise ConfigError(f"unknown kv_cache_dtype {dtype!r}; choose all or one of: {', '.join(KV_CACHE_DTYPE_BYTES)}")
    if args.json and args.json != "-" and not Path(args.json).resolve().parent.is_dir():
        raise ConfigError(f"--json {args.json}: the folder does not exist")
    check_output_path("--json", args.json,
                      {"model config": str(Path(args.model_path) / "config.json")} if args.model_path else None)
    from kvscope.app.lab.verify.parity import run_parity
    from kvscope.app.lab.real_backend import load_for_real_backend

    status(f"loading {args.model_path or args.model} ...")
    loaded = load_for_real_backend(args.model, args.model_path, args.device, args.dtype)
    context = loaded.config.max_position_embeddings
    if LONGEST_PROMPT + args.max_tokens > context:
        raise ConfigError(f"--max-tokens {args.max_tokens}: a prompt of up to {LONGEST_PROMPT} tokens and its answer "
                          f"must fit the model's {context:,}-token context; give at most {context - LONGEST_PROMPT:,}")
    status(f"loaded {loaded.label}; running {args.prompts} prompts through the paged engine and through generate()")
    results = []
    for dtype in dtypes:
        result = run_parity(loaded, dtype, num_prompts=args.prompts, max_tokens=args.max_tokens)
        results.append(result)
        if args.json != "-":
            print(table([
                ("sequences identical to generate()", f"{result.identical_sequences} of {result.sequences}"),
                ("tokens equal to generate()'s", f"{result.token_agreement * 100:.1f} %"),
                ("top-1 agreement (same prefix)", f"{result.top1_agreement * 100:.1f} %"),
                ("largest logit difference", f"{result.max_logit_diff:.3g} (logit units)"),
                ("exercised", f"{result.preemptions} preemptions, {result.prefix_hit_tokens} prefix-cache tokens reused, "
                              f"{result.chunked_prefill_chunks} partial prompt chunks"),
            ], title=f"KV cache {result.kv_cache_dtype}: {'EXACT' if result.exact else 'differs'}"))
            print()
    report = {"model": loaded.label, "results": [r.to_dict() for r in results]}
    if args.json:
        write_json_output("--json", args.json, report)
    # fp32 KV must reproduce generate() exactly; narrower types only report their cost.
    failed = [r for r in results if r.kv_cache_dtype == "fp32" and not r.exact]
    if failed:
        status("FAILED: with fp32 KV the paged engine must produce generate()'s tokens exactly")
        return 1
    return 0

