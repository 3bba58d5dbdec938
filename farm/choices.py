"""The operators and compile targets the farm knows, and a one-line refusal of any other."""

from __future__ import annotations

# AMD targets hipRTC compiles for (ROCm's supported GPUs: CDNA and RDNA)
HIP_TARGETS = ("gfx900", "gfx906", "gfx908", "gfx90a", "gfx940", "gfx941", "gfx942", "gfx950",
               "gfx1010", "gfx1030", "gfx1100", "gfx1101", "gfx1102", "gfx1200", "gfx1201")
# NVIDIA architectures for when NVRTC is not installed (it reports its own otherwise)
NVRTC_ARCHS = (75, 80, 86, 87, 89, 90, 100, 120)


class UnknownChoice(ValueError):
    """An operator or target the farm does not know; the message lists the known ones."""


def check_operator(name: str) -> str:
    from kernels.registry import operator_spec

    try:
        operator_spec(name)
    except LookupError as exc:
        raise UnknownChoice(str(exc)) from None
    return name


def nvidia_targets() -> list[str]:
    """sm_XY for every architecture NVRTC compiles for, and sm_XYa (the architecture-specific
    features: wgmma on sm_90a) from Hopper on."""
    try:
        from cuda.bindings import nvrtc

        archs = [int(a) for a in nvrtc.nvrtcGetSupportedArchs()[1]]
    except Exception:  # noqa: BLE001 - NVRTC not installed: the architectures it knows of late
        archs = list(NVRTC_ARCHS)
    return [f"sm_{a}{s}" for a in archs for s in ("", "a") if s == "" or a >= 90]


def valid_targets() -> list[str]:
    return nvidia_targets() + list(HIP_TARGETS)


def check_target(target: str) -> str:
    base = target.split(":", 1)[0]  # gfx90a:xnack+ names a feature of gfx90a
    if base not in valid_targets():
        raise UnknownChoice(f"unknown target {target!r}; valid: {', '.join(valid_targets())}")
    return target
