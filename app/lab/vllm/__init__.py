"""Attach to a live vLLM server: its KV cache events (ZMQ + msgpack) and its Prometheus /metrics.

events.py decodes one published message, subscriber.py follows one or more publishers (gaps,
replay, restarts), prefix_cache_map.py turns the events into the server's prefix cache, metrics.py
reads /metrics and /version. Plain Python and numpy: no Qt, no thread of its own.
"""
