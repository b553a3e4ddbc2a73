"""`kvscope attach URL`: follow a running vLLM server's KV cache events and metrics, in the window
or, with --duration, headless (a summary, or --json OUT for scripts and checks).

URL is the server's HTTP address (/version, /metrics). Events come from its publisher
(--kv-events tcp://HOST:5557, which vLLM binds with `"endpoint": "tcp://*:5557"`), or from servers
that dial a socket kvscope binds (--kv-listen tcp://*:5557, the server's endpoint naming this
host); --replay names the server's replay socket, so missed batches are fetched again.
--data-parallel-size N follows N DP engines, rank r on each endpoint's port + r, as vLLM does.
"""

from __future__ import annotations

import argparse
import sys
import time

from kvscope.engine.config import ConfigError
from kvscope.engine.units import format_bytes, format_percent, format_seconds

from kvscope.app.cli import combinations, options
from kvscope.app.cli.output import counted, recorded, shown, table
from kvscope.app.lab.output_path import (check_distinct_outputs, check_file_output, check_output_path,
                                         write_json_output)

MAX_DURATION_S = 7 * 86400.0
# Shorter, no batch can be heard: the subscription reaches the publisher, and a busy server's next step
# publishes, some tens of ms after the attach starts (`--duration 0.001` was "not the server's publisher").
MIN_DURATION_S = 0.2
POLL_MS = 100


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("attach", help="follow a live vLLM server's KV cache events and metrics")
    parser.add_argument("url", metavar="URL", help="the server's HTTP address, e.g. http://127.0.0.1:8000")
    events = parser.add_mutually_exclusive_group()
    events.add_argument("--kv-events", metavar="ENDPOINT",
                        help="the server's KV event publisher to dial, e.g. tcp://127.0.0.1:5557")
    events.add_argument("--kv-listen", metavar="ENDPOINT",
                        help="bind this endpoint for servers to dial (their --kv-events-config endpoint names "
                             "this host), e.g. tcp://*:5557")
    parser.add_argument("--replay", metavar="ENDPOINT",
                        help="the server's replay socket, e.g. tcp://127.0.0.1:5558: missed batches are fetched again")
    # 256: attachment.MAX_DATA_PARALLEL, not imported here (the parser stays light: ZMQ loads on use)
    parser.add_argument("--data-parallel-size", type=options.bounded(1, 256, whole_only=True), default=1,
                        metavar="N", help="DP engines: rank r publishes on each endpoint's port + r (default 1)")
    parser.add_argument("--topic", default=None, help="the server's event topic (default: every topic)")
    model = parser.add_mutually_exclusive_group()
    model.add_argument("--model", metavar="PRESET", help="the served model's kvscope preset, for the prediction")
    model.add_argument("--model-path", metavar="DIR",
                       help="the served model's directory (its config.json), for the prediction")
    parser.add_argument("--hardware", metavar="PRESET",
                        help="what the server runs on, for the prediction when it sized its cache from GPU memory")
    parser.add_argument("--timeout", type=options.bounded(0.05, 60.0), default=2.0, metavar="SECONDS",
                        help="for each HTTP request, its whole answer, and each replay answer (default 2)")
    parser.add_argument("--duration", type=duration_seconds, metavar="SECONDS",
                        help=f"headless: follow for this long (at least {MIN_DURATION_S:g}), then print what was "
                             "observed (no window)")
    parser.add_argument("--json", metavar="OUT", help="with --duration: write the observations as JSON ('-': stdout)")
    parser.add_argument("--record", metavar="FILE",
                        help="record what arrives to a .kvrec, for `kvscope gui --replay FILE` and `kvscope export`")
    parser.add_argument("--theme", choices=("dark", "light", "contrast"), default=None,
                        help="the window's colours (default dark)")
    parser.add_argument("--quit-after", type=options.bounded(0.0, MAX_DURATION_S), metavar="SECONDS",
                        help="the window: close after this many seconds")
    parser.add_argument("--screenshot", metavar="PNG", help="the window, with --quit-after: save it as a PNG first")
    parser.epilog = ("--theme, --quit-after and --screenshot are the window's: with --duration (headless) there is "
                     "none, and they are refused")
    parser.set_defaults(func=run)


def duration_seconds(text: str) -> float:
    """--duration: a positive number of seconds, long enough for a KV event to be heard at all."""
    seconds = options.bounded(0.0, MAX_DURATION_S, low_open=True)(text)
    if seconds < MIN_DURATION_S:
        raise argparse.ArgumentTypeError(
            f"{options.typed_float(seconds)} s is too short to hear a KV event (the subscription reaching the server's publisher and "
            f"its next step take tens of ms), and the silence would be said as the wrong endpoint; give at least "
            f"{MIN_DURATION_S:g} s, e.g. 10")
    return seconds


def target_from_args(args):
    from kvscope.app.lab.presets import load_hardware, load_model
    from kvscope.app.lab.vllm.attachment import AttachTarget
    from kvscope.app.lab.models.config_json import load_hf_config

    if not (args.kv_events or args.kv_listen):
        raise ConfigError("give the server's KV event endpoint (--kv-events tcp://HOST:5557) or one for servers to "
                          "dial (--kv-listen tcp://*:5557)")
    model = load_hf_config(options.model_folder(args.model_path, takes_config=False)) if args.model_path else \
        load_model(args.model) if args.model else None
    hardware = load_hardware(args.hardware) if args.hardware else None
    return AttachTarget(url=args.url, kv_events=args.kv_events, kv_listen=args.kv_listen, replay=args.replay,
                        data_parallel_size=args.data_parallel_size, topic=args.topic or "", model=model,
                        hardware=hardware, timeout_s=args.timeout)


def follow(target, duration_s: float, record: str | None = None) -> dict:
    """Attach, follow for duration_s (recording to `record` if given), and report; ConfigError
    (one line) if attaching fails or the endpoint proves not to be a vLLM publisher (the report is
    then in the error's `report`)."""
    from kvscope.app.lab.vllm.attachment import Attachment, publisher_error

    recording = None
    try:
        with Attachment(target) as attachment:
            if record:
                attachment.start_recording(record)
                recording = record
            deadline = time.monotonic() + duration_s
            while (left := deadline - time.monotonic()) > 0:
                attachment.poll(int(min(POLL_MS, left * 1000)) + 1, deadline)
            attachment.poll(0, deadline)
            attachment.scrape()
            report = attachment.report()
            error = publisher_error(attachment)
            if error is not None:
                recording = None
                attachment.discard_recording()  # a refused attach keeps nothing, and replaces no recording
            recorder = attachment.stop_recording()
            if recorder is not None:
                report["recording"] = {"path": str(recorder.path), "bytes": recorder.size,
                                       "ticks": recorder.num_ticks}
    except KeyboardInterrupt:  # Ctrl+C (or SIGTERM) ends it as --duration would: the capture is kept, and said
        if recording is not None:
            print(f"kvscope: what came before the interruption is recorded in {shown(recording)} (it replaced any "
                  f"file there): `kvscope gui --replay {shown(recording)}` replays it", file=sys.stderr)
        raise
    if error is not None:
        error.report = report
        raise error
    return report


def summary_rows(report: dict) -> list[tuple[str, str]]:
    m = report["metrics"]

    def seconds(value):
        return "n/a" if value is None else format_seconds(value)

    events = ", ".join(f"{name} {count:,}" for name, count in report["events"].items()) or "none"
    rows = [
        ("server", f"{report['server']} (vLLM {report['server_version']}, {', '.join(report['model_names']) or '?'})"),
        ("cache", f"{report['num_gpu_blocks']:,} blocks x {report['block_size']} tokens per engine, "
                  f"{counted(report['data_parallel_engines'], 'engine')}"),
        ("events", f"{events} in {report['batches']:,} batches ({report['blocks_stored']:,} blocks stored, "
                   f"{report['blocks_removed']:,} removed)"),
        ("gaps / replayed / lost", f"{report['gaps']:,} / {report['batches_replayed']:,} / {report['batches_lost']:,}"),
        ("restarts / decode errors", f"{report['restarts']:,} / {report['decode_errors']:,}"),
        ("blocks cached at the end", f"{report['blocks_cached']:,} in {counted(report['chains'], 'chain')}" + (
            f" (inconsistent: {report['blocks_unplaced']:,} beyond the server's {report['num_gpu_blocks']:,}-block "
            "pool)" if report["blocks_unplaced"] else "")),
        ("KV cache usage (now / peak)", f"{_percent(m['kv_usage'])} / {_percent(m['peak_kv_usage'])}"),
        ("running / waiting", f"{_count(m['num_running'])} / {_count(m['num_waiting'])}"),
        ("preemptions (server total)", _count(m["preemptions"])),
        ("prefix cache hit rate (server total)", _percent(m["prefix_cache_hit_rate"])),
        ("TTFT p50 / p99 (while attached)", f"{seconds(m['ttft_p50_s'])} / {seconds(m['ttft_p99_s'])}"),
        ("inter-token p50 / p99 (while attached)", f"{seconds(m['itl_p50_s'])} / {seconds(m['itl_p99_s'])}"),
    ]
    for figure in report["prediction"]:
        predicted, observed = (figure_value(figure[key], figure["unit"]) for key in ("predicted", "observed"))
        unit = "" if figure["unit"] == "s" else f" {figure['unit']}"
        error = "" if figure["error"] is None else f", error {figure['error'] * 100:+.1f} %"
        rows.append((f"{figure['name']} predicted / observed", f"{predicted} / {observed}{unit}{error}"
                                                                 f"  ({figure['note']})"))
    return rows


def figure_value(value, unit: str) -> str:
    """A predicted or observed figure with its unit's formatting: seconds as ms / s, blocks whole
    (vLLM allocates whole blocks: "5,461.00 / 12.00 blocks" was printed), other counts to 2 decimals."""
    if value is None:
        return "n/a"
    return format_seconds(value) if unit == "s" else f"{value:,.0f}" if unit == "blocks" else f"{value:,.2f}"


def run_window(target, args) -> int:
    """The explorer window with the server's page showing; the live engine is built only if played."""
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    from kvscope.app.cli.gui import initial_values, save_screenshot
    from kvscope.app.gui.main_window import MainWindow

    values = initial_values(argparse.Namespace(backend=None, model=None, hardware=None, workload=None,
                                               model_path=None))
    from kvscope.app.cli.qt_system_libs import check_qt_system_libs

    check_qt_system_libs()  # no display, or a missing X11 library: one line, as `kvscope gui` says it
    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("kvscope")
    window = MainWindow(values, theme=args.theme or "dark", autoplay=False, attach=target)
    if args.record:  # through File > Record's own path: the action checked, exports kept off the file
        from kvscope.app.gui import recording_control

        recording_control.start(window, args.record)
    window.resize(1600, 960)
    window.show()
    window.arrange_docks()
    failures: list[str] = []
    if args.quit_after is not None:
        def finish():
            if args.screenshot:  # written whole, as `kvscope gui` writes it; a failure is said, not dropped
                failures.extend(save_screenshot(window, args.screenshot))
            window.close()
            app.quit()

        QTimer.singleShot(int(args.quit_after * 1000), finish)
    code = app.exec()
    if failures:
        raise ConfigError(failures[0])
    page = window.attached  # a scripted window (--quit-after) that never attached ended 0, its --record unwritten
    if args.quit_after is not None and page is not None and page.failed:
        raise ConfigError(f"not attached: {page.failure}" + (f"; nothing recorded to {shown(args.record)}"
                                                             if args.record else ""))
    return code


def _percent(value) -> str:
    return "n/a" if value is None else format_percent(value)


def _count(value) -> str:
    return "n/a" if value is None else f"{value:,.0f}"


def check_mode_flags(args) -> None:
    """Each flag does something in the mode chosen: the window's (--theme, --quit-after,
    --screenshot) are refused with --duration, --json without it."""
    if args.json and args.duration is None:
        raise ConfigError("--json writes what a headless attach observed: give --duration SECONDS too")
    if args.duration is not None:
        for flag, value in (("--screenshot", args.screenshot), ("--quit-after", args.quit_after),
                            ("--theme", args.theme)):
            if value is not None:
                raise ConfigError(f"{flag} is the window's, and --duration attaches headless, with no window: "
                                  f"drop {flag}, or drop --duration to open the window")
    if args.screenshot and args.quit_after is None:
        raise ConfigError(f"--screenshot {args.screenshot}: needs --quit-after SECONDS (the window is saved just "
                          "before it closes)")


def check_addresses(args) -> None:
    """Addresses and the topic are text sent to the network: a byte that is no UTF-8 character
    (argv of another encoding) made ZMQ raise UnicodeEncodeError mid-connect, and the subscriber then
    hung closing its context; an inproc:// endpoint reaches only sockets of this very process."""
    from kvscope.app.lab.vllm.events import MAX_TOPIC_BYTES

    for flag, value in (("URL", args.url), ("--kv-events", args.kv_events), ("--kv-listen", args.kv_listen),
                        ("--replay", args.replay), ("--topic", args.topic)):
        if value is None:
            continue
        try:
            size = len(value.encode("utf-8"))
        except UnicodeEncodeError:
            raise ConfigError(f"{flag} {value!r}: holds bytes that are not UTF-8 text; give it in UTF-8") from None
        if flag != "--topic" and value.lower().startswith("inproc://"):
            raise ConfigError(f"{flag} {value}: an inproc:// endpoint reaches only sockets of this process, and the "
                              "server is another: give tcp://HOST:PORT (or ipc://PATH on this machine)")
        if flag == "--topic" and size > MAX_TOPIC_BYTES:
            raise ConfigError(f"--topic of {size:,} bytes: a vLLM topic is a few words, and a message whose topic "
                              f"is over {MAX_TOPIC_BYTES:,} bytes is not read; give the server's topic")
    # the window shows the port the system gave; headless, it was bound, unsaid, for the whole --duration
    if (args.duration is not None and (args.kv_listen or "").startswith("tcp://") and args.kv_listen.endswith(":*")
            and args.data_parallel_size == 1):  # more ranks: "no port to offset by the DP rank" says it
        raise ConfigError(f"--kv-listen {args.kv_listen}: port '*' lets the system pick one, which a headless attach "
                          "does not say, and a server dials the port its --kv-events-config names; give that port, "
                          "e.g. tcp://*:5557")


def input_files(args) -> dict:
    """The files attach reads (the model's preset or folder, the hardware preset): an output onto
    one of them would replace it (--json is written even when the attach is refused)."""
    from kvscope.app.lab.presets import preset_file

    inputs = options.model_input_files(args.model, args.model_path)
    hardware = preset_file("hardware", args.hardware) if args.hardware else None
    if hardware:
        inputs["hardware preset"] = str(hardware)
    return {**inputs, **options.calibration_profile_files(args.hardware)}


def check_prediction_flags(args) -> None:
    """--hardware is read only by the prediction, beside the served model's shape: alone, every
    predicted figure was "n/a (no model shape ...)" and the flag taken without a word."""
    if args.hardware and not (args.model or args.model_path):
        raise ConfigError(f"--hardware {args.hardware}: read only for the prediction, with the served model's shape, "
                          "and none is given: add --model PRESET or --model-path DIR, or drop --hardware")


def run(args) -> int:
    check_mode_flags(args)
    check_addresses(args)
    combinations.refuse_replay_on_an_event_port(args)
    # a socket kvscope binds is a file it makes: a recording written there replaced it, and no server could dial it
    listened = args.kv_listen[len("ipc://"):] if (args.kv_listen or "").startswith("ipc://") else None
    check_distinct_outputs({"--json": args.json, "--record": args.record, "--screenshot": args.screenshot,
                            "--kv-listen": None if (listened or "@").startswith("@") else listened})
    inputs = input_files(args)
    check_output_path("--json", args.json, inputs)
    if args.record:
        check_file_output("--record", args.record, "a recording", inputs)
    if args.screenshot:
        from kvscope.app.cli.gui import check_screenshot_target

        check_file_output("--screenshot", args.screenshot, "a screenshot", inputs)
        check_screenshot_target(args.screenshot)
    check_prediction_flags(args)  # after the outputs: an output onto an input is the worse mistake to leave unsaid
    target = target_from_args(args)
    if args.duration is None:
        from kvscope.app.lab.vllm.attachment import check_addresses as check_target_addresses

        # said here, as headless: the window opened on `ftp://...` or a port 99999 and exited 0 on --quit-after
        check_target_addresses(target)
        return run_window(target, args)
    try:
        report = follow(target, args.duration, args.record)
    except ConfigError as exc:
        if args.json and getattr(exc, "report", None) is not None:
            write_json_output("--json", args.json, exc.report)
        raise
    for warning in report["warnings"]:
        print(f"kvscope: warning: {shown(warning)}", file=sys.stderr)  # the server's words may hold ESC
    if args.json:
        write_json_output("--json", args.json, report)
    if args.json != "-":
        print(table(summary_rows(report), title=f"Attached for {options.typed_float(args.duration)} s"))
        if report["warning"]:
            print(f"note: {shown(report['warning'])}")
        if args.record:
            done = report["recording"]
            print(recorded(done["path"], f"{format_bytes(done['bytes'])}, {counted(done['ticks'], 'tick')}"))
    return 0
