"""`kvscope attach` against hostile addresses and servers, tenth round: an address with a query or a
fragment (kvscope put /metrics after it and asked for the server's front page), an empty or doubled
port, a host name in another script (sent raw) or with an empty part (an IDNA codec's error), a page of the server pasted as its address (/v1, the OpenAI client's base, or /metrics), an
IPv6 host without brackets; https:// of a server in plain HTTP and http:// of an HTTPS one (said as
an SSL library's "wrong version number", or "BadStatusLine"); a model listed twice by /v1/models.
Each is one line naming the address and what to give instead, exit code 2 on the CLI."""

from __future__ import annotations

import json
import socket
import threading

import pytest

from attach_fixtures import vllm_routes

from kvscope.app.cli.main import main
from kvscope.app.lab.vllm.metrics import ServerUnreachable, fetch_text, server_url
from kvscope.app.lab.vllm.server import served_models


def refusal(address: str) -> str:
    with pytest.raises(ServerUnreachable) as caught:
        server_url(address)
    return str(caught.value)


# -- 1. addresses that asked for another page than the one meant ------------------------------------

@pytest.mark.parametrize("address", ["http://127.0.0.1:8000/?x=1", "127.0.0.1:8000/#metrics",
                                     "http://127.0.0.1:8000/v1?key=abc#top"])
def test_a_query_or_fragment_in_the_address_is_refused_not_put_before_metrics(address):
    said = refusal(address)
    assert "holds a query (?...) or a fragment (#...)" in said and "before /metrics" in said


def test_a_bare_question_mark_or_hash_at_the_end_is_dropped():
    assert server_url("http://127.0.0.1:8000/?") == "http://127.0.0.1:8000"
    assert server_url("127.0.0.1:8000#") == "http://127.0.0.1:8000"


@pytest.mark.parametrize("address, says", [
    ("localhost:", "the port after ':' is empty"),
    ("http://127.0.0.1:80:80", "127.0.0.1:80:80 is not one host and port"),
])
def test_an_empty_or_doubled_port_is_refused_at_once(address, says):
    assert says in refusal(address)


@pytest.mark.parametrize("page, what", [("/v1", "the OpenAI API's base path"), ("/metrics/", "its metrics page"),
                                        ("/v1/models", "its model list"), ("/VERSION", "its version page")])
def test_a_page_of_the_server_pasted_as_its_address_names_the_address_to_give(page, what):
    said = refusal(f"http://10.0.0.5:8000{page}")
    assert f"is {what}, not the server's address; give http://10.0.0.5:8000 " in said


def test_a_path_prefix_of_a_proxy_is_still_taken():
    assert server_url("http://gateway:8080/vllm/a/") == "http://gateway:8080/vllm/a"


@pytest.mark.parametrize("address", ["::1:8000", "http://fe80::1:8000"])
def test_an_ipv6_host_without_brackets_is_told_to_use_them(address):
    assert "an IPv6 host is written in brackets, e.g. http://[::1]:8000" in refusal(address)


def test_a_host_name_in_another_script_goes_out_in_its_idna_form():
    assert server_url("http://bücher.example:8000/präfix") == "http://xn--bcher-kva.example:8000/pr%C3%A4fix"


@pytest.mark.parametrize("host", ["a..b", "a" * 64 + ".example"])
def test_a_host_name_with_an_empty_or_overlong_part_is_refused_before_any_request(host):
    said = refusal(f"http://{host}:8000")
    assert "is not a host name: a part between its dots is empty or longer than 63 characters" in said
    assert "idna" not in said


def test_the_cli_refuses_a_pasted_v1_address_in_one_line_with_exit_code_2(capsys):
    assert main(["attach", "http://127.0.0.1:8000/v1", "--kv-events", "tcp://127.0.0.1:5557",
                 "--duration", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "give http://127.0.0.1:8000 " in err and "Traceback" not in err


# -- 2. HTTP and HTTPS crossed --------------------------------------------------------------------------

def test_https_given_of_a_plain_http_server_says_to_give_http(server):
    url = server().url.replace("http://", "https://")
    with pytest.raises(ServerUnreachable) as caught:
        fetch_text(f"{url}/version", 2.0)
    said = str(caught.value)
    assert "answered in plain HTTP, not in TLS: it speaks http:// there, not https://" in said
    assert "_ssl.c" not in said and "wrong version number" not in said


@pytest.fixture
def tls_port():
    """A port that answers any request with a TLS alert record, as an HTTPS server answers plain HTTP."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)

    def serve():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.recv(4096)
                conn.sendall(b"\x15\x03\x01\x00\x02\x02\x46")

    threading.Thread(target=serve, daemon=True).start()
    yield listener.getsockname()[1]
    listener.close()


def test_http_given_of_an_https_server_says_to_give_https(tls_port):
    with pytest.raises(ServerUnreachable) as caught:
        fetch_text(f"http://127.0.0.1:{tls_port}/version", 2.0)
    said = str(caught.value)
    assert "answered in TLS: the server speaks HTTPS there; give its https:// address" in said
    assert "BadStatusLine" not in said


# -- 3. a model listed twice ---------------------------------------------------------------------------------

def test_a_model_listed_twice_is_named_once(server):
    models = json.dumps({"data": [{"id": "tiny"}, {"id": "lora-a"}, {"id": "tiny"}]}).encode()
    url = server({**vllm_routes(), "/v1/models": (200, models)}).url
    assert served_models(url) == ("tiny", "lora-a")



SPY_ON_RECORD = """
import sys
from kvscope.app.gui import recording_control
from kvscope.app.cli.main import main

seen = []
real_start = recording_control.start

def start(window, path):
    started = real_start(window, path)
    seen.append((started, window.record_action.isChecked(), window.state.recording_path))
    return started

recording_control.start = start
code = main(sys.argv[1:])
print(repr((code, seen)))
"""


def test_attach_record_in_the_window_checks_file_record_and_keeps_exports_off_its_file(server, publisher, tmp_path):
    """`kvscope attach URL --record F` opened the window recording F behind File > Record's back: the
    action unchecked (so unchecking could not stop it) and exports free to write over F. In its own
    process: the window's attach session, closed in-process, held up a later test's engine process."""
    import os
    import subprocess
    import sys

    path = tmp_path / "server.kvrec"
    pub = publisher()
    try:
        done = subprocess.run([sys.executable, "-c", SPY_ON_RECORD, "attach", server().url, "--kv-events",
                               pub.endpoint, "--record", str(path), "--quit-after", "0.5"], capture_output=True,
                              text=True, timeout=120, env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    finally:
        pub.stop()
    assert done.stdout.strip().splitlines()[-1] == repr((0, [(True, True, str(path))])), done.stderr


def test_an_interrupted_headless_attach_says_its_capture_was_kept(server, publisher, tmp_path, capsys, monkeypatch):
    """Ctrl+C or SIGTERM ends `attach --record F` as --duration would, replacing F with the capture so
    far: it said only "interrupted", leaving the user to wonder whether F (or the file before it) was kept."""
    from kvscope.app.lab.recording.attached_reader import AttachedRecording
    from kvscope.app.lab.vllm.attachment import Attachment

    path = tmp_path / "capture.kvrec"
    path.write_bytes(b"an older capture")
    polls = []
    real_poll = Attachment.poll

    def poll_then_interrupted(self, *args, **kwargs):
        polls.append(1)
        if len(polls) == 3:
            raise KeyboardInterrupt
        return real_poll(self, *args, **kwargs)

    monkeypatch.setattr(Attachment, "poll", poll_then_interrupted)
    pub = publisher()
    try:
        code = main(["attach", server().url, "--kv-events", pub.endpoint, "--duration", "30", "--record", str(path)])
    finally:
        pub.stop()
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 130 and err[-1] == "kvscope: interrupted"
    assert err[-2].startswith(f"kvscope: what came before the interruption is recorded in {path}")
    AttachedRecording.open(path)  # closed whole: no allow_truncated needed
