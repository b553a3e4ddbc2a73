"""`kvscope attach` against a hostile server (the fourth hostile pass, items 21-27): /v1/models nested
100,000 deep, HTTP answers sent a byte at a time, batches from DP ranks the server does not have,
oversized and deeply nested batches, live or replayed, a failed attach over an existing recording,
and a replay socket that never stops answering. Each ends in a counted, skipped message or one
line, in bounded time and memory, and leaves the user's files as they were."""

from __future__ import annotations

import http.server
import json
import threading
import time

import msgspec
import pytest
import zmq

from attach_fixtures import vllm_routes
from test_vllm_subscriber import WAIT_S

from kvscope.app.cli.main import main
from kvscope.app.lab.recording.attached_reader import AttachedRecording
from kvscope.app.lab.vllm import attachment as attachment_module
from kvscope.app.lab.vllm import events as events_module
from kvscope.app.lab.vllm import subscriber as subscriber_module
from kvscope.app.lab.vllm.attachment import Attachment, AttachTarget
from kvscope.app.lab.vllm.events import EventBatch, KvEventDecodeError, decode_batch, split_message
from kvscope.app.lab.vllm.metrics import ServerUnreachable, fetch_metrics, fetch_text
from kvscope.app.lab.vllm.prefix_cache_map import PrefixCacheMap
from kvscope.app.lab.vllm.server import ServerInfo, probe_server, served_models
from kvscope.app.lab.vllm.endpoints import PublisherEndpoint
from kvscope.app.lab.vllm.subscriber import (
    MAX_MESSAGE_BYTES,
    KvEventSubscriber,
    NoticeKind,
    ReceivedBatch,
    StreamKey,
    records_of_kind,
)

encode = msgspec.msgpack.encode
DEEP = b"\x92\x01\x91" + b"\x91" * 100_000 + b"\xc0"  # [1, [[[[...]]]]]: an event nested 100,000 deep


def stored_batch(hashes, rank=None) -> bytes:
    event = {"type": "BlockStored", "block_hashes": list(hashes), "parent_block_hash": None,
             "token_ids": list(range(32 * len(hashes))), "block_size": 32}
    return encode([1.0, [event]] + ([rank] if rank is not None else []))


def seq_frame(n: int) -> bytes:
    return n.to_bytes(8, "big", signed=True)


def follow_until(attachment: Attachment, done) -> None:
    """Poll the attachment until done() holds; fail after WAIT_S."""
    deadline = time.monotonic() + WAIT_S
    while not done() and time.monotonic() < deadline:
        attachment.poll(20)
    assert done(), f"not reached in {WAIT_S} s: {attachment.subscriber.counts}"


def run_in_thread(function, limit_s: float):
    """function()'s result or exception, or a failure when it has not returned within limit_s (a hang)."""
    outcome = {}

    def target():
        try:
            outcome["value"] = function()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            outcome["error"] = exc

    started = time.monotonic()
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(limit_s)
    assert not thread.is_alive(), f"still running after {limit_s} s"
    return outcome, time.monotonic() - started


# -- 21: /v1/models nested 100,000 deep ----------------------------------------------------------------

def test_a_model_list_nested_100000_deep_is_passed_over_and_the_metrics_name_the_model(server):
    routes = vllm_routes()
    routes["/v1/models"] = (200, b'{"data": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")
    http = server(routes)
    assert served_models(http.url) == ()
    info, _ = probe_server(http.url)
    assert info.model_names == ("tiny",)  # the metrics' model_name label


# -- 22: a server that answers a byte at a time ----------------------------------------------------------

class QuietServer(http.server.ThreadingHTTPServer):
    """A client that gave up (kvscope's timeout) breaks the handler's pipe: socketserver printed that
    traceback on the test's stderr, beside the one line the test reads (flaky: when the client left
    before the headers went out)."""

    def handle_error(self, request, client_address):
        pass


class DribblingServer:
    """Answers every GET a byte every `interval_s`: in its body (a Content-Length of `length`), or
    in its status line and headers (`where="headers"`)."""

    def __init__(self, where: str = "body", length: int = 1000, interval_s: float = 0.1):
        stop = self.stop_event = threading.Event()

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):  # noqa: N802 - http.server's name
                if where == "headers":
                    text = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
                else:
                    self.send_response(200)
                    self.send_header("Content-Length", str(length))
                    self.end_headers()
                    self.wfile.flush()
                    text = b" " * length
                for byte in text:
                    if stop.wait(interval_s):
                        return
                    try:
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
                    except OSError:
                        return

            def log_message(self, *args):
                pass

        self.server = QuietServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.stop_event.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("where", ["body", "headers"])
def test_an_answer_sent_a_byte_at_a_time_ends_at_the_timeout_for_the_whole_request(where):
    slow = DribblingServer(where)
    try:
        outcome, took = run_in_thread(lambda: fetch_metrics(slow.url, timeout_s=0.5), limit_s=WAIT_S)
    finally:
        slow.stop()
    assert isinstance(outcome.get("error"), ServerUnreachable), outcome
    assert "timed out: no whole answer within 0.5 s" in str(outcome["error"])
    assert took < 0.5 + 3.0  # the timeout, and slack for a loaded machine; not 100 s of bytes


def test_a_declared_length_past_the_cap_is_refused_before_reading_it():
    slow = DribblingServer(length=10**12, interval_s=0.05)
    try:
        outcome, _ = run_in_thread(lambda: fetch_text(slow.url + "/metrics", timeout_s=5.0), limit_s=WAIT_S)
    finally:
        slow.stop()
    assert "would send 1,000,000,000,000 bytes" in str(outcome.get("error")), outcome


def test_the_headless_attach_refuses_a_slow_version_in_one_line(capsys):
    slow = DribblingServer()
    try:
        outcome, took = run_in_thread(lambda: main(["attach", slow.url, "--kv-events", "tcp://127.0.0.1:1",
                                                    "--timeout", "0.5", "--duration", "1"]), limit_s=WAIT_S)
    finally:
        slow.stop()
    assert outcome.get("value") == 2, outcome
    err = capsys.readouterr().err.strip()
    assert err.startswith("kvscope: error:") and "/version: timed out: no whole answer" in err and "\n" not in err


# -- 23: DP ranks the server does not have ------------------------------------------------------------

def offline_attachment(engines=("0",), num_gpu_blocks=12, data_parallel_size=1) -> Attachment:
    attachment = Attachment(AttachTarget("http://127.0.0.1:1", kv_events="tcp://127.0.0.1:1",
                                         data_parallel_size=data_parallel_size))
    attachment.server = ServerInfo("http://127.0.0.1:1", "0.33.0", num_gpu_blocks, 32, {}, (), tuple(engines))
    attachment.prefix_map = PrefixCacheMap(num_gpu_blocks, 32)
    return attachment


def test_a_rank_the_server_does_not_have_gets_no_cells():
    attachment = offline_attachment(engines=("0", "1"))
    assert attachment.rank_refusal(None) is None and attachment.rank_refusal(1) is None
    for rank in (2, -3, 2**64 - 1, 20_000):
        assert "is not one of the server's DP engines (ranks 0-1)" in attachment.rank_refusal(rank)
    key = StreamKey("tcp://x", "kv", 7)
    attachment.follow([ReceivedBatch(key, 0, EventBatch(1.0, decode_batch(stored_batch([1])).events, 7), False)])
    assert attachment.prefix_map.ranks == [0]  # a recording may hold any rank: it is skipped there too
    assert attachment.prefix_map.num_cells == 12
    assert attachment.log_rows[-1][0] == "decode_error"


def test_the_ranks_followed_count_and_the_cells_have_a_ceiling(monkeypatch):
    attachment = offline_attachment(engines=("0",), data_parallel_size=4)
    assert attachment.rank_refusal(3) is None  # --data-parallel-size 4 follows ranks 0-3
    monkeypatch.setattr(attachment_module, "MAX_MAP_CELLS", 24)
    attachment = offline_attachment(engines=("0", "1", "2"))
    assert attachment.rank_refusal(1) is None
    assert "the map draws at most 24 cells" in attachment.rank_refusal(2)


def test_batches_from_ranks_the_server_lacks_are_decode_errors_and_allocate_nothing(server, publisher):
    http, pub = server(), publisher()
    ranks = 40

    def script():
        if pub.subscribed.wait(WAIT_S):
            for rank in range(ranks):
                pub.send_raw([pub.topic, seq_frame(0), stored_batch([rank + 1], rank=rank)])

    threading.Thread(target=script, daemon=True).start()
    with Attachment(AttachTarget(http.url, kv_events=pub.endpoint)) as attachment:
        counts = attachment.subscriber.counts
        follow_until(attachment, lambda: counts.batches + counts.decode_errors >= ranks)
        assert (counts.batches, counts.decode_errors) == (1, ranks - 1)
        assert attachment.prefix_map.ranks == [0] and attachment.prefix_map.num_cells == 12
        assert len(attachment.subscriber.streams) == 1


# -- 24: a batch too large to decode ---------------------------------------------------------------------

def test_a_payload_past_the_cap_is_refused_by_its_length_uncopied(monkeypatch):
    monkeypatch.setattr(events_module, "MAX_BATCH_BYTES", 1000)
    big = stored_batch(range(1, 40))
    assert len(big) > 1000
    with pytest.raises(KvEventDecodeError, match="more than the 1,000 kvscope decodes"):
        decode_batch(big)
    _, _, payload = split_message([b"kv", seq_frame(0), big])
    assert isinstance(payload, memoryview)  # not copied on its way to the refusal


def test_an_oversized_batch_is_counted_and_skipped_and_zmq_caps_a_message(monkeypatch, publisher):
    monkeypatch.setattr(events_module, "MAX_BATCH_BYTES", 1000)
    monkeypatch.setattr(subscriber_module, "MAX_BATCH_BYTES", 1000)
    pub = publisher()
    with KvEventSubscriber([PublisherEndpoint(pub.endpoint)]) as sub:
        assert all(s.getsockopt(zmq.MAXMSGSIZE) == MAX_MESSAGE_BYTES for s in sub._sockets)
        assert pub.subscribed.wait(WAIT_S)
        pub.publish(0, stored_batch([1]))
        pub.publish(1, stored_batch(range(1, 40)))
        pub.publish(2, stored_batch([2]))
        records = []
        deadline = time.monotonic() + WAIT_S
        while sub.counts.batches + sub.counts.decode_errors < 3 and time.monotonic() < deadline:
            records += sub.poll(20)
    assert (sub.counts.batches, sub.counts.decode_errors) == (2, 1)
    assert "more than the 1,000 kvscope decodes" in records_of_kind(records, NoticeKind.DECODE_ERROR)[0].message
    assert sub.counts.gaps == 0  # the skipped seq is taken as seen


# -- 25: a batch nested 100,000 deep ------------------------------------------------------------------

def test_a_batch_nested_100000_deep_is_a_decode_error():
    with pytest.raises(KvEventDecodeError, match="nested deeper"):
        decode_batch(DEEP)
    with pytest.raises(KvEventDecodeError, match="nested deeper"):
        decode_batch(encode({"ts": 1.0, "events": []})[:-1] + b"\x91" + b"\x91" * 100_000 + b"\xc0")


def test_a_deep_batch_live_and_from_the_replay_socket_is_counted_and_skipped(publisher):
    pub = publisher()
    with KvEventSubscriber([PublisherEndpoint(pub.endpoint, pub.replay_endpoint)]) as sub:
        assert pub.subscribed.wait(WAIT_S)
        pub.publish(0, stored_batch([1]))
        pub.publish(1, DEEP)  # live
        pub.publish(2, stored_batch([2]))
        pub.publish(3, DEEP, live=False)  # only the replay has it: the gap brings it back
        pub.publish(4, stored_batch([3]))
        records = []
        deadline = time.monotonic() + WAIT_S
        while sub.counts.batches < 3 and time.monotonic() < deadline:
            records += sub.poll(20)
    assert (sub.counts.batches, sub.counts.decode_errors, sub.counts.gaps, sub.counts.missed) == (3, 2, 1, 0)
    errors = records_of_kind(records, NoticeKind.DECODE_ERROR)
    assert errors[0].message.startswith("skipped: seq 1 from") and "nested deeper" in errors[0].message
    assert errors[1].message.startswith("skipped: replayed seq 3:") and "nested deeper" in errors[1].message


# -- 26: a failed attach over an existing recording -------------------------------------------------

def test_a_failed_attach_leaves_an_existing_recording_as_it_was(server, publisher, tmp_path, monkeypatch, capsys):
    http, pub = server(), publisher()
    existing = tmp_path / "existing.kvrec"
    existing.write_bytes(b"the user's recording" * 1000)
    before = existing.read_bytes()

    def fails(self, *args, **kwargs):
        raise RecursionError("maximum recursion depth exceeded")  # any failure past the checks

    monkeypatch.setattr(KvEventSubscriber, "poll", fails)
    assert main(["attach", http.url, "--kv-events", pub.endpoint, "--duration", "1", "--record", str(existing)]) == 2
    assert existing.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["existing.kvrec"]  # no partial file left behind


def test_a_failed_attach_keeps_a_new_recording_closed_with_why(server, publisher, tmp_path, monkeypatch):
    http, pub = server(), publisher()
    new = tmp_path / "new.kvrec"
    monkeypatch.setattr(KvEventSubscriber, "poll", lambda self, *a, **k: (_ for _ in ()).throw(RecursionError("x")))
    assert main(["attach", http.url, "--kv-events", pub.endpoint, "--duration", "1", "--record", str(new)]) == 2
    assert "the attach stopped early: RecursionError" in AttachedRecording.open(new).note


def test_a_deep_batch_with_record_over_an_existing_file_keeps_it(server, publisher, tmp_path, capsys):
    http, pub = server(), publisher()
    existing = tmp_path / "existing.kvrec"
    existing.write_bytes(b"kept" * 4000)

    def script():
        if pub.subscribed.wait(WAIT_S):
            pub.publish(0, DEEP)

    threading.Thread(target=script, daemon=True).start()
    assert main(["attach", http.url, "--kv-events", pub.endpoint, "--duration", "1", "--record", str(existing)]) == 2
    assert "could not be decoded" in capsys.readouterr().err
    assert existing.read_bytes() == b"kept" * 4000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["existing.kvrec"]


# -- 27: a replay socket that never stops answering ----------------------------------------------------

class TricklingReplay:
    """A replay (ROUTER) socket that answers the attach's probe with the end marker, and a request
    for missed batches with seq 0 again and again, every `interval_s`, never ending the replay."""

    def __init__(self, interval_s: float = 0.1):
        self._stop = threading.Event()
        self._context = zmq.Context()
        self._socket = self._context.socket(zmq.ROUTER)
        self._socket.setsockopt(zmq.LINGER, 0)
        self.endpoint = f"tcp://127.0.0.1:{self._socket.bind_to_random_port('tcp://127.0.0.1')}"
        self.interval_s = interval_s
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        clients = []
        next_send = time.monotonic()
        while not self._stop.is_set():
            if self._socket.poll(10):
                identity, _, first = self._socket.recv_multipart()
                if int.from_bytes(first, "big", signed=True) == 1 << 62:
                    self._socket.send_multipart([identity, b"", seq_frame(-1), b""])
                else:
                    clients.append(identity)
            if time.monotonic() >= next_send:
                next_send = time.monotonic() + self.interval_s
                for identity in clients:
                    self._socket.send_multipart([identity, b"", seq_frame(0), encode([1.0, []])])

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(WAIT_S)
        self._socket.close(linger=0)
        self._context.term()


def test_a_replay_that_never_ends_stops_at_the_end_of_duration_and_says_the_gap_was_not_filled(
        server, publisher, tmp_path, capsys):
    http, pub = server(), publisher()
    replay = TricklingReplay()

    def script():
        if pub.subscribed.wait(WAIT_S):
            pub.publish(0, encode([1.0, []]))
            pub.publish(5, encode([1.0, []]))

    threading.Thread(target=script, daemon=True).start()
    out = tmp_path / "attach.json"
    try:
        started = time.monotonic()
        code = main(["attach", http.url, "--kv-events", pub.endpoint, "--replay", replay.endpoint, "--timeout", "1",
                     "--duration", "1", "--json", str(out)])
        took = time.monotonic() - started
    finally:
        replay.stop()
    assert code == 0
    assert took < 1 + 3.0  # --duration, and slack for a loaded machine; not the replay's 30 s limit
    report = json.loads(out.read_text())
    assert (report["gaps"], report["batches_lost"]) == (1, 4)
    assert any("were not filled" in warning for warning in report["warnings"])
    assert "kvscope: warning: 1 gap(s) in the KV events were not filled" in capsys.readouterr().err


def test_a_deadline_already_past_asks_no_replay(publisher):
    pub = publisher()
    with KvEventSubscriber([PublisherEndpoint(pub.endpoint, pub.replay_endpoint)]) as sub:
        assert pub.subscribed.wait(WAIT_S)
        pub.publish(0, encode([1.0, []]))
        pub.publish(1, encode([1.0, []]), live=False)
        pub.publish(2, encode([1.0, []]))
        records = []
        deadline = time.monotonic() + WAIT_S
        while sub.counts.batches < 2 and time.monotonic() < deadline:
            records += sub.poll(20, deadline=time.monotonic() - 1)
    assert sub.counts.missed == 1 and sub.unfilled_gaps == 1
    assert pub.replay_requests == []
    assert "the attach ended before the replay did" in records_of_kind(records, NoticeKind.GAP)[-1].message

