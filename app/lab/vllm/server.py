"""A vLLM server as kvscope attaches to it: its HTTP side (/version, /metrics, /v1/models) and the
one check its KV event side allows before any event has arrived.

Every failure is one ConfigError sentence naming the address: the server is unreachable, answered
an HTTP error, serves an exposition without vLLM metrics or without the cache configuration, or an
event endpoint is not a vLLM publisher. vLLM publishes events only while it runs requests, so a
silent PUB port proves nothing; its replay socket (a ROUTER) answers at once, even when idle, so
when one is given it is asked for a batch beyond any seq and must answer with the end marker.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import zmq

from kvscope.app.lab.bounded_reads import is_one_line, load_json
from kvscope.app.lab.vllm.events import END_OF_REPLAY_SEQ, KvEventDecodeError, decode_seq
from kvscope.app.lab.vllm.metrics import (
    DEFAULT_TIMEOUT_S,
    MAX_MODEL_NAME_CHARS,
    MAX_MODEL_NAMES,
    MetricsError,
    ServerMetrics,
    ServerUnreachable,
    fetch_metrics,
    fetch_text,
    fetch_version,
    is_ascii_whole,
    server_url,
)
from kvscope.app.lab.vllm.endpoints import dial_options, dialable
from kvscope.app.lab.vllm.subscriber import MAX_MESSAGE_BYTES, read_message
from kvscope.engine.checks import MAX_BLOCK_SIZE, MAX_NUM_BLOCKS
from kvscope.engine.config import ConfigError

REPLAY_PROBE_SEQ = 1 << 62  # beyond any batch a server has sent: its replay answers only the end marker

__all__ = ["MetricsError", "NotAPublisher", "ServerInfo", "ServerUnreachable", "check_replay_endpoint",
           "probe_server", "served_models"]


class NotAPublisher(ConfigError):
    """An endpoint that does not speak vLLM's KV event protocol; the message names it."""


@dataclass(frozen=True)
class ServerInfo:
    """What kvscope reads of a server once, when it attaches."""

    url: str  # http://host:port
    version: str
    num_gpu_blocks: int  # per engine (each DP engine has its own pool of this size)
    block_size: int  # tokens per block
    cache_config: dict = field(default_factory=dict)  # vllm:cache_config_info's labels (of the first engine)
    model_names: tuple[str, ...] = ()  # /v1/models ids, else the metrics' model_name labels
    engines: tuple[str, ...] = ("0",)  # the metrics' `engine` labels: one per DP engine


def probe_server(address: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> tuple[ServerInfo, ServerMetrics]:
    """The server's version, cache configuration and served models, and a first scrape of its
    metrics. Raises ServerUnreachable or MetricsError (ConfigErrors) with one line."""
    url = server_url(address)
    version = fetch_version(url, timeout_s)
    metrics = fetch_metrics(url, timeout_s)
    labels = {name: metrics.cache_config_label(name) for name in ("num_gpu_blocks", "block_size")}
    if None in labels.values():
        raise MetricsError(f"{url}/metrics has no vllm:cache_config_info with num_gpu_blocks and block_size; "
                           "kvscope needs them to draw the server's cache (vLLM serves it from 0.9)")
    num_gpu_blocks = _cache_count(url, "num_gpu_blocks", labels["num_gpu_blocks"], MAX_NUM_BLOCKS,
                                  "the most blocks kvscope draws (the engine's pool ceiling)")
    block_size = _cache_count(url, "block_size", labels["block_size"], MAX_BLOCK_SIZE,
                              "the most tokens a block holds in kvscope")
    cache_config = next(iter(metrics.cache_config.values()), {})
    models = served_models(url, timeout_s) or metrics.model_names
    return ServerInfo(url, version, num_gpu_blocks, block_size, dict(cache_config), tuple(models),
                      tuple(metrics.engines) or ("0",)), metrics


def _cache_count(url: str, name: str, text: str, most: int, why: str) -> int:
    """A cache_config_info label that must be a whole number from 1 to `most`; MetricsError otherwise."""
    shown = text if len(text) <= 24 else text[:21] + "..."
    if not is_ascii_whole(text) or int(text) < 1:
        raise MetricsError(f"{url}/metrics: vllm:cache_config_info has {name}={shown!r}, which is not valid; "
                           f"kvscope reads a whole number from 1 to {most:,} (ASCII digits)")
    if int(text) > most:
        raise MetricsError(f"{url}/metrics: vllm:cache_config_info has {name}={shown!r}, more than {most:,}, "
                           f"{why}; kvscope cannot attach to this server")
    return int(text)


def served_models(address: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> tuple[str, ...]:
    """The ids /v1/models lists (the served model names); () when it has none to give. The list only
    names the model, so an answer that is not one (nested 100,000 deep, say) is passed over, as is one
    whose ids are not each one printable line (a newline or ESC would reach the terminal) or that
    lists more models than a server serves (a recording keeps the names)."""
    url = f"{server_url(address)}/v1/models"
    try:
        data = load_json(fetch_text(url, timeout_s), url)
        ids = tuple(entry["id"] for entry in data["data"])
    except (ConfigError, ValueError, KeyError, TypeError):
        return ()
    if len(ids) > MAX_MODEL_NAMES or not all(is_one_line(i, MAX_MODEL_NAME_CHARS) for i in ids):
        return ()
    return tuple(dict.fromkeys(ids))  # an id listed twice is one model: "tiny, tiny" named two


def check_replay_endpoint(endpoint: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
    """Ask a replay socket for the batches from a seq no server reaches: a vLLM publisher answers
    with its end marker alone. Raises NotAPublisher when it does not."""
    context = zmq.Context.instance()
    socket = context.socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    socket.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
    socket.setsockopt(zmq.RCVHWM, 4)  # one reply is read: a replay streaming its buffer is not queued past that
    hint = "is it the server's --kv-events-config replay_endpoint?"
    try:
        dial_options(socket, endpoint)
        socket.connect(dialable(endpoint))
        socket.send_multipart([b"", REPLAY_PROBE_SEQ.to_bytes(8, "big", signed=True)])
        if not socket.poll(int(timeout_s * 1000)):
            raise NotAPublisher(f"replay endpoint {endpoint} gave no answer within {timeout_s:g} s; {hint}")
        # a reply of a million frames is counted, not held (read_message), and for timeout_s at most
        frames = read_message(socket, time.monotonic() + timeout_s, {}, most=4)
    except zmq.ZMQError as exc:
        raise NotAPublisher(f"cannot use replay endpoint {endpoint!r}: {exc}") from None
    finally:
        socket.close(linger=0)
    if frames is None:
        raise NotAPublisher(f"replay endpoint {endpoint} sent a reply of more frames than it could count within "
                            f"{timeout_s:g} s; {hint}")
    if isinstance(frames, int):
        raise NotAPublisher(f"replay endpoint {endpoint} answered {frames:,} frames that are not vLLM's end of "
                            f"replay; {hint}")
    frames = [frame.bytes for frame in frames]
    if frames and frames[0] == b"":
        frames = frames[1:]
    try:
        ended = len(frames) in (2, 3) and decode_seq(frames[-2]) == END_OF_REPLAY_SEQ
    except KvEventDecodeError:
        ended = False
    if not ended:
        raise NotAPublisher(f"replay endpoint {endpoint} answered {len(frames)} frames that are not vLLM's end "
                            f"of replay; {hint}")
