"""The checks every input of the engine passes before arithmetic or an allocation sees it.

Numbers: a closed range, its bounds in the message (`whole_number`, `real_number`); the ranges
are generous (ten times anything real) but finite, so no product overflows a float and no count
sizes an allocation past memory. The engine reads no files: the checks of a table read from
one (its fields' types, app/lab/table_checks.py) and of the file itself (a size cap, JSON's
nesting depth, app/lab/bounded_reads.py) are above it.

Every failure is a ConfigError (config.py) whose message starts with what was read (a flag, a
file, a preset and its field) and says what would be accepted.
"""

from __future__ import annotations

import math

# Defined here, re-exported by config.py: the checks below need it, config.py needs the checks.


class ConfigError(ValueError):
    """Input a user gave that cannot work; the message says which field and why."""


# -- numbers -----------------------------------------------------------------------------------

# Counts of things a model or a run holds: generous ceilings, far beyond any real model, low
# enough that products of them stay exact in a float and allocations stay in memory.
MAX_LAYERS = 10_000
MAX_HEADS = 65_536
MAX_HEAD_DIM = 65_536
MAX_HIDDEN_SIZE = 1 << 22  # 4,194,304
MAX_VOCAB_SIZE = 1 << 26  # 67,108,864
MAX_CONTEXT_TOKENS = 1 << 30  # 1,073,741,824 tokens: max_position_embeddings, max_model_len
MAX_BYTES = 1 << 60  # 1 EiB: weights, memory, budgets
MAX_RATE = 1e21  # FLOP/s and bytes/s per device: a zettaflop
MAX_DEVICES = 65_536
MAX_EXPERTS = 1 << 20
MAX_SEQUENCES = 1 << 20  # max_num_seqs
MAX_BLOCK_SIZE = 1 << 20  # tokens per KV block
MAX_SEED = 2**63 - 1  # numpy's generators take up to 2**64 - 1; a signed int64 stays portable
# Blocks in one KV pool: each costs the engine about 130 bytes (its arrays and the free queue), so
# this many is about half a GiB and a second to build; a larger pool (a tiny model on a huge
# budget) is refused rather than built.
MAX_NUM_BLOCKS = 1 << 22  # 4,194,304

# The ceiling of each field of the engine's inputs (ModelConfig, HardwareSpec, EngineArgs) that is
# a count or a size, by its name; a field not named here is a size in bytes (MAX_BYTES) or a rate.
CEILINGS = {
    "num_hidden_layers": MAX_LAYERS, "num_dense_layers": MAX_LAYERS,
    "num_attention_heads": MAX_HEADS, "num_key_value_heads": MAX_HEADS,
    "head_dim": MAX_HEAD_DIM, "qk_rope_head_dim": MAX_HEAD_DIM, "v_head_dim": MAX_HEAD_DIM,
    "hidden_size": MAX_HIDDEN_SIZE, "intermediate_size": MAX_HIDDEN_SIZE, "moe_intermediate_size": MAX_HIDDEN_SIZE,
    "shared_expert_intermediate_size": MAX_HIDDEN_SIZE, "kv_lora_rank": MAX_HIDDEN_SIZE,
    "q_lora_rank": MAX_HIDDEN_SIZE,
    "vocab_size": MAX_VOCAB_SIZE,
    "max_position_embeddings": MAX_CONTEXT_TOKENS, "max_model_len": MAX_CONTEXT_TOKENS,
    "max_model_len_limit": MAX_CONTEXT_TOKENS,
    "max_num_batched_tokens": MAX_CONTEXT_TOKENS, "sliding_window": MAX_CONTEXT_TOKENS,
    "num_experts": MAX_EXPERTS, "num_experts_per_tok": MAX_EXPERTS,
    "gpu_count": MAX_DEVICES, "tensor_parallel_size": MAX_DEVICES,
    "block_size": MAX_BLOCK_SIZE, "max_num_seqs": MAX_SEQUENCES, "num_gpu_blocks_override": MAX_NUM_BLOCKS,
}


def ceiling(name: str, default=MAX_BYTES):
    """The largest value a field of this name takes (CEILINGS; default for sizes and rates)."""
    return CEILINGS.get(name, default)


def shown(value) -> str:
    """A value as a message quotes it: short, one line (a 400-digit number is not repeated whole)."""
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, int):
        text = f"{value:,}"
        return text if len(text) <= 30 else f"{str(value)[:6]}... ({len(str(abs(value)))} digits)"
    if isinstance(value, float):
        return f"{value:,}" if math.isfinite(value) and abs(value) < 1e15 else f"{value:g}"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _bound(n) -> str:
    if isinstance(n, float) and n.is_integer() and abs(n) < 1e16:
        n = int(n)
    return f"{n:,}" if isinstance(n, int) else f"{n:g}"


def whole_number(value, what: str, low: int = 1, high: int = MAX_BYTES) -> int:
    """value as an int if it is a whole number in [low, high] (2.0 counts; True, 2.5, "2" do not).
    The message names the bound that was crossed: "must be greater than 0", "must be at most ..."."""
    ok = not isinstance(value, bool) and isinstance(value, (int, float))
    if ok and isinstance(value, float):
        ok = math.isfinite(value) and value == int(value)
    if not ok:
        raise ConfigError(f"{what} must be a whole number from {_bound(low)} to {_bound(high)}, got {shown(value)}")
    if value < low:
        least = "greater than 0" if low == 1 else "0 or more" if low == 0 else f"at least {_bound(low)}"
        raise ConfigError(f"{what} must be {least}, got {shown(value)}")
    if value > high:
        raise ConfigError(f"{what} must be at most {_bound(high)}, got {shown(value)}")
    return int(value)


def real_number(value, what: str, low: float = 0.0, high: float = MAX_RATE, low_open: bool = False) -> float:
    """value as a float if it is a finite number in [low, high] ((low, high] when low_open)."""
    # an int is finite however large (math.isfinite(10**400) raises OverflowError): its bounds say
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (isinstance(value, float)
                                                                        and not math.isfinite(value)):
        span = f"greater than {_bound(low)} and at most" if low_open else f"from {_bound(low)} to"
        raise ConfigError(f"{what} must be a number {span} {_bound(high)}, got {shown(value)}")
    if value < low or (low_open and value == low):
        least = f"greater than {_bound(low)}" if low_open else ("0 or more" if low == 0 else f"at least {_bound(low)}")
        raise ConfigError(f"{what} must be {least}, got {shown(value)}")
    if value > high:
        raise ConfigError(f"{what} must be at most {_bound(high)}, got {shown(value)}")
    return float(value)
