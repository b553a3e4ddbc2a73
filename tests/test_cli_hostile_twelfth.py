"""The command line against bad input, twelfth round (scripts/hostile_inputs_twelfth_cli.py): `attach`'s
KV-event endpoints as ZMQ took them (ZMQ's own "Protocol not supported", "Invalid argument", "No such
device"; a file deleted by binding ipc:// on it; an IPv6 or unresolvable host dialed for ever and said
as "not the server's publisher"; --topic never named when it filtered everything out; --hardware with
no model to predict for), and flags that measured or changed nothing: `calibrate --scale 1e-9` (prompts
of one token) and `--clock cpu` on several threads (CPU seconds summed over them), `bench soak
--minutes 1e-9`, `bench calibration --device cuda` refused only after a table, and `math --weights-bytes
N --weight-dtype D` (the dtype read only to size weights already sized)."""

from __future__ import annotations

import argparse
import socket
import time

import pytest
import zmq

from attach_fixtures import FixtureServer, vllm_routes
from cli_helper import cli
from test_cli_hostile_fifth import refused

from kvscope.app.lab.vllm.endpoints import PublisherEndpoint, SubscriberError, check_endpoint, data_parallel_endpoints
from kvscope.app.lab.vllm.subscriber import KvEventSubscriber, ReceivedBatch

DEAD = "http://127.0.0.1:1"  # nothing listens: a refusal that names the server came after the endpoints' checks
WAIT_S = 10.0


def attach(*flags):
    return ("attach", DEAD, *flags, "--duration", "0.3")


# -- 1. endpoints ZMQ refused in its own words, or took and dialed for ever ------------------------------------------


@pytest.mark.parametrize("flags, said", [
    (("--kv-events", "http://127.0.0.1:5557"), "http:// is not a transport of vLLM's ZMQ publisher (the server's HTTP"),
    (("--kv-events", "TCP://127.0.0.1:5557"), "lower case only; give tcp://127.0.0.1:5557"),
    (("--kv-events", " tcp://127.0.0.1:5557"), "holds spaces or control characters"),
    (("--kv-events", "tcp://user:secret@127.0.0.1:5557"), "tcp://...@127.0.0.1:5557: ZMQ takes no user or password"),
    (("--kv-events", "127.0.0.1:5557"), "names no transport; give tcp://127.0.0.1:5557"),
    (("--kv-events", "tcp://::1:5557"), "an IPv6 host is written in brackets"),
    (("--kv-events", "tcp://localhost:5557;127.0.0.1:5558"), "a source address to dial from"),
    (("--kv-events", "ipc://"), "names no path; give ipc://PATH"),
    (("--kv-events", "udp://127.0.0.1:5557"), "udp:// is not a transport"),
    (("--kv-listen", "ipc://"), "names no path"),
    (("--kv-events", "tcp://127.0.0.1:5557", "--replay", "http://127.0.0.1:5558"), "replay endpoint 'http://"),
    (("--kv-events", "tcp://127.0.0.1:5557", "--replay", "127.0.0.1:5558"),
     "replay endpoint '127.0.0.1:5558' names no"),
    (("--kv-events", "ipc:///tmp/" + "k" * 200), "an ipc:// path is at most 107 bytes"),
    (("--kv-events", "tcp://:5557"), "'tcp://:5557' has no host; give HOST:PORT"),
    (("--kv-events", "kv-events"), "names no transport; give tcp://HOST:PORT, e.g. tcp://127.0.0.1:5557, or ipc://"),
])
def test_an_endpoint_zmq_cannot_use_is_refused_before_the_server_is_asked(capsys, flags, said):
    rc, out, err = cli(capsys, *attach(*flags))
    refused(rc, err, said)
    assert "cannot reach" not in err and "addr=" not in err


def test_binding_ipc_on_a_file_refuses_and_leaves_the_file(capsys, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("keep me\n")
    rc, out, err = cli(capsys, *attach("--kv-listen", f"ipc://{notes}"))
    refused(rc, err, "is a file, not a socket, and binding there would delete it")
    assert notes.read_text() == "keep me\n"


def test_a_dp_ranks_ipc_file_is_kept_too(tmp_path):
    rank1 = tmp_path / "kv_dp1"
    rank1.write_text("keep me\n")
    with pytest.raises(SubscriberError, match="kv_dp1 is a file, not a socket"):
        data_parallel_endpoints(f"ipc://{tmp_path}/kv", None, 2, listen=True)
    assert rank1.read_text() == "keep me\n"


@pytest.mark.parametrize("listen, said", [(True, "is a folder, and binding there would delete it"),
                                          (False, "is a folder, so no publisher listens there")])
def test_an_ipc_path_that_is_a_folder_is_refused(tmp_path, listen, said):
    with pytest.raises(SubscriberError, match=said):
        check_endpoint("KV event endpoint", f"ipc://{tmp_path}", listen)


def test_an_ipc_socket_left_by_an_earlier_run_is_taken(tmp_path):
    path = tmp_path / "kv"
    with socket.socket(socket.AF_UNIX) as leftover:
        leftover.bind(str(path))
    check_endpoint("KV event endpoint", f"ipc://{path}", listen=True)
    check_endpoint("KV event endpoint", f"ipc://{tmp_path}/new", listen=True)  # nothing there yet: made


def test_an_ipc_path_in_no_folder_is_said_as_such(tmp_path):
    with pytest.raises(SubscriberError, match="no folder .* to make the socket in"):
        check_endpoint("KV event endpoint", f"ipc://{tmp_path}/missing/kv", listen=True)


@pytest.mark.parametrize("output", ["--record", "--json"])
def test_an_output_onto_the_socket_kvscope_binds_is_refused(capsys, tmp_path, output):
    """The socket file is made when the attach starts; a recording written there replaced it."""
    path = tmp_path / "kv.kvrec"
    rc, out, err = cli(capsys, *attach("--kv-listen", f"ipc://{path}", output, path))
    refused(rc, err, f"{output} {path} and --kv-listen {path} name the same file")
    assert not path.exists()


@pytest.mark.parametrize("url, flags, said", [
    ("ftp://127.0.0.1:1", ("--kv-events", "tcp://127.0.0.1:5557"), "vLLM's server speaks HTTP"),
    (DEAD, ("--kv-events", "tcp://127.0.0.1:99999"), "port '99999' is not a valid port"),
    (DEAD, ("--kv-events", "http://127.0.0.1:5557"), "http:// is not a transport"),
])
def test_the_window_is_not_opened_on_an_address_headless_attach_refuses(capsys, monkeypatch, url, flags, said):
    """`attach URL ... --quit-after 1` opened the window on ftp:// or port 99999 and exited 0."""
    from kvscope.app.cli import attach as attach_command

    opened = []
    monkeypatch.setattr(attach_command, "run_window", lambda target, args: opened.append(target) or 0)
    rc, out, err = cli(capsys, "attach", url, *flags, "--quit-after", "1")
    refused(rc, err, said)
    assert opened == []
    rc, out, err = cli(capsys, "attach", DEAD, "--kv-events", "tcp://127.0.0.1:5557", "--quit-after", "1")
    assert rc == 0 and len(opened) == 1, err  # a server not reached yet: the window opens and says so


def test_a_bind_on_any_port_with_dp_ranks_says_what_to_give(capsys):
    rc, out, err = cli(capsys, *attach("--kv-listen", "tcp://*:*", "--data-parallel-size", "2"))
    refused(rc, err, "has no port to offset by the DP rank (rank r uses the port + r); give one, e.g. tcp://*:5557")


def test_a_host_that_resolves_nowhere_is_refused_not_dialed_for_ever(capsys):
    server = FixtureServer(vllm_routes())
    try:
        rc, out, err = cli(capsys, "attach", server.url, "--kv-events", "tcp://no-such-host.invalid:5557",
                           "--duration", "0.3")
    finally:
        server.stop()
    refused(rc, err, "no such host ('no-such-host.invalid' does not resolve)")
    assert "no KV event" not in err


def _publish_until_received(pub, subscriber) -> bool:
    """Send a batch each 50 ms until the subscriber delivers one (a SUB joins a PUB after a moment)."""
    import msgspec

    payload = msgspec.msgpack.encode([time.time(), [], 0])
    deadline, seq = time.monotonic() + WAIT_S, 0
    while time.monotonic() < deadline:
        pub.send_multipart([b"", seq.to_bytes(8, "big", signed=True), payload])
        seq += 1
        if any(isinstance(r, ReceivedBatch) for r in subscriber.poll(50)):
            return True
    return False


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback here")
def test_an_ipv6_publisher_is_reached():
    """ZMQ sockets are IPv4-only unless told: tcp://[::1]:PORT was dialed for ever, "no KV event yet"."""
    context = zmq.Context()
    pub = context.socket(zmq.PUB)
    pub.setsockopt(zmq.IPV6, 1)
    pub.setsockopt(zmq.LINGER, 0)
    port = pub.bind_to_random_port("tcp://[::1]")
    try:
        with KvEventSubscriber([PublisherEndpoint(f"tcp://[::1]:{port}")]) as subscriber:
            assert _publish_until_received(pub, subscriber)
    finally:
        pub.close()
        context.term()


def test_the_servers_own_bind_spelling_is_dialed_on_this_machine():
    """`--kv-events tcp://*:5557`, as the server's kv-events-config says it, was ZMQ's "Invalid argument"."""
    context = zmq.Context()
    pub = context.socket(zmq.PUB)
    pub.setsockopt(zmq.LINGER, 0)
    port = pub.bind_to_random_port("tcp://127.0.0.1")
    try:
        with KvEventSubscriber([PublisherEndpoint(f"tcp://*:{port}")]) as subscriber:
            assert _publish_until_received(pub, subscriber)
    finally:
        pub.close()
        context.term()


@pytest.mark.parametrize("host, said", [("example.com", "its host is no interface of this machine"),
                                        ("192.0.2.1", "its host is no address of this machine")])
def test_a_bind_on_a_host_not_here_says_what_a_bind_takes(host, said):
    with pytest.raises(SubscriberError, match=said) as caught:
        KvEventSubscriber([PublisherEndpoint(f"tcp://{host}:5557", None, True)])
    assert "addr=" not in str(caught.value)


def test_a_bind_on_a_port_in_use_says_so():
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(SubscriberError, match="the port is in use by another program here"):
            KvEventSubscriber([PublisherEndpoint(f"tcp://*:{port}", None, True)])


# -- 2. what attach reads and says beside the events -------------------------------------------------------------------


def test_no_event_under_a_typed_topic_names_the_topic(capsys):
    server = FixtureServer(vllm_routes())
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    try:
        rc, out, err = cli(capsys, "attach", server.url, "--kv-events", f"tcp://127.0.0.1:{port}", "--topic", "kv",
                           "--duration", "0.3")
        said = refused(rc, err, "no KV event from", "the server's topic does not begin with 'kv' (--topic")
        rc, out, err = cli(capsys, "attach", server.url, "--kv-events", f"tcp://127.0.0.1:{port}", "--duration", "0.3")
        assert "--topic" not in refused(rc, err, "no KV event from") and said
    finally:
        server.stop()


def test_hardware_with_no_model_to_predict_for_is_refused(capsys):
    rc, out, err = cli(capsys, *attach("--kv-events", "tcp://127.0.0.1:5557", "--hardware", "h100-80gb"))
    refused(rc, err, "--hardware h100-80gb: read only for the prediction", "add --model PRESET or --model-path DIR")
    assert "cannot reach" not in err


def test_hardware_with_a_model_is_taken_as_far_as_the_server(capsys):
    rc, out, err = cli(capsys, *attach("--kv-events", "tcp://127.0.0.1:5557", "--hardware", "h100-80gb",
                                       "--model", "llama-3-8b"))
    refused(rc, err, "cannot reach")


# -- 3. flags that measured or changed nothing -------------------------------------------------------------------------


@pytest.mark.parametrize("scale", ["1e-9", "0.06"])
def test_a_calibration_scale_that_makes_prompts_of_one_token_is_refused_before_loading(capsys, scale):
    rc, out, err = cli(capsys, "calibrate", "--scale", scale, "--no-save")
    refused(rc, err, f"--scale {float(scale):g}: the shortest calibration prompt would be", "at least --scale 0.0625")
    assert "loading" not in err


def test_the_smallest_scale_whose_prompts_all_keep_their_length_is_taken():
    from kvscope.app.cli.calibrate import check_scale_floor
    from kvscope.app.lab.calibration import calibration_phases

    check_scale_floor(0.0625)
    lengths = {len(prompt) for phase in calibration_phases(1000, 4096, scale=0.0625) for prompt, _ in phase}
    assert min(lengths) == 1 and len(lengths) > 4


@pytest.mark.parametrize("flags, said", [((), "torch's default here, 2 threads"), (("--threads", "2"), "--threads 2")])
def test_a_cpu_time_clock_over_several_threads_is_refused(capsys, monkeypatch, flags, said):
    from kvscope.app.cli import calibrate, combinations

    monkeypatch.setattr(combinations, "usable_cores", lambda: 2)  # --threads 2 is not past the cores
    monkeypatch.setattr(calibrate, "torch_default_threads", lambda: 2)
    rc, out, err = cli(capsys, "calibrate", "--clock", "cpu", *flags, "--no-save")
    refused(rc, err, "--clock cpu: it times this process's CPU seconds, summed over its threads", said,
            "give --threads 1")
    assert "loading" not in err


def test_a_cpu_time_clock_on_one_thread_is_taken(monkeypatch):
    from kvscope.app.cli import calibrate
    from kvscope.app.cli.calibrate import check_cpu_clock_threads

    monkeypatch.setattr(calibrate, "torch_default_threads", lambda: 2)
    check_cpu_clock_threads(argparse.Namespace(clock="cpu", threads=1))
    check_cpu_clock_threads(argparse.Namespace(clock="wall", threads=None))
    monkeypatch.setattr(calibrate, "torch_default_threads", lambda: 1)  # torch's own choice is one thread
    check_cpu_clock_threads(argparse.Namespace(clock="cpu", threads=None))


@pytest.mark.parametrize("minutes", ["1e-9", "2"])
def test_a_soak_too_short_to_measure_is_refused(capsys, minutes):
    rc, out, err = cli(capsys, "bench", "soak", "--minutes", minutes)
    refused(rc, err, f"--minutes {float(minutes):g}: the soak measures memory growth from minute 2",
            "give at least --minutes 2.5")
    assert out == ""


def test_bench_device_cuda_without_cuda_is_refused_before_any_table(capsys):
    from kvscope.app.lab.cuda_device import cuda_device_visible

    if cuda_device_visible():
        pytest.skip("this machine has CUDA")
    rc, out, err = cli(capsys, "bench", "calibration", "--device", "cuda")
    refused(rc, err, "no CUDA device")
    assert out == ""


def test_a_weight_dtype_beside_weights_bytes_is_refused_in_math(capsys):
    rc, out, err = cli(capsys, "math", "--weights-bytes", "1e9", "--weight-dtype", "fp8")
    refused(rc, err, "--weight-dtype fp8 changes nothing in `kvscope math` beside --weights-bytes 1e+09")
    assert out == ""


@pytest.mark.parametrize("argv", [("math", "--params", "8e9", "--weight-dtype", "fp8"),
                                  ("math", "--weight-dtype", "fp8"),
                                  ("run", "--quiet", "--requests", "2", "--weights-bytes", "1e9",
                                   "--weight-dtype", "fp8")])
def test_a_weight_dtype_that_sizes_the_weights_or_the_clock_is_taken(capsys, argv):
    rc, out, err = cli(capsys, *argv)
    assert rc == 0, err
