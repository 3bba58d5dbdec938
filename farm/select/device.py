"""What the selection features know about a GPU: multiprocessors, cache, bandwidth, peak rate and
the per-multiprocessor limits that bound occupancy."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any


@dataclass(frozen=True)
class DeviceInfo:
    """One architecture's figures (vendor data sheets; NaN where unknown)."""

    arch: str
    sm_count: float
    l2_bytes: float
    bandwidth_gbps: float
    peak_tflops: float  # dense 16-bit matrix rate
    regs_per_sm: float = 65536
    smem_per_sm: float = 228 * 1024
    max_threads_per_sm: float = 2048
    max_blocks_per_sm: float = 32

    def record(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> DeviceInfo:
        return cls(**record)


NAN = float("nan")
KNOWN = {
    "sm_90": DeviceInfo("sm_90", 132, 50 * 2**20, 3350.0, 989.0),
    "sm_80": DeviceInfo("sm_80", 108, 40 * 2**20, 2039.0, 312.0, smem_per_sm=164 * 1024),
    "sm_89": DeviceInfo("sm_89", 128, 72 * 2**20, 1008.0, 330.0, smem_per_sm=100 * 1024,
                        max_threads_per_sm=1536, max_blocks_per_sm=24),
    "gfx90a": DeviceInfo("gfx90a", 110, 8 * 2**20, 1638.0, 383.0, regs_per_sm=131072,
                         smem_per_sm=64 * 1024),
    "gfx942": DeviceInfo("gfx942", 304, 4 * 2**20, 5300.0, 1307.0, regs_per_sm=131072,
                         smem_per_sm=64 * 1024),
}


def device_info(arch: str, sm_count: float | None = None,
                l2_bytes: float | None = None) -> DeviceInfo:
    """The figures of `arch`; a recorded multiprocessor count or cache size wins over the
    table, and an architecture the table lacks gets NaN for what nobody recorded."""
    base = KNOWN.get(arch) or DeviceInfo(arch, NAN, NAN, NAN, NAN)
    if sm_count is not None and not math.isnan(float(sm_count)):
        base = replace(base, sm_count=float(sm_count))
    if l2_bytes is not None and not math.isnan(float(l2_bytes)):
        base = replace(base, l2_bytes=float(l2_bytes))
    return base
