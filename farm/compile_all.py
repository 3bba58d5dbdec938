"""Compile every instance of an operator for a target (warming the cache) and summarize."""

from __future__ import annotations

import queue
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from farm.compile import CodeCache, compile_source
from farm.gpu import new_compiler
from kernels.family import Instance
from kernels.registry import families_for, get_family


@dataclass(frozen=True)
class CompileFailure:
    instance: str
    log: str


@dataclass(frozen=True)
class CompileSummary:
    instances: int
    compiled: int
    cached: int  # instances whose code object was in the cache (or compiled for a twin)
    code_objects: int
    failures: tuple[CompileFailure, ...]
    seconds: float
    compile_seconds: float  # summed over the compiles that ran (not cache hits)


def instances_of(operator: str, dtypes: list[str], family: str | None = None,
                 target: str | None = None) -> list[Instance]:
    """The compiled instances of an operator (of one family), those of families written for
    other targets left out when `target` is given."""
    chosen = [get_family(family)] if family else families_for(operator)
    return [i for f in chosen if f.compiled and operator in f.operators
            and not (target and f.unsupported_target(target)) for d in dtypes
            for i in f.instances(operator, d)]


def compile_instances(instances: list[Instance], target: str, cache: CodeCache | None,
                      workers: int = 1) -> CompileSummary:
    start = time.perf_counter()
    compilers: queue.SimpleQueue = queue.SimpleQueue()
    for _ in range(max(1, workers)):
        compilers.put(new_compiler(target))

    def code_of(instance: Instance) -> tuple:
        """Instances with the same family and defines share one code object (a launch-time
        setting such as a split is not a define): it is compiled once."""
        return instance.family, tuple(sorted(get_family(instance.family).defines(
            instance).items()))

    distinct = {code_of(i): i for i in reversed(instances)}  # the first instance of each code

    def one(instance: Instance):
        family = get_family(instance.family)
        compiler = compilers.get()
        try:
            return compile_source(family.source(), family.defines(instance), target, cache,
                                  compiler=compiler)
        finally:
            compilers.put(compiler)

    try:
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            compiled = dict(zip(distinct, pool.map(one, distinct.values())))
    finally:
        while not compilers.empty():
            compilers.get().close()
    done = [(i, compiled[code_of(i)]) for i in instances]
    failures = tuple(CompileFailure(i.name, c.result.log) for i, c in done if not c.result.ok)
    ran = [c for c in compiled.values() if not c.cached]
    return CompileSummary(instances=len(done), compiled=len(done) - len(failures),
                          cached=len(done) - len(ran), code_objects=len(compiled),
                          failures=failures,
                          seconds=time.perf_counter() - start,
                          compile_seconds=sum(c.result.seconds for c in ran))
