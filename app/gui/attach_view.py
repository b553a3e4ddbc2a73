"""The window's page for an attached vLLM server: its prefix-cache map, its KV cache as blocks in
use (the usage metric) beside blocks cached (the events), its metrics plotted, the event log,
predicted beside observed, and what the server does not publish with the reason.

The server is followed by an AttachSession in a process of its own (app/host/attach_session.py),
through the same SessionHost as the live engine; this page asks for its frames on a timer. The
live run's docks (its plots, requests and events) are hidden while the page shows and its settings
are disabled, with a tooltip saying why: they configure kvscope's engine, not the server.

A recording of a server (`kvscope attach --record`, File > Record the run on this page) opens the
same page fed by an AttachReplaySession (app/host/attach_replay.py), with a scrubber to seek.
"""

from __future__ import annotations

import html
import math
import os

import numpy as np
from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QLabel, QSplitter, QTabWidget, QTextBrowser, QVBoxLayout, QWidget

from kvscope.app.host.attach_replay import AttachReplaySession
from kvscope.app.host.attach_session import RECORDING_REFUSED, AttachSession
from kvscope.app.host.process_host import SessionHost
from kvscope.app.lab.bounded_reads import escaped
from kvscope.app.lab.said_paths import LONGEST_SAID, said_path, said_short
from kvscope.app.lab.vllm.attachment import LOG_KINDS
from kvscope.engine.units import format_percent, format_seconds
from kvscope.widgets.attach_plots import AttachPlots
from kvscope.widgets.event_log import EventLog
from kvscope.widgets.kv_blocks_bar import BlockSegment, KvBlocksBar
from kvscope.widgets.palette import hex_color
from kvscope.widgets.prefix_cache_map_view import PrefixCacheMapView
from kvscope.widgets.replay_scrubber import ReplayScrubber

TAB_CHARS = 60  # a page's tab, beside the Live run and Compare tabs
FRAME_INTERVAL_MS = 50  # the server is scraped once a second; events come in bursts
SERIES_KEYS = ("kv_usage", "num_running", "num_waiting", "preemptions", "prefix_cache_hit_rate", "ttft_p50_s",
               "ttft_p99_s", "itl_p50_s", "itl_p99_s", "queue_time_p50_s", "queue_time_p99_s")
SETTINGS_TOOLTIP = ("attached to a vLLM server: these settings configure kvscope's own engine (the Live run tab), "
                    "not the server, whose configuration is on the 'Predicted vs observed' tab")


class AttachView(QWidget):
    def __init__(self, target, theme, parent=None, recording=None):
        """target: an AttachTarget to follow, or None with recording (an AttachedRecording, read and
        checked already) to replay."""
        super().__init__(parent)
        self.target = target
        self.recording = recording
        self.latency: list = []  # the newest latency rows, predicted beside observed
        self.recording_ticks: int | None = None
        self.theme = theme
        self.info: dict | None = None
        self.counts: dict = {}
        self.errors: list[str] = []
        self.frames = 0
        self.failed = False  # the attach was refused, or its process died: the page follows nothing
        self.failure = ""  # ... and why
        # called with the reason when a recording of the page stops or never starts (the window
        # unchecks File > Record: it stayed checked over a page that recorded nothing)
        self.recording_ended = lambda reason: None
        self.recording_to: str | None = None  # the file File > Record writes the server to
        self.latest_snapshot = None
        self.usage_served: bool | None = True  # whether the newest scrape served the KV usage (None: none yet)
        self._series: dict[str, list] = {key: [] for key in ("time_s", *SERIES_KEYS, "prompt_tokens_per_s",
                                                               "generation_tokens_per_s")}

        self.blocks_bar = KvBlocksBar(theme=theme)
        self.block_map = PrefixCacheMapView(theme=theme)
        self.plots = AttachPlots(theme=theme)
        self.event_log = EventLog(kinds=LOG_KINDS)
        self.details = QTextBrowser()
        self.details.setOpenLinks(False)
        self.status = QLabel("attaching ...")
        self.status.setWordWrap(True)
        self.status.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.tabs = QTabWidget()
        self.tabs.addTab(self.event_log, "Event log")
        self.tabs.addTab(self.details, "Predicted vs observed")

        left = QSplitter(Qt.Vertical)
        left.addWidget(self.block_map)
        left.addWidget(self.tabs)
        left.setStretchFactor(0, 3)
        left.setStretchFactor(1, 2)
        split = QSplitter(Qt.Horizontal)
        split.addWidget(left)
        split.addWidget(self.plots)
        split.setStretchFactor(0, 3)
        split.setStretchFactor(1, 2)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.blocks_bar)
        layout.addWidget(split, 1)
        self.scrubber = None
        if recording is not None:
            self.scrubber = ReplayScrubber(theme=theme)
            self.scrubber.set_recording(recording.num_steps, recording.end_times)
            self.scrubber.seek_requested.connect(self.seek)
            layout.addWidget(self.scrubber)
        layout.addWidget(self.status)

        self.host = SessionHost(AttachSession if recording is None else AttachReplaySession,
                                name="attach" if recording is None else "attach replay")
        self.host.start()
        self.host.apply(target if recording is None else str(recording.path), play=True)
        self.timer = QTimer(self)
        self.timer.setInterval(FRAME_INTERVAL_MS)
        self.timer.timeout.connect(self.on_frame)
        self.timer.start()

    # -- frames ---------------------------------------------------------------------------------
    def on_frame(self) -> None:
        frame = self.host.take_frame()
        if frame is not None and not frame.idle:
            self.render_frame(frame)

    def render_frame(self, frame) -> None:
        self.frames += 1
        if frame.error:
            self.errors.append(frame.error)
        if frame.info is not None:
            self.failed = False
        elif frame.error and _ends_following(frame.status):
            self.failed, self.failure = True, frame.error
        if self.recording_to is not None and frame.error and (self.failed or frame.status == RECORDING_REFUSED):
            self.recording_to = None  # ended with the page's process, or refused
            self.recording_ended(frame.error)
        if frame.info is not None:
            if self.info is not None:  # a replay sought: the history up to there follows
                self._clear()
            self.info = frame.info
        if frame.prediction is not None:
            self.latency = frame.prediction
        if frame.recording_ticks is not None or frame.status.startswith("recording written"):
            self.recording_ticks = frame.recording_ticks
        if self.scrubber is not None and frame.position is not None:
            self.scrubber.set_position(frame.position)
        if frame.counts is not None:
            self.counts = frame.counts
        for point in frame.observed:
            self._add_point(point)
        if frame.observed:
            self.plots.set_series({key: np.asarray(values, dtype=np.float64) for key, values in self._series.items()})
        if frame.snapshot is not None:
            self.latest_snapshot = frame.snapshot
            self.usage_served = (frame.cells or {}).get("kv_usage_served", True)
            self.block_map.update_cells(frame.snapshot, frame.cells)
            self._show_blocks()
        if frame.log_lines:
            self.event_log.add_lines(frame.log_lines)
        if frame.info is not None or frame.counts is not None or frame.prediction is not None:
            self.details.setHtml(details_html(self.info, self.counts, self.theme, self.latency))
        self.status.setText(self.status_text(frame.status, frame.error))

    def _clear(self) -> None:
        for values in self._series.values():
            values.clear()
        self.plots.clear()
        self.event_log.clear()
        self.latency = []

    def seek(self, position: int) -> None:
        self.host.seek(position)

    def reattach(self) -> str | None:
        """Reset (R) on the page once it follows nothing (the attach refused, its process killed):
        attach again, or open the recording again, in a new process if the last one died. The
        message said "Play, Apply or Reset (R) starts a new one", and on this page all three were
        refused. What it does, said; None (nothing done) while the page follows the server."""
        if not self.failed:
            return None
        self.failed = False
        said = ("attaching again: the page follows the server once it answers" if self.recording is None
                else "opening the recording again")
        self.status.setText(f"{said} ...")
        self.host.restart(play=True)
        return said

    def start_recording(self, path: str) -> None:
        self.recording_to = path
        self.host.start_recording(path)

    def stop_recording(self) -> None:
        self.recording_to = None
        self.host.stop_recording()

    def _add_point(self, point) -> None:
        for key in ("time_s", *SERIES_KEYS):
            self._series[key].append(getattr(point, key))
        interval = point.interval_s
        for key, counted in (("prompt_tokens_per_s", point.prompt_tokens),
                             ("generation_tokens_per_s", point.generation_tokens)):
            self._series[key].append(counted / interval if interval > 0 else math.nan)

    def _show_blocks(self) -> None:
        snap = self.latest_snapshot
        cells = snap.num_blocks
        used = min(cells, round(snap.kv_usage * cells))
        cached = snap.count(1)  # BLOCK_CACHED
        cached_free = max(0, cached - used)
        theme = self.theme
        if not self.usage_served:  # "in use 0" was drawn of a server that said nothing of its usage
            why = ("its usage is not scraped yet" if self.usage_served is None else "its usage is not served")
            self.blocks_bar.set_segments(f"KV cache of the server ({why})", [
                BlockSegment("cached (KV events)", cached, theme.good,
                             f"{cached:,} blocks stored and not evicted (KV events); {why} "
                             "(vllm:kv_cache_usage_perc), so how many blocks are in use is not known"),
                BlockSegment("not known cached", cells - cached, theme.free_block,
                             "in use or free: the server's /metrics does not say"),
            ])
            return
        self.blocks_bar.set_segments("KV cache of the server", [
            BlockSegment("in use", used, theme.decode, f"vllm:kv_cache_usage_perc {format_percent(snap.kv_usage)} of "
                                                       f"{cells:,} blocks: held by running requests"),
            BlockSegment("cached, free (at least)", cached_free, theme.good,
                         f"{cached:,} blocks stored and not evicted (KV events) less the blocks in use: vLLM does not "
                         "say which cached blocks requests hold, so this is a lower bound"),
            BlockSegment("free", cells - used - cached_free, theme.free_block, "neither in use nor known cached"),
        ])

    def status_text(self, status: str = "", error: str | None = None) -> str:
        if error and not _ends_following(status):  # a recording refused, say: said with what the page follows
            return f"{error}  ·  {self.status_text()}"
        if self.failed:  # why it stopped following, until it attaches again
            hint = "" if self.failure.rstrip().endswith("again.") else "  ·  Reset (R) on this page tries again"
            return f"not attached: {self.failure}{hint}"
        if self.info is None:
            return status or "attaching ..."
        c = self.counts
        events = ", ".join(f"{name} {count:,}" for name, count in sorted(c.get("events", {}).items())) or "none yet"
        text = (f"vLLM {self.info['version']} at {self.info['url']}  ·  {c.get('batches', 0):,} batches ({events})  ·  "
                f"gaps {c.get('gaps', 0):,}, replayed {c.get('replayed', 0):,}, lost {c.get('lost', 0):,}, "
                f"restarts {c.get('restarts', 0):,}, undecodable {c.get('decode_errors', 0):,}  ·  "
                f"{c.get('cached_blocks', 0):,} blocks cached in {c.get('chains', 0):,} chains")
        if self.recording is not None:
            text = f"replay of {self.recording.path.name}  ·  {text}"
        if self.recording_ticks is not None:
            text += f"  ·  recording: {self.recording_ticks:,} ticks"
        return f"{text}  ·  {status}" if status and not status.startswith("attached") else text

    # -- the window around it -------------------------------------------------------------------
    def hidden_docks(self, window) -> list:
        """The live run's docks that show nothing of the server: its plots, requests, events and request inspector."""
        return [window.plots_dock, window.bottom_dock, window.inspector_dock]

    def set_theme(self, theme) -> None:
        self.theme = theme
        for view in (self.blocks_bar, self.block_map, self.plots, self.scrubber):
            if view is not None:
                view.set_theme(theme)
        if self.info is not None:  # its notes are in the theme's faint colour; a paused replay sends no frame
            self.details.setHtml(details_html(self.info, self.counts, theme, self.latency))
        if self.latest_snapshot is not None:  # the blocks bar's segments carry the theme's colours
            self._show_blocks()

    def stop(self) -> None:
        self.timer.stop()
        self.host.stop()


def _ends_following(status: str) -> bool:
    """Whether a frame's status says the page follows nothing now: the attach (or the recording's
    opening) was refused, or the page's process died."""
    return status.startswith("not attached") or status.endswith(("ended unexpectedly", "could not start"))


def details_html(info: dict | None, counts: dict, theme, latency: list = ()) -> str:
    if info is None:
        return "<p>not attached yet</p>"
    faint = hex_color(theme.grid)
    rows = "".join(
        f"<tr><td>{html.escape(f['name'])}</td><td align=right>{_number(f['predicted'], f['unit'])}</td>"
        f"<td align=right>{_number(f['observed'], f['unit'])}</td><td align=right>{_error(f['error'])}</td>"
        f"<td>{'' if f['unit'] == 's' else html.escape(f['unit'])}</td>"
        f"<td style='color:{faint}'>{html.escape(f['note'])}</td></tr>" for f in [*info["prediction"], *latency])
    config = ", ".join(f"{k} {html.escape(str(v))}" for k, v in sorted(info["cache_config"].items())
                       if k in ("block_size", "num_gpu_blocks", "num_gpu_blocks_override", "cache_dtype",
                                "kv_cache_memory_bytes", "gpu_memory_utilization", "kv_cache_max_concurrency",
                                "enable_prefix_caching"))
    unavailable = "".join(f"<li><b>{html.escape(name)}</b>: {html.escape(why)}</li>"
                          for name, why in info["unavailable"].items())
    models = ", ".join(info["model_names"]) or "unknown"
    return (f"<p><b>vLLM {html.escape(info['version'])}</b> at {html.escape(info['url'])} serving "
            f"{html.escape(models)}; {info['num_gpu_blocks']:,} blocks of {info['block_size']} tokens per engine, "
            f"{len(info['engines'])} engine(s); events from {html.escape(', '.join(info['sources']))}"
            f"{'; replay ' + html.escape(info['replay']) if info['replay'] else ' (no replay socket given)'}</p>"
            f"<p style='color:{faint}'>cache_config_info: {config}</p>"
            "<h4>Predicted by kvscope beside observed on the server</h4>"
            "<table cellspacing=6><tr><th align=left>figure</th><th>predicted</th><th>observed</th><th>error</th>"
            f"<th></th><th align=left>how</th></tr>{rows}</table>"
            f"<h4>Not published by vLLM, so not shown</h4><ul>{unavailable}</ul>")


def _error(value) -> str:
    return "" if value is None else f"{value:+.1%}"


def _number(value, unit: str = "") -> str:
    if value is None:
        return "n/a"
    return format_seconds(value) if unit == "s" else f"{value:,.2f}"


def open_attached(window, target, recording=None) -> AttachView:
    """Add the page for target (or for a recording of one) to the window and show it; it takes
    the place of a page attached before."""
    if window.attached is not None:
        if window.attached.recording_to is not None:  # finished, and Record no longer checked over nothing
            window.attached.stop_recording()
            _uncheck_record(window)
        window.attached.stop()
        window.pages.removeTab(window.pages.indexOf(window.attached))
        window.attached.deleteLater()
    view = AttachView(target, window.theme, recording=recording)
    view.recording_ended = lambda reason: _recording_ended(window, reason)
    window.attached = view
    if recording is None:
        index = window.pages.addTab(view, f"Attached: {address_for_tab(target.url)}")
        window.pages.setTabToolTip(index, f"a live vLLM server's prefix cache and metrics: "
                                          f"{address_for_tab(target.url, LONGEST_SAID)}")
    else:
        index = window.pages.addTab(view, f"Replay: {said_short(escaped(recording.path.name), TAB_CHARS)}")
        window.pages.setTabToolTip(index, f"a recorded vLLM server: "
                                          f"{address_for_tab(str(recording.info['url']), LONGEST_SAID)}")
    if not getattr(window, "watches_attached_page", False):  # once: each attach connected one more
        window.pages.currentChanged.connect(lambda _i: _page_changed(window))
        window.watches_attached_page = True
    window.pages.setCurrentWidget(view)
    _page_changed(window)
    return view


def _uncheck_record(window) -> None:
    action = window.record_action
    action.blockSignals(True)  # not a user's uncheck: nothing is left to stop
    action.setChecked(False)
    action.blockSignals(False)
    window.state.recording_path = None


def recording_in_progress(window, path) -> str | None:
    """Why File > Open recording refuses path: it is the file File > Record is writing (the server's
    or the live engine's), which was opened half-written, as a recording cut short; else None."""
    page = window.attached
    if page is not None and page.recording_to is not None:
        writing, whose = page.recording_to, "the attached server"
    else:
        writing = window.state.recording_path if window.record_action.isChecked() else None
        whose = "the live run"
    if writing is None or not _same_file(writing, path):
        return None
    return (f"{said_path(path)} is the recording of {whose} in progress: uncheck File > Record the run to finish "
            "it, then open it")


def _same_file(a, b) -> bool:
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):  # not there yet (a recording begun moments ago), a NUL in a name
        return os.path.abspath(a) == os.path.abspath(b)


def _recording_ended(window, reason: str) -> None:
    """File > Record of the page did not start, or stopped (the page's process died): unchecked,
    and said in a dialog about the recording, as the live run's are (recording_control.show_failure)."""
    from PySide6.QtWidgets import QMessageBox

    from kvscope.app.gui.recording_control import DID_NOT_START

    _uncheck_record(window)
    box = QMessageBox(QMessageBox.Warning, DID_NOT_START if reason.startswith(("Cannot record", "Nothing to"))
                      else "Recording stopped", f"{reason}\n\nFile > Record the run (Ctrl+Shift+R) records the "
                      "server to a file once the page follows it.", parent=window)
    box.setModal(False)  # it came with a frame: a modal loop here would run the frame timer inside it
    box.open()


def address_for_tab(address: str, longest: int = TAB_CHARS) -> str:
    """The server's address as a tab says it: a password given in it is not shown, a character
    that is not printable (a newline, a direction override that reversed the tab's text) is escaped,
    and an address of thousands of characters is said by its ends, not as a tab wider than the window."""
    scheme, sep, rest = address.partition("://")
    netloc, slash, path = rest.partition("/")
    if sep and "@" in netloc:
        address = f"{scheme}://...@{netloc.rpartition('@')[2]}{slash}{path}"
    return said_short(escaped(address), longest)


def _page_changed(window) -> None:
    showing = window.pages.currentWidget() is getattr(window, "attached", None)
    form = window.settings_dock.widget()
    if window.replay_path is None:  # a replay disables the form for its own reason
        form.setEnabled(not showing)
        form.setToolTip(SETTINGS_TOOLTIP if showing else "")
    window.update_docks()
    window.show_run_controls_use()


def open_attached_replay(window, path) -> bool:
    """Replay a recording of an attached server on its page; a damaged file is a dialog and changes nothing."""
    from PySide6.QtWidgets import QMessageBox

    from kvscope.app.lab.recording import RecordingError
    from kvscope.app.lab.recording.attached_reader import AttachedRecording

    page = window.attached
    following = page is not None and page.recording is None and not page.failed
    try:
        recording = AttachedRecording.open(path, allow_truncated=True)
    except (RecordingError, OSError) as exc:
        QMessageBox.warning(window, "Cannot open the recording", f"{exc}\n\nThe window keeps what it showed.")
        return False
    # the replay takes the attached page's place: a server followed live stopped without a word
    replaced = (f"the replay took the place of the page following {address_for_tab(page.target.url)}"
                f"{' (its recording finished)' if page.recording_to is not None else ''}; `kvscope attach` follows "
                "it again") if following else None
    window.live_worker.pause()
    open_attached(window, None, recording)
    said = "; ".join(text for text in (recording.warning, replaced) if text)
    if said:
        window.statusBar().showMessage(said, 10000)
    return True
