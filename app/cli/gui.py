"""`kvscope gui`: the explorer window, also scriptable for tests and slides."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kvscope.engine.config import BACKENDS, DEFAULT_HARDWARE, DEFAULT_MODEL, DEFAULT_REAL_MODEL, ConfigError
from kvscope.app.lab.presets import THIS_MACHINE, load_hardware, load_model, load_workload
from kvscope.app.gui.run_settings import engine_defaults

from kvscope.app.cli import options
from kvscope.app.lab.output_path import check_output_path

# A window larger than any screen (8K is 7680 x 4320) would need a backing store of gigabytes.
MIN_SIZE, MAX_SIDE = (320, 240), 8192
MAX_QUIT_AFTER_S = 7 * 86400.0  # a scripted window closes within a week (Qt's timers stop at 24 days)
# Small enough that the tiny model fills it with the real trace. A big GPU would give the tiny model
# millions of blocks it never fills, so its default run keeps this budget there too.
GUI_CPU_KV_BUDGET = 64 * 1024**2
DEFAULT_WORKLOAD = "azure-conv"


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("gui", help="the explorer window")
    parser.add_argument("--model", metavar="PRESET",
                        help=f"model preset (default {DEFAULT_REAL_MODEL} on the real backend)")
    parser.add_argument("--model-path", metavar="DIR", help="a local Hugging Face model directory (real backend)")
    parser.add_argument("--hardware", metavar="PRESET",
                        help="hardware preset; a GPU preset selects the simulated backend")
    parser.add_argument("--workload", metavar="PRESET", help=f"workload preset (default {DEFAULT_WORKLOAD})")
    parser.add_argument("--backend", choices=BACKENDS, help="default: real on this machine")
    parser.add_argument("--theme", choices=("dark", "light", "contrast"), default="dark",
                        help="colours: dark (default), light, or contrast (high contrast, as demo mode uses)")
    parser.add_argument("--size", type=_size, default=(1600, 960), metavar="WxH", help="window size (default 1600x960)")
    parser.add_argument("--quit-after", type=options.bounded(0.0, MAX_QUIT_AFTER_S), metavar="SECONDS",
                        help="close after this many seconds")
    parser.add_argument("--screenshot", metavar="PNG", help="with --quit-after: save the window as a PNG first")
    parser.add_argument("--demo", action="store_true",
                        help="demo mode for talks: fullscreen, large fonts, high contrast, settings hidden (F11 toggles)")
    parser.add_argument("--replay", metavar="FILE", help="replay a recorded run (.kvrec): no model, no GPU needed")
    parser.add_argument("--scenario", metavar="NAME", help="open a guided scenario (see `kvscope scenarios`)")
    parser.set_defaults(func=run)


def _size(text: str) -> tuple[int, int]:
    try:
        width, height = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected WIDTHxHEIGHT, e.g. 1920x1080, got {text[:40]!r}") from None
    if width < MIN_SIZE[0] or height < MIN_SIZE[1] or width > MAX_SIDE or height > MAX_SIDE:
        raise argparse.ArgumentTypeError(f"a window from {MIN_SIZE[0]}x{MIN_SIZE[1]} to {MAX_SIDE}x{MAX_SIDE}, "
                                         f"got {text[:40]!r}")
    return width, height


def initial_values(args) -> dict:
    """The window's first settings: the real backend on this machine with the default model, already
    running a realistic workload, unless the command line says otherwise."""
    from kvscope.app.lab.cuda_device import cuda_device_visible

    backend = args.backend or ("simulated" if args.hardware not in (None, THIS_MACHINE) else "real")
    model = args.model or (DEFAULT_REAL_MODEL if backend == "real" else DEFAULT_MODEL)
    hardware = args.hardware or (THIS_MACHINE if backend == "real" else DEFAULT_HARDWARE)
    load_model(model)  # unknown names fail here, with the list of known ones
    load_hardware(hardware)
    workload = load_workload(args.workload or DEFAULT_WORKLOAD)
    budgeted = backend == "real" and (not cuda_device_visible() or (model == DEFAULT_REAL_MODEL and not args.model_path))
    engine = engine_defaults()
    if budgeted:
        engine["kv_cache_memory_bytes"] = GUI_CPU_KV_BUDGET
    return {
        "backend": backend, "model": model, "hardware": hardware, "workload": workload.name,
        "model_path": args.model_path, **engine,
        "num_requests": min(workload.num_requests, 100_000), "arrival_rate_per_s": None, "trace_speedup": 1.0,
        "prompt_median": None, "output_median": None, "shared_prefix_fraction": None,
    }


def check_flags(args) -> dict:
    """Every flag checked before the window exists (a dialog at start-up would hold a scripted run,
    --quit-after, forever); returns the window's first settings."""
    replay, scenario = getattr(args, "replay", None), getattr(args, "scenario", None)
    if args.screenshot:
        if not Path(args.screenshot).resolve().parent.is_dir():
            raise ConfigError(f"--screenshot {args.screenshot}: the folder does not exist")
        check_output_path("--screenshot", args.screenshot, {"recording": replay} if replay else None)
    if replay:
        check_replay(replay)
    if scenario:
        from kvscope.app.lab.scenarios import load_scenario

        load_scenario(scenario).comparison_spec()  # an unknown name or a bad file fails here, with the reason
    if args.model_path:
        check_model_path(args.model_path)
    return initial_values(args)


def check_replay(path: str) -> None:
    """The recording opens, every record's checksum holds, and its first and last states decode:
    corrupt or forged, it is one line and exit 2 here, not a window that cannot show it."""
    from kvscope.app.lab.recording import Recording

    if not Path(path).is_file():
        raise ConfigError(f"--replay {path}: no such file")
    with Recording.open(path, allow_truncated=True) as recording:
        recording.initial_snapshot()
        if recording.num_steps:
            recording.step(recording.num_steps - 1)
            recording.snapshot_at(recording.num_steps - 1)


def check_model_path(path: str) -> None:
    """A model directory the real backend can load: config.json, a supported architecture, weights
    (their exact match with config.json is checked as they load)."""
    from kvscope.engine.hf_config import model_from_hf_config
    from kvscope.engine.runners.model_loader import check_model_directory

    cfg = check_model_directory(path)
    model_from_hf_config(cfg, Path(path).name or str(path), label=f"--model-path {path}: config.json")


def run(args) -> int:
    values = check_flags(args)
    replay, scenario = getattr(args, "replay", None), getattr(args, "scenario", None)
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    from kvscope.app.gui.main_window import MainWindow

    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("kvscope")
    window = MainWindow(values, theme=args.theme, replay=replay, scenario=scenario)
    width, height = args.size
    window.resize(width, height)
    window.show()
    window.arrange_docks()
    if getattr(args, "demo", False):
        window.toggle_demo()
    if args.quit_after is not None:
        def finish():
            if args.screenshot:
                window.grab().save(args.screenshot)
            window.close()
            app.quit()

        QTimer.singleShot(int(args.quit_after * 1000), finish)
    return app.exec()
