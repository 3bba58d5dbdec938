"""NVIDIA runtime through cuda-python's cuda.bindings: NVRTC compiles, the driver API runs.

Needs `pip install kernel-farm[cuda]` (cuda-bindings, nvidia-cuda-nvrtc, nvidia-cuda-runtime
for the headers, nvidia-ml-py); the Device side also needs an NVIDIA driver and GPU.
"""

from __future__ import annotations

import importlib.metadata
import re
import struct
from functools import cache
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from cuda.bindings import driver, nvrtc

from farm.gpu.base import (ILLEGAL_ADDRESS, LAUNCH_FAILED, LAUNCH_REJECTED, OTHER, OUT_OF_MEMORY,
                           Compiler, Device, GpuError, KernelArgs, RuntimeUnavailable,
                           module_resources)


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


@cache
def cuda_include_dir() -> str | None:
    """The CUDA headers (cuda_fp16.h, cuda_bf16.h) of the installed nvidia-cuda-runtime."""
    try:
        from cuda.pathfinder import find_nvidia_header_directory
        return find_nvidia_header_directory("cudart")
    except ImportError:  # no cuda-pathfinder: look through the wheel's file list
        try:
            files = importlib.metadata.files("nvidia-cuda-runtime") or []
        except importlib.metadata.PackageNotFoundError:
            return None
        return next((str(Path(f.locate()).resolve().parent) for f in files
                     if f.name == "cuda_fp16.h"), None)


_PTXAS = {
    "entry": re.compile(r"Compiling entry function '([^']+)'"),
    "props": re.compile(r"Function properties for (\S+)"),
    "stack": re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill "
                        r"loads"),
    "regs": re.compile(r"Used (\d+) registers"),
    "smem": re.compile(r"(\d+) bytes smem"),
    "lmem": re.compile(r"(\d+) bytes lmem"),
}


def ptxas_resources(log: str) -> dict:
    """Registers, static shared, spill and local bytes per entry from `ptxas -v` output."""
    kernels: dict[str, dict] = {}
    entry = props = None
    for line in log.splitlines():  # an entry's lines follow its "Compiling entry function"
        if m := _PTXAS["entry"].search(line):
            kernels.setdefault(entry := m.group(1), {})
        elif m := _PTXAS["props"].search(line):
            props = m.group(1)
        elif (m := _PTXAS["stack"].search(line)) and props in kernels:
            kernels[props]["local_bytes"] = int(m.group(1))
            kernels[props]["spill_bytes"] = int(m.group(2)) + int(m.group(3))
        elif (m := _PTXAS["regs"].search(line)) and entry in kernels:
            res = kernels[entry]
            res["registers"] = int(m.group(1))
            res["shared_bytes"] = int(s.group(1)) if (s := _PTXAS["smem"].search(line)) else 0
            if lm := _PTXAS["lmem"].search(line):
                res["local_bytes"] = max(res.get("local_bytes", 0), int(lm.group(1)))
    return module_resources(kernels)


def _nvrtc_check(result: tuple, call: str) -> Any:
    err = result[0]
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise RuntimeError(f"{call}: {nvrtc.nvrtcGetErrorString(err)[1].decode()}")
    return result[1] if len(result) == 2 else result[1:]


@cache
def _nvrtc_version() -> str:
    major, minor = _nvrtc_check(nvrtc.nvrtcVersion(), "nvrtcVersion")
    return (f"nvrtc {major}.{minor} (nvidia-cuda-nvrtc {_dist_version('nvidia-cuda-nvrtc')}, "
            f"headers nvidia-cuda-runtime {_dist_version('nvidia-cuda-runtime')})")


class NvrtcCompiler(Compiler):
    """CUDA C++ to a CUBIN for one sm_* target, with ptxas' resource report."""

    name = "nvrtc"
    target_pattern = re.compile(r"sm_\d+[af]?")

    def version(self) -> str:
        return _nvrtc_version()

    def base_options(self, target: str) -> list[str]:
        include = cuda_include_dir()
        return ([f"--gpu-architecture={target}", "-std=c++17", "-default-device",
                 "--ptxas-options=-v"] + ([f"--include-path={include}"] if include else []))

    def compile_here(self, source: str, options: list[str]) -> tuple[bytes | None, str, dict]:
        prog = _nvrtc_check(nvrtc.nvrtcCreateProgram(source.encode(), b"kernel.cu", 0, [], []),
                            "nvrtcCreateProgram")
        try:
            opts = [o.encode() for o in options]
            (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
            size = _nvrtc_check(nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
            log = b" " * size
            _nvrtc_check(nvrtc.nvrtcGetProgramLog(prog, log), "nvrtcGetProgramLog")
            log = log.rstrip(b"\0 ").decode(errors="replace")
            if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
                return None, f"{nvrtc.nvrtcGetErrorString(err)[1].decode()}\n{log}", {}
            size = _nvrtc_check(nvrtc.nvrtcGetCUBINSize(prog), "nvrtcGetCUBINSize")
            cubin = b" " * size
            _nvrtc_check(nvrtc.nvrtcGetCUBIN(prog, cubin), "nvrtcGetCUBIN")
            return cubin, log, ptxas_resources(log)
        finally:
            nvrtc.nvrtcDestroyProgram(prog)


_R = driver.CUresult
_KINDS = {
    ILLEGAL_ADDRESS: ("CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_MISALIGNED_ADDRESS",
                      "CUDA_ERROR_INVALID_ADDRESS_SPACE"),
    LAUNCH_FAILED: ("CUDA_ERROR_LAUNCH_FAILED", "CUDA_ERROR_ILLEGAL_INSTRUCTION",
                    "CUDA_ERROR_INVALID_PC", "CUDA_ERROR_HARDWARE_STACK_ERROR",
                    "CUDA_ERROR_ASSERT", "CUDA_ERROR_LAUNCH_TIMEOUT"),
    LAUNCH_REJECTED: ("CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
                      "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE"),
    OUT_OF_MEMORY: ("CUDA_ERROR_OUT_OF_MEMORY",),
}
_KIND_OF = {getattr(_R, n): kind for kind, names in _KINDS.items() for n in names if hasattr(_R, n)}
_NO_GPU = {getattr(_R, n) for n in ("CUDA_ERROR_NO_DEVICE", "CUDA_ERROR_INSUFFICIENT_DRIVER",
                                    "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE") if hasattr(_R, n)}


def _check(result: tuple, call: str, unknown: str = OTHER) -> Any:
    """Unwrap a cuda.bindings result tuple; raise GpuError for anything but CUDA_SUCCESS.

    `unknown` is the kind for codes without one (a launch's own errors are rejections).
    """
    err = result[0]
    if err != _R.CUDA_SUCCESS:
        text = (driver.cuGetErrorString(err)[1] or b"").decode(errors="replace")
        raise GpuError(_KIND_OF.get(err, unknown), f"{call}: {err.name}: {text}", int(err))
    return None if len(result) == 1 else result[1] if len(result) == 2 else result[1:]


def _init_driver() -> int:
    """cuInit; the number of devices. RuntimeUnavailable where there is no driver or GPU."""
    try:
        result = driver.cuInit(0)
    except Exception as exc:  # cuda.pathfinder: libcuda.so not found
        raise RuntimeUnavailable(f"no NVIDIA driver here (libcuda.so): {exc}") from exc
    if result[0] in _NO_GPU:
        raise RuntimeUnavailable(f"no CUDA device: cuInit returned {result[0].name}")
    _check(result, "cuInit")
    return _check(driver.cuDeviceGetCount(), "cuDeviceGetCount")


def _attr(dev: Any, name: str, default: int | None = None) -> int:
    """A device attribute; `default` where this driver does not answer for it."""
    try:
        kind = getattr(driver.CUdevice_attribute, name)
        return _check(driver.cuDeviceGetAttribute(kind, dev), name)
    except (AttributeError, GpuError):
        if default is None:
            raise
        return default


def _describe(ordinal: int) -> dict:
    dev = _check(driver.cuDeviceGet(ordinal), "cuDeviceGet")
    name = _check(driver.cuDeviceGetName(256, dev), "cuDeviceGetName")
    major = _attr(dev, "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR")
    minor = _attr(dev, "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR")
    return {"runtime": "cuda", "ordinal": ordinal,
            "name": name.split(b"\0", 1)[0].decode(), "arch": f"sm_{major}{minor}",
            "sm_count": _attr(dev, "CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT"),
            "memory": _check(driver.cuDeviceTotalMem(dev), "cuDeviceTotalMem")}


def list_devices() -> list[dict]:
    """Every CUDA device, described without creating a context."""
    return [_describe(i) for i in range(_init_driver())]


def _nvml_facts(pci_bus_id: str) -> dict:
    """Driver version and max SM clock from NVML, where nvidia-ml-py and NVML are present."""
    try:
        import pynvml
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByPciBusId(pci_bus_id)
        return {"driver_version": pynvml.nvmlSystemGetDriverVersion(),
                "sm_clock_mhz": pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM)}
    except Exception:  # NVML is optional: the driver API answers for the essentials
        return {}


class CudaDevice(Device):
    """One NVIDIA GPU through its primary context; launches go to the legacy default stream."""

    runtime = "cuda"

    def __init__(self, ordinal: int = 0):
        count = _init_driver()
        if not 0 <= ordinal < count:
            raise RuntimeUnavailable(f"no CUDA device {ordinal}: this machine has {count}")
        self.ordinal = ordinal
        self._dev = _check(driver.cuDeviceGet(ordinal), "cuDeviceGet")
        self._ctx = _check(driver.cuDevicePrimaryCtxRetain(self._dev), "cuDevicePrimaryCtxRetain")
        _check(driver.cuCtxSetCurrent(self._ctx), "cuCtxSetCurrent")
        self.l2_bytes = _attr(self._dev, "CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE")
        self._shared_set: dict[int, int] = {}

    def fingerprint(self) -> dict:
        info = _describe(self.ordinal)
        bus = _check(driver.cuDeviceGetPCIBusId(64, self._dev), "cuDeviceGetPCIBusId")
        bus = bus.split(b"\0", 1)[0].decode() if isinstance(bus, bytes) else str(bus)
        version = _check(driver.cuDriverGetVersion(), "cuDriverGetVersion")
        facts = {"driver_version": f"CUDA {version // 1000}.{version % 1000 // 10}",
                 "sm_clock_mhz": _attr(self._dev, "CU_DEVICE_ATTRIBUTE_CLOCK_RATE", 0) // 1000,
                 **_nvml_facts(bus)}
        return {"runtime": "cuda", "gpu_name": info["name"], "arch": info["arch"],
                "sm_count": info["sm_count"], "sm_clock_mhz": facts["sm_clock_mhz"],
                "memory_clock_mhz":
                    _attr(self._dev, "CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE", 0) // 1000,
                "memory_bytes": info["memory"], "l2_bytes": self.l2_bytes,
                "driver_version": facts["driver_version"],
                "cuda_driver_api": f"{version // 1000}.{version % 1000 // 10}",
                "runtime_version": f"cuda-bindings {_dist_version('cuda-bindings')}",
                "pci_bus_id": bus}

    def alloc(self, nbytes: int) -> int:
        return int(_check(driver.cuMemAlloc(nbytes), "cuMemAlloc"))

    def free(self, ptr: int) -> None:
        _check(driver.cuMemFree(ptr), "cuMemFree")

    def host_mapped(self, nbytes: int) -> tuple[int, int]:
        address = int(_check(driver.cuMemHostAlloc(
            nbytes, driver.CU_MEMHOSTALLOC_DEVICEMAP | driver.CU_MEMHOSTALLOC_PORTABLE),
            "cuMemHostAlloc"))
        return address, int(_check(driver.cuMemHostGetDevicePointer(address, 0),
                                   "cuMemHostGetDevicePointer"))

    def copy_to_device(self, ptr: int, host: np.ndarray) -> None:
        host = np.ascontiguousarray(host)
        _check(driver.cuMemcpyHtoD(ptr, host.ctypes.data, host.nbytes), "cuMemcpyHtoD")

    def copy_from_device(self, ptr: int, nbytes: int, out: np.ndarray | None = None) -> np.ndarray:
        out = np.empty(nbytes, np.uint8) if out is None else out
        if not out.flags.c_contiguous or out.nbytes < nbytes:
            raise ValueError("out must be C-contiguous and hold nbytes")
        _check(driver.cuMemcpyDtoH(out.ctypes.data, ptr, nbytes), "cuMemcpyDtoH")
        return out

    def memset(self, ptr: int, byte: int, nbytes: int, asynchronous: bool = False) -> None:
        """Word-wide (D32) when aligned: byte-wide memsets write at well under full bandwidth."""
        if ptr % 4 == 0 and nbytes % 4 == 0:
            word = byte * 0x01010101
            if asynchronous:
                _check(driver.cuMemsetD32Async(ptr, word, nbytes // 4, 0), "cuMemsetD32Async")
            else:
                _check(driver.cuMemsetD32(ptr, word, nbytes // 4), "cuMemsetD32")
        elif asynchronous:
            _check(driver.cuMemsetD8Async(ptr, byte, nbytes, 0), "cuMemsetD8Async")
        else:
            _check(driver.cuMemsetD8(ptr, byte, nbytes), "cuMemsetD8")

    def load_module(self, code: bytes) -> Any:
        return _check(driver.cuModuleLoadData(code), "cuModuleLoadData")

    def function(self, module: Any, name: str) -> Any:
        """The kernel; one compiled for clusters of more than 8 blocks (`__cluster_dims__`, up
        to 16 on Hopper) is allowed its non-portable cluster size."""
        function = _check(driver.cuModuleGetFunction(module, name.encode()),
                          "cuModuleGetFunction")
        attrs = driver.CUfunction_attribute
        blocks = 1
        for dim in ("WIDTH", "HEIGHT", "DEPTH"):
            err, size = driver.cuFuncGetAttribute(
                getattr(attrs, f"CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_{dim}"), function)
            blocks *= size if err == _R.CUDA_SUCCESS and size > 0 else 1
        if blocks > 8:
            _check(driver.cuFuncSetAttribute(
                function, attrs.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1),
                "cuFuncSetAttribute (non-portable cluster size)", unknown=LAUNCH_REJECTED)
        return function

    def tensor_map(self, pointer: int, spec: Any) -> bytes:
        """cuTensorMapEncodeTiled (or, with spec.im2col, cuTensorMapEncodeIm2col): 16-bit
        elements, the spec's swizzle (128 bytes or none), zeros out of bounds."""
        rank, u64, u32 = len(spec.dims), driver.cuuint64_t, driver.cuuint32_t
        swizzles = driver.CUtensorMapSwizzle
        mode = (swizzles.CU_TENSOR_MAP_SWIZZLE_128B if spec.swizzle
                else swizzles.CU_TENSOR_MAP_SWIZZLE_NONE)
        dtype = driver.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
        dims, strides = [u64(d) for d in spec.dims], [u64(s) for s in spec.strides]
        tail = (driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, mode,
                driver.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                driver.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
        im2col = spec.im2col
        call = "cuTensorMapEncodeIm2col" if im2col else "cuTensorMapEncodeTiled"
        try:
            if im2col:  # element strides: 1 along C and N, the window's along W and H
                steps = [u32(1), *(u32(s) for s in im2col.strides), u32(1)]
                result = driver.cuTensorMapEncodeIm2col(
                    dtype, rank, pointer, dims, strides, list(im2col.lower),
                    list(im2col.upper), spec.box[0], spec.box[1], steps, *tail)
            else:
                result = driver.cuTensorMapEncodeTiled(
                    dtype, rank, pointer, dims, strides, [u32(b) for b in spec.box],
                    [u32(1)] * rank, *tail)
        except (TypeError, ValueError, OverflowError) as exc:  # a field out of its type's range
            raise GpuError(LAUNCH_REJECTED, f"{call} {spec}: {exc}") from exc
        tmap = _check(result, f"{call} {spec}", unknown=LAUNCH_REJECTED)
        return struct.pack("<16Q", *(int(word) for word in tmap.opaque))

    def launch(self, function: Any, grid: Sequence[int], block: Sequence[int],
               shared_bytes: int, args: KernelArgs | Sequence[tuple[str, int | float]]) -> None:
        """Queue a launch; above 48 KiB of dynamic shared memory the function's limit is raised."""
        if not isinstance(args, KernelArgs):
            args = KernelArgs.pack(args)
        if shared_bytes > 48 * 1024 and self._shared_set.get(int(function), 0) < shared_bytes:
            attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            _check(driver.cuFuncSetAttribute(function, attr, shared_bytes), "cuFuncSetAttribute")
            self._shared_set[int(function)] = shared_bytes
        gx, gy, gz = (tuple(grid) + (1, 1))[:3]
        bx, by, bz = (tuple(block) + (1, 1))[:3]
        _check(driver.cuLaunchKernel(function, gx, gy, gz, bx, by, bz, shared_bytes, 0,
                                     args.params_address, 0), "cuLaunchKernel",
               unknown=LAUNCH_REJECTED)

    def event_create(self) -> Any:
        return _check(driver.cuEventCreate(driver.CUevent_flags.CU_EVENT_DEFAULT), "cuEventCreate")

    def event_record(self, event: Any) -> None:
        _check(driver.cuEventRecord(event, 0), "cuEventRecord")

    def event_elapsed_ms(self, start: Any, stop: Any) -> float:
        _check(driver.cuEventSynchronize(stop), "cuEventSynchronize")
        return float(_check(driver.cuEventElapsedTime(start, stop), "cuEventElapsedTime"))

    def synchronize(self) -> None:
        _check(driver.cuCtxSynchronize(), "cuCtxSynchronize")

    def event_done(self, event: Any) -> bool:
        (err,) = driver.cuEventQuery(event)
        if err == driver.CUresult.CUDA_ERROR_NOT_READY:
            return False
        _check((err,), "cuEventQuery")
        return True

    def idle(self) -> bool:
        (err,) = driver.cuStreamQuery(0)
        if err == driver.CUresult.CUDA_ERROR_NOT_READY:
            return False
        _check((err,), "cuStreamQuery")
        return True

    def close(self) -> None:
        super().close()
        if self._ctx is not None:
            _check(driver.cuDevicePrimaryCtxRelease(self._dev), "cuDevicePrimaryCtxRelease")
            self._ctx = None
