"""AMD runtime through hip-python: hipRTC compiles, the HIP module API runs.

Needs `pip install kernel-farm[hip]` and a hipRTC library: ROCm, or on Debian 12 the packages
libamdhip64-5 libhiprtc-builtins5 libamdhip64-dev (`bash .ci/hiprtc.sh`). hip-python opens
`libhiprtc.so`; where that is missing we point it at the library that holds hipRTC (ROCm 5.x
ships hipRTC inside libamdhip64.so.5). FARM_HIPRTC_LIBRARY / FARM_HIP_LIBRARY name one outright.
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import os
import re
import struct
from functools import cache
from typing import Any, Sequence

import numpy as np
from hip import chip, chiprtc, hip, hiprtc

from farm.gpu.base import (ILLEGAL_ADDRESS, LAUNCH_FAILED, LAUNCH_REJECTED, OTHER, OUT_OF_MEMORY,
                           Compiler, Device, GpuError, KernelArgs, RuntimeUnavailable,
                           module_resources)

_HIPRTC_LIBS = ("libhiprtc.so", "libhiprtc.so.7", "libhiprtc.so.6", "libamdhip64.so.5")
_HIP_LIBS = ("libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5")


def _point_at_library(module: Any, env: str, names: tuple[str, ...], symbol: str) -> str:
    """Set hip-python's library name for `module` to the first loadable one exporting `symbol`."""
    names = (os.environ[env],) if os.environ.get(env) else names
    for name in names:
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        if hasattr(lib, symbol):
            module.DLL = name.encode()
            return name
    raise RuntimeUnavailable(
        f"no library with {symbol} found (tried {', '.join(names)}): install ROCm, or on "
        "Debian 12 run `bash .ci/hiprtc.sh` (libamdhip64-5 libhiprtc-builtins5 libamdhip64-dev)")


@cache
def load_hiprtc() -> str:
    """Make hip.hiprtc usable; the library's name. RuntimeUnavailable if there is none."""
    return _point_at_library(chiprtc, "FARM_HIPRTC_LIBRARY", _HIPRTC_LIBS, "hiprtcCompileProgram")


@cache
def load_hip() -> str:
    """Make hip.hip usable; the library's name. RuntimeUnavailable if there is none."""
    return _point_at_library(chip, "FARM_HIP_LIBRARY", _HIP_LIBS, "hipModuleLaunchKernel")


def _rtc_check(result: tuple, call: str) -> Any:
    if result[0] != hiprtc.hiprtcResult.HIPRTC_SUCCESS:
        raise RuntimeError(f"{call}: {result[0].name}")
    return result[1] if len(result) == 2 else result[1:]


def amdgpu_resources(code: bytes) -> dict:
    """Per-kernel registers, LDS, scratch and spills from the code object's metadata note.

    hipRTC (ROCm 5.2's comgr) accepts -Rpass-analysis=kernel-resource-usage but does not return
    the remarks in the program log, so we read the same numbers from the ELF's NT_AMDGPU_METADATA
    note (msgpack). AMD reports spilled register counts, not bytes: spill_bytes stays absent.
    """
    import msgpack

    if code[:4] != b"\x7fELF":
        return {}
    shoff, = struct.unpack_from("<Q", code, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", code, 0x3A)
    kernels = {}
    for i in range(shnum):
        sh_type, = struct.unpack_from("<I", code, shoff + i * shentsize + 4)
        offset, size = struct.unpack_from("<QQ", code, shoff + i * shentsize + 0x18)
        pos, end = offset, offset + size
        while sh_type == 7 and pos + 12 <= end:  # SHT_NOTE
            namesz, descsz, ntype = struct.unpack_from("<III", code, pos)
            name = code[pos + 12:pos + 12 + namesz].rstrip(b"\0")
            desc_at = pos + 12 + (namesz + 3) // 4 * 4
            if name == b"AMDGPU" and ntype == 32:  # NT_AMDGPU_METADATA
                meta = msgpack.unpackb(code[desc_at:desc_at + descsz], strict_map_key=False)
                for k in meta.get("amdhsa.kernels", []):
                    kernels[k[".name"]] = {
                        "registers": k.get(".vgpr_count", 0), "agprs": k.get(".agpr_count", 0),
                        "sgprs": k.get(".sgpr_count", 0),
                        "shared_bytes": k.get(".group_segment_fixed_size", 0),
                        "local_bytes": k.get(".private_segment_fixed_size", 0),
                        "vgpr_spills": k.get(".vgpr_spill_count", 0),
                        "sgpr_spills": k.get(".sgpr_spill_count", 0)}
            pos = desc_at + (descsz + 3) // 4 * 4
    return module_resources(kernels)


@cache
def _hiprtc_version() -> str:
    """hipRTC's and HIP's versions (the library's file name only where HIP's is unknown)."""
    major, minor = _rtc_check(hiprtc.hiprtcVersion(), "hiprtcVersion")
    try:
        load_hip()
        build = f"HIP {hip.hipRuntimeGetVersion()[1]}"
    except RuntimeUnavailable:
        build = load_hiprtc()
    bindings = importlib.metadata.version("hip-python")
    return f"hiprtc {major}.{minor} ({build}, hip-python {bindings})"


class HiprtcCompiler(Compiler):
    """HIP C++ to an AMDGPU code object (ELF) for one gfx* target."""

    name = "hiprtc"
    target_pattern = re.compile(r"gfx[0-9a-f]+(:[a-z]+[+-])*")

    def __init__(self):
        load_hiprtc()
        super().__init__()

    def version(self) -> str:
        return _hiprtc_version()

    def base_options(self, target: str) -> list[str]:
        # hipcc defines __HIP_PLATFORM_AMD__ (kernels select their AMD paths by it); hipRTC
        # (ROCm 5.2) does not, so we do, empty as hipcc does.
        return [f"--offload-arch={target}", "-std=c++17", "-D__HIP_PLATFORM_AMD__="]

    def compile_here(self, source: str, options: list[str]) -> tuple[bytes | None, str, dict]:
        prog = _rtc_check(hiprtc.hiprtcCreateProgram(source.encode(), b"kernel.hip", 0, [], []),
                          "hiprtcCreateProgram")
        try:
            opts = [o.encode() for o in options]
            (err,) = hiprtc.hiprtcCompileProgram(prog, len(opts), opts)
            size = _rtc_check(hiprtc.hiprtcGetProgramLogSize(prog), "hiprtcGetProgramLogSize")
            log = bytearray(size)
            if size:
                _rtc_check(hiprtc.hiprtcGetProgramLog(prog, log), "hiprtcGetProgramLog")
            log = bytes(log).rstrip(b"\0").decode(errors="replace")
            if err != hiprtc.hiprtcResult.HIPRTC_SUCCESS:
                return None, f"{err.name}\n{log}", {}
            size = _rtc_check(hiprtc.hiprtcGetCodeSize(prog), "hiprtcGetCodeSize")
            code = bytearray(size)
            _rtc_check(hiprtc.hiprtcGetCode(prog, code), "hiprtcGetCode")
            return bytes(code), log, amdgpu_resources(bytes(code))
        finally:
            hiprtc.hiprtcDestroyProgram(prog.createRef())


_E = hip.hipError_t
_KINDS = {
    ILLEGAL_ADDRESS: ("hipErrorIllegalAddress",),
    LAUNCH_FAILED: ("hipErrorLaunchFailure", "hipErrorAssert", "hipErrorLaunchTimeOut",
                    "hipErrorIllegalState"),
    LAUNCH_REJECTED: ("hipErrorLaunchOutOfResources", "hipErrorInvalidConfiguration",
                      "hipErrorCooperativeLaunchTooLarge"),
    OUT_OF_MEMORY: ("hipErrorOutOfMemory", "hipErrorMemoryAllocation"),
}
_KIND_OF = {getattr(_E, n): kind for kind, names in _KINDS.items() for n in names if hasattr(_E, n)}


def _check(result: tuple, call: str, unknown: str = OTHER) -> Any:
    """Unwrap a hip-python result tuple; raise GpuError for anything but hipSuccess.

    `unknown` is the kind for codes without one (a launch's own errors are rejections).

    Note: on AMD a memory fault in a kernel often aborts the whole process in the HSA runtime
    before any error code comes back; the actor's restart handles that case.
    """
    err = result[0]
    if err != _E.hipSuccess:
        text = _text(hip.hipGetErrorString(err)[-1])
        raise GpuError(_KIND_OF.get(err, unknown), f"{call}: {err.name}: {text}", int(err))
    return None if len(result) == 1 else result[1] if len(result) == 2 else result[1:]


def _text(value: Any) -> str:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).split(b"\0", 1)[0].decode(errors="replace")
    return str(value)


def _init_runtime() -> int:
    """hipInit; the number of devices. RuntimeUnavailable where there is no runtime or GPU."""
    load_hip()
    try:
        err = hip.hipInit(0)[0]
    except RuntimeError as exc:
        raise RuntimeUnavailable(f"HIP runtime not usable: {exc}") from exc
    if err in (_E.hipErrorNoDevice, _E.hipErrorInvalidDevice, _E.hipErrorInsufficientDriver):
        raise RuntimeUnavailable(f"no HIP device: hipInit returned {err.name}")
    _check((err,), "hipInit")
    return _check(hip.hipGetDeviceCount(), "hipGetDeviceCount")


def _attr(ordinal: int, name: str) -> int:
    return _check(hip.hipDeviceGetAttribute(getattr(hip.hipDeviceAttribute_t, name), ordinal), name)


def _describe(ordinal: int) -> dict:
    props = hip.hipDeviceProp_t()
    _check(hip.hipGetDeviceProperties(props, ordinal), "hipGetDeviceProperties")
    return {"runtime": "hip", "ordinal": ordinal, "name": _text(props.name),
            "arch": _text(props.gcnArchName).split(":", 1)[0],
            "sm_count": _attr(ordinal, "hipDeviceAttributeMultiprocessorCount"),
            "memory": _check(hip.hipDeviceTotalMem(ordinal), "hipDeviceTotalMem")}


def list_devices() -> list[dict]:
    """Every HIP device."""
    return [_describe(i) for i in range(_init_runtime())]


class HipDevice(Device):
    """One AMD GPU, current for this thread; launches go to the null stream."""

    runtime = "hip"

    def __init__(self, ordinal: int = 0):
        count = _init_runtime()
        if not 0 <= ordinal < count:
            raise RuntimeUnavailable(f"no HIP device {ordinal}: this machine has {count}")
        self.ordinal = ordinal
        _check(hip.hipSetDevice(ordinal), "hipSetDevice")
        self.l2_bytes = _attr(ordinal, "hipDeviceAttributeL2CacheSize")

    def fingerprint(self) -> dict:
        info, ordinal = _describe(self.ordinal), self.ordinal
        driver_version = _check(hip.hipDriverGetVersion(), "hipDriverGetVersion")
        runtime_version = _check(hip.hipRuntimeGetVersion(), "hipRuntimeGetVersion")
        return {"runtime": "hip", "gpu_name": info["name"], "arch": info["arch"],
                "sm_count": info["sm_count"],
                "sm_clock_mhz": _attr(ordinal, "hipDeviceAttributeClockRate") // 1000,
                "memory_clock_mhz": _attr(ordinal, "hipDeviceAttributeMemoryClockRate") // 1000,
                "memory_bytes": info["memory"], "l2_bytes": self.l2_bytes,
                "driver_version": f"HIP driver {driver_version}",
                "runtime_version": f"HIP {runtime_version}, "
                                   f"hip-python {importlib.metadata.version('hip-python')}"}

    def alloc(self, nbytes: int) -> int:
        return int(_check(hip.hipMalloc(nbytes), "hipMalloc"))

    def free(self, ptr: int) -> None:
        _check(hip.hipFree(ptr), "hipFree")

    def host_mapped(self, nbytes: int) -> tuple[int, int]:
        address = int(_check(hip.hipHostMalloc(nbytes, hip.hipHostMallocMapped),
                             "hipHostMalloc"))
        return address, int(_check(hip.hipHostGetDevicePointer(address, 0),
                                   "hipHostGetDevicePointer"))

    def copy_to_device(self, ptr: int, host: np.ndarray) -> None:
        host = np.ascontiguousarray(host)
        _check(hip.hipMemcpyHtoD(ptr, host.ctypes.data, host.nbytes), "hipMemcpyHtoD")

    def copy_from_device(self, ptr: int, nbytes: int, out: np.ndarray | None = None) -> np.ndarray:
        out = np.empty(nbytes, np.uint8) if out is None else out
        if not out.flags.c_contiguous or out.nbytes < nbytes:
            raise ValueError("out must be C-contiguous and hold nbytes")
        _check(hip.hipMemcpyDtoH(out.ctypes.data, ptr, nbytes), "hipMemcpyDtoH")
        return out

    def memset(self, ptr: int, byte: int, nbytes: int, asynchronous: bool = False) -> None:
        """Word-wide (D32) when aligned: byte-wide memsets write at well under full bandwidth."""
        if ptr % 4 == 0 and nbytes % 4 == 0:
            word = byte * 0x01010101
            if asynchronous:
                _check(hip.hipMemsetD32Async(ptr, word, nbytes // 4, None), "hipMemsetD32Async")
            else:
                _check(hip.hipMemsetD32(ptr, word, nbytes // 4), "hipMemsetD32")
        elif asynchronous:
            _check(hip.hipMemsetD8Async(ptr, byte, nbytes, None), "hipMemsetD8Async")
        else:
            _check(hip.hipMemsetD8(ptr, byte, nbytes), "hipMemsetD8")

    def load_module(self, code: bytes) -> Any:
        return _check(hip.hipModuleLoadData(code), "hipModuleLoadData")

    def function(self, module: Any, name: str) -> Any:
        return _check(hip.hipModuleGetFunction(module, name.encode()), "hipModuleGetFunction")

    def launch(self, function: Any, grid: Sequence[int], block: Sequence[int],
               shared_bytes: int, args: KernelArgs | Sequence[tuple[str, int | float]]) -> None:
        if not isinstance(args, KernelArgs):
            args = KernelArgs.pack(args)
        gx, gy, gz = (tuple(grid) + (1, 1))[:3]
        bx, by, bz = (tuple(block) + (1, 1))[:3]
        _check(hip.hipModuleLaunchKernel(function, gx, gy, gz, bx, by, bz, shared_bytes, None,
                                         args.params_address, None),
               "hipModuleLaunchKernel", unknown=LAUNCH_REJECTED)

    def event_create(self) -> Any:
        return _check(hip.hipEventCreate(), "hipEventCreate")

    def event_record(self, event: Any) -> None:
        _check(hip.hipEventRecord(event, None), "hipEventRecord")

    def event_elapsed_ms(self, start: Any, stop: Any) -> float:
        _check(hip.hipEventSynchronize(stop), "hipEventSynchronize")
        return float(_check(hip.hipEventElapsedTime(start, stop), "hipEventElapsedTime"))

    def synchronize(self) -> None:
        _check(hip.hipDeviceSynchronize(), "hipDeviceSynchronize")

    def event_done(self, event: Any) -> bool:
        (err,) = hip.hipEventQuery(event)
        if err == hip.hipError_t.hipErrorNotReady:
            return False
        _check((err,), "hipEventQuery")
        return True

    def idle(self) -> bool:
        (err,) = hip.hipStreamQuery(None)
        if err == hip.hipError_t.hipErrorNotReady:
            return False
        _check((err,), "hipStreamQuery")
        return True
