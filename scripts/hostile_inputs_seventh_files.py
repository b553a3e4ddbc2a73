"""The seventh hostile pass's cases (2026-11-28): the FILES and SERVERS kvscope reads, for
scripts/hostile_inputs.py. A vLLM look-alike on loopback whose /metrics goes quiet after the attach's
probe (the closing scrape waited the whole --timeout past --duration), whose exposition names 1,024
engines (read n x n), and whose KV event publisher stores far more blocks than the server's pool
(each kept, and every removal scanned them all). The reader's chunk cache, bounded by count and not
by bytes, has no case here: a recording whose cached chunks pass the harness's 6 GB takes longer
than its 60 s to inflate (tests/test_files_hostile_seventh.py bounds it under a smaller budget).

Every case's expect is the correct behaviour: a case that fails here is a bug. Each comment says
what happened before the fix.
"""

from __future__ import annotations

import functools
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def seventh_file_cases(d: Path, Case, write) -> list:
    f = d / "seventh"
    f.mkdir(parents=True, exist_ok=True)
    return _attach_cases(f, Case, write)


# -- a vLLM look-alike on loopback ----------------------------------------------------------------------------


def _many_engines(prom: bytes, engines: int, series: int) -> bytes:
    """The exposition with `series` running-request samples (one per model name) for each of `engines`."""
    lines = [f'vllm:num_requests_running{{engine="{e}",model_name="m{m}"}} 1'
             for e in range(engines) for m in range(series)]
    return prom + ("\n".join(lines) + "\n").encode()


def _attach_cases(f: Path, Case, write) -> list:
    from hostile_fixtures import fake_http_server, stored, zmq_publisher

    import msgspec
    import zmq

    prom = (ROOT / "tests" / "fixtures" / "vllm" / "metrics_live_vllm_cpu_0.32_pressure.prom").read_bytes()
    version = b'{"version": "0.32.0"}'
    scrapes = {"n": 0}

    def quiet_after_the_probe(handler):  # the probe's /metrics at once, every later one a byte each 50 ms
        scrapes["n"] += 1
        if scrapes["n"] == 1:
            handler.send_response(200)
            handler.send_header("Content-Length", str(len(prom)))
            handler.end_headers()
            handler.wfile.write(prom)
            return
        handler.send_response(200)
        handler.send_header("Content-Length", "100000")
        handler.end_headers()
        for _ in range(1200):
            try:
                handler.wfile.write(b" ")
                handler.wfile.flush()
            except OSError:
                return
            time.sleep(0.05)

    routes = {
        # the closing scrape (after --duration) took the whole --timeout: 1 s, then 20 s more
        "/quiet/version": version, "/quiet/metrics": quiet_after_the_probe,
        # 1,024 engines of 40 series (2.4 MB): each engine's samples were filtered from all of them,
        # about 10 s a scrape, three scrapes an attach
        "/engines/version": version, "/engines/metrics": _many_engines(prom, 1024, 40),
        "/good/version": version, "/good/metrics": prom,
    }
    url = fake_http_server(routes)
    context = zmq.Context()
    encode = msgspec.msgpack.encode

    def seq(number: int) -> bytes:
        return number.to_bytes(8, "big", signed=True)

    publisher = functools.partial(zmq_publisher, context)
    good = publisher(lambda: [[b"kv", seq(0), encode([1.0, [stored([1, 2])]])]])
    # one batch storing a million made-up hashes (5 MB) on a 12-block pool, then 2,000 removals: placed
    # one by one (10 s, 400 MB), then each removal scanned the million waiting twice (146 s)
    million = encode([1.0, [{"type": "BlockStored", "block_hashes": list(range(1, 1_000_001)),
                             "parent_block_hash": None, "token_ids": [], "block_size": 32}]])
    removals = encode([1.0, [{"type": "BlockRemoved", "block_hashes": list(range(1, 2001))}]])
    million_stored = publisher(lambda: [[b"kv", seq(0), million], [b"kv", seq(1), removals]])
    # 5,000 batches of 12 new blocks each (none past the pool alone), then 12-block removals: 60,000
    # blocks waited for a cell, and each removal scanned them all
    waiting = publisher(lambda: [[b"kv", seq(i), encode([1.0, [stored(list(range(12 * i + 1, 12 * i + 13)))]])]
                                 for i in range(5000)]
                        + [[b"kv", seq(5000 + i), encode([1.0, [{"type": "BlockRemoved",
                                                                  "block_hashes": list(range(12 * i + 1, 12 * i + 13))}]])]
                           for i in range(2000)])

    def attach(prefix, *more, events=good, duration="1"):
        return ["attach", f"{url}/{prefix}", "--kv-events", events, "--duration", duration, *more]

    return [
        Case("attach --timeout 20 --duration 1: /metrics goes quiet after the probe (the closing scrape)",
             "structure", attach("quiet", "--timeout", "20"), expect="ok"),
        # parsed in full, then refused since the thirteenth pass: more engines than kvscope follows
        Case("attach: /metrics names 1,024 engines of 40 series each", "structure", attach("engines"),
             must_say=("names 1024 DP engines", "kvscope follows at most 256")),
        Case("attach: one batch stores a million blocks on a 12-block pool, then 2,000 are removed", "structure",
             attach("good", events=million_stored), expect="ok"),
        Case("attach: 5,000 batches of 12 new blocks on a 12-block pool, then 2,000 removals", "structure",
             attach("good", events=waiting, duration="2"), expect="ok"),
    ]
