"""`kvscope math`: a model's KV cache on a hardware target — bytes per token, what the memory is
spent on, pool, blocks, concurrency — as a table or one JSON object. With vLLM's accounting (the
default) the lesson's formula is shown beside what vLLM allocates."""

from __future__ import annotations

import json

from kvscope.engine.config import (CUDA_GRAPHS_PROFILED_FROM, KV_CACHE_DTYPE_BYTES, ConfigError,
                                   default_gpu_memory_utilization, parse_vllm_version, resolve_engine_args)
from kvscope.engine.memory_math import full_length_reason, no_room_reason, plan_memory
from kvscope.engine.units import format_bytes

from kvscope.app.cli import combinations, options
from kvscope.app.cli.lessons import MEMORY_LESSON
from kvscope.app.cli.output import counted, table

GROUP_NAMES = {"full_attention": "full attention", "sliding_attention": "sliding window",
               "linear_attention": "linear-attention state"}


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("math", help="KV cache memory math: bytes per token, pool, blocks, concurrency")
    options.add_model_options(parser)
    options.add_hardware_options(parser)
    options.add_engine_options(parser)
    # the token budget and max_num_seqs size vLLM's activation peak; how requests are scheduled and
    # their blocks allocated changes nothing in the memory math, so math takes no flag for either
    options.add_scheduler_options(parser, leave_out=("scheduling", "allocation"))
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.set_defaults(func=run)


def _model_row(model) -> str:
    layers = f"{model.num_hidden_layers} layers"
    kinds = [(model.count_layers(k), name) for k, name in GROUP_NAMES.items()]
    if model.layer_types:
        layers += " (" + ", ".join(f"{n} {name}" for n, name in kinds if n) + ")"
    text = f"{model.name}: {layers}, {model.num_attention_heads} attention heads, "
    if model.uses_mla:
        text += f"latent attention ({model.kv_lora_rank} + {model.qk_rope_head_dim} rope per token)"
    else:
        text += f"{model.num_key_value_heads} KV heads x head_dim {model.head_dim}"
    if model.num_experts:
        text += f", {model.num_experts} experts ({model.num_experts_per_tok} per token)"
    return text


def _per_token_formula(plan, model) -> str:
    element = KV_CACHE_DTYPE_BYTES[plan.kv_cache_dtype]
    cached = model.num_hidden_layers if plan.accounting == "lesson" else \
        model.count_layers("full_attention") + model.count_layers("sliding_attention")
    if plan.accounting == "vllm" and model.uses_mla:
        return f"{cached} layers x ({model.kv_lora_rank} + {model.qk_rope_head_dim}) x {element} B"
    of = "" if cached == model.num_hidden_layers else f" of {model.num_hidden_layers}"
    return f"2 x {cached}{of} layers x {model.num_key_value_heads} KV heads x {model.head_dim} x {element} B"


def _replicated(plan) -> str:
    """What tensor parallelism stores of a token when each device keeps a whole copy (a latent, or
    fewer KV heads than devices): the pool, the blocks and KV per sequence count every copy, and
    "68.62 KiB" a token stood beside "85.78 GiB" for 163,840 tokens with nothing to say why."""
    tp, per_device = plan.tensor_parallel_size, plan.kv_bytes_per_token_per_device
    if tp == 1 or per_device * tp <= plan.kv_bytes_per_token:
        return ""
    return (f"; each of the {tp} devices stores {format_bytes(per_device)} of it (replicated, not split): "
            f"{format_bytes(per_device * tp)} a token in all")


def _groups_row(plan, model) -> str:
    groups = plan.layer_groups
    per_kind: dict[str, list] = {}
    for kind, _layers, blocks in groups:
        per_kind.setdefault(kind, []).append(blocks)
    size = max(layers for _k, layers, _b in groups)
    parts = []
    for kind, blocks in per_kind.items():
        name = GROUP_NAMES[kind] + (f" {model.sliding_window:,}" if kind == "sliding_attention" else "")
        parts.append(f"{len(blocks)} {name} ({counted(blocks[0], 'block')} a request{' each' if len(blocks) > 1 else ''})")
    padding = f"; {plan.padding_layers} padding layers" if plan.padding_layers else ""
    return f"{len(groups)} groups of {size} layers: " + ", ".join(parts) + padding


def _no_graphs_reason(plan, hardware) -> str:
    if hardware.kind != "gpu":
        return "none on a CPU target (CUDA graphs are captured on CUDA only)"
    if parse_vllm_version(plan.vllm_version) < CUDA_GRAPHS_PROFILED_FROM:
        return "not subtracted (captured after the KV cache before vLLM 0.21)"
    return "none captured (--enforce-eager)"


def _share_origin(plan) -> str:
    """Where a share vLLM would also take by itself comes from: its release's default moved (0.92 from 0.21).
    The lesson's plan names no release (its formula reads none)."""
    if plan.vllm_version and plan.gpu_memory_utilization == default_gpu_memory_utilization(plan.vllm_version):
        return f" (vLLM {plan.vllm_version}'s default)"
    return ""


def math_rows(plan, model, hardware) -> list[tuple[str, str]]:
    tp = plan.tensor_parallel_size
    devices = f" on {tp} devices" if tp > 1 else ""
    vllm = plan.accounting == "vllm"
    usable = plan.memory_bytes * plan.gpu_memory_utilization
    rows = [
        ("model", _model_row(model)),
        ("hardware", f"{hardware.name}: {hardware.description or ''}".rstrip(": ")),
        ("accounting", f"what vLLM {plan.vllm_version} allocates" if vllm
         else f"the formula of {MEMORY_LESSON}: memory x utilization - weights, every layer a full KV cache"),
        ("KV cache dtype", f"{plan.kv_cache_dtype}"),
        ("KV per token", f"{format_bytes(plan.kv_bytes_per_token)}  ({_per_token_formula(plan, model)})"
                         + _replicated(plan)),
        ("KV per sequence", f"{format_bytes(plan.kv_bytes_per_sequence)}  at max_model_len {counted(plan.max_model_len, 'token')}"),
    ]
    if len(plan.layer_groups) > 1 or plan.padding_layers:
        rows.append(("layer groups", _groups_row(plan, model)))
    rows += [
        ("device memory", f"{format_bytes(plan.memory_bytes)}{devices}, " + (
            "gpu_memory_utilization not applied (as in vLLM, a set KV budget replaces it)" if plan.is_set_budget else
            f"x gpu_memory_utilization {plan.gpu_memory_utilization:g}{_share_origin(plan)} = {format_bytes(usable)}")),
        ("weights", f"{format_bytes(plan.weights_bytes)}  ({plan.weights_source})"),
    ]
    if plan.is_set_budget:
        rows.append(("held back", "nothing subtracted: the KV pool is a set budget, not what is left of the memory"))
    elif vllm:
        rows += [
            ("activation peak", f"{format_bytes(plan.activation_bytes)}  (profiled: a forward of "
                                f"{plan.profiled_tokens:,} tokens, sampling {plan.profiled_seqs:,} sequences)"),
            ("non-torch memory", f"{format_bytes(plan.non_torch_bytes)}  (CUDA context, NCCL and all-reduce buffers)"
             if hardware.kind == "gpu" else "none on a CPU target (no CUDA context, no NCCL)"),
            ("CUDA graphs", f"{format_bytes(plan.cudagraph_bytes)}  (vLLM's estimate)" if plan.cudagraph_bytes
             else _no_graphs_reason(plan, hardware)),
        ]
    if not plan.is_set_budget:
        rows.append(("reserve", f"{format_bytes(plan.extra_reserve_bytes)}"
                                + ("  (--reserve-bytes, beyond the above)" if vllm else "")))
    rows += [
        ("KV pool", f"{format_bytes(plan.kv_pool_bytes)}  ({plan.kv_pool_source})" if plan.kv_pool_bytes >= 0
         else f"none: {format_bytes(-plan.kv_pool_bytes)} short  ({plan.kv_pool_source})"),
        ("block", f"{plan.block_size:,} tokens = {format_bytes(plan.block_bytes)}"),
        ("blocks", f"{plan.num_blocks:,}  ({plan.num_blocks * plan.block_size:,} token slots"
                   + (f", each one token of one of the {len(plan.layer_groups)} layer groups)"
                      if len(plan.layer_groups) > 1 else ")")),
    ]
    if vllm:
        rows.append((f"{'CPU' if hardware.kind == 'cpu' else 'GPU'} KV cache size", f"{plan.kv_cache_size_tokens:,} tokens  (the figure vLLM "
                                          f"{plan.vllm_version} logs)"))
    rows.append(("max concurrent sequences", f"{plan.max_concurrent_sequences:,.2f}  at {counted(plan.max_model_len, 'token')} "
                                             f"each ({counted(plan.blocks_per_sequence, 'block')} per sequence)"))
    if vllm and abs(plan.lesson_max_concurrent_sequences - plan.max_concurrent_sequences) >= 0.005:
        rows.append(("the lesson's formula", f"{plan.lesson_max_concurrent_sequences:,.2f} sequences: a "
                                             f"{format_bytes(plan.lesson_kv_pool_bytes)} pool, {plan.lesson_num_blocks:,} "
                                             f"blocks (the formula of {MEMORY_LESSON}: nothing held back, every "
                                             "layer a full KV cache)"))
    if not plan.fits:
        rows.append(("does not fit", no_room_reason(plan)))
    elif full_length_reason(plan):
        rows.append(("does not fit", full_length_reason(plan)))
    return rows


def run(args) -> int:
    options.refuse_what_the_lesson_ignores(args, "math")
    model = options.model_from_args(args)
    hardware = options.hardware_from_args(args)
    engine_args = options.engine_args_from_args(args)
    combinations.refuse_cpu_share_simulated(args, hardware)
    combinations.refuse_a_split_not_typed(args, model, hardware)
    resolved = resolve_engine_args(engine_args, model, hardware)
    plan = plan_memory(model, hardware, resolved)
    options.refuse_kv_budget_beyond_memory(plan, args)
    refuse_prefix_caching_that_changes_nothing(args, model, hardware, engine_args, plan)
    refuse_weight_dtype_beside_weights_bytes(args, hardware, resolved, plan)
    combinations.refuse_what_a_set_budget_ignores(args, hardware, engine_args, resolved, "math")
    if args.json:
        # kv_pool_bytes is negative by what the memory is short when nothing fits; "fits" says in a
        # word whether a server with these settings would start: a block, and a whole request, fit
        too_long = full_length_reason(plan)
        print(json.dumps({**plan.to_dict(), "fits": plan.fits and too_long is None,
                          "does_not_fit": no_room_reason(plan) if not plan.fits else too_long}, indent=2))
    else:
        print(table(math_rows(plan, model, hardware), title="KV cache memory math"))
    return 0


def refuse_weight_dtype_beside_weights_bytes(args, hardware, resolved, plan) -> None:
    """`math --weights-bytes 1e9 --weight-dtype fp8` printed (and --json wrote) the very figures of
    `math --weights-bytes 1e9`: the memory math reads the weights' precision only to size them, and
    --weights-bytes gives that size. (`run` reads it too, for the simulated clock's FLOP/s.)"""
    if not args.weight_dtype or args.weights_bytes is None:
        return
    import argparse

    plain = options.model_from_args(argparse.Namespace(**{**vars(args), "weight_dtype": None}))
    if plan_memory(plain, hardware, resolved).to_dict() != plan.to_dict():
        return
    raise ConfigError(f"--weight-dtype {args.weight_dtype} changes nothing in `kvscope math` beside --weights-bytes "
                      f"{args.weights_bytes:g}: the memory math reads the weights' precision only to size them, and "
                      "--weights-bytes gives their size; drop one (--params with --weight-dtype sizes them from the "
                      "parameter count)")


def refuse_prefix_caching_that_changes_nothing(args, model, hardware, engine_args, plan) -> None:
    """Prefix caching decides which blocks a run reuses; the memory it plans differs only where vLLM
    keeps two state blocks a request for it (a model with linear-attention layers, from vLLM 0.24).
    Anywhere else `math --no-enable-prefix-caching` was taken and printed the same table."""
    if "enable_prefix_caching" not in getattr(args, "given_flags", frozenset()):
        return
    flipped = engine_args.replace(enable_prefix_caching=not engine_args.enable_prefix_caching)
    if plan_memory(model, hardware, resolve_engine_args(flipped, model, hardware)).to_dict() != plan.to_dict():
        return
    flag = "--enable-prefix-caching" if engine_args.enable_prefix_caching else "--no-enable-prefix-caching"
    why = ("--accounting lesson has no state blocks" if engine_args.accounting == "lesson" else
           f"{model.name} has no linear-attention layers" if not model.count_layers("linear_attention") else
           f"vLLM {engine_args.vllm_version} keeps one state block a request either way")
    raise ConfigError(f"{flag} changes nothing in `kvscope math` here ({why}): memory depends on prefix caching "
                      "only for linear-attention layers under vLLM's accounting from 0.24 (two state blocks a "
                      "request); which blocks are reused is `kvscope run`'s: drop it, or give it to `kvscope run`")
