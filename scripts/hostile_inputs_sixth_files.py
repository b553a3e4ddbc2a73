"""The sixth hostile pass's cases (2026-11-29): the FILES and SERVERS kvscope reads, for
scripts/hostile_inputs.py. Recordings whose deltas claim more changes than their pool can make
(forged with their checksums right), and a vLLM look-alike on loopback for `kvscope attach` whose
/metrics repeats a series, redirects in a loop or to a host that never answers, slows down after
the first answer, or whose KV event publisher sends a storm of batches.

Every case's expect is the correct behaviour: a case that fails here is a bug. Each comment says
what happened before the fix.
"""

from __future__ import annotations

import functools
import json
import socket
import struct
import time
from pathlib import Path

import hostile_recordings

ROOT = Path(__file__).resolve().parent.parent


def sixth_file_cases(d: Path, Case, write) -> list:
    f = d / "sixth"
    f.mkdir(parents=True, exist_ok=True)
    return _recording_cases(f, Case, write) + _attach_cases(f, Case, write)


# -- recordings -------------------------------------------------------------------------------------------------


def _deltas_claiming(data: bytes, changes: int) -> bytes:
    """The recording with its first DELTAS record's owner changes made `changes` at its first step
    (zeros stored as bytes, restored as int64: 40,000,000 of them zlib to 40 KB), checksums right."""
    from kvscope.app.lab.recording.format import DELTAS
    number = next(i for i, rec in enumerate(hostile_recordings.records_of(data)) if rec[1] == DELTAS)
    payload = hostile_recordings.payload_of(data, number)
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
    return hostile_recordings.reframed(data, number, struct.pack("<I", len(text)) + text + bytes(body))


def _recording_cases(f: Path, Case, write) -> list:
    r = f / "recordings"
    data = hostile_recordings.small_recording(r / "good.kvrec").read_bytes()
    # read, restored to 560 MB and replayed as if true: 40,000,000 changes in 16 steps of a 42-block pool
    claims = write(r / "deltas-40m-changes.kvrec", _deltas_claiming(data, 40_000_000))
    # 43 changes of one field in one step of a 42-block pool: a block changes at most once a step
    one_step = write(r / "deltas-step-past-pool.kvrec", _deltas_claiming(data, 43))
    out = r / "out"
    out.mkdir(parents=True, exist_ok=True)
    return [
        Case("export a recording whose deltas claim 40,000,000 changes of a 42-block pool", "recording",
             ["export", str(claims)], must_say=("declares 40,000,000 entries", "42 blocks")),
        Case("export --csv a recording whose deltas claim 40,000,000 changes of a 42-block pool", "recording",
             ["export", str(claims), "--csv", str(out / "claims.csv")], must_say=("declares 40,000,000 entries",)),
        Case("export a recording one of whose steps changes more blocks than its pool holds", "recording",
             ["export", str(one_step)], must_say=("counts of at most",)),
        Case("gui --replay a recording whose deltas claim 40,000,000 changes", "recording",
             ["gui", "--replay", str(claims), "--quit-after", "1"], slow=True),
    ]


# -- a vLLM look-alike on loopback ----------------------------------------------------------------------------


def _full_listener() -> int:
    """A port whose accept queue is full: a connection to it waits, unanswered. Kept open for the run."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    _kept.append(listener)
    for _ in range(4):
        filler = socket.socket()
        filler.setblocking(False)
        try:
            filler.connect(("127.0.0.1", port))
        except BlockingIOError:
            pass
        _kept.append(filler)
    return port


_kept: list = []


def _attach_cases(f: Path, Case, write) -> list:
    from hostile_fixtures import fake_http_server, stored, zmq_publisher

    import msgspec
    import zmq

    prom = (ROOT / "tests" / "fixtures" / "vllm" / "metrics_live_vllm_cpu_0.32_pressure.prom").read_bytes()
    version = b'{"version": "0.32.0"}'
    running = b'vllm:num_requests_running{engine="0",model_name="tiny"}'
    unanswered = _full_listener()

    def answer(handler, status: int, body: bytes = b"", headers=()) -> None:
        handler.send_response(status)
        for name, value in headers:
            handler.send_header(name, value)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    def redirect_to_self(handler):
        answer(handler, 302, headers=[("Location", handler.path)])

    def redirect_late_to_nowhere(handler):  # at 0.8 s of the 1 s --timeout, to a host that never answers
        time.sleep(0.8)
        answer(handler, 302, headers=[("Location", f"http://127.0.0.1:{unanswered}/version")])

    scrapes = {"n": 0}

    def slow_after_the_probe(handler):  # the probe's /metrics at once, every later one a byte each 50 ms
        scrapes["n"] += 1
        if scrapes["n"] == 1:
            answer(handler, 200, prom)
            return
        handler.send_response(200)
        handler.send_header("Content-Length", "100000")
        handler.end_headers()
        for _ in range(400):
            try:
                handler.wfile.write(b" ")
                handler.wfile.flush()
            except OSError:
                return
            time.sleep(0.05)

    routes = {
        # 3 running requests shown as 6: an engine's samples are summed, and a repeat was summed in
        # (now the first is kept, and the warning names the repeat)
        "/repeat/version": version, "/repeat/metrics": prom.replace(running + b" 0.0\n",
                                                                    running + b" 3\n" + running + b" 3\n"),
        # urllib's three-line text ("...would lead to an infinite loop.\nThe last 30x error message was:\n...")
        "/loop/version": redirect_to_self,
        # the redirect's connection had a whole --timeout of its own: 1.8 s for --timeout 1
        "/late-redirect/version": redirect_late_to_nowhere,
        # a scrape begun before --duration ended took the whole --timeout past it: 1 + 5 s, then the
        # last scrape's 5 s, past the harness's 10 s (that last one still takes --timeout: app/cli/attach.py)
        "/slow-scrapes/version": version, "/slow-scrapes/metrics": slow_after_the_probe,
        "/good/version": version, "/good/metrics": prom,
    }
    url = fake_http_server(routes)
    context = zmq.Context()
    encode = msgspec.msgpack.encode

    def seq(number: int) -> bytes:
        return number.to_bytes(8, "big", signed=True)

    publisher = functools.partial(zmq_publisher, context)
    good = publisher(lambda: [[b"kv", seq(0), encode([1.0, [stored([1, 2])]])]])
    empty = encode([1.0, []])
    # 100,000 batches at once: the subscriber's queue had no bound (RCVHWM 0)
    storm = publisher(lambda: ([b"kv", seq(i), empty] for i in range(100_000)))
    # sequence numbers that go back, jump by 2**62 and come back: restarts and a jump, never a gap to fill
    jumps = publisher(lambda: [[b"kv", seq(s), encode([1.0, [stored([s % 7 + 1])]])]
                               for s in (5, 6, 2, 1 << 62, 3, 4, (1 << 63) - 1, 0)])
    # frames of the wrong count, and a seq frame of 3 bytes, then a good batch
    frames = publisher(lambda: [[b"kv"], [b"kv", seq(0)], [b"kv", seq(0), empty, b"more"], [b"kv", b"abc", empty],
                                [b"kv", seq(0), encode([1.0, [stored([1])]])]])
    # block hashes of odd types: a float, a map, a list of lists, bytes of 40 and of 0
    odd_hashes = publisher(lambda: [[b"kv", seq(0), encode([1.0, [stored([1.5]), stored([{"a": 1}]),
                                                                   stored([[1, [2]]]), stored([b"x" * 40, b""])]])],
                                    [b"kv", seq(1), encode([1.0, [stored([1])]])]])

    def attach(prefix, *more, events=good, duration="1"):
        return ["attach", f"{url}/{prefix}", "--kv-events", events, "--duration", duration, *more]

    return [
        Case("attach: /metrics gives one series twice (kept once, said on stderr)", "structure", attach("repeat"),
             expect="ok"),
        Case("attach: /version redirects to itself", "structure", attach("loop"),
             must_say=("redirected in a loop",), must_not_say=("\\n",)),
        Case("attach --timeout 1: /version redirects at 0.8 s to a host that never answers", "structure",
             attach("late-redirect", "--timeout", "1"), must_say=("within 1 s",)),
        Case("attach --timeout 5 --duration 2: /metrics slows to a byte each 50 ms after the probe", "structure",
             attach("slow-scrapes", "--timeout", "5", duration="2"), expect="ok"),
        Case("attach: a publisher sends 100,000 batches at once", "structure",
             attach("good", events=storm, duration="2"), expect="ok"),
        Case("attach: KV event sequence numbers going back and jumping by 2**62 and 2**63", "structure",
             attach("good", events=jumps), expect="ok", must_say=("restarts",)),
        Case("attach: KV event messages of 1, 2 and 4 frames, and a 3-byte seq", "structure",
             attach("good", events=frames), expect="ok", must_say=("decode errors",)),
        Case("attach --record: block hashes of odd types", "files",
             attach("good", "--record", str(f / "odd-hashes.kvrec"), events=odd_hashes), expect="ok"),
        Case("export the recording of block hashes of odd types", "files", ["export", str(f / "odd-hashes.kvrec")],
             expect="ok"),
    ]
