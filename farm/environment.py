"""The environment a measurement was taken in, and its fingerprint."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from importlib.metadata import PackageNotFoundError, version


def farm_version() -> str:
    try:
        return version("kernel-farm")
    except PackageNotFoundError:
        return "0+unknown"


@dataclass(frozen=True)
class Environment:
    gpu_name: str
    arch: str
    sm_count: int
    driver: str
    compiler: str
    runtime: str
    farm_version: str
    replay_of: str | None = None
    details: tuple[tuple[str, str], ...] = ()  # clocks, memory, cache sizes

    @property
    def fingerprint(self) -> str:
        text = json.dumps(asdict(self), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def record(self) -> dict:
        """Keyword arguments for the environments table."""
        row = asdict(self)
        row["details"] = dict(self.details)
        return row


def device_environment(fingerprint: dict, compiler: str) -> Environment:
    """The environment of a Device, from Device.fingerprint() and the compiler's version."""
    keys = ("sm_clock_mhz", "memory_bytes", "l2_bytes")
    return Environment(gpu_name=str(fingerprint["gpu_name"]), arch=str(fingerprint["arch"]),
                       sm_count=int(fingerprint["sm_count"]),
                       driver=str(fingerprint.get("driver_version", "")), compiler=compiler,
                       runtime=str(fingerprint.get("runtime_version", "")),
                       farm_version=farm_version(),
                       details=tuple((k, str(fingerprint[k])) for k in keys if k in fingerprint))
