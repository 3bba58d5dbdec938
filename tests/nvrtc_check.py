"""Compile a family's instances for sm_90a with NVRTC, as the CPU tests of the Hopper families
do: the failures and spills, as lines."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any


def compile_failures(family: Any, instances: Iterable[Any], entry: Callable[[Any], str],
                     spill_free: Callable[[Any], bool] = lambda inst: True) -> list[str]:
    """Every instance compiled: a failed compile, or a
    spill in `entry(inst)` where `spill_free(inst)`, is a failure line."""
    import pytest

    cuda = pytest.importorskip("farm.gpu.cuda", exc_type=ImportError)
    compiler = cuda.NvrtcCompiler()
    failures = []
    for inst in instances:
        r = compiler.compile(family.source(), defines=family.defines(inst), target="sm_90a",
                             timeout_s=300)
        if not r.ok:
            failures.append(f"{inst.name}: {r.log[-1500:]}")
            continue
        res = r.resources["kernels"][entry(inst)]
        if spill_free(inst) and (res.get("spill_bytes", 0) or res.get("local_bytes", 0)):
            failures.append(f"{inst.name}: spills {res}")
    return failures
