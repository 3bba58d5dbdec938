"""Running an instance's work on a device: compiled launches, or a library call (the vendor)."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any, Protocol

from farm.gpu.base import Device, KernelArgs
from kernels.family import Instance, KernelFamily, Launch, TensorMap


class Runnable(Protocol):
    """One instance's work on one problem, queued on the device's stream as a timed unit."""

    def enqueue(self) -> None: ...

    def publish(self) -> None:
        """After enqueue: make the problem's output buffer hold the result (for verification)."""


def pack_args(launch: Launch, pointers: dict[str, int], device: Device | None = None
              ) -> KernelArgs:
    """Buffer names become device pointers; ctypes structures pass by value; tensor maps are
    encoded by `device` over their buffer."""
    packed: list[tuple[str, Any]] = []
    for arg in launch.args:
        if isinstance(arg, str):
            packed.append(("ptr", pointers[arg]))
        elif isinstance(arg, TensorMap):
            if device is None:
                raise ValueError(f"{launch.entry}: a tensor map argument needs the device")
            packed.append(("bytes", device.tensor_map(pointers[arg.buffer], arg)))
        elif isinstance(arg, ctypes.Structure):
            packed.append(("bytes", bytes(arg)))
        elif isinstance(arg, float):
            packed.append(("f32", arg))
        else:
            packed.append(("i32", int(arg)))
    return KernelArgs.pack(packed)


@dataclass(frozen=True)
class LaunchSequence:
    """Compiled kernels: each launch resolved to its function and packed arguments once."""

    device: Device
    steps: tuple[tuple[Any, tuple, tuple, int, KernelArgs], ...]

    @classmethod
    def build(cls, device: Device, module: Any, launches: list[Launch],
              pointers: dict[str, int]) -> LaunchSequence:
        return cls(device, tuple((device.function(module, step.entry), step.grid, step.block,
                                  step.shared_bytes, pack_args(step, pointers, device))
                                 for step in launches))

    def enqueue(self) -> None:
        for function, grid, block, shared, args in self.steps:
            self.device.launch(function, grid, block, shared, args)

    def publish(self) -> None:
        """The kernels write the output buffer themselves."""


def runnable_of(family: KernelFamily, instance: Instance, problem: Any, device: Device,
                module: Any, pointers: dict[str, int]) -> Runnable:
    """The instance's work on `problem`, ready to enqueue: the family's own (a library call) or
    its launches resolved in `module`."""
    own = family.runnable(instance, problem, device, module, pointers)
    if own is not None:
        return own
    return LaunchSequence.build(device, module, family.launches(instance, problem), pointers)
