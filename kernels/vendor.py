"""vendor: the vendor library (cuDNN on NVIDIA, MIOpen on AMD) through PyTorch, as each operator
calls it (OperatorSpec.vendor_call), measured by the same policy as every family so each sweep
carries the baseline side by side. Needs the `vendor` extra (torch) on the worker; selection
models never pick it.

The same call through torch.compile (compiled_instance) is an instance that no sweep makes:
bench/vs_vendor.py measures it as a second baseline."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from farm.gpu.base import OTHER, GpuError
from kernels.family import Instance, KernelFamily, Launch
from kernels.operator import OperatorSpec, VendorCall
from kernels.registry import operator_spec, operators, register

_TYPESTR_OF = {"bf16": "<i2", "fp16": "<f2", "fp32": "<f4"}
COMPILED = "torch.compile"  # the library setting of the compiled call's instance


@functools.cache
def _torch() -> Any:
    import torch

    torch.backends.cudnn.benchmark = True
    return torch


def _why_not_torch() -> str | None:
    try:
        torch = _torch()
    except ImportError:
        return "PyTorch is not installed on this worker (pip install 'kernel-farm[vendor]')"
    if not torch.cuda.is_available():
        return "PyTorch sees no GPU on this worker"
    return None


class _DeviceArray:
    """A raw device pointer as a CUDA array (no copy), for torch.as_tensor."""

    def __init__(self, ptr: int, elements: int, typestr: str) -> None:
        self.__cuda_array_interface__ = {"shape": (elements,), "typestr": typestr,
                                         "data": (ptr, False), "version": 3}


def is_compiled(instance: Instance) -> bool:
    """The vendor call through torch.compile (VendorFamily.compiled_instance)."""
    return instance.family == "vendor" and instance.settings.get("library") == COMPILED


def compiled(call: VendorCall) -> VendorCall:
    """`call` through torch.compile (default mode, static shapes), compiled here by a first run
    so that no timed launch compiles; a failure (no Triton, say) is a GpuError whose message the
    pair records."""
    torch = _torch()
    try:
        run = torch.compile(call.run, dynamic=False)
        run()
    except Exception as exc:  # noqa: BLE001 - whatever the compiler raises, the run goes on
        raise GpuError(OTHER, f"torch.compile failed: {type(exc).__name__}: {exc}") from exc
    return VendorCall(run, call.outputs)


def forget_compiled() -> None:
    """Drop what torch.compile made for earlier shapes. Every shape recompiles the same call,
    and past Dynamo's recompile limit it would run uncompiled: call this before each shape."""
    if _why_not_torch() is None:
        _torch()._dynamo.reset()


def _flat(ptr: int, elements: int, dtype: str) -> Any:
    torch = _torch()
    flat = torch.as_tensor(_DeviceArray(ptr, elements, _TYPESTR_OF[dtype]), device="cuda")
    return flat.view(torch.bfloat16) if dtype == "bf16" else flat


@dataclass
class VendorRun:
    """One vendor call; its results land in tensors that publish() copies to the outputs."""

    call: VendorCall
    result: dict[str, Any] | None = None

    def enqueue(self) -> None:
        self.result = self.call.run()

    def publish(self) -> None:
        for name, tensor in (self.result or {}).items():
            self.call.outputs[name].copy_(tensor)


class VendorFamily(KernelFamily):
    """The vendor library's implementation of every operator that names one."""

    name = "vendor"
    short = "vendor"
    source_file = ""
    compiled = False
    measure_order = 0

    @property
    def operators(self) -> tuple[str, ...]:  # type: ignore[override]
        return tuple(name for name, spec in operators().items()
                     if type(spec).vendor_call is not OperatorSpec.vendor_call)

    def configs(self, operator: str) -> list[dict]:
        return [{"library": "torch"}]

    def compiled_instance(self, operator: str, dtype: str) -> Instance:
        """The call through torch.compile: not among configs(), so no sweep measures it."""
        return self.instance(operator, dtype, {"library": COMPILED})

    def source(self) -> str:
        return "vendor: each operator's PyTorch call (OperatorSpec.vendor_call)"

    def hashed_source(self, operator: str) -> str:
        """The operator's vendor_source: a vendor row replays while the call stays the same."""
        return operator_spec(operator).vendor_source

    def launches(self, instance: Instance, problem: Any) -> list[Launch]:
        raise TypeError("the vendor family calls a library; it has no launches")

    def applicable(self, instance: Instance, problem: Any) -> str | None:
        why = _why_not_torch()
        if why is None and is_compiled(instance) and not hasattr(_torch(), "compile"):
            why = "this PyTorch has no torch.compile (2.0 or later has)"
        return why

    def runnable(self, instance: Instance, problem: Any, device: Any, module: Any,
                 pointers: dict[str, int]) -> VendorRun:
        spec = operator_spec(problem.op)
        flat = {t.name: _flat(pointers[t.name], t.elements, t.element_type(problem))
                for t in spec.tensors(problem) if t.name in pointers}
        call = spec.vendor_call(problem, flat)
        if call is None:
            raise TypeError(f"{problem.op} has no vendor call")
        return VendorRun(compiled(call) if is_compiled(instance) else call)


FAMILY = register(VendorFamily())
