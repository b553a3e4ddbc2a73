"""`kvscope --self-test`: check an installation end to end and say so, one line per check.

    kvscope --self-test             every check; exit code 0 only if all passed
    kvscope --self-test --startup   only time this process from launch to a drawn window

The checks, in order: every kvscope module and the libraries import; every preset loads and the
data files are there (the Azure trace with its attribution, the icon); a few engine steps on the
simulated backend; the default tiny model is built from its preset (into a temporary cache, so
the check leaves the user's cache alone and always exercises the build) and runs a few real steps;
the explorer window opens (offscreen when there is no display) and draws an engine snapshot; and a
fresh process launched the same way a user launches kvscope draws its window, timed from its start.

Works the same from a source checkout, an installed wheel and the frozen bundle.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

MODULE_IMPORTED_AT = time.perf_counter()
STARTUP_GOAL_S = 3.0
WINDOW_TIMEOUT_S = 60.0
STARTUP_TIMEOUT_S = 120.0
SUBPACKAGES = ("kvscope.app", "kvscope.app.lab", "kvscope.app.lab.verify", "kvscope.app.host", "kvscope.app.gui",
               "kvscope.app.cli", "kvscope.app.bench", "kvscope.engine", "kvscope.engine.runners", "kvscope.widgets",
               "kvscope.presets", "kvscope.resources")
LIBRARIES = ("numpy", "torch", "transformers", "safetensors", "accelerate", "tokenizers", "regex", "yaml",
             "PySide6.QtCore", "PySide6.QtGui", "PySide6.QtWidgets", "PySide6.QtSvg", "pyqtgraph")


class CheckFailed(Exception):
    """A check's own verdict (as opposed to an unexpected exception inside it)."""


@dataclass
class Result:
    name: str
    passed: bool
    seconds: float
    detail: str


# -- timing ------------------------------------------------------------------------------------------
def process_age_s() -> float | None:
    """Seconds since this process started, from the operating system's record (Linux), else from
    the frozen entry script's timestamp, else None."""
    try:
        with open("/proc/self/stat", encoding="ascii") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        started_ticks = int(fields[19])  # field 22 of proc(5), counted after the command name
        return time.clock_gettime(time.CLOCK_BOOTTIME) - started_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        pass
    entry = os.environ.get("KVSCOPE_ENTRY_TIME")
    if entry and getattr(sys, "frozen", False):
        try:
            return time.time() - float(entry)
        except ValueError:
            pass
    return None


# -- Qt set-up -----------------------------------------------------------------------------------------
def choose_qt_platform() -> str:
    """Offscreen when there is no display to open a window on (Linux without X11 or Wayland)."""
    if (sys.platform.startswith("linux") and not os.environ.get("QT_QPA_PLATFORM")
            and not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY")):
        os.environ["QT_QPA_PLATFORM"] = "offscreen"
    return os.environ.get("QT_QPA_PLATFORM", "native")


def default_gui_args() -> SimpleNamespace:
    """What `kvscope gui` with no options passes to initial_values()."""
    return SimpleNamespace(backend=None, model=None, hardware=None, workload=None, model_path=None)


def open_window(values: dict, timeout_s: float, size=(1600, 960), min_step: int = 0):
    """MainWindow as app/gui.py makes it, processing events until an engine snapshot of at least
    `min_step` steps is drawn.

    Returns (window, app, times): seconds from the call until the window was drawn the first time
    ("drawn") and until an engine snapshot was drawn in it ("snapshot"). The caller closes the window."""
    from PySide6.QtCore import QEventLoop
    from PySide6.QtWidgets import QApplication

    from kvscope.app.gui.main_window import MainWindow

    started = time.perf_counter()
    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("kvscope")
    window = MainWindow(values, theme="dark")
    try:
        window.resize(*size)
        window.show()
        window.arrange_docks()
        app.processEvents()
        check_image(window.grab().toImage())  # renders every view once, as the first paint does
        times = {"drawn": time.perf_counter() - started}
        deadline = started + timeout_s

        def waiting() -> bool:
            snap = window.latest_snapshot
            return ((snap is None or snap.step < min_step) and not window.errors_shown
                    and time.perf_counter() < deadline)

        while waiting():
            app.processEvents(QEventLoop.AllEvents, 20)
            time.sleep(0.005)
        snap = window.latest_snapshot
        if snap is None or snap.step < min_step:
            reason = (window.errors_shown[-1].strip().splitlines()[-1] if window.errors_shown
                      else f"none in {timeout_s:.0f} s")
            raise CheckFailed(f"no engine snapshot{f' after step {min_step}' if min_step else ''} drawn: {reason}")
        app.processEvents()
        check_image(window.grab().toImage())
        times["snapshot"] = time.perf_counter() - started
    except BaseException:
        close_window(window, app)  # stops the engine process too
        raise
    return window, app, times


def check_image(image) -> None:
    if image.isNull() or image.width() < 320 or image.height() < 240:
        raise CheckFailed(f"the window rendered an empty image ({image.width()}x{image.height()})")
    colours = {image.pixel(x, y) for x in range(0, image.width(), 37) for y in range(0, image.height(), 29)}
    if len(colours) < 3:
        raise CheckFailed("the window rendered a blank image")


def close_window(window, app) -> None:
    window.close()
    window.deleteLater()
    app.processEvents()


# -- checks --------------------------------------------------------------------------------------------
def check_imports() -> str:
    import pkgutil

    names = []
    for package_name in SUBPACKAGES:
        package = importlib.import_module(package_name)
        names.append(package_name)
        for info in pkgutil.iter_modules(package.__path__):
            if info.ispkg or info.name == "__main__":
                continue
            name = f"{package_name}.{info.name}"
            importlib.import_module(name)
            names.append(name)
    for name in ("kvscope.app.cli.main", "kvscope.app.gui.main_window", "kvscope.engine.runners.real"):
        if name not in names:
            raise CheckFailed(f"{name} was not found among the installed modules")
    versions = []
    for library in LIBRARIES:
        module = importlib.import_module(library)
        version = getattr(module, "__version__", None)
        if version and "." not in library:
            versions.append(f"{library} {version}")
    import torch
    from PySide6 import QtCore

    versions.append(f"Qt {QtCore.qVersion()}")
    versions.append("CUDA " + (torch.version.cuda or "none") + (" (available)" if torch.cuda.is_available() else ""))
    return f"{len(names)} kvscope modules; " + ", ".join(versions)


def check_presets() -> str:
    from importlib import resources

    from kvscope.app.lab import presets as p
    from kvscope.app.lab.workload import generate_requests

    root = resources.files("kvscope.presets")
    loaders = {"models": p.load_model, "hardware": p.load_hardware, "workloads": p.load_workload}
    if hasattr(p, "load_scenario") and (root / "scenarios").is_dir():
        loaders["scenarios"] = p.load_scenario
    counts = []
    for kind, loader in loaders.items():
        names = p.builtin_preset_names(kind)
        if not names:
            raise CheckFailed(f"no {kind} presets found under {root}")
        for name in names:
            preset = loader(name)
            if kind == "workloads":  # trace workloads read their trace here
                if not list(generate_requests(preset.with_overrides(num_requests=3), 32000, seed=0)):
                    raise CheckFailed(f"workload {name} generated no requests")
        counts.append(f"{len(names)} {kind}" + (" (and this-machine, detected)" if kind == "hardware" else ""))
    # every TOML file under presets/ parses, whichever kind it is
    stack, toml_files = [root], 0
    while stack:
        for entry in stack.pop().iterdir():
            if entry.is_dir():
                stack.append(entry)
            elif entry.name.endswith(".toml"):
                p.read_toml(entry, f"preset file {entry.name}")
                toml_files += 1
    traces = root / "traces"
    for name in ("azure_conv.csv", "ATTRIBUTION.md"):
        if not (traces / name).is_file():
            raise CheckFailed(f"presets/traces/{name} is missing")
    attribution = (traces / "ATTRIBUTION.md").read_text(encoding="utf-8")
    if "CC-BY" not in attribution.upper().replace(" ", "-"):
        raise CheckFailed("presets/traces/ATTRIBUTION.md does not state the CC-BY licence")
    trace_rows = sum(1 for _ in (traces / "azure_conv.csv").open(encoding="utf-8")) - 1
    icon = resources.files("kvscope.resources") / "kvscope.svg"
    if not icon.is_file() or b"<svg" not in icon.read_bytes():
        raise CheckFailed("resources/kvscope.svg is missing or not an SVG")
    return (", ".join(counts) + f" ({toml_files} TOML files); Azure trace {trace_rows:,} rows with its CC-BY "
            f"attribution; icon")


def check_simulated() -> str:
    from kvscope.engine import Engine, EngineArgs
    from kvscope.app.lab.presets import load_hardware, load_model, load_workload
    from kvscope.app.lab.workload import generate_requests

    model, hardware = load_model("llama-3-8b"), load_hardware("h100-80gb")
    engine = Engine(model, hardware, EngineArgs())
    spec = load_workload("chat").with_overrides(num_requests=64, arrival_rate_per_s=0.0)
    engine.add_workload(generate_requests(spec, model.vocab_size, seed=0))
    steps = 0
    while steps < 40 and engine.step() is not None:
        steps += 1
    snap = engine.snapshot()
    if steps == 0 or snap.num_running + engine.metrics.completed == 0 or snap.count(2) + snap.count(3) == 0:
        raise CheckFailed(f"the engine did not run: {steps} steps, {snap.num_running} running")
    return (f"{steps} steps of chat on llama-3-8b / h100-80gb: {snap.num_running} running, "
            f"KV {snap.kv_usage * 100:.1f} % of {snap.num_blocks:,} blocks, engine clock {snap.time_s:.2f} s")


def check_real(cache: Path) -> str:
    from kvscope.engine import EngineArgs
    from kvscope.app.lab.presets import load_model
    from kvscope.app.lab.real_backend import create_real_engine, load_for_real_backend
    from kvscope.app.lab.verify.tiny_model import cache_dir, ensure_random_model

    if cache_dir() != cache:
        raise CheckFailed(f"the model cache is {cache_dir()}, expected the temporary {cache}")
    shape = load_model("tiny-llama")
    started = time.perf_counter()
    directory = ensure_random_model(shape)
    built_s = time.perf_counter() - started
    size = sum(f.stat().st_size for f in directory.iterdir())
    tokenizer_class = write_test_tokenizer(directory)
    loaded = load_for_real_backend("tiny-llama")
    params = sum(t.numel() for t in loaded.hf_model.parameters())
    if loaded.tokenizer is None or type(loaded.tokenizer).__name__ != tokenizer_class:
        raise CheckFailed(f"the model's {tokenizer_class} did not load (got {type(loaded.tokenizer).__name__})")
    if not loaded.tokenizer.encode("the kv cache", add_special_tokens=False):
        raise CheckFailed(f"{tokenizer_class} encoded nothing")
    engine = create_real_engine(loaded, EngineArgs(num_gpu_blocks_override=64, max_model_len=256),
                                record_outputs=True)
    prompts = [list(range(100 + 7 * i, 140 + 7 * i)) for i in range(3)]
    for prompt in prompts:
        engine.add_request(prompt, max_tokens=4)
    steps, started = 0, time.perf_counter()
    while engine.has_unfinished_requests() and steps < 50:
        engine.step()
        steps += 1
    stepped_s = time.perf_counter() - started
    outputs = engine.outputs or {}
    tokens = sum(len(v) for v in outputs.values())
    if len(outputs) != len(prompts) or tokens != 4 * len(prompts):
        raise CheckFailed(f"expected 3 requests x 4 tokens, got {tokens} tokens over {len(outputs)} requests")
    if not all(0 <= t < shape.vocab_size for v in outputs.values() for t in v):
        raise CheckFailed("a sampled token id is outside the vocabulary")
    return (f"built tiny-llama ({params / 1e6:.1f} M parameters, {size / 2**20:.0f} MiB) in {built_s:.1f} s, "
            f"loaded with a {tokenizer_class}; {steps} steps on {loaded.device}, {tokens} tokens in {stepped_s:.2f} s")


def write_test_tokenizer(directory: Path) -> str:
    """A small byte-level BPE tokenizer beside the model, declared as a Qwen2Tokenizer the way a
    downloaded model declares its own, so loading exercises transformers' tokenizer look-up."""
    import json

    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel()
    text = ["the kv cache, not compute, decides how many requests a gpu can serve"] * 20
    tokenizer.train_from_iterator(text, trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<s>", "</s>"],
                                                            show_progress=False))
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>",
                            unk_token="<unk>").save_pretrained(directory)
    config_path = directory / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["tokenizer_class"] = "Qwen2Tokenizer"
    config_path.write_text(json.dumps(config), encoding="utf-8")
    return "Qwen2Tokenizer"


def check_qt_system_libs() -> str:
    """The X11 libraries Qt's xcb plugin links against are on this machine (a fresh Debian or
    Ubuntu lacks libxcb-cursor0 and others). A headless run (offscreen: no display, as in CI)
    opens no X11 window, so there a missing library is named but does not fail the check: the
    window check below proves what this run can do."""
    from kvscope.app.cli.qt_system_libs import install_command, missing_for_xcb, packages_for, problem, uses_xcb, xcb_plugin

    plugin = xcb_plugin()
    if plugin is None:
        return "no X11 platform plugin in this Qt: nothing to check"
    missing = missing_for_xcb()
    if not missing:
        return f"every library {plugin.name} links against is installed"
    if uses_xcb():
        raise CheckFailed(problem(missing))
    packages, unknown = packages_for(missing)
    fix = f" ({install_command(packages)})" if packages and not unknown else ""
    return (f"not needed here: Qt runs headless ({os.environ.get('QT_QPA_PLATFORM', 'no X11')}); a window on an "
            f"X11 desktop would need {', '.join(missing)}{fix}")


def check_window(trained_model_from: Path | None = None) -> str:
    from kvscope.app.cli.gui import initial_values

    values = initial_values(default_gui_args())  # the real backend with tiny-llama, as a user gets it
    window, app, times = open_window(values, WINDOW_TIMEOUT_S, min_step=1)
    snap = window.latest_snapshot
    backend = window.engine_info["backend"] if window.engine_info else "?"
    size = f"{window.width()}x{window.height()}"
    close_window(window, app)
    model = (f"the trained model as converted earlier in {trained_model_from}" if trained_model_from else
             "the trained model converted first, as on a first launch")
    return (f"{size} on {app.platformName()}, {backend} backend: drawn after {times['drawn']:.2f} s, engine "
            f"snapshot (step {snap.step}, {snap.num_blocks:,} blocks) drawn after {times['snapshot']:.2f} s ({model})")


def reuse_converted_trained_model(converted: Path) -> Path | None:
    """The trained model as converted in the user's own cache, linked (or copied) into the self-test's
    temporary one; None where there is none whole to reuse, and the window check converts it as a first
    launch does (~25 s of a ~55 s self-test on a 2-core machine)."""
    from kvscope.app.lab.trained_model import is_converted, trained_model_dir

    target = trained_model_dir()
    if target == converted or not is_converted(converted):
        return None

    def link_or_copy(source, destination):
        try:
            os.link(source, destination)
        except OSError:  # another file system, or one without hard links
            shutil.copy2(source, destination)

    try:
        shutil.copytree(converted, target, copy_function=link_or_copy)
    except (OSError, shutil.Error):
        shutil.rmtree(target, ignore_errors=True)
        return None
    return converted if is_converted(target) else None


def startup_command() -> list[str]:
    if getattr(sys, "frozen", False):
        return [sys.executable, "--self-test", "--startup"]
    return [sys.executable, "-m", "kvscope.app.bench.self_test", "--startup"]


def check_startup() -> str:
    """A fresh process, started the way kvscope is launched, timed from its start to a drawn window."""
    completed = subprocess.run(startup_command(), capture_output=True, text=True, timeout=STARTUP_TIMEOUT_S,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"})
    lines = [line for line in completed.stdout.splitlines() if line.startswith("start-up:")]
    if completed.returncode != 0 or not lines:
        tail = (completed.stderr.strip() or completed.stdout.strip()).splitlines()[-3:]
        raise CheckFailed(f"the start-up probe exited {completed.returncode}: {' | '.join(tail)}")
    return lines[-1][len("start-up: "):]


# -- the start-up probe -----------------------------------------------------------------------------
def run_startup_probe() -> int:
    """`kvscope --self-test --startup`: what `kvscope gui` does, timed from this process's start."""
    platform = choose_qt_platform()
    origin_age = process_age_s()
    if origin_age is None:  # no record of the process start: count from this module's import
        origin, origin_age = "this module's import", time.perf_counter() - MODULE_IMPORTED_AT
    else:
        origin = "process start"
    probe_started = time.perf_counter()
    from kvscope.app.cli.gui import initial_values

    try:
        values = initial_values(default_gui_args())
        before_window = time.perf_counter() - probe_started
        window, app, times = open_window(values, STARTUP_TIMEOUT_S)
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        print(f"start-up: FAILED: {type(exc).__name__}: {exc}", flush=True)
        return 1
    close_window(window, app)
    offset = origin_age + before_window
    drawn, snapshot = offset + times["drawn"], offset + times["snapshot"]
    verdict = "met" if drawn <= STARTUP_GOAL_S else "missed"
    print(f"start-up: window drawn {drawn:.2f} s after {origin}, first engine snapshot drawn at {snapshot:.2f} s "
          f"({values['backend']} backend, {values['model']}, {platform}; launcher to kvscope code "
          f"{origin_age:.2f} s, settings and imports {before_window:.2f} s; goal <= {STARTUP_GOAL_S:.0f} s "
          f"warm: {verdict})", flush=True)
    return 0


# -- the report ------------------------------------------------------------------------------------------
def _run(name: str, check, *args) -> Result:
    started = time.perf_counter()
    try:
        detail = check(*args)
        passed = True
    except CheckFailed as exc:
        detail, passed = str(exc), False
    except Exception as exc:  # noqa: BLE001 - every failure becomes a FAIL line, never a crash
        lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
        where = next((line.strip() for line in reversed(lines) if line.strip().startswith("File ")), "")
        detail, passed = f"{type(exc).__name__}: {exc}  [{where}]", False
    result = Result(name, passed, time.perf_counter() - started, detail)
    print(f"  {'PASS' if passed else 'FAIL'}  {name:<16} {result.seconds:6.2f} s  {detail}", flush=True)
    return result


def where_am_i() -> str:
    if getattr(sys, "frozen", False):
        return f"bundle {Path(sys.executable).resolve().parent}"
    try:
        import kvscope.app

        return f"{Path(next(iter(kvscope.app.__path__))).resolve().parent} (Python {sys.executable})"
    except Exception:  # noqa: BLE001
        return sys.executable


def version() -> str:
    try:
        from importlib.metadata import version as dist_version

        return dist_version("kvscope")
    except Exception:  # noqa: BLE001 - no installed metadata
        return ""


def run_self_test(argv: list[str] | None = None) -> int:
    """Run every check, print one PASS/FAIL line each with its time, and return the exit code: 0
    only if every check passed. `argv` ["--startup"] runs only the start-up probe."""
    argv = list(argv or [])
    if argv == ["--startup"]:
        return run_startup_probe()
    if argv:
        print(f"kvscope --self-test: error: unknown option(s) {' '.join(argv)[:200]}; the only one is --startup",
              file=sys.stderr)
        return 2
    started = time.perf_counter()
    platform = choose_qt_platform()
    print(f"kvscope self-test {version()}".rstrip() + f": {where_am_i()}, {sys.platform}, Qt platform {platform}",
          flush=True)
    from kvscope.app.lab.trained_model import trained_model_dir

    users_trained_model = trained_model_dir()  # before the temporary cache below takes the user's place
    cache = Path(tempfile.mkdtemp(prefix="kvscope-self-test-"))
    saved = os.environ.get("KVSCOPE_CACHE_DIR")
    os.environ["KVSCOPE_CACHE_DIR"] = str(cache)
    try:
        results = [
            _run("imports", check_imports),
            _run("presets", check_presets),
            _run("simulated engine", check_simulated),
            _run("real tiny model", check_real, cache),
            _run("Qt system libs", check_qt_system_libs),
            _run("window", check_window, reuse_converted_trained_model(users_trained_model)),
            _run("start-up", check_startup),
        ]
    finally:
        if saved is None:
            os.environ.pop("KVSCOPE_CACHE_DIR", None)
        else:
            os.environ["KVSCOPE_CACHE_DIR"] = saved
        shutil.rmtree(cache, ignore_errors=True)
    failed = [r.name for r in results if not r.passed]
    total = time.perf_counter() - started
    if failed:
        print(f"self-test: FAILED {len(failed)} of {len(results)} checks ({', '.join(failed)}) in {total:.1f} s",
              flush=True)
        return 1
    print(f"self-test: all {len(results)} checks passed in {total:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(run_self_test(sys.argv[1:]))
