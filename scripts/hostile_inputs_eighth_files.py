"""The eighth hostile pass's cases (2026-11-28): the FILES and SERVERS kvscope reads, for
scripts/hostile_inputs.py. A vLLM look-alike on loopback whose KV event publisher sends batches with
fields no vLLM sends: a ts of NaN, +inf or 1e308, a block_size of 0, -1 or 2**64-1, a group_idx of -1
or 2**63, more token ids than its blocks hold, a parent hash of a megabyte, a LoRA name of a megabyte.
Each was applied as it came (cell ages of NaN, a map of 2**64-1-token blocks, a cache group of its own,
a megabyte kept with a block); each is now a decode error naming the field, the batch skipped and
counted, the good batches around it applied.

The other defects of the pass have no CLI case here: the receive queue's bound is a socket option
(tests/test_files_hostile_eighth.py), the unclosed recording was slow, not wrong (a 178 MB one opened
in 7 s, 3.5 s now), and the trained model's GGUF file lies in an installed package.

Every case's expect is the correct behaviour: a case that fails here is a bug.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# (what, the batch's ts, the BlockStored event's fields changed)
_NONSENSE = [
    ("a ts of NaN", math.nan, {}), ("a ts of +inf", math.inf, {}), ("a ts of 1e308", 1e308, {}),
    ("a block_size of 0", 1.0, {"block_size": 0}), ("a block_size of -1", 1.0, {"block_size": -1}),
    ("a block_size of 2**64-1", 1.0, {"block_size": 2**64 - 1}), ("a group_idx of -1", 1.0, {"group_idx": -1}),
    ("a group_idx of 2**63", 1.0, {"group_idx": 2**63}),
    ("4,096 token ids for one 32-token block", 1.0, {"token_ids": list(range(4096))}),
    ("a parent hash of a megabyte", 1.0, {"parent_block_hash": b"p" * 1024**2}),
    ("a LoRA name of a megabyte", 1.0, {"lora_name": "l" * 1024**2}),
]


def eighth_file_cases(d: Path, Case, write) -> list:
    f = d / "eighth"
    f.mkdir(parents=True, exist_ok=True)
    return _attach_cases(f, Case, write)


def _attach_cases(f: Path, Case, write) -> list:
    from hostile_fixtures import fake_http_server, stored, zmq_publisher

    import msgspec
    import zmq

    prom = (ROOT / "tests" / "fixtures" / "vllm" / "metrics_live_vllm_cpu_0.32_pressure.prom").read_bytes()
    url = fake_http_server({"/good/version": b'{"version": "0.32.0"}', "/good/metrics": prom})
    context = zmq.Context()
    encode = msgspec.msgpack.encode
    publisher = functools.partial(zmq_publisher, context)

    def seq(number: int) -> bytes:
        return number.to_bytes(8, "big", signed=True)

    cases = []
    for what, ts, fields in _NONSENSE:
        # a good batch, the nonsense one, a good one: the attach follows the stream past it, no gap
        events = publisher(functools.partial(lambda ts, fields: [
            [b"kv", seq(0), encode([1.0, [stored([1])]])],
            [b"kv", seq(1), encode([ts, [stored([2], **fields)]])],
            [b"kv", seq(2), encode([2.0, [stored([3], parent_block_hash=1)]])]], ts, fields))
        cases.append(Case(f"attach: a KV event batch with {what} (skipped as undecodable, named)", "structure",
                          ["attach", f"{url}/good", "--kv-events", events, "--duration", "1"], expect="ok"))
    return cases
