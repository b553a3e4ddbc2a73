"""The sixth hostile pass over the files and servers kvscope reads (scripts/hostile_inputs_sixth_files.py):
deadlines that a slow server could still overrun (a redirect's connection, a scrape begun near the
attach's end, a window's replay that never ends), a KV event queue with no bound, recordings whose
deltas claim more changes than their pool can make, and server answers and files, fuzzed by their
structure, that ended in a traceback or in nonsense accepted."""

from __future__ import annotations

import http.server
import json
import socket
import struct
import threading
import time

import msgspec
import pytest
import zmq

from test_attach_hostile_fourth import TricklingReplay, run_in_thread, seq_frame
from test_files_hostile_fourth import _records
from test_vllm_subscriber import WAIT_S

from kvscope.app.lab.recording import Recording, RecordingError
from kvscope.app.lab.recording.format import DELTAS, FRAME, INDEX, frame_record
from kvscope.app.lab.vllm import subscriber as subscriber_module
from kvscope.app.lab.vllm.attachment import Attachment, AttachTarget
from kvscope.app.lab.vllm.http_fetch import ServerUnreachable, fetch_text
from kvscope.app.lab.vllm.metrics import parse_metrics
from kvscope.app.lab.vllm.endpoints import PublisherEndpoint
from kvscope.app.lab.vllm.subscriber import (
    RECEIVE_QUEUE_MESSAGES,
    REPLAY_POLL_LIMIT_S,
    KvEventSubscriber,
    NoticeKind,
    records_of_kind,
)

encode = msgspec.msgpack.encode
PROM = (__import__("pathlib").Path(__file__).resolve().parent / "fixtures" / "vllm"
        / "metrics_live_vllm_cpu_0.32_pressure.prom").read_bytes()


# -- deadlines that held for reads, not for connections or for the attach -------------------------------


def full_listener() -> tuple[socket.socket, list, int]:
    """A listener whose accept queue is full: a further connect waits (its SYN is not answered)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    for _ in range(4):
        filler = socket.socket()
        filler.setblocking(False)
        try:
            filler.connect(("127.0.0.1", port))
        except BlockingIOError:
            pass
        fillers.append(filler)
    time.sleep(0.2)
    return listener, fillers, port


class ScriptedServer:
    """HTTP on loopback answering GET path with answer(handler, nth request of that path)."""

    def __init__(self, answer):
        seen: dict[str, int] = {}

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):  # noqa: N802 - http.server's name
                seen[self.path] = seen.get(self.path, 0) + 1
                try:
                    answer(self, seen[self.path])
                except OSError:
                    pass

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def send(handler, body: bytes, status: int = 200, headers=()) -> None:
    handler.send_response(status)
    for name, value in headers:
        handler.send_header(name, value)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def dribble(handler, seconds: float) -> None:
    handler.send_response(200)
    handler.send_header("Content-Length", "100000")
    handler.end_headers()
    ends = time.monotonic() + seconds
    while time.monotonic() < ends:
        handler.wfile.write(b" ")
        handler.wfile.flush()
        time.sleep(0.05)


def test_a_redirect_near_the_deadline_connects_within_the_time_left():
    """Redirected at 0.8 s of 1 s to a host that never answers the connection: the connect had a whole
    timeout of its own (1.8 s in all), since the deadline can only shut a socket that exists."""
    listener, fillers, port = full_listener()

    def answer(handler, nth):
        time.sleep(0.8)
        send(handler, b"", 302, [("Location", f"http://127.0.0.1:{port}/metrics")])

    server = ScriptedServer(answer)
    try:
        outcome, took = run_in_thread(lambda: fetch_text(f"{server.url}/metrics", timeout_s=1.0), limit_s=WAIT_S)
    finally:
        server.stop()
        for s in fillers + [listener]:
            s.close()
    assert isinstance(outcome.get("error"), ServerUnreachable)
    assert "within 1 s" in str(outcome["error"])
    assert took < 1.5


def test_a_scrape_begun_near_the_attach_end_ends_with_it(server, publisher):
    """/metrics answers the attach's probe, then a byte every 50 ms: the scrape a poll began with 0.5 s
    left took the whole --timeout (5 s) past the deadline the poll was given."""
    pub = publisher()

    def answer(handler, nth):
        if handler.path == "/metrics" and nth > 1:
            dribble(handler, 8.0)
        elif handler.path == "/metrics":
            send(handler, PROM)
        elif handler.path == "/version":
            send(handler, b'{"version": "0.32.0"}')
        else:
            send(handler, b"not found", 404)

    slow = ScriptedServer(answer)
    try:
        attachment = Attachment(AttachTarget(slow.url, kv_events=pub.endpoint, timeout_s=5.0)).open()
        try:
            attachment._next_scrape = 0.0  # due now
            outcome, took = run_in_thread(lambda: attachment.poll(0, time.monotonic() + 0.5), limit_s=WAIT_S)
        finally:
            attachment.close()
    finally:
        slow.stop()
    assert "error" not in outcome
    assert took < 1.5
    assert attachment.counts.scrape_failures == 1


def test_a_scrape_is_not_begun_in_the_last_moment_of_the_attach(server, publisher):
    http, pub = server(), publisher()
    with Attachment(AttachTarget(http.url, kv_events=pub.endpoint)) as attachment:
        attachment._next_scrape = 0.0
        attachment.poll(0, time.monotonic() + 0.01)
        assert attachment.counts.scrapes == 1 and attachment.counts.scrape_failures == 0  # the probe's only
        attachment.poll(0, time.monotonic() + 5)
        assert attachment.counts.scrapes == 2


# -- the window's replay of a gap, and the subscriber's queue ----------------------------------------------


def test_a_window_poll_stops_filling_a_gap_after_its_limit(server, publisher):
    """The window polls with no deadline: a replay socket trickling stale batches held one poll for
    the replay's 30 s limit (and each further gap of the poll for 30 s more)."""
    http, pub = server(), publisher()
    replay = TricklingReplay(interval_s=0.1)
    try:
        with Attachment(AttachTarget(http.url, kv_events=pub.endpoint, replay=replay.endpoint,
                                     timeout_s=1.0)) as attachment:
            assert pub.subscribed.wait(WAIT_S)
            pub.publish(0, encode([1.0, []]))
            pub.publish(5, encode([1.0, []]))
            longest, ends = 0.0, time.monotonic() + WAIT_S + REPLAY_POLL_LIMIT_S
            while attachment.subscriber.counts.gaps < 1 and time.monotonic() < ends:
                started = time.monotonic()
                attachment.poll(20)
                longest = max(longest, time.monotonic() - started)
            counts, warnings = attachment.subscriber.counts, dict(attachment.warnings)
    finally:
        replay.stop()
    assert (counts.gaps, counts.missed) == (1, 4)
    assert longest < REPLAY_POLL_LIMIT_S + 2.0
    assert f"took more than the {REPLAY_POLL_LIMIT_S:g} s" in warnings["replay"]


def test_the_subscriber_queue_holds_a_bounded_number_of_messages(publisher):
    pub = publisher()
    with KvEventSubscriber([PublisherEndpoint(pub.endpoint)]) as sub:
        assert [s.getsockopt(zmq.RCVHWM) for s in sub._sockets] == [RECEIVE_QUEUE_MESSAGES]


def test_a_publisher_faster_than_the_queue_is_counted_and_said(monkeypatch):
    """30,000 batches sent while kvscope reads none, to a queue of 1,000 (the limit, made small): what
    the queue dropped is a gap found while kvscope was the queue's depth behind, counted and said."""
    monkeypatch.setattr(subscriber_module, "RECEIVE_QUEUE_MESSAGES", 1_000)
    context = zmq.Context()
    pub = context.socket(zmq.XPUB)
    pub.setsockopt(zmq.LINGER, 0)
    pub.setsockopt(zmq.SNDHWM, 1_000)
    endpoint = f"tcp://127.0.0.1:{pub.bind_to_random_port('tcp://127.0.0.1')}"
    # 2.5 KB each, 75 MB in all: more than the sockets' kernel buffers hold besides the two queues
    batch = encode([1.0, [{"type": "BlockRemoved", "block_hashes": list(range(10**6, 10**6 + 500))}]])
    try:
        with KvEventSubscriber([PublisherEndpoint(endpoint)]) as sub:
            assert pub.poll(int(WAIT_S * 1000))  # the subscription
            pub.recv()
            for seq in range(30_000):
                pub.send_multipart([b"", seq_frame(seq), batch])
            time.sleep(0.5)
            records, ends = [], time.monotonic() + WAIT_S
            while time.monotonic() < ends and (not records or sub.poll(0)):
                records += sub.poll(50)
            pub.send_multipart([b"", seq_frame(30_000), batch])  # what shows the storm's tail was dropped
            while time.monotonic() < ends and not records_of_kind(records, NoticeKind.GAP):
                records += sub.poll(50)
            gaps = records_of_kind(records, NoticeKind.GAP)
    finally:
        pub.close(linger=0)
        context.term()
    assert sub.counts.missed > 0 and sub.overflow_gaps >= 1 and sub.overflow_batches > 0
    assert "its queue's limit" in gaps[0].message


# -- recordings whose deltas claim more than the pool --------------------------------------------------------


def _delta_claiming(data: bytes, changes: int) -> bytes:
    """The recording with its first DELTAS record's owner changes replaced by `changes` of them at its
    first step (zeros, stored as bytes and restored as int64: a few hundred KB zlib'd), checksums right."""
    records = _records(data)
    number = next(i for i, r in enumerate(records) if r[1] == DELTAS)
    offset, _, flags, length = records[number]
    import zlib

    payload = zlib.decompress(data[offset + FRAME.size:offset + FRAME.size + length])
    (n,) = struct.unpack_from("<I", payload)
    head = json.loads(payload[4:4 + n])
    body = bytearray(payload[4 + n:])
    body += bytes(-len(body) % 8)
    steps = head["num_steps"]
    head["arrays"]["owner.counts"] = {"dtype": "<i8", "count": steps, "offset": len(body)}
    body += struct.pack(f"<{steps}q", changes, *[0] * (steps - 1))
    head["arrays"]["owner.index"] = {"dtype": "|u1", "count": changes, "offset": len(body), "as": "<i8"}
    head["arrays"]["owner.value"] = {"dtype": "|u1", "count": changes, "offset": len(body), "as": "<i4"}
    body += bytes(changes)
    text = json.dumps(head).encode()
    new = frame_record(DELTAS, struct.pack("<I", len(text)) + text + bytes(body), True)
    end = next((r[0] for r in records if r[1] == INDEX), len(data))  # the index dropped: read as unclosed
    return data[:offset] + new + data[offset + FRAME.size + length:end]


def test_deltas_claiming_more_changes_than_the_pool_can_make_are_refused(tmp_path, recording_bytes):
    """1,000,000 changes of one block field in a chunk of a few steps over a pool of tens of blocks:
    read, restored (40,000,000 of them took 560 MB from a 217 KB file) and replayed as if true."""
    path = tmp_path / "claims.kvrec"
    path.write_bytes(_delta_claiming(recording_bytes, 1_000_000))
    with pytest.raises(RecordingError, match=r"owner\.\w+ declares 1,000,000 entries, more than .* blocks"):
        with Recording.open(path) as recording:
            recording.snapshot_at(recording.num_steps - 1)


def test_one_step_changing_more_blocks_than_the_pool_holds_is_refused(tmp_path, recording_bytes):
    with Recording.open(_write(tmp_path / "good.kvrec", recording_bytes)) as good:
        blocks = good.num_blocks
    path = _write(tmp_path / "step.kvrec", _delta_claiming(recording_bytes, blocks + 1))
    with pytest.raises(RecordingError, match=f"owner.counts must hold counts of at most {blocks:,}"):
        Recording.open(path)


def _write(path, data: bytes):
    path.write_bytes(data)
    return path


# -- /metrics giving one series twice ------------------------------------------------------------------------


RUNNING = 'vllm:num_requests_running{engine="0",model_name="tiny"}'


@pytest.mark.parametrize("repeated, second", [(f"{RUNNING} 3\n{RUNNING} 3\n", "3"),
                                              (f"{RUNNING} 3\n{RUNNING} 5\n", "5")])
def test_a_series_given_twice_is_kept_once_and_named_not_summed(repeated, second):
    """Samples of one engine are summed (model names apart): a series repeated, with the same value or
    another, was summed too, 3 running requests shown as 6 (8), a KV usage of 0.7 as 1.4 clamped to 1."""
    metrics = parse_metrics(PROM.decode().replace(f"{RUNNING} 0.0\n", repeated), "the exposition")
    assert metrics.total.num_requests_running == 3
    assert metrics.rejected == (f'vllm:num_requests_running {second} ({{model_name=tiny}} given again, after 3: '
                                "the first kept)",)


def test_series_apart_by_a_label_are_not_a_repeat():
    text = PROM.decode().replace(f"{RUNNING} 0.0\n", f'{RUNNING} 3\n{RUNNING[:-1]},lora="a"}} 2\n')
    assert parse_metrics(text, "x").total.num_requests_running == 5


@pytest.mark.parametrize("location", ["/metrics", "/next"])
def test_a_redirect_loop_is_named_as_one_in_one_line(location):
    """Was urllib's own three-line text, escaped into one: "answered HTTP 302 The HTTP server returned a
    redirect error that would lead to an infinite loop.\\nThe last 30x error message was:\\nFound"."""
    def answer(handler, nth):
        send(handler, b"", 302, [("Location", location if location == "/metrics" else f"/next{nth}")])

    server = ScriptedServer(answer)
    try:
        with pytest.raises(ServerUnreachable) as caught:
            fetch_text(f"{server.url}/metrics", timeout_s=5.0)
    finally:
        server.stop()
    message = str(caught.value)
    assert "redirected in a loop" in message and "\\n" not in message and "\n" not in message
