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

# Rough rates for a workstation CPU: dual-channel DDR4/5. Labelled estimates.
_CPU_BANDWIDTH = 20e9
# fp32 FLOPs a core retires per cycle at best (2 per FMA lane), by vector unit: two FMA pipes of 16
# lanes (AVX-512 on Intel's server cores and AMD's Zen 5), of 8 (AVX2 + FMA, AVX-512 on Zen 4, which
# runs it through 256-bit pipes, and the four 128-bit pipes of Apple's and Arm's big cores), or of 4
# (x86 without FMA). Where the flags cannot be read (no /proc/cpuinfo: macOS, Windows; Arm's
# "Features") the AVX2 / NEON rate. An upper bound keeps "compute utilisation" at or under 100 %:
# with the old flat 50 GFLOP/s a core, this project's Zen 4 EPYC ran its linear layers at twice the
# "peak" (108 GFLOP/s a core measured) and a real run printed 143.9 %.
_FLOPS_PER_CYCLE = (("avx512f", 64), ("fma", 32))
_FLOPS_PER_CYCLE_UNKNOWN = 32
_FLOPS_PER_CYCLE_NO_FMA = 16
_ZEN5_FAMILY = 26  # AMD's cpu family from Zen 5 on; Zen 3 and 4 are family 25
# A VM's /proc/cpuinfo gives the base clock; cores boost past it (up to ~1.55x on today's server
# parts: EPYC 9654 2.4 -> 3.7 GHz).
_BOOST_ALLOWANCE = 1.6
_FALLBACK_GHZ = 4.0
# 16-bit matmuls: AVX512-BF16's dot products double bf16's rate, AVX512-FP16 fp16's; AMX tiles
# multiply far more (16x as an upper bound).
_HALF_SPEEDUP = {"bf16": (("amx_bf16", 16), ("avx512_bf16", 2)), "fp16": (("amx_fp16", 16), ("avx512_fp16", 2))}


def _cpu_info() -> tuple[set | None, float]:
    """(the CPU's x86 feature flags, None where they cannot be read; its clock in GHz as an upper
    bound), from /proc/cpuinfo and cpufreq where Linux has them, else a fallback clock."""
    flags, ghz, amd_family = None, 0.0, None
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as cpuinfo:
            lines = cpuinfo.readlines()
    except OSError:
        lines = []
    for line in lines:  # each field on its own: one odd value does not hide the others
        key, _, value = line.partition(":")
        key = key.strip().lower()
        try:
            if key == "flags" and flags is None:
                flags = set(value.split())
            elif key == "cpu mhz" and not ghz:
                ghz = float(value) / 1000 * _BOOST_ALLOWANCE
            elif key == "vendor_id" and value.strip() == "AuthenticAMD":
                amd_family = -1
            elif key == "cpu family" and amd_family == -1:
                amd_family = int(value)
        except ValueError:
            continue
    if flags is not None and amd_family is not None and amd_family < _ZEN5_FAMILY:
        flags.discard("avx512f")  # 256-bit pipes: AVX2's rate
    try:
        with open("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq", encoding="ascii") as top:
            ghz = int(top.read().strip()) / 1e6  # kHz: the boost clock itself
    except (OSError, ValueError):
        pass
    return flags, (ghz if 0 < ghz < 20 else _FALLBACK_GHZ)


def cpu_peak_flops(cores: int) -> dict:
    """Peak FLOP/s of `cores` cores by dtype: FMA lanes x 2 FLOPs x FMA pipes x clock, upper bounds."""
    flags, ghz = _cpu_info()
    if flags is None:
        per_cycle = _FLOPS_PER_CYCLE_UNKNOWN
    else:
        per_cycle = next((n for flag, n in _FLOPS_PER_CYCLE if flag in flags), _FLOPS_PER_CYCLE_NO_FMA)
    fp32 = cores * per_cycle * ghz * 1e9
    peaks = {"fp32": fp32}
    for dtype, speedups in _HALF_SPEEDUP.items():
        peaks[dtype] = fp32 * next((n for flag, n in speedups if flags and flag in flags), 1)
    return peaks


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
    return with_stored_calibration(cpu_machine_key(), HardwareSpec(
        name="this-machine", kind="cpu", memory_bytes=_cpu_memory_bytes(),
        memory_bandwidth_bytes_per_s=_CPU_BANDWIDTH, peak_flops=cpu_peak_flops(cores),
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

    calibration = load_stored_calibration(machine, spec)
    return spec if calibration is None else spec.replace(calibration=calibration)
