"""The GPU runtime interface: a Compiler (pure CPU) and a Device (one GPU in this process).

Each runtime file (cuda.py, hip.py) implements both. Errors are data: a compile error is a
CompileResult with ok=False, a driver error a GpuError whose kind the measure loop records.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import re
import signal
import struct
import subprocess
import sys
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any, Mapping, Sequence

import numpy as np

# GpuError kinds. ILLEGAL_ADDRESS and LAUNCH_FAILED leave the context unusable;
# LAUNCH_REJECTED (bad grid/block/shared size, too many registers) leaves it usable.
ILLEGAL_ADDRESS = "illegal_address"
LAUNCH_FAILED = "launch_failed"
LAUNCH_REJECTED = "launch_rejected"
OUT_OF_MEMORY = "out_of_memory"
OTHER = "other"


class RuntimeUnavailable(RuntimeError):
    """The runtime's Python package, library, driver or device is missing here."""


class GpuError(RuntimeError):
    """A driver or runtime call failed; `kind` is one of the kinds above."""

    def __init__(self, kind: str, message: str, code: int | None = None):
        super().__init__(f"{kind}: {message}")
        self.kind, self.message, self.code = kind, message, code

    @property
    def context_lost(self) -> bool:
        """True when the context is dead and the process must be restarted."""
        return self.kind in (ILLEGAL_ADDRESS, LAUNCH_FAILED)


@dataclass(frozen=True)
class CompileResult:
    """One compile: the code object (or None) and everything the compiler said."""

    ok: bool
    code: bytes | None
    log: str
    target: str
    compiler: str
    resources: dict = field(default_factory=dict)
    seconds: float = 0.0


class Compiler(ABC):
    """Source to code object for one family of targets; safe to call from any process.

    Compiles run one at a time in this object's worker process; for parallel compiles in one
    process, make several Compiler objects.
    """

    name: str = ""
    target_pattern: re.Pattern = re.compile("")

    def __init__(self):
        self._worker, self._lock = _CompileWorker(type(self)), threading.Lock()

    @abstractmethod
    def version(self) -> str:
        """Compiler identity for cache keys: library version and anything that changes code."""

    @abstractmethod
    def base_options(self, target: str) -> list[str]:
        """Options every compile for `target` gets, before defines and caller options."""

    @abstractmethod
    def compile_here(self, source: str, options: list[str]) -> tuple[bytes | None, str, dict]:
        """Compile in this process: (code or None, log, resources). Called in the worker."""

    def compile(self, source: str, *, defines: Mapping[str, int | str] | None = None,
                target: str, options: Sequence[str] = (),
                timeout_s: float | None = 60) -> CompileResult:
        """Compile in the worker process. Never raises for a bad compile: an error, a compile
        past `timeout_s` (None: no limit) or a compiler crash is ok=False, and the log says."""
        if not self.target_pattern.fullmatch(target):
            return CompileResult(False, None, f"{self.name} cannot compile for target {target!r}",
                                 target, self.name)
        opts = [*self.base_options(target), *(f"-D{k}={v}" for k, v in (defines or {}).items()),
                *options]
        with self._lock:
            ok, code, log, res, secs = self._worker.run(source, opts, timeout_s)
        return CompileResult(ok, code, log, target, self.name, res, secs)

    def close(self) -> None:
        """Stop the worker process (a later compile starts a new one)."""
        with self._lock:
            self._worker.stop(graceful=True)


_ARG_FORMATS = dict(ptr="Q", u64="Q", i64="q", i32="i", u32="I", f32="f", f64="d")


@dataclass(frozen=True)
class KernelArgs:
    """Kernel arguments from (kind, value) pairs, kind ptr/u64/i64/i32/u32/f32/f64, or "bytes"
    for a struct by value (its raw bytes): packed once, reusable across launches. Launches
    pass a pointer per argument (kernelParams); the driver takes offsets from the kernel."""

    buffer: bytes
    offsets: tuple[int, ...]
    _c_buffer: Any = field(default=None, repr=False, compare=False)
    _c_pointers: Any = field(default=None, repr=False, compare=False)

    @classmethod
    def pack(cls, args: Sequence[tuple[str, int | float | bytes]]) -> "KernelArgs":
        buf, offsets = bytearray(), []
        for kind, value in args:
            raw = bytes(value) if kind == "bytes" else struct.pack("<" + _ARG_FORMATS[kind], value)
            buf += bytes(-len(buf) % (8 if kind == "bytes" else len(raw)))  # natural alignment
            offsets.append(len(buf))
            buf += raw
        return cls(bytes(buf), tuple(offsets))

    def __post_init__(self):
        cbuf = ctypes.create_string_buffer(self.buffer, max(len(self.buffer), 1))
        base = ctypes.addressof(cbuf)
        ptrs = (ctypes.c_void_p * max(len(self.offsets), 1))(*(base + o for o in self.offsets))
        object.__setattr__(self, "_c_buffer", cbuf)
        object.__setattr__(self, "_c_pointers", ptrs)

    @property
    def params_address(self) -> int:
        """Address of the void*[] array that kernelParams expects (valid while self lives)."""
        return ctypes.addressof(self._c_pointers)


class Device(ABC):
    """One GPU, its context current in this process. Pointers are ints; all work goes to one
    stream, in order; launch, memset(asynchronous=True) and event_record return at once."""

    runtime: str = ""
    ordinal: int = 0
    l2_bytes: int = 0

    @abstractmethod
    def fingerprint(self) -> dict:
        """gpu_name, arch, sm_count, sm_clock_mhz, memory_bytes, l2_bytes, driver_version..."""

    def tensor_map(self, pointer: int, spec: Any) -> bytes:
        """The 128-byte tensor map (kernels.family.TensorMap) over `pointer`, by value."""
        raise GpuError(LAUNCH_REJECTED, f"{self.runtime or 'this'} runtime has no tensor maps")

    @abstractmethod
    def alloc(self, nbytes: int) -> int: ...

    @abstractmethod
    def free(self, ptr: int) -> None: ...

    @abstractmethod
    def host_mapped(self, nbytes: int) -> tuple[int, int]:
        """Page-locked host memory the GPU reads directly, kept for the life of the process:
        (host address, device pointer)."""

    @abstractmethod
    def copy_to_device(self, ptr: int, host: np.ndarray) -> None: ...

    @abstractmethod
    def copy_from_device(self, ptr: int, nbytes: int, out: np.ndarray | None = None) -> np.ndarray:
        """Copy nbytes into `out` (or a new uint8 array) and return it."""

    @abstractmethod
    def memset(self, ptr: int, byte: int, nbytes: int, asynchronous: bool = False) -> None: ...

    @abstractmethod
    def load_module(self, code: bytes) -> Any: ...

    @abstractmethod
    def function(self, module: Any, name: str) -> Any: ...

    @abstractmethod
    def launch(self, function: Any, grid: Sequence[int], block: Sequence[int],
               shared_bytes: int, args: KernelArgs | Sequence[tuple[str, int | float]]) -> None: ...

    @abstractmethod
    def event_create(self) -> Any: ...

    @abstractmethod
    def event_record(self, event: Any) -> None: ...

    @abstractmethod
    def event_elapsed_ms(self, start: Any, stop: Any) -> float: ...

    @abstractmethod
    def synchronize(self) -> None: ...

    @abstractmethod
    def event_done(self, event: Any) -> bool:
        """True once the work queued before `event` has finished (raises GpuError on failure)."""

    @abstractmethod
    def idle(self) -> bool:
        """True once all queued work has finished (raises GpuError if some of it failed)."""

    def close(self) -> None:
        """Free the L2 flush buffer (runtimes also release their context)."""
        if getattr(self, "_flush_ptr", None) is not None:
            self.free(self._flush_ptr)
            self._flush_ptr = None

    def flush_l2(self, factor: float = 2.0) -> None:
        """Overwrite the L2 cache: an asynchronous memset of `factor` times its size."""
        nbytes = max(int(factor * self.l2_bytes) // 256 * 256, 1 << 20)
        if getattr(self, "_flush_bytes", 0) < nbytes:
            if getattr(self, "_flush_ptr", None) is not None:
                self.free(self._flush_ptr)
            self._flush_ptr, self._flush_bytes = self.alloc(nbytes), nbytes
        self.memset(self._flush_ptr, 0, nbytes, asynchronous=True)


def module_resources(kernels: Mapping[str, dict]) -> dict:
    """A module's resources: each key's maximum over its kernels, plus the per-kernel table."""
    out: dict = {}
    for res in kernels.values():
        for key, value in res.items():
            out[key] = max(out.get(key, value), value)
    if kernels:
        out["kernels"] = {name: dict(res) for name, res in kernels.items()}
    return out


def serve(fd_in: int, fd_out: int, module: str, cls_name: str) -> None:
    """Compile worker main loop (its own process): one job at a time until the pipe closes."""
    jobs, replies = Connection(fd_in, writable=False), Connection(fd_out, readable=False)
    try:
        compiler = getattr(importlib.import_module(module), cls_name)()
    except BaseException as exc:  # reported; the parent turns it into a CompileResult
        return replies.send(f"{type(exc).__name__}: {exc}")
    replies.send("ready")
    while True:
        try:
            job = jobs.recv()
        except EOFError:
            return
        start = time.perf_counter()
        try:
            code, log, res = compiler.compile_here(*job)
        except Exception as exc:
            code, log, res = None, f"{type(exc).__name__}: {exc}", {}
        replies.send((code is not None, code, log, res, time.perf_counter() - start))


class _CompileWorker:
    """A persistent Python subprocess running one Compiler; killed and replaced on a timeout.
    Not multiprocessing: no fork of a process holding a GPU context, no re-import of __main__."""

    def __init__(self, compiler_cls: type):
        self._cls, self._proc, self._jobs, self._replies = compiler_cls, None, None, None

    def _start(self) -> None:
        (job_r, job_w), (reply_r, reply_w) = os.pipe(), os.pipe()
        code = (f"import sys; sys.path[:0] = {sys.path!r}; from farm.gpu.base import serve; "
                f"serve({job_r}, {reply_w}, {self._cls.__module__!r}, {self._cls.__name__!r})")
        self._proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL,
                                      pass_fds=(job_r, reply_w))
        os.close(job_r)
        os.close(reply_w)
        self._jobs = Connection(job_w, readable=False)
        self._replies = Connection(reply_r, writable=False)
        if not self._replies.poll(120):
            raise TimeoutError("no answer in time")
        if (reply := self._replies.recv()) != "ready":
            raise RuntimeError(reply)

    def run(self, source: str, options: list[str], timeout_s: float | None) -> tuple:
        """(ok, code, log, resources, seconds) for one compile."""
        start = time.perf_counter()
        try:
            if self._proc is None or self._proc.poll() is not None:
                self._start()
                start = time.perf_counter()
            self._jobs.send((source, options))
            if self._replies.poll(timeout_s):
                return self._replies.recv()
            log = f"compile timed out after {timeout_s:g} s"
        except (EOFError, OSError, RuntimeError) as exc:
            log = f"{self._cls.name} worker failed: {self._exit_status() or exc}"
        self.stop(graceful=False)
        return False, None, log, {}, time.perf_counter() - start

    def _exit_status(self) -> str | None:
        try:
            code = self._proc.wait(5)
        except subprocess.TimeoutExpired:
            return None
        how = f"signal {-code} ({signal.strsignal(-code)})" if code < 0 else f"exit code {code}"
        return f"compiler process died ({how})"

    def stop(self, graceful: bool) -> None:
        """End the worker: close its job pipe and let it exit (graceful), or kill it at once."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        self._jobs.close()  # the worker reads EOF and exits
        self._replies.close()
        try:
            proc.wait(2 if graceful else 0)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
