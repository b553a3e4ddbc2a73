"""`kvscope attach` against a hostile server, ninth round: a /metrics body of megabytes that takes
seconds to parse (the fetch had a deadline, the parse none); an answer cut short of its
Content-Length; a redirect to where nothing answers; a KV event message, or a replay's reply, of
100,000 frames (ZMQ bounds a frame's size, not a message's frames); /metrics with NaN, infinite or
negative gauges, histogram buckets out of order and escaped label values; counters that go
backwards; a publisher whose sequence restarts. Each ends in one line or a counted, skipped
message, in bounded time, and what follows is read as before."""

from __future__ import annotations

import http.server
import socket
import threading
import time

import msgspec
import pytest
import zmq

from attach_fixtures import PRESSURE_METRICS, vllm_routes
from test_vllm_subscriber import PRESSURE, RUN1, WAIT_S

from kvscope.app.lab.vllm import subscriber as subscriber_module
from kvscope.app.lab.vllm.metrics import (
    MetricsError,
    ServerUnreachable,
    fetch_metrics,
    fetch_text,
    parse_metrics,
    restarted_between,
)
from kvscope.app.lab.vllm.endpoints import PublisherEndpoint
from kvscope.app.lab.vllm.subscriber import KvEventSubscriber, NoticeKind, ReceivedBatch
from kvscope.engine.config import ConfigError

FRAMES = 100_000


def filler(megabytes: float) -> str:
    """Valid exposition lines kvscope does not read, about `megabytes` of them."""
    line = "process_filler_metric{{n=\"{}\"}} 1\n"
    count = int(megabytes * 1e6 / len(line.format(10**6)))
    return "".join(line.format(i) for i in range(count))


class RawServer:
    """Answers each path with the bytes given for it, as they are (status line and headers too)."""

    def __init__(self, answers: dict):
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                self.wfile.write(answers[self.path])
                self.close_connection = True

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def raw_server():
    started = []
    yield lambda answers: started.append(RawServer(answers)) or started[-1]
    for s in started:
        s.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- HTTP answers that are not what they say ---------------------------------------------------------

def test_an_answer_cut_short_of_its_content_length_is_said_not_parsed(raw_server):
    """read(amt) returns what came before the close: a cut exposition parsed, its lost series n/a."""
    cut = PRESSURE_METRICS[:PRESSURE_METRICS.rindex(b"\n", 0, 30_000) + 1]  # at a line's end: it parses
    server = raw_server({"/metrics": b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(PRESSURE_METRICS), cut)})
    with pytest.raises(ServerUnreachable, match=f"after {len(cut):,} of the {len(PRESSURE_METRICS):,} bytes it "
                                                r"announced \(Content-Length\): the answer is cut short"):
        fetch_text(server.url + "/metrics", 2.0)


def test_a_redirect_to_where_nothing_answers_names_where_it_went(raw_server):
    """It said "cannot reach http://127.0.0.1:8000/metrics: connection refused (is the server
    running?)" of the server that had just answered with the redirect."""
    target = f"http://127.0.0.1:{free_port()}/metrics"
    server = raw_server({"/metrics": f"HTTP/1.1 302 Found\r\nLocation: {target}\r\nContent-Length: 0\r\n\r\n".encode()})
    with pytest.raises(ServerUnreachable) as refused:
        fetch_text(server.url + "/metrics", 2.0)
    assert f"cannot reach {server.url}/metrics (redirected to {target}): connection refused" in str(refused.value)


# -- a /metrics that takes seconds to parse ---------------------------------------------------------

def test_a_metrics_body_parsed_past_its_deadline_is_refused_saying_the_timeout():
    text = PRESSURE_METRICS.decode()
    with pytest.raises(MetricsError, match=r"could not be read within the 2 s timeout \(--timeout\)"):
        parse_metrics(text + filler(0.5), "http://x/metrics", deadline=time.monotonic() - 1, timeout_s=2)
    # vLLM's own exposition is read whole however little time its fetch left
    assert parse_metrics(text, "http://x/metrics", deadline=time.monotonic() - 1, timeout_s=2).block_size == 32


def test_a_scrape_of_megabytes_ends_within_its_timeout_not_after_the_parse(server):
    """10 MB of valid lines took about 4 s to parse on an idle machine, whatever --timeout said."""
    body = PRESSURE_METRICS + filler(10).encode()
    url = server({**vllm_routes(), "/metrics": (200, body)}).url
    started = time.monotonic()
    with pytest.raises(ConfigError, match=r"--timeout") as refused:
        fetch_metrics(url, timeout_s=0.5)
    # the fetch itself may be what a loaded machine does not finish in 0.5 s: either says the timeout
    assert time.monotonic() - started < 4.0, str(refused.value)
    assert len(str(refused.value).splitlines()) == 1


# -- a KV event message of very many frames ---------------------------------------------------------

def test_a_message_of_many_frames_is_read_past_over_several_polls_and_the_next_batch_is_read(publisher, monkeypatch):
    monkeypatch.setattr(subscriber_module, "READ_PAST_LIMIT_S", -1.0)  # each poll reads past 4,096 frames, no more
    pub = publisher()
    sub = KvEventSubscriber([PublisherEndpoint(pub.endpoint)])
    try:
        assert pub.subscribed.wait(WAIT_S)
        pub.send_raw([b"x"] * FRAMES)
        pub.publish(0, PRESSURE[0])
        records, polls, deadline = [], 0, time.monotonic() + WAIT_S
        while not any(isinstance(r, ReceivedBatch) for r in records) and time.monotonic() < deadline:
            got = sub.poll(50)
            polls += bool(got) or bool(sub._partial)
            records += got
        notices = [r for r in records if not isinstance(r, ReceivedBatch)]
        assert [n.kind for n in notices] == [NoticeKind.DECODE_ERROR], records
        assert f"KV event message has {FRAMES:,} frames, expected 3" in notices[0].message
        assert [r.seq for r in records if isinstance(r, ReceivedBatch)] == [0]
        assert polls > FRAMES // 4096 // 2  # read over many polls, each of them short
        assert sub.counts.decode_errors == 1 and sub.counts.batches == 1
    finally:
        sub.close()


def test_a_replay_reply_of_many_frames_is_counted_not_held(publisher):
    pub = publisher()
    context = zmq.Context.instance()
    router = context.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    endpoint = f"tcp://127.0.0.1:{router.bind_to_random_port('tcp://127.0.0.1')}"
    sub = KvEventSubscriber([PublisherEndpoint(pub.endpoint, endpoint)])
    try:
        assert pub.subscribed.wait(WAIT_S)
        pub.publish(0, PRESSURE[0])
        records = []
        deadline = time.monotonic() + WAIT_S
        while not records and time.monotonic() < deadline:
            records = sub.poll(50)
        pub.publish(1, PRESSURE[1], live=False)
        pub.publish(2, PRESSURE[2])

        def answer():
            client, delimiter, _ = router.recv_multipart()
            router.send_multipart([client, delimiter] + [b"y"] * FRAMES)

        thread = threading.Thread(target=answer, daemon=True)
        thread.start()
        records = []
        while not records and time.monotonic() < deadline:
            records = sub.poll(50)
        thread.join(WAIT_S)
        replayed = [r for r in records if getattr(r, "kind", None) is NoticeKind.REPLAYED]
        assert replayed and f"sent a reply of {FRAMES + 1:,} frames" in replayed[0].message, records
        assert [r.seq for r in records if isinstance(r, ReceivedBatch)] == [2]  # the live batch after the gap
    finally:
        sub.close()
        router.close(linger=0)


# -- /metrics values no server sends -----------------------------------------------------------------

RUNNING = 'vllm:num_requests_running{engine="0",model_name="tiny"}'
USAGE = 'vllm:kv_cache_usage_perc{engine="0",model_name="tiny"}'


def replaced(text: str, name: str, value: str) -> str:
    lines = [f"{line.rsplit(' ', 1)[0]} {value}" if line.startswith(name + " ") else line
             for line in text.splitlines()]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("value", ["NaN", "+Inf", "-Inf", "-3", "1e309"])
def test_gauges_of_nan_infinity_or_below_zero_are_ignored_and_named(value):
    text = PRESSURE_METRICS.decode()
    assert RUNNING + " " in text and USAGE + " " in text
    metrics = parse_metrics(replaced(replaced(text, RUNNING, value), USAGE, value))
    assert metrics.total.num_requests_running is None and metrics.total.kv_cache_usage is None
    assert any("vllm:num_requests_running" in r for r in metrics.rejected)
    assert metrics.block_size == 32  # the rest of the exposition still read


def test_histogram_buckets_given_out_of_order_are_read_in_bound_order():
    text = PRESSURE_METRICS.decode()
    lines = text.splitlines()
    buckets = [i for i, line in enumerate(lines) if line.startswith("vllm:time_to_first_token_seconds_bucket")]
    assert len(buckets) > 3
    shuffled = list(lines)
    for i, j in zip(buckets, reversed(buckets)):
        shuffled[i] = lines[j]
    before = parse_metrics(text).total.time_to_first_token
    after = parse_metrics("\n".join(shuffled) + "\n").total.time_to_first_token
    assert after == before


def test_label_values_with_escapes_and_direction_overrides_are_shown_escaped():
    text = PRESSURE_METRICS.decode().replace('model_name="tiny"', 'model_name="a\\"b\\\\c\\n\u202ed"')
    metrics = parse_metrics(text + f"{RUNNING} 5\n".replace('model_name="tiny"', 'model_name="a\\"b\\\\c\\n\u202ed"'))
    assert metrics.model_names == ()  # a name holding a newline or an override is passed over, not shown
    assert all("\u202e" not in r and "\n" not in r for r in metrics.rejected)


def test_counters_that_go_backwards_are_a_restart_not_a_negative_rate():
    first = parse_metrics(PRESSURE_METRICS.decode()).total
    name = 'vllm:prompt_tokens_total{engine="0",model_name="tiny"}'
    later = parse_metrics(replaced(PRESSURE_METRICS.decode(), name, "0")).total
    assert first.prompt_tokens_total > 0 and restarted_between(first, later)


# -- a publisher that restarts -----------------------------------------------------------------------

def test_a_publisher_whose_seq_resets_is_a_restart_and_its_batches_are_read_again(publisher):
    pub = publisher()
    sub = KvEventSubscriber([PublisherEndpoint(pub.endpoint)])
    try:
        assert pub.subscribed.wait(WAIT_S)
        for seq, payload in enumerate(PRESSURE[:4]):
            pub.publish(seq, payload)
        pub.restart()
        for seq, payload in enumerate(RUN1):
            pub.publish(seq, payload)
        records, deadline = [], time.monotonic() + WAIT_S
        while sum(isinstance(r, ReceivedBatch) for r in records) < 4 + len(RUN1) and time.monotonic() < deadline:
            records += sub.poll(50)
        assert [r.seq for r in records if isinstance(r, ReceivedBatch)] == [0, 1, 2, 3, *range(len(RUN1))]
        assert sub.counts.restarts == 1 and sub.counts.missed == 0
        assert msgspec.msgpack.decode(RUN1[0])  # the fixture's batches, decodable
    finally:
        sub.close()
