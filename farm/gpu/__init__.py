"""GPU runtimes: one file per runtime (cuda.py, hip.py) behind the interface in base.py.

Importing this package needs neither a GPU nor an SDK; asking for a runtime that is missing
raises RuntimeUnavailable saying what to install.
"""

from __future__ import annotations

import importlib
import importlib.util
from functools import cache
from types import ModuleType

from farm.gpu.base import (ILLEGAL_ADDRESS, LAUNCH_FAILED, LAUNCH_REJECTED, OTHER, OUT_OF_MEMORY,
                           CompileResult, Compiler, Device, GpuError, KernelArgs,
                           RuntimeUnavailable)

__all__ = ["available_runtimes", "get_compiler", "new_compiler", "open_device", "list_devices", "CompileResult",
           "Compiler", "Device", "GpuError", "KernelArgs", "RuntimeUnavailable",
           "ILLEGAL_ADDRESS", "LAUNCH_FAILED", "LAUNCH_REJECTED", "OUT_OF_MEMORY", "OTHER"]

# runtime -> (our module, the SDK module it needs, the pip extra that brings it)
_RUNTIMES = {"cuda": ("farm.gpu.cuda", "cuda.bindings.driver", "kernel-farm[cuda]"),
             "hip": ("farm.gpu.hip", "hip.hiprtc", "kernel-farm[hip]")}
_COMPILERS = {"sm_": ("cuda", "NvrtcCompiler"), "gfx": ("hip", "HiprtcCompiler")}
_DEVICES = {"cuda": "CudaDevice", "hip": "HipDevice"}


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def available_runtimes() -> list[str]:
    """Runtimes whose Python package is installed here (a GPU may still be absent)."""
    return [name for name, (_, sdk, _) in _RUNTIMES.items() if _importable(sdk)]


def _runtime(name: str) -> ModuleType:
    if name not in _RUNTIMES:
        raise ValueError(f"unknown GPU runtime {name!r}: expected one of {sorted(_RUNTIMES)}")
    module, sdk, extra = _RUNTIMES[name]
    if not _importable(sdk):
        raise RuntimeUnavailable(f"the {name} runtime needs the Python module {sdk}: "
                                 f"pip install '{extra}'")
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise RuntimeUnavailable(f"the {name} runtime could not be imported ({exc}): "
                                 f"pip install '{extra}'") from exc


def new_compiler(target: str) -> Compiler:
    """A new compiler for a target: sm_* -> NVRTC, gfx* -> hipRTC (each compiles one at a time;
    several compile in parallel). Close it when done."""
    for prefix, (runtime, cls) in _COMPILERS.items():
        if target.startswith(prefix):
            return getattr(_runtime(runtime), cls)()
    raise ValueError(f"unknown target {target!r}: expected sm_* (NVIDIA) or gfx* (AMD)")


@cache
def get_compiler(target: str) -> Compiler:
    """The process's shared compiler for a target."""
    return new_compiler(target)


def open_device(runtime: str | None = None, ordinal: int = 0) -> Device:
    """Open GPU `ordinal` of `runtime` (None: the first runtime that has one)."""
    if runtime is not None:
        return getattr(_runtime(runtime), _DEVICES[runtime])(ordinal)
    reasons = []
    for name in _RUNTIMES:
        try:
            return open_device(name, ordinal)
        except RuntimeUnavailable as exc:
            reasons.append(f"{name}: {exc}")
    raise RuntimeUnavailable(f"no GPU {ordinal} here ({'; '.join(reasons)})")


def list_devices() -> list[dict]:
    """Every GPU of every runtime here: runtime, ordinal, name, arch, sm_count, memory.

    An empty list where there is none (no SDK, no driver or no device).
    """
    devices: list[dict] = []
    for name in available_runtimes():
        try:
            devices += _runtime(name).list_devices()
        except (RuntimeUnavailable, GpuError):
            continue
    return devices
