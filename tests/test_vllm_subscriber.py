"""Following vLLM KV event publishers over loopback: the captured live batches played by a publisher
with vLLM's wire behaviour (PUB + ROUTER replay, in a test thread, 127.0.0.1 only), through gaps that
replay fills, a restart, catch-up, malformed frames and both replay reply formats; and the prefix
cache map the delivered batches rebuild."""

from __future__ import annotations

import json
import queue
import socket
import threading
import time
from pathlib import Path

import msgspec
import pytest
import zmq

from kvscope.app.lab.vllm.prefix_cache_map import PrefixCacheMap
from kvscope.app.lab.vllm.endpoints import PublisherEndpoint, SubscriberError, data_parallel_endpoints, dialable
from kvscope.app.lab.vllm.subscriber import (
    KvEventSubscriber,
    NoticeKind,
    ReceivedBatch,
    StreamKey,
    StreamNotice,
    records_of_kind,
)
from kvscope.engine.snapshot import BLOCK_CACHED, BLOCK_FREE

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "vllm"
TOPIC = "kv@local@tiny"
WAIT_S = 10.0  # an upper bound for loopback delivery on a loaded machine; passing runs take milliseconds


def captured(name: str) -> list[bytes]:
    """The payloads, as the server's msgpack encoder sent them, of a capture's batches in seq order."""
    records = [json.loads(line) for line in (FIXTURES / name).read_text().splitlines() if line.strip()]
    assert [r["seq"] for r in records] == list(range(len(records)))
    return [msgspec.msgpack.encode(r["batch"]) for r in records]


PRESSURE = captured("live_events_pressure_replayed.jsonl")  # 22 batches: 24 hashes stored, 14 removed
RUN1 = captured("live_events_run1.jsonl")  # 4 batches: 5 hashes stored


class LoopbackPublisher:
    """vLLM's ZmqEventPublisher on the wire, driven by the test: batches go live on a PUB socket and
    into a replay buffer served by a ROUTER socket, both on 127.0.0.1. A bound PUB is an XPUB so
    the test can wait for the subscription instead of sleeping (to a SUB it is the same socket). An
    XPUB that dials a bound SUB hears no subscription (libzmq 4.3), so one that dials is a plain PUB
    that sends probes until the test has seen one arrive (`probe_until_heard`)."""

    def __init__(self, connect_to: str | None = None, reply_with_topic: bool = False, topic: str = TOPIC):
        self.topic = topic.encode()
        self.reply_with_topic = reply_with_topic  # vLLM 0.26+ replies [topic, seq, payload]
        self.commands: queue.Queue = queue.Queue()
        self.ready = threading.Event()
        self.subscribed = threading.Event()
        self.heard = threading.Event()
        self.replay_requests: list[int] = []
        self._connect_to = connect_to
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        assert self.ready.wait(WAIT_S)

    def publish(self, seq: int, payload: bytes, live: bool = True) -> None:
        """Buffered for replay always; sent live unless the test makes it go missing."""
        self.commands.put(("publish", seq, payload, live))

    def send_raw(self, frames: list[bytes]) -> None:
        self.commands.put(("raw", frames))

    def probe_until_heard(self) -> None:
        """Send two-frame probes (the subscriber skips them as malformed) until `heard` is set."""
        self.commands.put(("probe",))

    def restart(self) -> None:
        self.commands.put(("restart",))

    def stop(self) -> None:
        self.commands.put(("stop",))
        self._thread.join(WAIT_S)

    def _run(self) -> None:
        context = zmq.Context()
        pub = context.socket(zmq.PUB if self._connect_to else zmq.XPUB)
        router = context.socket(zmq.ROUTER)
        for s in (pub, router):
            s.setsockopt(zmq.LINGER, 0)
        if self._connect_to:
            pub.connect(self._connect_to)
            self.endpoint = self._connect_to
        else:
            self.endpoint = f"tcp://127.0.0.1:{pub.bind_to_random_port('tcp://127.0.0.1')}"
        self.replay_endpoint = f"tcp://127.0.0.1:{router.bind_to_random_port('tcp://127.0.0.1')}"
        self.ready.set()
        buffer: list[tuple[int, bytes]] = []
        poller = zmq.Poller()
        poller.register(pub, zmq.POLLIN)
        poller.register(router, zmq.POLLIN)
        probing = False
        try:
            while True:
                if probing and not self.heard.is_set():
                    pub.send_multipart([self.topic, b"probe"])
                for ready in dict(poller.poll(5)):
                    if ready is pub and pub.recv()[:1] == b"\x01":
                        self.subscribed.set()
                    elif ready is router:
                        client, delimiter, start = router.recv_multipart()
                        first = int.from_bytes(start, "big", signed=True)
                        self.replay_requests.append(first)
                        head = [client, delimiter] + ([self.topic] if self.reply_with_topic else [])
                        for seq, payload in buffer:
                            if seq >= first:
                                router.send_multipart(head + [seq.to_bytes(8, "big", signed=True), payload])
                        router.send_multipart(head + [(-1).to_bytes(8, "big", signed=True), b""])
                try:
                    command = self.commands.get_nowait()
                except queue.Empty:
                    continue
                if command[0] == "stop":
                    return
                if command[0] == "probe":
                    probing = True
                elif command[0] == "restart":
                    buffer.clear()
                elif command[0] == "raw":
                    pub.send_multipart(command[1])
                else:
                    _, seq, payload, live = command
                    buffer.append((seq, payload))
                    if live:
                        pub.send_multipart([self.topic, seq.to_bytes(8, "big", signed=True), payload])
        finally:
            pub.close()
            router.close()
            context.term()


@pytest.fixture
def subscriber():
    opened = []

    def open_(publishers, **options) -> KvEventSubscriber:
        opened.append(KvEventSubscriber(publishers, **options))
        return opened[-1]

    yield open_
    for s in opened:
        s.close()


def collect(sub: KvEventSubscriber, done, records=None) -> list:
    """Poll until done(records) holds, or fail after WAIT_S."""
    records = [] if records is None else records
    deadline = time.monotonic() + WAIT_S
    while not done(records) and time.monotonic() < deadline:
        records.extend(sub.poll(20))
    assert done(records), f"gave up after {WAIT_S} s with {records_summary(records)}"
    return records


def delivered(records) -> list[ReceivedBatch]:
    return [r for r in records if isinstance(r, ReceivedBatch)]


def seqs(records) -> list[int]:
    return [r.seq for r in delivered(records)]


def records_summary(records) -> str:
    return ", ".join(f"{r.seq}{'r' if r.replayed else ''}" if isinstance(r, ReceivedBatch) else r.kind.value
                     for r in records)


def connected(pub: LoopbackPublisher) -> None:
    assert pub.subscribed.wait(WAIT_S), "the subscription never reached the publisher"


def apply_all(cache: PrefixCacheMap, records) -> None:
    """What the attach host does with the records: batches in, a restart empties that engine."""
    for record in records:
        if isinstance(record, ReceivedBatch):
            cache.apply(record.batch)
        elif record.kind is NoticeKind.RESTART:
            cache.reset(record.stream.data_parallel_rank or 0)


@pytest.mark.parametrize("reply_with_topic", [False, True], ids=["reply-seq-payload", "reply-topic-seq-payload"])
def test_a_gap_is_filled_by_replay_and_every_batch_arrives_once_in_order(publisher, subscriber, reply_with_topic):
    pub = publisher(reply_with_topic=reply_with_topic)
    sub = subscriber([PublisherEndpoint(pub.endpoint, pub.replay_endpoint)])
    connected(pub)
    missing = {5, 6, 7}
    for seq, payload in enumerate(PRESSURE):
        pub.publish(seq, payload, live=seq not in missing)
    records = collect(sub, lambda rs: len(delivered(rs)) == len(PRESSURE))

    assert seqs(records) == list(range(22))
    assert all(r.replayed for r in delivered(records) if r.seq in missing)
    assert not any(r.replayed for r in delivered(records) if r.seq < 5)
    gap, = records_of_kind(records, NoticeKind.GAP)
    assert (gap.first_seq, gap.last_seq, gap.count) == (5, 7, 3)
    replayed, = records_of_kind(records, NoticeKind.REPLAYED)
    assert replayed.count == 3 and "3 of 3" in replayed.message
    assert pub.replay_requests == [5]
    assert (sub.counts.batches, sub.counts.gaps, sub.counts.missed, sub.counts.restarts) == (22, 1, 0, 0)
    assert sub.streams == [StreamKey(pub.endpoint, TOPIC, 0)]
    # the replay reached past the gap: the live copies of those batches were dropped, not delivered twice
    assert sub.counts.duplicates == sum(r.replayed for r in delivered(records)) - 3

    cache = PrefixCacheMap(num_gpu_blocks=12)
    apply_all(cache, records)
    counts = cache.counts()
    assert (counts.stored, counts.removed, counts.unknown_removals) == (24, 14, 0)
    assert counts.cached_blocks == counts.placed_copies == 10
    assert int((cache.cell_state == BLOCK_CACHED).sum()) == 10


def test_a_restart_is_reported_and_the_new_run_follows(publisher, subscriber):
    pub = publisher()
    sub = subscriber([PublisherEndpoint(pub.endpoint, pub.replay_endpoint)])
    connected(pub)
    for seq, payload in enumerate(PRESSURE):
        pub.publish(seq, payload)
    records = collect(sub, lambda rs: len(delivered(rs)) == 22)
    pub.restart()  # a new server process: its seq starts again at 0, its buffer is empty
    for seq, payload in enumerate(RUN1):
        pub.publish(seq, payload)
    records = collect(sub, lambda rs: len(delivered(rs)) == 26, records)

    assert seqs(records) == list(range(22)) + list(range(4))
    restart, = records_of_kind(records, NoticeKind.RESTART)
    assert (restart.first_seq, restart.last_seq) == (21, 0)
    assert records.index(restart) == 22  # before the new run's first batch
    assert sub.counts.restarts == 1 and sub.counts.gaps == 0
    cache = PrefixCacheMap(num_gpu_blocks=12)
    apply_all(cache, records)
    assert cache.counts().cached_blocks == 5  # only the new run's blocks
    assert int((cache.cell_state == BLOCK_FREE).sum()) == 7


def test_a_stream_joined_mid_run_is_caught_up_from_the_replay_buffer(publisher, subscriber):
    pub = publisher()
    for seq, payload in enumerate(PRESSURE[:10]):
        pub.publish(seq, payload, live=False)  # before anyone listened
    sub = subscriber([PublisherEndpoint(pub.endpoint, pub.replay_endpoint)])
    connected(pub)
    pub.publish(10, PRESSURE[10])
    records = collect(sub, lambda rs: len(delivered(rs)) == 11)
    assert seqs(records) == list(range(11))
    gap, = records_of_kind(records, NoticeKind.GAP)
    assert (gap.first_seq, gap.last_seq) == (0, 9)
    assert pub.replay_requests == [0]


def test_without_catch_up_a_stream_starts_where_it_is_joined(publisher, subscriber):
    pub = publisher()
    for seq, payload in enumerate(PRESSURE[:10]):
        pub.publish(seq, payload, live=False)
    sub = subscriber([PublisherEndpoint(pub.endpoint, pub.replay_endpoint)], catch_up=False)
    connected(pub)
    pub.publish(10, PRESSURE[10])
    pub.publish(11, PRESSURE[11])
    records = collect(sub, lambda rs: len(delivered(rs)) == 2)
    assert seqs(records) == [10, 11] and not records_of_kind(records, NoticeKind.GAP)
    assert pub.replay_requests == []


def test_a_malformed_frame_is_counted_and_skipped_without_a_false_gap(publisher, subscriber):
    pub = publisher()
    sub = subscriber([PublisherEndpoint(pub.endpoint, pub.replay_endpoint)])
    connected(pub)
    pub.publish(0, PRESSURE[0])
    pub.publish(1, PRESSURE[1])
    pub.send_raw([pub.topic, (2).to_bytes(8, "big"), b"\xc1 not msgpack"])
    pub.send_raw([pub.topic, b"short"])  # two frames: no seq to name its stream
    pub.publish(3, PRESSURE[3])
    records = collect(sub, lambda rs: 3 in seqs(rs))

    assert seqs(records) == [0, 1, 3]
    errors = records_of_kind(records, NoticeKind.DECODE_ERROR)
    assert len(errors) == 2 and sub.counts.decode_errors == 2
    assert errors[0].first_seq == 2 and errors[0].stream == StreamKey(pub.endpoint, TOPIC, 0)
    assert "malformed" in errors[0].message and "2 frames" in errors[1].message and errors[1].stream is None
    assert not records_of_kind(records, NoticeKind.GAP) and pub.replay_requests == []


def test_a_gap_without_a_replay_endpoint_is_reported_as_lost(publisher, subscriber):
    pub = publisher()
    sub = subscriber([PublisherEndpoint(pub.endpoint)])
    connected(pub)
    for seq in (0, 1, 4):
        pub.publish(seq, PRESSURE[seq])
    records = collect(sub, lambda rs: 4 in seqs(rs))
    assert seqs(records) == [0, 1, 4]
    found, lost = records_of_kind(records, NoticeKind.GAP)
    assert (found.first_seq, found.last_seq, found.count) == (2, 3, 2)
    assert lost.count == 2 and "no replay endpoint" in lost.message
    assert sub.counts.missed == 2


def test_a_replay_socket_that_never_answers_costs_at_most_the_replay_timeout(publisher, subscriber):
    pub = publisher()
    context = zmq.Context()
    silent = context.socket(zmq.ROUTER)
    silent.setsockopt(zmq.LINGER, 0)
    silent_endpoint = f"tcp://127.0.0.1:{silent.bind_to_random_port('tcp://127.0.0.1')}"
    try:
        sub = subscriber([PublisherEndpoint(pub.endpoint, silent_endpoint)], replay_timeout_s=0.2)
        connected(pub)
        pub.publish(0, PRESSURE[0])
        pub.publish(3, PRESSURE[3])
        started = time.monotonic()
        records = collect(sub, lambda rs: 3 in seqs(rs))
        assert time.monotonic() - started < 0.2 + WAIT_S / 2
        assert seqs(records) == [0, 3]
        replayed, = records_of_kind(records, NoticeKind.REPLAYED)
        assert replayed.count == 0 and "no answer within 0.2 s" in replayed.message
        assert sub.counts.missed == 2
    finally:
        silent.close()
        context.term()


def test_listening_servers_dial_in_and_their_dp_ranks_are_separate_streams(publisher, subscriber):
    sub = subscriber([PublisherEndpoint("tcp://127.0.0.1:*", listen=True)])
    bound, = sub.sources
    assert bound.startswith("tcp://127.0.0.1:") and not bound.endswith("*")
    pub = publisher(connect_to=bound)
    pub.probe_until_heard()
    collect(sub, lambda rs: records_of_kind(rs, NoticeKind.DECODE_ERROR))
    pub.heard.set()
    # two DP engines of one server share the topic; each has its own seq
    for seq in range(3):
        for rank in (0, 1):
            ts, events, _ = msgspec.msgpack.decode(RUN1[seq])
            pub.send_raw([pub.topic, seq.to_bytes(8, "big"), msgspec.msgpack.encode([ts, events, rank])])
    records = collect(sub, lambda rs: len(delivered(rs)) == 6)
    records = [r for r in records if not (isinstance(r, StreamNotice) and r.kind is NoticeKind.DECODE_ERROR)]
    assert sorted(sub.streams, key=lambda k: k.data_parallel_rank) == [
        StreamKey(bound, TOPIC, 0), StreamKey(bound, TOPIC, 1)]
    for rank in (0, 1):
        assert [r.seq for r in delivered(records) if r.stream.data_parallel_rank == rank] == [0, 1, 2]
    assert not [r for r in records if not isinstance(r, ReceivedBatch)]
    cache = PrefixCacheMap(num_gpu_blocks=4)
    apply_all(cache, records)
    assert cache.num_cells == 8  # one segment of num_gpu_blocks per DP engine
    assert int((cache.cell_state[cache.segment_of(1)] == BLOCK_CACHED).sum()) == 4


def test_poll_returns_within_its_timeout_when_nothing_arrives(publisher, subscriber):
    pub = publisher()
    sub = subscriber([PublisherEndpoint(pub.endpoint, pub.replay_endpoint)])
    started = time.monotonic()
    assert sub.poll(50) == []
    assert time.monotonic() - started < 0.05 + WAIT_S / 2


def test_endpoints_that_cannot_be_used_raise_one_clear_error():
    with pytest.raises(SubscriberError, match="cannot connect to KV event endpoint 'not an endpoint'"):
        KvEventSubscriber([PublisherEndpoint("not an endpoint")])
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        with pytest.raises(SubscriberError, match=f"cannot listen on KV event endpoint 'tcp://127.0.0.1:{port}'"):
            KvEventSubscriber([PublisherEndpoint(f"tcp://127.0.0.1:{port}", listen=True)])
    finally:
        taken.close()
    with pytest.raises(SubscriberError, match="no KV event endpoint"):
        KvEventSubscriber([])


def test_dp_ranks_publish_on_consecutive_ports_and_wildcards_dial_localhost():
    assert data_parallel_endpoints("tcp://gpu-host:5557", "tcp://gpu-host:5558", 3) == [
        PublisherEndpoint("tcp://gpu-host:5557", "tcp://gpu-host:5558"),
        PublisherEndpoint("tcp://gpu-host:5558", "tcp://gpu-host:5559"),
        PublisherEndpoint("tcp://gpu-host:5559", "tcp://gpu-host:5560")]
    assert data_parallel_endpoints("inproc://kv", None, 2)[1].endpoint == "inproc://kv_dp1"
    assert dialable("tcp://*:5557") == "tcp://127.0.0.1:5557"
    assert dialable("tcp://10.0.0.7:5557") == "tcp://10.0.0.7:5557"



def test_a_seq_jump_too_far_to_be_lost_batches_is_a_restart_not_a_loss(publisher, subscriber):
    pub = publisher()
    sub = subscriber([PublisherEndpoint(pub.endpoint, pub.replay_endpoint)])
    connected(pub)
    for seq, payload in ((0, PRESSURE[0]), (1, PRESSURE[1]), (10**15, PRESSURE[2]), (10**15 + 1, PRESSURE[3])):
        pub.publish(seq, payload)
    records = collect(sub, lambda rs: 10**15 + 1 in seqs(rs))
    assert seqs(records) == [0, 1, 10**15, 10**15 + 1]
    jump, = records_of_kind(records, NoticeKind.RESTART)
    assert "seq jumped from 1 to 1,000,000,000,000,000" in jump.message and "restarted or jumped" in jump.message
    assert not records_of_kind(records, NoticeKind.GAP) and pub.replay_requests == []
    assert (sub.counts.missed, sub.counts.gaps, sub.counts.restarts) == (0, 0, 1)


def test_a_first_batch_with_an_implausible_seq_is_not_caught_up_and_a_negative_seq_is_skipped(publisher, subscriber):
    pub = publisher()
    sub = subscriber([PublisherEndpoint(pub.endpoint, pub.replay_endpoint)])
    connected(pub)
    pub.send_raw([pub.topic, (-5).to_bytes(8, "big", signed=True), PRESSURE[0]])
    pub.publish(2**63 - 1, PRESSURE[1])
    records = collect(sub, lambda rs: 2**63 - 1 in seqs(rs))
    error, = records_of_kind(records, NoticeKind.DECODE_ERROR)
    assert "seq -5" in error.message and "negative" in error.message
    jump, = records_of_kind(records, NoticeKind.RESTART)
    assert "the first batch has seq 9,223,372,036,854,775,807" in jump.message
    assert sub.counts.missed == 0 and pub.replay_requests == []


@pytest.mark.parametrize("endpoint, replay, size, words", [
    ("tcp://127.0.0.1:0", None, 1, "KV event endpoint 'tcp://127.0.0.1:0': port '0' is not a valid port"),
    ("tcp://127.0.0.1:99999", None, 1, "port '99999' is not a valid port; give a whole number from 1 to 65535"),
    ("tcp://127.0.0.1:5557", "tcp://127.0.0.1:-1", 1, "replay endpoint 'tcp://127.0.0.1:-1': port '-1'"),
    ("tcp://127.0.0.1:５５５７", None, 1, "(not ASCII digits)"),
    ("tcp://127.0.0.1", None, 1, "has no port"),
    ("tcp://127.0.0.1:65530", None, 8, "DP rank 6 would use port 65536, past 65535"),
    ("tcp://127.0.0.1:5557", "tcp://127.0.0.1:65535", 2, "replay endpoint 'tcp://127.0.0.1:65535': DP rank 1"),
])
def test_ports_that_are_not_ports_are_refused_before_any_socket(endpoint, replay, size, words):
    with pytest.raises(SubscriberError) as caught:
        data_parallel_endpoints(endpoint, replay, size)
    assert words in str(caught.value) and "\n" not in str(caught.value)
    assert data_parallel_endpoints("tcp://*:*", None, 1, listen=True)[0].endpoint == "tcp://*:*"  # bind any port
