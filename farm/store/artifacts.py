"""The compile cache of a cluster: code objects in the database's artifacts table, behind each
node's local folder cache. The embedded default (SQLite) keeps the folder cache alone."""

from __future__ import annotations

import functools

from farm.compile import CodeCache, CompileResult, FolderCache, TieredCache
from farm.store import Queries, open_store


class ArtifactCache:
    """CodeCache over the artifacts table (kind code_object); failed compiles are not kept."""

    def __init__(self, queries: Queries) -> None:
        self.queries = queries

    def get(self, key: str) -> CompileResult | None:
        row = self.queries.code_object(key)
        if row is None:
            return None
        return CompileResult(ok=True, code=row["data"], log=row["log"] or "",
                             target=row["target"], compiler=row["compiler"],
                             resources=row["resources"] or {}, seconds=0.0)

    def put(self, key: str, result: CompileResult) -> None:
        if result.ok and result.code is not None:
            self.queries.put_code_object(key, result.target, result.compiler, result.code,
                                         result.resources, result.log or "")


@functools.cache
def _shared(url: str) -> ArtifactCache:
    return ArtifactCache(open_store(url))  # one engine per process and database


def open_code_cache(folder: str | None = None, shared_url: str | None = None) -> CodeCache:
    """The folder cache, backed by the artifacts table of `shared_url` when one is given."""
    local = FolderCache(folder)
    return TieredCache(local, _shared(shared_url)) if shared_url else local
