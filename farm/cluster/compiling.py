"""Compile tasks: Ray tasks on CPUs that compile each distinct instance once into the shared
compile cache before its pairs are measured. Errors are data: a failed compile becomes a
compile_error row for every pair of that instance."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

import ray

from farm.compile import FolderCache, compiled_already
from kernels.family import Instance
from kernels.registry import get_family

LOG_LIMIT = 8000  # characters of a compiler log kept in a compile_error row


@dataclass(frozen=True)
class CompileOutcome:
    ok: bool | None  # None: the task itself failed (the measure worker will compile)
    log: str
    seconds: float = 0.0
    cached: bool = False


@ray.remote(num_cpus=1, max_retries=1)
def compile_task(source: str, defines: dict, target: str, cache_dir: str | None,
                 timeout_s: float, code_db: str | None = None) -> CompileOutcome:
    from farm.compile import compile_source
    from farm.store.artifacts import open_code_cache

    compiled = compile_source(source, defines, target, open_code_cache(cache_dir, code_db),
                              timeout_s)
    log = compiled.result.log or ""
    return CompileOutcome(ok=compiled.result.ok, log=log[-LOG_LIMIT:],
                          seconds=compiled.result.seconds, cached=compiled.cached)


def identity(instance: Instance, target: str) -> str:
    """What determines the code object (the compile cache adds the compiler's version)."""
    family = get_family(instance.family)
    text = json.dumps([instance.source_hash, sorted(family.defines(instance).items()), target])
    return hashlib.sha256(text.encode()).hexdigest()


class Compiles:
    """The compile tasks of one coordinator for one target: each identity compiled once."""

    def __init__(self, target: str, cache_dir: str | None = None, timeout_s: float = 300.0,
                 code_db: str | None = None):
        """cache_dir: each node's folder cache; code_db: a database URL whose artifacts table
        the cluster's nodes share (None: the folders alone)."""
        self.target, self.cache_dir, self.timeout_s = target, cache_dir, timeout_s
        self.code_db = code_db
        self.folder = FolderCache(cache_dir)
        self.outcomes: dict[str, CompileOutcome] = {}
        self.running: dict[Any, str] = {}  # task ref -> identity
        self._sources: dict[str, Any] = {}  # source hash -> ref of the source text

    def request(self, instance: Instance) -> tuple[str, CompileOutcome | None]:
        """Start (or find) the compile of an instance: its identity and, if known, outcome.
        A code object in this node's folder cache needs no task (where the cluster shares an
        artifacts table, every object in a node's folder is in the table too)."""
        key = identity(instance, self.target)
        if key in self.outcomes or key in self.running.values():
            return key, self.outcomes.get(key)
        family = get_family(instance.family)
        if compiled_already(family.source(), family.defines(instance), self.target,
                            self.folder):
            self.outcomes[key] = CompileOutcome(ok=True, log="", cached=True)
            return key, self.outcomes[key]
        if instance.source_hash not in self._sources:
            self._sources[instance.source_hash] = ray.put(family.source())
        ref = compile_task.remote(self._sources[instance.source_hash], family.defines(instance),
                                  self.target, self.cache_dir, self.timeout_s, self.code_db)
        self.running[ref] = key
        return key, None

    def poll(self, timeout_s: float = 0.0) -> list[tuple[str, CompileOutcome]]:
        """Outcomes of the tasks that finished (waits up to timeout_s for the first)."""
        if not self.running:
            return []
        ready, _ = ray.wait(list(self.running), num_returns=len(self.running),
                            timeout=timeout_s)
        finished = []
        for ref in ready:
            key = self.running.pop(ref)
            try:
                outcome = ray.get(ref)
            except Exception as exc:  # noqa: BLE001 - the task failed, not the kernel
                outcome = CompileOutcome(ok=None, log=f"compile task failed: {exc}")
            self.outcomes[key] = outcome
            finished.append((key, outcome))
        return finished

    def cancel(self) -> None:
        for ref in self.running:
            ray.cancel(ref)
        self.running.clear()

    def stats(self) -> dict[str, float]:
        done = self.outcomes.values()
        return {"instances": len(self.outcomes), "failed": sum(o.ok is False for o in done),
                "cached": sum(o.cached for o in done),
                "compile_seconds": sum(o.seconds for o in done if not o.cached)}
