"""`kvscope verify`: the paged engine against transformers' own generate(), per KV precision and
weight quantisation; and, on a model with a tokenizer, what each costs on real English text."""

from __future__ import annotations

from kvscope.engine.config import (
    COMPUTE_DTYPES,
    DEFAULT_REAL_MODEL,
    KV_CACHE_DTYPES,
    KV_CACHE_PRECISIONS,
    QUANTIZATIONS,
    ConfigError,
    normalize_dtype,
)

from kvscope.app.cli import combinations, options
from kvscope.app.cli.run import status
from kvscope.app.cli.output import counted, table
from kvscope.engine.units import format_percent
from kvscope.app.lab.output_path import check_output_path, write_json_output

# Each prompt runs through the paged engine and through generate(): a few dozen take minutes on a
# CPU already. The longest parity prompt is 220 tokens (app/lab/verify/parity.py).
MAX_PROMPTS = 256
MAX_TOKENS = 4096
LONGEST_PROMPT = 220
# Passages of presets/texts/quality-passages.txt (about 270 tokens each); on a 2-core CPU each
# costs SmolLM2-135M a few seconds per configuration.
DEFAULT_PASSAGES = 4
UNQUANTISED = "none"


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("verify", help="check the real paged engine against transformers' generate(), "
                                                  "and measure each KV precision's and weight quantisation's cost")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--model", metavar="PRESET", default=DEFAULT_REAL_MODEL,
                        help=f"a model preset: the trained model, or random weights of a preset's shape "
                             f"(default {DEFAULT_REAL_MODEL})")
    source.add_argument("--model-path", metavar="DIR", help="a local Hugging Face model directory")
    parser.add_argument("--kv-cache-dtype", default="all",
                        help=f"{', '.join(KV_CACHE_PRECISIONS)}, auto (the weights' type), or all (default)")
    parser.add_argument("--quantization", default=UNQUANTISED, choices=(UNQUANTISED, *QUANTIZATIONS, "all"),
                        help="weights quantised on load by bitsandbytes: int8, nf4, all (unquantised, int8 and nf4 "
                             "one after another), or none (default)")
    parser.add_argument("--device", help="cpu, cuda or cuda:N (default: cuda if present, else cpu)")
    parser.add_argument("--dtype", choices=COMPUTE_DTYPES, help="weight dtype (default fp32 on CPU)")
    parser.add_argument("--prompts", type=options.bounded(1, MAX_PROMPTS, whole_only=True), default=8,
                        help=f"prompts to compare, 1 to {MAX_PROMPTS} (default 8)")
    parser.add_argument("--max-tokens", type=options.bounded(1, MAX_TOKENS, whole_only=True), default=16,
                        help=f"tokens generated per prompt, 1 to {MAX_TOKENS} (default 16)")
    parser.add_argument("--passages", type=options.bounded(0, 64, whole_only=True), default=DEFAULT_PASSAGES,
                        help=f"English passages (~270 tokens each) on which top-1 agreement with full precision and "
                             f"perplexity are measured, on a model with a tokenizer; 0 skips it "
                             f"(default {DEFAULT_PASSAGES})")
    parser.add_argument("--json", metavar="OUT", help="write the results as JSON to OUT ('-' for stdout)")
    parser.set_defaults(func=run)


def _loader(args):
    from kvscope.app.lab.real_backend import load_for_real_backend

    def load(quantization):
        status(f"loading {args.model_path or args.model}{f' with {quantization} weights' if quantization else ''} ...")
        return load_for_real_backend(args.model, args.model_path, args.device, args.dtype, quantization)

    return load


def _parity_table(result) -> str:
    title = (f"{result.weights} weights, KV cache {result.kv_cache_dtype}: "
             f"{'EXACT' if result.exact else 'differs'} from generate()")
    return table([
        ("sequences identical to generate()", f"{result.identical_sequences} of {result.sequences}"),
        ("tokens equal to generate()'s", format_percent(result.token_agreement)),
        ("top-1 agreement with full precision", f"{format_percent(result.top1_agreement)}  (its pick, given the same prefix)"),
        ("largest logit difference", f"{result.max_logit_diff:.3g} (logit units)"),
        ("exercised", f"{counted(result.preemptions, 'preemption')}, "  # "1 partial prompt chunks" it said
                      f"{counted(result.prefix_hit_tokens, 'prefix-cache token')} reused, "
                      f"{counted(result.chunked_prefill_chunks, 'partial prompt chunk')}"),
    ], title=title)


def _quality_table(results, reference_weights: str) -> str:
    first = results[0]
    rows = [(f"{r.weights} weights, {r.kv_cache_dtype} KV",
             f"top-1 agreement {r.top1_agreement * 100:5.1f} %   perplexity {r.perplexity:7.3f} "
             f"({r.perplexity_increase * 100:+.2f} %)") for r in results]
    return table(rows, title=f"Quality on {first.passages} English passages ({first.tokens:,} tokens) against full "
                             f"precision ({reference_weights} weights, no KV cache: perplexity "
                             f"{first.full_precision_perplexity:.3f})")


def run(args) -> int:
    # read as `run` and `math` read it (FP16, auto: the weights' own type); "unknown kv_cache_dtype 'auto'" it was
    dtypes = KV_CACHE_PRECISIONS if args.kv_cache_dtype.lower() == "all" else (args.kv_cache_dtype,)
    try:
        dtypes = tuple(normalize_dtype(dtype, dict.fromkeys(KV_CACHE_DTYPES), "kv_cache_dtype") for dtype in dtypes)
    except ConfigError:
        raise ConfigError(f"unknown kv_cache_dtype {args.kv_cache_dtype!r}; choose all or one of: "
                          f"{', '.join(KV_CACHE_DTYPES)}") from None
    quantizations = {"all": (None, *QUANTIZATIONS), UNQUANTISED: (None,)}.get(args.quantization, (args.quantization,))
    # the model's preset file, or every file of its folder (its weights and tokenizer are read too)
    check_output_path("--json", args.json, options.model_input_files(args.model, args.model_path))
    options.check_real_device(args.device)
    options.check_real_model(args.model, args.model_path, fit_on=args.device)  # before `loading ...`, not after it
    if not args.model_path:  # random weights of a preset's shape have no tokenizer: said before loading
        from kvscope.app.lab.trained_model import TRAINED_MODEL

        combinations.refuse_passages_without_a_tokenizer(args, args.model == TRAINED_MODEL.name, args.model)
    # the context from the shape, before `loading ...`: said after it (two lines), and a quantised model was
    # loaded for it, then again to run it (twice `loading ... with int8 weights`, and twice the minutes)
    check_context(options.model_shape(args.model, args.model_path).max_position_embeddings, args.max_tokens)
    from kvscope.app.lab.verify.parity import run_parity
    from kvscope.app.lab.verify import quality

    load = _loader(args)
    full_precision = None
    if None in quantizations or args.passages:
        full_precision = load(None)
    text = bool(args.passages) and full_precision.tokenizer is not None
    combinations.refuse_passages_without_a_tokenizer(args, full_precision is None or full_precision.tokenizer is not None,
                                                     full_precision.config.name if full_precision else "")
    passages = reference = None
    if text:
        passages = quality.passage_token_ids(full_precision, args.passages)
        status(f"scoring {counted(len(passages), 'passage')} with the full-precision model (transformers' forward) ...")
        reference = quality.score_full_precision(full_precision, passages)
    elif args.passages and args.json != "-":
        status(f"{full_precision.config.name} has no tokenizer: quality on real text is not measured")
    results, qualities = [], []
    for quantization in quantizations:
        loaded = full_precision if quantization is None else load(quantization)
        status(f"loaded {loaded.label}; {counted(args.prompts, 'prompt')} through the paged engine and through "
               f"generate(){', ' + counted(len(passages), 'passage') + ' through the engine' if text else ''}")
        for dtype in dtypes:
            result = run_parity(loaded, dtype, num_prompts=args.prompts, max_tokens=args.max_tokens)
            results.append(result)
            if args.json != "-":
                print(_parity_table(result))
                print()
            if text:
                qualities.append(quality.measure_quality(loaded, dtype, reference, passages))
    if qualities and args.json != "-":
        print(_quality_table(qualities, full_precision.config.weight_dtype))
        print()
    report = {"model": (full_precision or loaded).label, "results": [r.to_dict() for r in results],
              "quality": [q.to_dict() for q in qualities]}
    if args.json:
        write_json_output("--json", args.json, report)
    # fp32 KV under unquantised weights must reproduce generate() exactly; the rest report their cost.
    failed = [r for r in results if r.kv_cache_dtype == "fp32" and r.weights in COMPUTE_DTYPES and not r.exact]
    if failed:
        status("FAILED: with fp32 KV the paged engine must produce generate()'s tokens exactly")
        return 1
    return 0


def check_context(context: int, max_tokens: int) -> None:
    if LONGEST_PROMPT + max_tokens > context:
        raise ConfigError(f"--max-tokens {max_tokens}: a prompt of up to {LONGEST_PROMPT} tokens and its answer "
                          f"must fit the model's {context:,}-token context; give at most {context - LONGEST_PROMPT:,}")
