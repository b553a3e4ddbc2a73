"""KV-event endpoints as kvscope hands them to ZMQ: each checked before anything is sent (a transport,
a host and a port, an ipc:// path that is no file), one a DP rank, and a failed bind said with
what to give. ZMQ itself said "Protocol not supported" or "Invalid argument", or dialed for ever."""

from __future__ import annotations

import errno
from dataclasses import dataclass

import zmq

from kvscope.app.lab.vllm.http_fetch import MAX_PORT, shown_port, valid_port
from kvscope.engine.config import ConfigError


class SubscriberError(ConfigError):
    """An endpoint that cannot be used (bad address, port taken); the message names it."""


@dataclass(frozen=True)
class PublisherEndpoint:
    endpoint: str  # "tcp://host:5557"; with listen, the address to bind ("tcp://*:5557")
    replay_endpoint: str | None = None  # the server's replay (ROUTER) socket, "tcp://host:5558"
    listen: bool = False


def data_parallel_endpoints(endpoint: str, replay_endpoint: str | None = None, data_parallel_size: int = 1,
                            listen: bool = False) -> list[PublisherEndpoint]:
    """One endpoint per DP engine: vLLM's rank r publishes on the endpoint's port + r (replay too).
    SubscriberError when a tcp:// endpoint's port is not one (0, 99999, -1, "５５５７"), or a rank's
    would pass 65535."""
    check_endpoint("KV event endpoint", endpoint, listen)
    if replay_endpoint is not None:
        check_endpoint("replay endpoint", replay_endpoint)
    publishers = [PublisherEndpoint(offset_port(endpoint, rank, "KV event endpoint"),
                                    None if replay_endpoint is None else
                                    offset_port(replay_endpoint, rank, "replay endpoint"), listen)
                  for rank in range(data_parallel_size)]
    for publisher in publishers[1:]:  # DP rank r's socket file is the path + "_dp{r}": bound (or dialed) too
        if publisher.endpoint.startswith("ipc://"):
            _check_ipc_path("KV event endpoint", publisher.endpoint, publisher.endpoint[len("ipc://"):], listen)
    return publishers


def check_endpoint(what: str, endpoint: str, listen: bool = False) -> None:
    """An endpoint ZMQ can use as kvscope uses it, said before anything is sent: tcp://HOST:PORT with a
    port from 1 to 65535 ("*" too, to bind any), ipc://PATH, inproc://NAME. ZMQ itself said "Protocol
    not supported" to http:// (the server's URL given again), TCP:// and " tcp://", "Invalid argument"
    to "127.0.0.1:5557", "ipc://" and "user@host", and took "localhost:5557;host:5558" (a source address
    to dial from) or a name that resolves nowhere, then said "no KV event yet ... not the server's
    publisher"; binding ipc:// on a file replaced the file with a socket."""
    example = "tcp://*:5557" if listen else "tcp://127.0.0.1:5557"
    if not endpoint:
        raise SubscriberError(f"{what} is empty; give tcp://HOST:PORT, e.g. {example}")
    if any(not ch.isprintable() or ch.isspace() for ch in endpoint):
        raise SubscriberError(f"{what} {endpoint!r} holds spaces or control characters; give it without them, "
                              f"e.g. {example}")
    scheme, sep, address = endpoint.partition("://")
    if not sep:
        port = endpoint.rpartition(":")[2]
        give = f"tcp://{endpoint}" if ":" in endpoint and valid_port(port) else f"tcp://HOST:PORT, e.g. {example},"
        raise SubscriberError(f"{what} {endpoint!r} names no transport; give {give} or ipc://PATH")
    if scheme.lower() in ZMQ_TRANSPORTS and scheme not in ZMQ_TRANSPORTS:
        raise SubscriberError(f"{what} {endpoint!r}: ZMQ reads the transport in lower case only; give "
                              f"{scheme.lower()}://{address}")
    if scheme not in ZMQ_TRANSPORTS:
        url = " (the server's HTTP address is the URL, attach's first argument)" if scheme.lower() in (
            "http", "https") else ""
        raise SubscriberError(f"{what} {endpoint!r}: {scheme[:20]}:// is not a transport of vLLM's ZMQ publisher"
                              f"{url}; give tcp://HOST:PORT (e.g. {example}) or ipc://PATH")
    if scheme != "tcp":
        if not address:
            raise SubscriberError(f"{what} {endpoint!r} names no path; give {scheme}://PATH, e.g. ipc:///tmp/kv-events")
        if scheme == "ipc":
            _check_ipc_path(what, endpoint, address, listen)
        return
    if "@" in address:
        raise SubscriberError(f"{what} tcp://...@{address.rpartition('@')[2]}: ZMQ takes no user or password "
                              f"(user@); give HOST:PORT alone, e.g. {example}")
    if ";" in address:
        raise SubscriberError(f"{what} {endpoint!r}: ZMQ reads the part before ';' as a source address to dial from, "
                              f"not a second endpoint; give one HOST:PORT, e.g. {example}")
    host, colon, port = address.rpartition(":")
    if not colon or address.endswith("]"):  # "tcp://host", "tcp://[::1]"
        raise SubscriberError(f"{what} {endpoint!r} has no port; give HOST:PORT, e.g. {example}")
    if not host:  # "tcp://:5557" (was said as having no port)
        raise SubscriberError(f"{what} {endpoint!r} has no host; give HOST:PORT, e.g. {example}")
    if ":" in host and not (host.startswith("[") and host.endswith("]")):  # "::1:5557": which colon?
        raise SubscriberError(f"{what} {endpoint!r}: an IPv6 host is written in brackets, e.g. tcp://[::1]:5557")
    if listen and port == "*":
        return
    if not valid_port(port):
        raise SubscriberError(f"{what} {endpoint!r}: {shown_port(port)} is not a valid port; give a whole number "
                              f"from 1 to {MAX_PORT}, e.g. {example}")


ZMQ_TRANSPORTS = ("tcp", "ipc", "inproc")
IPC_PATH_MAX = 107  # sizeof(sockaddr_un.sun_path) - 1 on Linux


def _check_ipc_path(what: str, endpoint: str, path: str, listen: bool) -> None:
    """An ipc:// path as a socket file: binding unlinks what is there first (libzmq does), so a file or
    a folder there is refused, not replaced; a path in no folder, or past the socket address's length,
    is said as such. "@name" is Linux's abstract namespace: no file."""
    import os
    import stat

    if path.startswith("@"):
        return
    if len(path.encode("utf-8", "replace")) > IPC_PATH_MAX:
        raise SubscriberError(f"{what} {endpoint[:60]!r}...: an ipc:// path is at most {IPC_PATH_MAX} bytes (a Unix "
                              f"socket's address); give a shorter one, e.g. ipc:///tmp/kv-events")
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        folder = os.path.dirname(path) or "."
        if listen and not os.path.isdir(folder):
            raise SubscriberError(f"{what} {endpoint!r}: no folder {folder} to make the socket in; give a path in "
                                  "an existing folder, e.g. ipc:///tmp/kv-events") from None
        return
    except OSError as exc:
        raise SubscriberError(f"{what} {endpoint!r}: {exc.strerror or exc}; give another path, e.g. "
                              "ipc:///tmp/kv-events") from None
    if stat.S_ISSOCK(mode):
        return
    kind = "a folder" if stat.S_ISDIR(mode) else "a file, not a socket"
    if listen:
        raise SubscriberError(f"{what} {endpoint!r}: {path} is {kind}, and binding there would delete it to make "
                              "the socket; give a path where nothing is, e.g. ipc:///tmp/kv-events")
    raise SubscriberError(f"{what} {endpoint!r}: {path} is {kind}, so no publisher listens there; give the path "
                          "the server binds (its --kv-events-config endpoint)")


def check_host_resolves(what: str, endpoint: str) -> None:
    """A tcp:// host to dial is a name that resolves: ZMQ dials in the background and retries for ever,
    so "tcp://no-such-host:5557" was said as "no KV event yet ... not the server's publisher"."""
    import socket

    if not endpoint.startswith("tcp://"):
        return
    host, _, port = dialable(endpoint)[len("tcp://"):].rpartition(":")
    host = host[1:-1] if host.startswith("[") else host
    try:
        socket.getaddrinfo(host, int(port) if port.isdigit() else None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError, ValueError):
        raise SubscriberError(f"{what} {endpoint!r}: no such host ({host[:80]!r} does not resolve); give the "
                              "server's host name or address, e.g. tcp://127.0.0.1:5557") from None


def check_not_the_http_port(url: str, publishers: list) -> None:
    """No endpoint dialed is the server's HTTP port (url: server_url's http://HOST:PORT): `attach
    http://h:8000 --kv-events tcp://h:8000` (--replay there, or DP rank r's port + r) followed the HTTP
    socket in silence, then said "not the server's publisher" (a replay "gave no answer")."""
    from urllib.parse import urlsplit

    def place(address: str) -> tuple[str, int | None]:
        parts = urlsplit(dialable(address))
        host = (parts.hostname or "").lower()
        return ("127.0.0.1" if host in ("localhost", "::1") else host), parts.port or {"http": 80, "https": 443}.get(
            parts.scheme.lower())

    http = place(url)
    for rank, publisher in enumerate(publishers):
        dialed = (() if publisher.listen else (("KV event endpoint", publisher.endpoint),)) + (
            (("replay endpoint", publisher.replay_endpoint),) if publisher.replay_endpoint else ())
        for what, endpoint in dialed:
            if endpoint.startswith("tcp://") and place(endpoint) == http:
                raise SubscriberError(f"{what} {endpoint}{f' (DP rank {rank}: the port + {rank})' if rank else ''}: "
                                      f"port {http[1]} is the server's HTTP port ({url}), where no ZMQ socket can be; "
                                      "give the server's --kv-events-config " + (
                                          "endpoint (vLLM's default port 5557)" if what.startswith("KV") else
                                          "replay_endpoint"))


def dial_options(socket: zmq.Socket, endpoint: str) -> None:
    """ZMQ sockets speak IPv4 only unless told: "tcp://[::1]:5557" was dialed for ever, never reached."""
    if endpoint.startswith("tcp://["):
        socket.setsockopt(zmq.IPV6, 1)


def dialable(endpoint: str) -> str:
    """vLLM's config names its own bind address ("tcp://*:5557"); from this machine that is localhost."""
    return endpoint.replace("://*:", "://127.0.0.1:").replace("://[::]:", "://127.0.0.1:")


# Why a bind failed, said with what to give (ZMQ's own words: "No such device", "Cannot assign requested address")
BIND_ERRORS = {
    errno.ENODEV: "its host is no interface of this machine (a bind takes *, an IP address of this machine or an "
                  "interface name such as eth0, not a host name); give tcp://*:PORT",
    errno.EADDRNOTAVAIL: "its host is no address of this machine; give tcp://*:PORT, or one of this machine's "
                         "addresses",
    errno.EADDRINUSE: "the port is in use by another program here (the server, if it runs here, binds its own "
                      "endpoint); give a free port",
    errno.EACCES: "this user may not bind there (ports under 1024 need privileges); give a port from 1024 up",
}


def offset_port(endpoint: str, offset: int, what: str = "KV event endpoint") -> str:
    if offset == 0:
        return endpoint
    if endpoint.startswith(("inproc://", "ipc://")):
        return f"{endpoint}_dp{offset}"
    base, _, port = endpoint.rpartition(":")
    if not valid_port(port):
        raise SubscriberError(f"{what} {endpoint!r} has no port to offset by the DP rank (rank r uses the port + r); "
                              "give one, e.g. tcp://*:5557, or leave --data-parallel-size out")
    if int(port) + offset > MAX_PORT:
        raise SubscriberError(f"{what} {endpoint!r}: DP rank {offset} would use port {int(port) + offset}, past "
                              f"{MAX_PORT}; give a lower port or a smaller --data-parallel-size")
    return f"{base}:{int(port) + offset}"
