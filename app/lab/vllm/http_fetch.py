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
    (0, 99999, -1, "８０"), or credentials ("user:pass@host") is refused with what to give instead."""
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
    if not parts.hostname or "://" not in address:
        raise ServerUnreachable(f"{address}: no host in the address; give the server's, {example}")
    port = _port_text(parts.netloc)
    if port and not valid_port(port):
        raise ServerUnreachable(f"{address}: {shown_port(port)} is not a valid port; give a whole number from 1 to "
                                f"65535, {example}")
    if any(not ch.isprintable() or ch.isspace() for ch in address):
        raise ServerUnreachable(f"{address!r}: the address holds spaces or control characters; give the server's, "
                                f"{example}")
    if not parts.path.isascii():  # a path prefix in another script goes out percent-encoded, as a browser sends it
        address = urllib.parse.urlunsplit(parts._replace(path=urllib.parse.quote(parts.path, safe="/%")))
    return address.rstrip("/")


def valid_port(text: str) -> bool:
    """A TCP port as written in an address: ASCII digits (not "８０", "²"), 1 to 65535."""
    return text.isascii() and text.isdigit() and 1 <= int(text) <= MAX_PORT


def shown_port(text: str) -> str:
    """A port as a message quotes it: short, and its non-ASCII digits named as such."""
    quoted = repr(text) if len(text) <= 20 else repr(text[:17] + "...")
    return f"port {quoted}" + ("" if text.isascii() else " (not ASCII digits)")


def _port_text(netloc: str) -> str:
    """What follows the host's ':' in "host:port" or "[v6]:port" ("" when there is none)."""
    host_port = netloc.rpartition("@")[2]
    if host_port.startswith("["):
        return host_port.partition("]")[2].partition(":")[2]
    return host_port.rpartition(":")[2] if ":" in host_port else ""


def _why_unreachable(reason) -> str:
    """An OS error as a person reads it: "connection refused (nothing listens there)", not "[Errno 111] ..."."""
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
