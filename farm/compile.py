"""Compiling kernel instances to code objects, cached by what determines the bytes.

The cache key hashes the self-contained source, the defines, the options, the compiler's
version and the target, so a cached code object is reused only where the compiler would give
the same one. The embedded default caches in a folder; a cluster shares the artifacts table.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

import platformdirs

from farm.gpu import get_compiler
from farm.gpu.base import CompileResult, Compiler

OPTIONS: tuple[str, ...] = ()


def cache_key(source: str, defines: dict, options: tuple[str, ...], compiler: Compiler,
              target: str) -> str:
    text = json.dumps([source, sorted(defines.items()), list(options), compiler.version(),
                       target])
    return hashlib.sha256(text.encode()).hexdigest()


class CodeCache(Protocol):
    def get(self, key: str) -> CompileResult | None: ...

    def put(self, key: str, result: CompileResult) -> None: ...


class FolderCache:
    """Code objects as files: <key>.bin and <key>.json (log, resources). Safe across processes:
    files are written to a temporary name and renamed."""

    def __init__(self, folder: str | Path | None = None) -> None:
        default = Path(platformdirs.user_cache_dir("kernel-farm")) / "code"
        self.folder = Path(folder or os.environ.get("FARM_CODE_CACHE") or default)
        self.folder.mkdir(parents=True, exist_ok=True)

    def contains(self, key: str) -> bool:
        return (self.folder / f"{key}.json").is_file() and (self.folder / f"{key}.bin").is_file()

    def get(self, key: str) -> CompileResult | None:
        meta, code = self.folder / f"{key}.json", self.folder / f"{key}.bin"
        if not (meta.is_file() and code.is_file()):
            return None
        info = json.loads(meta.read_text())
        return CompileResult(ok=True, code=code.read_bytes(), log=info["log"],
                             target=info["target"], compiler=info["compiler"],
                             resources=info["resources"], seconds=0.0)

    def put(self, key: str, result: CompileResult) -> None:
        if not result.ok or result.code is None:
            return  # errors are recorded with the pairs, never cached as code
        for suffix, data in ((".bin", result.code), (".json", json.dumps(
                {"log": result.log, "target": result.target, "compiler": result.compiler,
                 "resources": result.resources}).encode())):
            tmp = self.folder / f"{key}{suffix}.{uuid.uuid4().hex}.tmp"  # nodes share it
            tmp.write_bytes(data)
            tmp.replace(self.folder / f"{key}{suffix}")


class TieredCache:
    """A fast local cache in front of a shared one: a shared hit is kept locally, a put goes to
    both (the shared one is how a cluster's nodes reuse each other's compiles)."""

    def __init__(self, local: CodeCache, shared: CodeCache) -> None:
        self.local, self.shared = local, shared

    def get(self, key: str) -> CompileResult | None:
        hit = self.local.get(key)
        if hit is None:
            hit = self.shared.get(key)
            if hit is not None:
                self.local.put(key, hit)
        return hit

    def put(self, key: str, result: CompileResult) -> None:
        self.local.put(key, result)
        self.shared.put(key, result)


@dataclass(frozen=True)
class CompiledCode:
    """A compile's outcome with its cache key and whether the cache served it."""

    key: str
    result: CompileResult
    cached: bool


def compile_source(source: str, defines: dict, target: str, cache: CodeCache | None = None,
                   timeout_s: float = 120.0, compiler: Compiler | None = None) -> CompiledCode:
    """Compile (or fetch from the cache) one source for one target; `compiler` defaults to the
    process's compiler for the target (one compile at a time: pass others to run in parallel)."""
    compiler = compiler or get_compiler(target)
    key = cache_key(source, defines, OPTIONS, compiler, target)
    hit = cache.get(key) if cache is not None else None
    if hit is not None:
        return CompiledCode(key, hit, cached=True)
    start = time.perf_counter()
    result = compiler.compile(source, defines=defines, target=target, options=OPTIONS,
                              timeout_s=timeout_s)
    result = replace(result, seconds=time.perf_counter() - start)
    if cache is not None:
        cache.put(key, result)
    return CompiledCode(key, result, cached=False)


def compiled_already(source: str, defines: dict, target: str, cache: FolderCache) -> bool:
    """Whether `cache` holds this compile's code object (nothing is compiled; False where
    this process has no compiler for the target)."""
    try:
        compiler = get_compiler(target)
        return cache.contains(cache_key(source, defines, OPTIONS, compiler, target))
    except Exception:  # noqa: BLE001 - no compiler here: the compile tasks will tell
        return False
