"""The compile cache a cluster shares: code objects in the artifacts table behind each node's
folder cache (SQLite and PostgreSQL)."""

from farm.compile import CompileResult, FolderCache, TieredCache
from farm.store import open_store
from farm.store.artifacts import ArtifactCache

KEY = "ab" * 32


def result(ok: bool = True) -> CompileResult:
    return CompileResult(ok=ok, code=b"\x7fELF code" if ok else None, log="ptxas info: 40 regs",
                         target="sm_90a", compiler="nvrtc 13.0",
                         resources={"registers": 40, "shared_bytes": 0, "spill_bytes": 0})


def test_code_objects_round_trip_through_the_artifacts_table(db_url):
    cache = ArtifactCache(open_store(db_url, migrate=True))
    assert cache.get(KEY) is None
    cache.put(KEY, result())
    cache.put(KEY, result())  # a second node storing the same key is not an error
    hit = cache.get(KEY)
    assert (hit.ok, hit.code, hit.resources["registers"], hit.log) == (
        True, b"\x7fELF code", 40, "ptxas info: 40 regs")
    cache.put("cd" * 32, result(ok=False))  # errors are rows of the pairs, never cached code
    assert cache.get("cd" * 32) is None
    assert cache.queries.count_rows("artifacts") == 1


def test_a_shared_hit_is_kept_in_the_local_folder(sqlite_url, tmp_path):
    shared = ArtifactCache(open_store(sqlite_url))
    shared.put(KEY, result())
    node = TieredCache(FolderCache(tmp_path / "node"), shared)
    assert node.get(KEY).code == b"\x7fELF code"
    assert FolderCache(tmp_path / "node").get(KEY).code == b"\x7fELF code"
    other = TieredCache(FolderCache(tmp_path / "other"), shared)
    other.put("ef" * 32, result())
    assert shared.get("ef" * 32) is not None and node.get("ef" * 32) is not None
