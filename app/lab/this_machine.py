"""The `this-machine` hardware preset: what this workstation actually has, detected at run time.

With a CUDA device its name and memory come from torch; rates come from the matching datasheet
preset when the device is one we know, else from a conservative estimate (labelled as such).
Without one the target is this CPU and its RAM.
"""

from __future__ import annotations

import os

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
    known = {"H100 NVL": "h100-nvl-94gb", "H100": "h100-80gb", "A100-SXM4-40GB": "a100-40gb",
             "A100": "a100-80gb", "L4": "l4-24gb", "RTX 4090": "rtx-4090-24gb"}
    for needle, preset in known.items():
        if needle in name and preset in preset_names("hardware"):
            base = load_hardware(preset)
            return base.replace(name="this-machine", memory_bytes=props.total_memory, gpu_count=count,
                                description=f"{count} x {name} (detected; rates from {preset})")
    return HardwareSpec(
        name="this-machine", memory_bytes=props.total_memory, memory_bandwidth_bytes_per_s=1e12,
        peak_flops={"fp16": 100e12, "fp32": 20e12}, gpu_count=count,
        description=f"{count} x {name} (detected; bandwidth and FLOP/s are estimates)",
    )


def detect_this_machine(use_cuda: bool = True) -> HardwareSpec:
    spec = _cuda_spec() if use_cuda else None
    if spec is not None:
        return spec
    cores = os.cpu_count() or 1
    flops = cores * _CPU_FLOPS_PER_CORE
    return HardwareSpec(
        name="this-machine", kind="cpu", memory_bytes=_cpu_memory_bytes(),
        memory_bandwidth_bytes_per_s=_CPU_BANDWIDTH, peak_flops={"fp32": flops, "bf16": flops, "fp16": flops},
        description=f"this CPU ({cores} cores) and its RAM; bandwidth and FLOP/s are estimates",
        source="detected at run time (os.sysconf); rates estimated",
    )
