"""What the attach tests serve on loopback: a vLLM-like HTTP server (the captured /metrics
expositions, /version, /v1/models) and a KV event publisher replaying the captured batches with a
gap that replay fills and a restart (the publisher itself is test_vllm_subscriber's)."""

from __future__ import annotations

import http.server
import json
import threading
from pathlib import Path

import msgspec

from test_vllm_subscriber import PRESSURE, RUN1, WAIT_S, LoopbackPublisher  # noqa: F401 - re-exported

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "vllm"
PRESSURE_METRICS = (FIXTURES / "metrics_live_vllm_cpu_0.32_pressure.prom").read_bytes()
MISSING = (10, 11, 12)  # PRESSURE seqs that do not go out live: replay must bring them back


def vllm_routes(metrics: bytes = PRESSURE_METRICS, version: str = "0.32.0") -> dict:
    return {"/version": (200, json.dumps({"version": version}).encode()),
            "/metrics": (200, metrics),
            "/v1/models": (200, json.dumps({"object": "list", "data": [{"id": "tiny"}]}).encode())}


class FixtureServer:
    """A local HTTP server answering each path from `routes` ({path: (status, body)})."""

    def __init__(self, routes: dict):
        routes = dict(routes)

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                status, body = routes.get(self.path, (404, b"not found"))
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def play_script(publisher: LoopbackPublisher) -> threading.Thread:
    """Once the subscriber is connected: the pressure run with MISSING lost on the wire, then a
    restart of the server (its buffer emptied, seq from 0) and the first run."""

    def script():
        if not publisher.subscribed.wait(WAIT_S):
            return
        for seq, payload in enumerate(PRESSURE):
            publisher.publish(seq, payload, live=seq not in MISSING)
        publisher.restart()
        for seq, payload in enumerate(RUN1):
            publisher.publish(seq, payload)

    thread = threading.Thread(target=script, daemon=True)
    thread.start()
    return thread


def expected_events() -> dict:
    """Events by kind and hashes stored / removed in the captured batches the script plays."""
    kinds: dict[str, int] = {}
    stored = removed = 0
    for payload in PRESSURE + RUN1:
        for event in msgspec.msgpack.decode(payload)[1]:
            kinds[event["type"]] = kinds.get(event["type"], 0) + 1
            if event["type"] == "BlockStored":
                stored += len(event["block_hashes"])
            elif event["type"] == "BlockRemoved":
                removed += len(event["block_hashes"])
    return {"events": dict(sorted(kinds.items())), "stored": stored, "removed": removed}


def cached_after_run1() -> int:
    """Distinct hashes RUN1 leaves cached (the restart emptied the map before it)."""
    hashes: set = set()
    for payload in RUN1:
        for event in msgspec.msgpack.decode(payload)[1]:
            if event["type"] == "BlockStored":
                hashes.update(event["block_hashes"])
            elif event["type"] == "BlockRemoved":
                hashes.difference_update(event["block_hashes"])
    return len(hashes)
