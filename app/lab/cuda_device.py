"""Whether the real backend will find a CUDA GPU, asked without importing torch.

The window says "on this GPU" or "on this CPU" under a real-backend scenario's question; importing
torch for that word costs the GUI process 1.5 s and 210 MiB (torch 2.13 on a 2-core VM), and
initialising CUDA there would also be wasted: the engine runs elsewhere. torch.cuda.is_available()
is true when torch was built with CUDA and the driver shows a device this process may use; both
are read here from files: torch/version.py and the NVIDIA driver's list of GPUs.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import sys
from pathlib import Path

NVIDIA_GPUS = Path("/proc/driver/nvidia/gpus")  # one folder per GPU while the Linux driver is loaded


def torch_cuda_version() -> str | None:
    """The CUDA version torch was built with ("12.4"), None for a CPU-only build or no torch."""
    try:
        spec = importlib.util.find_spec("torch")  # finds the package without running it
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    version_file = Path(next(iter(spec.submodule_search_locations))) / "version.py"
    try:
        text = version_file.read_text(encoding="utf-8")
    except OSError:
        return None
    match = re.search(r"^cuda\s*(?::[^=\n]*)?=\s*['\"]([^'\"]+)['\"]", text, re.MULTILINE)
    return match.group(1) if match else None


def cuda_device_visible() -> bool:
    """What torch.cuda.is_available() would say in a fresh process, without importing torch."""
    if torch_cuda_version() is None:
        return False
    if os.environ.get("CUDA_VISIBLE_DEVICES", "x").strip() in ("", "-1"):
        return False  # the devices are hidden from this process and its children
    if sys.platform.startswith("linux"):
        try:
            return NVIDIA_GPUS.is_dir() and any(NVIDIA_GPUS.iterdir())
        except OSError:
            return False
    return shutil.which("nvidia-smi") is not None  # Windows: installed with the driver
