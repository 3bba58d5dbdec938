"""The measure actor: one persistent process per GPU (or a replay stand-in) that measures
batches of one problem's pairs and streams the results back as they are made.

measure_batch is a Ray generator that yields lists of rows: the rows measured since the last
yield, at least every CHUNK_S (each row at once when the batch is `careful`), so the
coordinator's cost is per chunk, not per pair, and it still knows which pairs are done. When
the worker raises DeviceLost (the context is gone: illegal address, hang), the batch yields the
rows so far, the failing pair's row and a {"lost": ...} marker, and ends; the process exits
shortly after (os._exit) and Ray restarts it (max_restarts=-1). The coordinator resends the
batch's remaining pairs, `careful`, so a process that dies without a word is blamed on the
right pair.
"""

from __future__ import annotations

import importlib
import os
import threading
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from farm.measure import DeviceLost
from farm.timing import TimingPolicy
from kernels.family import Instance

EXIT_GRACE_S = 2.0  # time for the last rows to reach the coordinator before the process exits
CHUNK_S = 0.05  # a chunk of rows goes back at least this often


@dataclass(frozen=True)
class WorkerConfig:
    """What a measure actor runs: the GPU Ray gave it, or a recording to replay."""

    kind: str = "gpu"  # gpu | replay
    recordings: tuple[tuple[str, bytes], ...] = ()  # (file name, bytes) of each recording to
    # replay, so any node can replay them
    pace_s: float = 0.0
    code_cache: str | None = None  # the compile cache folder (None: FARM_CODE_CACHE or default)
    code_db: str | None = None  # a database whose artifacts table the cluster's nodes share


class MeasureActor:
    """Holds one worker (GpuWorker or ReplayWorker) for the life of the process."""

    def __init__(self, config: WorkerConfig) -> None:
        self.config = config
        self.lost = False
        if config.kind == "replay":
            from farm.recording import read_recording
            from farm.replay import ReplayWorker

            self.worker = ReplayWorker([read_recording(data, name)
                                        for name, data in config.recordings],
                                       pace_s=config.pace_s)
        else:
            from farm.store.artifacts import open_code_cache
            from farm.worker import GpuWorker

            self.worker = GpuWorker(ordinal=0,
                                    cache=open_code_cache(config.code_cache, config.code_db))

    def describe(self) -> dict[str, Any]:
        """Who this process is: its environment, node, pid and whether it is about to exit."""
        import ray

        env = self.worker.environment
        return {"pid": os.getpid(), "node": ray.get_runtime_context().get_node_id(),
                "kind": self.config.kind, "environment": env.record(),
                "fingerprint": env.fingerprint, "target": self.worker.target,
                "lost": self.lost}

    def measure_batch(self, problem: Any, instances: list[Instance], policy: TimingPolicy,
                      modules: tuple[str, ...] = (),
                      careful: bool = False) -> Iterator[list[dict[str, Any]]]:
        """Yield lists of {"key": instance key, **PairResult.row()}, in order, without the
        policy where it is the batch's own. Ends early with
        {"lost": message} after a fatal fault, or {"error": message, "key": key or None} when
        the worker raised anything else (key: the pair it was on; None: the problem itself)."""
        if self.lost:
            return  # the process is about to exit; the coordinator resends everything
        for module in modules:
            importlib.import_module(module)  # families registered outside the defaults
        import ray

        context = ray.get_runtime_context()
        current: list[Instance] = []

        def feed() -> Iterator[Instance]:
            for instance in instances:
                if context.is_canceled():
                    return  # ray.cancel: stop after the pair in hand
                current[:] = [instance]
                yield instance

        chunk: list[dict[str, Any]] = []
        sent, base = time.monotonic(), policy.model_dump()
        try:
            for instance, result in self.worker.measure_problem(problem, feed(), policy):
                row = {"key": instance.key, **result.row()}
                if row["policy"] == base:
                    del row["policy"]  # the batch's policy: the coordinator knows it
                chunk.append(row)
                if careful or time.monotonic() - sent >= CHUNK_S:
                    yield chunk
                    chunk, sent = [], time.monotonic()
        except DeviceLost as exc:
            self.lost = True
            threading.Timer(EXIT_GRACE_S, os._exit, (1,)).start()
            chunk.append({"lost": str(exc)})
        except Exception as exc:  # noqa: BLE001 - a worker bug must not lose the batch
            text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            chunk.append({"error": text, "key": current[0].key if current else None})
        if chunk:
            yield chunk
