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


def shape_fields(operator: str | None = None) -> dict[str, tuple[str, ...]]:
    """The shape fields of `operator` (of every operator if None), each with its choices
    (empty for a number)."""
    from kernels.registry import operator_spec, operators

    specs = [operator_spec(operator)] if operator else list(operators().values())
    fields: dict[str, tuple[str, ...]] = {}
    for spec in specs:
        for name in spec.fields:
            fields.setdefault(name, spec.problem_type.TEXT_FIELDS.get(name, ()))
    return fields


def parse_shape(items: list[str], operator: str | None = None) -> tuple[tuple[str, object], ...]:
    """FIELD=VALUE items (each may be comma-separated) as (field, value) pairs: a number, or a
    name where the field takes names. UnknownChoice names the fault and the valid fields."""
    known = shape_fields(operator)
    whose = f"{operator}'s" if operator else "the operators'"
    pairs: list[tuple[str, object]] = []
    for item in ",".join(items).split(","):
        if not item.strip():
            continue
        name, eq, value = (part.strip() for part in item.partition("="))
        if not eq or name not in known:
            raise UnknownChoice(f"{item!r}: expected FIELD=VALUE with FIELD one of {whose} "
                                f"fields: {', '.join(known)}")
        choices = known[name]
        if choices:
            if value not in choices:
                raise UnknownChoice(f"{item!r}: {name} is one of {', '.join(choices)}")
            pairs.append((name, value))
        elif value.lstrip("-").isdigit():
            pairs.append((name, int(value)))
        else:
            raise UnknownChoice(f"{item!r}: {name} takes an integer")
    return tuple(pairs)
