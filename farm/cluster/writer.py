"""A run's database writes in a thread of their own: rows, counters, heartbeats and finished
problems are committed in order while the coordinator goes on measuring (the database driver
waits without holding the GIL). A write that fails (JobStopped: the job was cancelled or the
claims were taken over) drops the writes queued after it and is raised in the coordinator's
thread at its next call."""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, field
from typing import Any

from farm.store import Queries

QUEUED_WRITES = 4  # writes waiting at most (then the coordinator waits: back-pressure)


@dataclass(frozen=True)
class Write:
    rows: list[dict[str, Any]]
    done: int
    failed: int
    finished: dict[int, int] = field(default_factory=dict)
    held: frozenset[int] = frozenset()  # the problems the writer must still hold


class ResultWriter:
    def __init__(self, store: Queries, job_id: int, claimer: str) -> None:
        self.store, self.job_id, self.claimer = store, job_id, claimer
        self.queue: queue.Queue[Write | None] = queue.Queue(QUEUED_WRITES)
        self.error: BaseException | None = None
        self.job_done = False  # a write finished the job
        self.thread = threading.Thread(target=self._serve, name=f"writer-{job_id}", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        failed = False
        while (write := self.queue.get()) is not None:
            try:
                if not failed:
                    self._commit(write)
            except BaseException as exc:  # noqa: BLE001 - handed to the coordinator's thread
                self.error, failed = exc, True
            finally:
                self.queue.task_done()
        self.queue.task_done()

    def _commit(self, write: Write) -> None:
        if write.rows or write.finished:
            self.job_done |= self.store.record_results(
                self.job_id, self.claimer, write.rows, write.done, write.failed,
                finished=write.finished, held=write.held)
        else:
            self.store.heartbeat(self.job_id, self.claimer, held=write.held)

    def check(self) -> None:
        """Raise the error of a failed write (once; the writes after it are dropped)."""
        if self.error is not None:
            error, self.error = self.error, None
            raise error

    def submit(self, write: Write) -> None:
        self.check()
        self.queue.put(write)

    def wait(self) -> None:
        """Wait until every queued write is committed (or failed: raised)."""
        self.queue.join()
        self.check()

    def close(self) -> None:
        """Stop the thread after the queued writes."""
        self.queue.put(None)
        self.thread.join()
