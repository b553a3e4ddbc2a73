"""`kvscope gui`: the explorer window, also scriptable for tests and slides."""

from __future__ import annotations

import sys
from pathlib import Path

from kvscope.engine.config import ConfigError
from kvscope.app.lab.presets import load_hardware, load_model, load_workload

# Small enough that the tiny model fills it with the real trace. A big GPU would give the tiny model
# millions of blocks it never fills, so its default run keeps this budget there too.
GUI_CPU_KV_BUDGET = 64 * 1024**2


def initial_values(args) -> dict:
    """The window's first settings: the real backend on this machine with the default model, already
    running a realistic workload, unless the command line says otherwise."""
    import torch

    backend = args.backend or ("simulated" if args.hardware not in (None, "this-machine") else "real")
    model = args.model or ("tiny-llama" if backend == "real" else "llama-3-8b")
    hardware = args.hardware or ("this-machine" if backend == "real" else "h100-80gb")
    load_model(model)  # unknown names fail here, with the list of known ones
    load_hardware(hardware)
    workload = load_workload(args.workload or "azure-conv")
    budgeted = backend == "real" and (not torch.cuda.is_available() or (model == "tiny-llama" and not args.model_path))
    return {
        "backend": backend, "model": model, "hardware": hardware, "workload": workload.name,
        "model_path": args.model_path, "max_model_len": None, "kv_cache_dtype": "auto", "block_size": 16,
        "gpu_memory_utilization": 0.9, "kv_cache_memory_bytes": GUI_CPU_KV_BUDGET if budgeted else None,
        "max_num_seqs": 256, "max_num_batched_tokens": None, "enable_prefix_caching": True,
        "enable_chunked_prefill": True, "scheduling": "continuous", "allocation": "paged",
        "num_requests": min(workload.num_requests, 100_000), "arrival_rate_per_s": None, "trace_speedup": 1.0,
        "prompt_median": None, "output_median": None, "shared_prefix_fraction": None,
    }


def cmd_gui(args) -> int:
    if args.screenshot and not Path(args.screenshot).resolve().parent.is_dir():
        raise ConfigError(f"--screenshot {args.screenshot}: the folder does not exist")
    replay, scenario = getattr(args, "replay", None), getattr(args, "scenario", None)
    # Checked before the window exists: a dialog at start-up would hold a scripted run (--quit-after) forever.
    if replay:
        from kvscope.app.lab.recording import Recording

        if not Path(replay).is_file():
            raise ConfigError(f"--replay {replay}: no such file")
        Recording.open(replay, allow_truncated=True).close()  # corrupt or unreadable: one line, exit 2
    if scenario:
        from kvscope.app.lab.scenarios import load_scenario

        load_scenario(scenario).comparison_spec()  # an unknown name or a bad file fails here, with the reason
    values = initial_values(args)
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
