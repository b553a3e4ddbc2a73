"""`kvscope gui`: the explorer window, also scriptable for tests and slides."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kvscope.engine.config import (
    BACKENDS,
    DEFAULT_HARDWARE,
    DEFAULT_MODEL,
    DEFAULT_REAL_MODEL,
    RANDOM_WEIGHTS_MODEL,
    ConfigError,
)
from kvscope.app.lab.chat_defaults import (
    LIVE_CHAT_ENGINE,
    LIVE_CHAT_MODEL,
    LIVE_CHAT_WORKLOAD,
    LIVE_CHAT_WORKLOAD_SETTINGS,
    trained_model_available,
)
from kvscope.app.lab.presets import THIS_MACHINE, load_hardware, load_model, load_workload, user_presets_root
from kvscope.app.gui.run_settings import engine_defaults

from kvscope.app.cli import options
from kvscope.app.lab.output_path import check_file_output

# A window larger than any screen (8K is 7680 x 4320) would need a backing store of gigabytes.
MIN_SIZE, MAX_SIDE = (320, 240), 8192
MAX_QUIT_AFTER_S = 7 * 86400.0  # a scripted window closes within a week (Qt's timers stop at 24 days)
# Small enough that the tiny model fills it with the real trace. A big GPU would give the tiny model
# millions of blocks it never fills, so its default run keeps this budget there too. (The trained
# model's default run is sized in app/lab/chat_defaults.py, with its reasons.)
GUI_CPU_KV_BUDGET = 64 * 1024**2
DEFAULT_WORKLOAD = "azure-conv"  # with the trained model on the real backend: LIVE_CHAT_WORKLOAD
# The simulated GPU's default traffic, as `kvscope run` and `make demo` use: chat lengths fitted to the
# Azure conversation trace, arriving at 4 a second, fill the default L4's pool ~8 s in. The trace
# itself starts at ~2 requests a second and reaches ~35 % of that pool by 15 s: no wall to see.
SIMULATED_WORKLOAD = "chat"


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("gui", help="the explorer window")
    parser.add_argument("--model", metavar="PRESET",
                        help=f"model preset (default {DEFAULT_REAL_MODEL} on the real backend, answering "
                             f"{LIVE_CHAT_WORKLOAD}; {RANDOM_WEIGHTS_MODEL} if it is not installed)")
    parser.add_argument("--model-path", metavar="DIR", help="a local Hugging Face model directory (real backend)")
    parser.add_argument("--hardware", metavar="PRESET",
                        help="hardware preset; a GPU preset selects the simulated backend")
    parser.add_argument("--workload", metavar="PRESET", help=f"workload preset (default {LIVE_CHAT_WORKLOAD} with "
                                                             f"{LIVE_CHAT_MODEL}, {SIMULATED_WORKLOAD} on the "
                                                             f"simulated backend, else {DEFAULT_WORKLOAD})")
    parser.add_argument("--backend", choices=BACKENDS, help="default: real on this machine")
    parser.add_argument("--theme", choices=("dark", "light", "contrast"), default=None,
                        help="colours: dark (default), light, or contrast (high contrast, as demo mode uses)")
    parser.add_argument("--size", type=_size, default=None, metavar="WxH",
                        help=f"window size (default {DEFAULT_SIZE[0]}x{DEFAULT_SIZE[1]}, or the screen's if smaller)")
    parser.add_argument("--quit-after", type=options.bounded(0.0, MAX_QUIT_AFTER_S), metavar="SECONDS",
                        help="close after this many seconds")
    parser.add_argument("--screenshot", metavar="PNG", help="with --quit-after: save the window as a PNG first")
    parser.add_argument("--demo", action="store_true",
                        help="demo mode for talks: fullscreen (or --size), large fonts, high contrast (or --theme), settings hidden "
                             "(F11 toggles)")
    parser.add_argument("--replay", metavar="FILE", help="replay a recorded run (.kvrec): no model, no GPU needed")
    parser.add_argument("--scenario", metavar="NAME", help="open a guided scenario (see `kvscope scenarios`)")
    parser.set_defaults(func=run)


DEFAULT_SIZE = (1600, 960)


def default_size(available) -> tuple[int, int]:
    """The default window inside the screen: on a 1280x720 screen without a window manager (a
    fresh `make run` under a bare X server) 1600x960 put the live plots and the status bar off it."""
    return min(DEFAULT_SIZE[0], available.width()), min(DEFAULT_SIZE[1], available.height())


def _size(text: str) -> tuple[int, int]:
    try:
        # "1600×960", as screen sizes are printed (the multiplication sign), is meant as 1600x960
        width, height = (int(v) for v in text.lower().replace("\u00d7", "x").split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected WIDTHxHEIGHT, e.g. 1920x1080, got {text[:40]!r}") from None
    if width < MIN_SIZE[0] or height < MIN_SIZE[1] or width > MAX_SIDE or height > MAX_SIDE:
        raise argparse.ArgumentTypeError(f"a window from {MIN_SIZE[0]}x{MIN_SIZE[1]} to {MAX_SIDE}x{MAX_SIDE}, "
                                         f"got {text[:40]!r}")
    return width, height


def initial_values(args) -> dict:
    """The window's first settings: the real backend on this machine with the trained model answering
    real chat text (tiny-llama replaying the Azure trace if the trained model is not installed), or
    on the simulated backend `kvscope run`'s chat traffic, unless the command line says otherwise."""
    from kvscope.app.lab.cuda_device import cuda_device_visible

    backend = args.backend or ("simulated" if args.hardware not in (None, THIS_MACHINE) else "real")
    if args.model or backend != "real":
        model = args.model or DEFAULT_MODEL
    else:
        model = DEFAULT_REAL_MODEL if trained_model_available() else RANDOM_WEIGHTS_MODEL
    hardware = args.hardware or (THIS_MACHINE if backend == "real" else DEFAULT_HARDWARE)
    load_model(model)  # unknown names fail here, with the list of known ones
    load_hardware(hardware)
    live_chat = backend == "real" and model == LIVE_CHAT_MODEL and not args.model_path
    default_workload = (LIVE_CHAT_WORKLOAD if live_chat else SIMULATED_WORKLOAD if backend == "simulated"
                        else DEFAULT_WORKLOAD)
    workload = load_workload(args.workload or default_workload)
    budgeted = backend == "real" and (not cuda_device_visible() or (model == RANDOM_WEIGHTS_MODEL and not args.model_path))
    engine = engine_defaults()
    if live_chat:
        engine.update(LIVE_CHAT_ENGINE)
    elif budgeted:
        engine["kv_cache_memory_bytes"] = GUI_CPU_KV_BUDGET
    scale = {"num_requests": min(workload.num_requests, 100_000), "arrival_rate_per_s": None}
    if live_chat and workload.name == LIVE_CHAT_WORKLOAD:
        scale.update(LIVE_CHAT_WORKLOAD_SETTINGS)
    return {
        "backend": backend, "model": model, "hardware": hardware, "workload": workload.name,
        "model_path": args.model_path, **engine, **scale, "trace_speedup": 1.0,
        "prompt_median": None, "output_median": None, "shared_prefix_fraction": None,
    }


def check_flags(args) -> dict:
    """Every flag checked before the window exists (a dialog at start-up would hold a scripted run,
    --quit-after, forever); returns the window's first settings."""
    replay, scenario = getattr(args, "replay", None), getattr(args, "scenario", None)
    user_presets_root()  # the window lists the user's presets: KVSCOPE_CONFIG_DIR through a file is said now
    if args.screenshot:
        if args.quit_after is None:
            raise ConfigError(f"--screenshot {args.screenshot}: needs --quit-after SECONDS (the window is saved "
                              "just before it closes)")
        check_file_output("--screenshot", args.screenshot, "a screenshot", {"recording": replay} if replay else None)
        check_screenshot_target(args.screenshot)
    if replay:
        ignored = [flag for flag, value in (("--scenario", scenario), ("--model", args.model), ("--model-path", args.model_path),
                                            ("--hardware", args.hardware), ("--workload", args.workload),
                                            ("--backend", args.backend)) if value]
        if ignored:  # a replay shows the recorded run as it was; these would be dropped without a word
            raise ConfigError(f"--replay {replay} shows the run it recorded; {', '.join(ignored)} would not apply: "
                              "give either --replay or a run to start")
        check_replay(replay)
    if scenario:
        from kvscope.app.lab.scenarios import load_scenario

        options.check_scenario_path(scenario)  # a folder or a pipe is said as one, not "no such file"
        load_scenario(scenario).comparison_spec()  # an unknown name or a bad file fails here, with the reason
    if args.model_path:
        check_model_sources(args)
        check_model_path(args.model_path)
    elif args.backend == "real" and args.hardware not in (None, THIS_MACHINE):  # as `kvscope run` says
        raise ConfigError(f"--hardware {args.hardware} describes a simulated target; the real backend runs on this "
                          "machine: drop --hardware, or --backend real")
    values = initial_values(args)
    if values["backend"] == "real" and not args.model_path and values["model"] != DEFAULT_REAL_MODEL:
        # the window says it in its Model field, but a scripted run (--quit-after) ended 0 over a window that
        # could not run: said here, as `kvscope run` says it
        from kvscope.app.lab.models.loader import check_random_weights_fit

        check_random_weights_fit(load_model(values["model"]), load_hardware(values["hardware"]).memory_bytes)
    return values


def check_model_sources(args) -> None:
    """--model-path beside --model, or with the simulated backend (given, or chosen by a GPU
    --hardware), would leave one of them unused without a word: refused as `run` refuses it."""
    if args.model:
        raise ConfigError(f"--model {args.model} and --model-path {args.model_path} both name the model; give one")
    if args.backend == "simulated" or (args.backend is None and args.hardware not in (None, THIS_MACHINE)):
        raise ConfigError(options.MODEL_PATH_NEEDS_REAL + (f" (--hardware {args.hardware} selects the simulated one)"
                                                           if args.backend is None else ""))


def check_replay(path: str) -> None:
    """The recording opens, every record's checksum holds, and its first and last states decode:
    corrupt or forged, it is one line and exit 2 here, not a window that cannot show it."""
    from kvscope.app.lab.recording import Recording

    if not Path(path).is_file():
        what = ("is a folder" if Path(path).is_dir() else "not a regular file (a device or a pipe)"
                if Path(path).exists() else "no such file")
        raise ConfigError(f"--replay {path}: {what}; give a recording (.kvrec)")
    from kvscope.app.lab.recording.records import is_attached, read_header

    if is_attached(read_header(path)):
        from kvscope.app.lab.recording.attached_reader import AttachedRecording

        AttachedRecording.open(path, allow_truncated=True)  # reads and checks every record and batch
        return
    with Recording.open(path, allow_truncated=True) as recording:
        recording.initial_snapshot()
        if recording.num_steps:
            recording.step(recording.num_steps - 1)
            recording.snapshot_at(recording.num_steps - 1)


def check_model_path(path: str) -> None:
    """A model directory the real backend can load: config.json, a supported architecture, weights
    (their exact match with config.json is checked as they load)."""
    from kvscope.app.lab.models.config_json import model_from_hf_config
    from kvscope.app.lab.models.loader import check_model_directory

    cfg = check_model_directory(path)
    model_from_hf_config(cfg, Path(path).name or str(path), label=f"--model-path {path}: config.json")
    check_model_weights(path)


def check_model_weights(path: str) -> None:
    """Weights whose names or shapes disagree with config.json are refused now, not found by the
    engine process after the window opened. transformers lays the model out on the meta device
    (no tensor is read: a fraction of a second for SmolLM2) in a process of its own, so the window's
    process never imports torch (210 MiB)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        problem = pool.submit(weights_mismatch, str(path)).result()
    if problem:
        raise ConfigError(f"--model-path {problem}")


def weights_mismatch(path: str) -> str | None:
    """What is wrong with a model directory's weights against its config.json, None if nothing
    (run in a process of its own: it imports torch and transformers)."""
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from safetensors import SafetensorError
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    from kvscope.app.lab.models.loader import check_weights_match

    hf_logging.set_verbosity_error()  # the mismatch is this function's to report, in one line
    hf_logging.disable_progress_bar()
    try:
        _, loading_info = AutoModelForCausalLM.from_pretrained(
            path, device_map="meta", output_loading_info=True, local_files_only=True, trust_remote_code=False,
            ignore_mismatched_sizes=True)
        check_weights_match(Path(path), loading_info)
    except ConfigError as exc:
        return str(exc).removeprefix("model directory ")
    except (SafetensorError, OSError) as exc:  # weights that cannot be read: corrupt, cut short, missing
        first_line = (str(exc).splitlines() or [type(exc).__name__])[0]
        return f"{path}: cannot read its weights: {first_line[:300]}"
    except Exception:  # noqa: BLE001 - e.g. a quantisation config the meta device cannot lay out:
        return None  # not a mismatch; the engine process, which really loads it, says what is wrong
    return None


def run(args) -> int:
    values = check_flags(args)
    replay, scenario = getattr(args, "replay", None), getattr(args, "scenario", None)
    from kvscope.app.cli.qt_system_libs import check_qt_system_libs

    check_qt_system_libs()  # a missing X11 library: one line naming the apt packages, not Qt's abort
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    from kvscope.app.gui.main_window import MainWindow

    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("kvscope")
    window = MainWindow(values, theme=args.theme or "dark", replay=replay, scenario=scenario)
    window.resize(*(args.size or default_size(app.primaryScreen().availableGeometry())))
    window.show()
    window.arrange_docks()
    if args.size is not None and not getattr(args, "demo", False):  # demo mode is fullscreen whatever the size
        refuse_size_below_minimum(window, args.size)
    if getattr(args, "demo", False):  # at --size and in --theme when given (a projector's, rehearsed)
        window.start_demo(size=args.size, theme=args.theme)
    failures = []
    if args.quit_after is not None:
        def finish():
            if args.screenshot:
                failures.extend(grown_past(window, args.size, getattr(args, "demo", False) and args.size is None)
                                or save_screenshot(window, args.screenshot))
            window.close()
            app.quit()

        def hold_still_then_finish():
            # The views redraw at a few hertz each (the block map's legend 4 times a second): a grab
            # of a running window caught the legend at 93 % beside a status line at 81 %. Paused,
            # every view shows the same last frame by the time the picture is taken.
            if args.screenshot and window.play_action.text() == "Pause":
                window.toggle_play()
            QTimer.singleShot(SCREENSHOT_SETTLE_MS if args.screenshot else 0, finish)

        QTimer.singleShot(int(args.quit_after * 1000), hold_still_then_finish)
    code = app.exec()
    if failures:
        raise ConfigError(failures[0])
    return code


def refuse_size_below_minimum(window, size: tuple[int, int]) -> None:
    """--size smaller than the window can be: Qt quietly made it its minimum instead (320x240 gave a
    742x636 screenshot). The minimum is the laid-out window's (its docks and panels at this font),
    known only once it is built and arranged (below 900 px high the docks share one column)."""
    window.resize(*size)  # again: arranged for a short window (docks in one column), it may take less room
    window.layout().activate()
    least = window.minimumSize().expandedTo(window.minimumSizeHint())
    if least.width() > size[0] or least.height() > size[1]:
        window.close()
        raise ConfigError(f"--size {size[0]}x{size[1]}: the window cannot be smaller than "
                          f"{least.width()}x{least.height()} (its panels and docks need the room); give at least that")


def grown_past(window, size: tuple[int, int] | None, demo: bool) -> list[str]:
    """[why not] when the window is now larger than --size: a panel's minimum grew once the engine
    reported (the memory bar's rows, the prompt box), and the screenshot would not be the size asked."""
    if size is None or demo or (window.width() <= size[0] and window.height() <= size[1]):
        return []
    return [f"--size {size[0]}x{size[1]}: the window grew to {window.width()}x{window.height()} once its panels "
            "filled (its minimum with this run); no screenshot was saved: give at least that"]


# Formats Qt writes that do not keep the window as shown: `--screenshot w.ico` saved the 1600x960 window
# shrunk to 256x256 (.cur too), and .xbm, .wbmp and .pbm keep one bit a pixel (the plots' colours gone).
_ONE_BIT = "one bit a pixel (black or white: the plots' colours and the dark theme lost)"
NOT_A_SCREENSHOT = {"ico": "an icon, at most 256x256 (Qt shrinks the window to that)",
                    "cur": "a cursor, at most 256x256 (Qt shrinks the window to that)",
                    "xbm": _ONE_BIT, "wbmp": _ONE_BIT, "pbm": _ONE_BIT}


def check_screenshot_target(path: str) -> None:
    """An image file Qt can write: a regular file (a device such as /dev/full takes no image
    whole) with the suffix of a format Qt writes, or no suffix (PNG)."""
    from PySide6.QtGui import QImageWriter

    from kvscope.app.lab.output_path import replaces_in_place

    if not replaces_in_place(path):
        raise ConfigError(f"--screenshot {path}: not a regular file (a device or a pipe); give an image file name")
    suffix = Path(path).suffix.lstrip(".").lower()
    formats = sorted(f for f in (bytes(f).decode() for f in QImageWriter.supportedImageFormats())
                     if f not in NOT_A_SCREENSHOT)
    if suffix in NOT_A_SCREENSHOT:
        raise ConfigError(f"--screenshot {path}: .{suffix} is {NOT_A_SCREENSHOT[suffix]}, which cannot hold the "
                          f"window as it is; use .png or one of {', '.join('.' + f for f in formats)}")
    if suffix and suffix not in formats:
        raise ConfigError(f"--screenshot {path}: Qt writes no .{suffix} images; use .png or one of "
                          f"{', '.join('.' + f for f in formats)}")


SCREENSHOT_SETTLE_MS = 400  # longer than the slowest view's redraw interval (the legend's 250 ms)


def save_screenshot(window, path: str) -> list[str]:
    """The window as an image at path (its format from the suffix, PNG without one), written whole
    (a temporary file renamed into place); [] or [why it could not be written]."""
    from kvscope.app.lab.output_path import atomic_output

    image_format = Path(path).suffix.lstrip(".").upper() or "PNG"
    try:
        with atomic_output(path) as partial:
            if not window.grab().save(str(partial), image_format):
                raise OSError(f"could not be written as {image_format}")
    except (OSError, ConfigError) as exc:
        return [f"--screenshot {path}: {exc.strerror if getattr(exc, 'strerror', None) else exc}"]
    return []
