"""The twelfth hostile pass's cases (the command line), for scripts/hostile_inputs.py: `attach`'s KV-event
endpoints, handed to ZMQ as typed. http:// (the server's URL given twice), TCP://, a leading space and
udp:// were ZMQ's "Protocol not supported"; "127.0.0.1:5557" (no tcp://), "tcp://user@host:5557", "ipc://"
and "tcp://*:5557" (the server's own bind spelling, dialed) its "Invalid argument"; "tcp://::1:5557" and
"tcp://a:5557;b:5558" (ZMQ's source address) were taken, a host that resolves nowhere or tcp://[::1]
(ZMQ sockets are IPv4-only unless told) dialed for ever and said as "no KV event yet ... it is not the
server's publisher"; `--kv-listen ipc://notes.txt` deleted notes.txt to bind there (a DP rank's
notes_dp1 too), a folder was "Address already in use"; a bind on a host not here was "No such device" or
"Cannot assign requested address", on a port in use "Address already in use". --topic filtering every
message out went unnamed in the "no KV event" refusal, and --hardware with no --model predicted nothing.
`--kv-listen ipc://r.kvrec --record r.kvrec` wrote the recording over kvscope's own socket, and the window
(`--quit-after`, no --duration) opened on an ftp:// URL or a port 99999 and exited 0.
Beside them, flags that measured or changed nothing: `calibrate --scale 1e-9` fitted prompts all of one
token, `calibrate --clock cpu` on torch's several threads fitted CPU seconds summed over them (a step
up to 2x its time on 2 cores), `bench soak --minutes 1e-9` "measured" nothing with exit 0, `bench
calibration --device cuda` printed a table before saying there is no CUDA device, and `math
--weights-bytes 1e9 --weight-dtype fp8` printed the figures of `math --weights-bytes 1e9`. Every case's
`expect` is the right behaviour."""

from __future__ import annotations

import socket
from pathlib import Path

from hostile_case import ROOT

DEAD = "http://127.0.0.1:1"  # nothing listens: each refusal here comes before the server is asked
HELD: list = []  # sockets and contexts the harness holds open for the whole run (a port in use, publishers)


def twelfth_cli_cases(d: Path, Case, write) -> list:
    t = d / "twelfth-cli"
    t.mkdir(parents=True, exist_ok=True)
    return _endpoint_cases(t, Case, write) + _served_cases(t, Case) + _flag_cases(Case)


def _attach(*flags, url: str = DEAD) -> list:
    return ["attach", url, *flags, "--duration", "0.5"]


def _endpoint_cases(t: Path, Case, write) -> list:
    """Endpoints refused before anything is sent (or taken as ZMQ took them)."""
    notes = write(t / "notes.txt", "keep me\n")
    rank1 = write(t / "kv_dp1", "keep me too\n")
    (t / "folder").mkdir(exist_ok=True)
    zmq_words = ("Protocol not supported", "Invalid argument", "addr=")
    events = ["--kv-events", "tcp://127.0.0.1:5557"]
    return [
        Case("attach --kv-events http://host:5557 (ZMQ: 'Protocol not supported')", "flags",
             _attach("--kv-events", "http://127.0.0.1:5557"),
             must_say=("http:// is not a transport of vLLM's ZMQ publisher", "the URL, attach's first argument"),
             must_not_say=zmq_words),
        Case("attach --kv-events TCP://host:5557 (upper case: 'Protocol not supported')", "flags",
             _attach("--kv-events", "TCP://127.0.0.1:5557"), must_say=("give tcp://127.0.0.1:5557",),
             must_not_say=zmq_words),
        Case("attach --kv-events ' tcp://host:5557' (a leading space: 'Protocol not supported')", "flags",
             _attach("--kv-events", " tcp://127.0.0.1:5557"), must_say=("holds spaces or control characters",),
             must_not_say=zmq_words),
        Case("attach --kv-events udp://host:5557 ('not compatible with the socket type')", "flags",
             _attach("--kv-events", "udp://127.0.0.1:5557"), must_say=("udp:// is not a transport",),
             must_not_say=zmq_words),
        Case("attach --kv-events 127.0.0.1:5557 (no tcp://: 'Invalid argument')", "flags",
             _attach("--kv-events", "127.0.0.1:5557"), must_say=("names no transport; give tcp://127.0.0.1:5557",),
             must_not_say=zmq_words),
        Case("attach --kv-events tcp://user:pw@host:5557 ('Invalid argument', the password repeated)", "flags",
             _attach("--kv-events", "tcp://user:pw@127.0.0.1:5557"), must_say=("ZMQ takes no user or password",),
             must_not_say=(*zmq_words, "pw@")),
        Case("attach --kv-events tcp://::1:5557 (an IPv6 host without brackets, taken)", "flags",
             _attach("--kv-events", "tcp://::1:5557"), must_say=("an IPv6 host is written in brackets",),
             must_not_say=("cannot reach",)),
        Case("attach --kv-events 'tcp://a:5557;b:5558' (ZMQ's source address, taken)", "flags",
             _attach("--kv-events", "tcp://localhost:5557;127.0.0.1:5558"),
             must_say=("a source address to dial from",), must_not_say=("cannot reach",)),
        Case("attach --kv-events tcp://:5557 (no host, said as 'has no port')", "flags",
             _attach("--kv-events", "tcp://:5557"), must_say=("has no host; give HOST:PORT",)),
        Case("attach --kv-listen ipc:// (no path: 'Invalid argument')", "flags", _attach("--kv-listen", "ipc://"),
             must_say=("names no path; give ipc://PATH",), must_not_say=zmq_words),
        Case("attach --replay http://host:5558 ('Protocol not supported', after the server was asked)", "flags",
             _attach(*events, "--replay", "http://127.0.0.1:5558"), must_say=("replay endpoint 'http://",),
             must_not_say=(*zmq_words, "cannot reach")),
        Case("attach --kv-events an ipc:// path of 200 bytes (ZMQ's 300-character message)", "flags",
             _attach("--kv-events", "ipc:///tmp/" + "k" * 200), must_say=("an ipc:// path is at most 107 bytes",),
             must_not_say=("IPC_PATH_MAX_LEN",)),
        Case("attach --kv-listen ipc://notes.txt (the file deleted to bind a socket there)", "files",
             _attach("--kv-listen", f"ipc://{notes}"), protected=[notes],
             must_say=("is a file, not a socket, and binding there would delete it",)),
        Case("attach --kv-listen ipc://kv --data-parallel-size 2 (DP rank 1's kv_dp1 deleted)", "files",
             _attach("--kv-listen", f"ipc://{t}/kv", "--data-parallel-size", "2"), protected=[rank1],
             must_say=("kv_dp1 is a file, not a socket",)),
        Case("attach --kv-listen ipc://a-folder ('Address already in use')", "files",
             _attach("--kv-listen", f"ipc://{t}/folder"), must_say=("is a folder, and binding there would delete it",),
             must_not_say=("Address already in use",)),
        Case("attach --kv-listen ipc:// in a missing folder (ZMQ's 'No such file or directory for ipc path')", "files",
             _attach("--kv-listen", f"ipc://{t}/missing/kv"), must_say=("no folder", "to make the socket in")),
        Case("attach --kv-events ipc://notes.txt (a file: dialed for ever, 'no KV event yet')", "files",
             _attach("--kv-events", f"ipc://{notes}"), protected=[notes],
             must_say=("is a file, not a socket, so no publisher listens there",), must_not_say=("cannot reach",)),
        Case("attach --kv-listen ipc://r.kvrec --record r.kvrec (the recording replaced kvscope's socket)", "files",
             _attach("--kv-listen", f"ipc://{t}/r.kvrec", "--record", f"{t}/r.kvrec"),
             must_say=("and --kv-listen", "name the same file"), must_not_say=("cannot reach",)),
        Case("attach ftp://host --quit-after 1 (the window opened on it, exit 0)", "flags",
             ["attach", "ftp://127.0.0.1:1", *events, "--quit-after", "1"], must_say=("vLLM's server speaks HTTP",)),
        Case("attach --kv-events tcp://host:99999 --quit-after 1 (the window opened on it, exit 0)", "flags",
             ["attach", DEAD, "--kv-events", "tcp://127.0.0.1:99999", "--quit-after", "1"],
             must_say=("port '99999' is not a valid port",)),
        Case("attach --kv-listen ipc://notes.txt --quit-after 1 (the window bound there: the file deleted)", "files",
             ["attach", DEAD, "--kv-listen", f"ipc://{notes}", "--quit-after", "1"], protected=[notes],
             must_say=("binding there would delete it",)),
        Case("attach --kv-listen 'tcp://*:*' --data-parallel-size 2 ('no port to offset', nothing to give)", "flags",
             _attach("--kv-listen", "tcp://*:*", "--data-parallel-size", "2"),
             must_say=("has no port to offset by the DP rank", "give one, e.g. tcp://*:5557")),
        Case("attach --kv-events tcp://no-such-host.invalid:5557 (dialed for ever: 'not the server's publisher')",
             "flags", _attach("--kv-events", "tcp://no-such-host.invalid:5557"),
             must_say=("no such host ('no-such-host.invalid' does not resolve)",), must_not_say=("cannot reach",)),
        Case("attach --hardware h100-80gb with no --model (every prediction 'n/a', the flag taken)", "flags",
             _attach(*events, "--hardware", "h100-80gb"),
             must_say=("--hardware h100-80gb: read only for the prediction", "add --model PRESET or --model-path DIR"),
             must_not_say=("cannot reach",)),
    ]


def _served_cases(t: Path, Case) -> list:
    """Against a vLLM look-alike on loopback (the captured /metrics): binds, IPv6, the server's own
    spelling of its endpoint, a topic that filters every message out."""
    import json

    import msgspec
    import zmq
    from hostile_fixtures import fake_http_server, stored

    prom = (ROOT / "tests" / "fixtures" / "vllm" / "metrics_live_vllm_cpu_0.32_pressure.prom").read_bytes()
    url = fake_http_server({"/version": b'{"version": "0.32.0"}', "/metrics": prom,
                            "/v1/models": json.dumps({"object": "list", "data": [{"id": "tiny"}]}).encode()})
    in_use = socket.socket()
    in_use.bind(("0.0.0.0", 0))
    in_use.listen()
    HELD.append(in_use)
    batch = msgspec.msgpack.encode([1.0, [stored([7])], 0])
    context = zmq.Context()
    HELD.append(context)
    cases = [
        Case("attach --kv-listen tcp://example.com:5557 (a bind on a host name: 'No such device')", "flags",
             _attach("--kv-listen", "tcp://example.com:5557", url=url),
             must_say=("its host is no interface of this machine", "give tcp://*:PORT"), must_not_say=("addr=",)),
        Case("attach --kv-listen tcp://192.0.2.1:5557 ('Cannot assign requested address')", "flags",
             _attach("--kv-listen", "tcp://192.0.2.1:5557", url=url),
             must_say=("its host is no address of this machine",), must_not_say=("addr=",)),
        Case("attach --kv-listen tcp://*:PORT in use ('Address already in use')", "flags",
             _attach("--kv-listen", f"tcp://*:{in_use.getsockname()[1]}", url=url),
             must_say=("the port is in use by another program here",), must_not_say=("addr=",)),
        Case("attach --topic kv, the server's topic another ('no KV event', the topic unnamed)", "flags",
             _attach("--kv-events", "tcp://127.0.0.1:9", "--topic", "kv", url=url),
             must_say=("the server's topic does not begin with 'kv' (--topic",)),
        Case("attach --kv-events tcp://*:PORT, the server's bind spelling ('Invalid argument')", "flags",
             _attach("--kv-events", f"tcp://*:{_publisher(context, '127.0.0.1', batch)}", url=url), expect="ok",
             must_say=("BlockStored 1",)),
    ]
    if _ipv6_loopback():
        cases.append(Case("attach --kv-events tcp://[::1]:PORT (ZMQ IPv4-only: dialed for ever, 'no KV event')",
                          "flags", _attach("--kv-events", f"tcp://[::1]:{_publisher(context, '[::1]', batch)}",
                                           url=url), expect="ok", must_say=("BlockStored 1",)))
    return cases


def _publisher(context, host: str, batch: bytes) -> int:
    """An XPUB on host (IPv6 where bracketed) sending one batch to each subscriber as it subscribes; its port."""
    import threading
    import time

    import zmq

    pub = context.socket(zmq.XPUB)
    pub.setsockopt(zmq.IPV6, 1 if host.startswith("[") else 0)
    port = pub.bind_to_random_port(f"tcp://{host}")
    HELD.append(pub)

    def loop():
        while True:
            try:
                message = pub.recv()
            except zmq.ZMQError:
                return
            if message[:1] == b"\x01":
                time.sleep(0.1)
                pub.send_multipart([b"", (0).to_bytes(8, "big", signed=True), batch])

    threading.Thread(target=loop, daemon=True).start()
    return port


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
        return True
    except OSError:
        return False


def _flag_cases(Case) -> list:
    """Flags that measured or changed nothing."""
    import os

    cases = [
        Case("calibrate --scale 1e-9 (every prompt one token, fitted and stored)", "numbers",
             ["calibrate", "--scale", "1e-9", "--no-save"], slow=True,
             must_say=("--scale 1e-09: the shortest calibration prompt would be", "give at least --scale 0.0625"),
             must_not_say=("loading",)),
        Case("bench soak --minutes 1e-9 ('too short to measure', exit 0)", "numbers",
             ["bench", "soak", "--minutes", "1e-9"], must_say=("give at least --minutes 2.5",)),
        Case("math --weights-bytes 1e9 --weight-dtype fp8 (the figures of --weights-bytes 1e9 alone)", "flags",
             ["math", "--weights-bytes", "1e9", "--weight-dtype", "fp8"],
             must_say=("--weight-dtype fp8 changes nothing in `kvscope math` beside --weights-bytes",)),
        Case("math --params 8e9 --weight-dtype fp8 (sizes the weights)", "flags",
             ["math", "--params", "8e9", "--weight-dtype", "fp8"], expect="ok", must_say=("fp8",)),
    ]
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    if cores >= 2:
        cases.append(Case("calibrate --clock cpu --threads 2 (CPU seconds summed over threads, stored as step time)",
                          "flags", ["calibrate", "--clock", "cpu", "--threads", "2", "--no-save"], slow=True,
                          must_say=("--clock cpu: it times this process's CPU seconds", "give --threads 1"),
                          must_not_say=("loading",)))
    if not Path("/dev/nvidia0").exists():
        cases.append(Case("bench calibration --device cuda without CUDA (a table first, then the refusal)", "flags",
                          ["bench", "calibration", "--device", "cuda"], slow=True, must_say=("no CUDA device",),
                          must_not_say=("Simulated vs published",)))
    return cases
