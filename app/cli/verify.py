"""`kvscope verify`: the paged engine against transformers' own generate(), per KV precision."""

from __future__ import annotations

import json
from pathlib import Path

from kvscope.engine.config import KV_CACHE_DTYPE_BYTES, ConfigError

from kvscope.app.cli.run import status
from kvscope.app.cli.output import table

ALL_KV_DTYPES = ("fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2")


def cmd_verify(args) -> int:
    dtypes = ALL_KV_DTYPES if args.kv_cache_dtype == "all" else (args.kv_cache_dtype,)
    for dtype in dtypes:
        if dtype not in KV_CACHE_DTYPE_BYTES:
            raise ConfigError(f"unknown kv_cache_dtype {dtype!r}; choose all or one of: {', '.join(KV_CACHE_DTYPE_BYTES)}")
    if args.json and args.json != "-" and not Path(args.json).resolve().parent.is_dir():
        raise ConfigError(f"--json {args.json}: the folder does not exist")
    from kvscope.app.lab.verify.parity import run_parity
    from kvscope.app.lab.real_backend import load_for_real_backend

    status(f"loading {args.model_path or args.model} ...")
    loaded = load_for_real_backend(args.model, args.model_path, args.device, args.dtype)
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
        text = json.dumps(report, indent=2)
        if args.json == "-":
            print(text)
        else:
            Path(args.json).write_text(text + "\n", encoding="utf-8")
    # fp32 KV must reproduce generate() exactly; narrower types only report their cost.
    failed = [r for r in results if r.kv_cache_dtype == "fp32" and not r.exact]
    if failed:
        status("FAILED: with fp32 KV the paged engine must produce generate()'s tokens exactly")
        return 1
    return 0


def cmd_models(args) -> int:
    from kvscope.app.lab.presets import load_model, preset_names
    from kvscope.engine.runners.model_loader import discover_cached_models, hf_cache_root
    from kvscope.app.lab.verify.tiny_model import cache_dir

    from kvscope.engine.units import format_bytes

    print("presets (real backend: random weights of this shape, built on first use):")
    for name in preset_names("models"):
        print(f"  {name:<22} {load_model(name).description}")
    cached = discover_cached_models()
    print(f"\nHugging Face cache ({hf_cache_root()}):")
    if not cached:
        print("  no models")
    for m in cached:
        note = "" if m.supported else "  (not supported: kvscope runs Llama, Mistral, Qwen2, Qwen3 with safetensors)"
        print(f"  {m.name:<40} {m.architecture:<22} {format_bytes(m.weights_bytes):<22} {m.path}{note}")
    built = sorted(p for p in (cache_dir() / "models").glob("*") if (p / "config.json").is_file())
    print(f"\nbuilt by kvscope ({cache_dir() / 'models'}):")
    if not built:
        print("  none yet")
    for p in built:
        print(f"  {p.name}")
    return 0
