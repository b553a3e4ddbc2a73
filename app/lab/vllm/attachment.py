"""One attached vLLM server, followed: its KV events into the prefix-cache map, its /metrics into
series, and what went wrong on the way into log rows. Plain code with no thread: the headless
`kvscope attach` and the window's AttachSession (app/host/attach_session.py) drive it alike with
poll() and scrape().

What it holds:
- the server (ServerInfo), the prefix-cache map (PrefixCacheMap: num_gpu_blocks cells per DP
  engine, stored blocks placed by kvscope), the subscriber's counts;
- one ObservedPoint per scrape (about one a second): the gauges, what the counters counted since
  the previous scrape, latency percentiles of the histogram deltas, the prefix-cache hit rate;
- log rows (kind, text) for stored / removed / cleared events and GAP / REPLAYED / RESTART /
  DECODE_ERROR notices, and a failed scrape;
- predicted beside observed (prediction.py).
"""

from __future__ import annotations

import math
import os
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path

from kvscope.app.lab.vllm.attach_report import QUANTILES, UNAVAILABLE, attach_report, window_metrics
from kvscope.app.lab.vllm.events import AllBlocksCleared, BlockRemoved, BlockStored, UnknownEvent, block_hash_u64
from kvscope.app.lab.vllm.http_fetch import short_label
from kvscope.app.lab.vllm.metrics import (
    DEFAULT_TIMEOUT_S,
    EngineMetrics,
    ServerMetrics,
    counter_delta,
    fetch_metrics,
    is_ascii_whole,
    latency_percentiles,
    prefix_cache_hit_rate,
    restarted_between,
    server_url,
)
from kvscope.app.lab.vllm.observed_point import ObservedPoint, histogram_sums, nan_if_none
from kvscope.app.lab.vllm.prediction import LATENCY_WINDOW_S, LatencyModel, ObservedLoad, PredictedFigure, predict
from kvscope.app.lab.vllm.prefix_cache_map import PrefixCacheMap
from kvscope.app.lab.vllm.server import NotAPublisher, ServerInfo, check_replay_endpoint, probe_server
from kvscope.app.lab.vllm.endpoints import check_host_resolves, check_not_the_http_port, data_parallel_endpoints
from kvscope.app.lab.vllm.subscriber import (
    RECEIVE_QUEUE_MESSAGES,
    REPLAY_POLL_LIMIT_S,
    UNFILLED,
    KvEventSubscriber,
    NoticeKind,
    ReceivedBatch,
    StreamNotice,
)
from kvscope.engine.checks import MAX_NUM_BLOCKS
from kvscope.engine.config import ConfigError

SCRAPE_INTERVAL_S = 1.0
MIN_SCRAPE_S = 0.25  # a scrape is not begun with less time than this left: a loopback one takes milliseconds
# The closing scrape (scrape() once the attach's deadline has passed) may run this far past it, no
# further: enough for a server that answers, never the whole --timeout of one that has gone quiet.
CLOSING_SCRAPE_S = 0.5
# Every DP engine's cells together (about 90 bytes each): what a recording's map may hold
# (attached_reader.MAX_CELLS), so whatever is drawn live can be recorded and read back.
MAX_MAP_CELLS = MAX_NUM_BLOCKS
LOG_ROWS_KEPT = 2_000
MAX_DATA_PARALLEL = 256  # DP ranks followed at most: a recording's header names each one's endpoint
LOG_KINDS = ("stored", "removed", "cleared", "unknown", "gap", "replayed", "restart", "decode_error", "scrape")
EVENT_NAMES = {BlockStored: "BlockStored", BlockRemoved: "BlockRemoved", AllBlocksCleared: "AllBlocksCleared",
               UnknownEvent: "unknown"}
REJECTED_SHOWN = 3  # out-of-range metric samples named in the warning; the rest are counted


@dataclass(frozen=True)
class AttachTarget:
    """Where the server is and how to follow its events (the `kvscope attach` flags)."""

    url: str
    kv_events: str | None = None  # the server's PUB endpoint, dialled
    kv_listen: str | None = None  # an endpoint kvscope binds for servers to dial
    replay: str | None = None  # the server's replay (ROUTER) endpoint
    data_parallel_size: int = 1  # rank r publishes (and replays) on the endpoint's port + r
    topic: str = ""
    model: object | None = None  # a ModelConfig, for the prediction
    hardware: object | None = None  # a HardwareSpec the server runs on, for the prediction
    timeout_s: float = DEFAULT_TIMEOUT_S
    scrape_interval_s: float = SCRAPE_INTERVAL_S


@dataclass
class AttachCounts:
    events: Counter = field(default_factory=Counter)  # by event type name
    blocks_stored: int = 0
    blocks_removed: int = 0
    scrapes: int = 0
    scrape_failures: int = 0
    metric_restarts: int = 0  # counters went down, or series were created anew


def check_addresses(target) -> list:
    """Every address of the target, checked before anything is sent (the window's attach too, before it
    opens): the server's URL, the KV-event and replay endpoints (each DP rank's), the hosts dialed.
    Returns the DP ranks' publisher endpoints; ConfigError (one line) for the first that is wrong."""
    url = server_url(target.url)
    publishers = data_parallel_endpoints(target.kv_events or target.kv_listen, target.replay,
                                         target.data_parallel_size, listen=target.kv_listen is not None)
    check_not_the_http_port(url, publishers)
    for what, dialed in (("KV event endpoint", target.kv_events), ("replay endpoint", target.replay)):
        if dialed:  # ZMQ dials in the background: a name that resolves nowhere was "no KV event yet"
            check_host_resolves(what, dialed)
    return publishers


class Attachment:
    def __init__(self, target: AttachTarget, clock=time.monotonic):
        if not (target.kv_events or target.kv_listen):
            raise ConfigError("give the server's KV event endpoint (--kv-events tcp://HOST:5557) or one to listen "
                              "on (--kv-listen tcp://*:5557)")
        if target.kv_events and target.kv_listen:
            raise ConfigError("--kv-events and --kv-listen exclude each other: dial the server's publisher, or "
                              "let the servers dial kvscope")
        self.target = target
        self._clock = clock
        self.server: ServerInfo | None = None
        self.prefix_map: PrefixCacheMap | None = None
        self.subscriber: KvEventSubscriber | None = None
        self.prediction: list[PredictedFigure] = []
        self.counts = AttachCounts()
        self.points: list[ObservedPoint] = []
        self.log_rows: deque = deque(maxlen=LOG_ROWS_KEPT)  # (kind, text), oldest first
        self.new_rows = 0  # rows added since take_new_rows()
        self.first_metrics: EngineMetrics | None = None
        self.last_metrics: ServerMetrics | None = None
        self.peak_kv_usage = 0.0
        self.peak_running = 0.0
        self.map_changed = False
        self._started = 0.0
        self._next_scrape = 0.0
        self._previous: EngineMetrics | None = None
        self._previous_at = 0.0
        self._now = 0.0  # the clock when the current poll began: rows and scrapes are stamped with it
        self._deadline: float | None = None  # the last poll's (time.monotonic()): the attach's end, if it has one
        self.replay_checked = False
        self.recorder = None  # an AttachRecorder (app/lab/recording/attached_writer.py) while one records
        self._recording_to = None  # (the target, the file written beside it or None, made new) while one records
        self.warnings: dict[str, str] = {}  # what is inconsistent, one line each, by topic ("metrics", "pool")
        self._rejected: dict[str, None] = {}  # the out-of-range metric samples seen, in order
        self.latency = None  # a LatencyModel (prediction.py) once attached
        self._ranks: set[int] | None = None  # the DP ranks given cells, once the first batch is checked
        self._unfilled_said = 0
        self._overflows_said = 0

    # -- opening --------------------------------------------------------------------------------
    def open(self) -> "Attachment":
        """Reach the server, read its cache configuration, subscribe. ConfigError with one line
        (ServerUnreachable, MetricsError, NotAPublisher, SubscriberError) when any part fails."""
        target = self.target
        publishers = check_addresses(target)
        self.server, metrics = probe_server(target.url, target.timeout_s)
        self._refuse_ranks_not_followed()
        for publisher in publishers:
            if publisher.replay_endpoint is not None:
                check_replay_endpoint(publisher.replay_endpoint, target.timeout_s)
                self.replay_checked = True
        self.prefix_map = PrefixCacheMap(self.server.num_gpu_blocks, self.server.block_size)
        self.subscriber = KvEventSubscriber(publishers, topic=target.topic, replay_timeout_s=target.timeout_s,
                                            rank_check=self.rank_refusal, batch_check=self.batch_refusal)
        self.prediction = predict(self.server.cache_config, self.server.version, target.model, target.hardware,
                                  self.server.num_gpu_blocks)
        self.latency = LatencyModel.for_server(self.server, target.model, target.hardware)
        self._started = self._now = self._clock()
        self._take_scrape(metrics, self._started)
        self._next_scrape = self._started + target.scrape_interval_s
        return self

    def _refuse_ranks_not_followed(self) -> None:
        """A server of more DP engines than followed: each rank publishes on the port + its rank, so the
        others' events never came, and the map and counts of rank 0 alone were the server's ("2 engine(s)")."""
        engines, followed = self.engine_ranks(), self.target.data_parallel_size
        if len(engines) > followed:
            what = (f"give --data-parallel-size {len(engines)}" if len(engines) <= MAX_DATA_PARALLEL else
                    f"kvscope follows at most {MAX_DATA_PARALLEL} (a recording names each rank's endpoint)")
            raise ConfigError(f"{self.server.url}/metrics names {len(engines)} DP engines ({_ranks_text(engines)}), "
                              f"and a data-parallel size of {followed} follows the KV events of "
                              f"{_ranks_text(set(range(followed)))} alone (rank r publishes on the endpoint's port + "
                              f"r): {what}")

    def close(self) -> None:
        if self.recorder is not None:
            self.stop_recording()
        if self.subscriber is not None:
            self.subscriber.close()
            self.subscriber = None

    def __enter__(self) -> "Attachment":
        return self.open()

    def __exit__(self, exc_type, exc, traceback) -> None:
        if exc_type is not None and not issubclass(exc_type, KeyboardInterrupt):  # Ctrl+C ends it as --duration would
            # A failed attach replaces no recording the user had; a new file keeps what came before
            # the failure, closed and readable, with why it stops there.
            self.abandon_recording(f"the attach stopped early: {exc_type.__name__}: {str(exc)[:300]}".rstrip(": "))
        self.close()

    @property
    def elapsed_s(self) -> float:
        return self._clock() - self._started

    # -- following ------------------------------------------------------------------------------
    def poll(self, timeout_ms: int = 0, deadline: float | None = None) -> int:
        """Read what the publishers sent (waiting at most timeout_ms for the first), scrape when a
        scrape is due; the number of batches applied. A replay for a gap stops at `deadline`
        (time.monotonic(), the attach's end), and the gap is then counted lost, with a warning."""
        self._deadline = deadline
        records = self.subscriber.poll(timeout_ms, deadline)
        self._now = self._clock()
        self.follow(records)
        self._check_unfilled()
        scraped = self._scrape(_scrape_timeout(self.target.timeout_s, deadline)) \
            if self._now >= self._next_scrape else None
        if self.recorder is not None and (records or scraped is not None):
            self.recorder.record_tick(self, records, scraped)
        return sum(isinstance(record, ReceivedBatch) for record in records)

    def follow(self, records) -> None:
        """Apply what the subscriber delivered (a replay hands over what was recorded)."""
        for record in records:
            if isinstance(record, ReceivedBatch):
                self._apply(record)
            else:
                self._notice(record)

    def scrape(self, deadline: float | None = None) -> ObservedPoint | None:
        """One scrape of /metrics now; a failure is a log row, not an error (the server may be
        restarting). The attach's end (`deadline`, time.monotonic(); by default the last poll's)
        bounds it: a scrape at or after the end has at most CLOSING_SCRAPE_S, not the whole --timeout."""
        self._now = self._clock()
        deadline = self._deadline if deadline is None else deadline
        scraped = self._scrape(_closing_scrape_timeout(self.target.timeout_s, deadline))
        if self.recorder is not None:
            self.recorder.record_tick(self, [], scraped)
        return scraped if isinstance(scraped, ObservedPoint) else None

    def _scrape(self, timeout_s: float | None = None):
        """The scrape's ObservedPoint, or the failure's message; None when no time is left for one."""
        if timeout_s is None:
            timeout_s = self.target.timeout_s
        elif timeout_s <= 0:
            return None  # the poll's deadline is too near: the scrape stays due
        now = self._now
        self._next_scrape = now + self.target.scrape_interval_s
        try:
            metrics = fetch_metrics(self.server.url, timeout_s)
        except ConfigError as exc:
            self.scrape_failed(str(exc))
            return str(exc)
        return self._take_scrape(metrics, now)

    def scrape_failed(self, message: str) -> None:
        self.counts.scrape_failures += 1
        self._row("scrape", f"scrape failed: {message}")

    def _take_scrape(self, metrics: ServerMetrics, now: float) -> ObservedPoint:
        self._note_rejected(metrics)
        total, before = metrics.total, self._previous
        restarted = before is not None and restarted_between(before, total)
        if self.first_metrics is None or restarted:
            self.first_metrics = total
        latency = latency_percentiles(before, total, QUANTILES) if before is not None else {}

        def pct(figure, q):
            return nan_if_none(latency.get(figure, {}).get(q))

        def delta(name):
            return nan_if_none(counter_delta(None if before is None else getattr(before, name), getattr(total, name))
                        if before is not None else 0.0)

        hit_rate = prefix_cache_hit_rate(before, total) if before is not None else None
        point = ObservedPoint(
            time_s=now - self._started, kv_usage=nan_if_none(total.kv_cache_usage),
            num_running=nan_if_none(total.num_requests_running), num_waiting=nan_if_none(total.num_requests_waiting),
            preemptions=delta("num_preemptions_total"), prompt_tokens=delta("prompt_tokens_total"),
            generation_tokens=delta("generation_tokens_total"),
            interval_s=0.0 if before is None else now - self._previous_at, prefix_cache_hit_rate=nan_if_none(hit_rate),
            ttft_p50_s=pct("time_to_first_token", 0.5), ttft_p99_s=pct("time_to_first_token", 0.99),
            itl_p50_s=pct("inter_token_latency", 0.5), itl_p99_s=pct("inter_token_latency", 0.99),
            queue_time_p50_s=pct("queue_time", 0.5), queue_time_p99_s=pct("queue_time", 0.99),
            cached_blocks=self.prefix_map.counts().placed_copies if self.prefix_map is not None else 0,
            **histogram_sums(before, total))
        self._previous, self._previous_at, self.last_metrics = total, now, metrics
        self.add_point(point, restarted)
        return point

    def _note_rejected(self, metrics: ServerMetrics) -> None:
        """Out-of-range samples (NaN, +Inf, a negative count, a usage past 1) were left out of the
        scrape: a log row for each new one, and one warning line naming them."""
        new = [sample for sample in metrics.rejected if sample not in self._rejected]
        if not new:
            return
        for sample in new:
            self._rejected[sample] = None
            self._row("scrape", f"ignored a /metrics sample: {sample}")
        seen = list(self._rejected)
        more = f" and {len(seen) - REJECTED_SHOWN} more" if len(seen) > REJECTED_SHOWN else ""
        repeats = ", or given again (the first kept)" if any("given again" in sample for sample in seen) else ""
        self.warnings["metrics"] = (f"{self.server.url}/metrics served {len(seen)} value(s) out of range, ignored "
                                    f"(shown as n/a){repeats}: {'; '.join(seen[:REJECTED_SHOWN])}{more}")

    def _check_pool(self) -> None:
        """Blocks stored beyond the server's pool: the events do not fit its num_gpu_blocks (a log
        row the first time, and a warning line that says how many)."""
        unplaced = self.prefix_map.num_unplaced
        if not unplaced:
            return
        first = "pool" not in self.warnings
        forgotten = self.prefix_map.forgotten
        self.warnings["pool"] = (f"the KV events hold more distinct blocks than the server's num_gpu_blocks "
                                 f"({self.server.num_gpu_blocks:,} per engine): they are inconsistent with the "
                                 f"server (batches lost, or events from another server); {unplaced:,} block(s) "
                                 "beyond the pool are not drawn" +
                                 (f", and {forgotten:,} more, the oldest, were forgotten (kvscope keeps a pool's "
                                  "worth waiting)" if forgotten else ""))
        if first:
            self._row("gap", self.warnings["pool"])

    def _check_unfilled(self) -> None:
        subscriber = self.subscriber
        unfilled = subscriber.unfilled_gaps
        if unfilled > self._unfilled_said:
            self._unfilled_said = unfilled
            why = ("the attach ended while the replay socket was still answering"
                   if subscriber.unfilled_reason == UNFILLED else
                   f"the replay socket took more than the {REPLAY_POLL_LIMIT_S:g} s kvscope waits for it")
            self.warnings["replay"] = (f"{unfilled:,} gap(s) in the KV events were not filled: {why}; their batches "
                                       "are counted as lost and the map may hold stale blocks")
        if subscriber.overflow_gaps > self._overflows_said:
            self._overflows_said = subscriber.overflow_gaps
            self.warnings["queue"] = (f"kvscope fell behind the KV events: {subscriber.overflow_batches:,} batch(es) "
                                      f"in {subscriber.overflow_gaps:,} gap(s) went missing while it was "
                                      f"{RECEIVE_QUEUE_MESSAGES:,} messages behind, the most its queue holds; they "
                                      "were asked of the replay socket, and are counted as lost where it had none")
            self._row("gap", self.warnings["queue"])

    def rank_refusal(self, rank: int | None) -> str | None:
        """Why batches of this DP rank are not drawn, or None when they are. A rank gets
        num_gpu_blocks cells of its own, so only the server's engines (its metrics' `engine`
        labels, and the --data-parallel-size followed) get them, within MAX_MAP_CELLS in all."""
        rank = rank or 0  # None: a server before vLLM 0.10.2, one engine
        if self._ranks is None:
            self._ranks = set(self.prefix_map.ranks)
        if rank in self._ranks:
            return None
        engines = self.engine_ranks()
        if rank not in engines:
            return (f"data_parallel_rank {_short_int(rank)} is not one of the server's DP engines "
                    f"({_ranks_text(engines)}): skipped")
        if (len(self._ranks) + 1) * self.server.num_gpu_blocks > MAX_MAP_CELLS:
            return (f"DP rank {rank}: the map draws at most {MAX_MAP_CELLS:,} cells, "
                    f"{len(self._ranks)} engine(s) of {self.server.num_gpu_blocks:,} blocks: skipped")
        self._ranks.add(rank)
        return None

    def batch_refusal(self, batch) -> str | None:
        """Why a batch is not applied though its rank is: it stores more blocks than the server's pool
        holds, which one engine step cannot (a 5 MB message of a million made-up hashes took seconds
        to place, each of them to be forgotten)."""
        stored = sum(len(event.block_hashes) for event in batch.events if isinstance(event, BlockStored))
        if stored <= self.server.num_gpu_blocks:
            return None
        return (f"a batch storing {stored:,} blocks, more than the server's pool of {self.server.num_gpu_blocks:,} "
                "(one engine step stores at most that many): skipped")

    def engine_ranks(self) -> set[int]:
        """The DP ranks the server has: its metrics' engine labels, and those followed."""
        # the length first: int() refuses more than 4,300 digits, and no DP rank has ten
        labelled = {int(e) for e in self.server.engines if len(e) <= 9 and is_ascii_whole(e)}
        return labelled | set(range(self.target.data_parallel_size))

    def add_point(self, point: ObservedPoint, restarted: bool = False) -> None:
        """A scrape taken (live: just now; a replay: as recorded)."""
        self.counts.scrapes += 1
        if restarted:
            self.counts.metric_restarts += 1
            self._row("restart", "the server's metrics started again (a counter went down or its series were "
                                 "created anew): the server restarted")
        self.points.append(point)
        self.peak_kv_usage = max(self.peak_kv_usage, 0.0 if math.isnan(point.kv_usage) else point.kv_usage)
        self.peak_running = max(self.peak_running, 0.0 if math.isnan(point.num_running) else point.num_running)

    def _apply(self, record: ReceivedBatch) -> None:
        batch = record.batch
        refused = self.rank_refusal(batch.data_parallel_rank) or self.batch_refusal(batch)
        if refused:  # live, the subscriber skipped it already; a recording may hold any
            self._row("decode_error", f"seq {record.seq}: {refused}")
            return
        self.prefix_map.apply(batch)
        self.map_changed = True
        rank = batch.data_parallel_rank or 0
        where = f"seq {record.seq}" + (f" DP {rank}" if self.target.data_parallel_size > 1 or rank else "") + \
            (" (replayed)" if record.replayed else "")
        for event in batch.events:
            name = EVENT_NAMES[type(event)]
            self.counts.events[name] += 1
            if isinstance(event, BlockStored):
                self.counts.blocks_stored += len(event.block_hashes)
                parent = "a new chain" if event.parent_block_hash is None else \
                    f"after {block_hash_u64(event.parent_block_hash):016x}"
                self._row("stored", f"{where}: {len(event.block_hashes)} block(s) stored, {parent}: "
                                    f"{_hashes(event.block_hashes)}")
            elif isinstance(event, BlockRemoved):
                self.counts.blocks_removed += len(event.block_hashes)
                self._row("removed", f"{where}: {len(event.block_hashes)} block(s) evicted: "
                                     f"{_hashes(event.block_hashes)}")
            elif isinstance(event, AllBlocksCleared):
                self._row("cleared", f"{where}: the prefix cache was reset (all blocks cleared)")
            else:
                self._row("unknown", f"{where}: an event of type {event.type_name!r} this kvscope does not know")
        self._check_pool()

    def _notice(self, notice: StreamNotice) -> None:
        if notice.kind is NoticeKind.RESTART and notice.stream is not None:
            self.prefix_map.reset(notice.stream.data_parallel_rank or 0)
            self.map_changed = True
        self._row(notice.kind.value, notice.message)

    def _row(self, kind: str, text: str) -> None:
        self.log_rows.append((kind, f"{self._now - self._started:9.3f} s  {text}"))
        self.new_rows += 1

    def take_new_rows(self) -> list[tuple[str, str]]:
        """The log rows added since the last call (at most the LOG_ROWS_KEPT newest)."""
        count, self.new_rows = min(self.new_rows, len(self.log_rows)), 0
        return list(self.log_rows)[len(self.log_rows) - count:]

    # -- recording ------------------------------------------------------------------------------
    def start_recording(self, path) -> None:
        """Record from now to path (.kvrec) until stop_recording(); RecordingError if it cannot be
        written. An existing file is written beside and replaced only by stop_recording(), never by
        discard_recording(); a new one is written in place (a recorder that is killed leaves it
        readable) and removed by discard_recording()."""
        from kvscope.app.lab.output_path import partial_path, replaces_in_place
        from kvscope.app.lab.recording.attached_writer import AttachRecorder
        from kvscope.app.lab.recording.format import RecordingError

        self.stop_recording()
        target = Path(path)
        beside, created = None, not os.path.lexists(target)  # a dangling symlink is not made here
        if not created and replaces_in_place(target):
            try:
                beside = partial_path(target)
            except OSError as exc:
                raise RecordingError(f"cannot write the recording {target}: {exc.strerror or exc}") from None
        try:
            self.recorder = AttachRecorder(beside or target, self)
        except BaseException:
            if beside is not None:
                beside.unlink(missing_ok=True)
            raise
        self._recording_to = (target, beside, created)

    def stop_recording(self, note: str | None = None):
        """Finish the recording, if one runs (replacing the file it was asked to write); returns the
        recorder (its path, size and ticks)."""
        from kvscope.app.lab.output_path import commit_partial
        from kvscope.app.lab.recording.format import RecordingError

        recorder, self.recorder = self.recorder, None
        if recorder is None:
            return None
        target, beside, _ = self._recording_to
        self._recording_to = None
        try:
            recorder.close(self.report(), note)
            if beside is not None:
                commit_partial(beside, target)
        except OSError as exc:
            raise RecordingError(f"cannot write the recording {target}: {exc.strerror or exc}") from None
        finally:
            if beside is not None:
                beside.unlink(missing_ok=True)  # gone once committed
        recorder.path = target
        return recorder

    def abandon_recording(self, note: str) -> None:
        """End a recording the attach could not finish: an existing file stays as it was, a new one
        keeps what was recorded (closed, with the note), as `kvscope run --record` does."""
        if self.recorder is None:
            return
        if self._recording_to[1] is not None:  # written beside an existing file
            self.discard_recording()
            return
        try:
            self.stop_recording(note)
        except Exception:  # noqa: BLE001 - the failure that ended the attach is the one to say, not this
            pass

    def discard_recording(self) -> None:
        """End the recording with nothing kept: an existing file stays as it was, a new one is removed
        (the attach was refused: an empty recording of it would be kept as if it were one)."""
        recorder, self.recorder = self.recorder, None
        if recorder is None:
            return
        target, beside, created = self._recording_to
        self._recording_to = None
        try:
            recorder.close(None, "discarded")
        except (OSError, ConfigError):
            pass  # nothing of it is kept
        if beside is not None or created:  # never a device or a pipe it wrote to, nor a file it did not make
            (beside or target).unlink(missing_ok=True)

    # -- reading --------------------------------------------------------------------------------
    def latency_prediction(self, window_s: float = LATENCY_WINDOW_S) -> list[PredictedFigure]:
        """Predicted beside observed latencies for the load of the last window_s seconds."""
        load = ObservedLoad.of_points(self.points, len(self.server.engines), self.server.num_gpu_blocks,
                                      self.server.block_size, window_s)
        return self.latency.predict(load) if self.latency is not None else []

    @property
    def no_events_reason(self) -> str | None:
        """Why the map may be empty: set while nothing decodable has arrived."""
        if self.subscriber is None or self.subscriber.counts.batches:
            return None
        endpoint = self.target.kv_events or self.target.kv_listen
        counts, refused = self.subscriber.counts, getattr(self.subscriber, "refused", 0)  # a recording's: none
        first = getattr(self.subscriber, "first_error", "").replace(f" from {endpoint}", "").removesuffix(": skipped")
        first = f" (the first, {first})" if first else ""
        if refused and refused == counts.decode_errors:
            # each read whole: "could not be decoded ... not a vLLM KV event publisher" named the wrong cause
            return (f"{refused} batch(es) from {endpoint} were read, and none could come from {self.server.url}"
                    f"{first}: it is another server's publisher; give the --kv-events-config endpoint of this one")
        if counts.decode_errors:
            return (f"{counts.decode_errors} message(s) from {endpoint} could not be decoded and none could{first}: "
                    "it is not a vLLM KV event publisher")
        topic = self.target.topic
        # a topic the server does not send under filters every message out: the same silence, another cause
        filtered = (f", or the server's topic does not begin with {short_label(topic)!r} (--topic: drop it to read "
                    "every topic, or give its kv-events-config topic)") if topic else ""
        return (f"no KV event from {endpoint} yet: vLLM publishes only while it runs requests; if requests run, "
                f"it is not the server's publisher (--kv-events-config endpoint){filtered}")

    def window_metrics(self) -> dict:
        return window_metrics(self)

    def report(self) -> dict:
        """What `kvscope attach --json` writes."""
        return attach_report(self)


def attach_info(attachment: Attachment) -> dict:
    """What a window shows of the server once attached (and a recording's header keeps)."""
    server = attachment.server
    return {"url": server.url, "version": server.version, "model_names": list(server.model_names),
            "num_gpu_blocks": server.num_gpu_blocks, "block_size": server.block_size,
            "engines": list(server.engines), "sources": attachment.subscriber.sources,
            "replay": attachment.target.replay, "cache_config": dict(server.cache_config),
            "prediction": [figure.as_dict() for figure in attachment.prediction], "unavailable": dict(UNAVAILABLE)}


def _scrape_timeout(timeout_s: float, deadline: float | None) -> float:
    """A scrape's timeout within a poll that ends at `deadline` (time.monotonic()): a slow /metrics
    must not hold the attach past its end. 0 (no scrape now) when less than MIN_SCRAPE_S is left."""
    if deadline is None:
        return timeout_s
    left = deadline - time.monotonic()
    return min(timeout_s, left) if left >= min(MIN_SCRAPE_S, timeout_s) else 0.0


def _closing_scrape_timeout(timeout_s: float, deadline: float | None) -> float:
    """A scrape's timeout when the attach ends at `deadline`, or has just ended: the time left, and
    at most CLOSING_SCRAPE_S past the end (a server gone quiet held the summary the whole --timeout)."""
    if deadline is None:
        return timeout_s
    return min(timeout_s, max(deadline - time.monotonic(), 0.0) + CLOSING_SCRAPE_S)


def _short_int(value: int) -> str:
    text = str(value)
    return text if len(text) <= 24 else f"{text[:10]}...{text[-6:]} ({len(text)} digits)"


def _ranks_text(ranks: set[int]) -> str:
    ordered = sorted(ranks)
    if ordered == list(range(len(ordered))):
        return "rank 0" if len(ordered) == 1 else f"ranks 0-{len(ordered) - 1}"
    shown = ", ".join(map(str, ordered[:8]))
    return f"ranks {shown}" + (f" and {len(ordered) - 8} more" if len(ordered) > 8 else "")


def _hashes(hashes) -> str:
    shown = ", ".join(f"{block_hash_u64(h):016x}" for h in hashes[:3])
    return shown + (f" ... ({len(hashes)} hashes)" if len(hashes) > 3 else "")


def publisher_error(attachment: Attachment) -> NotAPublisher | None:
    """After following for a while: the endpoint is not a publisher when it sent only what cannot be
    decoded, or sent nothing and had no replay socket to vouch for it."""
    reason = attachment.no_events_reason
    if reason is None or (attachment.replay_checked and not attachment.subscriber.counts.decode_errors):
        return None
    return NotAPublisher(reason)
