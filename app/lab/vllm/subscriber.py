"""Follow vLLM's KV event publishers: every batch once, in order, and say when that failed.

One SUB socket per publisher endpoint, so a batch's stream is known: a stream is (the endpoint,
the topic, the data-parallel rank). `connect` mode dials a server's PUB socket (vLLM binds it
when its endpoint holds `*`); `listen` mode binds one that servers dial (vLLM connects when its
endpoint names a host), as llm-d's indexer does: there many servers share one socket, and the
topic and the DP rank tell their streams apart.

Each stream's seq starts at 0 when its publisher starts. So:
- a seq above the next expected one is a GAP: the missing batches are asked for again on the
  publisher's replay socket (a DEALER: send the first wanted seq, 8 bytes big-endian; read
  `[seq, payload]` or, from vLLM 0.26, `[topic, seq, payload]` until seq -1), and arrive, in
  order, as REPLAYED batches before the batch that revealed the gap;
- a seq at or below the last one received live is a RESTART: the server's cache started empty;
- a stream first seen mid-run is caught up from seq 0, as far as the replay buffer reaches
  (vLLM keeps 10,000 batches), unless `catch_up` is off;
- a message that cannot be decoded is counted, reported as DECODE_ERROR and skipped; so is a batch
  whose DP rank `rank_check` refuses (a rank the server does not have would take a pool of cells).

Poll-based: `poll(timeout_ms)` returns what arrived as plain records; no thread of its own. It
waits at most `timeout_ms` for the first message, then reads only what is already there (at most
`max_messages_per_poll`); a replay waits at most `replay_timeout_s` for each reply, and stops at
the poll's `deadline` (the attach's end) or REPLAY_POLL_LIMIT_S into the poll, whichever is first:
a gap it could not fill by then is counted as lost.

Each socket queues at most RECEIVE_QUEUE_MESSAGES messages of frames up to MAX_MESSAGE_BYTES; past
that ZMQ drops what the publisher sends (memory stays bounded, RECEIVE_QUEUE_BYTES, whatever its rate). A dropped batch is a gap like any other, asked of
the replay socket, and a gap found while kvscope was that far behind is counted as an overflow.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from enum import Enum
from typing import Callable, Iterable, Sequence, Union

import zmq

from kvscope.app.lab.vllm.events import (
    END_OF_REPLAY_SEQ,
    MAX_BATCH_BYTES,
    EventBatch,
    KvEventDecodeError,
    decode_batch,
    decode_seq,
    split_message,
)
from kvscope.app.lab.vllm.endpoints import BIND_ERRORS, PublisherEndpoint, SubscriberError, dial_options, dialable

DEFAULT_REPLAY_TIMEOUT_S = 2.0
# What one poll may spend on replays, every gap it found together: the window's frames wait on the
# poll, and vLLM replays its whole 10,000-batch buffer on loopback in well under a second.
REPLAY_POLL_LIMIT_S = 5.0
# ZMQ bounds its queue by messages, not bytes: at most this many, each frame at most MAX_MESSAGE_BYTES,
# so a publisher sending the largest batches fills 4 GiB, no more (10,000 of 512 MB was 5 TB in theory).
# Real batches are KBs: the queue is seconds of a busy server's steps, and what it drops is a gap the
# replay socket fills (vLLM keeps 10,000 batches), counted as an overflow.
RECEIVE_QUEUE_MESSAGES = 256
# A seq further ahead than this is no run of lost batches -- at 1,000 engine steps a second it is
# 50 days of them -- but a publisher whose sequence jumped (restarted elsewhere, or not vLLM's
# counter): it is followed as a restart, and nothing is counted as lost or asked of the replay.
MAX_PLAUSIBLE_GAP = 1 << 32
# A frame past this makes ZMQ drop the peer before it is whole in memory (libzmq cannot say why; the
# batches lost then are a gap like any other); a payload a little past MAX_BATCH_BYTES still arrives,
# and is counted as undecodable, saying why.
MAX_MESSAGE_BYTES = MAX_BATCH_BYTES + 64 * 1024
RECEIVE_QUEUE_BYTES = RECEIVE_QUEUE_MESSAGES * MAX_MESSAGE_BYTES
MOST_FRAMES_KEPT = 3  # topic, seq, payload (a replay's reply has 4: the DEALER keeps the empty delimiter)
# What one poll spends reading past messages of very many frames: the rest is read on the next
READ_PAST_LIMIT_S = 0.2
REPLAY_MAX_BYTES = 1024**3  # vLLM's 10,000 buffered batches are tens of MB; replies past this are dropped


class NoticeKind(str, Enum):
    GAP = "gap"  # batches first_seq..last_seq did not arrive live; count: how many
    REPLAYED = "replayed"  # count: batches the replay socket sent back for a gap
    RESTART = "restart"  # the seq went back from first_seq to last_seq: the publisher restarted
    DECODE_ERROR = "decode_error"  # a message that could not be read, skipped


@dataclass(frozen=True)
class StreamKey:
    source: str  # the endpoint dialled, or the one bound (its real port when bound to port 0 / *)
    topic: str
    data_parallel_rank: int | None  # None from servers older than vLLM 0.10.2


@dataclass(frozen=True)
class ReceivedBatch:
    stream: StreamKey
    seq: int
    batch: EventBatch
    replayed: bool  # it came back through the replay socket, not live


@dataclass(frozen=True)
class StreamNotice:
    kind: NoticeKind
    stream: StreamKey | None  # None when a message was too broken to name its stream
    first_seq: int | None
    last_seq: int | None
    count: int
    message: str  # one line, for a status bar or a log


SubscriberRecord = Union[ReceivedBatch, StreamNotice]


@dataclass
class SubscriberCounts:
    batches: int = 0  # delivered, live or replayed
    replayed: int = 0
    gaps: int = 0
    missed: int = 0  # batches lost for good: no replay socket, or gone from its buffer
    restarts: int = 0
    decode_errors: int = 0
    duplicates: int = 0  # live batches a replay had already delivered


@dataclass
class _StreamState:
    last_live_seq: int = -1
    last_delivered_seq: int = -1


class KvEventSubscriber:
    def __init__(self, publishers: Sequence[PublisherEndpoint], *, topic: str = "", catch_up: bool = True,
                 replay_timeout_s: float = DEFAULT_REPLAY_TIMEOUT_S, max_messages_per_poll: int = 10_000,
                 rank_check: Callable[[int | None], str | None] | None = None,
                 batch_check: Callable[[EventBatch], str | None] | None = None):
        """rank_check(data_parallel_rank) says why a batch of that rank is refused (None: taken);
        batch_check(batch), why a batch of a rank taken is (one the server could not have sent)."""
        if not publishers:
            raise SubscriberError("no KV event endpoint given")
        self.catch_up = catch_up
        self.replay_timeout_s = replay_timeout_s
        self.max_messages_per_poll = max_messages_per_poll
        self.rank_check = rank_check
        self.batch_check = batch_check
        self.counts = SubscriberCounts()
        self.unfilled_gaps = 0  # gaps whose replay the poll's deadline cut short (not recorded: not a count of batches)
        self.unfilled_reason = ""  # why the last of them was cut short
        self.refused = 0  # decode errors of batches read whole but refused: a rank or a size the server has not
        self.first_error = ""  # the first decode error, for the line saying why nothing was read
        # gaps found while a socket's queue had not been empty for RECEIVE_QUEUE_MESSAGES messages, and
        # their batches: what the queue's limit most likely dropped (not recorded, as unfilled_gaps)
        self.overflow_gaps = 0
        self.overflow_batches = 0
        self._deadline: float | None = None
        self._deadline_is_end = False  # the deadline is the attach's end, not REPLAY_POLL_LIMIT_S
        self._backlog: dict[zmq.Socket, int] = {}  # messages read from each since its queue was last empty
        # A socket whose backlog reached the queue's depth, until the gap it most likely left is found or
        # a message after its queue emptied shows none. A storm ends with the drop: the next batch shows it.
        self._filled: set[zmq.Socket] = set()
        self._drained: set[zmq.Socket] = set()
        self._behind = False  # the message being handled came after its socket's queue was full
        self._partial: dict[zmq.Socket, int] = {}  # frames read past so far of a message of very many
        self._context = zmq.Context()
        self._poller = zmq.Poller()
        self._sockets: dict[zmq.Socket, tuple[str, PublisherEndpoint]] = {}
        self._streams: dict[StreamKey, _StreamState] = {}
        try:
            for publisher in publishers:
                self._open(publisher, topic)
        except BaseException:
            self.close()
            raise

    @property
    def sources(self) -> list[str]:
        """The endpoints dialled or bound, bound ones with the port the system gave."""
        return [source for source, _ in self._sockets.values()]

    @property
    def streams(self) -> list[StreamKey]:
        return list(self._streams)

    def poll(self, timeout_ms: int = 0, deadline: float | None = None) -> list[SubscriberRecord]:
        """What arrived; a replay for a gap stops at `deadline` (time.monotonic()), if given."""
        records: list[SubscriberRecord] = []
        ready = dict(self._poller.poll(timeout_ms))
        # from when messages are there: waiting for them is not replaying
        limit = time.monotonic() + REPLAY_POLL_LIMIT_S
        self._deadline_is_end = deadline is not None and deadline <= limit
        self._deadline = deadline if self._deadline_is_end else limit
        handled = 0
        reading_until = time.monotonic() + READ_PAST_LIMIT_S
        later: set[zmq.Socket] = set()  # mid-way through a message of very many frames: read on next poll
        while ready and handled < self.max_messages_per_poll:
            for socket in ready:
                while handled < self.max_messages_per_poll:
                    try:
                        frames = read_message(socket, reading_until, self._partial)
                    except zmq.Again:
                        self._backlog[socket] = 0
                        self._drained.add(socket)
                        break
                    if frames is None:
                        later.add(socket)
                        break
                    handled += 1
                    self._handle_counted(socket, frames, records)
            ready = {socket: event for socket, event in self._poller.poll(0) if socket not in later}
        return records

    def close(self) -> None:
        for socket in self._sockets:
            socket.close(linger=0)
        self._sockets.clear()
        self._context.term()

    def __enter__(self) -> "KvEventSubscriber":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # -- one message --------------------------------------------------------------------------------

    def _open(self, publisher: PublisherEndpoint, topic: str) -> None:
        socket = self._context.socket(zmq.SUB)
        socket.setsockopt(zmq.LINGER, 0)
        socket.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
        socket.setsockopt(zmq.RCVHWM, RECEIVE_QUEUE_MESSAGES)
        try:
            # a topic that is not UTF-8 raises here: a socket not closed kept close()'s term() waiting forever
            socket.setsockopt_string(zmq.SUBSCRIBE, topic)
        except BaseException:
            socket.close(linger=0)
            raise
        try:
            dial_options(socket, publisher.endpoint)
            if publisher.listen:
                socket.bind(publisher.endpoint)
                source = socket.getsockopt_string(zmq.LAST_ENDPOINT)
            else:
                # "tcp://*:5557", the server's own bind spelling, was ZMQ's "Invalid argument"
                socket.connect(dialable(publisher.endpoint))
                source = publisher.endpoint
        except zmq.ZMQError as exc:
            socket.close(linger=0)
            verb = "listen on" if publisher.listen else "connect to"
            why = BIND_ERRORS.get(exc.errno) if publisher.listen else None
            raise SubscriberError(f"cannot {verb} KV event endpoint {publisher.endpoint!r}: "
                                  f"{why or exc}") from None
        self._sockets[socket] = (source, publisher)
        self._poller.register(socket, zmq.POLLIN)

    def _handle_counted(self, socket: zmq.Socket, frames, records: list[SubscriberRecord]) -> None:
        """_handle, knowing whether the socket's queue was full before the message (see _filled)."""
        backlog = self._backlog[socket] = self._backlog.get(socket, 0) + 1
        if backlog >= RECEIVE_QUEUE_MESSAGES:
            self._filled.add(socket)
        self._behind = socket in self._filled
        gaps = self.overflow_gaps
        source, publisher = self._sockets[socket]
        self._handle(source, publisher, frames if isinstance(frames, int) else _plain(frames), records)
        if self.overflow_gaps > gaps or socket in self._drained:
            self._filled.discard(socket)
        self._drained.discard(socket)

    def _handle(self, source: str, publisher: PublisherEndpoint, frames: list[bytes],
                records: list[SubscriberRecord]) -> None:
        if isinstance(frames, int):  # read past, not kept (read_message)
            self._decode_error(records, None, None, f"from {source}: KV event message has {frames:,} frames, "
                                                    "expected 3 (topic, seq, payload)")
            return
        try:
            topic, seq, payload = split_message(frames)
        except KvEventDecodeError as exc:
            self._decode_error(records, None, None, f"from {source}: {exc}")
            return
        if seq < 0:  # -1 ends a replay; a live batch never has one
            self._decode_error(records, None, seq, f"seq {seq} from {source}: a negative seq (vLLM counts from 0)")
            return
        try:
            batch = decode_batch(payload)
        except KvEventDecodeError as exc:
            self._skip_undecodable(source, topic, seq, exc, records)
            return
        refused = self._refused_rank(batch)
        if refused:
            # Its rank is known, so no other stream's seq is touched; and no stream is made for it,
            # so 20,000 made-up ranks leave nothing behind.
            self._decode_error(records, None, seq, f"seq {seq} from {source}: {refused}", refused=True)
            return
        key = StreamKey(source, topic, batch.data_parallel_rank)
        state = self._streams.get(key)
        if state is None:
            state = self._streams[key] = _StreamState()
            if not self.catch_up:
                state.last_delivered_seq = seq - 1
            elif seq > MAX_PLAUSIBLE_GAP:
                self._jumped(key, None, seq, records)
                state.last_delivered_seq = seq - 1
        elif seq <= state.last_live_seq:
            self.counts.restarts += 1
            records.append(StreamNotice(NoticeKind.RESTART, key, state.last_live_seq, seq, 1,
                                        f"{_name(key)} restarted: seq went from {state.last_live_seq} to {seq}"))
            state = self._streams[key] = _StreamState()
        elif seq - state.last_delivered_seq - 1 > MAX_PLAUSIBLE_GAP:
            self._jumped(key, state.last_live_seq, seq, records)
            state = self._streams[key] = _StreamState()
            state.last_delivered_seq = seq - 1
        state.last_live_seq = seq
        if seq <= state.last_delivered_seq:
            self.counts.duplicates += 1
            return
        if seq > state.last_delivered_seq + 1:
            self._fill_gap(key, publisher, state, seq - 1, records)
            if seq <= state.last_delivered_seq:  # the replay reached it
                self.counts.duplicates += 1
                return
        refused = self._refused_batch(batch)
        if refused:  # of its stream, and taken as seen: the next batch is no gap
            state.last_delivered_seq = seq
            self._decode_error(records, key, seq, f"seq {seq} from {source}: {refused}", refused=True)
            return
        self._deliver(key, state, seq, batch, False, records)

    def _jumped(self, key: StreamKey, last_seq: int | None, seq: int, records: list[SubscriberRecord]) -> None:
        """A seq too far ahead to be batches lost: the publisher's sequence restarted or jumped."""
        self.counts.restarts += 1
        came = f"seq jumped from {last_seq:,} to {seq:,}" if last_seq is not None else \
            f"the first batch has seq {seq:,}"
        records.append(StreamNotice(NoticeKind.RESTART, key, last_seq, seq, 1,
                                    f"{_name(key)}: {came}, more than {MAX_PLAUSIBLE_GAP:,} ahead: the publisher's "
                                    "sequence restarted or jumped; no batches are counted as lost"))

    def _skip_undecodable(self, source: str, topic: str, seq: int, exc: Exception,
                          records: list[SubscriberRecord]) -> None:
        # The DP rank is inside the payload; when the endpoint and topic name one stream it is that
        # one, and taking the seq as seen keeps the next batch from looking like a gap.
        candidates = [key for key in self._streams if key.source == source and key.topic == topic]
        key = candidates[0] if len(candidates) == 1 else None
        if key is not None:
            state = self._streams[key]
            if seq == state.last_delivered_seq + 1:
                state.last_live_seq = state.last_delivered_seq = seq
        self._decode_error(records, key, seq, f"seq {seq} from {source}: {exc}")

    def _refused_rank(self, batch: EventBatch) -> str | None:
        return None if self.rank_check is None else self.rank_check(batch.data_parallel_rank)

    def _refused_batch(self, batch: EventBatch) -> str | None:
        return None if self.batch_check is None else self.batch_check(batch)

    def _decode_error(self, records, key, seq, message, refused: bool = False) -> None:
        self.counts.decode_errors += 1
        self.refused += refused
        self.first_error = self.first_error or message
        records.append(StreamNotice(NoticeKind.DECODE_ERROR, key, seq, seq, 1, f"skipped: {message}"))

    def _deliver(self, key, state, seq, batch, replayed, records) -> None:
        state.last_delivered_seq = seq
        self.counts.batches += 1
        self.counts.replayed += replayed
        records.append(ReceivedBatch(key, seq, batch, replayed))

    # -- gaps ---------------------------------------------------------------------------------------

    def _fill_gap(self, key: StreamKey, publisher: PublisherEndpoint, state: _StreamState, last_missing: int,
                  records: list[SubscriberRecord]) -> None:
        first_missing = state.last_delivered_seq + 1
        missing = last_missing - first_missing + 1
        self.counts.gaps += 1
        behind = ""
        if self._behind:
            self.overflow_gaps += 1
            self.overflow_batches += missing
            behind = (f" (kvscope was {RECEIVE_QUEUE_MESSAGES:,} messages behind, its queue's limit: the publisher "
                      "sent faster than kvscope read, and the queue dropped them)")
        records.append(StreamNotice(NoticeKind.GAP, key, first_missing, last_missing, missing,
                                    f"{_name(key)}: seq {first_missing}..{last_missing} did not arrive{behind}"))
        if publisher.replay_endpoint is None:
            self._lost(key, state, first_missing, last_missing, missing, "no replay endpoint given", records)
            return
        replies, failure = self._request_replay(publisher.replay_endpoint, first_missing)
        recovered = skipped = 0  # skipped: came back, but undecodable (each a DECODE_ERROR, not lost)
        for seq, payload in replies:
            if seq <= state.last_delivered_seq:
                continue
            try:
                batch = decode_batch(payload)
                refused = self._refused_rank(batch) or self._refused_batch(batch)
                read = True
            except KvEventDecodeError as exc:
                refused, read = str(exc), False
            if refused:
                state.last_delivered_seq = seq
                skipped += seq <= last_missing
                self._decode_error(records, key, seq, f"replayed seq {seq}: {refused}", refused=read)
                continue
            recovered += seq <= last_missing
            self._deliver(key, state, seq, batch, True, records)
        records.append(StreamNotice(
            NoticeKind.REPLAYED, key, first_missing, state.last_delivered_seq, recovered,
            f"{_name(key)}: {recovered} of {missing} missing batches replayed" + (f" ({failure})" if failure else "")))
        if recovered + skipped < missing:
            self._lost(key, state, first_missing, last_missing, missing - recovered - skipped,
                       failure or "older than the server's replay buffer", records)

    def _lost(self, key, state, first_missing, last_missing, lost, why, records) -> None:
        self.counts.missed += lost
        state.last_delivered_seq = max(state.last_delivered_seq, last_missing)
        records.append(StreamNotice(NoticeKind.GAP, key, first_missing, last_missing, lost,
                                    f"{_name(key)}: {lost} batches lost ({why}); the map may hold stale blocks"))

    def _request_replay(self, endpoint: str, first_seq: int) -> tuple[list[tuple[int, bytes]], str | None]:
        """(seq, payload) of each batch the replay socket sent from first_seq, and why it stopped
        early (None when the end marker came). A fresh socket each time: a late reply to a request
        that timed out must not be read as the answer to the next one."""
        replies: list[tuple[int, bytes]] = []
        now = time.monotonic()
        give_up_at = self._deadline if self._deadline is not None else now + REPLAY_POLL_LIMIT_S
        if give_up_at <= now:
            return replies, self._unfilled()
        socket = self._context.socket(zmq.DEALER)
        socket.setsockopt(zmq.LINGER, 0)
        socket.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
        # the replay streams its whole buffer at once: ZMQ's default queue of 1,000 would hold 16 GB of the largest
        socket.setsockopt(zmq.RCVHWM, RECEIVE_QUEUE_MESSAGES)
        received = 0
        try:
            dial_options(socket, endpoint)
            socket.connect(dialable(endpoint))
            # vLLM's ROUTER expects [identity, empty delimiter, seq]: a DEALER sends the delimiter itself
            socket.send_multipart([b"", first_seq.to_bytes(8, "big", signed=True)])
            while True:
                left_s = give_up_at - time.monotonic()
                wait_s = min(self.replay_timeout_s, left_s)
                if wait_s <= 0 or not socket.poll(int(wait_s * 1000) + 1):
                    # A replay that keeps answering, slowly or with batches already had, must not
                    # hold the attach past its end, nor a window's frame: what it sent is kept, the
                    # rest counted lost.
                    if wait_s < self.replay_timeout_s:
                        return replies, self._unfilled()
                    return replies, f"replay from {endpoint} gave no answer within {self.replay_timeout_s:g} s"
                frames = read_message(socket, give_up_at, {}, most=4)
                if frames is None:
                    return replies, self._unfilled()
                if isinstance(frames, int):
                    return replies, f"replay from {endpoint} sent a reply of {frames:,} frames"
                frames = _plain(frames)
                if frames and frames[0] == b"":
                    frames = frames[1:]
                if len(frames) not in (2, 3):
                    return replies, f"replay from {endpoint} sent a reply of {len(frames)} frames"
                seq = decode_seq(frames[-2])
                if seq == END_OF_REPLAY_SEQ:
                    return replies, None
                received += len(frames[-1])
                if received > REPLAY_MAX_BYTES:
                    return replies, f"replay from {endpoint} sent more than {REPLAY_MAX_BYTES // 1024**2:,} MiB"
                replies.append((seq, frames[-1]))
        except (zmq.ZMQError, KvEventDecodeError) as exc:
            return replies, f"replay from {endpoint} failed: {exc}"
        finally:
            socket.close(linger=0)

    def _unfilled(self) -> str:
        self.unfilled_gaps += 1
        self.unfilled_reason = UNFILLED if self._deadline_is_end else UNFILLED_IN_TIME
        return self.unfilled_reason


UNFILLED = "not filled: the attach ended before the replay did"
UNFILLED_IN_TIME = f"not filled: the replay took more than the {REPLAY_POLL_LIMIT_S:g} s a poll may spend on it"


def read_message(socket: zmq.Socket, until: float, partial: dict, most: int = MOST_FRAMES_KEPT):
    """The next message's frames (uncopied: a payload too large to decode is refused by its length,
    never copied), raising zmq.Again when none waits. A message of more than `most` frames is read
    past, not kept: its frame count is returned instead. Past `until` (time.monotonic()) such a
    message is left part-read, None returned, and `partial` (by socket) remembers how far it got.

    ZMQ bounds a frame's size, not a message's frames: recv_multipart of a message of a million
    one-byte frames took 5 s and 300 MB of Python objects in one poll, for a message only refused."""
    count = partial.pop(socket, None)
    if count is None:
        frames = [socket.recv(zmq.NOBLOCK, copy=False)]
        # the rest of a message is there once its first frame is: ZMQ delivers messages whole
        while frames[-1].more and len(frames) < most:
            frames.append(socket.recv(copy=False))
        if not frames[-1].more:
            return frames
        count = len(frames)
    sink = bytearray(1)  # a frame read into it is cut to one byte, never copied whole
    while socket.getsockopt(zmq.RCVMORE):
        socket.recv_into(sink)
        count += 1
        if count % 4096 == 0 and time.monotonic() > until and socket.getsockopt(zmq.RCVMORE):
            partial[socket] = count
            return None
    return count


def _plain(frames: list) -> list:
    """zmq Frames as bytes, but one past MAX_BATCH_BYTES as a view of it: decode_batch refuses that
    by its length, and copying it first would double what a hostile publisher makes us hold."""
    return [frame.bytes if len(frame) <= MAX_BATCH_BYTES else frame.buffer for frame in frames]


def _name(key: StreamKey) -> str:
    rank = "" if key.data_parallel_rank is None else f" DP rank {key.data_parallel_rank}"
    topic = f" topic {key.topic!r}" if key.topic else ""
    return f"{key.source}{topic}{rank}"


def records_of_kind(records: Iterable[SubscriberRecord], kind: NoticeKind) -> list[StreamNotice]:
    return [r for r in records if isinstance(r, StreamNotice) and r.kind is kind]
