"""The `this-machine` hardware preset: what this workstation actually has, detected at run time.

With a CUDA device its name and memory come from torch; rates come from the matching datasheet
preset when the device is one we know, else from a conservative estimate (labelled as such).
Without one the target is this CPU and its RAM. Where `kvscope calibrate` has stored a profile
for this machine (~/.cache/kvscope/calibration/<machine key>.json), its fitted efficiencies and
step overheads replace the datasheet peaks' (app/lab/calibration.py).
"""

from __future__ import annotations

import os
import platform
import re

from kvscope.engine.config import HardwareSpec

# Rough rates for a workstation CPU: dual-channel DDR4/5 and a few AVX2 cores. Labelled estimates.
_CPU_BANDWIDTH = 20e9
_CPU_FLOPS_PER_CORE = 50e9


def _cpu_memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 8 * 1024**3


def _cuda_spec() -> HardwareSpec | None:
    from kvscope.app.lab.cuda_device import cuda_device_visible

    if not cuda_device_visible():  # asking torch would cost the GUI process its 1.5 s import
        return None
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    from kvscope.app.lab.presets import load_hardware, preset_names

    props = torch.cuda.get_device_properties(0)
    count = torch.cuda.device_count()
    name = props.name
    machine = f"cuda-{slug(name)}"
    known = {"H100 NVL": "h100-nvl-94gb", "H100": "h100-80gb", "A100-SXM4-40GB": "a100-40gb",
             "A100": "a100-80gb", "L4": "l4-24gb", "RTX 4090": "rtx-4090-24gb"}
    for needle, preset in known.items():
        if needle in name and preset in preset_names("hardware"):
            base = load_hardware(preset)
            return with_stored_calibration(machine, base.replace(
                name="this-machine", memory_bytes=props.total_memory, gpu_count=count,
                description=f"{count} x {name} (detected; rates from {preset})"))
    return with_stored_calibration(machine, HardwareSpec(
        name="this-machine", memory_bytes=props.total_memory, memory_bandwidth_bytes_per_s=1e12,
        peak_flops={"fp16": 100e12, "fp32": 20e12}, gpu_count=count,
        description=f"{count} x {name} (detected; bandwidth and FLOP/s are estimates)",
    ))


def detect_this_machine(use_cuda: bool = True) -> HardwareSpec:
    spec = _cuda_spec() if use_cuda else None
    if spec is not None:
        return spec
    cores = os.cpu_count() or 1
    flops = cores * _CPU_FLOPS_PER_CORE
    return with_stored_calibration(cpu_machine_key(), HardwareSpec(
        name="this-machine", kind="cpu", memory_bytes=_cpu_memory_bytes(),
        memory_bandwidth_bytes_per_s=_CPU_BANDWIDTH, peak_flops={"fp32": flops, "bf16": flops, "fp16": flops},
        description=f"this CPU ({cores} cores) and its RAM; bandwidth and FLOP/s are estimates",
        source="detected at run time (os.sysconf); rates estimated",
    ))


def slug(text: str) -> str:
    """A device name as a file name: lower case, runs of anything else than letters and digits as '-'."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "unknown"


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as cpuinfo:
            for line in cpuinfo:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def cpu_machine_key() -> str:
    """What names this CPU's calibration profile: its model and its core count."""
    return f"cpu-{slug(cpu_name())}-{os.cpu_count() or 1}cores"


def this_machine_key(use_cuda: bool = True) -> str:
    """The key `kvscope calibrate` stores this machine's profile under (the first CUDA device's when used)."""
    spec_key = None
    if use_cuda:
        from kvscope.app.lab.cuda_device import cuda_device_visible

        if cuda_device_visible():
            import torch

            if torch.cuda.is_available():
                spec_key = f"cuda-{slug(torch.cuda.get_device_properties(0).name)}"
    return spec_key or cpu_machine_key()


def with_stored_calibration(machine: str, spec: HardwareSpec) -> HardwareSpec:
    """The spec with the calibration `kvscope calibrate` stored for this machine, if it did."""
    from kvscope.app.lab.calibration import load_stored_calibration

    calibration = load_stored_calibration(machine)
    return spec if calibration is None else spec.replace(calibration=calibration)
