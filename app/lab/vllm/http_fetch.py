"""A vLLM server's HTTP side as kvscope reaches it: the address a user gives, checked and made a
URL (server_url), and one GET answered within a deadline for the whole answer (fetch_text).

A socket's timeout bounds each read, not the answer: a server that sends a byte every half second,
or redirects to a host that never answers, would hold kvscope for as long as it liked. So every
request carries a _Deadline that shuts its sockets when it passes, and a connection begun late is
given only the time left. What metrics.py parses, and /version, /v1/models, come through here.
"""

from __future__ import annotations

import http.client
import re
import socket
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

from kvscope.app.lab.bounded_reads import escaped
from kvscope.app.lab.vllm.http_redirects import HttpOnlyRedirects
from kvscope.engine.config import ConfigError

DEFAULT_TIMEOUT_S = 2.0
MAX_RESPONSE_BYTES = 16 * 1024**2  # an exposition is about 50 KB
MAX_PORT = 65535
MAX_ADDRESS_CHARS = 2000
# Pages of a vLLM server that users paste as its address (the OpenAI client's base_url ends in /v1)
_SERVER_PAGES = {"/v1": "the OpenAI API's base path", "/metrics": "its metrics page", "/version": "its version page",
                 "/v1/models": "its model list", "/health": "its health check", "/docs": "its API docs"}


class MetricsError(ConfigError):
    """A /metrics answer that is not a vLLM server's; the message says where it came from."""


class ServerUnreachable(ConfigError):
    """No answer from the server; the message names the URL and the reason."""


def short_label(text, most: int = 40) -> str:
    """A server's text as a message quotes it: at most `most` characters, control characters escaped."""
    text = str(text)
    return escaped(text if len(text) <= most else f"{text[:most - 3]}...")


def server_url(address: str) -> str:
    """"host:8000", "http://host:8000/" -> "http://host:8000"; an address in another protocol, with
    no host ("https://", "http:/x"), a malformed host ("http://[::1:8000"), a port that is not one
    (0, 99999, -1, "８０", "", "80:80"), credentials ("user:pass@host"), a query or fragment (kvscope
    appends /metrics), a page of the server (/v1, /metrics) or a host name no network takes ("a..b")
    is refused with what to give instead; a host name in another script is given in its IDNA form."""
    address = address.strip()
    if len(address) > MAX_ADDRESS_CHARS:  # a recording keeps it, and reads back one of at most this many
        raise ServerUnreachable(f"{address[:40]}...: an address of {len(address):,} characters; give the server's "
                                f"(at most {MAX_ADDRESS_CHARS:,}), e.g. http://127.0.0.1:8000")
    if "://" not in address and not re.match(r"[A-Za-z][A-Za-z0-9+.-]*:/", address):
        address = f"http://{address}"  # "host:8000"
    example = "e.g. http://127.0.0.1:8000"
    try:
        parts = urllib.parse.urlsplit(address)
    except ValueError as exc:  # "Invalid IPv6 URL": an unclosed [
        raise ServerUnreachable(f"{address}: not a valid address ({exc}); give the server's, {example}") from None
    if parts.scheme.lower() not in ("http", "https"):
        raise ServerUnreachable(f"{address}: vLLM's server speaks HTTP; give an http:// or https:// address "
                                f"(not {parts.scheme}:), {example}")
    if "@" in parts.netloc:
        shown = f"{parts.scheme}://...@{parts.netloc.rpartition('@')[2]}"  # the credentials are not repeated
        raise ServerUnreachable(f"{shown}: the address holds credentials (user:password@), which kvscope does not "
                                f"send; give it without them, {example}")
    if parts.netloc.count(":") >= 2 and re.fullmatch(r"[0-9A-Fa-f:]+", parts.netloc):  # "::1:8000": which colon?
        raise ServerUnreachable(f"{address}: an IPv6 host is written in brackets, e.g. http://[::1]:8000")
    if not parts.hostname or "://" not in address:
        raise ServerUnreachable(f"{address}: no host in the address; give the server's, {example}")
    port = _port_text(parts.netloc)
    if (port or parts.netloc.endswith(":")) and not valid_port(port):  # "host:" too: an empty port
        raise ServerUnreachable(f"{address}: {shown_port(port)} is not a valid port; give a whole number from 1 to "
                                f"65535, {example}")
    try:
        parts.port  # "host:80:80": the last part is a port, the whole is not (http.client refused it late)
    except ValueError:
        raise ServerUnreachable(f"{address}: {short_label(parts.netloc)} is not one host and port; give the "
                                f"server's, {example}") from None
    if address.rstrip("?#") != address.partition("?")[0].partition("#")[0]:
        # kvscope appends /metrics: "host:8000/?x=1" asked for /?x=1/metrics, "host:8000/#top" for /
        raise ServerUnreachable(f"{short_label(address, 120)}: the address holds a query (?...) or a fragment "
                                f"(#...), which kvscope would put before /metrics; give the server's address "
                                f"alone, {example}")
    address = address.rstrip("?#")
    parts = urllib.parse.urlsplit(address)
    page = parts.path.rstrip("/")
    if page.lower() in _SERVER_PAGES:  # a page of the server, pasted: kvscope asked for /v1/version, a 404
        base = urllib.parse.urlunsplit(parts._replace(path=""))
        raise ServerUnreachable(f"{address}: {page} is {_SERVER_PAGES[page.lower()]}, not the server's address; "
                                f"give {short_label(base, 120)} (kvscope asks for /version, /metrics and "
                                "/v1/models itself)")
    if any(not ch.isprintable() or ch.isspace() for ch in address):
        raise ServerUnreachable(f"{address!r}: the address holds spaces or control characters; give the server's, "
                                f"{example}")
    address = _internet_host(address, parts, example)
    parts = urllib.parse.urlsplit(address)
    if not parts.path.isascii():  # a path prefix in another script goes out percent-encoded, as a browser sends it
        address = urllib.parse.urlunsplit(parts._replace(path=urllib.parse.quote(parts.path, safe="/%")))
    return address.rstrip("/")


def _internet_host(address: str, parts, example: str) -> str:
    """The address with its host as the network is given it: a name in another script in its IDNA
    form ("bücher.example" -> "xn--bcher-kva.example"; urllib sent it raw in the Host header, and one
    that Latin-1 cannot hold failed with "'latin-1' codec can't encode characters"); a name with an
    empty part or one over 63 characters ("a..b") is refused here, where it was "encoding with 'idna'
    codec failed"."""
    host = parts.netloc.rpartition("@")[2]
    if host.startswith("["):  # an IPv6 literal: ASCII, and no name
        return address
    name = host.rpartition(":")[0] if ":" in host else host
    try:
        encoded = name.encode("idna").decode("ascii")
    except UnicodeError:
        raise ServerUnreachable(f"{short_label(address, 120)}: {short_label(name, 80)} is not a host name: a part "
                                f"between its dots is empty or longer than 63 characters; give the server's, "
                                f"{example}") from None
    if name.isascii():
        return address
    return urllib.parse.urlunsplit(parts._replace(netloc=encoded + host[len(name):]))


def valid_port(text: str) -> bool:
    """A TCP port as written in an address: ASCII digits (not "８０", "²"), 1 to 65535."""
    return text.isascii() and text.isdigit() and 1 <= int(text) <= MAX_PORT


def shown_port(text: str) -> str:
    """A port as a message quotes it: short, and its non-ASCII digits named as such."""
    if not text:
        return "the port after ':' is empty, which"
    quoted = repr(text) if len(text) <= 20 else repr(text[:17] + "...")
    return f"port {quoted}" + ("" if text.isascii() else " (not ASCII digits)")


def _port_text(netloc: str) -> str:
    """What follows the host's ':' in "host:port" or "[v6]:port" ("" when there is none)."""
    host_port = netloc.rpartition("@")[2]
    if host_port.startswith("["):
        return host_port.partition("]")[2].partition(":")[2]
    return host_port.rpartition(":")[2] if ":" in host_port else ""


def _tls_record(line) -> bool:
    """Whether an answer's first line is a TLS record (a handshake or an alert, TLS 1.x): what an
    HTTPS server sends back to a request in plain HTTP."""
    head = line.encode("latin-1", "replace") if isinstance(line, str) else bytes(line or b"")
    return len(head) >= 2 and head[0] in (0x15, 0x16) and head[1] == 0x03


def _why_unreachable(reason) -> str:
    """An OS error as a person reads it: "connection refused (nothing listens there)", not "[Errno 111] ..."."""
    if isinstance(reason, ssl.SSLError) and reason.reason in ("WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE",
                                                               "PACKET_LENGTH_TOO_LONG", "HTTP_REQUEST"):
        # "[SSL: WRONG_VERSION_NUMBER] wrong version number (_ssl.c:1006)": https:// of a server in plain HTTP
        return "the server answered in plain HTTP, not in TLS: it speaks http:// there, not https://"
    if isinstance(reason, ssl.SSLCertVerificationError):
        return f"its TLS certificate is not trusted ({short_label(reason.verify_message or reason, 120)})"
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused (is the server running, on that port?)"
    if isinstance(reason, socket.gaierror):
        return "no such host (the name does not resolve)"
    if isinstance(reason, (TimeoutError, socket.timeout)):
        return "timed out: no answer in time"
    if isinstance(reason, OSError) and reason.strerror:
        return reason.strerror.lower()
    return str(reason) or type(reason).__name__


def fetch_text(url: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> str:
    """The body of GET url, in at most timeout_s for the whole of it (headers, redirects, body) and
    at most MAX_RESPONSE_BYTES; ServerUnreachable or MetricsError (one line) otherwise."""
    request = urllib.request.Request(url, headers={"Accept": "text/plain"})
    deadline = _Deadline(timeout_s)
    too_slow = f"cannot reach {url}: timed out: no whole answer within {timeout_s:g} s (--timeout)"
    opener = _opener_for(url, deadline)
    redirects = next(h for h in opener.handlers if isinstance(h, HttpOnlyRedirects))

    def via() -> str:
        return "" if redirects.redirected_to is None else f" (redirected to {short_label(redirects.redirected_to, 120)})"

    try:
        with opener.open(request, timeout=timeout_s) as response:
            length = response.headers.get("Content-Length", "").strip()
            declared = int(length) if length.isascii() and length.isdigit() and len(length) < 20 else 0
            body = b"" if declared > MAX_RESPONSE_BYTES else response.read(MAX_RESPONSE_BYTES + 1)
    except urllib.error.HTTPError as exc:
        if str(exc.reason).startswith(urllib.request.HTTPRedirectHandler.inf_msg):
            raise ServerUnreachable(f"{url} redirected in a loop (HTTP {exc.code}: more than "
                                    f"{urllib.request.HTTPRedirectHandler.max_redirections} redirects, or back to an "
                                    "address already visited); give the address the server answers at") from None
        raise ServerUnreachable(f"{url}{via()} answered HTTP {exc.code} {short_label(exc.reason, 200)}") from None
    except urllib.error.URLError as exc:
        if deadline.expired:
            raise ServerUnreachable(too_slow) from None
        raise ServerUnreachable(f"cannot reach {url}{via()}: {_why_unreachable(exc.reason)}") from None
    except http.client.HTTPException as exc:  # something answered, not in HTTP (a ZMQ port, say)
        if deadline.expired:  # the deadline cut the answer off mid-way (IncompleteRead)
            raise ServerUnreachable(too_slow) from None
        if _tls_record(getattr(exc, "line", "")):  # a TLS alert: http:// given of an HTTPS server
            raise ServerUnreachable(f"{url}{via()} answered in TLS: the server speaks HTTPS there; give its "
                                    f"https:// address") from None
        raise ServerUnreachable(f"{url}{via()} did not answer in HTTP ({type(exc).__name__})") from None
    except (OSError, ValueError) as exc:  # timeouts, resets, a malformed URL
        if deadline.expired:
            raise ServerUnreachable(too_slow) from None
        raise ServerUnreachable(f"cannot reach {url}{via()}: {_why_unreachable(exc)}") from None
    finally:
        deadline.cancel()
    if deadline.expired:  # an answer without a length ends where the deadline cut it: not all of it
        raise ServerUnreachable(too_slow)
    if len(body) < declared <= MAX_RESPONSE_BYTES:
        # read(amt) returns what came before the connection closed, without IncompleteRead: an
        # exposition cut at a line's end parsed as a whole one, its missing series shown as n/a
        raise ServerUnreachable(f"{url}{via()} closed the connection after {len(body):,} of the {declared:,} bytes "
                                "it announced (Content-Length): the answer is cut short")
    if declared > MAX_RESPONSE_BYTES:
        raise MetricsError(f"{url} would send {declared:,} bytes, more than the {MAX_RESPONSE_BYTES // 1024**2} MiB "
                           "kvscope reads")
    if len(body) > MAX_RESPONSE_BYTES:
        raise MetricsError(f"{url} sent more than {MAX_RESPONSE_BYTES // 1024**2} MiB")
    return body.decode("utf-8", errors="replace")


class _Deadline:
    """A limit on a whole request. A socket's timeout bounds each read, so a server that sends a
    byte every half second never times out; at the deadline this shuts the request's sockets down,
    which ends whatever read waits on them, in headers or body alike."""

    def __init__(self, seconds: float):
        self._shut_down = False
        self._ends_at = time.monotonic() + seconds
        self._sockets: list = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def watch(self, sock) -> None:
        with self._lock:
            self._sockets.append(sock)
            expired = self._shut_down
        if expired:
            _shut(sock)

    def cancel(self) -> None:
        self._timer.cancel()

    def left_s(self) -> float:
        return self._ends_at - time.monotonic()

    @property
    def expired(self) -> bool:
        # by the clock too: a connection given the time left times out a moment before the timer fires
        return self._shut_down or self.left_s() <= 0

    def _expire(self) -> None:
        with self._lock:
            self._shut_down = True
            sockets = list(self._sockets)
        for sock in sockets:
            _shut(sock)


def _shut(sock) -> None:
    try:
        # socket.socket's own shutdown, also for a TLS socket: SSLSocket.shutdown would drop its
        # TLS state under the thread still reading it
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except (OSError, ValueError):  # closed already, or a TLS socket's plain one, detached
        pass


def _watched(connection_class, deadline: _Deadline):
    """An http.client connection class whose sockets the deadline can shut."""

    class Watched(connection_class):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            create = self._create_connection

            def created(address, timeout=None, *rest, **k):
                # A connection begun near the deadline (a redirect's, say) gets the time left, not a
                # whole timeout: it cannot be shut down before it exists.
                left = deadline.left_s()
                if left <= 0:
                    raise TimeoutError("timed out")
                sock = create(address, left if timeout is None else min(timeout, left), *rest, **k)
                deadline.watch(sock)  # http's whole answer, and a proxy tunnel's, are read from it
                return sock

            self._create_connection = created

        def connect(self):
            super().connect()
            # for https, the TLS socket that replaced it (Python bounds the handshake by the
            # timeout itself, but each read of the answer only)
            deadline.watch(self.sock)

    return Watched


class _DeadlineHTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, deadline: _Deadline):
        super().__init__()
        self._deadline = deadline

    def http_open(self, req):
        return self.do_open(_watched(http.client.HTTPConnection, self._deadline), req)


class _DeadlineHTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, deadline: _Deadline):
        super().__init__()
        self._deadline = deadline

    def https_open(self, req):
        return self.do_open(_watched(http.client.HTTPSConnection, self._deadline), req, context=self._context)


def _opener_for(url: str, deadline: _Deadline) -> urllib.request.OpenerDirector:
    handlers = [_DeadlineHTTPHandler(deadline), _DeadlineHTTPSHandler(deadline), HttpOnlyRedirects()]
    # A proxy set for the outside world must not swallow a server on this machine.
    host = urllib.parse.urlsplit(url).hostname or ""
    if host in ("localhost", "127.0.0.1", "::1") or host.startswith("127."):
        handlers.append(urllib.request.ProxyHandler({}))
    return urllib.request.build_opener(*handlers)
